//! A test-only fault layer over any engine (io_uring or the thread pool), so that the server's
//! fault tests reach the engine it really runs, which a preload shim cannot do for io_uring:
//! every write fails with EIO while a switch file exists (the write never reaches the device),
//! and every read's completion is held back for a delay.
//!
//! It must not be used outside tests (`--flash-test-*` flags): it stats the switch file once
//! per write.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{Completion, IoEngine, IoKind, IoOp, WAIT_LIMIT};

/// `inner` with writes failing while `fail_writes_while` exists and reads `read_delay` slower.
pub struct FaultLayer {
    inner: Box<dyn IoEngine>,
    fail_writes_while: Option<PathBuf>,
    read_delay: Duration,
    /// Writes refused while the switch exists, answered at the next poll.
    refused: Vec<Completion>,
    /// Read completions held back, and when each may go.
    held: VecDeque<(Instant, Completion)>,
    /// Tokens of the reads submitted (their completions are held back).
    reads: std::collections::HashSet<u64>,
}

impl FaultLayer {
    /// Wraps `inner`.
    pub fn new(inner: Box<dyn IoEngine>, fail_writes_while: Option<PathBuf>, read_delay: Duration) -> FaultLayer {
        FaultLayer {
            inner,
            fail_writes_while,
            read_delay,
            refused: Vec::new(),
            held: VecDeque::new(),
            reads: std::collections::HashSet::new(),
        }
    }

    fn failing(&self) -> bool {
        self.fail_writes_while.as_ref().is_some_and(|p| p.exists())
    }

    /// Sorts the inner engine's completions: reads are held back, the rest go out.
    fn take(&mut self, done: Vec<Completion>, out: &mut Vec<Completion>) {
        let now = Instant::now();
        for c in done {
            if self.reads.remove(&c.token) && !self.read_delay.is_zero() {
                self.held.push_back((now + self.read_delay, c));
            } else {
                out.push(c);
            }
        }
        out.append(&mut self.refused);
        while self.held.front().is_some_and(|(due, _)| *due <= now) {
            out.push(self.held.pop_front().expect("a held read").1);
        }
    }
}

impl IoEngine for FaultLayer {
    fn submit(&mut self, op: IoOp) {
        match op.kind {
            IoKind::Write if self.failing() => {
                self.refused.push(Completion { token: op.token, buf: op.buf, result: Err(libc::EIO) });
                if let Some(fd) = self.inner.notify_fd() {
                    super::signal_eventfd(fd);
                }
            }
            IoKind::Read => {
                self.reads.insert(op.token);
                self.inner.submit(op);
            }
            _ => self.inner.submit(op),
        }
    }

    fn flush(&mut self) {
        self.inner.flush();
    }

    fn poll(&mut self, out: &mut Vec<Completion>) {
        let mut done = Vec::new();
        self.inner.poll(&mut done);
        self.take(done, out);
    }

    fn wait(&mut self, out: &mut Vec<Completion>) {
        let before = out.len();
        self.poll(out);
        if out.len() > before || self.in_flight() == 0 {
            return;
        }
        let mut done = Vec::new();
        if self.inner.in_flight() > 0 {
            self.inner.wait(&mut done);
        } else if let Some((due, _)) = self.held.front() {
            std::thread::sleep(due.saturating_duration_since(Instant::now()).min(WAIT_LIMIT));
        }
        self.take(done, out);
    }

    fn in_flight(&self) -> usize {
        self.inner.in_flight() + self.refused.len() + self.held.len()
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }

    /// The inner engine's, unless reads are held back: their release announces nothing, so
    /// the owner polls while requests are in flight.
    fn notify_fd(&self) -> Option<std::os::fd::RawFd> {
        if self.read_delay.is_zero() {
            self.inner.notify_fd()
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::sim::SimDisk;
    use super::super::AlignedBuf;
    use super::*;

    fn op(kind: IoKind, token: u64) -> IoOp {
        IoOp { kind, offset: 0, buf: AlignedBuf::new(4096), at: 0, len: 4096, token }
    }

    fn drain(engine: &mut FaultLayer) -> Vec<Completion> {
        let mut out = Vec::new();
        let until = Instant::now() + Duration::from_secs(5);
        while engine.in_flight() > 0 && Instant::now() < until {
            engine.wait(&mut out);
        }
        out
    }

    #[test]
    fn writes_fail_while_the_switch_exists_and_reach_the_device_after() {
        let switch = std::env::temp_dir().join(format!("tierkv-faulty-{}", std::process::id()));
        std::fs::write(&switch, b"").unwrap();
        let disk = SimDisk::new(1 << 20, 1);
        let mut engine = FaultLayer::new(Box::new(disk.device()), Some(switch.clone()), Duration::ZERO);
        engine.submit(op(IoKind::Write, 1));
        engine.flush();
        let done = drain(&mut engine);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].result, Err(libc::EIO));
        assert_eq!(disk.counters().writes, 0, "a refused write never reaches the device");
        std::fs::remove_file(&switch).unwrap();
        engine.submit(op(IoKind::Write, 2));
        engine.flush();
        let done = drain(&mut engine);
        assert!(done.len() == 1 && done[0].result.is_ok(), "{done:?}");
    }

    #[test]
    fn reads_are_held_back_for_the_delay_and_no_wait_blocks_past_its_limit() {
        let disk = SimDisk::new(1 << 20, 1);
        let mut engine = FaultLayer::new(Box::new(disk.device()), None, Duration::from_millis(250));
        let started = Instant::now();
        engine.submit(op(IoKind::Read, 7));
        engine.flush();
        let mut out = Vec::new();
        engine.wait(&mut out);
        assert!(out.is_empty() && started.elapsed() <= WAIT_LIMIT * 2, "{:?}", started.elapsed());
        let done = drain(&mut engine);
        assert_eq!(done.len(), 1);
        assert!(started.elapsed() >= Duration::from_millis(250));
        assert_eq!(engine.notify_fd(), None);
    }
}
