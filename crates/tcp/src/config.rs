//! What a connection may use and how long it waits: every buffer, count and timer has a
//! bound here, so that no peer can make a connection grow or wait without end.

use crate::range_set::MAX_RANGES;
use std::time::Duration;

/// Keep-alive probing of an idle connection (RFC 9293 3.8.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    /// Idle time before the first probe.
    pub idle: Duration,
    /// Time between unanswered probes.
    pub interval: Duration,
    /// Unanswered probes after which the connection times out.
    pub probes: u32,
}

/// A connection's limits and timers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The largest segment payload we accept (our MSS option): the link MTU less 40.
    pub mss: u16,
    /// Octets the send buffer holds (queued and unacknowledged).
    pub send_buffer: usize,
    /// Octets the receiver may hold beyond what the user released: the window.
    pub recv_buffer: u32,
    /// Record boundaries ([`crate::Connection::send_record`]) queued at most.
    pub max_records: usize,
    /// Out-of-order ranges the receiver keeps (and SACK blocks the sender tracks), at
    /// most [`MAX_RANGES`]; data that would open another range is dropped.
    pub max_ooo_ranges: usize,
    /// Offer and use SACK (RFC 2018).
    pub sack: bool,
    /// Offer and use window scaling (RFC 7323).
    pub window_scale: bool,
    /// Initial congestion window, in segments (RFC 6928).
    pub initial_cwnd: u32,
    /// Retransmission timeout before any RTT sample (RFC 6298: 1 s).
    pub rto_initial: Duration,
    /// Lower bound of the retransmission timeout. RFC 6298 asks for 1 s, Linux uses
    /// 200 ms (the default here). On a link whose round trip is microseconds (an
    /// in-process or LAN wire) a few milliseconds are enough, provided it exceeds a
    /// round trip plus the peer's ACK delay (see [`Config::fast_link`]): a timeout
    /// is what the loss probe and RACK cannot repair, and it costs this much idle
    /// time at least. At least 1 ms.
    pub rto_min: Duration,
    /// Upper bound of the retransmission timeout, also of the backed-off one.
    pub rto_max: Duration,
    /// Retransmissions of the same data before the connection times out.
    pub max_retransmissions: u32,
    /// Retransmissions of a SYN (or SYN-ACK) before the open fails.
    pub syn_retries: u32,
    /// How long an ACK may be delayed; `None` acknowledges every segment at once.
    pub delayed_ack: Option<Duration>,
    /// The longest the peer may delay an ACK (RFC 8985's WCDelAckT): a loss probe for
    /// a single segment in flight waits this long beyond two round trips, so that a
    /// delayed ACK is not taken for a loss. RFC 8985 suggests 200 ms (Linux delays up
    /// to 200 ms); a softrnic peer delays `delayed_ack`.
    pub peer_max_ack_delay: Duration,
    /// Maximum segment lifetime: TIME-WAIT lasts twice this.
    pub msl: Duration,
    /// Keep-alive probes; `None` (the default) sends none.
    pub keepalive: Option<Keepalive>,
    /// Challenge ACKs (RFC 5961) sent per second at most.
    pub challenge_ack_limit: u32,
    /// The link computes and verifies TCP checksums for us, as a NIC with checksum
    /// offload (or Linux's loopback and veth) does: segments leave with the field
    /// zero and arrive unverified. Only for a link that drops or marks the packets it
    /// damages ([`crate::Stack::handle_packet_checked`]): softrnic's in-process network.
    /// Off by default: real links keep checksums. Both ends must agree.
    pub checksum_offload: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            mss: 1460,
            send_buffer: 256 * 1024,
            recv_buffer: 256 * 1024,
            max_records: 4096,
            max_ooo_ranges: 32,
            sack: true,
            window_scale: true,
            initial_cwnd: 10,
            rto_initial: Duration::from_secs(1),
            rto_min: Duration::from_millis(200),
            rto_max: Duration::from_secs(60),
            max_retransmissions: 15,
            syn_retries: 6,
            delayed_ack: Some(Duration::from_millis(40)),
            peer_max_ack_delay: Duration::from_millis(200),
            msl: Duration::from_secs(30),
            keepalive: None,
            challenge_ack_limit: 100,
            checksum_offload: false,
        }
    }
}

impl Config {
    /// The timers for a link whose round trip is tens of microseconds (softrnic's
    /// in-process network, a LAN) between two softrnic ends that both use them: a
    /// retransmission timeout of 5 ms at least (RFC 6298's 1 s, or Linux's 200 ms,
    /// would stall such a link for thousands of round trips when a timeout does
    /// happen), ACKs delayed 1 ms at most (the timeout of a lone segment must exceed a
    /// round trip plus the peer's ACK delay, or every lone segment would time out),
    /// loss probes that wait for that 1 ms, and 50 ms before the first round trip is
    /// measured. Everything else is the default. Against a peer that delays ACKs
    /// longer (Linux: 40 ms to 200 ms), raise `rto_min` and `peer_max_ack_delay`
    /// above its delay.
    pub fn fast_link() -> Config {
        Config {
            rto_initial: Duration::from_millis(50),
            rto_min: Duration::from_millis(5),
            delayed_ack: Some(Duration::from_millis(1)),
            peer_max_ack_delay: Duration::from_millis(1),
            ..Config::default()
        }
    }

    /// The same limits with every value forced into a range the connection works with
    /// (an MSS of at least 64, buffers of at least one segment, `rto_min <= rto_max`).
    pub(crate) fn sane(mut self) -> Config {
        self.mss = self.mss.max(64);
        self.send_buffer = self.send_buffer.max(usize::from(self.mss));
        self.recv_buffer = self.recv_buffer.clamp(u32::from(self.mss), 1 << 30);
        self.max_records = self.max_records.max(1);
        self.max_ooo_ranges = self.max_ooo_ranges.clamp(1, MAX_RANGES);
        self.initial_cwnd = self.initial_cwnd.max(1);
        self.rto_min = self.rto_min.max(Duration::from_millis(1));
        self.rto_max = self.rto_max.max(self.rto_min);
        self.rto_initial = self.rto_initial.clamp(self.rto_min, self.rto_max);
        self
    }

    /// The window scale we offer: the smallest shift that lets the window field say
    /// the whole receive buffer.
    pub(crate) fn wscale(&self) -> u8 {
        let mut s = 0;
        while s < 14 && (self.recv_buffer >> s) > u32::from(u16::MAX) {
            s += 1;
        }
        s
    }
}
