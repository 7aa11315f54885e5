//! Hostile and careless clients (issue 13): connections that never read their replies stay
//! within the connection memory budget while a fresh client is still served, and get every
//! reply once they read; a low open-files limit is refused at start, running out of
//! descriptors refuses clients instead of leaving them hanging; idle connections are closed
//! with `-o idle_timeout`; hundreds of half-sent large sets do not hold up a whole one.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

fn tierkv_args(args: &[&str]) -> Server {
    let port = free_port();
    let mut command = Command::new(TIERKV);
    command.args(["-p", &port.to_string()]).args(args);
    start(command, port)
}

/// A set and a get on a new connection: how long the round trip took.
fn fresh_round_trip(port: u16) -> Duration {
    let began = Instant::now();
    let reply = exchange_to_sentinel(port, b"set fresh 0 0 2\r\nok\r\nget fresh\r\n");
    assert!(reply.starts_with(b"STORED\r\nVALUE fresh 0 2\r\nok\r\nEND\r\n"), "{reply:?}");
    began.elapsed()
}

#[test]
fn clients_that_never_read_stay_within_the_budget_and_get_every_reply_later() {
    let server = tierkv_args(&["-t", "1", "-m", "64", "--conn-memory", "4"]);
    let port = server.1;
    let value = vec![b'v'; 1000];
    let set = [b"set k 0 0 1000\r\n".as_slice(), &value, b"\r\n"].concat();
    let stored = exchange_to_sentinel(port, &set);
    assert!(stored.starts_with(b"STORED\r\n"), "{:?}", String::from_utf8_lossy(&stored));
    let idle = resident_bytes(server.0.id());
    // 100 connections each ask for 2000 copies of a 1000-byte value (2 MB of replies each,
    // more than the sockets hold) and do not read.
    const CONNECTIONS: usize = 100;
    const GETS: usize = 2000;
    let requests = b"get k\r\n".repeat(GETS);
    let mut stalled: Vec<TcpStream> =
        (0..CONNECTIONS).map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap()).collect();
    for stream in &mut stalled {
        stream.write_all(&requests).unwrap();
    }
    let mut peak = 0;
    let mut slowest = Duration::ZERO;
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(200));
        peak = peak.max(resident_bytes(server.0.id()));
        slowest = slowest.max(fresh_round_trip(port));
    }
    // The budget, and per connection one pressed read and batch of replies (4 KiB each, in
    // buffers that may have grown to 8 KiB), plus room for the allocator.
    let bound = idle + (4 << 20) + CONNECTIONS as u64 * (16 << 10) + (8 << 20);
    println!(
        "idle {} KiB, peak {} KiB, bound {} KiB, slowest fresh round trip {slowest:?}",
        idle >> 10,
        peak >> 10,
        bound >> 10
    );
    assert!(peak <= bound, "peak RSS {} KiB over the bound {} KiB", peak >> 10, bound >> 10);
    assert!(slowest < Duration::from_secs(1), "a fresh client waited {slowest:?}");
    // Now they read: every reply, complete and in order.
    let one = [b"VALUE k 0 1000\r\n".as_slice(), &value, b"\r\nEND\r\n"].concat();
    for stream in &mut stalled {
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut replies = vec![0u8; one.len() * GETS];
        stream.read_exact(&mut replies).unwrap();
        assert!(replies.chunks(one.len()).all(|reply| reply == one), "a reply was lost or damaged");
    }
    // Once they are gone, nothing is held for them.
    drop(stalled);
    std::thread::sleep(Duration::from_millis(500));
    let stats = String::from_utf8(exchange_to_sentinel(port, b"stats tierkv\r\n")).unwrap();
    assert!(stats.contains("STAT conn_buffer_bytes 0\r\n"), "{stats}");
}

#[test]
fn a_low_open_files_limit_is_refused_at_start_and_descriptors_running_out_refuse_clients() {
    // -c 1024 cannot fit in 256 descriptors: the server says so and does not start.
    let output = Command::new("bash")
        .args(["-c", &format!("ulimit -n 256; exec {TIERKV} -p {} -c 1024", free_port())])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && stderr.contains("-c/--conn-limit 1024"), "{stderr}");
    // Started within its limit, then the limit lowered under it: clients beyond the
    // descriptors get memcached's error and are closed, none hangs, and old ones are served.
    let server = tierkv_args(&["-t", "1", "-c", "200"]);
    let port = server.1;
    let status =
        Command::new("prlimit").args(["--pid", &server.0.id().to_string(), "--nofile=40:40"]).status().unwrap();
    assert!(status.success());
    let mut open = Vec::new();
    let mut refused = 0;
    for _ in 0..60 {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        stream.write_all(b"version\r\n").unwrap();
        let mut reply = [0u8; 64];
        let n = stream.read(&mut reply).expect("an answer, not a hang");
        let reply = &reply[..n];
        if reply.starts_with(b"ERROR Too many open connections") {
            refused += 1;
        } else {
            assert!(reply.starts_with(b"VERSION "), "{reply:?}");
            open.push(stream);
        }
    }
    assert!(refused > 0 && !open.is_empty(), "{refused} refused, {} served", open.len());
    let stream = &mut open[0];
    stream.write_all(b"version\r\n").unwrap();
    let mut reply = [0u8; 64];
    assert!(stream.read(&mut reply).unwrap() > 0);
}

