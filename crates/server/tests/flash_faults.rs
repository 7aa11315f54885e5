//! A flash device whose writes fail, under the real server (`--flash-test-fail-writes-while`:
//! a fault layer over the I/O engine, io_uring or the thread pool, fails every write while a
//! file exists): with clients setting, getting and
//! deleting throughout, every request is answered within the deadline a client would use (a
//! get of a flash key is a hit with its value or a miss, a change STORED or SERVER_ERROR), new
//! clients are served, the log and `stats` say the tier is degraded, the tier is used again
//! once writes work, and SIGTERM stops the server within 10 s while writes fail.

mod common;

use common::*;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Keys written before the device fails: most of them end on flash (-m 4).
const KEYS: usize = 30_000;
/// The longest a request may wait for its answer.
const DEADLINE: Duration = Duration::from_secs(5);

fn value(i: usize) -> String {
    format!("{i}.").repeat(200)[..150 + i % 100].to_string()
}

fn connect(port: u16) -> (TcpStream, BufReader<TcpStream>) {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    (stream.try_clone().unwrap(), BufReader::new(stream))
}

fn line(reader: &mut BufReader<TcpStream>, what: &str) -> String {
    let mut line = String::new();
    let read = reader.read_line(&mut line);
    assert!(read.is_ok_and(|n| n > 0), "{what}: no answer within {DEADLINE:?}");
    line
}

/// One client for `for_how_long`: gets of the keys written before (a hit must be the key's
/// value), sets of new keys and deletes; each answered within `DEADLINE`. Requests answered.
fn client(port: u16, seed: usize, stop: &AtomicBool) -> usize {
    let (mut out, mut reader) = connect(port);
    let mut answered = 0;
    let mut n = seed;
    while !stop.load(Ordering::Relaxed) {
        n = n.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let k = (n >> 33) % KEYS;
        match n % 10 {
            0..=5 => {
                out.write_all(format!("get k{k}\r\n").as_bytes()).unwrap();
                let first = line(&mut reader, "get");
                if first.starts_with("VALUE") {
                    assert_eq!(line(&mut reader, "get").trim_end(), value(k), "k{k}: a wrong value");
                    assert_eq!(line(&mut reader, "get"), "END\r\n");
                } else {
                    assert_eq!(first, "END\r\n");
                }
            }
            6..=8 => {
                let (key, v) = (format!("new{seed}-{n}"), value(k));
                out.write_all(format!("set {key} 0 0 {}\r\n{v}\r\n", v.len()).as_bytes()).unwrap();
                let reply = line(&mut reader, "set");
                assert!(reply == "STORED\r\n" || reply.starts_with("SERVER_ERROR"), "set: {reply}");
            }
            _ => {
                out.write_all(format!("delete k{k}\r\n").as_bytes()).unwrap();
                let reply = line(&mut reader, "delete");
                let known = ["DELETED\r\n", "NOT_FOUND\r\n"].contains(&reply.as_str());
                assert!(known || reply.starts_with("SERVER_ERROR"), "delete: {reply}");
            }
        }
        answered += 1;
    }
    answered
}

/// `clients` clients for `seconds`; every request answered.
fn load(port: u16, clients: usize, seconds: u64) -> usize {
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || client(port, c * 7919 + 1, &stop))
        })
        .collect();
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    threads.into_iter().map(|t| t.join().expect("a client saw an unanswered or wrong reply")).sum()
}

fn fill(port: u16) {
    let (mut out, mut reader) = connect(port);
    for start in (0..KEYS).step_by(250) {
        let mut request = String::new();
        for i in start..start + 250 {
            request.push_str(&format!("set k{i} 0 0 {}\r\n{}\r\n", value(i).len(), value(i)));
        }
        out.write_all(request.as_bytes()).unwrap();
        for _ in 0..250 {
            assert_eq!(line(&mut reader, "fill"), "STORED\r\n");
        }
    }
}

fn degraded_partitions(port: u16) -> u64 {
    stat_number(port, "", "flash_degraded_partitions")
}

#[test]
fn writes_failing_under_io_uring_never_leave_a_request_unanswered() {
    writes_failing_for_good_or_for_a_while("uring");
}

