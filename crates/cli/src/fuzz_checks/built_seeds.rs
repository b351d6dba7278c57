//! Seeds for the `qp_input` and `cm_responder` targets, built with the proto API itself
//! (peer QPs and MPA initiators), so that they are valid streams that reach deep: a
//! Send, a multi-FPDU Write, a Read Request, a Read Response, a Terminate, an RTR, with
//! and without CRC. `examples/fuzz_seeds.rs` writes them to `fuzz/seeds/`, and the
//! replay test checks that the committed files are still these.

use super::qp_input::{
    LOCAL, READ_SINK, READ_WR_ID, REGIONS, SOURCE, Setup, WRITE_TARGET, pattern, regions_tpt, stag,
};
use softrnic_proto::cm::{CrcPolicy, Initiator, MpaConfig, RtrTypes};
use softrnic_proto::qp::{Qp, QpConfig, QpParams, RtrKind, RxCtx, TxFpdu};
use softrnic_proto::tpt::Tpt;
use softrnic_proto::{PdId, QpId, SendWr, Sge};
use softrnic_wire::crc::crc32c;

/// A peer QP with the same regions (and so the same STags) as the QP under test, its
/// memory filled with `pattern(1, region)`.
struct Peer {
    qp: Qp,
    tpt: Tpt,
    mem: Vec<Vec<u8>>,
}

impl Peer {
    fn new(params: QpParams) -> Peer {
        let tpt = regions_tpt();
        let mem = (0..REGIONS.len()).map(|i| pattern(1, i)).collect();
        let mut qp = Qp::new(QpConfig {
            id: QpId(9),
            pd: PdId(1),
            sq_depth: 16,
            rq_depth: 16,
        });
        qp.connect(params).expect("a new QP connects");
        Peer { qp, tpt, mem }
    }

    fn post(&mut self, wr: SendWr) {
        self.qp.post_send(wr, &self.tpt).expect("seed post");
    }

    /// Every FPDU the peer has to send, serialized.
    fn drain(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut f = TxFpdu::default();
        while self.qp.poll_transmit(&mut f) {
            if f.marker_pos.is_some() {
                let mut payload = Vec::new();
                for c in &f.chunks {
                    let m = &self.mem[c.region.0 as usize];
                    payload.extend_from_slice(&m[c.offset as usize..c.offset as usize + c.len]);
                }
                f.emit_marked(&payload, &mut out);
                self.qp.transmit_done();
                continue;
            }
            let start = out.len();
            out.extend_from_slice(f.header_bytes());
            for c in &f.chunks {
                let m = &self.mem[c.region.0 as usize];
                out.extend_from_slice(&m[c.offset as usize..c.offset as usize + c.len]);
            }
            out.resize(out.len() + f.pad_len(), 0);
            let (t, n) = f.trailer(crc32c(&out[start..]));
            out.extend_from_slice(&t[f.pad_len()..n]);
            self.qp.transmit_done();
        }
        out
    }

    fn feed(&mut self, bytes: &[u8]) {
        let mem = &mut self.mem;
        self.qp
            .handle_input(bytes, &mut RxCtx::new(&self.tpt), &mut |c, d| {
                let at = c.offset as usize;
                mem[c.region.0 as usize][at..at + d.len()].copy_from_slice(d);
            });
    }
}

fn params(crc: bool, max_fpdu: usize) -> QpParams {
    QpParams {
        crc,
        max_fpdu,
        ..QpParams::default()
    }
}

fn sge(region: usize, offset: u64, len: u32) -> Sge {
    Sge {
        addr: REGIONS[region].base + offset,
        len,
        lkey: stag(region),
    }
}

fn send(wr_id: u64, sge: Sge, invalidate: Option<u32>) -> SendWr {
    let wr = SendWr::send(wr_id, sge);
    match invalidate {
        Some(stag) => wr.invalidate(stag),
        None => wr,
    }
}

fn write(wr_id: u64, sge: Sge, region: usize, offset: u64) -> SendWr {
    SendWr::write(wr_id, sge, REGIONS[region].base + offset, stag(region))
}

fn read(wr_id: u64, sink: Sge, region: usize, offset: u64) -> SendWr {
    SendWr::read(wr_id, sink, REGIONS[region].base + offset, stag(region))
}

/// A stream of what a peer with these parameters sends after `wrs` are posted.
fn sent(p: QpParams, wrs: impl IntoIterator<Item = SendWr>) -> Vec<u8> {
    let mut peer = Peer::new(p);
    for wr in wrs {
        peer.post(wr);
    }
    peer.drain()
}

