//! What three of memcached's own test files (1.6.18's `t/issue_14.t`, `t/issue_163.t` and
//! `t/watcher_connid.t`) check, written again against tierkv with two workers: they failed on
//! tierkv in daemon mode before (`scripts/memcached_t.py` runs the originals).

mod common;

use common::{stat_number, stats_map, tierkv_with};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;
use tierkv_engine::partition_of;

fn connect(port: u16) -> (BufReader<TcpStream>, TcpStream) {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    (BufReader::new(stream.try_clone().unwrap()), stream)
}

fn line(reader: &mut BufReader<TcpStream>) -> String {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    line
}

/// Sets `key` to `len` bytes of `fill` expiring after `ttl` seconds; asserts STORED.
fn set(reader: &mut BufReader<TcpStream>, writer: &mut TcpStream, key: &str, ttl: u32, fill: u8, len: usize) {
    let value = vec![fill; len];
    writer.write_all(format!("set {key} 0 {ttl} {len}\r\n").as_bytes()).unwrap();
    writer.write_all(&[&value[..], b"\r\n"].concat()).unwrap();
    assert_eq!(line(reader), "STORED\r\n", "{key}");
}

#[test]
fn memory_of_expired_items_is_reused_as_total_malloced_shows() {
    // issue_14.t: ten 65 KB items that expire, then ten more: total_malloced does not grow.
    let server = tierkv_with(&["-t", "2"]);
    let (mut reader, mut writer) = connect(server.1);
    for key in 0..10 {
        set(&mut reader, &mut writer, &format!("key{key}"), 1, b'B', 66560);
    }
    let first = stat_number(server.1, "slabs", "total_malloced");
    std::thread::sleep(Duration::from_millis(2100));
    for key in 10..20 {
        set(&mut reader, &mut writer, &format!("key{key}"), 1, b'B', 66560);
    }
    assert_eq!(stat_number(server.1, "slabs", "total_malloced"), first);
}

#[test]
fn an_expired_item_replaced_is_reclaimed_in_its_class() {
    // issue_163.t: a 65 KB item expires, the same key is set again: `reclaimed` is 1 in its
    // class; deleted and set once more, the class's mem_requested is what it was.
    let server = tierkv_with(&["-t", "2"]);
    let (mut reader, mut writer) = connect(server.1);
    set(&mut reader, &mut writer, "key", 1, b'A', 66560);
    let requested = stats_map(server.1, "items")["items:31:mem_requested"].clone();
    assert_ne!(requested, "0");
    std::thread::sleep(Duration::from_millis(2100));
    set(&mut reader, &mut writer, "key", 0, b'B', 66570);
    assert_eq!(stats_map(server.1, "items")["items:31:reclaimed"], "1");
    assert_eq!(stat_number(server.1, "", "reclaimed"), 1);
    writer.write_all(b"delete key\r\n").unwrap();
    assert_eq!(line(&mut reader), "DELETED\r\n");
    set(&mut reader, &mut writer, "key", 0, b'A', 66560);
    assert_eq!(stats_map(server.1, "items")["items:31:mem_requested"], requested);
}

/// The descriptor `stats conns` lists for this client (the line whose peer address is its
/// own; memcached's test takes the last line, which is this one only while no lower
/// descriptor was freed before).
fn own_fd(reader: &mut BufReader<TcpStream>, writer: &mut TcpStream) -> String {
    let me = format!(":addr tcp:{}\r\n", writer.local_addr().unwrap());
    writer.write_all(b"stats conns\r\n").unwrap();
    let mut own = None;
    loop {
        let text = line(reader);
        if text == "END\r\n" {
            break;
        }
        if text.ends_with(&me) {
            own = Some(text.trim_start_matches("STAT ").split(':').next().unwrap().to_string());
        }
    }
    own.expect("stats conns lists this connection")
}

#[test]
fn watch_names_the_connection_whose_request_it_logs_whichever_worker_runs_it() {
    // watcher_connid.t: a set logs memcached's lookup (item_get not_found) and the store, and
    // a get from a second client its own descriptor; with two workers one of the clients'
    // keys is run by the worker that does not hold the connection.
    let server = tierkv_with(&["-t", "2"]);
    // A key of each worker's.
    let keys: Vec<String> = (0..2)
        .map(|owner| (0..).map(|i| format!("key{i}")).find(|key| partition_of(key.as_bytes(), 2) == owner).unwrap())
        .collect();
    let (mut first, mut first_writer) = connect(server.1);
    let first_fd = own_fd(&mut first, &mut first_writer);
    let (mut watcher, mut watcher_writer) = connect(server.1);
    watcher_writer.write_all(b"watch fetchers mutations\n").unwrap();
    assert_eq!(line(&mut watcher), "OK\r\n");
    for key in &keys {
        first_writer.write_all(format!("set {key} 0 0 5 noreply\r\nhello\r\n").as_bytes()).unwrap();
        let miss = line(&mut watcher);
        assert!(miss.contains(&format!("type=item_get key={key} status=not_found clsid=0 cfd={first_fd} ")), "{miss}");
        let store = line(&mut watcher);
        let expected = format!("type=item_store key={key} status=stored cmd=set ttl=0 clsid=1 cfd={first_fd} ");
        assert!(store.contains(&expected), "{store}");
    }
    let (mut second, mut second_writer) = connect(server.1);
    let second_fd = own_fd(&mut second, &mut second_writer);
    assert_ne!(first_fd, second_fd);
    for key in &keys {
        second_writer.write_all(format!("get {key}\r\n").as_bytes()).unwrap();
        let hit = line(&mut watcher);
        assert!(hit.contains(&format!("type=item_get key={key} status=found clsid=1 cfd={second_fd} ")), "{hit}");
    }
}
