//! Engine threads: each waits on an epoll set (mio) holding its QPs' sockets and drives
//! a QP when its socket becomes readable or writable. After activity it spins (polling
//! with a zero timeout) for a configurable time before blocking, so a steady stream
//! costs no wake-up per message, while an idle device costs no CPU.

use crate::device::Shared;
use crate::error::Result;
use mio::{Events, Interest, Poll, Token, Waker};
use softrnic_proto::QpId;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const WAKER: Token = Token(usize::MAX);

pub(crate) struct Engine {
    registry: mio::Registry,
    waker: Arc<Waker>,
    stop: Arc<AtomicBool>,
    dev: Arc<OnceLock<Weak<Shared>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Engine {
    pub(crate) fn start(index: usize, spin: Duration) -> Result<Engine> {
        let poll = Poll::new()?;
        let registry = poll.registry().try_clone()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let stop = Arc::new(AtomicBool::new(false));
        let dev: Arc<OnceLock<Weak<Shared>>> = Arc::new(OnceLock::new());
        let (s, d) = (stop.clone(), dev.clone());
        let thread = std::thread::Builder::new()
            .name(format!("softrnic-engine-{index}"))
            .spawn(move || run(poll, s, d, spin))?;
        Ok(Engine {
            registry,
            waker,
            stop,
            dev,
            thread: Mutex::new(Some(thread)),
        })
    }

    pub(crate) fn attach(&self, dev: Weak<Shared>) {
        let _ = self.dev.set(dev);
    }

    pub(crate) fn register(
        &self,
        sock: &mut (impl mio::event::Source + ?Sized),
        qp: QpId,
    ) -> Result<()> {
        self.registry.register(
            sock,
            Token(qp.0 as usize),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        Ok(())
    }

    pub(crate) fn deregister(&self, sock: &mut (impl mio::event::Source + ?Sized)) {
        let _ = self.registry.deregister(sock);
    }

    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.waker.wake();
        if let Ok(mut t) = self.thread.lock()
            && let Some(h) = t.take()
            && h.thread().id() != std::thread::current().id()
        {
            let _ = h.join();
        }
    }
}

fn run(mut poll: Poll, stop: Arc<AtomicBool>, dev: Arc<OnceLock<Weak<Shared>>>, spin: Duration) {
    let mut events = Events::with_capacity(256);
    let mut last_busy = Instant::now();
    loop {
        let timeout = (last_busy.elapsed() < spin).then_some(Duration::ZERO);
        if let Err(e) = poll.poll(&mut events, timeout)
            && e.kind() != std::io::ErrorKind::Interrupted
        {
            break;
        }
        if stop.load(Ordering::Acquire) {
            break;
        }
        if events.is_empty() {
            continue;
        }
        // Hold the device only while working, so dropping it is never blocked by an
        // engine thread sleeping in epoll.
        let Some(d) = dev.get().and_then(Weak::upgrade) else {
            continue;
        };
        for ev in events.iter() {
            if ev.token() == WAKER {
                continue;
            }
            let qp = d
                .qps
                .lock()
                .ok()
                .and_then(|q| q.get(&(ev.token().0 as u32)).cloned());
            if let Some(qp) = qp {
                qp.progress(&d);
                last_busy = Instant::now();
            }
        }
        drop(d);
    }
}
