//! Store mode (`--mode store`, memcached's `-M`): writes fail with memcached's out-of-memory
//! error when memory is full, every acknowledged item stays readable byte for byte, deleting
//! makes room again, and churn does not leak capacity.

mod common;

use common::{free_port, start, Server, TIERKV};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// tierkv in store mode with `mib` MiB and `threads` workers.
fn store_server(mib: usize, threads: usize) -> Server {
    let port = free_port();
    let mut command = std::process::Command::new(TIERKV);
    command.args(["-p", &port.to_string(), "--mode", "store", "-m", &mib.to_string(), "-t", &threads.to_string()]);
    start(command, port)
}

struct Client {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Client {
    fn connect(port: u16) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        stream.set_nodelay(true).unwrap();
        Client { writer: stream.try_clone().unwrap(), reader: BufReader::new(stream) }
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        let read = self.reader.read_line(&mut line).unwrap_or_else(|e| panic!("reading a reply: {e:?} after {line:?}"));
        assert!(read > 0, "the server closed the connection");
        line
    }

    /// A set; true if STORED, false on memcached's out-of-memory error.
    fn set(&mut self, key: &str, value: &[u8]) -> bool {
        // One write per request (several small writes would wait on Nagle's algorithm).
        let request = [format!("set {key} 3 0 {}\r\n", value.len()).as_bytes(), value, b"\r\n"].concat();
        self.writer.write_all(&request).unwrap();
        match self.line().as_str() {
            "STORED\r\n" => true,
            "SERVER_ERROR out of memory storing object\r\n" => false,
            other => panic!("set {key}: {other:?}"),
        }
    }

    fn get(&mut self, key: &str) -> Option<Vec<u8>> {
        self.writer.write_all(format!("get {key}\r\n").as_bytes()).unwrap();
        let header = self.line();
        if header == "END\r\n" {
            return None;
        }
        let length: usize = header.trim_end().rsplit(' ').next().unwrap().parse().unwrap();
        let mut value = vec![0u8; length + 2];
        self.reader.read_exact(&mut value).unwrap();
        assert_eq!(self.line(), "END\r\n");
        value.truncate(length);
        Some(value)
    }

    fn delete(&mut self, key: &str) -> bool {
        self.writer.write_all(format!("delete {key}\r\n").as_bytes()).unwrap();
        self.line() == "DELETED\r\n"
    }

    fn stat(&mut self, group: &str, name: &str) -> String {
        self.writer.write_all(format!("stats {group}\r\n").as_bytes()).unwrap();
        let mut found = String::new();
        loop {
            let line = self.line();
            if line == "END\r\n" {
                return found;
            }
            if let Some(value) = line.strip_prefix(&format!("STAT {name} ")) {
                found = value.trim_end().to_string();
            }
        }
    }
}

/// A value for key number `i`: its length and bytes depend on `i` and `round`.
fn value(i: usize, round: usize, min: usize, spread: usize) -> Vec<u8> {
    let length = min + (i * 7919 + round * 104_729) % spread;
    (0..length).map(|j| b'a' + ((i + j + round) % 26) as u8).collect()
}

