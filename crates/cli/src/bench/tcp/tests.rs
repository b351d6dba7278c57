use super::*;

#[test]
fn header_round_trip() {
    for (test, kind) in [
        (Test::ReadLat, TcpKind::BusyPoll),
        (Test::SendLat, TcpKind::Blocking),
        (Test::WriteBw, TcpKind::Batching),
        (Test::ReadBw, TcpKind::BusyPoll),
    ] {
        let h = Header {
            test,
            kind,
            size: 4096,
            msgs: 1100,
            duration_ms: 0,
            nodelay: true,
            counts: test == Test::WriteBw,
            streams: 1,
        };
        assert_eq!(Header::decode(&h.encode()).unwrap(), h);
    }
    let h = Header {
        test: Test::ReadLat,
        kind: TcpKind::BusyPoll,
        size: 4096,
        msgs: 1100,
        duration_ms: 0,
        nodelay: true,
        counts: false,
        streams: 1,
    };
    // Many streams travel; an older client's 0 means one.
    let many = Header { streams: 256, ..h };
    assert_eq!(Header::decode(&many.encode()).unwrap(), many);
    let mut b = h.encode();
    b[28..32].fill(0);
    assert_eq!(Header::decode(&b).unwrap().streams, 1);
    let mut b = h.encode();
    b[0] = 0;
    assert!(Header::decode(&b).is_err());
    // Batching is for streams only; unknown codes are refused.
    let mut b = h.encode();
    b[6] = 3;
    assert!(Header::decode(&b).is_err());
    b[6] = 9;
    assert!(Header::decode(&b).is_err());
}

/// An older client's header (discipline 0) gets what it used to.
#[test]
fn legacy_headers_keep_their_discipline() {
    let mut b = Header {
        test: Test::WriteBw,
        kind: TcpKind::Blocking,
        size: 64,
        msgs: 10,
        duration_ms: 0,
        nodelay: false,
        counts: false,
        streams: 1,
    }
    .encode();
    b[6] = 0;
    assert_eq!(Header::decode(&b).unwrap().kind, TcpKind::Blocking);
    b[4] = Test::SendLat.code();
    assert_eq!(Header::decode(&b).unwrap().kind, TcpKind::BusyPoll);
}

#[test]
fn baselines_per_test() {
    use TcpKind::*;
    assert_eq!(
        TcpKind::for_test(Test::WriteBw, false),
        [Blocking, BusyPoll, Batching]
    );
    assert_eq!(
        TcpKind::for_test(Test::SendLat, false),
        [Blocking, BusyPoll]
    );
    assert_eq!(TcpKind::for_test(Test::ReadBw, true), [Blocking, Batching]);
    assert_eq!(TcpKind::for_test(Test::ReadLat, true), [Blocking]);
}

/// A one-stream write_bw/send_bw baseline reports both sides' calls: every octet the
/// reader got in its reads, each message in at least one send; only the busy-polling
/// sides count empty reads and full sends (the blocking ones sleep instead), and the
/// buffered writer is not counted.
#[test]
fn a_one_stream_baseline_counts_its_calls() {
    use super::super::BenchCommand;
    const N: u64 = 300;
    const SIZE: usize = 65536;
    for test in ["write_bw", "send_bw"] {
        for kind in [TcpKind::BusyPoll, TcpKind::Blocking, TcpKind::Batching] {
            let argv = [test, "--loopback", "-s", "64K", "-n", "300"];
            let cfg = BenchCommand::parse_from(argv).unwrap().config().unwrap();
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let server =
                std::thread::spawn(move || serve(&l, Some(1), SameHostTcp::Tuned).unwrap());
            let (m, _) = client_round(&cfg, addr, SIZE, kind).unwrap();
            server.join().unwrap();
            let Measured::Bw(b) = m else { panic!() };
            assert_eq!(b.iterations, N);
            let Some(c) = b.calls else {
                assert_eq!(
                    kind,
                    TcpKind::Batching,
                    "{test}: only batching is not counted"
                );
                continue;
            };
            assert_eq!(c.read_octets, N * SIZE as u64, "{test} {kind:?}");
            // Each read takes at most a message (the reader's buffer).
            assert!(c.reads >= N, "{test} {kind:?}: {c:?}");
            assert!(c.sends >= N, "{test} {kind:?}: {c:?}");
            if kind == TcpKind::Blocking {
                assert_eq!((c.empty_reads, c.full_sends), (0, 0), "{test}: {c:?}");
            }
            let j = c.json(N);
            assert_eq!(
                j["octets_per_read"],
                serde_json::json!(c.read_octets as f64 / c.reads as f64)
            );
        }
    }
}

#[test]
fn a_reader_goes_on_where_its_last_read_ended() {
    assert_eq!(next_read_at(0, 10, 100), 10);
    assert_eq!(next_read_at(10, 89, 100), 99);
    assert_eq!(next_read_at(99, 1, 100), 0);
    assert_eq!(next_read_at(0, 100, 100), 0);
}

/// A stream reader with a buffer of the message size leaves every message at its own
/// offsets, however the stream is cut into reads (here: each piece sent only once the
/// reader has the one before, so every read returns one piece).
#[test]
fn a_stream_reader_places_each_message_at_its_own_offsets() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let msg: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
    let stream: Vec<u8> = msg.iter().chain(&msg).copied().collect();
    let (got_tx, got_rx) = std::sync::mpsc::channel::<u64>();
    let writer = std::thread::spawn(move || {
        let mut c = TcpStream::connect(addr).unwrap();
        // Each piece leaves at once, not held for the last one's ACK.
        c.set_nodelay(true).unwrap();
        let mut sent = 0;
        for piece in [333, 667, 500, 500] {
            c.write_all(&stream[sent..sent + piece]).unwrap();
            sent += piece;
            while got_rx.recv().unwrap() < sent as u64 {}
        }
    });
    let (s, _) = l.accept().unwrap();
    let mut buf = vec![0u8; msg.len()];
    let r = read_to_end_counting(&s, &mut buf, |total| got_tx.send(total).unwrap()).unwrap();
    writer.join().unwrap();
    assert_eq!(r.octets, 2000);
    assert_eq!(r.reads, 4);
    assert_eq!(buf, msg);
}
