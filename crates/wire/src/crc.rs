//! CRC32c (Castagnoli) as MPA uses it to protect each FPDU.
//!
//! Computed by the `crc-fast` crate, which picks the widest carry-less multiply the CPU
//! has at run time (AVX-512 VPCLMULQDQ here, SSE PCLMULQDQ or the crc32 instruction
//! elsewhere, a table without them). With CRC on, every payload octet is checksummed
//! once on each side beside the kernel's copy, so its speed bounds 1 MiB bandwidth:
//! measured here (`cargo bench -p softrnic-wire --bench codec -- crc32c`), 64 KiB at
//! ~37 GiB/s against ~11 GiB/s for the crc32 instruction alone (the `crc32c` crate),
//! and faster at 64 B and 1448 B as well.

use crc_fast::{CrcAlgorithm, Digest};

/// CRC32c of one buffer.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(data)
}

/// Below this many octets a continued CRC uses the crc32 instruction alone: `crc-fast`
/// continues from a given CRC only through its `Digest`, whose set-up (a copy of its
/// folding constants) costs about what the instruction needs for a few hundred octets.
const APPEND_FOLD_MIN: usize = 512;

/// Continues a CRC32c over more data (`crc32c_append(crc32c(a), b) == crc32c(a ++ b)`).
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    if data.len() < APPEND_FOLD_MIN {
        return crc32c::crc32c_append(crc, data);
    }
    // The reflected register before the final inversion is the complement of the CRC.
    let mut d = Digest::new_with_init_state(CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    d.update(data);
    d.finalize() as u32
}

/// CRC32c over gathered parts, as if they were one buffer.
pub fn crc32c_parts(parts: &[&[u8]]) -> u32 {
    parts.iter().fold(0, |crc, p| crc32c_append(crc, p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn check_value() {
        // The standard CRC-32C check value (RFC 3720 appendix B.4 uses the same polynomial).
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn parts_equal_whole() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let (a, b) = data.split_at(333);
        let (b, c) = b.split_at(1);
        assert_eq!(crc32c_parts(&[a, b, c]), crc32c(&data));
        assert_eq!(crc32c_parts(&[]), 0);
    }

    proptest! {
        /// The same values as an independent implementation (the crc32 instruction),
        /// whole and appended piece by piece, at lengths around the vector widths.
        #[test]
        fn equals_the_crc32_instruction(
            data in proptest::collection::vec(any::<u8>(), 0..5000),
            cut in 0usize..5000,
        ) {
            let cut = cut.min(data.len());
            let want = ::crc32c::crc32c(&data);
            prop_assert_eq!(crc32c(&data), want);
            prop_assert_eq!(crc32c_append(crc32c(&data[..cut]), &data[cut..]), want);
            prop_assert_eq!(crc32c_append(0, &data), want);
        }
    }

    #[test]
    fn large_buffers_equal_the_crc32_instruction() {
        let data: Vec<u8> = (0..(1usize << 20) + 13)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8)
            .collect();
        let want = ::crc32c::crc32c(&data);
        assert_eq!(crc32c(&data), want);
        let (a, b) = data.split_at(65000);
        assert_eq!(crc32c_append(crc32c(a), b), want);
    }
}
