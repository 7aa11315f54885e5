//! Live data kept under rewrite churn, beside memcached: 30% of `-m` in small items that are
//! never touched again, then ten times `-m` of large values rewritten with set, append and
//! prepend. memcached's slabs keep the small items; tierkv's log must too (its cleaner copies
//! live items forward while there is room), and `bytes` must count the live items, not the
//! log space used.

mod common;

use common::{exchange_to_sentinel_within, memcached, tierkv_with, PATIENT};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

const LIVE_ITEMS: usize = 19_000;
const LIVE_VALUE: usize = 1_000;

fn stats(port: u16) -> std::collections::HashMap<String, u64> {
    let reply = exchange_to_sentinel_within(port, b"stats\r\n", PATIENT);
    String::from_utf8_lossy(&reply)
        .lines()
        .filter_map(|line| line.strip_prefix("STAT "))
        .filter_map(|line| line.split_once(' ').and_then(|(k, v)| Some((k.to_string(), v.parse().ok()?))))
        .collect()
}

/// Sends `command` with `data` and reads the one-line reply.
fn store(stream: &mut BufReader<TcpStream>, command: &str, data: &[u8]) -> String {
    let request = [format!("{command} {}\r\n", data.len()).as_bytes(), data, b"\r\n"].concat();
    stream.get_mut().write_all(&request).unwrap();
    let mut line = String::new();
    stream.read_line(&mut line).unwrap();
    line
}

fn live_value(i: usize) -> Vec<u8> {
    format!("{i:08}").into_bytes().into_iter().cycle().take(LIVE_VALUE).collect()
}

/// Runs the churn on a server; returns how many live items are still there, with the value
/// they were given.
fn churn(port: u16) -> usize {
    let mut stream = BufReader::new(TcpStream::connect(("127.0.0.1", port)).unwrap());
    stream.get_mut().set_read_timeout(Some(PATIENT)).unwrap();
    for i in 0..LIVE_ITEMS {
        assert_eq!(store(&mut stream, &format!("set live:{i} 0 0"), &live_value(i)), "STORED\r\n");
    }
    let (set, append, prepend) = (vec![b's'; 300 << 10], vec![b'a'; 100 << 10], vec![b'p'; 60 << 10]);
    let mut written = 0usize;
    let mut round = 0usize;
    while written < 10 * (64 << 20) {
        let key = format!("big:{}", round / 3 % 8);
        let (command, data, log_bytes) = match round % 3 {
            0 => ("set", &set, 300 << 10),
            1 => ("append", &append, 400 << 10),
            _ => ("prepend", &prepend, 460 << 10),
        };
        assert_eq!(store(&mut stream, &format!("{command} {key} 0 0"), data), "STORED\r\n");
        written += log_bytes;
        round += 1;
    }
    let mut kept = 0;
    for chunk in (0..LIVE_ITEMS).collect::<Vec<_>>().chunks(200) {
        let keys: Vec<String> = chunk.iter().map(|i| format!("live:{i}")).collect();
        let reply = exchange_to_sentinel_within(port, format!("get {}\r\n", keys.join(" ")).as_bytes(), PATIENT);
        let mut rest = &reply[..];
        while let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") {
            let line = String::from_utf8_lossy(&rest[..line_end]).to_string();
            rest = &rest[line_end + 2..];
            let Some(header) = line.strip_prefix("VALUE ") else { break };
            let fields: Vec<&str> = header.split(' ').collect();
            let len: usize = fields[2].parse().unwrap();
            let i: usize = fields[0].trim_start_matches("live:").parse().unwrap();
            let mut value = vec![0u8; len];
            (&rest[..len]).read_exact(&mut value).unwrap();
            rest = &rest[len + 2..];
            kept += usize::from(value == live_value(i));
        }
    }
    kept
}

#[test]
fn live_items_survive_rewrite_churn_as_in_memcached() {
    let theirs = memcached();
    assert_eq!(churn(theirs.1), LIVE_ITEMS, "memcached keeps every live item");
    let ours = tierkv_with(&["-t", "1"]);
    assert_eq!(churn(ours.1), LIVE_ITEMS, "tierkv keeps every live item: {:?}", stats(ours.1));
    let s = stats(ours.1);
    assert_eq!(s["evictions"], 0);
    assert_eq!(s["curr_items"], LIVE_ITEMS as u64 + 8);
    // The live items with their headers (3 to 14 bytes each), not the 64 MiB of log in use.
    let payload: u64 = (0..LIVE_ITEMS).map(|i| (format!("live:{i}").len() + LIVE_VALUE) as u64).sum();
    let bytes = s["bytes"];
    assert!(
        bytes > payload && bytes < payload + 8 * (460 << 10) + 16 * LIVE_ITEMS as u64,
        "bytes {bytes}, payload {payload}"
    );
    let copied = exchange_to_sentinel_within(ours.1, b"stats tierkv\r\n", PATIENT);
    assert!(String::from_utf8_lossy(&copied).contains("STAT log_items_copied_forward "), "counted");
}
