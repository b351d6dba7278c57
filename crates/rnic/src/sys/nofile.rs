//! The open-files limit (`RLIMIT_NOFILE`): every connected QP holds a socket, so a
//! program with thousands of connections needs more descriptors than the usual soft
//! limit of 1024.

use std::io;

/// The limit on open file descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NofileLimit {
    /// The limit in force.
    pub soft: u64,
    /// What the soft limit may be raised to without privilege.
    pub hard: u64,
}

/// The limit now.
pub fn get() -> io::Result<NofileLimit> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid, correctly typed out-buffer for this resource.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(NofileLimit {
        soft: r.rlim_cur,
        hard: r.rlim_max,
    })
}

fn set(l: NofileLimit) -> io::Result<()> {
    let r = libc::rlimit {
        rlim_cur: l.soft,
        rlim_max: l.hard,
    };
    // SAFETY: `r` is a valid rlimit read by the call; nothing is retained.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Raises the soft limit to the hard limit, and, if that is below `want`, tries to
/// raise both to `want` (which only a privileged process may: the error is then
/// ignored). Returns the limit in force afterwards; compare its `soft` with `want`.
pub fn raise(want: u64) -> io::Result<NofileLimit> {
    let now = get()?;
    if now.soft < now.hard {
        set(NofileLimit {
            soft: now.hard,
            hard: now.hard,
        })?;
    }
    if now.hard < want {
        // Beyond the hard limit: privileged only (and at most fs.nr_open).
        let _ = set(NofileLimit {
            soft: want,
            hard: want,
        });
    }
    get()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_reaches_at_least_the_hard_limit_and_never_lowers_it() {
        let before = get().unwrap();
        assert!(before.soft <= before.hard);
        let after = raise(before.soft).unwrap();
        assert_eq!(after.soft, before.hard, "soft raised to hard");
        assert_eq!(after.hard, before.hard, "hard unchanged when not needed");
        // Asking for more than the hard limit either succeeds (privileged) or leaves
        // the limit as it was.
        let more = raise(after.hard + 1).unwrap();
        assert!(
            more == after || (more.soft == after.hard + 1 && more.hard == after.hard + 1),
            "{more:?}"
        );
        // Restore what the other tests of this process had.
        if more != after {
            set(after).unwrap();
        }
    }
}
