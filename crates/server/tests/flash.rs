//! The hybrid DRAM + flash server through real clients: a small DRAM log and a flash file, so
//! most items live on flash. Items evicted from DRAM come back byte for byte (pymemcache over
//! text, the Rust `memcache` crate over binary, with one worker and with several); a pipeline
//! mixing DRAM and flash keys is answered in order; a slow flash read holds up nothing else; a
//! clean stop keeps every item for the next start; a kill -9 never leads to a wrong value; bad
//! flash settings stop start-up naming the flag.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A flash file in the temporary directory, removed when dropped.
struct FlashFile(PathBuf);

impl FlashFile {
    fn new(name: &str) -> FlashFile {
        let path = std::env::temp_dir().join(format!("tierkv-flash-test-{}-{name}.flash", std::process::id()));
        let _ = std::fs::remove_file(&path);
        FlashFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("a UTF-8 temporary path")
    }
}

impl Drop for FlashFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// tierkv with 4 MiB of DRAM, 256 KiB items, `threads` workers and `flash` (64 MiB) behind it.
fn hybrid_on(port: u16, flash: &Path, threads: &str, extra: &[&str]) -> Server {
    let mut command = Command::new(TIERKV);
    command
        .args(["-p", &port.to_string(), "-m", "4", "-I", "256k", "-t", threads])
        .args(["--flash-path", flash.to_str().unwrap(), "--flash-size", "64m"])
        .args(extra);
    start(command, port)
}

fn hybrid(flash: &FlashFile, threads: &str, extra: &[&str]) -> Server {
    hybrid_on(free_port(), &flash.0, threads, extra)
}

