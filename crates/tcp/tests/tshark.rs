//! tshark reads a capture of the simulated wire: a clean run shows no TCP expert
//! warning or error at all; an impaired run shows only what the impairments explain
//! (retransmissions, out-of-order and duplicate segments, duplicate ACKs, D-SACK
//! blocks reporting the duplicates, segments not captured, bad checksums of corrupted
//! packets). Skips loudly without tshark.

mod common;

use common::*;
use softrnic_tcp::sim::{Impairments, WireStats};
use softrnic_tcp::{Config, Segment};
use softrnic_testkit::{record, skip_test};
use std::path::PathBuf;
use std::process::Command;

/// What a captured run left: the capture file and the counts that explain it.
struct Run {
    path: PathBuf,
    /// Segments both connections sent again.
    retransmitted: u64,
    /// D-SACK blocks both connections sent.
    dsacks: u64,
    wire: WireStats,
}

/// Runs a transfer both ways and a close over the wire, captured.
fn captured_run(name: &str, imp: Impairments, seed: u64) -> Run {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.pcap"));
    let file = std::fs::File::create(&path).expect("capture file");
    let big = Config {
        send_buffer: 1 << 20,
        recv_buffer: 1 << 20,
        ..cfg()
    };
    let mut n = Net::sim(big.clone(), big, imp, seed);
    let wire = n.wire.as_mut().unwrap();
    wire.capture(Box::new(std::io::BufWriter::new(file)))
        .unwrap();
    let (x, y) = (pattern(300_000, 1), pattern(50_000, 2));
    n.a.outbox.extend(&x);
    n.b.outbox.extend(&y);
    n.a.close_when_sent = true;
    n.b.close_when_sent = true;
    n.run_out(3_600_000 * MS);
    assert_bytes(&n.b.got, &x);
    assert_bytes(&n.a.got, &y);
    let wire = n.wire.as_mut().unwrap();
    wire.finish_capture().unwrap();
    Run {
        path,
        retransmitted: n.a.conn.stats().retransmitted_segments
            + n.b.conn.stats().retransmitted_segments,
        dsacks: n.a.conn.stats().dsacks_out + n.b.conn.stats().dsacks_out,
        wire: wire.stats().clone(),
    }
}

/// One expert item: (frame number, severity, message).
type Expert = (u32, String, String);

/// tshark's expert items for the capture, or None (after a loud skip) without tshark.
fn expert_items(path: &PathBuf) -> Option<Vec<Expert>> {
    let out = match Command::new("tshark")
        .args(["-n", "-r"])
        .arg(path)
        .args([
            "-o",
            "tcp.check_checksum:TRUE",
            "-o",
            "ip.check_checksum:TRUE",
            "-T",
            "fields",
            "-E",
            "separator=|",
            "-E",
            "occurrence=a",
            "-E",
            "aggregator=;",
            "-e",
            "frame.number",
            "-e",
            "_ws.expert.severity",
            "-e",
            "_ws.expert.message",
        ])
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            skip_test(
                "tshark check of the simulated wire",
                &format!("tshark did not run: {e}"),
            );
            return None;
        }
    };
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut items = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut f = line.split('|');
        let frame: u32 = f.next().unwrap().parse().unwrap();
        let sev: Vec<&str> = f
            .next()
            .unwrap_or("")
            .split(';')
            .filter(|s| !s.is_empty())
            .collect();
        let msg: Vec<&str> = f
            .next()
            .unwrap_or("")
            .split(';')
            .filter(|s| !s.is_empty())
            .collect();
        for (s, m) in sev.iter().zip(msg.iter()) {
            items.push((frame, s.to_string(), m.to_string()));
        }
    }
    record("ran");
    Some(items)
}

const CHAT: &str = "2097152";
const NOTE: &str = "4194304";
const WARN: &str = "6291456";
const ERROR: &str = "8388608";

fn count(items: &[Expert], sev: &str, what: &str) -> u64 {
    items
        .iter()
        .filter(|(_, s, m)| s == sev && m.contains(what))
        .count() as u64
}

