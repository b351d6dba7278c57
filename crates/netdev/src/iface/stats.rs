//! What an interface did with every frame it received and every packet it sent.

/// Counters of an [`Interface`](super::Interface).
///
/// Every received frame lands in exactly one of the counters listed by
/// [`Stats::frames_accounted`], so `rx_frames == frames_accounted()` always holds;
/// the others count events (requests sent, packets dropped on the way out, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Frames read from the device.
    pub rx_frames: u64,
    /// Frames the device dropped because they were longer than the buffer (not in
    /// `rx_frames`).
    pub rx_too_long: u64,

    // Ethernet.
    /// Shorter than an Ethernet header.
    pub rx_runt: u64,
    /// Addressed to another station or a multicast group.
    pub rx_not_for_us: u64,
    /// From a group or zero source MAC, which no station owns.
    pub rx_bad_source_mac: u64,
    /// Neither ARP nor IPv4 (IPv6, VLAN tags, ...).
    pub rx_other_ethertype: u64,

    // ARP.
    /// Too short, or not Ethernet/IPv4 ARP, or an unknown operation.
    pub arp_malformed: u64,
    /// Claimed one of our addresses or came from a group MAC: ignored.
    pub arp_rejected: u64,
    /// About other hosts (a cached entry may have been refreshed).
    pub arp_not_for_us: u64,
    /// Requests for one of our addresses, answered.
    pub arp_requests_answered: u64,
    /// Replies to us (the sender was learned).
    pub arp_replies: u64,

    // IPv4.
    /// Bad version, header length or total length.
    pub ipv4_malformed: u64,
    /// Header checksum wrong.
    pub ipv4_bad_checksum: u64,
    /// Fragments (more-fragments set or an offset): never reassembled.
    pub ipv4_fragments: u64,
    /// From a broadcast, multicast, zero or our own address.
    pub ipv4_bad_source: u64,
    /// To an address this interface does not own.
    pub ipv4_not_our_address: u64,
    /// A protocol other than TCP and ICMP.
    pub ipv4_other_protocol: u64,

    // ICMP.
    /// Too short or checksum wrong.
    pub icmp_malformed: u64,
    /// Echo requests; each is answered (see the `tx_` counters for replies that
    /// could not leave).
    pub icmp_echo_requests: u64,

    /// IPv4 packets handed to the layer above (TCP, and ICMP other than echo requests).
    pub delivered: u64,

    // Sending.
    /// Frames the device took.
    pub tx_frames: u64,
    /// ARP requests sent (first tries, retries and refreshes).
    pub arp_requests_sent: u64,
    /// Neighbours that never answered: resolution gave up.
    pub arp_resolution_failed: u64,
    /// Packets dropped while waiting for a neighbour (it never answered).
    pub tx_unresolved_dropped: u64,
    /// Frames of our own (ARP, echo replies, packets released by ARP) dropped because
    /// the device was busy.
    pub tx_device_busy: u64,
    /// Frames of our own the device refused with an error.
    pub tx_device_errors: u64,
    /// Echo replies that could not be routed or queued.
    pub tx_reply_unroutable: u64,
}

impl Stats {
    /// The sum of the counters that each received frame lands in exactly once.
    pub fn frames_accounted(&self) -> u64 {
        self.rx_runt
            + self.rx_not_for_us
            + self.rx_bad_source_mac
            + self.rx_other_ethertype
            + self.arp_malformed
            + self.arp_rejected
            + self.arp_not_for_us
            + self.arp_requests_answered
            + self.arp_replies
            + self.ipv4_malformed
            + self.ipv4_bad_checksum
            + self.ipv4_fragments
            + self.ipv4_bad_source
            + self.ipv4_not_our_address
            + self.ipv4_other_protocol
            + self.icmp_malformed
            + self.icmp_echo_requests
            + self.delivered
    }
}
