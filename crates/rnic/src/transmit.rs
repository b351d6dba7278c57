//! A QP's transmit path on a byte stream: take the FPDUs the protocol core wants sent,
//! gather small ones into the connection's transmit buffer (many per `send`), and send
//! each large one with one `sendmsg(2)` that gathers header, registered memory and
//! trailer without a copy.

use crate::buf_pool;
use crate::close::connection_lost;
use crate::device::Shared;
use crate::qp::{Conn, QpStats};
use crate::region::Region;
use crate::sys::socket::IoVecs;
use crate::transport::Transport;
use softrnic_proto::QpId;
use softrnic_proto::qp::{Qp as Core, TxFpdu};
use softrnic_wire::crc::{crc32c, crc32c_append};
use std::io;
use std::sync::Arc;

/// FPDUs at most this long (all framing included) are copied into the connection's
/// transmit buffer and go out together, many per `send`: small messages then cost a
/// copy of a few hundred octets instead of a system call each. Their work requests
/// complete once copied, as an inline send does on a hardware RNIC: the buffer may be
/// reused at once, and the octets are owned by the RNIC.
pub const TX_GATHER_MAX: usize = 16384;

/// Most octets a connection's transmit buffer holds for gathered FPDUs. The QP holds
/// the buffer only while gathered octets wait in it: it takes it from the driving
/// thread's pool (`buf_pool`) for the first small FPDU and gives it back once every
/// gathered octet is out, so an idle QP holds none.
pub(crate) const TX_BUF_LEN: usize = 64 * 1024;

/// An FPDU ready to go: its header, the regions that hold its payload (kept alive
/// until it is out), its trailer (pad and CRC), and how much of it is written.
struct PendingTx {
    fpdu: TxFpdu,
    regions: Vec<Arc<Region>>,
    trailer: [u8; 7],
    trailer_len: usize,
    written: usize,
    total: usize,
}

/// What a connection has queued for transmission but not yet handed to the stream.
#[derive(Default)]
pub(crate) struct TxQueue {
    /// A large FPDU, sent from registered memory.
    pending: Option<PendingTx>,
    /// Gathered small FPDUs (see [`TX_GATHER_MAX`]); `sent` octets of it are out. Empty
    /// and unallocated when nothing waits (see [`TX_BUF_LEN`]).
    buf: Vec<u8>,
    sent: usize,
    /// An FPDU header buffer, reused.
    scratch: TxFpdu,
}

impl TxQueue {
    /// Whether every queued octet is out.
    pub(crate) fn is_flushed(&self) -> bool {
        self.pending.is_none() && self.sent == self.buf.len()
    }

    /// Octets of buffer the QP holds now.
    pub(crate) fn held(&self) -> usize {
        self.buf.capacity()
    }

    /// Gives the gather buffer back to the pool once every gathered octet is out.
    fn release_if_sent(&mut self) {
        if self.sent == self.buf.len() && self.buf.capacity() > 0 {
            buf_pool::give_gather(std::mem::take(&mut self.buf));
            self.sent = 0;
        }
    }

    /// Makes room for `len` more gathered octets, if the buffer can take them: takes a
    /// buffer if the QP has none, and moves unsent octets to its start when the octets
    /// already sent are in the way, so the buffer never grows beyond [`TX_BUF_LEN`].
    fn room_for(&mut self, len: usize) -> bool {
        if self.buf.len() - self.sent + len > TX_BUF_LEN {
            return false;
        }
        if self.buf.capacity() == 0 {
            self.buf = buf_pool::take_gather();
        } else if self.sent == self.buf.len() {
            self.buf.clear();
            self.sent = 0;
        } else if self.buf.len() + len > TX_BUF_LEN {
            self.buf.drain(..self.sent);
            self.sent = 0;
        }
        true
    }
}

/// Sends what the core has to send until the stream would block or the core has no
/// more. Returns whether anything moved.
pub(crate) fn transmit(
    qp: QpId,
    core: &mut Core,
    conn: &mut Conn,
    stats: &mut QpStats,
    dev: &Shared,
) -> bool {
    if core.transport_closed() {
        return false;
    }
    let moved = transmit_stream(qp, core, conn, stats, dev);
    conn.tx.release_if_sent();
    moved
}

