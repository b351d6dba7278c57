//! Reassembly and file-format behaviour on captures built in the test.

mod common;

use common::*;
use softrnic_capture::{CaptureError, Connection, Direction, parse_capture, read_capture};

const ISN_C: u32 = 1000;
const ISN_S: u32 = 5000;

fn parse(data: &[u8]) -> Vec<Connection> {
    let conns = parse_capture(data).expect("parse");
    check_invariants(&conns);
    conns
}

fn handshake() -> Vec<Seg> {
    vec![
        c2s(ISN_C, "S", b""),
        s2c(ISN_S, "SA", b""),
        c2s(ISN_C + 1, "A", b""),
    ]
}

fn only(conns: &[Connection]) -> &Connection {
    assert_eq!(conns.len(), 1, "{conns:#?}");
    &conns[0]
}

fn seg_layout(d: &Direction) -> Vec<(u64, u64, u32)> {
    d.segments
        .iter()
        .map(|s| (s.frame, s.offset, s.len))
        .collect()
}

#[test]
fn handshake_only_connection_is_returned() {
    let conns = parse(&eth_pcap(&handshake()));
    let c = only(&conns);
    assert_eq!((c.client, c.server), (client(), server()));
    assert_eq!(c.first_frame, 1);
    assert!(c.to_server.syn && c.to_client.syn);
    assert!(!c.to_server.fin && !c.to_server.rst);
    assert!(c.to_server.bytes.is_empty() && c.to_client.bytes.is_empty());
    assert!(c.to_server.segments.is_empty() && c.to_server.gaps.is_empty());
    assert!(c.to_client.gaps.is_empty());
}

#[test]
fn in_order_both_directions_with_frames_and_timestamps() {
    let mut segs = handshake();
    segs.extend([
        c2s(ISN_C + 1, "A", b"hello "),
        s2c(ISN_S + 1, "A", b"world"),
        c2s(ISN_C + 7, "A", b"again"),
        c2s(ISN_C + 12, "FA", b""),
        s2c(ISN_S + 6, "FA", b""),
        c2s(ISN_C + 13, "A", b""), // ACK of the server's FIN, one past ours
    ]);
    let conns = parse(&eth_pcap(&segs));
    let c = only(&conns);
    assert_eq!(c.to_server.bytes, b"hello again");
    assert_eq!(c.to_client.bytes, b"world");
    assert_eq!(seg_layout(&c.to_server), vec![(4, 0, 6), (6, 6, 5)]);
    assert_eq!(c.to_server.segments[1].timestamp_ns, ts_ns(5));
    assert_eq!(seg_layout(&c.to_client), vec![(5, 0, 5)]);
    assert!(c.to_server.fin && c.to_client.fin);
    assert!(c.to_server.gaps.is_empty() && c.to_client.gaps.is_empty());
}

#[test]
fn out_of_order_segments_are_placed_when_the_hole_fills() {
    let mut segs = handshake();
    segs.extend([
        c2s(ISN_C + 7, "A", b"ghi"),
        c2s(ISN_C + 10, "A", b"jk"),
        c2s(ISN_C + 1, "A", b"abc"),
        c2s(ISN_C + 4, "A", b"def"),
    ]);
    let conns = parse(&eth_pcap(&segs));
    let d = &only(&conns).to_server;
    assert_eq!(d.bytes, b"abcdefghijk");
    assert!(d.gaps.is_empty());
    assert_eq!(
        seg_layout(d),
        vec![(6, 0, 3), (7, 3, 3), (4, 6, 3), (5, 9, 2)]
    );
}

#[test]
fn exact_retransmission_is_dropped() {
    let mut segs = handshake();
    segs.extend([
        c2s(ISN_C + 1, "A", b"abc"),
        c2s(ISN_C + 1, "A", b"abc"),
        c2s(ISN_C + 4, "A", b"def"),
        c2s(ISN_C + 4, "A", b"def"),
    ]);
    let conns = parse(&eth_pcap(&segs));
    let d = &only(&conns).to_server;
    assert_eq!(d.bytes, b"abcdef");
    assert_eq!(seg_layout(d), vec![(4, 0, 3), (6, 3, 3)]);
}

