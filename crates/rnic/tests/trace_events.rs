//! Tracing events fire with what they describe: a collector installed for the whole
//! process records every event, and one connection's life (MPA exchange, states, a
//! Terminate for a Send without a receive buffer, the close) is checked in it.

use softrnic_rnic::*;
use softrnic_wire::terminate::{Layer, ddp_code, ddp_etype};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber, span};

const WAIT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
struct Recorded {
    target: String,
    level: Level,
    message: String,
    fields: BTreeMap<String, String>,
}

impl Recorded {
    fn field(&self, name: &str) -> &str {
        self.fields
            .get(name)
            .unwrap_or_else(|| panic!("no field {name} in {self:?}"))
    }
}

/// Records every event, spans ignored.
#[derive(Default, Clone)]
struct Collector(Arc<Mutex<Vec<Recorded>>>);

struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
        self.0.insert(f.name().to_string(), format!("{v:?}"));
    }
    fn record_str(&mut self, f: &Field, v: &str) {
        self.0.insert(f.name().to_string(), v.to_string());
    }
}

impl Subscriber for Collector {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }
    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
    fn event(&self, e: &Event<'_>) {
        let mut f = Fields(BTreeMap::new());
        e.record(&mut f);
        let message = f.0.remove("message").unwrap_or_default();
        self.0.lock().unwrap().push(Recorded {
            target: e.metadata().target().to_string(),
            level: *e.metadata().level(),
            message,
            fields: f.0,
        });
    }
    fn enter(&self, _: &span::Id) {}
    fn exit(&self, _: &span::Id) {}
}

/// The events of device `dev` with message `message`.
fn find(all: &[Recorded], dev: u32, message: &str) -> Vec<Recorded> {
    let dev = dev.to_string();
    all.iter()
        .filter(|e| e.message == message && e.fields.get("dev") == Some(&dev))
        .cloned()
        .collect()
}

/// The QP state changes device `dev` reported for QP 1, as (from, to).
fn states(all: &[Recorded], dev: u32) -> Vec<(String, String)> {
    find(all, dev, "QP state")
        .into_iter()
        .filter(|e| e.field("qp") == "1")
        .map(|e| (e.field("from").to_string(), e.field("to").to_string()))
        .collect()
}

fn wait_for(dev: &Device, pick: impl Fn(&AsyncEvent) -> bool) -> AsyncEvent {
    dev.wait_event_matching(WAIT, pick)
        .unwrap_or_else(|| panic!("no such event within {WAIT:?}"))
}

#[test]
fn a_connection_life_is_traced() {
    let collector = Collector::default();
    tracing::subscriber::set_global_default(collector.clone()).unwrap();

    let mut acfg = DeviceConfig::default();
    acfg.mpa.crc = CrcPolicy::Required;
    acfg.mpa.ird = 5;
    acfg.mpa.ord = 3;
    let mut bcfg = DeviceConfig::default();
    bcfg.mpa.ird = 2;
    bcfg.mpa.ord = 7;
    let open = |cfg| {
        let dev = Device::open(cfg).unwrap();
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(16).unwrap();
        let qp = dev
            .create_qp(
                &pd,
                QpInit {
                    send_cq: &cq,
                    recv_cq: &cq,
                    sq_depth: 4,
                    rq_depth: 4,
                },
            )
            .unwrap();
        (dev, pd, cq, qp)
    };
    let (a, apd, _acq, aqp) = open(acfg);
    let (b, _bpd, _bcq, bqp) = open(bcfg);
    assert_ne!(a.serial(), b.serial());
    let l = b.listen("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::scope(|s| {
        let h = s.spawn(|| l.accept().unwrap().accept(&bqp, b"hi").unwrap());
        a.connect(addr, &aqp, b"hello").unwrap();
        h.join().unwrap();
    });
    // A Send that finds no receive buffer: b terminates, a receives the Terminate.
    let src = apd.alloc_mr(64, Access::empty()).unwrap();
    aqp.post_send(SendWr::send(1, src.sge(0, 64))).unwrap();
    let want = TerminateCause::new(
        Layer::Ddp,
        ddp_etype::UNTAGGED_BUFFER,
        ddp_code::untagged::NO_BUFFER,
    );
    for (dev, remote) in [(&b, false), (&a, true)] {
        let e = wait_for(dev, |e| matches!(e, AsyncEvent::QpFatal { .. }));
        assert_eq!(
            e,
            AsyncEvent::QpFatal {
                qp: QpId(1),
                cause: want,
                remote
            }
        );
        wait_for(dev, |e| matches!(e, AsyncEvent::Disconnected { .. }));
    }
    // Events are posted (and traced) before they are queued: all are in.
    let all = collector.0.lock().unwrap().clone();
    let (ad, bd) = (a.serial(), b.serial());

    // The MPA exchange, each frame on the side that sent or received it.
    let [req] = &find(&all, ad, "MPA Request sent")[..] else {
        panic!("{all:#?}")
    };
    assert_eq!(req.target, "softrnic_rnic::cm");
    assert_eq!(
        (req.field("ird"), req.field("ord"), req.field("crc")),
        ("5", "3", "Required")
    );
    assert_eq!(req.field("private_data"), "5");
    let [got] = &find(&all, bd, "MPA Request received")[..] else {
        panic!("{all:#?}")
    };
    assert_eq!(
        (got.field("crc"), got.field("ird"), got.field("ord")),
        ("true", "5", "3")
    );
    // Negotiated: CRC on (a asked), each side's IRD its own, ORD = min(own ORD, peer IRD).
    let [rep] = &find(&all, bd, "MPA Reply sent: accepted")[..] else {
        panic!("{all:#?}")
    };
    assert_eq!(
        (rep.field("crc"), rep.field("ird"), rep.field("ord")),
        ("true", "2", "5")
    );
    assert_eq!(rep.level, Level::INFO);
    let [est] = &find(&all, ad, "MPA Reply received: accepted")[..] else {
        panic!("{all:#?}")
    };
    assert_eq!(
        (est.field("crc"), est.field("ird"), est.field("ord")),
        ("true", "5", "2")
    );
    assert_eq!(est.field("private_data"), "2");

    // The Terminate, sent by b and received by a, with its layer, type and code.
    for (dev, what) in [(bd, "Terminate sent"), (ad, "Terminate received")] {
        let [t] = &find(&all, dev, what)[..] else {
            panic!("{what}: {all:#?}")
        };
        assert_eq!(t.target, "softrnic_rnic::qp");
        assert_eq!(t.level, Level::WARN);
        assert_eq!(t.field("qp"), "1");
        assert_eq!(
            (t.field("layer"), t.field("etype"), t.field("code")),
            (Layer::Ddp.to_bits().to_string().as_str(), "2", "2")
        );
        assert_eq!(find(&all, dev, "connected").len(), 1);
        assert_eq!(find(&all, dev, "disconnected").len(), 1);
    }

    // Each QP's states, in order: connected, then through Terminate to Error.
    for dev in [ad, bd] {
        let s = states(&all, dev);
        assert_eq!(s.first(), Some(&("Idle".into(), "Rts".into())), "{s:?}");
        assert_eq!(s.last().map(|x| x.1.as_str()), Some("Error"), "{s:?}");
        assert!(s.windows(2).all(|w| w[0].1 == w[1].0), "a chain: {s:?}");
    }
    assert!(all.iter().all(|e| e.target.starts_with("softrnic_rnic::")));
}
