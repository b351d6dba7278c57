//! CRC32c (Castagnoli) as MPA uses it to protect each FPDU.
//!
//! With CRC on, every payload octet is checksummed once on each side beside the kernel's
//! copy, so the CRC's speed bounds 1 MiB bandwidth. Two crates compute it, and which is
//! faster depends on the CPU, so the choice is made once, at run time
//! ([`implementation`]):
//! - `crc-fast` where it has a wide path: x86_64 with AVX-512 (VL), where it folds with
//!   512-bit carry-less multiplies (measured on a Xeon, `cargo bench -p softrnic-wire
//!   --bench codec -- crc32c`: 64 KiB at ~37 GiB/s against ~11 GiB/s for the crc32
//!   instruction alone), and every CPU other than x86_64 (its PMULL paths on aarch64).
//! - the `crc32c` crate (the crc32 instruction, three streams interleaved) on x86_64
//!   without AVX-512: there `crc-fast` falls back to a 128-bit PCLMULQDQ fusion that
//!   measured 1.13-1.3x slower than the crc32 instruction on an AMD EPYC (Zen 3, AVX2
//!   and VPCLMULQDQ but no AVX-512): 1 MiB 80.8 against 65.5 us per MiB, 64 KiB 85.9
//!   against 68.2, 1448 octets 141.5 against 105.3 (docs/ARCHITECTURE.md, session 19).
//!
//! `SOFTRNIC_CRC=crc-fast|crc32` in the environment overrides the choice.

use crc_fast::{CrcAlgorithm, Digest};
use std::sync::atomic::{AtomicU8, Ordering};

/// Which crate computes CRC32c in this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrcImpl {
    /// `crc-fast`: carry-less multiply folding (AVX-512 on x86_64, PMULL on aarch64).
    CrcFast,
    /// The `crc32c` crate: the CPU's crc32 instruction.
    Crc32Instruction,
}

impl CrcImpl {
    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            CrcImpl::CrcFast => "crc-fast",
            CrcImpl::Crc32Instruction => "crc32c (crc32 instruction)",
        }
    }
}

/// The choice, once made: 0 not yet, 1 `crc-fast`, 2 the crc32 instruction.
static CHOSEN: AtomicU8 = AtomicU8::new(0);

/// The implementation this CPU gets (see the module's documentation for the rule).
#[inline]
pub fn implementation() -> CrcImpl {
    match CHOSEN.load(Ordering::Relaxed) {
        1 => CrcImpl::CrcFast,
        2 => CrcImpl::Crc32Instruction,
        _ => choose(),
    }
}

/// Overrides the choice for the whole process: `crc-fast` or `crc32`, to compare the
/// two on one CPU with one binary. Any other value is ignored.
pub const OVERRIDE_ENV: &str = "SOFTRNIC_CRC";

#[cold]
fn choose() -> CrcImpl {
    let pick = match std::env::var(OVERRIDE_ENV).as_deref() {
        Ok("crc-fast") => CrcImpl::CrcFast,
        Ok("crc32") => CrcImpl::Crc32Instruction,
        _ => best_for_this_cpu(),
    };
    // Any thread computes the same answer, so a race only stores it twice.
    CHOSEN.store(
        match pick {
            CrcImpl::CrcFast => 1,
            CrcImpl::Crc32Instruction => 2,
        },
        Ordering::Relaxed,
    );
    pick
}

#[cfg(target_arch = "x86_64")]
fn best_for_this_cpu() -> CrcImpl {
    if std::arch::is_x86_feature_detected!("avx512vl")
        || !std::arch::is_x86_feature_detected!("sse4.2")
    {
        // AVX-512: crc-fast's wide folding. No SSE4.2: neither has hardware help, and
        // crc-fast's tables are the better software.
        CrcImpl::CrcFast
    } else {
        CrcImpl::Crc32Instruction
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn best_for_this_cpu() -> CrcImpl {
    CrcImpl::CrcFast
}

/// CRC32c of one buffer.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c_with(implementation(), data)
}

/// Below this many octets a continued CRC uses the crc32 instruction alone: `crc-fast`
/// continues from a given CRC only through its `Digest`, whose set-up (a copy of its
/// folding constants) costs about what the instruction needs for a few hundred octets.
const APPEND_FOLD_MIN: usize = 512;

/// Continues a CRC32c over more data (`crc32c_append(crc32c(a), b) == crc32c(a ++ b)`).
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    crc32c_append_with(implementation(), crc, data)
}

/// [`crc32c`] by the given implementation, whatever the CPU (tests, benchmarks).
#[inline]
pub fn crc32c_with(imp: CrcImpl, data: &[u8]) -> u32 {
    match imp {
        CrcImpl::CrcFast => crc_fast::crc32_iscsi(data),
        CrcImpl::Crc32Instruction => crc32c::crc32c(data),
    }
}

/// [`crc32c_append`] by the given implementation, whatever the CPU.
#[inline]
pub fn crc32c_append_with(imp: CrcImpl, crc: u32, data: &[u8]) -> u32 {
    if data.len() < APPEND_FOLD_MIN || imp == CrcImpl::Crc32Instruction {
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
            // crc-fast, whichever this CPU uses: its own value, and continued from the
            // other implementation's and the other way round.
            let fast = CrcImpl::CrcFast;
            prop_assert_eq!(crc32c_with(fast, &data), want);
            prop_assert_eq!(crc32c_append_with(fast, crc32c(&data[..cut]), &data[cut..]), want);
            prop_assert_eq!(crc32c_append(crc32c_with(fast, &data[..cut]), &data[cut..]), want);
        }
    }

    #[test]
    fn large_buffers_equal_the_crc32_instruction() {
        let data: Vec<u8> = (0..(1usize << 20) + 13)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8)
            .collect();
        let want = ::crc32c::crc32c(&data);
        let (a, b) = data.split_at(65000);
        for imp in [CrcImpl::CrcFast, CrcImpl::Crc32Instruction] {
            assert_eq!(crc32c_with(imp, &data), want, "{imp:?}");
            assert_eq!(
                crc32c_append_with(imp, crc32c_with(imp, a), b),
                want,
                "{imp:?}"
            );
        }
        assert_eq!(crc32c(&data), want);
        assert_eq!(crc32c_append(crc32c(a), b), want);
    }

    /// The rule of the module's documentation: crc-fast where it has AVX-512 (or no
    /// SSE4.2 helps the other), the crc32 instruction on other x86_64 CPUs; the choice
    /// is stable once made.
    #[test]
    fn the_choice_follows_the_cpu() {
        if std::env::var_os(OVERRIDE_ENV).is_some() {
            eprintln!("{OVERRIDE_ENV} is set: the CPU's rule is not what this process uses");
            return;
        }
        let got = implementation();
        #[cfg(target_arch = "x86_64")]
        {
            let wide = std::arch::is_x86_feature_detected!("avx512vl")
                || !std::arch::is_x86_feature_detected!("sse4.2");
            let want = if wide {
                CrcImpl::CrcFast
            } else {
                CrcImpl::Crc32Instruction
            };
            assert_eq!(got, want);
        }
        #[cfg(not(target_arch = "x86_64"))]
        assert_eq!(got, CrcImpl::CrcFast);
        assert_eq!(implementation(), got);
        assert!(!got.name().is_empty());
    }
}