#[test]
fn writes_failing_under_the_thread_pool_never_leave_a_request_unanswered() {
    writes_failing_for_good_or_for_a_while("threads");
}

fn writes_failing_for_good_or_for_a_while(io: &str) {
    let dir = std::env::temp_dir();
    let flash: PathBuf = dir.join(format!("tierkv-faults-{io}-{}.flash", std::process::id()));
    let switch: PathBuf = dir.join(format!("tierkv-faults-{io}-{}.switch", std::process::id()));
    let _ = (std::fs::remove_file(&flash), std::fs::remove_file(&switch));
    let port = free_port();
    let extra = ["-c", "300", "--flash-io", io, "--flash-test-fail-writes-while", switch.to_str().unwrap()];
    let server = start(hybrid_command(port, &flash, &extra, "64m"), port);
    fill(port);
    std::fs::write(&switch, b"").unwrap();
    let answered = load(port, 8, 4);
    assert!(answered > 1000, "only {answered} requests in 4 s");
    let stats = stats_map(port, "");
    let given_up: u64 = stats["flash_segments_given_up"].parse().unwrap();
    assert!(given_up > 0 && degraded_partitions(port) > 0, "{stats:?}");
    let errors: u64 = stats["flash_write_errors"].parse().unwrap();
    assert!(errors < 5_000, "{errors} failed writes in 4 s: tried again without a pause");
    assert!(server.stderr().contains("writes fail"), "{}", server.stderr());
    // A new client is served at once.
    let started = Instant::now();
    assert_eq!(exchange(port, b"version\r\n")[..8], *b"VERSION ");
    assert!(started.elapsed() < Duration::from_secs(1));
    // Writes work again: the tier is used again within the longest pause (the pause doubles
    // while segments are given up: after 4 s of failures it is at most 8 s).
    std::fs::remove_file(&switch).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    // The log says so at the worker's next once-a-second look, after `stats` does.
    while degraded_partitions(port) > 0 || !server.stderr().contains("writes reach the device again") {
        assert!(Instant::now() < deadline, "still degraded: {}", server.stderr());
        load(port, 2, 1);
    }
    // Failing again, SIGTERM stops the server within 10 s.
    std::fs::write(&switch, b"").unwrap();
    load(port, 4, 2);
    let took = stop_within(server, Duration::from_secs(10));
    eprintln!("{io}: stopped in {took:?} with writes failing");
    let _ = (std::fs::remove_file(&flash), std::fs::remove_file(&switch));
}

/// A device that answers every read 3 s late (past the 2 s deadline of a flash lookup), under
/// io_uring through the fault layer: with clients getting flash keys, setting and deleting,
/// every request is answered within `DEADLINE` (a get of a flash key as a miss at the deadline,
/// counted in `flash_read_timeouts`, or a hit with its value), and SIGTERM stops the server
/// within 10 s. The start-up reads the file's header and superblocks through the same slow
/// device, so the first answer may take several delays.
#[test]
fn a_device_answering_reads_late_never_holds_a_request_past_the_deadline() {
    let flash: PathBuf = std::env::temp_dir().join(format!("tierkv-slow-{}.flash", std::process::id()));
    let _ = std::fs::remove_file(&flash);
    let port = free_port();
    let extra = ["-c", "300", "--flash-io", "uring", "--flash-test-read-delay-ms", "3000"];
    let server = start(hybrid_command(port, &flash, &extra, "64m"), port);
    let (mut out, mut reader) = connect(port);
    reader.get_ref().set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    out.write_all(b"version\r\n").unwrap();
    assert!(line(&mut reader, "version after the slow start").starts_with("VERSION"));
    fill(port);
    let answered = load(port, 8, 4);
    assert!(answered > 0, "nothing answered in 4 s");
    let timeouts = stat_number(port, "", "flash_read_timeouts");
    assert!(timeouts > 0, "no flash read outlived the deadline: {}", server.stderr());
    let took = stop_within(server, Duration::from_secs(10));
    eprintln!("{answered} requests answered, {timeouts} flash reads past the deadline, stopped in {took:?}");
    let _ = std::fs::remove_file(&flash);
}
