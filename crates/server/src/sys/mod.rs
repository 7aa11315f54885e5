//! Every system call std does not wrap, and so every `unsafe` block of the server, lives under
//! here, each in a small safe function: CPU affinity, the open-files limit, giving free heap
//! memory back and CPU time (this file); signal handlers (`signals.rs`); batched datagram I/O
//! with `recvmmsg`/`sendmmsg` (`udp.rs`); the partition lock other workers may take for one
//! request (`partition_lock.rs`). Nothing else in the server uses `unsafe`.

pub mod partition_lock;
pub mod signals;
pub mod udp;

use std::io;

/// The CPUs this process may run on, in order (empty if the kernel will not say).
pub fn allowed_cpus() -> Vec<usize> {
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
pub fn pin_to_cpu(cpu: usize) -> bool {
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
pub fn open_files_limit() -> io::Result<(u64, u64)> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit struct, which `limit` is.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((limit.rlim_cur, limit.rlim_max))
}

/// Sets the soft open-files limit (within the hard one, `hard`).
pub fn set_open_files_limit(soft: u64, hard: u64) -> io::Result<()> {
    let raised = libc::rlimit { rlim_cur: soft, rlim_max: hard };
    // SAFETY: setrlimit reads one rlimit struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// TCP sockets listening on exactly `address`, in the whole system (from `/proc/net/tcp` or
/// `tcp6`); None when the kernel does not say.
pub fn listeners_on(address: std::net::SocketAddr) -> Option<usize> {
    let (table, local) = match address.ip() {
        std::net::IpAddr::V4(ip) => ("/proc/net/tcp", format!("{:08X}", u32::from_ne_bytes(ip.octets()))),
        std::net::IpAddr::V6(ip) => {
            let octets = ip.octets();
            let words = octets.chunks(4).map(|w| format!("{:08X}", u32::from_ne_bytes([w[0], w[1], w[2], w[3]])));
            ("/proc/net/tcp6", words.collect())
        }
    };
    let local = format!("{local}:{:04X}", address.port());
    let text = std::fs::read_to_string(table).ok()?;
    Some(count_listening(&text, &local))
}

/// Listening sockets on `local` in a `/proc/net/tcp` table, each counted once by its inode:
/// the kernel writes the table over several reads, and a socket moved in the table by
/// concurrent activity between two reads appears twice.
fn count_listening(table: &str, local: &str) -> usize {
    // Columns: slot, local address, remote address, state (0A: listening), tx:rx, tr:when,
    // retransmits, uid, timeout, inode, ...
    let mut inodes: Vec<&str> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            // Most lines are other ports' connections: the local address rules them out first.
            let mut fields = line.split_whitespace().skip(1);
            if fields.next() != Some(local) || fields.nth(1) != Some("0A") {
                return None;
            }
            fields.nth(5)
        })
        .collect();
    inodes.sort_unstable();
    inodes.dedup();
    inodes.len()
}

/// Whether an accept failed for want of descriptors (the process's or the system's).
pub fn out_of_descriptors(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// Gives the allocator's free memory back to the kernel (glibc only; elsewhere nothing).
pub fn trim_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free memory of the allocator's own arenas; it is
    // thread-safe and touches no memory in use.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// CPU time of this process, user and system, as (seconds, microseconds) pairs.
pub fn cpu_time() -> ((i64, i64), (i64, i64)) {
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
pub fn drain_eventfd(fd: std::os::fd::RawFd) {
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
    fn a_listener_the_table_shows_twice_counts_once() {
        let header =
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";
        let row = |slot: u32, local: &str, state: &str, inode: u32| {
            format!(
                "{slot:4}: {local} 00000000:0000 {state} 00000000:00000000 00:00000000 00000000  0  0 {inode} 1 0\n"
            )
        };
        let table = [
            header.to_string(),
            row(0, "0100007F:2BCB", "0A", 501),
            row(1, "0100007F:2BCB", "0A", 502),
            row(2, "0100007F:2BCB", "0A", 501),
            row(3, "0100007F:2BCB", "06", 0),
            row(4, "0100007F:2BCC", "0A", 503),
        ]
        .concat();
        assert_eq!(count_listening(&table, "0100007F:2BCB"), 2);
        assert_eq!(count_listening(&table, "0100007F:2BCC"), 1);
        assert_eq!(count_listening(&table, "0100007F:2BCD"), 0);
    }

    /// A listening SO_REUSEPORT socket on `ip` and `port` (0: any free port); None if `ip`
    /// cannot be bound here (no IPv6).
    fn shared_listener(ip: std::net::IpAddr, port: u16) -> Option<socket2::Socket> {
        let address = std::net::SocketAddr::new(ip, port);
        let socket = socket2::Socket::new(socket2::Domain::for_address(address), socket2::Type::STREAM, None).ok()?;
        socket.set_reuse_port(true).unwrap();
        socket.bind(&address.into()).ok()?;
        socket.listen(8).unwrap();
        Some(socket)
    }

    #[test]
    fn listeners_sharing_a_port_are_all_counted() {
        let loopbacks: [std::net::IpAddr; 2] = [[127, 0, 0, 1].into(), std::net::Ipv6Addr::LOCALHOST.into()];
        for ip in loopbacks {
            let Some(first) = shared_listener(ip, 0) else { continue };
            let address = first.local_addr().unwrap().as_socket().unwrap();
            assert_eq!(listeners_on(address), Some(1), "{address}");
            let second = shared_listener(ip, address.port()).unwrap();
            assert_eq!(listeners_on(address), Some(2), "{address}");
            drop((first, second));
            assert_eq!(listeners_on(address), Some(0), "{address}");
        }
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
