//! Helpers shared by the server's integration tests: servers on free loopback ports, stopped
//! when dropped, and a raw request/reply exchange.
#![allow(dead_code)]

pub(crate) mod certs;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) const TIERKV: &str = env!("CARGO_BIN_EXE_tierkv");

/// A running server process, its port, and the file its stderr goes to; killed when dropped.
/// A server that exited on its own before that says so, with its stderr, in the test's output.
pub(crate) struct Server(pub Child, pub u16, std::path::PathBuf);

impl Server {
    /// What the server wrote to stderr so far.
    pub(crate) fn stderr(&self) -> String {
        std::fs::read_to_string(&self.2).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(Some(status)) = self.0.try_wait() {
            let stderr = std::fs::read_to_string(&self.2).unwrap_or_default();
            eprintln!("the server on port {} exited early ({status}): {stderr}", self.1);
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_file(&self.2);
    }
}

/// `count` consecutive free ports, the first returned.
pub(crate) fn free_ports(count: u16) -> u16 {
    tierkv_bench::ports::free_ports(count).unwrap()
}

/// Sends SIGTERM and waits for the exit; how long it took (panics past `limit`).
pub(crate) fn stop_within(mut server: Server, limit: Duration) -> Duration {
    let started = Instant::now();
    // SAFETY: kill only sends a signal to the child this test started.
    unsafe { libc::kill(server.0.id() as i32, libc::SIGTERM) };
    while server.0.try_wait().unwrap().is_none() {
        assert!(started.elapsed() < limit, "no exit {limit:?} after SIGTERM: {}", server.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    started.elapsed()
}

pub(crate) fn free_port() -> u16 {
    tierkv_bench::ports::free_port().unwrap()
}

pub(crate) fn start(mut command: Command, port: u16) -> Server {
    let log = std::env::temp_dir().join(format!("tierkv-test-{}-{port}.stderr", std::process::id()));
    let stderr = std::fs::File::create(&log).expect("a temporary file for the server's stderr");
    let child = command.stdout(Stdio::null()).stderr(stderr).spawn().expect("server binary is installed");
    let server = Server(child, port, log);
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "server did not listen on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
    server
}

pub(crate) fn tierkv() -> Server {
    tierkv_with(&[])
}

/// The command line of a small hybrid tierkv (`-m 4 -I 256k -t 2`) with a flash file at `flash`:
/// `extra` flags, and `--flash-size default_size` unless `extra` names a size.
pub(crate) fn hybrid_command(port: u16, flash: &std::path::Path, extra: &[&str], default_size: &str) -> Command {
    let mut command = Command::new(TIERKV);
    command
        .args(["-p", &port.to_string(), "-m", "4", "-I", "256k", "-t", "2"])
        .args(["--flash-path", flash.to_str().unwrap()])
        .args(extra);
    if !extra.contains(&"--flash-size") {
        command.args(["--flash-size", default_size]);
    }
    command
}

/// tierkv with 64 MiB and `extra` flags.
pub(crate) fn tierkv_with(extra: &[&str]) -> Server {
    let port = free_port();
    let mut command = Command::new(TIERKV);
    command.args(["-p", &port.to_string(), "-m", "64"]).args(extra);
    start(command, port)
}

pub(crate) fn memcached() -> Server {
    memcached_with(&[])
}

/// Debian's memcached with 64 MiB, one thread, no UDP, and `extra` flags.
pub(crate) fn memcached_with(extra: &[&str]) -> Server {
    let port = free_port();
    let mut command = Command::new("memcached");
    command.args(["-p", &port.to_string(), "-U", "0", "-l", "127.0.0.1", "-t", "1", "-m", "64"]).args(extra);
    // SAFETY: geteuid only reads the process's user id.
    if unsafe { libc::geteuid() } == 0 {
        command.args(["-u", "root"]);
    }
    start(command, port)
}

/// Sends `request` on a fresh connection and collects the reply until the server is quiet.
pub(crate) fn exchange(port: u16, request: &[u8]) -> Vec<u8> {
    exchange_and_close(port, request, Duration::from_millis(300)).0
}

/// Like `exchange`, with the quiet time that ends the reply; also says whether the server
/// closed the connection.
pub(crate) fn exchange_and_close(port: u16, request: &[u8], quiet: Duration) -> (Vec<u8>, bool) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    // The server may close before taking everything; what it answered still counts.
    let _ = stream.write_all(request);
    stream.set_read_timeout(Some(quiet)).unwrap();
    let mut reply = Vec::new();
    let mut buffer = [0u8; 65536];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return (reply, true),
            Ok(n) => reply.extend_from_slice(&buffer[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return (reply, true),
            // A stop and continue of this process (a loaded CI machine) ends a timed read early.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return (reply, false),
        }
    }
}

/// How long `exchange_to_sentinel` waits in silence before deciding the sentinel was swallowed.
pub(crate) const QUIET: Duration = Duration::from_millis(300);
/// The same for scripts whose sentinel is always answered, where a busy machine (other tests'
/// servers on both cores, replies waiting on a worker that waits for a CPU) may pause longer.
pub(crate) const PATIENT: Duration = Duration::from_secs(5);

/// Sends `request` and then `sentinel` on a fresh connection and collects the reply until
/// `done(reply)` (the sentinel's answer arrived), the end of stream, or `quiet` of silence (when
/// the sentinel itself was swallowed as data).
fn exchange_until(
    port: u16,
    request: &[u8],
    sentinel: &[u8],
    quiet: Duration,
    done: impl Fn(&[u8]) -> bool,
) -> Vec<u8> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let _ = stream.write_all(&[request, sentinel].concat());
    stream.set_read_timeout(Some(quiet)).unwrap();
    let mut reply = Vec::new();
    let mut buffer = [0u8; 65536];
    loop {
        let n = match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            // A stop and continue of this process (a loaded CI machine) ends a timed read early.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        reply.extend_from_slice(&buffer[..n]);
        if done(&reply) {
            break;
        }
    }
    reply
}

/// `request`, then a meta get with a unique opaque token whose answer ends the reply. Much
/// faster than `exchange` for scripts that end normally.
pub(crate) fn exchange_to_sentinel(port: u16, request: &[u8]) -> Vec<u8> {
    // The sentinel's answer ends the wait, so a long silence costs nothing when all is well;
    // 300 ms was too short on a 2-core machine running the whole suite at once.
    exchange_to_sentinel_within(port, request, SENTINEL_QUIET)
}

/// How long `exchange_to_sentinel` waits through silence for the sentinel's answer.
pub(crate) const SENTINEL_QUIET: Duration = Duration::from_secs(3);

/// `exchange_to_sentinel` with the given silence before giving up.
pub(crate) fn exchange_to_sentinel_within(port: u16, request: &[u8], quiet: Duration) -> Vec<u8> {
    exchange_until(port, request, b"mg sentinel-key O7u5k\r\n", quiet, |reply| {
        reply.ends_with(b"\r\n") && reply.windows(6).any(|w| w == b" O7u5k")
    })
}

/// `stats GROUP` (`group` "" for plain `stats`) as name -> value.
pub(crate) fn stats_map(port: u16, group: &str) -> std::collections::HashMap<String, String> {
    let request = if group.is_empty() { "stats\r\n".to_string() } else { format!("stats {group}\r\n") };
    // Its END ends the wait: a sentinel get would itself be a request, forwarded when the
    // connection lands on a worker that does not own the sentinel's key.
    let ended = |reply: &[u8]| reply.ends_with(b"END\r\n") || reply.ends_with(b"ERROR\r\n");
    let reply = exchange_until(port, request.as_bytes(), b"", SENTINEL_QUIET, ended);
    String::from_utf8_lossy(&reply)
        .lines()
        .filter_map(|line| line.strip_prefix("STAT ")?.split_once(' '))
        .map(|(name, value)| (name.to_string(), value.trim().to_string()))
        .collect()
}

/// One number of `stats GROUP`; panics, naming it, if it is missing or not a number.
pub(crate) fn stat_number(port: u16, group: &str, name: &str) -> u64 {
    let stats = stats_map(port, group);
    let value = stats.get(name).unwrap_or_else(|| panic!("no {name} in stats {group}: {stats:?}"));
    value.parse().unwrap_or_else(|_| panic!("{name} {value} is not a number"))
}

/// The binary twin of `exchange_to_sentinel`: the sentinel is a NOOP with a unique opaque,
/// whose 24-byte response ends the reply.
pub(crate) fn exchange_binary_to_sentinel(port: u16, request: &[u8]) -> Vec<u8> {
    exchange_binary_to_sentinel_within(port, request, SENTINEL_QUIET)
}

/// `exchange_binary_to_sentinel` with the given silence before giving up.
pub(crate) fn exchange_binary_to_sentinel_within(port: u16, request: &[u8], quiet: Duration) -> Vec<u8> {
    const SENTINEL: u32 = 0x5E47_1E11;
    let mut noop = Vec::new();
    tierkv_protocol::binary::write_request(
        &mut noop,
        tierkv_protocol::binary::opcode::NOOP,
        SENTINEL,
        0,
        &[],
        &[],
        &[],
    );
    exchange_until(port, request, &noop, quiet, |reply| {
        let tail = &reply[reply.len().saturating_sub(24)..];
        tail.len() == 24 && tail[0] == 0x81 && tail[1] == 0x0a && tail[12..16] == SENTINEL.to_be_bytes()
    })
}

/// Resident memory of process `pid` in bytes (VmRSS).
pub(crate) fn resident_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|line| line.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// Zeroes the CAS of every response packet (CAS values differ between servers by design).
pub(crate) fn mask_cas(mut reply: Vec<u8>) -> Vec<u8> {
    let mut at = 0;
    while at + 24 <= reply.len() {
        let body = u32::from_be_bytes(reply[at + 8..at + 12].try_into().unwrap()) as usize;
        reply[at + 16..at + 24].fill(0);
        at += 24 + body;
    }
    reply
}

/// Reads one text get reply: (key, data) of each VALUE block up to END, each data line checked
/// against its announced length.
pub(crate) fn read_values(reader: &mut std::io::BufReader<TcpStream>) -> Vec<(String, String)> {
    use std::io::BufRead;
    let mut values = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line == "END\r\n" {
            return values;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields.first(), Some(&"VALUE"), "unexpected line {line:?}");
        let mut data = String::new();
        reader.read_line(&mut data).unwrap();
        let data = data.trim_end().to_string();
        assert_eq!(data.len().to_string(), fields[3], "length of {data:?}");
        values.push((fields[1].to_string(), data));
    }
}

/// `count` connections that each begin `set kN 0 0 1000000` and send `sent` bytes of the value
/// (hostile clients that hold a request open); the streams time out after 20 s.
pub(crate) fn half_sent_sets(port: u16, count: usize, sent: usize) -> Vec<TcpStream> {
    (0..count)
        .map(|i| {
            let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
            stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            stream.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
            stream.write_all(format!("set k{i} 0 0 1000000\r\n").as_bytes()).unwrap();
            stream.write_all(&vec![b'a'; sent]).unwrap();
            stream
        })
        .collect()
}
