//! Regenerates the committed fuzz seed corpus (`fuzz/seeds/`) from the siw captures:
//! MPA frames, one ULPDU per opcode seen, FPDU stream excerpts, and Terminate bodies;
//! and the `qp_input` and `cm_responder` seeds that the proto API builds.
//!
//! `cargo run -p softrnic-cli --example fuzz_seeds -- ../shared/testdata/siw fuzz/seeds`

use softrnic_cli::decode::{Event, decode_all, stream};
use softrnic_wire::mpa;
use softrnic_wire::terminate::{
    Layer, TerminateCause, TerminateLayout, TerminateRepr, TerminatedDdp,
};
use std::collections::BTreeSet;
use std::path::Path;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (src, dst) = match &args[..] {
        [_, s, d] => (Path::new(s).to_path_buf(), Path::new(d).to_path_buf()),
        _ => {
            eprintln!("usage: fuzz_seeds CAPTURE_DIR SEED_DIR");
            std::process::exit(2);
        }
    };
    let write = |target: &str, name: &str, data: &[u8]| {
        let dir = dst.join(target);
        std::fs::create_dir_all(&dir).expect("create seed dir");
        std::fs::write(dir.join(name), data).expect("write seed");
    };
    let mut paths: Vec<_> = std::fs::read_dir(&src)
        .expect("read capture dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    paths.sort();
    let mut seen_ops = BTreeSet::new();
    for p in &paths {
        let stem = p.file_stem().unwrap().to_string_lossy().to_string();
        let conns = softrnic_capture::read_capture(p).expect("capture");
        for d in decode_all(&conns) {
            let c = &conns[d.index];
            for e in &d.events {
                match e {
                    Event::Mpa(m) => write(
                        "mpa_frame",
                        &format!("{stem}-{}-{:?}", d.index, m.kind),
                        &stream(c, m.dir)[m.range.clone()],
                    ),
                    Event::Fpdu(f) if seen_ops.insert((f.header.opcode, f.ulpdu_len > 100)) => {
                        let s = &stream(c, f.dir)[f.range.clone()];
                        write(
                            "ulpdu",
                            &format!("{stem}-{}", f.header.opcode.name()),
                            &s[2..2 + f.ulpdu_len],
                        );
                    }
                    _ => {}
                }
            }
            // The first 3 KiB of FPDUs of each direction, with the CRC mode byte.
            for (dir, start) in [
                (
                    softrnic_cli::decode::Dir::ToServer,
                    d.mpa(mpa::MpaFrameKind::Request),
                ),
                (
                    softrnic_cli::decode::Dir::ToClient,
                    d.mpa(mpa::MpaFrameKind::Reply),
                ),
            ] {
                let Some(start) = start else { continue };
                let s = &stream(c, dir)[start.range.end..];
                if s.is_empty() {
                    continue;
                }
                let mut seed = vec![if d.crc { 2u8 } else { 0 }];
                seed.extend_from_slice(&s[..s.len().min(3072)]);
                write(
                    "fpdu_stream",
                    &format!("{stem}-{}-{}", d.index, dir.label().replace("->", "2")),
                    &seed,
                );
            }
        }
    }
    // Streams with markers and CRC, which siw never sends.
    let mut seed = vec![3u8];
    let mut pos = 0u64;
    let mut out = vec![0u8; 4096];
    for len in [20usize, 600, 1442, 3] {
        let n = mpa::emit_fpdu(&[&vec![0x5a; len]], true, Some(pos), &mut out).unwrap();
        seed.extend_from_slice(&out[..n]);
        pos += n as u64;
    }
    write("fpdu_stream", "synthetic-markers-crc", &seed);
    // Terminate bodies: bare, with a copied tagged header, with a Read Request header.
    let tagged = [0xc1u8, 0x40, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let rr = [7u8; 28];
    for (name, t) in [
        (
            "bare",
            TerminateRepr {
                cause: TerminateCause::new(Layer::Llp, 0, 2),
                segment_len_valid: false,
                ddp: None,
                rdmap: None,
                reserved: 0,
                layout: TerminateLayout::Rfc5040,
            },
        ),
        (
            "tagged",
            TerminateRepr {
                cause: TerminateCause::new(Layer::Ddp, 1, 0),
                segment_len_valid: true,
                ddp: Some(TerminatedDdp {
                    segment_len: 14,
                    header: &tagged,
                }),
                rdmap: None,
                reserved: 0,
                layout: TerminateLayout::Rfc5040,
            },
        ),
        (
            "rdmap",
            TerminateRepr {
                cause: TerminateCause::new(Layer::Rdmap, 1, 2),
                segment_len_valid: false,
                ddp: None,
                rdmap: Some(&rr),
                reserved: 0,
                layout: TerminateLayout::Rfc5040,
            },
        ),
    ] {
        let mut b = vec![0u8; t.buffer_len()];
        t.emit(&mut b).unwrap();
        write("terminate", name, &b);
    }
    // The capture target is seeded with the capture files themselves (pass their folder
    // as a second corpus directory); the two smallest with FPDUs (rev 1; CRC) are kept
    // here so that the replay in `cargo test` decodes real connections, and one small
    // synthetic header with no packet.
    write(
        "capture",
        "empty-pcap",
        &[
            0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0, 0,
            0,
        ],
    );
    for name in ["siw-rping-mpav1", "siw-rping-crc"] {
        let pcap = std::fs::read(src.join(format!("{name}.pcap"))).expect("small siw capture");
        write("capture", name, &pcap);
    }
    // Streams and Requests built with the proto API itself.
    for (name, seed) in softrnic_cli::fuzz_checks::built_seeds::qp_input_seeds() {
        write("qp_input", &name, &seed);
    }
    for (name, seed) in softrnic_cli::fuzz_checks::built_seeds::cm_responder_seeds() {
        write("cm_responder", &name, &seed);
    }
    println!("seeds written to {}", dst.display());
}
