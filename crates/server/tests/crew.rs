//! Concurrent reads and locked writes (`--concurrency crcw`, the default; `crew` reads only): a
//! worker reads keys other workers own itself, and with `crcw` also writes them under the
//! owner's partition lock. Readers on every worker, while writers on every worker overwrite the
//! same keys, never read a value older than one already acknowledged, nor a torn one; `erew`
//! forwards every read instead.

mod common;

use common::{start, stats_map, Server, TIERKV};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Keys the hammer overwrites (DRAM-sized; `FLASH_KEYS` with a flash tier, so that items move
/// to flash and back while they are read).
const KEYS: usize = 200;
const FLASH_KEYS: usize = 12_000;

fn server(extra: &[&str]) -> Server {
    let port = common::free_port();
    let mut command = Command::new(TIERKV);
    command.args(["-p", &port.to_string(), "-m", "8", "-t", "2"]).args(extra);
    start(command, port)
}

/// A version's value: its number, padded to a length that depends on it, ending in a check.
fn versioned(version: u64) -> String {
    let pad = "x".repeat((version % 11) as usize * 97);
    format!("{version}:{pad}:{}", version * 7 + pad.len() as u64)
}

fn parse(data: &str) -> u64 {
    let version: u64 = data.split(':').next().unwrap().parse().expect("a version");
    assert_eq!(data, versioned(version), "a torn or mixed value");
    version
}

fn connect(port: u16) -> (TcpStream, BufReader<TcpStream>) {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    (stream.try_clone().unwrap(), BufReader::new(stream))
}

/// (key number, version) of each hit of one get reply.
fn read_get(reader: &mut BufReader<TcpStream>) -> Vec<(usize, u64)> {
    common::read_values(reader).into_iter().map(|(key, data)| (key[1..].parse().unwrap(), parse(&data))).collect()
}

fn writer(port: u16, first: usize, acked: &[AtomicU64], stop: &AtomicBool) {
    let (mut out, mut reader) = connect(port);
    let mut version = 0;
    while !stop.load(Ordering::Acquire) {
        version += 1;
        for k in (first..acked.len()).step_by(2) {
            if stop.load(Ordering::Acquire) {
                break;
            }
            let value = versioned(version * 1000 + k as u64);
            out.write_all(format!("set k{k} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes()).unwrap();
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            assert_eq!(line, "STORED\r\n");
            acked[k].store(version * 1000 + k as u64, Ordering::Release);
        }
    }
}

fn reader(port: u16, seed: u64, acked: &[AtomicU64], stop: &AtomicBool) -> u64 {
    let (mut out, mut reader) = connect(port);
    let mut rng = seed;
    let mut checked = 0;
    while !stop.load(Ordering::Acquire) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let keys: Vec<usize> = (0..1 + rng as usize % 4).map(|i| (rng >> (8 * i)) as usize % acked.len()).collect();
        let floors: Vec<u64> = keys.iter().map(|&k| acked[k].load(Ordering::Acquire)).collect();
        let line: Vec<String> = keys.iter().map(|k| format!("k{k}")).collect();
        out.write_all(format!("get {}\r\n", line.join(" ")).as_bytes()).unwrap();
        let hits = read_get(&mut reader);
        for (k, floor) in keys.iter().zip(floors) {
            if let Some(&(_, version)) = hits.iter().find(|(key, _)| key == k) {
                assert!(version >= floor, "k{k}: read version {version} after {floor} was acknowledged");
            } else {
                assert_eq!(floor, 0, "k{k}: a miss after version {floor} was acknowledged");
            }
            checked += 1;
        }
    }
    checked
}

/// Every write of another worker's key runs under its owner's lock or is forwarded, whichever
/// the moment allows; the sum is what is certain on any machine.
#[test]
fn readers_on_every_worker_never_read_an_unacknowledged_past() {
    let paths = hammer(&server(&[]), KEYS, "crcw");
    assert!(paths.crew > 1000, "only {} concurrent reads", paths.crew);
    assert!(paths.locked + paths.forwarded > 100, "{paths:?}: writes of other workers' keys took neither path");
}

/// The locked path every time (`--test-guest-lock wait`: a worker waits for the owner's lock
/// instead of forwarding when it finds it taken).
#[test]
fn writes_under_the_owners_lock_never_let_a_reader_see_an_unacknowledged_past() {
    let paths = hammer(&server(&["--test-guest-lock", "wait"]), KEYS, "crcw");
    assert!(paths.crew > 1000 && paths.locked > 100, "{paths:?}");
}

/// The contended path every time (`--test-guest-lock never`: the owner's lock is never free),
/// so every write of another worker's key is forwarded while readers read it concurrently.
#[test]
fn writes_forwarded_past_a_taken_lock_never_let_a_reader_see_an_unacknowledged_past() {
    let paths = hammer(&server(&["--test-guest-lock", "never"]), KEYS, "crcw");
    assert!(paths.crew > 1000 && paths.forwarded > 100, "{paths:?}");
    assert_eq!(paths.locked, 0, "a request ran under a lock that was never free");
}

#[test]
fn crew_readers_never_read_an_unacknowledged_past_while_writes_are_forwarded() {
    let paths = hammer(&server(&["--concurrency", "crew"]), KEYS, "crew");
    assert!(paths.crew > 1000 && paths.forwarded > 100, "{paths:?}");
    assert_eq!(paths.locked, 0, "crew executed requests under a lock");
}

/// Store mode has no concurrent reader: every request of another worker's key runs under its
/// lock (with `--test-guest-lock wait`, every time).
#[test]
fn store_mode_requests_under_the_lock_never_read_an_unacknowledged_past() {
    let paths = hammer(&server(&["--mode", "store", "--test-guest-lock", "wait"]), KEYS, "crcw");
    assert_eq!(paths.crew, 0, "store mode has no concurrent reader");
    assert!(paths.locked > 100, "{paths:?}");
}

/// With a flash tier, items leave DRAM for flash and come back while they are read: a DRAM hit
/// is read concurrently, anything that may involve flash goes to the owner (no lock is offered),
/// and no reader sees an old, torn or lost value.
#[test]
fn with_a_flash_tier_readers_never_read_an_unacknowledged_past() {
    let flash = std::env::temp_dir().join(format!("tierkv-crew-hammer-{}.flash", std::process::id()));
    let port = common::free_port();
    let server = start(common::hybrid_command(port, &flash, &[], "64m"), port);
    let paths = hammer(&server, FLASH_KEYS, "crcw");
    assert_eq!(paths.locked, 0, "no lock is offered with a flash tier");
    let flash_gets: u64 = stats_map(port, "")["get_extstore"].parse().unwrap();
    drop(std::fs::remove_file(&flash));
    assert!(flash_gets > 100, "only {flash_gets} gets were served from flash");
}

/// Every key's first version (its own number), pipelined a hundred at a time, so that with
/// many keys the hammer starts with DRAM full and the oldest items on flash.
fn preload(port: u16, acked: &[AtomicU64]) {
    let (mut out, mut reader) = connect(port);
    for chunk in (0..acked.len()).collect::<Vec<_>>().chunks(100) {
        let sets: String = chunk
            .iter()
            .map(|&k| format!("set k{k} 0 0 {}\r\n{}\r\n", versioned(k as u64).len(), versioned(k as u64)))
            .collect();
        out.write_all(sets.as_bytes()).unwrap();
        for &k in chunk {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            assert_eq!(line, "STORED\r\n");
            acked[k].store(k as u64, Ordering::Release);
        }
    }
}

/// How the requests for other workers' keys were served (`stats tierkv`).
#[derive(Debug)]
struct Paths {
    /// Read concurrently, with no lock and no message.
    crew: u64,
    /// Run under the owner's partition lock.
    locked: u64,
    /// Forwarded to the owner.
    forwarded: u64,
}

impl Paths {
    /// The server's counts so far.
    fn of(port: u16) -> Paths {
        let stats = stats_map(port, "tierkv");
        let count = |name: &str| stats[name].parse::<u64>().unwrap();
        Paths { crew: count("crew_reads"), locked: count("locked_requests"), forwarded: count("forwarded_requests") }
    }
}

/// Two writers and four readers on one `-t 2` server for 3 s over `keys` keys; which paths
/// the requests of other workers' keys took.
fn hammer(server: &Server, keys: usize, concurrency: &str) -> Paths {
    let port = server.1;
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..keys).map(|_| AtomicU64::new(0)).collect());
    preload(port, &acked);
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|first| {
            let (acked, stop) = (Arc::clone(&acked), Arc::clone(&stop));
            std::thread::spawn(move || writer(port, first, &acked, &stop))
        })
        .collect();
    let readers: Vec<_> = (0..4)
        .map(|i| {
            let (acked, stop) = (Arc::clone(&acked), Arc::clone(&stop));
            std::thread::spawn(move || reader(port, 0x9E37_79B9 + i, &acked, &stop))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Release);
    for w in writers {
        w.join().expect("a writer failed");
    }
    let checked: u64 = readers.into_iter().map(|r| r.join().expect("a reader read a wrong value")).sum();
    let stats = stats_map(port, "tierkv");
    assert_eq!(stats["concurrency"], concurrency);
    assert!(checked > 1000, "only {checked} reads checked");
    Paths::of(port)
}

