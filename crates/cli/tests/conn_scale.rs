//! Ten thousand connected QP pairs in one process, each completing an RDMA Write and a
//! Send whose octets are checked at the receiver, through `softrnic conn-scale`'s own
//! code (`run_pairs`).
//!
//! Each pair holds two sockets, so RLIMIT_NOFILE decides how many fit: the run raises
//! the soft limit to the hard one (and the hard one where it may), and with fewer
//! descriptors than 10,000 pairs need it runs as many as fit and says so, loudly, in
//! the test output. On the development machine the hard limit is 20000: 9989 pairs,
//! 3.4 s in a debug build (1.6 s of it connecting).

use softrnic_cli::conn_scale::{ScaleOpts, run_pairs};
use softrnic_rnic::ProgressMode;

const PAIRS: usize = 10_000;

#[test]
fn ten_thousand_pairs_each_complete_a_verified_write_and_send() {
    let o = ScaleOpts {
        connectors: 8,
        progress: ProgressMode::Engine,
        engine_threads: 1,
    };
    let r = run_pairs(PAIRS, &o).expect("every pair connects and moves its data");
    match &r.note {
        Some(n) => eprintln!("\n*** conn-scale test: {n} ***\n"),
        None => assert_eq!(r.pairs, PAIRS),
    }
    eprintln!(
        "conn-scale test: {} pairs connected in {:.2} s, each completed a Write and a Send, verified",
        r.pairs, r.connect_sec
    );
    assert_eq!(
        r.verified, r.pairs,
        "every pair's Write and Send arrived exact"
    );
    assert_eq!(r.buffer_bytes_held, 0, "idle QPs hold no data-path buffer");
}
