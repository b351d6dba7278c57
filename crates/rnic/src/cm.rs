//! The connection manager: connect, accept and reject with private data, and conversion
//! of an existing TCP stream into RDMA mode. Listening is in `listener.rs`.
//!
//! An initiator's MPA exchange runs on a blocking socket in the caller's thread, with
//! one deadline for all of it ([`crate::DeviceConfig::connect_timeout`]), not one per
//! read; then the socket turns non-blocking and goes to the QP's engine. MPA frames
//! are read exactly (header, then private data), so no FPDU octet is ever read early
//! and nothing is copied out of order.
//!
//! **Stream conversion**: an application may exchange its own octets on a `TcpStream`
//! and then convert it. Both sides must stop streaming at an agreed point: from then on
//! the active side's next octets are the MPA Request, and the passive side's the Reply.
//! If the passive side finds anything else (streaming octets still in flight), the
//! conversion fails with [`crate::Error::StreamNotMpa`] carrying every octet it read, so
//! nothing is lost and nothing is mixed into the RDMA stream; after a successful
//! conversion, the stream carries FPDUs only.

use crate::device::{Device, ExchangeSlot};
use crate::error::{Error, Result};
use crate::frame_io::FrameReader;
use crate::qp::Qp;
use crate::trace;
use crate::transport::pcap::ConnRecorder;
use crate::transport::socket::KernelStream;
use crate::transport::stream::{ConnStream, ReadBy};
use softrnic_proto::cm::{
    CmError, ConnectRequest, Initiator, InitiatorProgress, MpaConfig, Negotiated, Responder,
    ResponderProgress,
};
use softrnic_proto::qp::{QpParams, RtrKind};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Instant;

/// An established connection.
#[derive(Debug, Clone)]
pub struct Connection {
    /// What the MPA exchange settled (CRC, IRD/ORD, RTR).
    pub negotiated: Negotiated,
    /// The peer's address.
    pub peer_addr: SocketAddr,
}

impl Connection {
    /// The private data the peer sent in its MPA frame.
    pub fn peer_private_data(&self) -> &[u8] {
        &self.negotiated.peer_private_data
    }
}

/// An incoming connection request, waiting for accept or reject.
#[derive(Debug)]
pub struct ConnRequest {
    dev: Device,
    stream: Box<dyn ConnStream>,
    request: ConnectRequest,
    responder: Responder,
    peer_addr: SocketAddr,
    /// The recording of the connection, when the device records to a pcap file.
    rec: Option<ConnRecorder>,
}

/// FPDU size between loopback peers: within one loopback TCP segment (65483 octets of
/// payload) with room to spare. Measured here: write_bw at 1 MiB ~1.5x the 32 KiB MSS
/// default; the largest possible FPDU (65544 octets) spills into a second segment and
/// does worse.
const LOOPBACK_FPDU: usize = 65000;

/// Reads one MPA frame from a stream, all of it by `deadline`: each read waits at
/// most for what is left of the time, so a peer that trickles octets gets no more time
/// than one that sends nothing.
fn read_frame(s: &mut dyn ConnStream, deadline: Instant) -> Result<Vec<u8>> {
    let mut r = FrameReader::default();
    let mut timed = ReadBy {
        stream: s,
        deadline,
    };
    loop {
        if r.read_from(&mut timed)? {
            return Ok(r.frame().to_vec());
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout);
        }
    }
}

/// Records into a connection's recording, if it has one.
fn record(rec: &mut Option<ConnRecorder>, f: impl FnOnce(&mut ConnRecorder)) {
    if let Some(r) = rec.as_mut() {
        f(r);
    }
}

impl Device {
    /// Starts recording a connection, when the device records to a pcap file: from
    /// here on, the MPA exchange and then the QP's stream go into the file.
    fn recorder(&self, s: &dyn ConnStream, active: bool) -> Option<ConnRecorder> {
        let sink = self.shared.pcap.as_ref()?;
        Some(ConnRecorder::start(
            sink,
            s.local_addr().ok()?,
            s.peer_addr().ok()?,
            active,
        ))
    }

