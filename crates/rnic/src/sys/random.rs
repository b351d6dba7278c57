//! Unpredictable octets from the kernel (`getrandom(2)`), for STag consumer keys:
//! RFC 5042 (section 5.1) asks for STags that a peer cannot guess from the ones it has
//! seen.

use std::io;

/// Fills `buf` with octets from the kernel's random source. Blocks only until the
/// kernel's pool is initialised (early boot), never afterwards.
pub(crate) fn fill(buf: &mut [u8]) -> io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        let rest = &mut buf[at..];
        // SAFETY: the pointer and length describe `rest`, a live, exclusively borrowed
        // slice of initialised octets; the kernel writes at most `rest.len()` octets
        // into it and keeps no reference after the call.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        at += n as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_every_octet_and_differs_between_calls() {
        // 64 octets that are all zero, or two equal draws, happen with probability
        // 2^-512: a failure means the call wrote nothing.
        let (mut a, mut b) = ([0u8; 64], [0u8; 64]);
        fill(&mut a).unwrap();
        fill(&mut b).unwrap();
        assert_ne!(a, [0u8; 64]);
        assert_ne!(a, b);
        fill(&mut []).unwrap();
    }
}
