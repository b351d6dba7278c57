//! The device's verbs for completion handlers: register one under an id (a completion
//! vector), remove it, move a CQ to another handler or detach it, list them. What a
//! handler is and how events reach it is `handler.rs`.

use crate::CqEvent;
use crate::cq::{Cq, CqShared};
use crate::device::{Device, Shared};
use crate::error::{Error, Result};
use crate::handler::{Handler, HandlerInfo, HandlerInner};
use std::sync::Arc;

impl Device {
    /// Registers `handler` as handler `id` (below
    /// [`crate::DeviceAttr::num_comp_vectors`]), replacing the one registered there.
    /// From now on the events of the CQs bound to `id` go to it, including those
    /// queued at the handler it replaces and those waiting in [`Cq::wait_notify`]; and
    /// the QPs receiving into those CQs are driven by the engine pinned to the
    /// handler's CPU, if the device has one there ([`crate::DeviceConfig::engine_cpus`]).
    ///
    /// A callback handler runs on a dispatcher thread pinned to its CPU (one per CPU,
    /// shared by the handlers there, higher priorities first). A CPU this process may
    /// not run on is an [`Error::InvalidArgument`].
    pub fn set_handler(&self, id: usize, handler: Handler) -> Result<()> {
        let d = &self.shared;
        let old = d.handlers.install(id, handler)?;
        if let Some(old) = old {
            give_back(&old);
        }
        for cq in d.live_cqs() {
            if cq.handler() == Some(id) {
                // Events left with the CQ's own waiters go to the handler now.
                cq.rebind(d, Some(id))?;
            }
        }
        follow_cpu(d, id)
    }

    /// Unregisters handler `id`. Its CQs stay bound to `id`: their events, queued ones
    /// included, go to [`Cq::wait_notify`] until a handler is registered there again.
    /// Removing an id with no handler does nothing.
    pub fn remove_handler(&self, id: usize) -> Result<()> {
        let d = &self.shared;
        if let Some(old) = d.handlers.remove(id)? {
            give_back(&old);
        }
        follow_cpu(d, id)
    }

    /// Moves `cq` to handler `to`, or with `None` detaches it (its events then go to
    /// [`Cq::wait_notify`]), at any time, under load too: each event is delivered once,
    /// either where the CQ was (taken from there before the move) or where it goes
    /// (every event still queued moves along; one raised during the move waits for it).
    /// The arm is kept. Moving to a handler whose CPU has an engine moves the CQ's QPs
    /// to that engine.
    pub fn modify_cq(&self, cq: &Cq, to: Option<usize>) -> Result<()> {
        let d = &self.shared;
        if !cq.shared.belongs_to(d) {
            return Err(Error::InvalidArgument("CQ of another device"));
        }
        if let Some(v) = to
            && v >= d.handlers.count()
        {
            return Err(Error::InvalidArgument(
                "handler id out of range (see num_comp_vectors)",
            ));
        }
        cq.shared.rebind(d, to)?;
        migrate(d, &cq.shared)
    }

    /// The registered handlers, by id.
    pub fn handlers(&self) -> Vec<HandlerInfo> {
        let d = &self.shared;
        let cqs = d.live_cqs();
        d.handlers
            .all()
            .iter()
            .map(|h| h.info(cqs.iter().filter(|c| c.handler() == Some(h.id)).count()))
            .collect()
    }
}

/// Takes every event still queued at a handler that was removed or replaced and
/// delivers it by its CQ's binding now.
fn give_back(old: &Arc<HandlerInner>) {
    for ev in old.take_where(|_| true) {
        let CqEvent { cq, raised_at } = ev;
        cq.shared.redeliver(vec![raised_at]);
    }
}

/// The QPs of the CQs on vector `id` go to the engine that vector maps to now.
fn follow_cpu(d: &Shared, id: usize) -> Result<()> {
    for cq in d.live_cqs() {
        if cq.vector() == id {
            migrate(d, &cq)?;
        }
    }
    Ok(())
}

/// Moves the QPs receiving into `cq` to the engine of its vector.
fn migrate(d: &Shared, cq: &Arc<CqShared>) -> Result<()> {
    let to = d.engine_for(cq.vector());
    for qp in cq.receiving_qps() {
        qp.move_to_engine(d, to)?;
    }
    Ok(())
}
