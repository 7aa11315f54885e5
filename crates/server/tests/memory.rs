//! Resident memory against the bound the README states ("Memory bound"): at `-m 64 -t 2`, with
//! small, ~0.9 MB and mixed items written (three times the item memory each) and read back
//! through several connections at once, the peak RSS stays within the process's own memory
//! plus `-m` plus the connection budget's terms plus 16 KiB per connection.

mod common;

use common::{free_port, resident_bytes, start, TIERKV};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const MIB: u64 = 1 << 20;
const MEMORY_MIB: u64 = 64;
const WORKERS: u64 = 2;
const CONNECTIONS: u64 = 4;
/// `-I`: the largest request.
const MAX_ITEM: u64 = MIB;

/// The README's bound above the process's own memory (`idle`): `-m`, three times the
/// connection budget (4 MiB + `-m`/64: the budget, grants up to twice it), one largest request
/// per worker, forwarded requests in flight (8 batches of 64 KiB and one request per ordered
/// pair of workers), 16 KiB per connection.
fn bound(idle: u64) -> u64 {
    let budget = 4 * MIB + MEMORY_MIB * MIB / 64;
    let forwarded = WORKERS * (WORKERS - 1) * 8 * ((64 << 10) + MAX_ITEM);
    idle + MEMORY_MIB * MIB + 3 * budget + WORKERS * MAX_ITEM + forwarded + CONNECTIONS * (16 << 10)
}

/// Reads until the reply ends with `ending`.
fn read_until(stream: &mut TcpStream, ending: &[u8], buffer: &mut Vec<u8>) {
    buffer.clear();
    let mut chunk = vec![0u8; 1 << 16];
    while !buffer.ends_with(ending) {
        let n = stream.read(&mut chunk).unwrap();
        assert!(n > 0, "the server closed the connection");
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// One connection's share of a phase: values of `sizes` in turn until `total` bytes were
/// set; small ones in pipelined batches of 64, then the last of each batch read back; large
/// ones one at a time, every fourth read back.
fn write(port: u16, name: &str, sizes: &[usize], total: u64) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let (mut sent, mut i, mut reply) = (0u64, 0usize, Vec::new());
    while sent < total {
        let mut batch = Vec::new();
        let mut last = String::new();
        while batch.len() < 64 << 10 && sent < total {
            let size = sizes[i % sizes.len()];
            last = format!("{name}:{i}");
            batch.extend_from_slice(format!("set {last} 0 0 {size} noreply\r\n").as_bytes());
            batch.resize(batch.len() + size, b'v');
            batch.extend_from_slice(b"\r\n");
            sent += size as u64;
            i += 1;
        }
        stream.write_all(&batch).unwrap();
        stream.write_all(format!("get {last}\r\n").as_bytes()).unwrap();
        read_until(&mut stream, b"END\r\n", &mut reply);
        assert!(!reply.starts_with(b"SERVER_ERROR") && !reply.starts_with(b"CLIENT_ERROR"), "{name}");
    }
}

/// Writes the phase through `CONNECTIONS` connections at once; the peak RSS meanwhile.
fn phase(port: u16, pid: u32, label: &str, sizes: &'static [usize]) -> u64 {
    let (stop, peak) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(resident_bytes(pid))));
    let sampler = {
        let (stop, peak) = (Arc::clone(&stop), Arc::clone(&peak));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(resident_bytes(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let writers: Vec<_> = (0..CONNECTIONS)
        .map(|c| {
            let name = format!("{label}{c}");
            std::thread::spawn(move || write(port, &name, sizes, 3 * MEMORY_MIB * MIB / CONNECTIONS))
        })
        .collect();
    writers.into_iter().for_each(|writer| writer.join().unwrap());
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    peak.load(Ordering::Relaxed)
}

#[test]
fn resident_memory_stays_within_the_stated_bound_for_small_large_and_mixed_items() {
    let port = free_port();
    let mut command = Command::new(TIERKV);
    command.args(["-p", &port.to_string(), "-m", &MEMORY_MIB.to_string(), "-t", &WORKERS.to_string()]);
    let server = start(command, port);
    let pid = server.0.id();
    // The process's own memory (code, stacks, tables sized at start-up, the log's first pages)
    // before any item; a debug build's code is larger than the README's 3 MiB for a release.
    let idle = resident_bytes(pid);
    let phases: [(&str, &'static [usize]); 3] = [
        ("small", &[40, 100, 250]),
        ("large", &[900_000, 950_000, 850_000]),
        ("mixed", &[40, 900_000, 1000, 300_000, 100, 60_000, 5000]),
    ];
    for (label, sizes) in phases {
        let peak = phase(port, pid, label, sizes);
        eprintln!("{label}: peak RSS {} MiB, bound {} MiB", peak / MIB, bound(idle) / MIB);
        assert!(
            peak <= bound(idle),
            "{label} items: peak RSS {} MiB over the bound {} MiB",
            peak / MIB,
            bound(idle) / MIB
        );
    }
    // The items are there to be read: the log was filled, not skipped.
    assert!(common::stat_number(port, "", "curr_items") > 0);
    assert!(common::stat_number(port, "", "evictions") > 0, "three times -m was written");
}
