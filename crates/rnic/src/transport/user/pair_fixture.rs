//! What the stack tests (`backlog_tests`, `due_tests`, `piece_tests`) set up alike: a
//! device's stack on a simulated network, and a connection between two of them.

use super::stack::{UserStack, UserStackHandle};
use super::{SimNet, UserTcp};
use crate::engine::now;
use softrnic_tcp::{ConnId, ListenerId, RxMode, State};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

/// A stack at `addr` on `net`, its thread started (and gated by its `gate`).
pub(super) fn stack(net: &SimNet, addr: Ipv4Addr, serial: u32) -> UserStackHandle {
    UserStack::start(&UserTcp::sim(net, addr), Duration::from_secs(3600), serial).unwrap()
}

/// A connection from `a` (at `from`) to `b` (listening at `to`), established at both
/// ends.
pub(super) fn connect(
    a: &UserStack,
    b: &UserStack,
    from: Ipv4Addr,
    to: SocketAddrV4,
) -> (ConnId, ConnId) {
    let lis: ListenerId = b
        .lock()
        .unwrap()
        .stack
        .listen(to, 4, RxMode::Stream)
        .unwrap();
    let id_a = {
        let mut g = a.lock().unwrap();
        let id = g
            .stack
            .connect(now(), Some(from), to, RxMode::Stream)
            .unwrap();
        a.after(&mut g, id);
        id
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut g = a.lock().unwrap();
    while g.stack.state(id_a).unwrap() != State::Established {
        g = a
            .wait_until(g, deadline)
            .unwrap()
            .expect("no handshake in 60 s");
    }
    drop(g);
    let mut g = b.lock().unwrap();
    let id_b = loop {
        if let Some(id) = g.stack.accept(lis).unwrap() {
            break id;
        }
        g = b
            .wait_until(g, deadline)
            .unwrap()
            .expect("no accept in 60 s");
    };
    (id_a, id_b)
}