#[test]
fn a_full_store_refuses_writes_keeps_every_item_and_takes_writes_after_deletes() {
    let server = store_server(8, 2);
    let mut client = Client::connect(server.1);
    assert_eq!(client.stat("tierkv", "mode"), "store");
    assert_eq!(client.stat("settings", "evictions"), "off");
    let number = |client: &mut Client, name: &str| -> u64 { client.stat("tierkv", name).parse().unwrap() };
    let (used_empty, free_empty) = (number(&mut client, "bytes_used"), number(&mut client, "bytes_free"));
    let spares = number(&mut client, "spare_buckets");
    assert_eq!(used_empty, 0);
    assert!(free_empty > 6 << 20 && free_empty < 8 << 20, "an empty 8 MiB store has {free_empty} bytes free");
    assert!(spares > 0 && number(&mut client, "spare_buckets_free") == spares);
    let mut stored = Vec::new();
    let mut refused = 0;
    for i in 0..40_000 {
        let key = format!("item:{i}");
        if client.set(&key, &value(i, 0, 100, 1900)) {
            stored.push(i);
        } else {
            refused += 1;
            if refused > 200 {
                break;
            }
        }
    }
    assert!(refused > 200, "8 MiB filled up ({} items stored)", stored.len());
    assert!(stored.len() > 4000, "{} items fit in 8 MiB", stored.len());
    // The binary protocol's answer to a full store.
    let mut binary = Vec::new();
    tierkv_protocol::binary::write_request(&mut binary, 0x01, 7, 0, &[0; 8], b"big:binary", &[b'b'; 60_000]);
    let mut raw = TcpStream::connect(("127.0.0.1", server.1)).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    raw.write_all(&binary).unwrap();
    let mut header = [0u8; 24];
    raw.read_exact(&mut header).unwrap();
    assert_eq!((header[0], u16::from_be_bytes([header[6], header[7]])), (0x81, 0x0082), "ENOMEM");
    assert!(client.stat("", "store_no_memory").parse::<u64>().unwrap() > 200);
    // Full: the bytes moved from free to used, none lost; the spare pool outlasted the arena.
    let (used_full, free_full) = (number(&mut client, "bytes_used"), number(&mut client, "bytes_free"));
    assert_eq!(used_full + free_full, free_empty);
    assert!(free_full < 2 * 2048 * 2, "{free_full} bytes left free when full");
    assert!(number(&mut client, "spare_buckets_free") <= spares);
    // A refused overwrite changes nothing: the old value stays.
    let first = format!("item:{}", stored[0]);
    assert!(!client.set(&first, &[b'n'; 60_000]), "a 60 KB overwrite of a full store");
    // Every acknowledged item reads back byte for byte.
    for &i in &stored {
        assert_eq!(client.get(&format!("item:{i}")), Some(value(i, 0, 100, 1900)), "item {i}");
    }
    // Deleting half makes room: new writes succeed again.
    for &i in stored.iter().step_by(2) {
        assert!(client.delete(&format!("item:{i}")));
    }
    for j in 0..200 {
        assert!(client.set(&format!("again:{j}"), &value(j, 1, 100, 1900)), "write {j} after the deletes");
    }
    for &i in stored.iter().skip(1).step_by(2) {
        assert_eq!(client.get(&format!("item:{i}")), Some(value(i, 0, 100, 1900)), "item {i} after deletes");
    }
}

/// How many 1000-byte items fit from empty (the store must be empty).
fn capacity(client: &mut Client, tag: &str) -> usize {
    let mut count = 0;
    while client.set(&format!("{tag}:{count}"), &[b'c'; 1000]) {
        count += 1;
    }
    for i in 0..count {
        assert!(client.delete(&format!("{tag}:{i}")));
    }
    count
}

#[test]
fn churn_with_changing_sizes_does_not_leak_capacity() {
    let server = store_server(8, 1);
    let mut client = Client::connect(server.1);
    let before = capacity(&mut client, "before");
    let free_before: u64 = client.stat("tierkv", "bytes_free").parse().unwrap();
    // Overwrites of 300 keys with sizes from 10 bytes to 6 KB, some refused when full.
    for round in 0..60 {
        for i in 0..300 {
            let _ = client.set(&format!("churn:{i}"), &value(i, round, 10, 6000));
        }
    }
    for i in 0..300 {
        let _ = client.delete(&format!("churn:{i}"));
    }
    let free_after: u64 = client.stat("tierkv", "bytes_free").parse().unwrap();
    assert_eq!(free_after, free_before, "every byte is free again");
    let after = capacity(&mut client, "after");
    assert_eq!(after, before, "as many items fit after the churn as before");
}