#[test]
fn a_clean_capture_has_no_tcp_warning() {
    let run = captured_run("tcp-clean", Impairments::default(), 1);
    let Some(items) = expert_items(&run.path) else {
        return;
    };
    for (frame, sev, msg) in &items {
        let expected = (sev == CHAT
            && (msg.starts_with("Connection establish") || msg == "Connection finish (FIN)"))
            || (sev == NOTE && msg.contains("connection closing"));
        assert!(expected, "frame {frame}: {sev} {msg}");
    }
    assert_eq!(count(&items, CHAT, "Connection finish (FIN)"), 2);
}

#[test]
fn loss_reordering_and_duplicates_explain_every_warning() {
    let imp = Impairments {
        loss: 0.03,
        reorder: 0.03,
        duplicate: 0.02,
        jitter: MS,
        ..Impairments::default()
    };
    let run = captured_run("tcp-impaired", imp, 7);
    let Some(items) = expert_items(&run.path) else {
        return;
    };
    let w = &run.wire;
    assert!(w.lost > 0 && w.reordered > 0 && w.duplicated > 0, "{w:?}");
    const ALLOWED: [&str; 10] = [
        "Connection establish",
        "Connection finish (FIN)",
        "connection closing",
        "retransmission",
        "Duplicate ACK",
        "out-of-order segment",
        "Previous segment(s) not captured",
        "ACKed segment that wasn't captured",
        "window specified by the receiver is now completely full",
        "D-SACK Sequence",
    ];
    for (frame, sev, msg) in &items {
        assert!(sev != ERROR, "frame {frame}: {msg}");
        assert!(
            ALLOWED.iter().any(|a| msg.contains(a)),
            "frame {frame}: {sev} {msg}"
        );
    }
    // Each flagged retransmission is one we made, a duplicate the wire made or a
    // packet it held back; each gap tshark saw, a packet lost or held back.
    let rtx = count(&items, NOTE, "retransmission");
    assert!(
        rtx >= run.retransmitted.saturating_sub(w.lost),
        "{rtx} flagged, {} sent",
        run.retransmitted
    );
    assert!(
        rtx <= run.retransmitted + w.duplicated + w.reordered,
        "{rtx} vs {w:?}"
    );
    let gaps = count(&items, WARN, "not captured");
    eprintln!(
        "rtx flagged {rtx}, ours {}, gaps {gaps}, {w:?}",
        run.retransmitted
    );
    assert!(gaps <= w.lost + w.reordered, "{gaps} vs {w:?}");
    // tshark reads our D-SACK blocks as D-SACK: every one that arrived (a duplicated
    // packet shows twice), and the wire's duplicates made some.
    let dsacks = count(&items, WARN, "D-SACK");
    eprintln!("D-SACK flagged {dsacks}, sent {}", run.dsacks);
    assert!(dsacks > 0, "{w:?}");
    assert!(
        dsacks + w.lost >= run.dsacks && dsacks <= run.dsacks + w.duplicated,
        "{dsacks} flagged, {} sent, {w:?}",
        run.dsacks
    );
}

#[test]
fn corrupted_packets_are_the_only_errors() {
    let imp = Impairments {
        corrupt: 0.05,
        ..Impairments::default()
    };
    let run = captured_run("tcp-corrupted", imp, 3);
    let Some(items) = expert_items(&run.path) else {
        return;
    };
    // The frames our own parser refuses: the corrupted ones.
    let bytes = std::fs::read(&run.path).unwrap();
    let mut reader = pcap_file::pcap::PcapReader::new(&bytes[..]).unwrap();
    let mut corrupted = std::collections::BTreeSet::new();
    let mut frame = 0u32;
    while let Some(p) = reader.next_packet() {
        frame += 1;
        if Segment::parse(&p.unwrap().data).is_err() {
            corrupted.insert(frame);
        }
    }
    assert_eq!(corrupted.len() as u64, run.wire.corrupted);
    let errors: std::collections::BTreeSet<u32> = items
        .iter()
        .filter(|(_, s, _)| s == ERROR)
        .map(|(f, _, _)| *f)
        .collect();
    assert_eq!(
        errors, corrupted,
        "tshark's errors are on exactly the corrupted frames"
    );
}
