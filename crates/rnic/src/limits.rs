//! Device-wide budgets: what all the objects of one device may hold together (CQ
//! entries, registered octets, MPA exchanges in progress), so that no peer and no
//! sequence of calls can make a device take more than its configuration allows. Each
//! object holds a [`Reservation`] for its share and gives it back when it is dropped;
//! a request beyond the budget is [`Error::Limit`], and nothing is allocated for it.

use crate::error::{Error, Result};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// One budget: `used` of `max` units.
#[derive(Debug)]
pub(crate) struct Budget {
    used: AtomicU64,
    max: u64,
    /// The limit's name, for the error ([`crate::DeviceConfig`]'s field).
    what: &'static str,
}

impl Budget {
    pub(crate) fn new(max: u64, what: &'static str) -> Arc<Budget> {
        Arc::new(Budget {
            used: AtomicU64::new(0),
            max,
            what,
        })
    }

    /// Takes `n` units, or fails with [`Error::Limit`] naming the limit.
    pub(crate) fn reserve(self: &Arc<Self>, n: u64) -> Result<Reservation> {
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(n).filter(|&u| u <= self.max)
            })
            .map_err(|_| Error::Limit(self.what))?;
        Ok(Reservation {
            budget: self.clone(),
            n,
        })
    }

    /// Units in use.
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }
}

/// Units of a [`Budget`] held until dropped.
#[derive(Debug)]
pub(crate) struct Reservation {
    budget: Arc<Budget>,
    n: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.n, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_add_up_to_the_limit_and_come_back() {
        let b = Budget::new(10, "max_things");
        let a = b.reserve(6).unwrap();
        let c = b.reserve(4).unwrap();
        assert_eq!(b.used(), 10);
        assert!(matches!(b.reserve(1), Err(Error::Limit("max_things"))));
        assert!(matches!(b.reserve(u64::MAX), Err(Error::Limit(_))));
        drop(a);
        assert_eq!(b.used(), 4);
        let _d = b.reserve(6).unwrap();
        drop(c);
        assert_eq!(b.used(), 6);
        assert!(b.reserve(0).is_ok());
    }
}
