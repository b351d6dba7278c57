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