#[test]
fn erew_forwards_every_read_and_a_bad_setting_names_its_flag() {
    let server = server(&["--concurrency", "erew"]);
    let port = server.1;
    let (mut out, mut reader) = connect(port);
    for k in 0..50 {
        out.write_all(format!("set k{k} 0 0 {}\r\n{}\r\n", versioned(k).len(), versioned(k)).as_bytes()).unwrap();
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert_eq!(line, "STORED\r\n");
    }
    for _ in 0..3 {
        let keys: Vec<String> = (0..50).map(|k| format!("k{k}")).collect();
        out.write_all(format!("get {}\r\n", keys.join(" ")).as_bytes()).unwrap();
        assert_eq!(read_get(&mut reader).len(), 50);
    }
    let stats = stats_map(port, "tierkv");
    assert_eq!((stats["concurrency"].as_str(), stats["crew_reads"].as_str()), ("erew", "0"));
    let refused = Command::new(TIERKV).args(["-p", "1", "--concurrency", "lock"]).output().unwrap();
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("--concurrency"), "{said}");
}

/// A get answered by a concurrent read still counts as a fetch: a later `mg k h` says `h1`, as
/// memcached does, whichever worker owns the key.
#[test]
fn a_concurrent_read_marks_the_item_fetched() {
    let server = server(&[]);
    let memcached = common::memcached();
    for port in [server.1, memcached.1] {
        let (mut out, mut reader) = connect(port);
        let mut hits = 0;
        for k in 0..40 {
            // One request at a time, so the get is not queued behind the set's forward.
            let mut lines = String::new();
            for (request, replies) in
                [(format!("set f{k} 0 0 1\r\nv\r\n"), 1), (format!("get f{k}\r\n"), 3), (format!("mg f{k} h\r\n"), 1)]
            {
                out.write_all(request.as_bytes()).unwrap();
                for _ in 0..replies {
                    reader.read_line(&mut lines).unwrap();
                }
            }
            assert_eq!(lines, format!("STORED\r\nVALUE f{k} 0 1\r\nv\r\nEND\r\nHD h1\r\n"), "port {port}");
            hits += 1;
        }
        assert_eq!(hits, 40);
    }
    let crew: u64 = stats_map(server.1, "tierkv")["crew_reads"].parse().unwrap();
    assert!(crew >= 10, "{crew} of the gets were concurrent reads");
}

