//! Writes what crosses the simulated wire as a pcap file (link type IPv4, virtual time
//! as timestamps), so that tshark and Wireshark read a simulated run.

use pcap_file::DataLink;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use std::io::{self, Write};
use std::time::Duration;

/// A pcap file being written.
pub struct PcapSink {
    writer: PcapWriter<Box<dyn Write + Send>>,
    /// The first write error, kept until [`PcapSink::finish`].
    error: Option<io::Error>,
}

fn io_error(e: pcap_file::PcapError) -> io::Error {
    io::Error::other(e.to_string())
}

impl PcapSink {
    pub fn new(out: Box<dyn Write + Send>) -> io::Result<PcapSink> {
        let header = PcapHeader {
            datalink: DataLink::IPV4,
            ..PcapHeader::default()
        };
        let writer = PcapWriter::with_header(out, header).map_err(io_error)?;
        Ok(PcapSink {
            writer,
            error: None,
        })
    }

    pub fn write(&mut self, at: Duration, packet: &[u8]) {
        if self.error.is_some() {
            return;
        }
        let p = PcapPacket::new(at, packet.len() as u32, packet);
        if let Err(e) = self.writer.write_packet(&p) {
            self.error = Some(io_error(e));
        }
    }

    /// Flushes the file; reports the first error of the whole capture.
    pub fn finish(self) -> io::Result<()> {
        if let Some(e) = self.error {
            return Err(e);
        }
        self.writer.into_writer().flush()
    }
}

impl std::fmt::Debug for PcapSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PcapSink").finish_non_exhaustive()
    }
}
