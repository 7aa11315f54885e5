//! No other process can join tierkv's ports (issue "Hostile clients 2"): the main TCP port,
//! each `--direct-ports` port and the UDP port are single sockets bound without SO_REUSEPORT,
//! so a second socket that sets it is refused ("address in use"), as with memcached; with
//! SO_REUSEPORT on tierkv's side it would silently get a share of the new connections.

mod common;

use common::*;
use socket2::{Domain, Socket, Type};
use std::net::SocketAddr;
use std::process::Command;

/// Binds a socket with SO_REUSEPORT and SO_REUSEADDR, as a process trying to join would.
fn join(kind: Type, port: u16) -> std::io::Result<Socket> {
    let address: SocketAddr = ([127, 0, 0, 1], port).into();
    let socket = Socket::new(Domain::IPV4, kind, None)?;
    socket.set_reuse_port(true)?;
    socket.set_reuse_address(true)?;
    socket.bind(&address.into())?;
    if kind == Type::STREAM {
        socket.listen(8)?;
    }
    Ok(socket)
}

#[test]
fn another_process_cannot_bind_the_main_direct_or_udp_ports() {
    let port = free_port();
    let (udp, direct) = (free_port(), free_ports(2));
    let mut command = Command::new(TIERKV);
    command.args(["-p", &port.to_string(), "-t", "2", "-U", &udp.to_string()]);
    command.args(["--direct-ports", &direct.to_string()]);
    let server = start(command, port);
    // The main port listens before the direct and UDP ones are bound: wait until the last
    // direct port answers (its worker runs, so every socket is bound).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", direct + 1)).is_err() {
        assert!(std::time::Instant::now() < deadline, "no listener on direct port {}", direct + 1);
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(exchange_to_sentinel(direct + 1, b"version\r\n").starts_with(b"VERSION "));
    for (what, kind, at) in [
        ("main", Type::STREAM, port),
        ("direct 0", Type::STREAM, direct),
        ("direct 1", Type::STREAM, direct + 1),
        ("UDP", Type::DGRAM, udp),
        ("direct UDP 1", Type::DGRAM, direct + 1),
    ] {
        let error = join(kind, at).err().unwrap_or_else(|| panic!("a second process joined the {what} port {at}"));
        assert_eq!(error.kind(), std::io::ErrorKind::AddrInUse, "{what}: {error}");
    }
    // The server still serves on every port.
    assert!(exchange_to_sentinel(server.1, b"version\r\n").starts_with(b"VERSION "));
    assert!(exchange_to_sentinel(direct + 1, b"version\r\n").starts_with(b"VERSION "));
}

/// A set and a get on a fresh connection to `at`; the get's reply.
fn set_then_get(at: SocketAddr, key: &str) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(at).unwrap_or_else(|e| panic!("{at}: {e}"));
    stream.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    stream.write_all(format!("set {key} 0 0 2\r\nhi\r\nget {key}\r\n").as_bytes()).unwrap();
    let mut reply = Vec::new();
    let mut buffer = [0u8; 256];
    while !reply.ends_with(b"END\r\n") {
        let n = stream.read(&mut buffer).unwrap();
        assert!(n > 0, "{at} closed");
        reply.extend_from_slice(&buffer[..n]);
    }
    reply
}

/// Which of `probes` accept a TCP connection.
fn listening(probes: &[SocketAddr]) -> Vec<bool> {
    let wait = std::time::Duration::from_millis(500);
    probes.iter().map(|at| std::net::TcpStream::connect_timeout(at, wait).is_ok()).collect()
}

#[test]
fn every_address_of_a_listen_list_serves_as_memcached_reads_it() {
    let (port, other, udp) = (free_port(), free_port(), free_port());
    let direct = free_ports(2);
    // memcached's forms: a comma- and semicolon-separated list, the flag repeated, a port of
    // the entry's own.
    let list = format!("127.0.0.1;127.0.0.2:{other}");
    let mut command = Command::new(TIERKV);
    command.args(["-p", &port.to_string(), "-t", "2", "-U", &udp.to_string(), "-l", &list, "-l", "127.0.0.3"]);
    command.args(["--direct-ports", &direct.to_string()]);
    let server = start(command, port);
    let at = |ip: [u8; 4], port: u16| SocketAddr::from((ip, port));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(at([127, 0, 0, 3], direct + 1)).is_err() {
        assert!(std::time::Instant::now() < deadline, "no direct port on 127.0.0.3: {}", server.stderr());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for (i, address) in
        [at([127, 0, 0, 1], port), at([127, 0, 0, 2], other), at([127, 0, 0, 3], port)].into_iter().enumerate()
    {
        let key = format!("k{i}");
        assert_eq!(set_then_get(address, &key), format!("STORED\r\nVALUE {key} 0 2\r\nhi\r\nEND\r\n").as_bytes());
    }
    // Every address's direct ports reach the same items.
    for ip in [[127, 0, 0, 1], [127, 0, 0, 2], [127, 0, 0, 3]] {
        assert!(set_then_get(at(ip, direct), "d").ends_with(b"VALUE d 0 2\r\nhi\r\nEND\r\n"));
    }
    // UDP on every address.
    for ip in [[127, 0, 0, 1], [127, 0, 0, 2], [127, 0, 0, 3]] {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.set_read_timeout(Some(std::time::Duration::from_secs(2))).unwrap();
        socket.send_to(b"\x00\x07\x00\x00\x00\x01\x00\x00get k0\r\n", at(ip, udp)).unwrap();
        let mut reply = [0u8; 512];
        let n = socket.recv(&mut reply).unwrap_or_else(|e| panic!("no UDP reply from {ip:?}: {e}"));
        assert_eq!(&reply[8..n], b"VALUE k0 0 2\r\nhi\r\nEND\r\n");
    }
    let settings = stats_map(port, "settings");
    assert_eq!(settings["inter"], "127.0.0.1,127.0.0.2,127.0.0.3");
    // Listening where memcached listens for the same flags, and nowhere else.
    let probes =
        [at([127, 0, 0, 1], port), at([127, 0, 0, 2], other), at([127, 0, 0, 2], port), at([127, 0, 0, 3], port)];
    let ours = listening(&probes);
    assert_eq!(ours, [true, true, false, true]);
    drop(server);
    let mut command = Command::new("memcached");
    command.args(["-p", &port.to_string(), "-U", "0", "-t", "1", "-m", "8", "-l", &list, "-l", "127.0.0.3"]);
    // SAFETY: geteuid only reads the process's user id.
    if unsafe { libc::geteuid() } == 0 {
        command.args(["-u", "root"]);
    }
    let memcached = start(command, port);
    assert_eq!(listening(&probes), ours, "memcached listens elsewhere: {probes:?}");
    drop(memcached);
}

#[test]
fn an_address_not_on_this_host_stops_start_up_naming_the_flag() {
    for (list, says) in
        [("192.0.2.1", "192.0.2.1"), ("127.0.0.1,[::1", "not closed"), ("127.0.0.1:99999", "1 to 65535")]
    {
        let output = Command::new(TIERKV).args(["-p", &free_port().to_string(), "-l", list]).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{list}: started");
        assert!(stderr.contains("-l/--listen") && stderr.contains(says), "{list}: {stderr}");
    }
}
