//! ps-bench: a parameter server against a running server. `--vectors` f32 vectors of `--elems`
//! elements; clients push sparse deltas (16 consecutive elements), dense deltas (every
//! element, one push in 8) and pull 64-element slices (one request in 5). tierkv applies pushes
//! on the server (`vupd add f32`, pipelined); memcached needs get + modify + cas, retried on
//! EXISTS. Deltas are small integers, so every sum is exact in f32 and the final total must
//! equal the sum of acknowledged deltas: a lost update shows. Prints updates/s, server CPU per
//! operation and bytes on the wire per update. Prints figures; never fails on a time.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use tierkv_bench::loadgen::process_cpu_seconds as cpu_seconds;
use tierkv_bench::workload::Rng;

#[derive(Parser, Debug)]
#[command(name = "ps-bench", about = "A parameter-server workload against tierkv (vupd) or memcached (gets + cas)")]
struct Args {
    #[arg(long)]
    port: u16,
    #[arg(long)]
    pid: u32,
    /// tierkv or memcached.
    #[arg(long, default_value = "tierkv")]
    protocol: String,
    #[arg(long, default_value_t = 10_000)]
    vectors: u32,
    #[arg(long, default_value_t = 1024)]
    elems: u32,
    #[arg(long, default_value_t = 8)]
    connections: usize,
    /// tierkv: requests per pipeline (memcached's read-modify-write cannot be pipelined).
    #[arg(long, default_value_t = 8)]
    pipeline: usize,
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
}

struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    sent: u64,
    received: u64,
}

impl Conn {
    fn open(port: u16) -> Conn {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("the server");
        stream.set_nodelay(true).unwrap();
        Conn { reader: BufReader::new(stream.try_clone().unwrap()), writer: stream, sent: 0, received: 0 }
    }
    fn send(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).unwrap();
        self.sent += bytes.len() as u64;
    }
    fn line(&mut self) -> String {
        let mut line = String::new();
        self.received += self.reader.read_line(&mut line).unwrap() as u64;
        line
    }
    /// A VALUE reply's data (and its CAS when `gets`), or None for END.
    fn value(&mut self) -> Option<(Vec<u8>, u64)> {
        let header = self.line();
        if header.starts_with("END") {
            return None;
        }
        let words: Vec<&str> = header.split_whitespace().collect();
        let bytes: usize = words[3].parse().unwrap();
        let cas = words.get(4).and_then(|c| c.parse().ok()).unwrap_or(0);
        let mut data = vec![0u8; bytes + 2];
        self.reader.read_exact(&mut data).unwrap();
        data.truncate(bytes);
        let end = self.line();
        assert!(end.starts_with("END"), "{end}");
        self.received += bytes as u64 + 2;
        Some((data, cas))
    }
}

