//! Test-only chaos (cargo feature `chaos`, off by default): at the points where
//! completions and wake-ups cross threads, a thread may yield its CPU or spin a
//! while, so that interleavings a quiet run meets once in a thousand come often.
//! Without the feature [`point`] is an empty inline function: the product pays nothing.
//!
//! With the feature, `SOFTRNIC_CHAOS` sets how often a point acts (one time in N,
//! default 4; `0` turns it off), `SOFTRNIC_CHAOS_SLEEP` how often (one time in M, default
//! never) a point sleeps 1-12 ms instead, as a thread off its CPU under valgrind or
//! load does (long enough for a polling consumer's claim to lapse, `handoff::LEASE`),
//! and `SOFTRNIC_CHAOS_SEED` seeds the threads' choices.

/// A point where another thread's step may matter: perhaps yields or spins (`chaos`).
#[cfg(not(feature = "chaos"))]
#[inline(always)]
pub(crate) fn point() {}

#[cfg(feature = "chaos")]
pub(crate) fn point() {
    imp::point();
}

#[cfg(feature = "chaos")]
mod imp {
    use std::cell::Cell;
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// (one time in N, one time in M, seed), read once.
    static CONFIG: OnceLock<(u64, u64, u64)> = OnceLock::new();
    /// Hands each thread its own stream of choices.
    static THREADS: AtomicU64 = AtomicU64::new(1);

    thread_local! {
        static STATE: Cell<u64> = const { Cell::new(0) };
    }

    fn config() -> (u64, u64, u64) {
        *CONFIG.get_or_init(|| {
            let var = |name: &str, default: u64| {
                std::env::var(name)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(default)
            };
            (
                var("SOFTRNIC_CHAOS", 4),
                var("SOFTRNIC_CHAOS_SLEEP", 0),
                var("SOFTRNIC_CHAOS_SEED", 1),
            )
        })
    }

    /// xorshift64*: cheap and good enough to scatter yields.
    fn next(seed: u64) -> u64 {
        STATE.with(|s| {
            let mut x = s.get();
            if x == 0 {
                let t = THREADS.fetch_add(1, Ordering::Relaxed);
                x = (seed ^ t.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1;
            }
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            s.set(x);
            x.wrapping_mul(0x2545_F491_4F6C_DD1D)
        })
    }

    pub(super) fn point() {
        let (n, m, seed) = config();
        if n == 0 {
            return;
        }
        let r = next(seed);
        if m != 0 && (r >> 20).is_multiple_of(m) {
            std::thread::sleep(std::time::Duration::from_micros(1_000 + (r >> 44) % 11_000));
            return;
        }
        if !r.is_multiple_of(n) {
            return;
        }
        if (r >> 32) & 1 == 0 {
            std::thread::yield_now();
        } else {
            for _ in 0..(r >> 40) % 4096 {
                std::hint::spin_loop();
            }
        }
    }
}
