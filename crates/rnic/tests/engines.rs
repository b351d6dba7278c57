//! Engines bound to CPUs and completion vectors: a QP is driven by the engine of its
//! receive CQ's vector, an engine given a CPU runs there (as the kernel reports it in
//! /proc), and CPUs or vectors that cannot be had are error values.

use softrnic_rnic::*;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

/// A field of `/proc/self/task/<tid>/status`.
fn task_status(tid: i32, field: &str) -> String {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in the status of {tid}"))
        .trim()
        .to_string()
}

/// The CPU a thread last ran on (field 39 of `/proc/self/task/<tid>/stat`).
fn last_cpu(tid: i32) -> usize {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces) start with field 3.
    let rest = &s[s.rfind(')').unwrap() + 2..];
    rest.split(' ').nth(39 - 3).unwrap().parse().unwrap()
}

fn engine_mode(engines: usize) -> DeviceConfig {
    DeviceConfig {
        engine_threads: engines,
        progress: ProgressMode::Engine,
        ..DeviceConfig::default()
    }
}

/// Sends `data` from a fresh peer device into a QP on `dev` whose CQs are on `vector`,
/// and returns what landed. Only `dev`'s engines can drive that QP's receive side: the
/// device is in engine progress mode, and the Send leaves after both sides connected.
fn receive_on_vector(dev: &Device, vector: usize, data: &[u8]) -> Vec<u8> {
    let pd = dev.alloc_pd();
    let cq = dev.create_cq_on(16, vector).unwrap();
    assert_eq!(cq.vector(), vector);
    let init = |cq| QpInit {
        send_cq: cq,
        recv_cq: cq,
        sq_depth: 4,
        rq_depth: 4,
    };
    let qp = dev.create_qp(&pd, init(&cq)).unwrap();
    let dst = pd.alloc_mr(data.len(), Access::LOCAL_WRITE).unwrap();
    qp.post_recv(RecvWr {
        wr_id: 7,
        sgl: [dst.sge(0, data.len())].into(),
    })
    .unwrap();

    let peer = Device::open(DeviceConfig::default()).unwrap();
    let ppd = peer.alloc_pd();
    let pcq = peer.create_cq(16).unwrap();
    let pqp = peer.create_qp(&ppd, init(&pcq)).unwrap();
    let listener = dev.listen("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::scope(|s| {
        let h = s.spawn(|| listener.accept().unwrap().accept(&qp, b"").unwrap());
        peer.connect(addr, &pqp, b"").unwrap();
        h.join().unwrap();
    });
    let src = ppd.alloc_mr(data.len(), Access::empty()).unwrap();
    src.write(0, data).unwrap();
    pqp.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Send {
            solicited: false,
            invalidate: None,
        },
        sgl: [src.sge(0, data.len())].into(),
        signaled: true,
        fence: false,
    })
    .unwrap();
    let got = cq.wait_for(1, WAIT);
    assert_eq!(got.len(), 1, "no receive completion within {WAIT:?}");
    assert_eq!(
        (got[0].wr_id, got[0].status, got[0].opcode, got[0].byte_len),
        (7, WcStatus::Success, WcOpcode::Recv, data.len() as u32)
    );
    dst.to_vec()
}

#[test]
fn a_qp_is_served_by_the_engine_of_its_receive_cq_vector() {
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
    for vector in 0..2 {
        let dev = Device::open(engine_mode(2)).unwrap();
        assert_eq!(dev.query().num_comp_vectors, 2);
        assert_eq!(receive_on_vector(&dev, vector, &data), data);
        let e = dev.engines();
        assert_eq!(e.len(), 2);
        assert_eq!((e[0].vector, e[1].vector), (0, 1));
        assert!(e[vector].events > 0, "engine {vector} drove the QP: {e:?}");
        assert_eq!(
            e[1 - vector].events,
            0,
            "the other engine has no socket: {e:?}"
        );
    }
}

#[test]
fn a_pinned_engine_runs_on_its_cpu() {
    let cpus = affinity::allowed_cpus();
    assert!(!cpus.is_empty());
    // Every CPU once, in reverse, so engine i is not simply on CPU i.
    let want: Vec<usize> = cpus.iter().rev().copied().collect();
    let dev = Device::open(DeviceConfig {
        engine_cpus: want.clone(),
        progress: ProgressMode::Engine,
        ..DeviceConfig::default()
    })
    .unwrap();
    assert_eq!(dev.query().num_comp_vectors, want.len());
    let engines = dev.engines();
    assert_eq!(engines.len(), want.len());
    for (e, &cpu) in engines.iter().zip(&want) {
        assert_eq!(e.cpu, Some(cpu));
        assert_eq!(task_status(e.tid, "Cpus_allowed_list"), cpu.to_string());
        assert_eq!(last_cpu(e.tid), cpu, "{e:?}");
    }
    // And the pinned engine of the last vector serves its QP from there.
    let v = want.len() - 1;
    let data = vec![0xa5u8; 100];
    assert_eq!(receive_on_vector(&dev, v, &data), data);
    let e = dev.engines()[v];
    assert!(e.events > 0, "{e:?}");
    assert_eq!(last_cpu(e.tid), want[v]);
}