#[test]
fn partial_overlap_keeps_first_seen_bytes_and_only_the_new_part() {
    let mut segs = handshake();
    segs.extend([
        c2s(ISN_C + 1, "A", b"abcd"),
        // Overlaps "cd" with different content, then adds "ef".
        c2s(ISN_C + 3, "A", b"XYef"),
        // Covers a hole between earlier data on both sides.
        c2s(ISN_C + 9, "A", b"ij"),
        c2s(ISN_C + 6, "A", b"QgGhZ"),
    ]);
    let conns = parse(&eth_pcap(&segs));
    let d = &only(&conns).to_server;
    assert_eq!(d.bytes, b"abcdefgGij");
    assert_eq!(
        seg_layout(d),
        vec![(4, 0, 4), (5, 4, 2), (7, 6, 2), (6, 8, 2)]
    );
}

#[test]
fn sequence_wrap_around_near_2_pow_32() {
    let isn = u32::MAX - 5;
    let segs = [
        c2s(isn, "S", b""),
        s2c(7, "SA", b""),
        c2s(isn.wrapping_add(1), "A", b"0123"),
        // Out of order across the wrap: this one starts after 2^32.
        c2s(isn.wrapping_add(9), "A", b"89"),
        c2s(isn.wrapping_add(5), "A", b"4567"), // crosses the wrap
        c2s(isn.wrapping_add(11), "FA", b""),
    ];
    let conns = parse(&eth_pcap(&segs));
    let d = &only(&conns).to_server;
    assert_eq!(d.bytes, b"0123456789");
    assert!(d.gaps.is_empty());
    assert_eq!(seg_layout(d), vec![(3, 0, 4), (5, 4, 4), (4, 8, 2)]);
}

#[test]
fn missing_segment_is_recorded_as_gap() {
    let mut segs = handshake();
    segs.extend([
        c2s(ISN_C + 1, "A", b"0123456789"),
        // bytes 10..20 never captured
        c2s(ISN_C + 21, "A", b"abcdefghij"),
        // bytes 30..35 never captured either; the FIN reveals them
        c2s(ISN_C + 36, "FA", b""),
    ]);
    let conns = parse(&eth_pcap(&segs));
    let d = &only(&conns).to_server;
    assert_eq!(d.bytes, b"0123456789", "only the contiguous prefix");
    assert_eq!(seg_layout(d), vec![(4, 0, 10)]);
    assert_eq!(d.gaps, vec![(10, 10), (30, 5)]);
    let missing: u64 = d.gaps.iter().map(|g| g.1).sum();
    assert_eq!(missing, 15);
}

#[test]
fn lost_tail_is_revealed_by_a_later_ack() {
    let mut segs = handshake();
    segs.extend([
        c2s(ISN_C + 1, "A", b"abc"),
        // A pure ACK from the client whose sequence number shows 4 more
        // bytes were sent.
        c2s(ISN_C + 8, "A", b""),
    ]);
    let conns = parse(&eth_pcap(&segs));
    assert_eq!(only(&conns).to_server.gaps, vec![(3, 4)]);
}

#[test]
fn port_reuse_after_fin_starts_a_new_connection() {
    let mut segs = handshake();
    segs.extend([
        c2s(ISN_C + 1, "A", b"first"),
        c2s(ISN_C + 6, "FA", b""),
        s2c(ISN_S + 1, "FA", b""),
        c2s(ISN_C + 7, "A", b""),
        // Same 4-tuple, new ISN.
        c2s(9000, "S", b""),
        s2c(7000, "SA", b""),
        c2s(9001, "A", b"second"),
        s2c(7001, "A", b"reply"),
    ]);
    let conns = parse(&eth_pcap(&segs));
    assert_eq!(conns.len(), 2);
    assert_eq!(conns[0].to_server.bytes, b"first");
    assert_eq!(conns[1].to_server.bytes, b"second");
    assert_eq!(conns[1].to_client.bytes, b"reply");
    assert_eq!(conns[1].first_frame, 8);
    assert_eq!(conns[1].client, client());
    assert!(conns[0].to_server.gaps.is_empty() && conns[1].to_server.gaps.is_empty());
}

