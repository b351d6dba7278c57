//! The two kernel services the QP's lock (`qp_lock.rs`) sleeps and wakes with: a futex
//! on the lock's word, and `membarrier(2)`, the heavy side of an asymmetric fence (a
//! waiter pays a system call so that the holder's release can be a plain store).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};

/// `membarrier(2)` commands (linux/membarrier.h); libc does not name them.
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

/// Sleeps while `word` holds `expected` (or until woken, or spuriously). The check and
/// the sleep are one step for [`wake_one`]: a wake after a change of the word is
/// never missed.
pub(crate) fn wait(word: &AtomicU32, expected: u32) {
    // SAFETY: FUTEX_WAIT reads the aligned u32 behind `word`, which lives for the
    // call; the timeout pointer is null (no timeout) and the other arguments unused.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            std::ptr::null::<libc::timespec>(),
        );
    }
}

/// Wakes one thread sleeping in [`wait`] on `word`, if any.
pub(crate) fn wake_one(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE only uses the address of `word` as a key; it reads and writes
    // no memory of ours.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        );
    }
}

/// Whether this process may use [`heavy_barrier`]: registered once, on first use.
/// A kernel without expedited private membarrier (before 4.14, or filtered by a
/// seccomp policy) answers no, and the lock then releases with a read-modify-write.
/// After the first call, one relaxed load (every release of a QP's lock asks).
#[inline]
pub(crate) fn asymmetric_fences() -> bool {
    match FENCES.load(Ordering::Relaxed) {
        YES => true,
        NO => false,
        _ => register(),
    }
}

const UNKNOWN: u8 = 0;
const YES: u8 = 1;
const NO: u8 = 2;
static FENCES: AtomicU8 = AtomicU8::new(UNKNOWN);

#[cold]
fn register() -> bool {
    static ONCE: OnceLock<bool> = OnceLock::new();
    let yes = *ONCE.get_or_init(|| {
        // SAFETY: membarrier takes a command, flags and a CPU id, and touches no memory.
        let r = unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
                0,
                0,
            )
        };
        r == 0
    });
    FENCES.store(if yes { YES } else { NO }, Ordering::Relaxed);
    yes
}

/// Makes every thread of the process that is running now pass a full memory barrier
/// before this returns (the others pass one when they are scheduled): what a thread
/// stored before its light barrier (a compiler fence) is visible here afterwards, or
/// it reads, after that fence, what this thread stored before the call. Only after
/// [`asymmetric_fences`] said yes.
pub(crate) fn heavy_barrier() {
    // SAFETY: as in `asymmetric_fences`; registered, so the command is allowed.
    let r = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) };
    // Registered commands do not fail; if one did, the ordering would be lost, and a
    // lost wake-up is worse than a crash.
    assert_eq!(r, 0, "membarrier failed after registration");
}
