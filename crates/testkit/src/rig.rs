//! The siw rig (a QEMU guest with Linux siw, `../shared/rig`) as every test that
//! boots a guest needs it: where its state lives, and the machine's one-guest lock.

use std::path::PathBuf;

/// Where the rig keeps its artifacts and its guests' state (`RIG_DIR`, as the
/// scripts read it).
pub fn dir() -> PathBuf {
    std::env::var_os("RIG_DIR").map_or_else(|| PathBuf::from("/tmp/rig"), PathBuf::from)
}

/// Whether `SOFTRNIC_RIG=skip` asks rig tests to skip on purpose.
pub fn skipped_on_purpose() -> bool {
    std::env::var("SOFTRNIC_RIG").as_deref() == Ok("skip")
}

/// Takes the machine's one-guest-at-a-time lock: an exclusive lock on `guest.lock`
/// in the rig's directory, held until the file closes. Guest names, and their state
/// under `$RIG_DIR/run`, are shared by every process: two test runs at once (two
/// worktrees, or a run beside CI) would otherwise boot, stop and read each other's
/// guests. Guests under software emulation on two CPUs are slow enough alone, too.
pub fn lock_guest() -> std::fs::File {
    let dir = dir();
    std::fs::create_dir_all(&dir).expect("the rig's directory");
    let path = dir.join("guest.lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    f.lock()
        .unwrap_or_else(|e| panic!("locking {}: {e}", path.display()));
    f
}