#[test]
fn port_reuse_after_rst_even_with_the_same_isn() {
    let segs = [
        c2s(ISN_C, "S", b""),
        s2c(0, "RA", b""), // refused
        c2s(ISN_C, "S", b""),
        s2c(ISN_S, "SA", b""),
        c2s(ISN_C + 1, "A", b"ok"),
    ];
    let conns = parse(&eth_pcap(&segs));
    assert_eq!(conns.len(), 2);
    assert!(conns[0].to_client.rst);
    assert!(conns[0].to_client.gaps.is_empty());
    assert_eq!(conns[1].to_server.bytes, b"ok");
}

#[test]
fn retransmitted_syn_stays_in_the_same_connection() {
    let segs = [
        c2s(ISN_C, "S", b""),
        c2s(ISN_C, "S", b""),
        s2c(ISN_S, "SA", b""),
        c2s(ISN_C + 1, "A", b"x"),
    ];
    let conns = parse(&eth_pcap(&segs));
    assert_eq!(only(&conns).to_server.bytes, b"x");
}

#[test]
fn interleaved_connections_are_ordered_by_first_packet() {
    let segs = [
        c2s(1, "S", b"").port(1111),
        c2s(100, "S", b"").port(2222),
        s2c(50, "SA", b"").port(2222),
        s2c(60, "SA", b"").port(1111),
        c2s(101, "A", b"B").port(2222),
        c2s(2, "A", b"A").port(1111),
    ];
    let conns = parse(&eth_pcap(&segs));
    assert_eq!(conns.len(), 2);
    assert_eq!(conns[0].client.port, 1111);
    assert_eq!(conns[0].to_server.bytes, b"A");
    assert_eq!(conns[1].client.port, 2222);
    assert_eq!(conns[1].to_server.bytes, b"B");
    assert_eq!(conns[1].first_frame, 2);
}

#[test]
fn without_syn_the_first_sender_is_the_client() {
    let segs = [s2c(300, "A", b"from server"), c2s(700, "A", b"from client")];
    let conns = parse(&eth_pcap(&segs));
    let c = only(&conns);
    assert_eq!(c.client, server());
    assert_eq!(c.to_server.bytes, b"from server");
    assert_eq!(c.to_client.bytes, b"from client");
    assert!(!c.to_server.syn);
}

#[test]
fn syn_ack_seen_first_identifies_the_server() {
    let segs = [s2c(ISN_S, "SA", b""), c2s(ISN_C + 1, "A", b"req")];
    let conns = parse(&eth_pcap(&segs));
    let c = only(&conns);
    assert_eq!((c.client, c.server), (client(), server()));
    assert_eq!(c.to_server.bytes, b"req");
}

#[test]
fn non_tcp_packets_are_skipped() {
    let mut udp = Vec::new();
    etherparse::PacketBuilder::ethernet2([1; 6], [2; 6])
        .ipv4(CLIENT_IP, SERVER_IP, 64)
        .udp(53, 53)
        .write(&mut udp, b"dns")
        .expect("udp");
    let arp_like = {
        let mut f = vec![0xffu8; 12];
        f.extend_from_slice(&[0x08, 0x06]);
        f.extend_from_slice(&[0u8; 28]);
        f
    };
    let mut frames = vec![udp, arp_like, vec![0u8; 3], Vec::new()];
    frames.extend(handshake().iter().map(Seg::ethernet));
    let conns = parse(&pcap(1, &frames));
    assert_eq!(only(&conns).first_frame, 5);
}