/// Read-modify-writes of the same keys from clients on every worker, each executed by the
/// owner or under its partition lock (`crcw`), lose nothing: every incr and every append counts.
#[test]
fn increments_and_appends_from_every_worker_are_all_kept() {
    let paths = increments_and_appends(&[]);
    assert!(paths.locked + paths.forwarded > 0, "{paths:?}");
}

/// The same with every request of another worker's key under its lock, then with every one
/// forwarded (the two paths, each forced).
#[test]
fn increments_and_appends_under_the_lock_or_forwarded_are_all_kept() {
    let paths = increments_and_appends(&["--test-guest-lock", "wait"]);
    assert!(paths.locked > 0, "{paths:?}");
    let paths = increments_and_appends(&["--test-guest-lock", "never"]);
    assert!(paths.forwarded > 0 && paths.locked == 0, "{paths:?}");
}

/// Six clients incr and append the same eight counters; nothing is lost. The paths taken.
fn increments_and_appends(extra: &[&str]) -> Paths {
    const CLIENTS: usize = 6;
    const ROUNDS: usize = 400;
    const COUNTERS: usize = 8;
    let server = server(extra);
    let port = server.1;
    let (mut out, mut reader) = connect(port);
    for k in 0..COUNTERS {
        out.write_all(format!("set n{k} 0 0 1\r\n0\r\nset a{k} 0 0 0\r\n\r\n").as_bytes()).unwrap();
        for _ in 0..2 {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            assert_eq!(line, "STORED\r\n");
        }
    }
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            std::thread::spawn(move || {
                let (mut out, mut reader) = connect(port);
                for round in 0..ROUNDS {
                    let k = (round + c) % COUNTERS;
                    out.write_all(format!("incr n{k} 1\r\nappend a{k} 0 0 1\r\n{}\r\n", c % 10).as_bytes()).unwrap();
                    let (mut incr, mut append) = (String::new(), String::new());
                    reader.read_line(&mut incr).unwrap();
                    reader.read_line(&mut append).unwrap();
                    assert!(incr.trim_end().parse::<u64>().is_ok(), "incr answered {incr:?}");
                    assert_eq!(append, "STORED\r\n");
                }
            })
        })
        .collect();
    for client in clients {
        client.join().expect("a client failed");
    }
    let keys: Vec<String> = (0..COUNTERS).flat_map(|k| [format!("n{k}"), format!("a{k}")]).collect();
    out.write_all(format!("get {}\r\n", keys.join(" ")).as_bytes()).unwrap();
    let values = common::read_values(&mut reader);
    let counted: u64 =
        values.iter().filter(|(key, _)| key.starts_with('n')).map(|(_, v)| v.parse::<u64>().unwrap()).sum();
    let appended: usize = values.iter().filter(|(key, _)| key.starts_with('a')).map(|(_, v)| v.len()).sum();
    assert_eq!(counted, (CLIENTS * ROUNDS) as u64, "increments lost");
    assert_eq!(appended, CLIENTS * ROUNDS, "appends lost");
    Paths::of(port)
}

