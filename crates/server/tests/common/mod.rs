//! Helpers shared by the server's integration tests: servers on free loopback ports, stopped
//! when dropped, and a raw request/reply exchange.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const TIERKV: &str = env!("CARGO_BIN_EXE_tierkv");

/// A running server process and its port; killed when dropped.
pub struct Server(pub Child, pub u16);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn free_port() -> u16 {
    tierkv_bench::ports::free_port().unwrap()
}

pub fn start(mut command: Command, port: u16) -> Server {
    let child = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("server binary is installed");
    let server = Server(child, port);
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "server did not listen on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
    server
}

pub fn tierkv() -> Server {
    let port = free_port();
    let mut command = Command::new(TIERKV);
    command.args(["-p", &port.to_string(), "-m", "64"]);
    start(command, port)
}

pub fn memcached() -> Server {
    let port = free_port();
    let mut command = Command::new("memcached");
    command.args(["-p", &port.to_string(), "-U", "0", "-l", "127.0.0.1", "-t", "1", "-m", "64"]);
    // SAFETY: geteuid only reads the process's user id.
    if unsafe { libc::geteuid() } == 0 {
        command.args(["-u", "root"]);
    }
    start(command, port)
}

/// Sends `request` on a fresh connection and collects the reply until the server is quiet.
pub fn exchange(port: u16, request: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.write_all(request).unwrap();
    stream.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let mut reply = Vec::new();
    let mut buffer = [0u8; 65536];
    while let Ok(n) = stream.read(&mut buffer) {
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&buffer[..n]);
    }
    reply
}
