//! Slow and stalled senders cannot starve the others (issue "Hostile clients 2"): a request
//! holds connection memory as its bytes arrive, not as its header declares; while memory is
//! short each connection's incomplete request gets a fair share and one at a time is let
//! through to its end; a connection that sends a large request slower than
//! `--request-min-rate` is closed after `--request-grace`. Each test runs the attack and a
//! well-behaved client together.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

fn connect(port: u16) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    stream.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
    stream
}

/// A binary SET of `key` whose header declares `value_bytes` of value.
fn binary_set_header(key: &[u8], value_bytes: usize) -> Vec<u8> {
    let body = 8 + key.len() + value_bytes;
    let mut header = vec![0x80, 0x01];
    header.extend_from_slice(&(key.len() as u16).to_be_bytes());
    header.extend_from_slice(&[8, 0, 0, 0]);
    header.extend_from_slice(&(body as u32).to_be_bytes());
    header.extend_from_slice(&[0; 12]);
    header.extend_from_slice(&[0; 8]);
    header.extend_from_slice(key);
    header
}

/// A well-behaved client's 20 KB set on a new connection: how long until STORED.
fn victim_set(port: u16) -> Duration {
    let mut victim = connect(port);
    let began = Instant::now();
    victim.write_all(&[b"set w 0 0 20000\r\n".as_slice(), &[b'w'; 20_000], b"\r\n"].concat()).unwrap();
    let mut stored = [0u8; 8];
    victim.read_exact(&mut stored).unwrap();
    assert_eq!(&stored, b"STORED\r\n");
    began.elapsed()
}

/// issue 30's starvation attack: 25 connections (text and binary) each declare a 1 MB value,
/// send 1 KB of it and go silent. A 20 KB set from another client is stored within a second,
/// at `-t 1 -m 64`, where six such connections used to starve it for over 30 s.
#[test]
fn values_declared_but_not_sent_hold_no_memory_and_a_20_kb_set_is_stored_at_once() {
    let server = tierkv_with(&["-t", "1"]);
    let port = server.1;
    let attackers: Vec<TcpStream> = (0..25)
        .map(|i| {
            let mut stream = connect(port);
            if i % 2 == 0 {
                stream.write_all(format!("set k{i} 0 0 1000000\r\n").as_bytes()).unwrap();
            } else {
                stream.write_all(&binary_set_header(format!("b{i}").as_bytes(), 1_000_000)).unwrap();
            }
            stream.write_all(&[b'a'; 1000]).unwrap();
            stream
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let held = stat_number(port, "tierkv", "conn_buffer_bytes");
    assert!(held < 2 << 20, "25 declared megabytes hold {held} bytes of connection memory");
    let waited = victim_set(port);
    assert!(waited < Duration::from_secs(1), "the 20 KB set waited {waited:?}");
    drop(attackers);
}

/// Attackers that deliver most of their 1 MB values, more than the connection memory, and
/// stop: the victim's 20 KB set still fits its fair share and is stored within a second, and
/// the stalled attackers are closed by `--request-min-rate` after `--request-grace`, their
/// memory freed. memcached never closes them.
#[test]
fn stalled_large_requests_leave_a_fair_share_and_are_closed_by_the_minimum_rate() {
    let server = tierkv_with(&["-t", "1", "--conn-memory", "1", "--request-min-rate", "1024", "--request-grace", "2"]);
    let port = server.1;
    let mut attackers = half_sent_sets(port, 4, 900_000);
    std::thread::sleep(Duration::from_millis(300));
    let held = stat_number(port, "tierkv", "conn_buffer_bytes");
    assert!(held > 3_000_000, "the attackers' 3.6 MB are read ({held} bytes held), over the budget");
    let waited = victim_set(port);
    assert!(waited < Duration::from_secs(1), "the 20 KB set waited {waited:?}");
    // Stalled at 900 KB: each is closed after the grace plus 900 KB at 1 MiB/s, about 3 s, from
    // when it last waited on the server (the last to be read waited for a stalled finisher to
    // lose its place, up to 2 s).
    let began = Instant::now();
    for attacker in &mut attackers {
        let mut byte = [0u8; 1];
        assert_eq!(attacker.read(&mut byte).unwrap(), 0, "closed by the server");
    }
    let took = began.elapsed();
    assert!(took < Duration::from_secs(12), "the stalled attackers stayed {took:?}");
    assert_eq!(stat_number(port, "tierkv", "slow_request_kicks"), 4);
    assert!(stat_number(port, "tierkv", "conn_buffer_bytes") < 1 << 20, "their memory is freed");
}

/// Honest clients whose large values together need several times the connection memory all
/// get them stored: under pressure one at a time is let through to the end of its value while
/// the others wait (no request that holds memory is left unable to finish).
#[test]
fn large_values_beyond_the_budget_all_complete_one_at_a_time() {
    let server = tierkv_with(&["-t", "1", "--conn-memory", "1"]);
    let port = server.1;
    let senders: Vec<_> = (0..8)
        .map(|i| {
            std::thread::spawn(move || {
                let mut stream = connect(port);
                let value = vec![b'0' + i as u8; 1_000_000];
                stream.write_all(format!("set big{i} 0 0 1000000\r\n").as_bytes()).unwrap();
                for piece in value.chunks(64 << 10) {
                    stream.write_all(piece).unwrap();
                    std::thread::sleep(Duration::from_millis(5));
                }
                stream.write_all(b"\r\n").unwrap();
                let mut stored = [0u8; 8];
                stream.read_exact(&mut stored).unwrap();
                stored
            })
        })
        .collect();
    for sender in senders {
        assert_eq!(&sender.join().unwrap(), b"STORED\r\n");
    }
    for i in 0..8u8 {
        let reply = exchange_to_sentinel(port, format!("mg big{i} s v\r\n").as_bytes());
        assert!(reply.starts_with(b"VA 1000000 s1000000\r\n"), "{:?}", &reply[..reply.len().min(40)]);
        assert_eq!(reply[21], b'0' + i, "big{i} holds its own value");
    }
    assert_eq!(stat_number(port, "tierkv", "slow_request_kicks"), 0);
}

/// `--request-min-rate 0` turns the rule off: a stalled value is never closed (as with
/// memcached), and bad values of the three flags are refused at start naming the flag.
#[test]
fn the_minimum_rate_can_be_turned_off_and_bad_values_are_refused() {
    let server = tierkv_with(&["-t", "1", "--request-min-rate", "0", "--request-grace", "1"]);
    let port = server.1;
    let mut stalled = connect(port);
    stalled.write_all(b"set s 0 0 100000\r\n").unwrap();
    stalled.write_all(&[b'a'; 10_000]).unwrap();
    std::thread::sleep(Duration::from_millis(3500));
    stalled.write_all(&[b'a'; 90_000]).unwrap();
    stalled.write_all(b"\r\n").unwrap();
    let mut stored = [0u8; 8];
    stalled.read_exact(&mut stored).unwrap();
    assert_eq!(&stored, b"STORED\r\n");
    for (flag, value) in [("--request-grace", "0"), ("--conn-memory-share", "101"), ("--request-min-rate", "x")] {
        let output = Command::new(TIERKV).args([flag, value]).output().unwrap();
        let error = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success() && error.contains(flag), "{flag} {value}: {error}");
    }
}
