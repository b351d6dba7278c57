//! `softrnic rping`: the exchange of rdma-core's `rping`, compatible with it in both
//! roles, so softrnic can be checked against Linux siw with the tool RDMA users run
//! first.
//!
//! Each iteration: the client advertises its source buffer with a Send (address, rkey,
//! size: 16 octets, network order); the server RDMA-Reads it, answers with a Send; the
//! client advertises its sink buffer; the server RDMA-Writes what it read into it and
//! Sends again. With verify, the client checks that the sink holds the source's bytes.

use softrnic_rnic::*;
use std::net::SocketAddr;

mod args;
mod exchange;
mod opts;
#[cfg(test)]
mod tests;
mod wire;

pub use args::{CrcArg, RpingArgs, RtrArg};
pub use exchange::{client, serve_one, server};
pub use opts::{Fault, RpingOpts};
pub use wire::{Advert, ping_data};

/// Why an rping run failed.
#[derive(Debug, thiserror::Error)]
pub enum RpingError {
    /// A verbs call failed (connection refused, MPA rejected, ...).
    #[error(transparent)]
    Verbs(#[from] Error),
    /// No completion came within the step's time limit.
    #[error("no {0:?} completion within the time limit")]
    Timeout(WcOpcode),
    /// The server never answered the client's first advert (no Read Request, no
    /// Send): the connection is up, but the peer does not process what we sent.
    #[error("the server never answered our first Send")]
    NoFirstAnswer,
    /// A work request completed with an error status.
    #[error("{opcode:?} completed with {status:?}")]
    Failed {
        /// The work request's kind.
        opcode: WcOpcode,
        /// Its status.
        status: WcStatus,
    },
    /// The peer's advert was not 16 octets.
    #[error("the peer's buffer advert has {0} octets, not 16")]
    ShortAdvert(u32),
    /// The client's buffer does not fit ours (`-S` differs between the two sides).
    #[error(
        "the client's buffer ({theirs} octets) is larger than ours ({ours}): use the same -S on both sides"
    )]
    AdvertTooLarge {
        /// The client's advertised size.
        theirs: u32,
        /// Our buffer size.
        ours: usize,
    },
    /// A work request failed and the QP went to error with a Terminate.
    #[error("{opcode:?} completed with {status:?}; {} Terminate: {cause}", if *remote { "the peer sent" } else { "we sent" })]
    Terminated {
        /// The work request's kind.
        opcode: WcOpcode,
        /// Its status.
        status: WcStatus,
        /// The Terminate's layer/type/code.
        cause: TerminateCause,
        /// Whether the peer sent it.
        remote: bool,
    },
    /// Verify mode: the data written back differs from what was sent.
    #[error(
        "iteration {iteration}: data differs at octet {offset} (sent {sent:#04x}, got {got:#04x})"
    )]
    Mismatch {
        /// Iteration number (from 0).
        iteration: u64,
        /// First differing octet.
        offset: usize,
        /// What we sent there.
        sent: u8,
        /// What came back.
        got: u8,
    },
}

type Result<T> = std::result::Result<T, RpingError>;

/// The smallest ping buffer, as rping has it (room for "rdma-ping-N: " and more).
pub const MIN_SIZE: usize = 23;

/// Runs `softrnic rping` as the flags say.
pub fn main(args: &RpingArgs) -> std::result::Result<(), String> {
    let opts = args.opts()?;
    if args.net.transport.in_process_only() {
        return in_process(args, &opts);
    }
    let addr = args.socket_addr()?;
    let n = if args.server {
        server(addr, &opts, |a| {
            if !args.quiet {
                eprintln!("rping: server listening on {a}");
            }
        })
    } else {
        client(addr, &opts)
    }
    .map_err(|e| format!("rping: {e}"))?;
    if !args.quiet {
        let role = if args.server { "server" } else { "client" };
        let verified = if args.verify && args.client {
            ", data verified"
        } else {
            ""
        };
        eprintln!("rping: {role} done, {n} iterations{verified}");
    }
    Ok(())
}

/// `--transport user:sim`: a server and a client in this process, on a simulated
/// network of their own.
fn in_process(args: &RpingArgs, opts: &RpingOpts) -> std::result::Result<(), String> {
    use crate::transport::Net;
    if !args.client {
        return Err(format!(
            "--transport {} runs both roles in this process: give -c",
            args.net.transport.name()
        ));
    }
    let net = Net::new(&args.net);
    let sopts = RpingOpts {
        user_tcp: net.user_tcp(1),
        persistent: false,
        ..opts.clone()
    };
    let copts = RpingOpts {
        user_tcp: net.user_tcp(0),
        ..opts.clone()
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let listen = SocketAddr::from((Net::sim_addr(1), args.port));
    let srv = std::thread::spawn(move || {
        server(listen, &sopts, |a| {
            let _ = tx.send(a);
        })
    });
    let n = match rx.recv() {
        Ok(addr) => client(addr, &copts).map_err(|e| format!("rping client: {e}")),
        Err(_) => Err("the server ended before it listened".into()),
    };
    let served = srv
        .join()
        .map_err(|_| "the server thread panicked".to_string())?
        .map_err(|e| format!("rping server: {e}"));
    let n = n?;
    served?;
    if !args.quiet {
        let verified = if args.verify { ", data verified" } else { "" };
        eprintln!(
            "rping: client and server on {} done, {n} iterations{verified}",
            args.net.transport.name()
        );
    }
    Ok(())
}