/// An update: (vector, first element, deltas).
fn next_update(args: &Args, rng: &mut Rng) -> (u32, u32, Vec<f32>) {
    let vector = rng.below(u64::from(args.vectors)) as u32;
    let (offset, len) =
        if rng.below(8) == 0 { (0, args.elems) } else { (rng.below(u64::from(args.elems - 16)) as u32, 16) };
    (vector, offset, (0..len).map(|_| rng.below(5) as f32 - 2.0).collect())
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// tierkv: pipelines of pushes (vupd) and pulls (vget); returns (updates, pulls, delta sum).
fn drive_tierkv(args: &Args, c: &mut Conn, rng: &mut Rng, stop: &AtomicBool) -> (u64, u64, f64) {
    let (mut updates, mut pulls, mut sum) = (0, 0, 0.0);
    while !stop.load(Ordering::Relaxed) {
        let mut batch = Vec::new();
        let mut kinds = Vec::new();
        for _ in 0..args.pipeline {
            if rng.below(5) == 0 {
                let vector = rng.below(u64::from(args.vectors));
                let offset = rng.below(u64::from(args.elems - 64));
                batch.extend_from_slice(format!("vget ps{vector} {offset} 64\r\n").as_bytes());
                kinds.push(None);
            } else {
                let (vector, offset, deltas) = next_update(args, rng);
                let data = f32_bytes(&deltas);
                batch.extend_from_slice(format!("vupd ps{vector} add f32 {offset} {}\r\n", data.len()).as_bytes());
                batch.extend_from_slice(&data);
                batch.extend_from_slice(b"\r\n");
                kinds.push(Some(deltas.iter().map(|d| f64::from(*d)).sum::<f64>()));
            }
        }
        c.send(&batch);
        for kind in kinds {
            match kind {
                None => {
                    c.value().expect("a pulled slice");
                    pulls += 1;
                }
                Some(delta) => {
                    assert_eq!(c.line(), "OK\r\n");
                    updates += 1;
                    sum += delta;
                }
            }
        }
    }
    (updates, pulls, sum)
}

/// memcached: a push is gets + add locally + cas, retried on EXISTS; a pull is a get.
fn drive_memcached(args: &Args, c: &mut Conn, rng: &mut Rng, stop: &AtomicBool) -> (u64, u64, f64) {
    let (mut updates, mut pulls, mut sum) = (0, 0, 0.0);
    while !stop.load(Ordering::Relaxed) {
        if rng.below(5) == 0 {
            let vector = rng.below(u64::from(args.vectors));
            c.send(format!("get ps{vector}\r\n").as_bytes());
            c.value().expect("a pulled vector");
            pulls += 1;
            continue;
        }
        let (vector, offset, deltas) = next_update(args, rng);
        loop {
            c.send(format!("gets ps{vector}\r\n").as_bytes());
            let (mut data, cas) = c.value().expect("the vector");
            for (i, d) in deltas.iter().enumerate() {
                let at = (offset as usize + i) * 4;
                let v = f32::from_le_bytes(data[at..at + 4].try_into().unwrap()) + d;
                data[at..at + 4].copy_from_slice(&v.to_le_bytes());
            }
            let mut request = format!("cas ps{vector} 0 0 {} {cas}\r\n", data.len()).into_bytes();
            request.extend_from_slice(&data);
            request.extend_from_slice(b"\r\n");
            c.send(&request);
            match c.line().as_str() {
                "STORED\r\n" => break,
                "EXISTS\r\n" => continue,
                other => panic!("cas: {other}"),
            }
        }
        updates += 1;
        sum += deltas.iter().map(|d| f64::from(*d)).sum::<f64>();
    }
    (updates, pulls, sum)
}

fn preload(args: &Args) {
    let mut c = Conn::open(args.port);
    for v in 0..args.vectors {
        if args.protocol == "memcached" {
            let mut request = format!("set ps{v} 0 0 {}\r\n", args.elems * 4).into_bytes();
            request.extend(std::iter::repeat_n(0u8, args.elems as usize * 4));
            request.extend_from_slice(b"\r\n");
            c.send(&request);
        } else {
            c.send(format!("vnew ps{v} f32 {}\r\n", args.elems).as_bytes());
        }
        assert_eq!(c.line(), "STORED\r\n");
    }
}

/// The sum of every element of every vector.
fn total(args: &Args) -> f64 {
    let mut c = Conn::open(args.port);
    let mut total = 0.0;
    for v in 0..args.vectors {
        let request = if args.protocol == "memcached" {
            format!("get ps{v}\r\n")
        } else {
            format!("vget ps{v} 0 {}\r\n", args.elems)
        };
        c.send(request.as_bytes());
        let (data, _) = c.value().expect("every vector is still there");
        total += data.chunks(4).map(|b| f64::from(f32::from_le_bytes(b.try_into().unwrap()))).sum::<f64>();
    }
    total
}

fn main() {
    let args = Arc::new(Args::parse());
    preload(&args);
    let stop = Arc::new(AtomicBool::new(false));
    let cpu = cpu_seconds(args.pid).unwrap_or(0.0);
    let began = Instant::now();
    let threads: Vec<_> = (0..args.connections)
        .map(|i| {
            let (args, stop) = (Arc::clone(&args), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut c = Conn::open(args.port);
                let mut rng = Rng::new(i as u64 + 1);
                let (u, p, s) = if args.protocol == "memcached" {
                    drive_memcached(&args, &mut c, &mut rng, &stop)
                } else {
                    drive_tierkv(&args, &mut c, &mut rng, &stop)
                };
                (u, p, s, c.sent + c.received)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    stop.store(true, Ordering::Relaxed);
    let (mut updates, mut pulls, mut sum, mut bytes) = (0u64, 0u64, 0f64, 0u64);
    for t in threads {
        let (u, p, s, b) = t.join().unwrap();
        (updates, pulls, sum, bytes) = (updates + u, pulls + p, sum + s, bytes + b);
    }
    let seconds = began.elapsed().as_secs_f64();
    let cpu = cpu_seconds(args.pid).unwrap_or(0.0) - cpu;
    let final_total = total(&args);
    println!(
        "{}: {:.0} updates/s, {:.0} pulls/s, server cpu {:.2} us per request, {:.0} bytes on the wire per request; total {final_total} vs acknowledged {sum}: {}",
        args.protocol,
        updates as f64 / seconds,
        pulls as f64 / seconds,
        cpu * 1e6 / (updates + pulls).max(1) as f64,
        bytes as f64 / (updates + pulls).max(1) as f64,
        if final_total == sum { "no lost update" } else { "LOST UPDATES" }
    );
}
