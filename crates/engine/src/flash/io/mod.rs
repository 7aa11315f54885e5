//! The flash tier's I/O engine seam: the store asks for page-aligned reads, writes and syncs and
//! later consumes their completions. Three engines sit behind `IoEngine`: io_uring (one ring per
//! owner, polled by it), a small `pread`/`pwrite` thread pool for kernels without io_uring, and an
//! in-memory simulated device that tears writes, flips bits and fails I/O for tests.
//!
//! Buffers travel with their operation and come back in its completion, so no engine ever touches
//! memory the store still uses, and the store never touches memory the kernel is reading or
//! writing.

pub mod aligned;
pub mod faulty;
pub mod sim;
pub mod threads;
pub mod uring;

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

pub use aligned::AlignedBuf;

/// What an operation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoKind {
    /// Fill `buf` from the device at `offset`.
    Read,
    /// Write all of `buf` to the device at `offset`.
    Write,
    /// Make completed writes durable (fdatasync); `buf` is empty.
    Sync,
}

/// One request: `len` bytes of an aligned buffer from `at` (both whole numbers of pages), an
/// aligned device offset and a token the owner chooses.
#[derive(Debug)]
pub struct IoOp {
    /// Read or write.
    pub kind: IoKind,
    /// Where in the file.
    pub offset: u64,
    /// The buffer read into or written from.
    pub buf: AlignedBuf,
    /// Where in `buf` the request's bytes start: a write of a segment's last pages sends them
    /// from the segment's own buffer instead of a copy.
    pub at: usize,
    /// Bytes to transfer.
    pub len: usize,
    /// The caller's tag, handed back in its `Completion`.
    pub token: u64,
}

impl IoOp {
    /// The request's bytes in its buffer.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[self.at..self.at + self.len]
    }

    /// The bytes this operation transfers.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let (at, len) = (self.at, self.len);
        &mut self.buf[at..at + len]
    }

    /// True if the request stays inside its buffer.
    pub fn fits(&self) -> bool {
        self.at.checked_add(self.len).is_some_and(|end| end <= self.buf.len())
    }
}

/// A finished request: the buffer comes back, with the bytes moved or an errno.
#[derive(Debug)]
pub struct Completion {
    /// The operation's tag.
    pub token: u64,
    /// Its buffer, handed back.
    pub buf: AlignedBuf,
    /// Bytes transferred, or the errno.
    pub result: Result<usize, i32>,
}

/// The longest one `IoEngine::wait` blocks.
pub const WAIT_LIMIT: std::time::Duration = std::time::Duration::from_millis(100);

/// An I/O engine owned by one partition. Requests may complete in any order.
pub trait IoEngine: Send {
    /// Queues a request; it reaches the device at the next `flush` (or sooner).
    fn submit(&mut self, op: IoOp);
    /// Hands queued requests to the device.
    fn flush(&mut self);
    /// Moves finished requests to `out` without blocking.
    fn poll(&mut self, out: &mut Vec<Completion>);
    /// Like `poll`, but blocks until at least one request has finished if any is in flight, for
    /// at most `WAIT_LIMIT` (a stalled device answers nothing: the caller decides how long to
    /// go on waiting).
    fn wait(&mut self, out: &mut Vec<Completion>);
    /// Requests submitted and not yet returned by `poll`/`wait`.
    fn in_flight(&self) -> usize;
    /// The engine's name for logs and benchmarks.
    fn name(&self) -> &'static str;
    /// An eventfd that becomes readable when requests finish (None: the owner must poll while
    /// requests are in flight).
    fn notify_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
}

/// A non-blocking eventfd for completion notices.
pub(crate) fn new_eventfd() -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: eventfd takes no pointers; a non-negative result is a new descriptor we own.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Adds one to an eventfd (a completion notice); a full counter is already readable.
pub(crate) fn signal_eventfd(fd: std::os::fd::RawFd) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: writes 8 bytes from a live stack array to a descriptor the caller keeps open.
    let _ = unsafe { libc::write(fd, one.as_ptr().cast(), one.len()) };
}