/// An mg asking only for what a copy holds is answered by a concurrent read, byte for byte as
/// memcached answers it (hits, misses, quiet misses, opaque); its CAS is the item's.
#[test]
fn meta_gets_of_other_workers_keys_are_read_concurrently_and_answered_as_memcached_does() {
    let server = server(&[]);
    let memcached = common::memcached();
    let script: String = (0..40)
        .map(|k| {
            format!(
                "set m{k} {k} 0 {}\r\n{}\r\nmg m{k} v f s k Oab{k}\r\nmg m{k}\r\nmg x{k} v q\r\nmg x{k} v k\r\n",
                k + 1,
                "v".repeat(k + 1)
            )
        })
        .chain(["mn\r\n".to_string()])
        .collect();
    let replies: Vec<String> = [server.1, memcached.1]
        .iter()
        .map(|&port| String::from_utf8_lossy(&common::exchange_to_sentinel(port, script.as_bytes())).into_owned())
        .collect();
    assert_eq!(replies[0], replies[1], "tierkv and memcached differ");
    let (mut out, mut reader) = connect(server.1);
    for k in 0..40 {
        out.write_all(format!("gets m{k}\r\nmg m{k} c\r\n").as_bytes()).unwrap();
        let mut lines = vec![String::new(); 4];
        for line in &mut lines {
            reader.read_line(line).unwrap();
        }
        let cas = lines[0].split_whitespace().nth(4).expect("a gets line with a CAS").to_string();
        assert_eq!(lines[3], format!("HD c{cas}\r\n"), "m{k}");
    }
    let crew: u64 = stats_map(server.1, "tierkv")["crew_reads"].parse().unwrap();
    assert!(crew >= 40, "only {crew} reads were concurrent");
}

