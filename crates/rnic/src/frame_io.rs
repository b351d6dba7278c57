//! Reading one MPA frame exactly, piece by piece, off a blocking or a non-blocking
//! stream: the fixed header first, then as much private data as it announces and not
//! an octet more, so no FPDU octet is ever read early.
//!
//! A peer that is not speaking MPA is caught at its first octets (the key is compared
//! as it arrives), and one that announces more private data than RFC 5044 allows at
//! the header: neither is waited for.

use crate::error::{Error, Result};
use softrnic_proto::cm::CmError;
use softrnic_wire::WireError;
use softrnic_wire::mpa::{FRAME_HEADER_LEN, MAX_PRIVATE_DATA, REP_KEY, REQ_KEY};
use std::io::{ErrorKind, Read};

/// One MPA frame being read.
#[derive(Debug, Default)]
pub(crate) struct FrameReader {
    buf: Vec<u8>,
    /// The stream ended before the frame did.
    eof: bool,
}

impl FrameReader {
    /// Octets the frame has in all, as far as known (the header until it is in).
    fn need(&self) -> usize {
        if self.buf.len() < FRAME_HEADER_LEN {
            return FRAME_HEADER_LEN;
        }
        FRAME_HEADER_LEN + usize::from(u16::from_be_bytes([self.buf[18], self.buf[19]]))
    }

    /// Octets read so far.
    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether the stream ended before the frame was whole (the peer closed).
    pub(crate) fn eof(&self) -> bool {
        self.eof
    }

    /// Reads what the frame still needs from `s`: `Ok(true)` once it is whole,
    /// `Ok(false)` when `s` has nothing more for now (a non-blocking stream would block,
    /// or a blocking one's read timeout passed). Fails on EOF, on a stream that does not
    /// begin with an MPA key (the octets read come back in [`Error::StreamNotMpa`]), on
    /// too much private data, and on I/O errors.
    pub(crate) fn read_from(&mut self, s: &mut impl Read) -> Result<bool> {
        loop {
            let need = self.need();
            if self.buf.len() >= FRAME_HEADER_LEN && self.buf.len() == need {
                return Ok(true);
            }
            let at = self.buf.len();
            self.buf.resize(need, 0);
            let r = s.read(&mut self.buf[at..]);
            let got = *r.as_ref().unwrap_or(&0);
            self.buf.truncate(at + got);
            match r {
                Ok(0) => {
                    self.eof = true;
                    return Err(if at == 0 {
                        Error::Io(ErrorKind::UnexpectedEof.into())
                    } else {
                        Error::StreamNotMpa {
                            octets: std::mem::take(&mut self.buf),
                        }
                    });
                }
                Ok(_) => self.check_key()?,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Ok(false);
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// A key that already differs from both MPA keys is not MPA.
    fn check_key(&mut self) -> Result<()> {
        let probe = self.buf.len().min(REQ_KEY.len());
        let key = &self.buf[..probe];
        if key != &REQ_KEY[..probe] && key != &REP_KEY[..probe] {
            return Err(Error::StreamNotMpa {
                octets: std::mem::take(&mut self.buf),
            });
        }
        if self.buf.len() >= FRAME_HEADER_LEN {
            let pd = self.need() - FRAME_HEADER_LEN;
            if pd > MAX_PRIVATE_DATA {
                return Err(too_long(pd));
            }
        }
        Ok(())
    }

    /// The whole frame (once [`FrameReader::read_from`] said so).
    pub(crate) fn frame(&self) -> &[u8] {
        &self.buf
    }
}

fn too_long(pd: usize) -> Error {
    Error::Mpa(CmError::Wire(WireError::PrivateDataTooLong(pd as u16)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out its octets in the given pieces, then "would block".
    struct Pieces(Vec<Vec<u8>>);

    impl Read for Pieces {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let Some(p) = self.0.first_mut() else {
                return Err(ErrorKind::WouldBlock.into());
            };
            let n = p.len().min(out.len());
            out[..n].copy_from_slice(&p[..n]);
            p.drain(..n);
            if p.is_empty() {
                self.0.remove(0);
            }
            Ok(n)
        }
    }

    fn request(pd: &[u8]) -> Vec<u8> {
        let mut f = REQ_KEY.to_vec();
        f.extend([0x40, 1]);
        f.extend((pd.len() as u16).to_be_bytes());
        f.extend_from_slice(pd);
        f
    }

    #[test]
    fn reads_exactly_one_frame_in_any_pieces() {
        let frame = request(b"private");
        let mut stream = frame.clone();
        stream.extend(b"FPDU octets that are not ours");
        for cut in 1..frame.len() {
            let mut s = Pieces(vec![stream[..cut].to_vec(), stream[cut..].to_vec()]);
            let mut r = FrameReader::default();
            assert!(r.read_from(&mut s).unwrap(), "cut at {cut}");
            assert_eq!(r.frame(), &frame[..]);
            assert_eq!(s.0.concat(), b"FPDU octets that are not ours");
        }
        // One octet at a time, with nothing between them: "more" until the last.
        let mut r = FrameReader::default();
        for (i, &b) in frame.iter().enumerate() {
            let done = r.read_from(&mut Pieces(vec![vec![b]])).unwrap();
            assert_eq!(done, i + 1 == frame.len(), "octet {i}");
            assert_eq!(r.len(), i + 1);
        }
    }

    #[test]
    fn refuses_what_is_not_mpa_at_once() {
        let mut r = FrameReader::default();
        let e = r
            .read_from(&mut Pieces(vec![b"GET / HTTP/1.1\r\n".to_vec()]))
            .unwrap_err();
        assert!(
            matches!(&e, Error::StreamNotMpa { octets } if octets == b"GET / HTTP/1.1\r\n"),
            "{e:?}"
        );
        let mut f = request(b"");
        f[18..20].copy_from_slice(&513u16.to_be_bytes());
        let e = FrameReader::default()
            .read_from(&mut Pieces(vec![f]))
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::Mpa(CmError::Wire(WireError::PrivateDataTooLong(513)))
            ),
            "{e:?}"
        );
        let e = FrameReader::default()
            .read_from(&mut &REQ_KEY[..5])
            .unwrap_err();
        assert!(
            matches!(&e, Error::StreamNotMpa { octets } if octets.len() == 5),
            "{e:?}"
        );
        let e = FrameReader::default().read_from(&mut &[][..]).unwrap_err();
        assert!(matches!(&e, Error::Io(io) if io.kind() == ErrorKind::UnexpectedEof));
    }
}
