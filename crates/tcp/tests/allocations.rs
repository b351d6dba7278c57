//! Steady state allocates nothing: once two connections (and the simulated wire
//! between them) have warmed up, moving data, through loss and reordering, segment by
//! segment, with retransmissions and SACK, allocates no memory at all. A counting
//! allocator wrapped around the system one counts this thread's allocations.

mod common;

use common::pattern;
use softrnic_tcp::sim::{End, Impairments, Wire};
use softrnic_tcp::{Config, Connection, Reassembly, SeqNum};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

struct Counting;

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds the
// GlobalAlloc contract; counting touches only a const-initialised thread-local Cell.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's layout obligations are passed on as they are.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout (see `alloc`).
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// Two connections on a wire, driven by hand with buffers made once.
struct Pair {
    a: Connection,
    b: Connection,
    rb: Reassembly,
    wire: Wire,
    now: Duration,
    packet: Vec<u8>,
    read: Vec<u8>,
}

impl Pair {
    /// Sends `data` from a to b (queued as records, `record` octets each) and checks
    /// every octet b reads against it.
    fn transfer(&mut self, data: &[u8], record: usize) {
        let (mut queued, mut got) = (0, 0);
        while got < data.len() {
            while queued < data.len() {
                let end = (queued + record).min(data.len());
                if self.a.send_record(&data[queued..end]).is_err() {
                    break;
                }
                queued = end;
            }
            for (end, conn) in [(End::A, &mut self.a), (End::B, &mut self.b)] {
                while let Some(n) = conn.poll_transmit(self.now, &mut self.packet) {
                    self.wire.send(end, self.now, &self.packet[..n]);
                }
            }
            let next = [
                self.wire.next_arrival(),
                self.a.poll_timeout(),
                self.b.poll_timeout(),
            ]
            .into_iter()
            .flatten()
            .min()
            .expect("something is due");
            self.now = self.now.max(next);
            while let Some((end, p)) = self.wire.poll_arrival(self.now) {
                let _ = match end {
                    End::A => self.a.handle_packet(self.now, p, &mut softrnic_tcp::Refuse),
                    End::B => self.b.handle_packet(self.now, p, &mut self.rb),
                };
            }
            for c in [&mut self.a, &mut self.b] {
                if c.poll_timeout().is_some_and(|t| t <= self.now) {
                    c.handle_timeout(self.now);
                }
                while c.poll_event().is_some() {}
            }
            loop {
                let n = self.rb.read_from(&mut self.b, &mut self.read);
                if n == 0 {
                    break;
                }
                assert!(self.read[..n] == data[got..got + n], "octet {got}");
                got += n;
            }
        }
    }
}

#[test]
fn moving_data_allocates_nothing_once_warm() {
    let cfg = Config {
        mss: 1000,
        send_buffer: 64 * 1024,
        recv_buffer: 64 * 1024,
        ..Config::default()
    };
    let imp = Impairments {
        loss: 0.02,
        reorder: 0.02,
        duplicate: 0.01,
        corrupt: 0.01,
        ..Impairments::default()
    };
    let a_addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 1000);
    let b_addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 2000);
    let a = Connection::connect(cfg.clone(), a_addr, b_addr, SeqNum(1));
    let b = Connection::listen(cfg, b_addr, SeqNum(2));
    let mut pair = Pair {
        rb: Reassembly::for_connection(&b),
        a,
        b,
        wire: {
            // Room for two windows of small segments and their ACKs, whatever the
            // warm-up reached.
            let mut w = Wire::new(imp, 5);
            w.reserve(1024);
            w
        },
        now: Duration::ZERO,
        packet: vec![0; 1500],
        read: vec![0; 4096],
    };
    let warm = pattern(2_000_000, 1);
    let data = pattern(1_000_000, 2);
    pair.transfer(&warm, 700);
    let before = allocations();
    pair.transfer(&data, 700);
    let during = allocations() - before;
    let s = pair.a.stats();
    assert!(
        s.retransmitted_segments > 0 && s.fast_retransmits > 0,
        "{s:?}"
    );
    assert_eq!(during, 0, "allocations while moving 1 MB");
}
