//! The control connection of a `-R` run: perftest's small Sends, one at a time each way.

use super::*;

/// The control connection: a QP with a few receives posted, used for one message at a
/// time in each direction.
pub(super) struct Ctrl {
    /// Who sends first in an exchange.
    pub(super) side: Side,
    /// The QP.
    pub(super) qp: Qp,
    /// Its own CQ, so test traffic never mixes in.
    pub(super) cq: Cq,
    /// Source of our messages (one at a time).
    pub(super) send_buf: Mr,
    /// [`CTRL_SLOTS`] receive slots of [`CTRL_SLOT_LEN`] octets.
    pub(super) recv_buf: Mr,
    /// Messages received but not yet asked for.
    pub(super) arrived: VecDeque<Vec<u8>>,
    /// Messages sent and received so far (named when the peer falls silent).
    pub(super) counts: (u64, u64),
    /// The longest wait for the peer's first message ([`FIRST_MESSAGE_TIMEOUT`]).
    pub(super) first_message_timeout: Duration,
    /// The device, whose events say how the connection ended when it ends.
    pub(super) dev: Device,
    /// The PD (kept for the buffers' lifetime).
    pub(super) _pd: Pd,
}

impl Ctrl {
    /// A control QP with its receives posted, ready to connect or accept (a message may
    /// arrive right after the MPA exchange).
    pub(super) fn new(dev: &Device, side: Side) -> Result<Ctrl, String> {
        let pd = dev.alloc_pd();
        let cq = dev
            .create_cq(2 * CTRL_SLOTS + 4)
            .map_err(e2s("create CQ"))?;
        let qp = dev
            .create_qp(&pd, QpInit::new(&cq, 4, CTRL_SLOTS))
            .map_err(e2s("create QP"))?;
        let send_buf = pd
            .alloc_mr(CTRL_SLOT_LEN, Access::LOCAL_WRITE)
            .map_err(e2s("register buffer"))?;
        let recv_buf = pd
            .alloc_mr(CTRL_SLOT_LEN * CTRL_SLOTS, Access::LOCAL_WRITE)
            .map_err(e2s("register buffer"))?;
        let c = Ctrl {
            side,
            qp,
            cq,
            send_buf,
            recv_buf,
            arrived: VecDeque::new(),
            counts: (0, 0),
            first_message_timeout: FIRST_MESSAGE_TIMEOUT,
            dev: dev.clone(),
            _pd: pd,
        };
        for slot in 0..CTRL_SLOTS {
            c.repost(slot)?;
        }
        Ok(c)
    }

    /// Posts the receive of one slot (again, after its message was read).
    pub(super) fn repost(&self, slot: usize) -> Result<(), String> {
        self.qp
            .post_recv(RecvWr::new(
                slot as u64,
                self.recv_buf.sge(slot * CTRL_SLOT_LEN, CTRL_SLOT_LEN),
            ))
            .map_err(e2s("control post_recv"))
    }

    /// The next completion, sleeping on the CQ's notification between polls (the control
    /// path is not measured, and the peer may take seconds). Until the peer's first
    /// message has come, the wait is [`Ctrl::first_message_timeout`]: nothing the peer
    /// runs precedes its answer then.
    pub(super) fn next(&mut self) -> Result<Completion, String> {
        let silent = self.counts.1 == 0 && self.arrived.is_empty();
        let limit = if silent {
            self.first_message_timeout
        } else {
            CTRL_TIMEOUT
        };
        let deadline = Instant::now() + limit;
        loop {
            if let Some(c) = self.cq.poll_one() {
                return Ok(c);
            }
            self.cq.req_notify(false);
            if let Some(c) = self.cq.poll_one() {
                return Ok(c);
            }
            let now = Instant::now();
            if now >= deadline {
                let hint = if silent && self.counts.0 > 0 {
                    "; the peer answered nothing since the connection was established: \
                     a Linux siw responder loses an FPDU that lands while it moves its \
                     socket into RDMA mode (docs/INTEROP.md, first_fpdu_hold)"
                } else {
                    ""
                };
                return Err(format!(
                    "control connection: no message from the peer in {limit:?} ({}){hint}",
                    self.diag()
                ));
            }
            self.cq
                .wait_notify((deadline - now).min(Duration::from_millis(20)));
        }
    }