#[test]
fn unpinned_engines_keep_the_affinity_of_the_opener() {
    let dev = Device::open(engine_mode(2)).unwrap();
    let here = task_status(affinity::thread_id(), "Cpus_allowed_list");
    for e in dev.engines() {
        assert_eq!(e.cpu, None);
        assert_eq!(task_status(e.tid, "Cpus_allowed_list"), here, "{e:?}");
    }
}

#[test]
fn cpus_and_vectors_that_cannot_be_had_are_errors() {
    let open = |cpus: Vec<usize>| {
        Device::open(DeviceConfig {
            engine_cpus: cpus,
            ..DeviceConfig::default()
        })
    };
    let allowed = affinity::allowed_cpus();
    // Beyond what a CPU set can name.
    let r = open(vec![allowed[0], 1 << 20]);
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    // Nameable, but not a CPU this process may use.
    let absent = (0..1024).rev().find(|c| !allowed.contains(c)).unwrap();
    let r = open(vec![absent]);
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");

    // One engine per listed CPU, repeats allowed; by default one vector per CPU the
    // process may use and at least one per engine; vectors beyond them are refused.
    let dev = open(vec![allowed[0]; 3]).unwrap();
    let vectors = affinity::process_cpus().len().max(3);
    assert_eq!(dev.query().num_comp_vectors, vectors);
    assert_eq!(dev.create_cq_on(8, 2).unwrap().vector(), 2);
    assert_eq!(dev.create_cq(8).unwrap().vector(), 0);
    let r = dev.create_cq_on(8, vectors);
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    let r = Device::open(DeviceConfig {
        engine_threads: 0,
        ..DeviceConfig::default()
    });
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
}

/// Waits for `qp`'s Disconnected event on `dev`.
fn disconnected(dev: &Device, qp: &Qp) {
    let id = qp.id();
    let e = dev.wait_event_matching(
        WAIT,
        |e| matches!(e, AsyncEvent::Disconnected { qp } if *qp == id),
    );
    assert_eq!(e, Some(AsyncEvent::Disconnected { qp: id }));
}

#[test]
fn an_engine_serves_exactly_the_connected_qps_of_its_vector() {
    const QPS: usize = 6;
    let dev = Device::open(engine_mode(2)).unwrap();
    let peer = Device::open(DeviceConfig::default()).unwrap();
    let (pd, ppd) = (dev.alloc_pd(), peer.alloc_pd());
    let cqs = [
        dev.create_cq_on(64, 0).unwrap(),
        dev.create_cq_on(64, 1).unwrap(),
    ];
    let pcq = peer.create_cq(64).unwrap();
    let init = |cq| QpInit {
        send_cq: cq,
        recv_cq: cq,
        sq_depth: 4,
        rq_depth: 4,
    };
    // QP i receives into the CQ of vector i % 2 (its send CQ is the other one: the
    // receive CQ decides).
    let qps: Vec<Qp> = (0..QPS)
        .map(|i| {
            let qi = QpInit {
                send_cq: &cqs[(i + 1) % 2],
                ..init(&cqs[i % 2])
            };
            dev.create_qp(&pd, qi).unwrap()
        })
        .collect();
    let peers: Vec<Qp> = (0..QPS)
        .map(|_| peer.create_qp(&ppd, init(&pcq)).unwrap())
        .collect();
    assert!(
        dev.engines().iter().all(|e| e.qps == 0),
        "none connected yet"
    );
    let listener = dev.listen("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    for (q, p) in qps.iter().zip(&peers) {
        std::thread::scope(|s| {
            let h = s.spawn(|| listener.accept().unwrap().accept(q, b"").unwrap());
            peer.connect(addr, p, b"").unwrap();
            h.join().unwrap();
        });
    }
    let per_engine = |dev: &Device| dev.engines().iter().map(|e| e.qps).collect::<Vec<_>>();
    assert_eq!(per_engine(&dev), vec![QPS / 2, QPS / 2]);
    // A graceful close (from the peer) and an abortive one (here) each deregister.
    peers[0].disconnect().unwrap();
    disconnected(&dev, &qps[0]);
    assert_eq!(per_engine(&dev), vec![QPS / 2 - 1, QPS / 2]);
    qps[1].abort().unwrap();
    disconnected(&dev, &qps[1]);
    assert_eq!(per_engine(&dev), vec![QPS / 2 - 1, QPS / 2 - 1]);
    // Destroying a connected QP deregisters it too.
    drop(qps);
    assert_eq!(per_engine(&dev), vec![0, 0]);
}