    fn qp_params(&self, s: &dyn ConnStream, n: &Negotiated) -> Result<QpParams> {
        let kind = |k: softrnic_proto::cm::RtrType| match k {
            softrnic_proto::cm::RtrType::Send => RtrKind::Send,
            softrnic_proto::cm::RtrType::Write => RtrKind::Write,
            softrnic_proto::cm::RtrType::Read => RtrKind::Read,
        };
        // RFC 5044 sizes FPDUs to the TCP MSS so that each segment that crosses a
        // network carries whole FPDUs. Over loopback no segment crosses anything (the
        // kernel hands over up to 64 KiB at a time), and FPDUs of the MSS (32 KiB
        // there) only double the per-FPDU work.
        let loopback = s.peer_addr().is_ok_and(|a| a.ip().is_loopback());
        let max_fpdu = self
            .shared
            .cfg
            .max_fpdu
            .or_else(|| loopback.then_some(LOOPBACK_FPDU))
            .or_else(|| s.mss())
            .unwrap_or(1448)
            .clamp(64, softrnic_wire::mpa::MAX_FPDU_LEN);
        Ok(QpParams {
            crc: n.crc,
            ird: n.ird,
            ord: n.ord,
            max_fpdu,
            markers_tx: n.markers_tx,
            markers_rx: n.markers_rx,
            send_rtr: n.rtr.filter(|r| r.we_send).map(|r| kind(r.kind)),
            await_rtr: n.rtr.is_some_and(|r| !r.we_send),
            close_timeout: self.shared.cfg.close_timeout,
        })
    }

    fn check_qp(&self, qp: &Qp) -> Result<()> {
        let same = qp.shared_dev_is(&self.shared);
        if !same {
            return Err(Error::InvalidArgument("QP of another device"));
        }
        if qp.state() != softrnic_proto::QpState::Idle {
            return Err(Error::BadState("QP must be Idle to connect"));
        }
        Ok(())
    }

    /// Connects `qp` to a listening peer with the device's MPA settings.
    pub fn connect(
        &self,
        addr: impl ToSocketAddrs,
        qp: &Qp,
        private_data: &[u8],
    ) -> Result<Connection> {
        let mut cfg = self.shared.cfg.mpa.clone();
        cfg.private_data = private_data.to_vec();
        self.connect_with(addr, qp, cfg)
    }

    /// Connects with explicit MPA settings.
    pub fn connect_with(
        &self,
        addr: impl ToSocketAddrs,
        qp: &Qp,
        cfg: MpaConfig,
    ) -> Result<Connection> {
        self.check_qp(qp)?;
        // A bad configuration is the caller's error, whether or not a peer listens.
        cfg.validate()?;
        let addr = addr
            .to_socket_addrs()?
            .next()
            .ok_or(Error::InvalidArgument("no address"))?;
        let deadline = Instant::now() + self.shared.cfg.connect_timeout;
        let slot = self.slot()?;
        let s: Box<dyn ConnStream> = match (&self.shared.user, addr) {
            (Some(user), SocketAddr::V4(v4)) => Box::new(user.stack.connect(v4, deadline)?),
            (Some(_), SocketAddr::V6(_)) => {
                return Err(Error::InvalidArgument(
                    "the device's own TCP speaks IPv4 only",
                ));
            }
            (None, _) => {
                let s = crate::same_host::connect(
                    addr,
                    self.shared.cfg.connect_timeout,
                    self.shared.cfg.same_host_tcp,
                )?;
                Box::new(KernelStream::new(s)?)
            }
        };
        self.initiate(s, qp, cfg, deadline, slot)
            .inspect_err(|e| trace::mpa_failed(self.shared.serial, e))
    }

    /// A slot for one more MPA exchange ([`crate::DeviceConfig::max_mpa_exchanges`]).
    fn slot(&self) -> Result<ExchangeSlot> {
        self.shared.exchange_slot().ok_or(Error::Limit(
            "MPA exchanges in progress (max_mpa_exchanges)",
        ))
    }

