//! The io_uring engine: one ring per owner, the file registered with the ring, requests pushed to
//! the submission queue and handed to the kernel in one `io_uring_enter` per `flush`, completions
//! reaped by the owner when it polls. No thread of its own and no system call per request.

use std::fs::File;
use std::os::unix::io::AsRawFd;

use io_uring::{opcode, types, IoUring};

use super::{Completion, IoEngine, IoKind, IoOp};

/// One ring over one file, at most `depth` requests in flight; more wait in `backlog`.
pub struct UringEngine {
    ring: IoUring,
    // Kept open for as long as the ring refers to it.
    _file: File,
    /// Requests in the kernel's hands, by slot; the slot number is the request's user_data.
    slots: Vec<Option<IoOp>>,
    free: Vec<usize>,
    backlog: std::collections::VecDeque<IoOp>,
    in_flight: usize,
    /// Signalled by the kernel when completions wait (registered with the ring).
    eventfd: Option<std::os::fd::OwnedFd>,
    /// The ring defers completion work to the owner's next `io_uring_enter` with GETEVENTS.
    deferred: bool,
}

impl UringEngine {
    /// An io_uring of `depth` entries over `file`.
    pub fn new(file: File, depth: u32) -> std::io::Result<UringEngine> {
        let depth = depth.clamp(1, 4096).next_power_of_two();
        // Cooperative task running (Linux 5.19): a completion's work waits for the owner's next
        // system call instead of interrupting it while it runs (a sleeping owner is still
        // woken, and the eventfd then says completions wait). On one core it took flash-hit
        // GETs/s from ~64k to ~95k. Deferred task running (6.1) measured no better here: it
        // costs one more io_uring_enter per poll. Older kernels refuse the flag; then the ring
        // is a plain one.
        let deferred = false;
        let ring = IoUring::builder().setup_coop_taskrun().build(depth).or_else(|_| IoUring::new(depth))?;
        ring.submitter().register_files(&[file.as_raw_fd()])?;
        let eventfd = super::new_eventfd().ok().filter(|fd| ring.submitter().register_eventfd(fd.as_raw_fd()).is_ok());
        let slots = (0..depth as usize).map(|_| None).collect();
        let free = (0..depth as usize).rev().collect();
        let backlog = Default::default();
        Ok(UringEngine { ring, _file: file, slots, free, backlog, in_flight: 0, eventfd, deferred })
    }

    /// Moves backlog requests into free ring slots.
    fn stage(&mut self) {
        while let Some(slot) = self.free.pop() {
            let Some(mut op) = self.backlog.pop_front() else {
                self.free.push(slot);
                return;
            };
            let fd = types::Fixed(0);
            let len = u32::try_from(op.len).expect("requests are below 4 GiB");
            // A pointer into the buffer (checked in range by `bytes_mut`), not a borrow of it.
            let start = op.bytes_mut().as_mut_ptr();
            let entry = match op.kind {
                IoKind::Read => opcode::Read::new(fd, start, len).offset(op.offset).build(),
                IoKind::Write => opcode::Write::new(fd, start, len).offset(op.offset).build(),
                IoKind::Sync => opcode::Fsync::new(fd).flags(types::FsyncFlags::DATASYNC).build(),
            };
            // The buffer's heap allocation does not move when `op` moves into its slot.
            self.slots[slot] = Some(op);
            // SAFETY: the entry points at the slot's buffer, which stays allocated and untouched
            // in `self.slots` until its completion is reaped in `reap`; the fd is the registered
            // file, open for the ring's life. The queue has room: at most `depth` slots exist.
            unsafe {
                self.ring
                    .submission()
                    .push(&entry.user_data(slot as u64))
                    .expect("a free slot means room in the queue");
            }
        }
    }

    fn reap(&mut self, out: &mut Vec<Completion>) -> usize {
        let mut reaped = 0;
        for cqe in self.ring.completion() {
            let slot = cqe.user_data() as usize;
            let op = self.slots[slot].take().expect("a completion for a request in flight");
            self.free.push(slot);
            let result = if cqe.result() < 0 {
                Err(-cqe.result())
            } else if (cqe.result() as usize) < op.len {
                // A short transfer (the file ends early): report it as an I/O error.
                Err(libc::EIO)
            } else {
                Ok(cqe.result() as usize)
            };
            out.push(Completion { token: op.token, buf: op.buf, result });
            reaped += 1;
        }
        self.in_flight -= reaped;
        reaped
    }
}

impl IoEngine for UringEngine {
    fn submit(&mut self, op: IoOp) {
        self.in_flight += 1;
        self.backlog.push_back(op);
    }

    fn flush(&mut self) {
        self.stage();
        // Only a non-empty queue costs a system call. An error here (EINTR, EBUSY) leaves the
        // entries queued for the next flush.
        if !self.ring.submission().is_empty() {
            let _ = self.ring.submit();
        }
    }

    fn poll(&mut self, out: &mut Vec<Completion>) {
        // Deferred completion work runs only inside io_uring_enter: one call when there is some.
        if self.deferred && self.in_flight > 0 && self.ring.submission().taskrun() {
            let _ = self.ring.submit();
        }
        if self.reap(out) > 0 && !self.backlog.is_empty() {
            self.flush();
        }
    }

    fn wait(&mut self, out: &mut Vec<Completion>) {
        if self.in_flight == 0 {
            return;
        }
        self.stage();
        let limit = types::Timespec::from(super::WAIT_LIMIT);
        let deadline = std::time::Instant::now() + super::WAIT_LIMIT;
        loop {
            if self.reap(out) > 0 {
                if !self.backlog.is_empty() {
                    self.flush();
                }
                return;
            }
            if std::time::Instant::now() >= deadline {
                return;
            }
            match self.ring.submitter().submit_with_args(1, &types::SubmitArgs::new().timespec(&limit)) {
                Ok(_) => {}
                // ETIME: nothing finished in time; EINTR, or EBUSY while completions wait to be
                // reaped: reap and look at the clock.
                Err(_) => std::thread::yield_now(),
            }
        }
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn name(&self) -> &'static str {
        "uring"
    }

    fn notify_fd(&self) -> Option<std::os::fd::RawFd> {
        self.eventfd.as_ref().map(AsRawFd::as_raw_fd)
    }
}

/// The longest a dropped engine waits for its requests in flight.
const DROP_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

impl Drop for UringEngine {
    fn drop(&mut self) {
        // The kernel may still write into buffers of requests in flight: wait for all of them
        // before the buffers (in `slots`) are freed; a device that answers none of them for
        // `DROP_PATIENCE` keeps them: they are leaked, never freed under the kernel.
        let mut sink = Vec::new();
        let deadline = std::time::Instant::now() + DROP_PATIENCE;
        while self.slots.iter().any(Option::is_some) {
            if std::time::Instant::now() >= deadline {
                std::mem::forget(std::mem::take(&mut self.slots));
                return;
            }
            self.wait(&mut sink);
            sink.clear();
        }
        // The kernel frees a closed ring later, on a worker of its own, and the registered
        // file (and its lock) with it: given back now, a server restarted at once finds the
        // file free.
        let _ = self.ring.submitter().unregister_files();
    }
}
