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