#[test]
fn other_link_types_and_ipv6_vlan() {
    let mut segs = handshake();
    segs.push(c2s(ISN_C + 1, "A", b"payload"));
    let raw: Vec<Vec<u8>> = segs.iter().map(Seg::raw_ip).collect();
    let with_prefix = |prefix: &dyn Fn(&Vec<u8>) -> Vec<u8>| -> Vec<Vec<u8>> {
        raw.iter()
            .map(|f| {
                let mut out = prefix(f);
                out.extend_from_slice(f);
                out
            })
            .collect()
    };
    let null = with_prefix(&|_| 2u32.to_le_bytes().to_vec());
    let sll = with_prefix(&|_| {
        let mut h = vec![0u8; 14];
        h.extend_from_slice(&0x0800u16.to_be_bytes());
        h
    });
    let sll2 = with_prefix(&|_| {
        let mut h = 0x0800u16.to_be_bytes().to_vec();
        h.extend_from_slice(&[0u8; 18]);
        h
    });
    let vlan: Vec<Vec<u8>> = segs.iter().map(Seg::vlan).collect();
    let v6: Vec<Vec<u8>> = segs.iter().map(Seg::ipv6).collect();

    for (name, link, frames) in [
        ("raw", 101, &raw),
        ("ipv4", 228, &raw),
        ("null", 0, &null),
        ("loop", 108, &null),
        ("sll", 113, &sll),
        ("sll2", 276, &sll2),
        ("vlan", 1, &vlan),
        ("ipv6", 1, &v6),
    ] {
        let conns = parse(&pcap(link, frames));
        assert_eq!(conns.len(), 1, "{name}");
        assert_eq!(conns[0].to_server.bytes, b"payload", "{name}");
        assert_eq!(conns[0].client.port, CLIENT_PORT, "{name}");
    }
    let conns = parse(&pcap(1, &v6));
    assert!(conns[0].client.addr.is_ipv6());
    assert_eq!(conns[0].client.to_string(), "[2001:db8::a00:1]:40000");
}

#[test]
fn big_endian_and_nanosecond_pcaps() {
    let mut segs = handshake();
    segs.push(c2s(ISN_C + 1, "A", b"x"));
    let frames: Vec<Vec<u8>> = segs.iter().map(Seg::ethernet).collect();
    for big in [false, true] {
        for nano in [false, true] {
            let conns = parse(&pcap_with(big, nano, 1, &frames));
            let s = &only(&conns).to_server.segments[0];
            assert_eq!(s.timestamp_ns, ts_ns(3), "big={big} nano={nano}");
        }
    }
}

#[test]
fn fcs_bits_in_link_type_field_are_ignored() {
    let frames: Vec<Vec<u8>> = handshake().iter().map(Seg::ethernet).collect();
    // LINKTYPE_ETHERNET with the "FCS present" bit and length 2 (x16 bits).
    let conns = parse(&pcap(0x2000_0000 | 0x1000_0000 | 1, &frames));
    assert_eq!(conns.len(), 1);
}

#[test]
fn unsupported_link_type_is_an_error() {
    let frames: Vec<Vec<u8>> = handshake().iter().map(Seg::ethernet).collect();
    match parse_capture(&pcap(147, &frames)) {
        Err(CaptureError::UnsupportedLinkType(147)) => {}
        other => panic!("{other:?}"),
    }
    let ng = pcapng(
        &[NgIface {
            link: 147,
            tsresol: None,
        }],
        &[NgPacket {
            iface: 0,
            ticks: 0,
            data: vec![1, 2, 3],
        }],
    );
    assert!(matches!(
        parse_capture(&ng),
        Err(CaptureError::UnsupportedLinkType(147))
    ));
}

#[test]
fn garbage_and_empty_files_are_not_captures() {
    for data in [
        &b""[..],
        b"\xd4\xc3",
        b"this is definitely not a packet capture file",
        b"\xd4\xc3\xb2\xa1 short header",
        b"\x0a\x0d\x0d\x0a",
        &[0u8; 100],
    ] {
        match parse_capture(data) {
            Err(e @ CaptureError::NotACapture(_)) => assert!(!e.to_string().is_empty()),
            other => panic!("{data:?}: {other:?}"),
        }
    }
    assert!(
        parse_capture(b"")
            .unwrap_err()
            .to_string()
            .contains("empty")
    );
}

#[test]
fn header_only_pcap_has_no_connections() {
    assert!(parse(&pcap(1, &[])).is_empty());
    assert!(
        parse(&pcapng(
            &[NgIface {
                link: 1,
                tsresol: None
            }],
            &[]
        ))
        .is_empty()
    );
}