/// Which engine serves a real file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlashIo {
    /// io_uring.
    Uring,
    /// A pool of threads making blocking calls.
    Threads,
}

impl std::str::FromStr for FlashIo {
    type Err = String;
    fn from_str(s: &str) -> Result<FlashIo, String> {
        match s {
            "uring" => Ok(FlashIo::Uring),
            "threads" => Ok(FlashIo::Threads),
            _ => Err(format!("expected uring or threads, got {s:?}")),
        }
    }
}

/// Opens (creating if needed) the flash file with `O_DIRECT`, takes its lock for as long as
/// any descriptor of this opening lives, and gives it `size` bytes of real blocks (a sparse
/// file of the right length too, so that the device cannot run out of room later). File
/// systems without `O_DIRECT` (tmpfs) get buffered I/O; the bool says whether it is direct.
/// A file another process holds the lock of fails with `ErrorKind::WouldBlock`, untouched.
pub fn open_file(path: &Path, size: u64) -> std::io::Result<(File, bool)> {
    use std::os::unix::fs::MetadataExt;
    let open = |flags: i32| {
        OpenOptions::new().read(true).write(true).create(true).truncate(false).custom_flags(flags).open(path)
    };
    let (file, direct) = match open(libc::O_DIRECT) {
        Ok(file) => (file, true),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (open(0)?, false),
        Err(e) => return Err(e),
    };
    lock_file(&file)?;
    let metadata = file.metadata()?;
    // st_blocks counts 512-byte units, whatever the file system's block size.
    if metadata.len() < size || metadata.blocks().saturating_mul(512) < size {
        reserve(&file, size)?;
    }
    Ok((file, direct))
}

/// How long an opening waits for a lock held by someone else before it gives up: a process
/// killed a moment ago may hold it a little longer (the kernel closes an io_uring ring, and
/// the file registered with it, on a worker of its own after the process has gone).
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(3);

/// Takes `file`'s exclusive `flock`, waiting at most `LOCK_PATIENCE`. It belongs to the open
/// file description, so clones of the descriptor share it and closing one of them does not
/// drop it (a POSIX `F_SETLK` lock would be dropped by any close of any descriptor of the
/// file).
fn lock_file(file: &File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let deadline = std::time::Instant::now() + LOCK_PATIENCE;
    loop {
        // SAFETY: flock reads no memory of ours; the descriptor is open.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(());
        }
        let error = std::io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(error);
        }
        if std::time::Instant::now() >= deadline {
            return Err(std::io::Error::new(std::io::ErrorKind::WouldBlock, "another process holds the file's lock"));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Gives `file` `size` bytes of real blocks where the file system can (so a full device is an
/// error now, not a failed write later), else a sparse length.
fn reserve(file: &File, size: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let length = libc::off_t::try_from(size).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: fallocate reads no memory of ours; the descriptor is open for the call's length.
    let result = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, length) };
    if result == 0 {
        return Ok(());
    }
    let error = std::io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::EOPNOTSUPP | libc::ENOSYS) => file.set_len(size),
        _ => Err(error),
    }
}

/// An engine of the asked kind over `file`, each at most `depth` requests deep. io_uring falls
/// back to threads when the kernel refuses a ring; the returned string says why.
pub fn engine_for(kind: FlashIo, file: &File, depth: u32) -> std::io::Result<(Box<dyn IoEngine>, Option<String>)> {
    let threads = |file: &File| -> std::io::Result<Box<dyn IoEngine>> {
        Ok(Box::new(threads::ThreadsEngine::new(file.try_clone()?, depth.clamp(1, 64) as usize)))
    };
    match kind {
        FlashIo::Threads => Ok((threads(file)?, None)),
        FlashIo::Uring => match uring::UringEngine::new(file.try_clone()?, depth) {
            Ok(engine) => Ok((Box::new(engine), None)),
            Err(e) => Ok((threads(file)?, Some(format!("io_uring unavailable ({e}); using the thread pool")))),
        },
    }
}