/// One binary request: `opcode`, `extras`, `key`, `value`, opaque `opaque`.
fn binary(opcode: u8, extras: &[u8], key: &[u8], value: &[u8], opaque: u32) -> Vec<u8> {
    let body = (extras.len() + key.len() + value.len()) as u32;
    let mut packet = vec![0x80, opcode];
    packet.extend_from_slice(&(key.len() as u16).to_be_bytes());
    packet.extend_from_slice(&[extras.len() as u8, 0, 0, 0]);
    packet.extend_from_slice(&body.to_be_bytes());
    packet.extend_from_slice(&opaque.to_be_bytes());
    packet.extend_from_slice(&[0; 8]);
    packet.extend_from_slice(extras);
    packet.extend_from_slice(key);
    packet.extend_from_slice(value);
    packet
}

/// A binary reply stream with every CAS field zeroed (two servers number their items apart).
fn without_cas(mut replies: Vec<u8>) -> Vec<u8> {
    let mut at = 0;
    while at + 24 <= replies.len() {
        let body = u32::from_be_bytes(replies[at + 8..at + 12].try_into().unwrap()) as usize;
        replies[at + 16..at + 24].fill(0);
        at += 24 + body;
    }
    replies
}

/// Binary GET, GETQ, GETK and GETKQ of other workers' keys are answered by concurrent reads,
/// byte for byte as memcached answers them (hits with flags and value, a GETK miss with its
/// key, quiet misses silent, opaques echoed), CAS aside.
#[test]
fn binary_gets_of_other_workers_keys_are_read_concurrently_and_answered_as_memcached_does() {
    const GET: u8 = 0x00;
    const SET: u8 = 0x01;
    const GETQ: u8 = 0x09;
    const NOOP: u8 = 0x0a;
    const GETK: u8 = 0x0c;
    const GETKQ: u8 = 0x0d;
    let server = server(&[]);
    let memcached = common::memcached();
    let mut script = Vec::new();
    for k in 0..40u32 {
        let (key, missing) = (format!("b{k}"), format!("y{k}"));
        let extras = [k.to_be_bytes(), 0u32.to_be_bytes()].concat();
        script.extend(binary(SET, &extras, key.as_bytes(), "v".repeat(k as usize + 1).as_bytes(), k));
        script.extend(binary(GET, &[], key.as_bytes(), &[], 1000 + k));
        script.extend(binary(GETK, &[], key.as_bytes(), &[], 2000 + k));
        script.extend(binary(GETKQ, &[], key.as_bytes(), &[], 3000 + k));
        script.extend(binary(GETQ, &[], missing.as_bytes(), &[], 4000 + k));
        script.extend(binary(GETK, &[], missing.as_bytes(), &[], 5000 + k));
        script.extend(binary(GET, &[], missing.as_bytes(), &[], 6000 + k));
    }
    script.extend(binary(NOOP, &[], &[], &[], 7));
    let replies: Vec<Vec<u8>> = [server.1, memcached.1]
        .iter()
        .map(|&port| without_cas(common::exchange_and_close(port, &script, common::PATIENT).0))
        .collect();
    assert!(replies[1].len() > 40 * 24, "memcached answered too little: {} bytes", replies[1].len());
    assert_eq!(replies[0], replies[1], "tierkv and memcached differ");
    let crew: u64 = stats_map(server.1, "tierkv")["crew_reads"].parse().unwrap();
    assert!(crew >= 40, "only {crew} binary reads were concurrent");
}
