//! memcached's ASCII authentication (`-Y FILE`): the same exchanges get the same bytes from
//! tierkv and Debian's memcached; pymemcache authenticates with a `set`; counters and flags;
//! guesses from one address are slowed, other addresses are not.

mod common;

use common::{free_port, start, Server, TIERKV};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

fn auth_file(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("tierkv-auth-{}-{name}", std::process::id()));
    std::fs::write(&path, "alice:secret\nbob:hunter2\n").unwrap();
    path
}

fn tierkv_auth(file: &PathBuf) -> Server {
    tierkv_auth_with(file, &[])
}

fn tierkv_auth_with(file: &PathBuf, extra: &[&str]) -> Server {
    let port = free_port();
    let mut command = Command::new(TIERKV);
    command.args(["-p", &port.to_string(), "-m", "64", "-t", "2"]).args(extra).arg("-Y").arg(file);
    start(command, port)
}

fn memcached_auth(file: &PathBuf) -> Server {
    let port = free_port();
    let mut command = Command::new("memcached");
    command.args(["-p", &port.to_string(), "-U", "0", "-l", "127.0.0.1", "-t", "1", "-m", "64", "-Y"]).arg(file);
    // SAFETY: geteuid only reads the process's user id.
    if unsafe { libc::geteuid() } == 0 {
        command.args(["-u", "root"]);
    }
    start(command, port)
}

/// Sends each step on one connection and collects what came back after it (replies end when
/// the server is quiet for 150 ms).
fn conversation(port: u16, steps: &[&[u8]]) -> Vec<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_millis(150))).unwrap();
    let mut replies = Vec::new();
    for step in steps {
        stream.write_all(step).unwrap();
        let mut reply = Vec::new();
        let mut buffer = [0u8; 4096];
        while let Ok(n) = stream.read(&mut buffer) {
            if n == 0 {
                break;
            }
            reply.extend_from_slice(&buffer[..n]);
        }
        let text = String::from_utf8_lossy(&reply).into_owned();
        // Only the authentication counters of a `stats`: the rest differs by nature.
        let text = if step == b"stats\r\n" {
            text.lines().filter(|l| l.starts_with("STAT auth_")).map(|l| format!("{l}\n")).collect()
        } else {
            text
        };
        replies.push(text);
    }
    replies
}

