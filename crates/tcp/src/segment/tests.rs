use super::*;
use proptest::prelude::*;
use std::net::Ipv4Addr;

fn addr(last: u8, port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, last), port)
}

fn sample(payload: &[u8]) -> Segment<'_> {
    let mut options = Options {
        timestamp: Some((0x0102_0304, 0x0a0b_0c0d)),
        ..Options::default()
    };
    options.sack.push(SackBlock {
        left: SeqNum(100),
        right: SeqNum(200),
    });
    options.sack.push(SackBlock {
        left: SeqNum(u32::MAX - 5),
        right: SeqNum(3),
    });
    Segment {
        src: addr(1, 40000),
        dst: addr(2, 5201),
        seq: SeqNum(0xfeed_beef),
        ack: SeqNum(77),
        flags: Flags::ACK | Flags::PSH,
        window: 4321,
        options,
        payload,
    }
}

#[test]
fn round_trip_with_every_option() {
    let payload: Vec<u8> = (0..=250).collect();
    let seg = sample(&payload);
    let mut buf = [0u8; 1500];
    let n = seg.emit(&mut buf).unwrap();
    assert_eq!(n, seg.packet_len());
    assert_eq!(Segment::parse(&buf[..n]).unwrap(), seg);
    // Link padding after the IPv4 total length is ignored.
    assert_eq!(Segment::parse(&buf[..n + 10]).unwrap(), seg);
}

#[test]
fn syn_options_round_trip() {
    let mut seg = sample(b"");
    seg.flags = Flags::SYN;
    seg.options = Options {
        mss: Some(1460),
        window_scale: Some(7),
        sack_permitted: true,
        timestamp: Some((5, 0)),
        ..Options::default()
    };
    let mut buf = [0u8; 100];
    let n = seg.emit(&mut buf).unwrap();
    assert_eq!(n, 20 + 20 + 24);
    assert_eq!(seg.seq_len(), 1);
    assert_eq!(Segment::parse(&buf[..n]).unwrap(), seg);
}

#[test]
fn four_sack_blocks_fit_alone() {
    let mut seg = sample(b"");
    seg.options = Options::default();
    for i in 0..4u32 {
        seg.options.sack.push(SackBlock {
            left: SeqNum(i * 1000),
            right: SeqNum(i * 1000 + 500),
        });
    }
    let mut buf = [0u8; 100];
    let n = seg.emit(&mut buf).unwrap();
    assert_eq!(n, 20 + 20 + 36);
    assert_eq!(Segment::parse(&buf[..n]).unwrap(), seg);
    // With timestamps as well, they do not.
    seg.options.timestamp = Some((1, 2));
    assert_eq!(seg.emit(&mut buf), Err(EmitError::OptionsTooLong));
}

/// Checksums agree with an independent writer (etherparse's packet builder).
#[test]
fn checksums_match_etherparse_builder() {
    let payload = b"hello, odd length";
    let seg = Segment {
        src: addr(1, 1234),
        dst: addr(2, 80),
        seq: SeqNum(1),
        ack: SeqNum(2),
        flags: Flags::ACK,
        window: 1000,
        options: Options::default(),
        payload,
    };
    let mut ours = [0u8; 200];
    let n = seg.emit(&mut ours).unwrap();
    let builder = etherparse::PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .tcp(1234, 80, 1, 1000)
        .ack(2);
    let mut theirs = Vec::new();
    builder.write(&mut theirs, payload).unwrap();
    // Same TCP octets (the IPv4 headers differ only in DF/identification choices).
    assert_eq!(&ours[20..n], &theirs[20..]);
}

#[test]
fn short_buffer_is_an_error() {
    let seg = sample(b"abc");
    let mut buf = [0u8; 40];
    assert_eq!(
        seg.emit(&mut buf),
        Err(EmitError::BufferTooSmall {
            need: seg.packet_len(),
            have: 40
        })
    );
}

#[test]
fn unknown_options_are_skipped_bad_lengths_rejected() {
    // kind 30 (MPTCP) with 4 octets, then MSS.
    let raw = [30, 4, 0, 0, 2, 4, 5, 0xb4];
    let o = Options::parse(&raw).unwrap();
    assert_eq!(o.mss, Some(1460));
    assert_eq!(Options::parse(&[30, 0, 0, 0]), Err(ParseError::Option(30)));
    assert_eq!(Options::parse(&[30, 9, 0, 0]), Err(ParseError::Option(30)));
    assert_eq!(Options::parse(&[2, 3, 0, 0]), Err(ParseError::Option(2)));
    assert_eq!(
        Options::parse(&[5, 7, 0, 0, 0, 0, 0]),
        Err(ParseError::Option(5))
    );
    // End of options stops the parse.
    assert_eq!(
        Options::parse(&[0, 2, 4, 5, 0xb4]).unwrap(),
        Options::default()
    );
}