    /// Converts a connected stream into RDMA mode as the MPA initiator: the next octets
    /// this side sends are the MPA Request. The peer's Reply must arrive within
    /// [`crate::DeviceConfig::connect_timeout`].
    pub fn convert_active(&self, s: TcpStream, qp: &Qp, cfg: MpaConfig) -> Result<Connection> {
        self.check_qp(qp)?;
        let deadline = Instant::now() + self.shared.cfg.connect_timeout;
        let slot = self.slot()?;
        self.initiate(Box::new(KernelStream::new(s)?), qp, cfg, deadline, slot)
            .inspect_err(|e| trace::mpa_failed(self.shared.serial, e))
    }

    fn initiate(
        &self,
        mut s: Box<dyn ConnStream>,
        qp: &Qp,
        cfg: MpaConfig,
        deadline: Instant,
        _slot: ExchangeSlot,
    ) -> Result<Connection> {
        let mut init = Initiator::new(cfg)?;
        let peer_addr = s.peer_addr()?;
        let mut rec = self.recorder(&*s, true);
        let request = init.request();
        // The Request fits any send buffer, but a peer that never reads must not hold
        // us past the deadline either.
        s.write_all_by(&request, deadline)?;
        let sent_at = Instant::now();
        record(&mut rec, |r| r.sent(&request));
        let serial = self.shared.serial;
        trace::mpa_request_sent(serial, qp.id(), peer_addr, init.config());
        let frame = read_frame(&mut *s, deadline)?;
        let rtt = sent_at.elapsed();
        record(&mut rec, |r| r.received(&frame));
        match init.handle_input(&frame)? {
            InitiatorProgress::Established {
                negotiated,
                consumed,
            } => {
                let params = self.qp_params(&*s, &negotiated)?;
                // The peer may still be taking its socket into RDMA mode (see
                // `DeviceConfig::first_fpdu_hold`): nothing is sent until the hold is
                // over, and the QP is not ours to post on before `connect` returns.
                let hold = self.shared.cfg.first_fpdu_hold.after(rtt);
                trace::first_fpdu_hold(serial, qp.id(), peer_addr, rtt, hold);
                if !hold.is_zero() {
                    std::thread::sleep(hold);
                }
                trace::mpa_established(serial, qp.id(), peer_addr, &negotiated, false);
                qp.shared
                    .attach(&self.shared, s, params, &frame[consumed..], rec)?;
                Ok(Connection {
                    negotiated,
                    peer_addr,
                })
            }
            InitiatorProgress::Rejected { private_data, .. } => {
                Err(Error::Rejected { private_data })
            }
            InitiatorProgress::NeedMore => Err(Error::Mpa(CmError::UnexpectedFrame)),
        }
    }

    /// Converts a connected stream into RDMA mode as the MPA responder: the next octets
    /// the peer sends must be its MPA Request, all of it within
    /// [`crate::DeviceConfig::mpa_request_timeout`].
    pub fn convert_passive(&self, s: TcpStream) -> Result<ConnRequest> {
        let deadline = Instant::now() + self.shared.cfg.mpa_request_timeout;
        let r = self.slot().and_then(|_slot| {
            let mut s: Box<dyn ConnStream> = Box::new(KernelStream::new(s)?);
            let frame = read_frame(&mut *s, deadline)?;
            self.request_arrived(s, &frame)
        });
        r.inspect_err(|e| trace::mpa_failed(self.shared.serial, e))
    }

    /// A whole MPA frame arrived on `s` where a Request belongs: the request for the
    /// application to accept or reject, or why it cannot be one.
    pub(crate) fn request_arrived(
        &self,
        s: Box<dyn ConnStream>,
        frame: &[u8],
    ) -> Result<ConnRequest> {
        let mut responder = Responder::new();
        let mut rec = self.recorder(&*s, false);
        record(&mut rec, |r| r.received(frame));
        let request = match responder.handle_input(frame) {
            Ok(ResponderProgress::Request { request, .. }) => Ok(request),
            Ok(ResponderProgress::NeedMore) => Err(Error::Mpa(CmError::UnexpectedFrame)),
            Err(e) => Err(Error::from(e)),
        };
        // Not a Request we can answer: reset, so nothing of it lingers.
        let request = match request {
            Ok(r) => r,
            Err(e) => {
                s.reset();
                return Err(e);
            }
        };
        let peer_addr = s.peer_addr()?;
        trace::mpa_request_received(self.shared.serial, peer_addr, &request);
        Ok(ConnRequest {
            rec,
            dev: self.clone(),
            peer_addr,
            stream: s,
            request,
            responder,
        })
    }
}