#[test]
fn ascii_authentication_answers_as_memcached_does() {
    let file = auth_file("differential");
    // memcached never closes a connection for failed attempts: neither does tierkv here.
    let (ours, theirs) = (tierkv_auth_with(&file, &["--auth-max-failures", "0"]), memcached_auth(&file));
    let binary_noop: &[u8] = &[0x80, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let conversations: Vec<Vec<&[u8]>> = vec![
        vec![b"get foo\r\n", b"version\r\n", b"stats\r\n"],
        vec![b"set a 0 0 11\r\nalice wrong\r\n", b"set a 0 0 12\r\nalice secret\r\n", b"set k 0 0 1\r\nv\r\n"],
        vec![b"set a 0 0 12\r\nalice secret\r\n", b"get k\r\n", b"gets nothing\r\n", b"stats\r\n"],
        vec![b"set x 1 2 5\r\nalice\r\n", b"x\r\n", b"set a 0 0\r\n", b"set a 0 0 x\r\n", b"mg k v\r\n"],
        vec![b"set a 0 0 11\r\nbob hunter2\r\nget k\r\n"],
        // (A data block without its CRLF is left out: memcached 1.6.18 then answers two errors
        // into one reply buffer and sends only the second; tierkv sends both.)
        vec![b"set a 0 0 12\r\nbob hunter22\r\n", b"set a 0 0 3\r\nabc\r\n"],
        vec![binary_noop],
    ];
    for steps in &conversations {
        assert_eq!(conversation(ours.1, steps), conversation(theirs.1, steps), "{steps:?}");
    }
    // The settings that say authentication is on, after logging in.
    let settings = |port: u16| -> Vec<String> {
        let replies = conversation(port, &[b"set a 0 0 12\r\nalice secret\r\n", b"stats settings\r\n"]);
        let wanted = ["STAT binding_protocol ", "STAT auth_enabled_sasl ", "STAT auth_enabled_ascii "];
        replies[1].lines().filter(|l| wanted.iter().any(|w| l.starts_with(w))).map(String::from).collect()
    };
    assert_eq!(settings(ours.1), settings(theirs.1));
    std::fs::remove_file(&file).unwrap();
}

#[test]
fn pymemcache_authenticates_with_a_set() {
    let file = auth_file("pymemcache");
    let server = tierkv_auth(&file);
    let script = "import sys\nfrom pymemcache.client.base import Client\n\
from pymemcache.exceptions import MemcacheClientError\n\
c = Client(('127.0.0.1', int(sys.argv[1])), connect_timeout=5, timeout=5)\n\
try:\n    c.get('k')\n    sys.exit('a get before authenticating was served')\nexcept MemcacheClientError as e:\n    assert 'unauthenticated' in str(e), e\n\
try:\n    c.set('auth', b'alice nope', noreply=False)\n    sys.exit('a wrong password was taken')\nexcept MemcacheClientError as e:\n    assert 'authentication failure' in str(e), e\n\
assert c.set('auth', b'alice secret', noreply=False)\n\
for i in range(100): c.set('k%d' % i, b'v%d' % i)\n\
assert c.get_many(['k1', 'k99']) == {'k1': b'v1', 'k99': b'v99'}\n\
print('ok')\n";
    let output = Command::new("python3").args(["-c", script, &server.1.to_string()]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success() && text.contains("ok"), "{text}");
    let stats = conversation(server.1, &[b"set a 0 0 12\r\nalice secret\r\n", b"stats settings\r\n"]);
    assert!(stats[1].contains(&format!("STAT auth_enabled_ascii {}\r\n", file.display())), "{}", stats[1]);
    assert!(stats[1].contains("STAT binding_protocol ascii\r\n"));
    std::fs::remove_file(&file).unwrap();
}

#[test]
fn a_bad_auth_file_or_udp_stops_start_up() {
    let bad = std::env::temp_dir().join(format!("tierkv-auth-{}-bad", std::process::id()));
    std::fs::write(&bad, "nocolon\n").unwrap();
    let good = auth_file("udp");
    for (args, expected) in [
        (vec!["-Y".to_string(), bad.display().to_string()], "-Y/--auth-file"),
        (vec!["-Y".to_string(), "/nonexistent/auth".to_string()], "-Y/--auth-file"),
        (vec!["-Y".to_string(), good.display().to_string(), "-U".to_string(), "11311".to_string()], "-U/--udp-port"),
    ] {
        let output = Command::new(TIERKV).args(["-p", &free_port().to_string()]).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success() && stderr.contains(expected), "{args:?}: {stderr}");
    }
    std::fs::remove_file(&bad).unwrap();
    std::fs::remove_file(&good).unwrap();
}

#[test]
fn every_way_in_asks_for_authentication() {
    let file = auth_file("ways-in");
    let (port, base) = (free_port(), common::free_ports(2));
    let mut command = Command::new(TIERKV);
    command
        .args(["-p", &port.to_string(), "-m", "64", "-t", "2", "--direct-ports", &base.to_string(), "-Y"])
        .arg(&file);
    let _server = start(command, port);
    for way_in in [port, base, base + 1] {
        let replies = conversation(way_in, &[b"get k\r\n", b"set a 0 0 12\r\nalice secret\r\n", b"version\r\n"]);
        assert_eq!(replies[0], "CLIENT_ERROR unauthenticated\r\n", "port {way_in}");
        assert_eq!(replies[1], "STORED\r\n");
        assert!(replies[2].starts_with("VERSION "));
    }
    std::fs::remove_file(&file).unwrap();
}