/// [`transmit`], with the gather buffer taken as it is needed.
fn transmit_stream(
    qp: QpId,
    core: &mut Core,
    conn: &mut Conn,
    stats: &mut QpStats,
    dev: &Shared,
) -> bool {
    let mut moved = false;
    loop {
        let tx = &mut conn.tx;
        // 1. The next FPDU: small ones are gathered, a large one waits its turn. The
        // core builds it in the reused scratch header (nothing allocated per FPDU).
        if tx.pending.is_none() {
            let mut has = core.poll_transmit(&mut tx.scratch);
            if !has {
                core.run_local_ops(&dev.tpt);
                has = core.poll_transmit(&mut tx.scratch);
            }
            if has {
                let total = tx.scratch.wire_len();
                if total <= TX_GATHER_MAX && tx.room_for(total) {
                    if !gather(&tx.scratch, &mut tx.buf, dev) {
                        // A region vanished under a queued request: the QP cannot
                        // continue sending correct data.
                        core.to_error();
                        break;
                    }
                    stats.tx_fpdus += 1;
                    core.transmit_done();
                    moved = true;
                    continue;
                }
                let Some(p) = prepare(std::mem::take(&mut tx.scratch), dev) else {
                    core.to_error();
                    break;
                };
                tx.pending = Some(p);
            }
        }
        // 2. Gathered octets go first: they were queued before the pending FPDU.
        if tx.sent < tx.buf.len() {
            stats.tx_syscalls += 1;
            match conn.transport.send(&tx.buf[tx.sent..]) {
                Ok(n) => {
                    tx.sent += n;
                    moved = true;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    connection_lost(qp, core, dev, e.kind());
                    moved = true;
                    break;
                }
            }
        }
        // 3. A large FPDU, gathered from registered memory by the kernel.
        let Some(p) = tx.pending.as_mut() else {
            break;
        };
        stats.tx_syscalls += 1;
        match send_pending(&mut *conn.transport, p) {
            Ok(n) => {
                p.written += n;
                moved = true;
                if p.written == p.total {
                    if let Some(p) = tx.pending.take() {
                        // Its header buffer is the scratch again.
                        tx.scratch = p.fpdu;
                    }
                    stats.tx_fpdus += 1;
                    core.transmit_done();
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                connection_lost(qp, core, dev, e.kind());
                moved = true;
                break;
            }
        }
    }
    moved
}

/// Resolves an FPDU's payload to live regions and computes its trailer; `None` if a
/// region no longer holds the payload's range.
fn prepare(fpdu: TxFpdu, dev: &Shared) -> Option<PendingTx> {
    let mut regions = Vec::with_capacity(fpdu.chunks.len());
    for c in &fpdu.chunks {
        let r = dev.region(c.region)?;
        r.check(c.offset as usize, c.len).ok()?;
        regions.push(r);
    }
    let mut crc = 0;
    if fpdu.crc {
        crc = crc32c(fpdu.header_bytes());
        for (c, r) in fpdu.chunks.iter().zip(&regions) {
            let s = r.io_slice(c.offset as usize, c.len).ok()?;
            // SAFETY: a bounds-checked view of live region memory, read only for the
            // CRC; the program may change these octets concurrently only by breaking
            // the rule not to touch a buffer while its send is outstanding, which can
            // at worst produce a wrong CRC (the peer then terminates), never UB here
            // beyond that documented race.
            crc = crc32c_append(crc, unsafe { s.as_slice() });
        }
        crc = crc32c_append(crc, &[0u8; 3][..fpdu.pad_len()]);
    }
    let (trailer, trailer_len) = fpdu.trailer(crc);
    let total = fpdu.wire_len();
    Some(PendingTx {
        fpdu,
        regions,
        trailer,
        trailer_len,
        written: 0,
        total,
    })
}

/// Appends a whole FPDU (header, payload copied from registered memory, pad and CRC)
/// to `out`; false if a region no longer holds the payload's range (`out` is then left
/// as it was). The regions are looked up without taking a reference: the payload is
/// copied at once. The CRC, when negotiated, is computed over the gathered octets.
fn gather(f: &TxFpdu, out: &mut Vec<u8>, dev: &Shared) -> bool {
    let start = out.len();
    out.extend_from_slice(f.header_bytes());
    for c in &f.chunks {
        let copied = dev.with_region(c.region, |r| {
            r.append_to(c.offset as usize, c.len, out).is_ok()
        });
        if copied != Some(true) {
            out.truncate(start);
            return false;
        }
    }
    let pad = f.pad_len();
    out.extend_from_slice(&[0u8; 3][..pad]);
    let crc = if f.crc { crc32c(&out[start..]) } else { 0 };
    let (trailer, trailer_len) = f.trailer(crc);
    out.extend_from_slice(&trailer[trailer_len - 4..trailer_len]);
    true
}

/// Writes as much of a pending FPDU as the stream takes.
fn send_pending(t: &mut dyn Transport, p: &PendingTx) -> io::Result<usize> {
    let mut iov: [libc::iovec; softrnic_proto::MAX_SGE + 3] = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; softrnic_proto::MAX_SGE + 3];
    let mut n = 0;
    let mut skip = p.written;
    let mut push = |ptr: *const u8, len: usize, n: &mut usize| {
        if skip >= len {
            skip -= len;
            return;
        }
        iov[*n] = libc::iovec {
            // SAFETY: `skip < len`, so the pointer stays inside the same buffer.
            iov_base: unsafe { ptr.add(skip) } as *mut libc::c_void,
            iov_len: len - skip,
        };
        skip = 0;
        *n += 1;
    };
    let header = p.fpdu.header_bytes();
    push(header.as_ptr(), header.len(), &mut n);
    for (c, r) in p.fpdu.chunks.iter().zip(&p.regions) {
        if let Ok(s) = r.io_slice(c.offset as usize, c.len) {
            push(s.as_ptr(), s.len(), &mut n);
        }
    }
    let pad = p.fpdu.pad_len();
    push(p.trailer.as_ptr(), p.trailer_len.min(pad + 4), &mut n);
    // SAFETY: every entry points into memory that stays alive and unmoved while `p` is
    // borrowed (the FPDU header and trailer are owned by `p`; region memory is kept
    // alive by the Arcs in `p.regions`), and the gather list lives no longer than that.
    let iov = unsafe { IoVecs::new(&iov[..n]) };
    t.send_gather(iov)
}
