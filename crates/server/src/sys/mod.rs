//! Every system call std does not wrap, and so every `unsafe` block of the server, lives under
//! here, each in a small safe function: CPU affinity, the open-files limit, giving free heap
//! memory back and CPU time (this file); signal handlers (`signals.rs`); batched datagram I/O
//! with `recvmmsg`/`sendmmsg` (`udp.rs`); the partition lock other workers may take for one
//! request (`partition_lock.rs`). Nothing else in the server uses `unsafe`.

pub(crate) mod partition_lock;
pub(crate) mod signals;
pub(crate) mod udp;

use std::io;

/// The CPUs this process may run on, in order (empty if the kernel will not say).
pub(crate) fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data that sched_getaffinity fills for the calling thread;
    // CPU_ISSET indexes within the set (cpu < CPU_SETSIZE).
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut allowed) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize).filter(|&cpu| libc::CPU_ISSET(cpu, &allowed)).collect()
    }
}

/// Pins the calling thread to `cpu`; false if the kernel refuses (or `cpu` is out of range).
pub(crate) fn pin_to_cpu(cpu: usize) -> bool {
    if cpu >= libc::CPU_SETSIZE as usize {
        return false;
    }
    // SAFETY: cpu_set_t is plain data that sched_setaffinity reads for the calling thread
    // (pid 0) within its size; CPU_SET indexes inside the set (cpu < CPU_SETSIZE, checked).
    unsafe {
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one) == 0
    }
}

/// The open-files limit: (soft, hard).
pub(crate) fn open_files_limit() -> io::Result<(u64, u64)> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit struct, which `limit` is.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((limit.rlim_cur, limit.rlim_max))
}

/// Sets the soft open-files limit (within the hard one, `hard`).
pub(crate) fn set_open_files_limit(soft: u64, hard: u64) -> io::Result<()> {
    let raised = libc::rlimit { rlim_cur: soft, rlim_max: hard };
    // SAFETY: setrlimit reads one rlimit struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether an accept failed for want of descriptors (the process's or the system's).
pub(crate) fn out_of_descriptors(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// Gives the allocator's free memory back to the kernel (glibc only; elsewhere nothing).
pub(crate) fn trim_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free memory of the allocator's own arenas; it is
    // thread-safe and touches no memory in use.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The machine's physical memory in bytes (0 if the system does not say).
pub(crate) fn physical_memory_bytes() -> usize {
    // SAFETY: sysconf only reads system configuration values.
    let (pages, page_size) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    usize::try_from(pages).unwrap_or(0).saturating_mul(usize::try_from(page_size).unwrap_or(0))
}

/// CPU time of this process, user and system, as (seconds, microseconds) pairs.
pub(crate) fn cpu_time() -> ((i64, i64), (i64, i64)) {
    // SAFETY: getrusage fills the zero-initialised plain-data struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let pair = |t: libc::timeval| (t.tv_sec, t.tv_usec);
    (pair(usage.ru_utime), pair(usage.ru_stime))
}

/// Empties an eventfd's counter (it stays open: the caller's engine owns it).
pub(crate) fn drain_eventfd(fd: std::os::fd::RawFd) {
    let mut counter = [0u8; 8];
    // SAFETY: reads at most 8 bytes into a live stack array; a closed or empty descriptor only
    // makes the call fail, which changes nothing.
    let _ = unsafe { libc::read(fd, counter.as_mut_ptr().cast(), counter.len()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_thread_can_be_pinned_to_an_allowed_cpu_and_not_to_a_missing_one() {
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty());
        let thread = std::thread::spawn(move || (pin_to_cpu(cpus[0]), pin_to_cpu(usize::MAX), allowed_cpus()));
        let (pinned, refused, after) = thread.join().unwrap();
        assert!(pinned && !refused);
        assert_eq!(after.len(), 1);
    }

    #[test]
    fn the_open_files_limit_reads_back_what_was_set() {
        let (soft, hard) = open_files_limit().unwrap();
        assert!(soft <= hard);
        set_open_files_limit(soft, hard).unwrap();
        assert_eq!(open_files_limit().unwrap(), (soft, hard));
    }

    #[test]
    fn cpu_time_grows_with_work() {
        let ((user, micros), _) = cpu_time();
        let mut x = 0u64;
        for i in 0..50_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let ((user2, micros2), _) = cpu_time();
        assert!(user2 * 1_000_000 + micros2 > user * 1_000_000 + micros);
    }
}