/// Password guessing: each failure is logged with the client's address (at most a line a second),
/// and the connection is closed after `--auth-max-failures` (3 by default) failures; with 0 it
/// stays open, as memcached keeps it.
#[test]
fn a_connection_that_keeps_failing_is_closed_and_the_failures_are_logged() {
    let file = auth_file("guessing");
    let server = tierkv_auth(&file);
    let guess = |n: usize| format!("set a 0 0 12\r\nalice wrong{n}\r\n").into_bytes();
    let mut stream = TcpStream::connect(("127.0.0.1", server.1)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let guesses: Vec<u8> = (0..10).flat_map(guess).collect();
    stream.write_all(&guesses).unwrap();
    let mut replies = String::new();
    stream.read_to_string(&mut replies).expect("the server closes the connection");
    assert_eq!(replies, "CLIENT_ERROR authentication failure\r\n".repeat(3));
    std::thread::sleep(Duration::from_millis(100));
    let log = server.stderr();
    assert!(
        log.contains(
            "ASCII authentication failed for user \"alice\" from 127.0.0.1 (1 on this connection; its next attempt \
             waits 10 ms)"
        ),
        "{log}"
    );
    assert_eq!(log.matches("authentication failed").count(), 1, "one line a second: {log}");
    // The next line says how many went unlogged.
    std::thread::sleep(Duration::from_millis(1100));
    let again = conversation(server.1, &[&guess(0)]);
    assert_eq!(again, vec!["CLIENT_ERROR authentication failure\r\n"]);
    std::thread::sleep(Duration::from_millis(100));
    let log = server.stderr();
    assert!(log.contains("(1 on this connection; its next attempt waits 80 ms) (2 more not logged)"), "{log}");

    let port = free_port();
    let mut command = Command::new(TIERKV);
    command.args(["-p", &port.to_string(), "-m", "64", "--auth-max-failures", "0", "-Y"]).arg(&file);
    let patient = start(command, port);
    // Each failure doubles the wait of the source's next attempt: 10 + 20 + ... + 320 ms
    // before the seventh.
    let mut stream = TcpStream::connect(("127.0.0.1", patient.1)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let began = std::time::Instant::now();
    for n in 0..6 {
        stream.write_all(&guess(n)).unwrap();
        assert_eq!(read_line(&mut stream), "CLIENT_ERROR authentication failure\r\n");
    }
    stream.write_all(b"set a 0 0 12\r\nalice secret\r\n").unwrap();
    assert_eq!(read_line(&mut stream), "STORED\r\n");
    let took = began.elapsed();
    assert!(took >= Duration::from_millis(630), "six failures and a success took {took:?}");
    std::fs::remove_file(&file).unwrap();
}

/// One reply line.
fn read_line(stream: &mut TcpStream) -> String {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        stream.read_exact(&mut byte).unwrap();
        line.push(byte[0]);
    }
    String::from_utf8(line).unwrap()
}

/// Guesses from one address on several connections at once wait for each other, doubling up
/// to 2 s; a client with the right password from another address is answered at once
/// meanwhile, and the guessing address, once it has the password, is served again.
#[test]
fn guesses_from_one_address_are_slowed_and_other_addresses_are_not() {
    let file = auth_file("throttle");
    let server = tierkv_auth_with(&file, &["--auth-max-failures", "0"]);
    let port = server.1;
    let began = std::time::Instant::now();
    let guessers: Vec<_> = (0..4)
        .map(|c| {
            std::thread::spawn(move || {
                let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
                stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                for n in 0..3 {
                    stream.write_all(format!("set a 0 0 11\r\nalice wro{c}{n}\r\n").as_bytes()).unwrap();
                    assert_eq!(read_line(&mut stream), "CLIENT_ERROR authentication failure\r\n");
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // Meanwhile, from 127.0.0.2 (another address on the loopback).
    let other = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    other.bind(&"127.0.0.2:0".parse::<std::net::SocketAddr>().unwrap().into()).unwrap();
    other.connect(&std::net::SocketAddr::from(([127, 0, 0, 1], port)).into()).unwrap();
    let mut other: TcpStream = other.into();
    other.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let asked = std::time::Instant::now();
    other.write_all(b"set a 0 0 11\r\nbob hunter2\r\n").unwrap();
    assert_eq!(read_line(&mut other), "STORED\r\n");
    assert!(asked.elapsed() < Duration::from_millis(500), "another address waited {:?}", asked.elapsed());
    for guesser in guessers {
        guesser.join().unwrap();
    }
    // Twelve failures in a row from one address: 10 ms doubling to 2 s between them, about
    // 7.6 s in all (without the throttle: a few milliseconds).
    let took = began.elapsed();
    assert!(took >= Duration::from_millis(7000), "12 guesses took {took:?}");
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    stream.write_all(b"set a 0 0 12\r\nalice secret\r\n").unwrap();
    assert_eq!(read_line(&mut stream), "STORED\r\n");
    let log = server.stderr();
    assert!(log.contains("its next attempt waits 2000 ms"), "{log}");
    std::fs::remove_file(&file).unwrap();
}
