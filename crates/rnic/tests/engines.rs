//! Engines bound to CPUs and completion vectors: a QP is driven by the engine of its
//! receive CQ's vector, an engine given a CPU runs there (as the kernel reports it in
//! /proc), one given none follows the threads that connect its QPs, and CPUs or vectors
//! that cannot be had are error values.

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
    let e = dev.engines().remove(v);
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

/// Connects a QP of `dev` (accepted by a thread restricted to `accept_on`) with one of
/// `peer` (connected by a thread restricted to `connect_on`), sends `data` through it
/// and returns what `dev`'s engine placed (engine progress mode on `dev`: only its
/// engine reads that socket).
fn send_between(
    dev: &Device,
    peer: &Device,
    accept_on: &[usize],
    connect_on: &[usize],
    data: &[u8],
) -> Vec<u8> {
    let on = |cpus: &[usize]| {
        let all = affinity::allowed_cpus();
        if cpus != all.as_slice() {
            assert_eq!(cpus.len(), 1, "a test thread is pinned to one CPU or none");
            affinity::pin_thread(cpus[0]).unwrap();
        }
    };
    let (pd, ppd) = (dev.alloc_pd(), peer.alloc_pd());
    let (cq, pcq) = (dev.create_cq(16).unwrap(), peer.create_cq(16).unwrap());
    let init = |cq| QpInit {
        send_cq: cq,
        recv_cq: cq,
        sq_depth: 4,
        rq_depth: 4,
    };
    let qp = dev.create_qp(&pd, init(&cq)).unwrap();
    let pqp = peer.create_qp(&ppd, init(&pcq)).unwrap();
    let dst = pd.alloc_mr(data.len(), Access::LOCAL_WRITE).unwrap();
    qp.post_recv(RecvWr {
        wr_id: 9,
        sgl: [dst.sge(0, data.len())].into(),
    })
    .unwrap();
    let listener = dev.listen("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            on(accept_on);
            listener.accept().unwrap().accept(&qp, b"").unwrap()
        });
        s.spawn(|| {
            on(connect_on);
            peer.connect(addr, &pqp, b"").unwrap()
        })
        .join()
        .unwrap();
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
    // Polled, not waited on: a consumer that arms the CQ sleeps on events, and its
    // engine is then left to the scheduler (checked below).
    let deadline = std::time::Instant::now() + WAIT;
    let got = loop {
        if let Some(c) = cq.poll_one() {
            break c;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no receive completion within {WAIT:?}"
        );
        std::thread::yield_now();
    };
    assert_eq!(
        (got.wr_id, got.status, got.byte_len),
        (9, WcStatus::Success, data.len() as u32)
    );
    dst.to_vec()
}

/// The default placement (`EnginePlacement::FollowConsumers`), as the loopback
/// benchmark uses it: both devices opened by an unpinned thread, the server's QP
/// accepted by a thread pinned to one CPU, the client's connected by a thread pinned
/// to another. Each device's engine moves to its own side's CPU (so the target's
/// engine never shares the sender's CPU), and places the data from there; a consumer
/// that may run anywhere frees the engine again.
#[test]
fn unpinned_engines_follow_the_threads_that_connect_their_qps() {
    let all = affinity::allowed_cpus();
    let (server_cpu, client_cpu) = (all[0], *all.last().unwrap());
    let server = Device::open(engine_mode(1)).unwrap();
    let client = Device::open(DeviceConfig::default()).unwrap();
    assert_eq!(server.engines()[0].cpus, all, "free until a QP connects");
    let data: Vec<u8> = (0..70_000u32).map(|i| (i * 13 + 1) as u8).collect();
    let placed = send_between(&server, &client, &[server_cpu], &[client_cpu], &data);
    assert_eq!(placed, data);
    let (s, c) = (server.engines().remove(0), client.engines().remove(0));
    assert_eq!((s.cpu, s.cpus.clone()), (None, vec![server_cpu]), "{s:?}");
    assert_eq!(c.cpus, vec![client_cpu], "{c:?}");
    // What the kernel enforces, not only what the device reports.
    assert_eq!(
        task_status(s.tid, "Cpus_allowed_list"),
        server_cpu.to_string()
    );
    assert_eq!(
        task_status(c.tid, "Cpus_allowed_list"),
        client_cpu.to_string()
    );
    assert!(s.events > 0, "the server's engine read the Send: {s:?}");
    assert_eq!(last_cpu(s.tid), server_cpu);

    // A second QP accepted by a thread that may run anywhere: the engine serves it
    // too, so it may run anywhere again.
    let more = send_between(&server, &client, &all, &[client_cpu], &data[..100]);
    assert_eq!(more, &data[..100]);
    assert_eq!(server.engines()[0].cpus, all);
    assert_eq!(client.engines()[0].cpus, vec![client_cpu]);

    // A consumer that arms a CQ of the engine's vector sleeps on events: the engine is
    // left to the scheduler from then on.
    let cq = client.create_cq(4).unwrap();
    cq.req_notify(false);
    assert_eq!(client.engines()[0].cpus, all);
    let c = client.engines().remove(0);
    assert_eq!(
        task_status(c.tid, "Cpus_allowed_list"),
        task_status(affinity::thread_id(), "Cpus_allowed_list")
    );
}

/// `EnginePlacement::Inherit` leaves engines where the opener's affinity lets them
/// run, whoever connects; an engine pinned by `engine_cpus` stays on its CPU.
#[test]
fn engines_that_do_not_follow_stay_where_they_were_put() {
    let all = affinity::allowed_cpus();
    let last = *all.last().unwrap();
    let inherit = Device::open(DeviceConfig {
        engine_placement: EnginePlacement::Inherit,
        ..engine_mode(1)
    })
    .unwrap();
    let pinned = Device::open(DeviceConfig {
        engine_cpus: vec![all[0]],
        ..DeviceConfig::default()
    })
    .unwrap();
    let data = vec![0x5au8; 3000];
    assert_eq!(
        send_between(&inherit, &pinned, &[last], &[last], &data),
        data
    );
    assert_eq!(inherit.engines()[0].cpus, all);
    assert_eq!(pinned.engines()[0].cpus, vec![all[0]]);
    assert_eq!(pinned.engines()[0].cpu, Some(all[0]));
}
