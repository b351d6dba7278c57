//! softrnic's verbs API and everything that touches the OS.
//!
//! Open a [`Device`], allocate a protection domain ([`Pd`]) and memory regions ([`Mr`]),
//! create completion queues ([`Cq`]) and queue pairs ([`Qp`]), connect them with the
//! connection manager ([`Device::connect`], [`Device::listen`]), then post work requests
//! and poll completions:
//!
//! ```
//! use softrnic_rnic::*;
//! use std::time::Duration;
//!
//! let dev = Device::open(DeviceConfig::default())?;
//! let pd = dev.alloc_pd();
//! let cq = dev.create_cq(64)?;
//! let server_qp = dev.create_qp(&pd, QpInit::new(&cq, 16, 16))?;
//! let client_qp = dev.create_qp(&pd, QpInit::new(&cq, 16, 16))?;
//! let listener = dev.listen("127.0.0.1:0")?;
//! let addr = listener.local_addr()?;
//! let server = std::thread::spawn(move || listener.accept()?.accept(&server_qp, b"hi").map(|_| server_qp));
//! let conn = dev.connect(addr, &client_qp, b"hello")?;
//! assert_eq!(conn.peer_private_data(), b"hi");
//! let server_qp = server.join().unwrap()?;
//!
//! // The server exposes a buffer; the client writes into it.
//! let target = pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
//! let source = pd.alloc_mr(4096, Access::empty())?;
//! source.write(0, b"RDMA over plain TCP")?;
//! client_qp.post_send(SendWr::write(1, source.sge(0, 19), target.addr(), target.rkey()))?;
//! let wc = cq.wait_for(1, Duration::from_secs(5));
//! assert_eq!(wc[0].status, WcStatus::Success);
//! # drop(server_qp);
//! # Ok::<(), softrnic_rnic::Error>(())
//! ```
//! (A Write completes when handed to TCP; an application learns that the data is in
//! place from a later Send, as with any RDMA Write.)
//!
//! A consumer that sleeps instead of polling arms its CQ ([`Cq::req_notify`]) and takes
//! the event from a completion handler: a callback on a CPU ([`Handler::callback`]), a
//! [`CompChannel`], or [`Cq::wait_notify`]. CQs are bound to handlers by
//! [`Device::create_cq_on`] and moved by [`Device::modify_cq`]; a QP's socket work runs
//! on the CPU of its receive CQ's handler. `docs/ARCHITECTURE.md` ("Completion
//! handlers") has the rules and how to spread QPs over CPUs.

#[cfg(feature = "tokio")]
pub mod async_channel;
mod buf_pool;
pub mod channel;
mod chaos;
mod close;
pub mod cm;
mod cpu_share;
pub mod cq;
mod cq_direct;
pub mod cq_notify;
pub mod cq_qps;
pub mod cq_ring;
pub mod device;
mod engine;
pub mod error;
mod frame_io;
pub mod handler;
mod handler_verbs;
pub mod handoff;
pub mod heap_count;
mod limits;
pub mod listener;
pub mod mr;
mod placement;
pub mod qp;
mod receive;
pub mod region;
mod region_table;
pub mod same_host;
mod socket_buffers;
pub mod srq;
pub mod srq_pool;
mod sys;
mod trace;
mod transmit;
mod transport;
#[cfg(all(test, not(loom)))]
mod twin_support;
mod tx_turns;

#[cfg(feature = "tokio")]
pub use async_channel::AsyncCompChannel;
pub use channel::{CompChannel, CqEvent};
pub use cm::{ConnRequest, Connection};
pub use cq::{Cq, EventCounts};
pub use cq_notify::Armed;
pub use device::{
    AsyncEvent, Device, DeviceAttr, DeviceConfig, DeviceUsage, FirstFpduHold, ProgressMode,
};
pub use engine::EngineInfo;
pub use error::{Error, Fault, Result};
pub use handler::{Handler, HandlerInfo, HandlerKind};
pub use listener::{Listener, ListenerStats};
pub use mr::{Mr, Pd};
pub use placement::EnginePlacement;
pub use qp::{Qp, QpInit, QpStats, RX_DIRECT_MIN, RX_STAGING_LEN, TX_GATHER_MAX};
pub use same_host::SameHostTcp;
pub use softrnic_netdev::MacAddr;
pub use softrnic_proto::cm::{CmError, CrcPolicy, MpaConfig, RefusalReason, RtrTypes};
pub use softrnic_proto::srq::limits::{Analysis, Level, LimitKind, QpLimits, Verdict};
pub use softrnic_proto::srq::stats::{Estimator, ProvisionConfig};
pub use softrnic_proto::{
    Access, Completion, QpId, QpState, RecvWr, STag, SendOp, SendWr, Sge, Sgl, TooManySge,
    WcOpcode, WcStatus,
};
/// softrnic's own TCP's settings and counters ([`UserTcp::tcp`], [`UserTcpStats`]).
pub use softrnic_tcp::{
    Config as TcpConfig, Histogram as TcpHistogram, StackStats as TcpStackStats, Stats as TcpStats,
    Timing as TcpTiming,
};
pub use softrnic_wire::TerminateCause;
pub use srq::{ChainError, ManagedInit, Srq, SrqAttr, SrqInit, SrqModify, SrqUsage};
pub use sys::{affinity, nofile, socket, usage};
pub use transport::fault::{FaultEnd, FaultPlan};
pub use transport::user::{
    Impairments as SimImpairments, NetStats, SimNet, UserLink, UserTcp, UserTcpStats,
    WireStats as SimWireStats, mac_for, tcp_for as user_tcp_config,
};