#[test]
fn fragments_and_other_protocols_are_refused() {
    let seg = sample(b"x");
    let mut buf = [0u8; 200];
    let n = seg.emit(&mut buf).unwrap();
    let fix_ip_checksum = |b: &mut [u8]| {
        b[10] = 0;
        b[11] = 0;
        let s = Sum16BitWords::new().add_slice(&b[..20]).ones_complement();
        b[10..12].copy_from_slice(&s.to_ne_bytes());
    };
    let mut frag = buf;
    frag[6] = 0x20; // more fragments, DF cleared
    fix_ip_checksum(&mut frag);
    assert_eq!(Segment::parse(&frag[..n]), Err(ParseError::Fragment));
    let mut udp = buf;
    udp[9] = 17;
    fix_ip_checksum(&mut udp);
    assert_eq!(Segment::parse(&udp[..n]), Err(ParseError::NotTcp(17)));
    assert_eq!(Segment::parse(&buf[..n - 1]), Err(ParseError::Ipv4));
}

proptest! {
    /// Every single flipped bit is caught by one of the two checksums (or makes the
    /// packet malformed): a corrupted packet is an error, never a panic or a segment.
    #[test]
    fn every_bit_flip_is_caught(len in 0usize..64, bit in 0usize..8 * 200) {
        let payload: Vec<u8> = (0..len as u8).collect();
        let seg = sample(&payload);
        let mut buf = [0u8; 300];
        let n = seg.emit(&mut buf).unwrap();
        let bit = bit % (8 * n);
        buf[bit / 8] ^= 1 << (bit % 8);
        prop_assert!(Segment::parse(&buf[..n]).is_err());
    }

    #[test]
    fn arbitrary_octets_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
        let _ = Segment::parse(&bytes);
    }

    /// Arbitrary option areas behind a valid header and checksum: parsed or refused.
    #[test]
    fn arbitrary_options_never_panic(opts in proptest::collection::vec(any::<u8>(), 0..=10)) {
        let _ = Options::parse(&opts);
        let mut words = opts.clone();
        words.resize(opts.len().div_ceil(4) * 4, 1);
        let _ = Options::parse(&words);
    }

    #[test]
    fn header_fields_round_trip(seq: u32, ack: u32, flags: u8, window: u16, sp: u16, dp: u16) {
        let seg = Segment {
            src: addr(9, sp),
            dst: addr(8, dp),
            seq: SeqNum(seq),
            ack: SeqNum(ack),
            flags: Flags::from_bits_retain(flags),
            window,
            options: Options::default(),
            payload: b"payload",
        };
        let mut buf = [0u8; 100];
        let n = seg.emit(&mut buf).unwrap();
        prop_assert_eq!(Segment::parse(&buf[..n]).unwrap(), seg);
    }
}

proptest! {
    /// The TCP checksum is etherparse's for every length (odd ones included) and
    /// content, and a segment carrying it sums to zero.
    #[test]
    fn tcp_checksum_matches_etherparse(data in proptest::collection::vec(any::<u8>(), 0..3000)) {
        let (src, dst) = ([10, 0, 0, 1], [192, 168, 7, 200]);
        let want = Sum16BitWords::new()
            .add_4bytes(src)
            .add_4bytes(dst)
            .add_2bytes([0, IpNumber::TCP.0])
            .add_2bytes((data.len() as u16).to_be_bytes())
            .add_slice(&data)
            .ones_complement();
        prop_assert_eq!(tcp_checksum(src, dst, &data), want);
        if data.len() >= 20 {
            let mut with = data.clone();
            with[16..18].copy_from_slice(&[0, 0]);
            let sum = tcp_checksum(src, dst, &with);
            with[16..18].copy_from_slice(&sum.to_ne_bytes());
            prop_assert_eq!(tcp_checksum(src, dst, &with), 0);
        }
    }
}

#[test]
fn headers_and_a_payload_apart_parse_as_the_whole_packet() {
    let payload: Vec<u8> = (0..=200).collect();
    let seg = sample(&payload);
    let mut whole = [0u8; 1500];
    let n = seg.emit_parts([&payload, &[]], &mut whole, false).unwrap();
    let mut head = [0u8; 100];
    let h = seg.emit_headers(payload.len(), &mut head).unwrap();
    assert_eq!(h + payload.len(), n);
    assert_eq!(head[..h], whole[..h], "the same headers, lengths included");
    let apart = Segment::parse_split(&head[..h], &payload).unwrap();
    assert_eq!(apart, Segment::parse_with(&whole[..n], false).unwrap());
    // A payload of another length than the headers say is refused.
    assert!(Segment::parse_split(&head[..h], &payload[1..]).is_err());
    assert!(Segment::parse_split(&head[..h - 1], &payload).is_err());
    let mut bad = head;
    bad[10] ^= 1;
    assert_eq!(
        Segment::parse_split(&bad[..h], &payload),
        Err(ParseError::Ipv4Checksum)
    );
}