/// Stops a server with SIGTERM and waits for it (a clean stop writes DRAM to flash).
fn stop(mut server: Server) {
    // SAFETY: kill only sends a signal to the child we started.
    unsafe { libc::kill(server.0.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the server did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A clean stop, then a start on the same port and flash file, once every region is restored.
fn restart(server: Server, flash: &FlashFile, threads: &str) -> Server {
    let port = server.1;
    stop(server);
    let server = hybrid_on(port, &flash.0, threads, &[]);
    wait_restored(&server);
    server
}

/// Keys enough for 4 MiB of DRAM to hold about a third of them.
const N: usize = 40_000;

/// The port listens before the workers have restored their regions: waits until every
/// partition said it did.
fn wait_restored(server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !server.stderr().contains("restored") {
        assert!(Instant::now() < deadline, "not restored: {}", server.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(100));
}

fn value(i: usize) -> Vec<u8> {
    format!("{i}:").repeat(120).into_bytes()[..150 + i % 100].to_vec()
}

fn connect(port: u16) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    stream
}

/// Reads from `stream` until the reply ends with `end`.
fn read_until(stream: &mut TcpStream, end: &[u8]) -> Vec<u8> {
    let mut reply = Vec::new();
    let mut chunk = [0u8; 65536];
    while !reply.ends_with(end) {
        let n = match stream.read(&mut chunk) {
            // A stop and continue of this process (a loaded CI machine) ends a timed read early.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            read => read.expect("a reply before the timeout"),
        };
        assert!(n > 0, "the server closed the connection: {}", String::from_utf8_lossy(&reply));
        reply.extend_from_slice(&chunk[..n]);
    }
    reply
}

/// Sets keys `k0..` with `value(i)`, pipelined, each acknowledged.
fn fill(port: u16, from: usize, to: usize) {
    let mut stream = connect(port);
    for start in (from..to).step_by(200) {
        let mut request = Vec::new();
        let end = (start + 200).min(to);
        for i in start..end {
            let v = value(i);
            request.extend_from_slice(format!("set k{i} {i} 0 {}\r\n", v.len()).as_bytes());
            request.extend_from_slice(&v);
            request.extend_from_slice(b"\r\n");
        }
        stream.write_all(&request).unwrap();
        let reply = read_until(&mut stream, &b"STORED\r\n".repeat(end - start));
        assert_eq!(reply, b"STORED\r\n".repeat(end - start));
    }
}

fn pymemcache_flash(threads: &str) {
    let flash = FlashFile::new(&format!("pymemcache-{threads}"));
    let server = hybrid(&flash, threads, &[]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/flash_client.py");
    let output = Command::new("python3").args([script, &server.1.to_string(), "20000"]).output().expect("python3");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "pymemcache flash checks: {text}");
    assert!(text.contains("all checks passed"), "{text}");
    assert!(stat_number(server.1, "", "recache_from_extstore") > 10_000, "the reads came from flash");
}

#[test]
fn pymemcache_reads_evicted_items_back_from_flash() {
    pymemcache_flash("1");
}

#[test]
fn several_workers_forward_flash_reads_and_answer_in_order() {
    pymemcache_flash("2");
}

#[test]
fn rust_memcache_crate_reads_flash_items_over_binary() {
    let flash = FlashFile::new("binary");
    let server = hybrid(&flash, "2", &[]);
    let url = format!("memcache://127.0.0.1:{}?timeout=20", server.1);
    let client = memcache::Client::connect(url.as_str()).expect("connects over binary");
    for i in 0..N {
        client.set(&format!("b{i}"), value(i).as_slice(), 0).unwrap();
    }
    assert!(stat_number(server.1, "", "extstore_objects_used") > 5_000, "most items went to flash");
    let mut misses = 0;
    for i in 0..N {
        match client.get::<Vec<u8>>(&format!("b{i}")).unwrap() {
            Some(got) => assert_eq!(got, value(i), "b{i}"),
            None => misses += 1,
        }
    }
    if misses >= N / 200 {
        let stats = String::from_utf8_lossy(&exchange_to_sentinel(server.1, b"stats\r\n")).to_string();
        panic!("{misses} items lost: {stats}");
    }
    let keys: Vec<String> = (0..100).map(|i| format!("b{i}")).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let many: std::collections::HashMap<String, Vec<u8>> = client.gets(&refs).unwrap();
    assert!(many.len() >= 99);
    assert!(many.iter().all(|(k, v)| *v == value(k[1..].parse().unwrap())));
}

#[test]
fn a_pipeline_of_dram_and_flash_keys_is_answered_in_order() {
    let flash = FlashFile::new("pipeline");
    let server = hybrid(&flash, "1", &[]);
    fill(server.1, 0, N);
    // The first keys are on flash now, the last ones still in DRAM.
    let mut request = Vec::new();
    let mut expected = Vec::new();
    for round in 0..50 {
        for i in [round, N - 1 - round, 100 + round, N - 100 + round] {
            request.extend_from_slice(format!("get k{i}\r\nmn\r\n").as_bytes());
            let v = value(i);
            expected.extend_from_slice(format!("VALUE k{i} {i} {}\r\n", v.len()).as_bytes());
            expected.extend_from_slice(&v);
            expected.extend_from_slice(b"\r\nEND\r\nMN\r\n");
        }
    }
    request.extend_from_slice(format!("get k3 k{} k4 nothere k{} k5\r\n", N - 2, N - 3).as_bytes());
    for i in [3, N - 2, 4, N - 3, 5] {
        let v = value(i);
        expected.extend_from_slice(format!("VALUE k{i} {i} {}\r\n", v.len()).as_bytes());
        expected.extend_from_slice(&v);
        expected.extend_from_slice(b"\r\n");
    }
    expected.extend_from_slice(b"END\r\n");
    let mut stream = connect(server.1);
    stream.write_all(&request).unwrap();
    let mut reply = vec![0u8; expected.len()];
    stream.read_exact(&mut reply).expect("every reply");
    assert_eq!(String::from_utf8_lossy(&reply), String::from_utf8_lossy(&expected));
    assert!(stat_number(server.1, "", "get_extstore") >= 100, "half the keys were read from flash");
}

/// The VALUE lines of a get reply as (key, flags, value), in order; each carries a CAS if
/// `cas`, else none.
fn values_of(reply: &[u8], cas: bool) -> Vec<(String, String, Vec<u8>)> {
    let mut found = Vec::new();
    let mut rest = reply;
    while let Some(stripped) = rest.strip_prefix(b"VALUE ") {
        let end = stripped.windows(2).position(|w| w == b"\r\n").expect("a header line");
        let header = String::from_utf8_lossy(&stripped[..end]).into_owned();
        let fields: Vec<&str> = header.split(' ').collect();
        let len: usize = fields[2].parse().unwrap();
        let data = &stripped[end + 2..];
        found.push((fields[0].to_string(), fields[1].to_string(), data[..len].to_vec()));
        assert_eq!(fields.len(), 3 + usize::from(cas), "{header}");
        assert!(!cas || fields[3].parse::<u64>().is_ok(), "a CAS: {header}");
        rest = &data[len + 2..];
    }
    assert_eq!(rest, b"END\r\n");
    found
}

#[test]
fn split_gets_and_base64_keys_reach_flash_items_of_every_worker() {
    let flash = FlashFile::new("split");
    let server = hybrid(&flash, "2", &[]);
    fill(server.1, 0, N);
    let mut stream = connect(server.1);
    // The first keys are on flash, owned by both workers: a multi-key gets, gat and gats is
    // split into one part per key, each read where the key lives.
    let keys: Vec<usize> = (0..40).chain([N - 1, N - 2]).collect();
    let line: Vec<String> = keys.iter().map(|i| format!("k{i}")).collect();
    for verb in ["gets", "gat 0", "gats 0", "get"] {
        stream.write_all(format!("{verb} {} nothere\r\n", line.join(" ")).as_bytes()).unwrap();
        let cas = verb.starts_with("gets") || verb.starts_with("gats");
        let found = values_of(&read_until(&mut stream, b"END\r\n"), cas);
        let expected: Vec<(String, String, Vec<u8>)> =
            keys.iter().map(|&i| (format!("k{i}"), i.to_string(), value(i))).collect();
        assert_eq!(found, expected, "{verb}");
    }
    // A meta get and a meta set whose key is base64 (decoded where the request waits).
    stream.write_all(b"mg azU= b v f\r\n").unwrap();
    let reply = read_until(&mut stream, &[&value(5)[..], b"\r\n"].concat());
    let text = String::from_utf8_lossy(&reply).into_owned();
    assert!(text.starts_with(&format!("VA {} ", value(5).len())) && text.contains(" f5\r\n"), "{text}");
    stream.write_all(b"ms azY= 3 b\r\nnew\r\nmn\r\n").unwrap();
    assert_eq!(read_until(&mut stream, b"MN\r\n"), b"HD\r\nMN\r\n");
    stream.write_all(b"get k6\r\n").unwrap();
    assert_eq!(read_until(&mut stream, b"END\r\n"), b"VALUE k6 0 3\r\nnew\r\nEND\r\n");
    assert!(stat_number(server.1, "", "get_extstore") >= 40, "the keys were read from flash");
}

#[test]
fn a_slow_flash_read_holds_up_no_later_request() {
    let flash = FlashFile::new("slow");
    let server = hybrid(&flash, "1", &["--flash-test-read-delay-ms", "1500"]);
    fill(server.1, 0, N);
    let mut slow = connect(server.1);
    let started = Instant::now();
    // A flash key, then a write of another key on the same connection.
    slow.write_all(b"get k7\r\nset after 0 0 1\r\n1\r\n").unwrap();
    // Another connection sees the later write, and reads a DRAM key, long before the flash
    // read completes.
    let mut other = connect(server.1);
    let deadline = Instant::now() + Duration::from_millis(1000);
    loop {
        other.write_all(b"get after\r\n").unwrap();
        let reply = read_until(&mut other, b"END\r\n");
        if reply == b"VALUE after 0 1\r\n1\r\nEND\r\n" {
            break;
        }
        assert!(Instant::now() < deadline, "the set behind a slow flash read waited for it");
    }
    other.write_all(format!("get k{}\r\n", N - 1).as_bytes()).unwrap();
    let reply = read_until(&mut other, b"END\r\n");
    assert!(reply.starts_with(format!("VALUE k{0} {0} ", N - 1).as_bytes()), "{}", String::from_utf8_lossy(&reply));
    assert!(started.elapsed() < Duration::from_millis(1200), "DRAM hits were held up: {:?}", started.elapsed());
    // The slow connection's replies come in order once the read is done.
    let v = value(7);
    let mut expected = format!("VALUE k7 7 {}\r\n", v.len()).into_bytes();
    expected.extend_from_slice(&v);
    expected.extend_from_slice(b"\r\nEND\r\nSTORED\r\n");
    let reply = read_until(&mut slow, b"STORED\r\n");
    assert_eq!(String::from_utf8_lossy(&reply), String::from_utf8_lossy(&expected));
    assert!(started.elapsed() >= Duration::from_millis(1400), "the read really was slow");
}

#[test]
fn a_clean_stop_keeps_every_item_for_the_next_start() {
    let flash = FlashFile::new("restart");
    let port = free_port();
    let server = hybrid_on(port, &flash.0, "2", &[]);
    fill(port, 0, 12_000);
    let reply = exchange_to_sentinel(port, b"gets k11999\r\n");
    let text = String::from_utf8_lossy(&reply).to_string();
    let cas: u64 = text.lines().next().unwrap().split(' ').nth(4).unwrap().parse().unwrap();
    exchange(port, b"delete k5\r\n");
    let server = restart(server, &flash, "2");
    assert!(stat_number(port, "", "curr_items") >= 11_900);
    let mut stream = connect(port);
    for i in (0..12_000).filter(|i| i % 3 == 0 && *i != 5) {
        stream.write_all(format!("get k{i}\r\n").as_bytes()).unwrap();
        let reply = read_until(&mut stream, b"END\r\n");
        let v = value(i);
        let mut expected = format!("VALUE k{i} {i} {}\r\n", v.len()).into_bytes();
        expected.extend_from_slice(&v);
        expected.extend_from_slice(b"\r\nEND\r\n");
        assert_eq!(reply, expected, "k{i} after a warm restart");
    }
    assert_eq!(exchange(port, b"get k5\r\n"), b"END\r\n", "a delete survives the restart");
    // The CAS survived, and new ones are larger than any before.
    assert_eq!(exchange(port, format!("cas k11999 0 0 1 {cas}\r\nx\r\n").as_bytes()), b"STORED\r\n");
    let reply = exchange_to_sentinel(port, b"gets k11999\r\n");
    let text = String::from_utf8_lossy(&reply).to_string();
    let new_cas: u64 = text.lines().next().unwrap().split(' ').nth(4).unwrap().parse().unwrap();
    assert!(new_cas > cas);
    drop(server);
}

/// tierkv on `port` with `threads` workers and `flash` of `size`, once every worker has opened
/// its region (said after the port listens).
fn opened(port: u16, flash: &FlashFile, threads: &str, size: &str, extra: &[&str]) -> Server {
    let mut command = Command::new(TIERKV);
    command.args(["-p", &port.to_string(), "-m", "4", "-I", "256k", "-t", threads]);
    command.args(["--flash-path", flash.path(), "--flash-size", size]).args(extra);
    let server = start(command, port);
    // A loaded machine may take longer than one exchange's quiet time to open the regions.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !exchange(port, b"version\r\n").starts_with(b"VERSION ") {
        assert!(Instant::now() < deadline, "no version in 30 s: {}", server.stderr());
    }
    server
}

/// Keys `k{from}..k{to}` that the server answers with `value(i)` prefixed by `tag`.
fn served_with(port: u16, from: usize, to: usize, tag: &str) -> usize {
    let mut stream = connect(port);
    let mut count = 0;
    for i in from..to {
        stream.write_all(format!("get k{i}\r\n").as_bytes()).unwrap();
        let reply = read_until(&mut stream, b"END\r\n");
        let mut v = tag.as_bytes().to_vec();
        v.extend_from_slice(&value(i));
        count += usize::from(reply.windows(v.len()).any(|w| w == v.as_slice()));
    }
    count
}

/// Sets `k{from}..k{to}` to `tag` + `value(i)` (odd keys deleted instead with `delete_odd`).
fn write_tagged(port: u16, from: usize, to: usize, tag: &str, delete_odd: bool) {
    let mut stream = connect(port);
    for i in from..to {
        if delete_odd && i % 2 == 1 {
            stream.write_all(format!("delete k{i}\r\n").as_bytes()).unwrap();
            let reply = read_until(&mut stream, b"\r\n");
            assert!(reply == b"DELETED\r\n" || reply == b"NOT_FOUND\r\n", "{}", String::from_utf8_lossy(&reply));
            continue;
        }
        let mut v = tag.as_bytes().to_vec();
        v.extend_from_slice(&value(i));
        let mut request = format!("set k{i} 0 0 {}\r\n", v.len()).into_bytes();
        request.extend_from_slice(&v);
        request.extend_from_slice(b"\r\n");
        stream.write_all(&request).unwrap();
        assert_eq!(read_until(&mut stream, b"\r\n"), b"STORED\r\n");
    }
}

/// The operator's round trips: -t 2 -> -t 1 -> -t 2 and 64m -> 96m -> 64m. Run B overwrites or
/// deletes every key run A wrote; run C must serve none of run A's values (before tierkv
/// had one identity per layout, run C served half of them: the region run B never wrote over).
#[test]
fn a_round_trip_through_another_layout_serves_no_old_value() {
    const KEYS: usize = 12_000;
    for (a, b) in [(("2", "64m"), ("1", "64m")), (("2", "64m"), ("2", "96m"))] {
        let flash = FlashFile::new(&format!("round-trip-{}-{}", b.0, b.1));
        let port = free_port();
        let server = opened(port, &flash, a.0, a.1, &[]);
        write_tagged(port, 0, KEYS, "v1:", false);
        assert!(!server.stderr().contains("starts empty"), "a new file is not worth a line: {}", server.stderr());
        stop(server);
        let server = opened(port, &flash, b.0, b.1, &[]);
        let stderr = server.stderr();
        assert!(stderr.contains("the layout changed (was 2 partitions"), "{stderr}");
        assert!(stderr.contains("starts empty: written under an earlier layout"), "{stderr}");
        write_tagged(port, 0, KEYS, "v2:", true);
        stop(server);
        let server = opened(port, &flash, a.0, a.1, &[]);
        assert_eq!(served_with(port, 0, KEYS, "v1:"), 0, "{a:?} -> {b:?} -> {a:?}: {}", server.stderr());
        stop(server);
    }
}

/// A change of `--flash-item-bytes` resizes the index: the start-up line names the sizes.
#[test]
fn a_new_item_size_starts_the_tier_empty_and_says_which_size_changed() {
    let flash = FlashFile::new("item-bytes");
    let port = free_port();
    let sets = ["--flash-index", "sets", "--flash-item-bytes"];
    let server = opened(port, &flash, "2", "64m", &[&sets[..], &["88"]].concat());
    write_tagged(port, 0, 2000, "v1:", false);
    stop(server);
    let server = opened(port, &flash, "2", "64m", &[&sets[..], &["116"]].concat());
    let stderr = server.stderr();
    assert!(
        stderr.contains("the sets index, sized for 128-byte items on flash (--flash-item-bytes up to 88)")
            && stderr.contains("now 2 partitions, 67108864 bytes, 1048576-byte segments, the sets index, sized for 160-byte items on flash (--flash-item-bytes up to 120)"),
        "{stderr}"
    );
    assert_eq!(served_with(port, 0, 2000, "v1:"), 0);
    stop(server);
}

#[test]
fn a_damaged_superblock_says_so_and_starts_empty() {
    let flash = FlashFile::new("damaged");
    let port = free_port();
    let server = opened(port, &flash, "2", "64m", &[]);
    fill(port, 0, 3000);
    stop(server);
    // Something wrote over region 0's two superblock pages (after the file header).
    let mut bytes = std::fs::read(&flash.0).unwrap();
    bytes[4096..4160].fill(0x5a);
    bytes[8192..8256].fill(0x5a);
    std::fs::write(&flash.0, &bytes).unwrap();
    let server = opened(port, &flash, "2", "64m", &[]);
    let stderr = server.stderr();
    assert!(stderr.contains("starts empty: no valid superblock: its page is neither blank nor tierkv's"), "{stderr}");
    drop(server);
}

/// A file that is not tierkv's is refused, untouched, naming the path; --flash-force takes it.
#[test]
fn a_foreign_file_is_refused_unless_forced() {
    let flash = FlashFile::new("foreign");
    let foreign: Vec<u8> = (0..(1u32 << 20)).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(&flash.0, &foreign).unwrap();
    let run = |extra: &[&str]| {
        Command::new(TIERKV)
            .args(["-p", &free_port().to_string(), "-m", "4", "-t", "1"])
            .args(["--flash-path", flash.path(), "--flash-size", "64m"])
            .args(extra)
            .output()
            .unwrap()
    };
    let output = run(&[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains(&format!("--flash-path {}: holds something that is not tierkv's", flash.path())),
        "{stderr}"
    );
    assert!(std::fs::read(&flash.0).unwrap() == foreign, "a refused file is left as it was");
    let port = free_port();
    let server = opened(port, &flash, "1", "64m", &["--flash-force"]);
    assert!(server.stderr().contains("taken over (--flash-force)"), "{}", server.stderr());
    fill(port, 0, 2000);
    stop(server);
    let server = opened(port, &flash, "1", "64m", &[]);
    wait_restored(&server);
    assert!(served_with(port, 0, 2000, "") > 1900, "ours from then on: {}", server.stderr());
}

/// A flash size the disk cannot hold fails start-up and leaves no file behind.
#[test]
fn an_oversized_flash_file_is_not_left_behind() {
    let flash = FlashFile::new("oversized");
    let output = Command::new(TIERKV)
        .args(["-p", &free_port().to_string(), "-t", "4", "--flash-path", flash.path(), "--flash-size", "3t"])
        .args(["--flash-segment-size", "4m"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("cannot open or size it"), "{stderr}");
    assert!(!flash.0.exists(), "the file start-up created is removed");
}

#[test]
fn bad_flash_settings_stop_start_up_naming_the_flag() {
    let flash = FlashFile::new("bad");
    let cases: [(&[&str], &str); 9] = [
        (&["--flash-size", "64m"], "--flash-size needs --flash-path"),
        (&["--flash-path", flash.path()], "--flash-size is needed with --flash-path"),
        (&["--flash-path", flash.path(), "--flash-size", "lots"], "--flash-size \"lots\" must be a size"),
        (&["-o", "ext_path=nosize"], "-o ext_path \"nosize\" must be PATH:SIZE"),
        (&["-o", "ext_item_size=64,ext_bogus=1"], "-o \"ext_bogus=1\""),
        (&["--flash-path", flash.path(), "--flash-size", "64m", "--mode", "store"], "--flash-path needs cache mode"),
        (&["--flash-path", "/", "--flash-size", "64m"], "--flash-path /: is a directory"),
        (&["--flash-path", flash.path(), "--flash-size", "1m"], "--flash-size 1048576 cannot be laid out"),
        (
            &["--flash-path", flash.path(), "--flash-size", "4g", "--flash-memory-mib", "4"],
            "--flash-memory-mib 4 MiB cannot hold",
        ),
    ];
    for (args, expected) in cases {
        let output = Command::new(TIERKV).args(["-p", &free_port().to_string()]).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} started");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    let output = Command::new(TIERKV)
        .args(["-p", &free_port().to_string(), "--flash-path", "/nonexistent-dir/x.flash", "--flash-size", "64m"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--flash-path /nonexistent-dir/x.flash: cannot open"), "{stderr}");
}

#[test]
fn memcached_ext_path_is_the_flash_path() {
    let flash = FlashFile::new("ext-path");
    let port = free_port();
    let mut command = Command::new(TIERKV);
    command.args(["-p", &port.to_string(), "-m", "4", "-I", "256k", "-t", "1"]);
    command.args(["-o", &format!("ext_path={}:64m,ext_item_size=64", flash.path())]);
    let server = start(command, port);
    let reply = String::from_utf8_lossy(&exchange_to_sentinel(port, b"stats settings\r\n")).to_string();
    assert!(reply.contains(&format!("STAT flash_path {}\r\n", flash.path())), "{reply}");
    assert!(reply.contains("STAT flash_size 67108864\r\n"), "{reply}");
    fill(port, 0, N);
    assert!(stat_number(port, "", "extstore_objects_used") > 5_000);
    drop(server);
}

#[test]
fn an_invalidated_item_stays_stale_through_flash_and_a_restart() {
    let flash = FlashFile::new("stale");
    let port = free_port();
    let server = hybrid_on(port, &flash.0, "1", &[]);
    assert_eq!(exchange(port, b"ms st 5 T0\r\nhello\r\n"), b"HD\r\n");
    fill(port, 0, N);
    // On flash only now: md with I reads it back, marks it stale, and the stale copy is what
    // goes to flash when DRAM overflows again.
    assert_eq!(exchange(port, b"md st I\r\n"), b"HD\r\n");
    fill(port, N, 2 * N);
    let reply = exchange(port, b"mg st v c\r\n");
    let text = String::from_utf8_lossy(&reply).to_string();
    assert!(text.starts_with("VA 5 ") && text.contains(" X") && text.contains(" W"), "{text}");
    // The next reader sees the token already handed out (Z), also after a clean restart.
    let server = restart(server, &flash, "1");
    let text = String::from_utf8_lossy(&exchange(port, b"mg st v\r\n")).to_string();
    assert!(text.starts_with("VA 5 ") && text.contains(" X") && text.contains(" Z"), "{text}");
    drop(server);
}

#[test]
fn flush_all_empties_the_flash_tier_now_and_when_delayed_across_a_restart() {
    let flash = FlashFile::new("flush");
    let port = free_port();
    let server = hybrid_on(port, &flash.0, "2", &[]);
    fill(port, 0, N);
    assert_eq!(exchange(port, b"flush_all\r\n"), b"OK\r\n");
    assert_eq!(exchange(port, b"get k1 k2 k39999\r\n"), b"END\r\n");
    fill(port, 0, N);
    assert_eq!(exchange(port, b"flush_all 6\r\n"), b"OK\r\n");
    let flushed = Instant::now();
    let server = restart(server, &flash, "2");
    assert!(exchange(port, b"get k1\r\n").starts_with(b"VALUE k1 "), "served until the deadline");
    assert!(flushed.elapsed() < Duration::from_secs(4), "the restart took too long to tell");
    std::thread::sleep(Duration::from_secs(7).saturating_sub(flushed.elapsed()));
    assert_eq!(exchange(port, b"get k1 k2 k39999\r\n"), b"END\r\n", "flushed at the deadline");
    drop(server);
}

#[test]
fn lru_crawler_metadump_lists_flash_items_too() {
    let flash = FlashFile::new("metadump");
    let server = hybrid(&flash, "2", &[]);
    fill(server.1, 0, N);
    exchange(server.1, b"delete k9\r\n");
    assert!(stat_number(server.1, "", "extstore_objects_used") > (N / 2) as u64, "most items are on flash");
    let mut stream = connect(server.1);
    stream.write_all(b"lru_crawler metadump all\r\n").unwrap();
    let reply = read_until(&mut stream, b"END\r\n");
    let text = String::from_utf8_lossy(&reply);
    let keys: std::collections::HashSet<&str> =
        text.lines().filter_map(|line| line.strip_prefix("key=")?.split(' ').next()).collect();
    assert_eq!(text.lines().filter(|line| line.starts_with("key=")).count(), keys.len(), "listed once each");
    assert!(!keys.contains("k9"), "a deleted key is not listed");
    assert!(keys.len() >= N - N / 200, "{} of {N} keys listed", keys.len());
}

#[test]
fn every_extstore_stat_name_is_one_memcached_reports() {
    let names = |port: u16| -> Vec<String> {
        String::from_utf8_lossy(&exchange_to_sentinel(port, b"stats\r\n"))
            .lines()
            .filter_map(|line| line.strip_prefix("STAT ")?.split(' ').next().map(str::to_string))
            .filter(|name| name.contains("extstore"))
            .collect()
    };
    let ours = FlashFile::new("names");
    let theirs = FlashFile::new("names-memcached");
    let memcached = memcached_with(&["-o", &format!("ext_path={}:64m,ext_item_size=64", theirs.path())]);
    let tierkv = hybrid(&ours, "1", &[]);
    let (mine, memcached_names) = (names(tierkv.1), names(memcached.1));
    assert!(mine.len() >= 13, "{mine:?}");
    for name in &mine {
        assert!(memcached_names.contains(name), "{name} is not one of memcached's: {memcached_names:?}");
    }
}

/// A key read back from flash is in DRAM and on flash at once: `curr_items` counts it once,
/// and the figures that explain misses are there. (The worker sleeps at once while its reads are
/// in flight, `--flash-poll-us 0`: the other tests look for completions first.)
#[test]
fn curr_items_counts_a_key_in_both_tiers_once() {
    let flash = FlashFile::new("curr-items");
    let server = hybrid(&flash, "1", &["--flash-sync", "--flash-poll-us", "0"]);
    let port = server.1;
    fill(port, 0, N);
    let before = stat_number(port, "", "curr_items");
    let mut stream = connect(port);
    for i in 0..N {
        stream.write_all(format!("get k{i}\r\n").as_bytes()).unwrap();
        read_until(&mut stream, b"END\r\n");
    }
    let stats = stats_map(port, "");
    let number = |name: &str| stats[name].parse::<u64>().unwrap();
    assert!(number("flash_items_in_dram_too") > 1000, "reads promoted items: {stats:?}");
    let after = number("curr_items");
    // Within 1%: the log counts an item until its bytes are overwritten, and the eviction walk
    // writes it to flash just before (memcached's own count is exact; before this fix reading
    // every key back counted each read key twice).
    let bound = N as u64 + N as u64 / 100;
    assert!(after <= bound && before <= bound, "each key once: {before} then {after} of {N}");
    assert!(after >= before * 9 / 10, "promotions lose nothing: {before} then {after}");
    for name in ["flash_index_evictions", "flash_spill_held", "flash_durable_waits", "flash_recovered_items"] {
        assert!(stats.contains_key(name), "{name}");
    }
    let settings = stats_map(port, "settings");
    assert_eq!((settings["flash_sync"].as_str(), settings["flash_poll_us"].as_str()), ("yes", "0"));
}

/// One budget for all the flash tier's DRAM: the index that fits it is chosen, and what the
/// tier holds stays within it.
#[test]
fn the_flash_tier_keeps_to_its_memory_budget() {
    let flash = FlashFile::new("budget");
    for (budget, index) in [("48", "full"), ("24", "cascade")] {
        let port = free_port();
        let server = opened(port, &flash, "2", "512m", &["--flash-memory-mib", budget]);
        let settings = stats_map(port, "settings");
        assert_eq!((settings["flash_memory_mib"].as_str(), settings["flash_index"].as_str()), (budget, index));
        fill(port, 0, 20_000);
        let held = stat_number(port, "", "flash_index_bytes");
        assert!(held <= budget.parse::<u64>().unwrap() << 20, "{held} bytes held with a {budget} MiB budget");
        stop(server);
        let _ = std::fs::remove_file(&flash.0);
    }
}

/// A change of a flash-resident key whose invalidation the device fails to write is answered
/// SERVER_ERROR and changes nothing: the old value is still served, and once the device works
/// again the same change goes through.
#[test]
fn a_failed_invalidation_write_is_a_server_error_and_changes_nothing() {
    let flash = FlashFile::new("failing");
    let switch = std::env::temp_dir().join(format!("tierkv-fail-writes-{}", std::process::id()));
    let _ = std::fs::remove_file(&switch);
    let server = hybrid(&flash, "1", &["--flash-test-fail-writes-while", switch.to_str().unwrap()]);
    let port = server.1;
    // k0 leaves DRAM early and its segment is written long before the fill ends.
    fill(port, 0, N);
    std::fs::write(&switch, b"").unwrap();
    let reply = exchange(port, b"set k0 0 0 4\r\nnew!\r\n");
    std::fs::remove_file(&switch).unwrap();
    assert_eq!(String::from_utf8_lossy(&reply), "SERVER_ERROR flash write failed; nothing changed\r\n");
    let mut old = b"VALUE k0 0 150\r\n".to_vec();
    old.extend_from_slice(&value(0));
    old.extend_from_slice(b"\r\nEND\r\n");
    assert_eq!(String::from_utf8_lossy(&exchange(port, b"get k0\r\n")), String::from_utf8_lossy(&old));
    assert_eq!(exchange(port, b"set k0 0 0 4\r\nnew!\r\n"), b"STORED\r\n");
    assert_eq!(exchange(port, b"get k0\r\n"), b"VALUE k0 0 4\r\nnew!\r\nEND\r\n");
    assert!(stat_number(port, "", "flash_durable_failures") >= 1);
}