/// The `qp_input` seeds: (name, octets).
pub fn qp_input_seeds() -> Vec<(String, Vec<u8>)> {
    let mut v = Vec::new();
    for crc in [false, true] {
        let setup = Setup {
            crc,
            // With CRC, the stream also arrives in pieces of 1 to 8 octets.
            chunking: if crc { 3 } else { 0 },
            chunk_seed: 7,
            ..Setup::default()
        };
        let tag = if crc { "crc" } else { "plain" };
        let mut seed = |name: &str, setup: Setup, stream: Vec<u8>| {
            let mut s = setup.to_bytes().to_vec();
            s.extend_from_slice(&stream);
            v.push((format!("{name}-{tag}"), s));
        };
        // A Send of 700 octets in two FPDUs, into the first receive.
        let stream = sent(params(crc, 512), [send(1, sge(SOURCE, 0, 700), None)]);
        seed("send", setup, stream);
        // A Write of 3000 octets in seven FPDUs.
        let wr = write(1, sge(SOURCE, 0, 3000), WRITE_TARGET, 16);
        seed("write", setup, sent(params(crc, 512), [wr]));
        // A Read Request for 1000 octets of the source region: answered in responses.
        let wr = read(1, sge(LOCAL, 0, 1000), SOURCE, 24);
        seed("read_request", setup, sent(params(crc, 1448), [wr]));
        // The responses to the QP's own Read, as a peer with the same layout sends them.
        let with_read = Setup {
            post_read: true,
            ..setup
        };
        let sink = sge(LOCAL, READ_SINK.0, READ_SINK.1);
        let request = sent(params(crc, 1448), [read(READ_WR_ID, sink, SOURCE, 0)]);
        let mut responder = Peer::new(params(crc, 1448));
        responder.feed(&request);
        seed("read_response", with_read, responder.drain());
        // A Terminate: the peer got a Send with no receive posted.
        let mut victim = Peer::new(params(crc, 1448));
        victim.feed(&sent(
            params(crc, 1448),
            [send(1, sge(SOURCE, 0, 10), None)],
        ));
        seed("terminate", setup, victim.drain());
        // An RTR (zero-length Write) before a Send, for a QP that awaits it.
        let rtr = QpParams {
            send_rtr: Some(RtrKind::Write),
            ..params(crc, 1448)
        };
        let awaits = Setup {
            await_rtr: true,
            post_send_write: true,
            ..setup
        };
        seed(
            "rtr_send",
            awaits,
            sent(rtr, [send(1, sge(SOURCE, 0, 50), None)]),
        );
        // Send, Write, Read Request, a Send invalidating the Write target, then a Write
        // to it, which the QP must refuse with a Terminate.
        let mixed = [
            send(1, sge(SOURCE, 0, 300), None),
            write(2, sge(SOURCE, 0, 200), WRITE_TARGET, 0),
            read(3, sge(LOCAL, 0, 100), SOURCE, 0),
            send(4, sge(SOURCE, 300, 20), Some(stag(WRITE_TARGET))),
            write(5, sge(SOURCE, 0, 8), WRITE_TARGET, 0),
        ];
        let busy = Setup {
            post_send_write: true,
            post_read: true,
            ..setup
        };
        seed("mixed", busy, sent(params(crc, 1448), mixed.clone()));
        // The same with RFC 5044 markers both ways, FPDUs of 512 octets (a marker in
        // most of them) and the stream cut into pieces of 1 to 8 octets.
        let marked = Setup {
            markers: true,
            max_fpdu_choice: 2,
            chunking: 3,
            ..busy
        };
        let p = QpParams {
            markers_tx: true,
            markers_rx: true,
            ..params(crc, 512)
        };
        seed("mixed_markers", marked, sent(p, mixed));
        let wr = write(1, sge(SOURCE, 0, 3000), WRITE_TARGET, 16);
        seed("write_markers", marked, sent(p, [wr]));
    }
    v
}

/// The `cm_responder` seeds: a mode octet (see [`super::cm_responder`]) and an MPA
/// Request from the proto initiator.
pub fn cm_responder_seeds() -> Vec<(String, Vec<u8>)> {
    let base = MpaConfig::default();
    let p2p = |rtr_types| MpaConfig {
        peer_to_peer: true,
        rtr_types,
        private_data: b"seed".to_vec(),
        ..MpaConfig::default()
    };
    // Responder modes: 0x60 revision 2, CRC off, RTR Write|Read; 0x64 the same with a
    // strict CRC policy; 0x68 peer-to-peer; 0x28 peer-to-peer accepting Write only;
    // 0x48 peer-to-peer accepting Read only. The second octet is IRD/ORD.
    let configs = [
        ("rev2", [0x60, 0x44], base.clone()),
        (
            "rev1-crc",
            [0x64, 0x44],
            MpaConfig {
                revision: 1,
                crc: CrcPolicy::Required,
                ..base.clone()
            },
        ),
        ("rev2-strict-refused", [0x64, 0x44], base),
        ("p2p-read", [0x68, 0x44], p2p(RtrTypes::READ)),
        ("p2p-send-refused", [0x28, 0x44], p2p(RtrTypes::SEND)),
        ("p2p-read-no-ird", [0x48, 0x00], p2p(RtrTypes::READ)),
    ];
    configs
        .into_iter()
        .map(|(name, mode, cfg)| {
            let init = Initiator::new(cfg).expect("seed initiator config");
            let mut s = mode.to_vec();
            s.extend_from_slice(&init.request());
            (name.to_string(), s)
        })
        .collect()
}
