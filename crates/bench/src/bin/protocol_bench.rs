//! protocol-bench: requests decoded per second on one core by the server-side decoder, for
//! pipelined `get <16-byte key>`, `set` with 32-byte values, and binary GETK. Prints figures;
//! never fails on a time.
//!
//! Each workload is a buffer of pipelined requests (distinct keys) decoded front to back, over
//! and over, for `--seconds`; every decoded key and value is folded into a printed checksum so
//! the decoding cannot be optimised away.

use clap::Parser;
use std::time::{Duration, Instant};
use tierkv_bench::workload::write_key;
use tierkv_protocol::client::quick;
use tierkv_protocol::{decode_request, Command, Decoded, Limits};

#[derive(Parser, Debug)]
#[command(name = "protocol-bench", about = "Measure tierkv's request decoders")]
struct Args {
    /// Seconds per workload.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Requests per pipelined buffer.
    #[arg(long, default_value_t = 4096)]
    requests: usize,
    /// Print one compact JSON line on stdout.
    #[arg(long)]
    json: bool,
}

fn key(i: usize) -> [u8; 16] {
    let mut key = [0u8; 16];
    write_key(i as u64, &mut key);
    // Text keys may not hold spaces or newlines: map every byte into the printable range.
    for byte in &mut key {
        *byte = b'!' + *byte % 94;
    }
    key
}

fn decode_all(buffer: &[u8], limits: &Limits) -> (usize, u64) {
    let mut at = 0;
    let mut count = 0;
    let mut checksum = 0u64;
    while at < buffer.len() {
        match decode_request(&buffer[at..], limits) {
            Decoded::Request { request, consumed } => {
                match request.command {
                    Command::Get { keys, .. } => {
                        for key in keys.iter() {
                            checksum = checksum.wrapping_add(u64::from(key[key.len() - 1]));
                        }
                    }
                    Command::Store { key, value, .. } => {
                        checksum = checksum.wrapping_add(u64::from(key.raw[0]) + value.len() as u64);
                    }
                    _ => {}
                }
                count += 1;
                at += consumed;
            }
            other => panic!("benchmark input did not decode: {other:?}"),
        }
    }
    (count, checksum)
}

fn measure(name: &str, buffer: &[u8], seconds: f64) -> (f64, u64) {
    let limits = Limits::default();
    let limit = Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let (mut requests, mut checksum) = (0usize, 0u64);
    while start.elapsed() < limit {
        let (count, sum) = decode_all(std::hint::black_box(buffer), &limits);
        requests += count;
        checksum = checksum.wrapping_add(sum);
    }
    let rate = requests as f64 / start.elapsed().as_secs_f64();
    eprintln!("{name}: {:.2} M requests/s ({} bytes per buffer, checksum {checksum:x})", rate / 1e6, buffer.len());
    (rate, checksum)
}

fn main() {
    let args = Args::parse();
    if args.requests == 0 || args.requests > 1 << 22 || args.seconds.is_nan() || args.seconds <= 0.0 {
        eprintln!("protocol-bench: --requests must be 1..=4194304 and --seconds positive");
        std::process::exit(2);
    }
    let (mut gets, mut sets, mut getks) = (Vec::new(), Vec::new(), Vec::new());
    let value = [b'v'; 32];
    for i in 0..args.requests {
        let key = key(i);
        quick::get(&mut gets, &key);
        quick::set(&mut sets, &key, 0, 0, &value);
        quick::binary_getk(&mut getks, &key, i as u32);
    }
    let (get_rate, _) = measure("text get <16-byte key>", &gets, args.seconds);
    let (set_rate, _) = measure("text set, 32-byte value", &sets, args.seconds);
    let (getk_rate, _) = measure("binary GETK", &getks, args.seconds);
    if args.json {
        println!(
            "{{\"text_get_mrps\":{:.3},\"text_set_mrps\":{:.3},\"binary_getk_mrps\":{:.3},\"requests_per_buffer\":{}}}",
            get_rate / 1e6,
            set_rate / 1e6,
            getk_rate / 1e6,
            args.requests
        );
    }
}