#[test]
fn cut_short_last_record_keeps_captured_bytes_and_records_gap() {
    let mut segs = handshake();
    segs.push(c2s(ISN_C + 1, "A", &[b'z'; 100]));
    let full = eth_pcap(&segs);
    // Drop the last 40 payload bytes as if tcpdump died mid-write.
    let cut = &full[..full.len() - 40];
    let conns = parse(cut);
    let d = &only(&conns).to_server;
    assert_eq!(d.bytes, vec![b'z'; 60]);
    assert_eq!(d.gaps, vec![(60, 40)]);

    // Cut inside the last record's header: that record is ignored.
    let frame_len = segs[3].ethernet().len();
    let cut = &full[..full.len() - frame_len - 6];
    let conns = parse(cut);
    assert!(only(&conns).to_server.bytes.is_empty());
}

#[test]
fn snaplen_truncated_packet_records_gap_until_retransmitted() {
    let mut frames: Vec<Vec<u8>> = handshake().iter().map(Seg::ethernet).collect();
    let big = c2s(ISN_C + 1, "A", &[7u8; 200]).ethernet();
    frames.push(big[..big.len() - 150].to_vec()); // captured 50 of 200
    frames.push(c2s(ISN_C + 201, "A", b"tail").ethernet());
    let conns = parse(&pcap(1, &frames));
    let d = &only(&conns).to_server;
    assert_eq!(d.bytes, vec![7u8; 50]);
    assert_eq!(d.gaps, vec![(50, 150)]);

    // A later full retransmission fills the hole.
    frames.push(big);
    let conns = parse(&pcap(1, &frames));
    let d = &only(&conns).to_server;
    assert_eq!(d.bytes.len(), 204);
    assert!(d.gaps.is_empty());
    assert_eq!(seg_layout(d), vec![(4, 0, 50), (6, 50, 150), (5, 200, 4)]);
}

#[test]
fn pcapng_with_resolutions_and_interfaces() {
    let mut segs = handshake();
    segs.push(c2s(ISN_C + 1, "A", b"ng data"));
    segs.push(s2c(ISN_S + 1, "A", b"reply"));
    let packets: Vec<NgPacket> = segs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            // The server's packets come in on a raw-IP interface with
            // nanosecond timestamps; the client's on Ethernet (microseconds).
            if s.to_server {
                NgPacket {
                    iface: 0,
                    ticks: 1_000_000 + i as u64,
                    data: s.ethernet(),
                }
            } else {
                NgPacket {
                    iface: 1,
                    ticks: 2_000_000_000 + i as u64,
                    data: s.raw_ip(),
                }
            }
        })
        .collect();
    let ng = pcapng(
        &[
            NgIface {
                link: 1,
                tsresol: None,
            },
            NgIface {
                link: 101,
                tsresol: Some(9),
            },
        ],
        &packets,
    );
    let conns = parse(&ng);
    let c = only(&conns);
    assert_eq!(c.to_server.bytes, b"ng data");
    assert_eq!(c.to_client.bytes, b"reply");
    assert_eq!(c.to_server.segments[0].frame, 4);
    assert_eq!(c.to_server.segments[0].timestamp_ns, 1_000_003_000);
    assert_eq!(c.to_client.segments[0].timestamp_ns, 2_000_000_004);

    // Cut the last block short (4-byte trailer, 3 bytes padding and the
    // "y"): its captured part survives, the rest is a gap.
    let cut = &ng[..ng.len() - 8];
    let conns = parse(cut);
    let c = only(&conns);
    assert_eq!(c.to_client.bytes, b"repl");
    assert_eq!(c.to_client.gaps, vec![(4, 1)]);
}

#[test]
fn pcapng_packet_on_undeclared_interface_is_malformed() {
    let ng = pcapng(
        &[NgIface {
            link: 1,
            tsresol: None,
        }],
        &[NgPacket {
            iface: 3,
            ticks: 0,
            data: c2s(1, "S", b"").ethernet(),
        }],
    );
    match parse_capture(&ng) {
        Err(CaptureError::Malformed { offset, reason }) => {
            assert!(offset > 0);
            assert!(reason.contains("interface 3"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn missing_file_is_an_io_error() {
    let err = read_capture(std::path::Path::new("/nonexistent/capture.pcap")).unwrap_err();
    assert!(matches!(err, CaptureError::Io(_)), "{err:?}");
}
