//! The connection table: slots with generation-checked ids, the (local, remote)
//! index, the event queue entries, and the counters kept once a connection is freed.

use super::{ConnId, Entry, Queued, Readiness, Rx, Stack, Stage};
use crate::conn::{Connection, Stats};
use std::net::SocketAddrV4;

impl Stack {
    pub(super) fn enqueue(&mut self, id: ConnId) {
        if let Some(e) = self.entry_mut(id)
            && !e.queued
            && !e.pending.is_empty()
            && e.stage == Stage::User
        {
            e.queued = true;
            self.events.push_back(Queued::Conn(id));
        }
    }

    pub(super) fn entry(&self, id: ConnId) -> Option<&Entry> {
        self.slots
            .get(id.index as usize)?
            .as_ref()
            .filter(|e| e.id == id)
    }

    pub(super) fn entry_mut(&mut self, id: ConnId) -> Option<&mut Entry> {
        self.slots
            .get_mut(id.index as usize)?
            .as_mut()
            .filter(|e| e.id == id)
    }

    pub(super) fn insert(
        &mut self,
        conn: Connection,
        key: (SocketAddrV4, SocketAddrV4),
        rx: Rx,
        stage: Stage,
    ) -> ConnId {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.generations.push(0);
                (self.slots.len() - 1) as u32
            }
        };
        let i = index as usize;
        self.generations[i] = self.generations[i].wrapping_add(1);
        let id = ConnId {
            index,
            generation: self.generations[i],
        };
        self.by_tuple.insert(key, id);
        self.slots[i] = Some(Entry {
            id,
            key,
            conn,
            rx,
            stage,
            pending: Readiness::empty(),
            queued: false,
            peer_closed: false,
            fin_when_open: false,
            failed: None,
        });
        self.live += 1;
        id
    }

    /// Frees a slot.
    pub(super) fn remove(&mut self, id: ConnId) {
        let Some(slot) = self.slots.get_mut(id.index as usize) else {
            return;
        };
        let Some(e) = slot.take_if(|e| e.id == id) else {
            return;
        };
        if self.by_tuple.get(&e.key) == Some(&id) {
            self.by_tuple.remove(&e.key);
        }
        match e.stage {
            Stage::HalfOpen(l) | Stage::Ready(l) => {
                if let Some(lis) = self.listeners.get_mut(&l) {
                    lis.half_open.retain(|c| *c != id);
                    lis.ready.retain(|c| *c != id);
                }
            }
            Stage::User | Stage::Released => {}
        }
        add_stats(&mut self.retired, e.conn.stats());
        self.free.push(id.index);
        self.live -= 1;
        self.stats.reaped += 1;
    }
}

/// Adds `s` to `t`, every counter (the destructuring names each field, so that a
/// counter added to [`Stats`] cannot be left out of the totals).
pub(super) fn add_stats(t: &mut Stats, s: &Stats) {
    let Stats {
        segments_in,
        segments_out,
        bytes_in,
        bytes_out,
        retransmitted_segments,
        retransmitted_bytes,
        fast_retransmits,
        timeouts,
        handshake_timeouts,
        loss_probes,
        probe_recoveries,
        spurious_retransmits,
        reordered_segments,
        undone_reductions,
        spurious_timeouts,
        dsacks_out,
        sack_followup_acks,
        dup_acks_in,
        out_of_order_in,
        bytes_refused,
        dropped_checksum,
        dropped_malformed,
        dropped_unacceptable,
        challenge_acks,
        window_probes,
        keepalive_probes,
        resets_out,
        cwnd_limited_us,
        rwnd_limited_us,
        rwnd_hole_limited_us,
        sndbuf_limited_us,
        timing,
    } = s;
    t.segments_in += segments_in;
    t.segments_out += segments_out;
    t.bytes_in += bytes_in;
    t.bytes_out += bytes_out;
    t.retransmitted_segments += retransmitted_segments;
    t.retransmitted_bytes += retransmitted_bytes;
    t.fast_retransmits += fast_retransmits;
    t.timeouts += timeouts;
    t.handshake_timeouts += handshake_timeouts;
    t.loss_probes += loss_probes;
    t.probe_recoveries += probe_recoveries;
    t.spurious_retransmits += spurious_retransmits;
    t.reordered_segments += reordered_segments;
    t.undone_reductions += undone_reductions;
    t.spurious_timeouts += spurious_timeouts;
    t.dsacks_out += dsacks_out;
    t.sack_followup_acks += sack_followup_acks;
    t.dup_acks_in += dup_acks_in;
    t.out_of_order_in += out_of_order_in;
    t.bytes_refused += bytes_refused;
    t.dropped_checksum += dropped_checksum;
    t.dropped_malformed += dropped_malformed;
    t.dropped_unacceptable += dropped_unacceptable;
    t.challenge_acks += challenge_acks;
    t.window_probes += window_probes;
    t.keepalive_probes += keepalive_probes;
    t.resets_out += resets_out;
    t.cwnd_limited_us += cwnd_limited_us;
    t.rwnd_limited_us += rwnd_limited_us;
    t.rwnd_hole_limited_us += rwnd_hole_limited_us;
    t.sndbuf_limited_us += sndbuf_limited_us;
    t.timing.add(timing);
}