impl ConnRequest {
    /// Until when the Reply may take to write: it fits any send buffer, so this bounds
    /// only a peer that stopped reading, which must not hold the accepting thread.
    fn reply_deadline(&self) -> Instant {
        Instant::now() + self.dev.shared.cfg.mpa_request_timeout
    }

    /// The initiator's private data.
    pub fn private_data(&self) -> &[u8] {
        &self.request.private_data
    }

    /// The whole request (revision, CRC, IRD/ORD...).
    pub fn request(&self) -> &ConnectRequest {
        &self.request
    }

    /// The initiator's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer_addr
    }

    /// Accepts with the device's MPA settings and `private_data`.
    pub fn accept(self, qp: &Qp, private_data: &[u8]) -> Result<Connection> {
        let mut cfg = self.dev.shared.cfg.mpa.clone();
        cfg.private_data = private_data.to_vec();
        self.accept_with(qp, cfg)
    }

    /// As [`ConnRequest::accept`], and if the initiator asked for markers in what it
    /// receives, asks for them in what we receive too: markers both ways at the
    /// initiator's choice (the benchmark servers serve a `--markers` client so).
    pub fn accept_echoing_markers(self, qp: &Qp, private_data: &[u8]) -> Result<Connection> {
        let mut cfg = self.dev.shared.cfg.mpa.clone();
        cfg.private_data = private_data.to_vec();
        cfg.markers |= self.request.markers;
        self.accept_with(qp, cfg)
    }

    /// Accepts with explicit MPA settings.
    pub fn accept_with(self, qp: &Qp, cfg: MpaConfig) -> Result<Connection> {
        self.dev.check_qp(qp)?;
        let serial = self.dev.shared.serial;
        self.accept_checked(qp, cfg)
            .inspect_err(|e| trace::mpa_failed(serial, e))
    }

    fn accept_checked(mut self, qp: &Qp, cfg: MpaConfig) -> Result<Connection> {
        let serial = self.dev.shared.serial;
        let accepted = self.responder.accept(&self.request, &cfg);
        let (reply, negotiated) = match accepted {
            Ok(v) => v,
            Err(CmError::Refused { reply, reason }) => {
                if self
                    .stream
                    .write_all_by(&reply, self.reply_deadline())
                    .is_ok()
                {
                    record(&mut self.rec, |r| r.sent(&reply));
                }
                trace::mpa_reject_sent(serial, self.peer_addr, Some(reason));
                return Err(Error::Mpa(CmError::Refused { reply, reason }));
            }
            Err(e) => return Err(e.into()),
        };
        let params = self.dev.qp_params(&*self.stream, &negotiated)?;
        self.stream.write_all_by(&reply, self.reply_deadline())?;
        record(&mut self.rec, |r| r.sent(&reply));
        trace::mpa_established(serial, qp.id(), self.peer_addr, &negotiated, true);
        qp.shared
            .attach(&self.dev.shared, self.stream, params, &[], self.rec)?;
        Ok(Connection {
            negotiated,
            peer_addr: self.peer_addr,
        })
    }

    /// Rejects with `private_data`; the connection then closes.
    pub fn reject(mut self, private_data: &[u8]) -> Result<()> {
        let reply = self.responder.reject(&self.request, private_data)?;
        self.stream.write_all_by(&reply, self.reply_deadline())?;
        record(&mut self.rec, |r| r.sent(&reply));
        trace::mpa_reject_sent(self.dev.shared.serial, self.peer_addr, None);
        if self.stream.shutdown().is_ok() {
            record(&mut self.rec, |r| r.fin_sent());
        }
        Ok(())
    }
}