#[test]
fn idle_connections_are_closed_after_idle_timeout_and_counted() {
    let server = tierkv_args(&["-t", "2", "-o", "idle_timeout=1"]);
    let port = server.1;
    let mut idle = TcpStream::connect(("127.0.0.1", port)).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let began = Instant::now();
    let mut buffer = [0u8; 16];
    assert_eq!(idle.read(&mut buffer).unwrap(), 0, "closed by the server");
    let waited = began.elapsed();
    assert!(waited >= Duration::from_secs(1) && waited < Duration::from_secs(4), "{waited:?}");
    let stats = String::from_utf8(exchange_to_sentinel(port, b"stats\r\nstats settings\r\n")).unwrap();
    assert!(stats.contains("STAT idle_kicks 1\r\n") && stats.contains("STAT idle_timeout 1\r\n"), "{stats}");
}

/// Under `-o idle_timeout`, clients that trickle a byte a second into a set they never finish
/// are kicked (bytes are not progress), while a client whose set waits for the connection
/// memory they hold is not: it completes once they are gone.
#[test]
fn trickling_clients_are_kicked_and_the_client_waiting_on_the_server_is_not() {
    let server = tierkv_args(&["-t", "1", "-m", "64", "--conn-memory", "1", "-o", "idle_timeout=2"]);
    let port = server.1;
    let mut attackers = half_sent_sets(port, 8, 1000);
    std::thread::sleep(Duration::from_millis(200));
    let mut victim = TcpStream::connect(("127.0.0.1", port)).unwrap();
    victim.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let began = Instant::now();
    victim.write_all(&[b"set w 0 0 20000\r\n".as_slice(), &[b'w'; 20_000], b"\r\n"].concat()).unwrap();
    // The attackers keep trickling until the server closes them.
    let trickler = std::thread::spawn(move || {
        let mut open = attackers.len();
        for _ in 0..12 {
            std::thread::sleep(Duration::from_millis(500));
            open = attackers.iter_mut().map(|s| s.write_all(b"a").is_ok()).filter(|ok| *ok).count();
        }
        open
    });
    let mut stored = [0u8; 8];
    victim.read_exact(&mut stored).unwrap();
    assert_eq!(&stored, b"STORED\r\n", "after {:?}", began.elapsed());
    assert!(began.elapsed() < Duration::from_secs(10), "the victim waited {:?}", began.elapsed());
    // The victim's connection is still open and served.
    victim.write_all(b"mg w s\r\n").unwrap();
    let mut reply = [0u8; 11];
    victim.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"HD s20000\r\n");
    // (Left open while the trickler finishes, it would be idle itself, and rightly kicked.)
    drop(victim);
    assert_eq!(trickler.join().unwrap(), 0, "every trickling client was closed");
    let stats = String::from_utf8(exchange_to_sentinel(port, b"stats\r\n")).unwrap();
    assert!(stats.contains("STAT idle_kicks 8\r\n"), "{stats}");
}

/// 150 connections that each send half of a 1 MB set as fast as the server takes it and go
/// silent (issue 56): a client sending a whole 900 KB set is stored within seconds, a small
/// round trip stays quick, the connection buffers stay bounded, and the silent senders let
/// through beyond the budget are closed.
#[test]
fn hundreds_of_half_sent_large_sets_do_not_hold_up_a_whole_one() {
    let server = tierkv_args(&["-t", "1", "-m", "64"]);
    let port = server.1;
    let attackers: Vec<_> = (0..150)
        .map(|i| {
            std::thread::spawn(move || {
                let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
                let request = [format!("set k{i} 0 0 1000000\r\n").as_bytes(), &[b'a'; 500_000]].concat();
                // The server may close it midway: that is what is tested.
                let _ = stream.write_all(&request);
                stream
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let sampler = {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = std::sync::Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut peak = 0;
            while !seen.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(stat_number(port, "", "read_buf_bytes"));
                std::thread::sleep(Duration::from_millis(20));
            }
            peak
        });
        (stop, thread)
    };
    let began = Instant::now();
    let mut legit = TcpStream::connect(("127.0.0.1", port)).unwrap();
    legit.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    legit.write_all(&[b"set legit 0 0 900000\r\n".as_slice(), &[b'L'; 900_000], b"\r\n"].concat()).unwrap();
    let mut stored = [0u8; 8];
    legit.read_exact(&mut stored).unwrap();
    let waited = began.elapsed();
    assert_eq!(&stored, b"STORED\r\n");
    assert!(waited < Duration::from_secs(5), "the whole 900 KB set waited {waited:?} behind the silent ones");
    let trip = fresh_round_trip(port);
    assert!(trip < Duration::from_secs(1), "a small round trip took {trip:?}");
    std::thread::sleep(Duration::from_secs(1));
    sampler.0.store(true, std::sync::atomic::Ordering::Relaxed);
    let peak = sampler.1.join().unwrap();
    // The README's bound: the budget (-m 64: 5 MiB), twice that in grants plus the largest
    // request, the finisher's request, and the fair shares (half the budget, their buffers'
    // capacities up to twice that): 23 MiB, far below the 75 MB the silent senders sent.
    assert!(peak < 23 << 20, "connection buffers peaked at {peak} bytes");
    // Every silent sender gets its grant in turn; those past the bound are closed 250 ms after
    // they stall (how many by now depends on the machine's pace: waited for, with a limit).
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut kicked = stat_number(port, "tierkv", "slow_request_kicks");
    while kicked < 100 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        kicked = stat_number(port, "tierkv", "slow_request_kicks");
    }
    assert!(kicked >= 100, "{kicked} silent senders closed");
    drop(attackers);
}
