//! Free loopback ports for servers that tests and `compare` start.
//!
//! Asking the kernel for port 0 and handing the number to a child process races with every
//! outgoing connection on the machine: the kernel gives those local ports from the same
//! ephemeral range, so a load generator's connection can take the port before the child binds
//! it. Ports here come from below the ephemeral range, where no outgoing connection lands, in a
//! per-process sequence from a random start, and are checked free by binding them once,
//! without `SO_REUSEADDR`: such a bind fails while any socket holds the port, one bound and not
//! yet listening (another process's server starting up) or one closing, where a bind with the
//! option (the standard library's) succeeds and the server started on the port would not.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};

/// The lowest port handed out; below it sit well-known and registered services.
const LOWEST: u32 = 10_000;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .filter(|&low: &u32| low > LOWEST + 1000)
        .unwrap_or(32_768)
}

/// A loopback TCP port that nothing listens on now and no outgoing connection will take.
pub fn free_port() -> Result<u16, String> {
    free_ports(1)
}

/// `count` consecutive free ports (for a server's direct ports), the first returned. The run
/// is taken from the sequence in one step, so concurrent callers never share a port.
pub fn free_ports(count: u16) -> Result<u16, String> {
    let span = ephemeral_start() - LOWEST;
    let count = u32::from(count.max(1));
    if NEXT.load(Ordering::Relaxed) == 0 {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let seed = (std::process::id().wrapping_mul(2_654_435_761) ^ nanos) % span;
        let _ = NEXT.compare_exchange(0, seed + 1, Ordering::Relaxed, Ordering::Relaxed);
    }
    for _ in 0..span.min(4096) {
        let first = NEXT.fetch_add(count, Ordering::Relaxed) % span;
        if first + count > span {
            continue;
        }
        let base = (LOWEST + first) as u16;
        if (0..count as u16).all(|i| unused(base + i)) {
            return Ok(base);
        }
    }
    Err(format!("no {count} consecutive free loopback ports between {LOWEST} and {}", LOWEST + span))
}

/// True if a plain bind (no `SO_REUSEADDR`) of the loopback port succeeds.
fn unused(port: u16) -> bool {
    let Ok(socket) = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None) else { return false };
    socket.bind(&SocketAddr::from(([127, 0, 0, 1], port)).into()).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn a_port_another_socket_holds_without_listening_is_not_free() {
        let port = free_port().unwrap();
        let holder = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        holder.set_reuse_address(true).unwrap();
        holder.bind(&SocketAddr::from(([127, 0, 0, 1], port)).into()).unwrap();
        assert!(!unused(port));
        // The standard library's bind sets SO_REUSEADDR and would have called the port free.
        assert!(TcpListener::bind(("127.0.0.1", port)).is_ok());
        drop(holder);
        assert!(unused(port));
    }

    #[test]
    fn ports_are_below_the_ephemeral_range_distinct_and_bindable() {
        let ports: Vec<u16> = (0..50).map(|_| free_port().unwrap()).collect();
        let mut sorted = ports.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), ports.len(), "{ports:?}");
        for port in ports {
            assert!(u32::from(port) >= LOWEST && u32::from(port) < ephemeral_start());
            TcpListener::bind(("127.0.0.1", port)).unwrap();
        }
        let base = free_ports(4).unwrap();
        for port in base..base + 4 {
            TcpListener::bind(("127.0.0.1", port)).unwrap();
        }
        assert!(free_port().unwrap() >= base + 4 || free_port().unwrap() < base);
    }
}
