//! atomic-bench: increments against a running server, from many connections with pipelining:
//! every request on one hot key, or spread uniformly over a key space. tierkv gets
//! `atomic <key> add u64 1`, memcached `incr <key> 1`. Prints ops/s and the server's CPU time per
//! operation (from /proc/PID/stat), and checks that the hot key's final value counts every
//! acknowledged increment. Prints figures; never fails on a time.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use tierkv_bench::loadgen::process_cpu_seconds as cpu_seconds;
use tierkv_bench::workload::Rng;

#[derive(Parser, Debug)]
#[command(name = "atomic-bench", about = "Hot-key and uniform increments against a running server")]
struct Args {
    #[arg(long)]
    port: u16,
    /// The server's process id (for its CPU time).
    #[arg(long)]
    pid: u32,
    /// tierkv (atomic add) or memcached (incr).
    #[arg(long, default_value = "tierkv")]
    protocol: String,
    /// hot (one key) or uniform (over --keyspace keys).
    #[arg(long, default_value = "hot")]
    keys: String,
    #[arg(long, default_value_t = 1_000_000)]
    keyspace: u64,
    #[arg(long, default_value_t = 20)]
    connections: usize,
    #[arg(long, default_value_t = 16)]
    pipeline: usize,
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
}

fn key(args: &Args, rng: &mut Rng) -> String {
    if args.keys == "hot" {
        "hot".to_string()
    } else {
        format!("k{}", rng.below(args.keyspace))
    }
}

fn line(args: &Args, key: &str) -> String {
    if args.protocol == "memcached" {
        format!("incr {key} 1\r\n")
    } else {
        format!("atomic {key} add u64 1\r\n")
    }
}

/// Sets the keys to 0, pipelined.
fn preload(args: &Args) {
    let stream = TcpStream::connect(("127.0.0.1", args.port)).expect("the server");
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let keys: Vec<String> =
        if args.keys == "hot" { vec!["hot".into()] } else { (0..args.keyspace).map(|i| format!("k{i}")).collect() };
    for chunk in keys.chunks(256) {
        let batch: String = chunk.iter().map(|k| format!("set {k} 0 0 1\r\n0\r\n")).collect();
        writer.write_all(batch.as_bytes()).unwrap();
        for _ in chunk {
            let mut reply = String::new();
            reader.read_line(&mut reply).unwrap();
            assert_eq!(reply, "STORED\r\n");
        }
    }
}

/// One connection's loop: pipelines of increments until `stop`; returns the acknowledged ones
/// and the misses (a key the cache dropped: tierkv's lossy index can lose a few at preload).
fn drive(args: &Args, seed: u64, stop: &AtomicBool) -> (u64, u64) {
    let stream = TcpStream::connect(("127.0.0.1", args.port)).expect("the server");
    stream.set_nodelay(true).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let mut rng = Rng::new(seed);
    let (mut done, mut misses, mut reply) = (0u64, 0u64, String::new());
    while !stop.load(Ordering::Relaxed) {
        let batch: String = (0..args.pipeline).map(|_| line(args, &key(args, &mut rng))).collect();
        writer.write_all(batch.as_bytes()).unwrap();
        for _ in 0..args.pipeline {
            reply.clear();
            reader.read_line(&mut reply).unwrap();
            assert!(!reply.contains("ERROR"), "{reply}");
            if reply.starts_with("NOT_FOUND") {
                misses += 1;
            } else {
                done += 1;
            }
        }
    }
    (done, misses)
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
            std::thread::spawn(move || drive(&args, i as u64 + 1, &stop))
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    stop.store(true, Ordering::Relaxed);
    let (ops, misses) = threads.into_iter().map(|t| t.join().unwrap()).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    let seconds = began.elapsed().as_secs_f64();
    let cpu = cpu_seconds(args.pid).unwrap_or(0.0) - cpu;
    let mut check = String::new();
    if args.keys == "hot" {
        let stream = TcpStream::connect(("127.0.0.1", args.port)).unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        (&stream).write_all(b"get hot\r\n").unwrap();
        let (mut header, mut value) = (String::new(), String::new());
        reader.read_line(&mut header).unwrap();
        reader.read_line(&mut value).unwrap();
        let value: u64 = value.trim().parse().unwrap_or(0);
        check = format!(
            ", hot key holds {value} ({})",
            if value == ops { "every increment counted" } else { "LOST UPDATES" }
        );
    }
    println!(
        "{} {} keys, {} connections x pipeline {}: {:.0} ops/s, server cpu {:.2} us/op, {misses} misses{check}",
        args.protocol,
        args.keys,
        args.connections,
        args.pipeline,
        (ops + misses) as f64 / seconds,
        cpu * 1e6 / (ops + misses).max(1) as f64
    );
}
