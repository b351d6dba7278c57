//! Micro-benchmarks of the TPT hit path: every tagged placement, Read source and local
//! SGE goes through `Tpt::check_remote` or `Tpt::check_local` before an octet moves, so
//! their cost is paid per FPDU and per work request. Measured with a few regions (16)
//! and with many (10,000), to show that the lookup does not grow with the table.
//!
//! `cargo bench -p softrnic-proto --bench tpt`.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use softrnic_proto::tpt::{RemoteAccess, Tpt, TptEntry};
use softrnic_proto::{Access, PdId, RegionId, STag};
use std::hint::black_box;

const REGION_LEN: u64 = 1 << 20;
const PD: PdId = PdId(1);

/// A table of `n` 1 MiB regions, each at its own base address; returns the STags.
fn table(n: u32) -> (Tpt, Vec<STag>) {
    let tpt = Tpt::new();
    let stags = (0..n)
        .map(|i| {
            tpt.insert(TptEntry {
                pd: PD,
                key: (i % 251) as u8,
                base: 0x7f00_0000_0000 + u64::from(i) * REGION_LEN,
                len: REGION_LEN,
                access: Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
                region: RegionId(i),
                valid: true,
            })
            .expect("TPT has room")
        })
        .collect();
    (tpt, stags)
}

/// Base address of the region an STag names (its tagged offsets start there).
fn base(tpt: &Tpt, stag: STag) -> u64 {
    tpt.get(stag).expect("registered").base
}

fn tpt(c: &mut Criterion) {
    let mut g = c.benchmark_group("tpt");
    for n in [16u32, 10_000] {
        let (tpt, stags) = table(n);
        // Cycle through 16 STags spread over the table, so the hit path is measured
        // with the lookups a QP with a few busy regions does, not one hot entry.
        let probes: Vec<(STag, u64)> = (0..16)
            .map(|i| {
                let s = stags[(i * stags.len()) / 16];
                (s, base(&tpt, s) + 4096)
            })
            .collect();
        let mut i = 0usize;
        g.bench_function(BenchmarkId::new("check_remote_write", n), |b| {
            b.iter(|| {
                let (stag, to) = probes[i & 15];
                i = i.wrapping_add(1);
                tpt.check_remote(
                    black_box(stag),
                    black_box(to),
                    1448,
                    Access::REMOTE_WRITE,
                    PD,
                    RemoteAccess::TaggedPlacement,
                )
                .expect("access allowed")
            })
        });
        g.bench_function(BenchmarkId::new("check_local", n), |b| {
            b.iter(|| {
                let (stag, addr) = probes[i & 15];
                i = i.wrapping_add(1);
                tpt.check_local(
                    black_box(stag),
                    black_box(addr),
                    65536,
                    Access::LOCAL_WRITE,
                    PD,
                )
                .expect("access allowed")
            })
        });
    }
    g.finish();
}

criterion_group!(benches, tpt);
criterion_main!(benches);