    /// Where the exchange stood, for errors: messages each way, the QP's state and its
    /// octets and system calls each way (a silent peer and a stuck receive look
    /// different here).
    pub(super) fn diag(&self) -> String {
        let st = self.qp.stats();
        format!(
            "{:?} side, {} messages sent, {} received, QP state {:?}, received {} octets in \
             {} reads, sent {} octets in {} FPDUs",
            self.side,
            self.counts.0,
            self.counts.1,
            self.qp.state(),
            st.rx_direct_bytes + st.rx_copied_bytes,
            st.rx_syscalls,
            st.tx_bytes,
            st.tx_fpdus
        )
    }

    /// How the control connection ended, once its work flushed: a Terminate (which side
    /// sent it, its layer/type/code), a transport failure (a reset), or a close.
    fn end_cause(&self) -> String {
        if let Some((cause, remote)) = self.qp.fatal_cause() {
            let who = if remote { "received from" } else { "sent to" };
            return format!("Terminate {who} the peer: {cause}");
        }
        // Looked at, not taken: the closing watch still wants the QP's events.
        let id = self.qp.id();
        let mut lost = None;
        self.dev.wait_event_matching(Duration::ZERO, |e| {
            if let AsyncEvent::ConnectionLost { qp, error } = e
                && *qp == id
            {
                lost = Some(*error);
            }
            false
        });
        match lost {
            Some(error) => format!("the connection was lost ({error:?})"),
            None => "the connection was closed (no Terminate, no reset)".to_string(),
        }
    }

    /// Takes one completion: queues a received message (and reposts its receive), or
    /// returns whether it was our Send's.
    pub(super) fn take(&mut self) -> Result<bool, String> {
        let c = self.next()?;
        if c.status != WcStatus::Success {
            return Err(format!(
                "control connection: {:?} completed with {:?}: {} ({})",
                c.opcode,
                c.status,
                self.end_cause(),
                self.diag()
            ));
        }
        match c.opcode {
            WcOpcode::Recv => {
                let slot = c.wr_id as usize;
                let len = (c.byte_len as usize).min(CTRL_SLOT_LEN);
                let mut b = vec![0u8; len];
                self.recv_buf
                    .read(slot * CTRL_SLOT_LEN, &mut b)
                    .map_err(e2s("control read"))?;
                self.arrived.push_back(b);
                self.counts.1 += 1;
                self.repost(slot)?;
                Ok(false)
            }
            _ => Ok(c.wr_id == CTRL_SEND_ID),
        }
    }

    /// Sends one message and waits for its completion (it is then in the send path, not
    /// necessarily delivered; the peer's answer is what proves arrival).
    pub(super) fn send(&mut self, msg: &[u8]) -> Result<(), String> {
        self.send_buf.write(0, msg).map_err(e2s("control write"))?;
        self.qp
            .post_send(SendWr::send(CTRL_SEND_ID, self.send_buf.sge(0, msg.len())))
            .map_err(e2s("control post_send"))?;
        self.counts.0 += 1;
        while !self.take()? {}
        Ok(())
    }

    /// The next message from the peer.
    pub(super) fn recv(&mut self) -> Result<Vec<u8>, String> {
        loop {
            if let Some(m) = self.arrived.pop_front() {
                return Ok(m);
            }
            self.take()?;
        }
    }

    /// One exchange: the client Sends first, the server answers. Returns the peer's
    /// message, which must have the length of ours (`what` names it in errors).
    pub(super) fn xchg(&mut self, mine: &[u8], what: &str) -> Result<Vec<u8>, String> {
        let theirs = match self.side {
            Side::Client => {
                self.send(mine)?;
                self.recv()?
            }
            Side::Server => {
                let t = self.recv()?;
                self.send(mine)?;
                t
            }
        };
        if theirs.len() != mine.len() {
            return Err(format!(
                "perftest exchange out of step: expected the {what} ({} octets), got {} octets",
                mine.len(),
                theirs.len()
            ));
        }
        Ok(theirs)
    }

    /// A barrier: an exchange of QP descriptions.
    pub(super) fn sync(&mut self, d: &Dest) -> Result<Dest, String> {
        let b = self.xchg(&d.encode(), "QP description")?;
        Dest::decode(&b).ok_or_else(|| "bad QP description".to_string())
    }
}
