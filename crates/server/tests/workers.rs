//! Several workers, each owning a partition: requests for keys of any partition through any
//! connection get memcached's replies in request order (forwarding), request direction through
//! the direct ports forwards nothing, and many clients on overlapping keys always read a value
//! at least as new as the last one acknowledged.

mod common;

use common::{
    exchange_binary_to_sentinel_within, exchange_to_sentinel_within, free_port, mask_cas, memcached, start, Server,
    PATIENT, TIERKV,
};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tierkv_client::{partition_of, Topology};
use tierkv_protocol::binary::{opcode, write_request};

/// tierkv with `workers` workers, 64 MiB, direct ports and `--concurrency concurrency`;
/// (server, direct port base).
fn tierkv_direct(workers: usize, concurrency: &str) -> (Server, u16) {
    let port = free_port();
    let base = tierkv_bench::ports::free_ports(workers as u16).unwrap();
    let mut command = Command::new(TIERKV);
    command.args([
        "-p",
        &port.to_string(),
        "-m",
        "64",
        "-t",
        &workers.to_string(),
        "--direct-ports",
        &base.to_string(),
        "--concurrency",
        concurrency,
    ]);
    (start(command, port), base)
}

fn topology(port: u16) -> Topology {
    Topology::fetch(([127, 0, 0, 1], port).into(), Duration::from_secs(5)).unwrap()
}

/// Keys named `prefix0`, `prefix1`, ... with their partitions among `workers`.
fn keys(prefix: &str, count: usize, workers: usize) -> Vec<(String, usize)> {
    (0..count)
        .map(|i| {
            let key = format!("{prefix}{i}");
            let owner = partition_of(key.as_bytes(), workers);
            (key, owner)
        })
        .collect()
}

/// A pipelined text and meta script over keys of every partition: stores, reads one key and
/// many, counters, appends, deletes, touch, a flush, with replies that depend on the order.
fn mixed_script(keys: &[(String, usize)]) -> Vec<u8> {
    let mut script = Vec::new();
    let all: Vec<&str> = keys.iter().map(|(key, _)| key.as_str()).collect();
    for (i, key) in all.iter().enumerate() {
        let value = "v".repeat(1 + i * 37 % 3000);
        script.extend_from_slice(format!("set {key} {i} 0 {}\r\n{value}\r\n", value.len()).as_bytes());
        if i % 5 == 0 {
            script.extend_from_slice(format!("get {key}\r\n").as_bytes());
        }
    }
    script.extend_from_slice(format!("get {}\r\n", all.join(" ")).as_bytes());
    script.extend_from_slice(format!("gat 100 {} nokey {}\r\n", all[3], all[1]).as_bytes());
    for key in all.iter().step_by(3) {
        script.extend_from_slice(format!("delete {key}\r\nappend {key} 0 0 1\r\nx\r\n").as_bytes());
    }
    for key in all.iter().skip(1).step_by(4) {
        script.extend_from_slice(format!("append {key} 0 0 2\r\nab\r\nprepend {key} 0 0 1\r\nc\r\n").as_bytes());
        script.extend_from_slice(format!("set n{key} 0 0 2\r\n10\r\nincr n{key} 5\r\ndecr n{key} 20\r\n").as_bytes());
        script.extend_from_slice(
            format!("mg {key} v f k\r\nms {key} 2 T0\r\nhi\r\nmg {key} v\r\nmd {key} q\r\n").as_bytes(),
        );
    }
    script.extend_from_slice(format!("get {} nothere\r\ntouch {} 50\r\n", all.join(" "), all[2]).as_bytes());
    script.extend_from_slice(b"verbosity 1\r\n");
    script.extend_from_slice(format!("add {} 0 0 1\r\nz\r\nreplace {} 0 0 1\r\nz\r\n", all[0], all[1]).as_bytes());
    script.extend_from_slice(b"flush_all\r\n");
    script.extend_from_slice(format!("get {}\r\nset after 0 0 1\r\nq\r\nget after\r\n", all.join(" ")).as_bytes());
    script
}

/// Asserts equal replies, showing where they part (replies are long).
fn assert_same(mine: &[u8], theirs: &[u8]) {
    let at = mine.iter().zip(theirs).position(|(a, b)| a != b).unwrap_or(mine.len().min(theirs.len()));
    let show =
        |bytes: &[u8]| String::from_utf8_lossy(&bytes[at.saturating_sub(80)..(at + 80).min(bytes.len())]).to_string();
    assert!(mine == theirs, "replies differ at byte {at}:\n tierkv: {:?}\n memcached: {:?}", show(mine), show(theirs));
}

#[test]
fn keys_of_both_partitions_answer_in_order_through_one_connection() {
    let (ours, _base) = tierkv_direct(2, "crew");
    let reference = memcached();
    let keys = keys("mix:", 60, 2);
    assert!(keys.iter().any(|(_, owner)| *owner == 0) && keys.iter().any(|(_, owner)| *owner == 1));
    let script = mixed_script(&keys);
    let before = topology(ours.1).forwarded_requests;
    let mine = exchange_to_sentinel_within(ours.1, &script, PATIENT);
    let theirs = exchange_to_sentinel_within(reference.1, &script, PATIENT);
    assert!(theirs.len() > 10_000, "the script's replies are long: {}", theirs.len());
    assert_same(&mine, &theirs);
    let forwarded = topology(ours.1).forwarded_requests - before;
    assert!(forwarded > 50, "{forwarded} requests forwarded");
}

#[test]
fn binary_pipelines_over_both_partitions_answer_in_order() {
    let (ours, _base) = tierkv_direct(2, "crew");
    let reference = memcached();
    let keys = keys("bin:", 40, 2);
    let mut script = Vec::new();
    for (i, (key, _)) in keys.iter().enumerate() {
        let extras = [0u8, 0, 0, i as u8, 0, 0, 0, 0];
        let value = vec![b'b'; i * 50];
        let op = if i % 2 == 0 { opcode::SETQ } else { opcode::SET };
        write_request(&mut script, op, i as u32, 0, &extras, key.as_bytes(), &value);
    }
    // Quiet gets (a hit answers, a miss does not), loud gets, deletes and a counter.
    for (i, (key, _)) in keys.iter().enumerate() {
        write_request(&mut script, opcode::GETKQ, 1000 + i as u32, 0, &[], key.as_bytes(), &[]);
        write_request(&mut script, opcode::GETKQ, 2000 + i as u32, 0, &[], format!("miss{i}").as_bytes(), &[]);
        if i % 3 == 0 {
            write_request(&mut script, opcode::DELETE, 3000 + i as u32, 0, &[], key.as_bytes(), &[]);
            write_request(&mut script, opcode::GET, 4000 + i as u32, 0, &[], key.as_bytes(), &[]);
        }
    }
    let counter = [0u8, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0];
    write_request(&mut script, opcode::INCREMENT, 5000, 0, &counter, b"bin:counter", &[]);
    write_request(&mut script, opcode::INCREMENT, 5001, 0, &counter, b"bin:counter", &[]);
    // Binary replies carry CAS values, which differ between servers; compare everything else.
    let mine = mask_cas(exchange_binary_to_sentinel_within(ours.1, &script, PATIENT));
    let theirs = mask_cas(exchange_binary_to_sentinel_within(reference.1, &script, PATIENT));
    assert!(theirs.len() > 24 * 60);
    assert_eq!(mine, theirs);
}

#[test]
fn direct_ports_serve_their_own_keys_without_forwarding() {
    let workers = 3;
    let (ours, base) = tierkv_direct(workers, "erew");
    let topology = topology(ours.1);
    assert_eq!((topology.partitions, topology.direct_port_base), (workers, Some(base)));
    let before = topology.forwarded_requests;
    let keys = keys("direct:", 90, workers);
    for partition in 0..workers {
        let own: Vec<&str> =
            keys.iter().filter(|(_, owner)| *owner == partition).map(|(key, _)| key.as_str()).collect();
        assert!(own.len() > 5);
        let mut script = Vec::new();
        for key in &own {
            script.extend_from_slice(format!("set {key} 0 0 {}\r\n{key}\r\nget {key}\r\n", key.len()).as_bytes());
        }
        script.extend_from_slice(format!("get {}\r\n", own.join(" ")).as_bytes());
        let mut expected = Vec::new();
        for key in &own {
            expected.extend_from_slice(format!("STORED\r\nVALUE {key} 0 {}\r\n{key}\r\nEND\r\n", key.len()).as_bytes());
        }
        for key in &own {
            expected.extend_from_slice(format!("VALUE {key} 0 {}\r\n{key}\r\n", key.len()).as_bytes());
        }
        expected.extend_from_slice(b"END\r\n");
        let mut stream = TcpStream::connect(("127.0.0.1", base + partition as u16)).unwrap();
        stream.write_all(&script).unwrap();
        stream.set_read_timeout(Some(PATIENT)).unwrap();
        let mut reply = vec![0u8; expected.len()];
        std::io::Read::read_exact(&mut stream, &mut reply).unwrap();
        assert_eq!(String::from_utf8_lossy(&reply), String::from_utf8_lossy(&expected), "partition {partition}");
    }
    // stats on a direct port asks every worker like any other.
    let after = Topology::fetch(([127, 0, 0, 1], base + 1).into(), Duration::from_secs(5)).unwrap();
    assert_eq!(after.forwarded_requests, before, "nothing was forwarded");
    // The same keys through the main port are forwarded when another worker owns them, and
    // read the values written through the direct ports.
    let all: Vec<&str> = keys.iter().map(|(key, _)| key.as_str()).collect();
    let reply = exchange_to_sentinel_within(ours.1, format!("get {}\r\n", all.join(" ")).as_bytes(), PATIENT);
    assert_eq!(reply.windows(6).filter(|w| w == b"VALUE ").count(), all.len());
    assert!(self::topology(ours.1).forwarded_requests > before);
}

/// One version of a key's value: the version number, padded to a length that depends on it.
fn versioned(version: u64) -> String {
    format!("{version}:{}", "p".repeat((version % 7) as usize * 300))
}

/// Reads one text reply to a get of any number of keys: (key, version) for each hit.
fn read_get(reader: &mut BufReader<TcpStream>) -> Vec<(String, u64)> {
    common::read_values(reader)
        .into_iter()
        .map(|(key, data)| {
            let version = data.split(':').next().unwrap().parse().unwrap();
            assert_eq!(data, versioned(version), "value of {key}");
            (key, version)
        })
        .collect()
}

#[test]
fn many_clients_on_overlapping_keys_never_read_an_unacknowledged_past() {
    const CLIENTS: usize = 12;
    const KEYS: usize = 60;
    const ROUNDS: usize = 300;
    let (server, _base) = tierkv_direct(4, "crew");
    let port = server.1;
    // Every key has one writer (client key % CLIENTS); all clients read all keys. Per key:
    // the newest version whose STORED has arrived, and the newest version sent.
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let sent: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (acked, sent) = (Arc::clone(&acked), Arc::clone(&sent));
            std::thread::spawn(move || {
                let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
                stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut writer = stream.try_clone().unwrap();
                let mut reader = BufReader::new(stream);
                let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ client as u64;
                let mut next = || {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng
                };
                let mut checked = 0;
                for round in 0..ROUNDS {
                    // A pipelined round: a write of one own key, single reads and a multi-get.
                    let own = client + CLIENTS * (next() as usize % (KEYS / CLIENTS));
                    let version = (round as u64 + 1) * 1000 + client as u64;
                    let reads: Vec<usize> = (0..4).map(|_| next() as usize % KEYS).collect();
                    let floors: Vec<u64> = reads.iter().map(|&k| acked[k].load(Ordering::SeqCst)).collect();
                    let value = versioned(version);
                    sent[own].fetch_max(version, Ordering::SeqCst);
                    let mut batch = format!("set k{own} 0 0 {}\r\n{value}\r\n", value.len());
                    for &k in &reads[..2] {
                        batch.push_str(&format!("get k{k}\r\n"));
                    }
                    batch.push_str(&format!("get k{} k{} k{own}\r\n", reads[2], reads[3]));
                    writer.write_all(batch.as_bytes()).unwrap();
                    let mut line = String::new();
                    reader.read_line(&mut line).unwrap();
                    assert_eq!(line, "STORED\r\n");
                    acked[own].fetch_max(version, Ordering::SeqCst);
                    let mut hits = read_get(&mut reader);
                    hits.extend(read_get(&mut reader));
                    let multi = read_get(&mut reader);
                    // The multi-get answers in key order, and sees this client's own write.
                    assert_eq!(multi.last(), Some(&(format!("k{own}"), version)), "own write, round {round}");
                    hits.extend(multi);
                    for (i, &k) in reads.iter().enumerate() {
                        let key = format!("k{k}");
                        let found = hits.iter().find(|(name, _)| *name == key).map(|(_, v)| *v);
                        let ceiling = sent[k].load(Ordering::SeqCst);
                        match found {
                            Some(v) => assert!(
                                v >= floors[i] && v <= ceiling,
                                "{key}: read {v}, acknowledged {} before, {ceiling} sent",
                                floors[i]
                            ),
                            None => assert_eq!(floors[i], 0, "{key} missing after version {} was stored", floors[i]),
                        }
                        checked += 1;
                    }
                }
                checked
            })
        })
        .collect();
    let checked: usize = clients.into_iter().map(|c| c.join().unwrap()).sum();
    assert_eq!(checked, CLIENTS * ROUNDS * 4);
    assert!(topology(port).forwarded_requests > (CLIENTS * ROUNDS) as u64, "forwarding was exercised");
}

#[test]
fn the_bench_steers_every_key_to_its_owner_with_direct() {
    use tierkv_bench::loadgen::{measure, Protocol, RunConfig};
    let (server, _base) = tierkv_direct(2, "erew");
    let topology = topology(server.1);
    let config = RunConfig {
        target: ([127, 0, 0, 1], server.1).into(),
        protocol: Protocol::Text,
        get_ratio: 0.9,
        keys: 5_000,
        key_bytes: 16,
        value_bytes: (32, 32),
        dist: "zipf:0.99".parse().unwrap(),
        connections: 4,
        pipeline: 8,
        seconds: 0.5,
        preload: false,
        seed: 1,
        rate: None,
        window: false,
        threads: 1,
        direct: Some((0..topology.partitions).map(|p| topology.address_of(p)).collect()),
        udp: false,
        tls: None,
    };
    let direct = measure(&config, None).unwrap();
    assert!(direct.operations > 1000);
    let after = self::topology(server.1).forwarded_requests;
    assert_eq!(after, topology.forwarded_requests, "request direction forwards nothing");
    // The same load through the main port is forwarded about half the time.
    let forwarded = measure(&RunConfig { direct: None, ..config }, None).unwrap();
    let moved = self::topology(server.1).forwarded_requests - after;
    assert!(
        moved * 4 > forwarded.operations && moved * 4 < 3 * forwarded.operations,
        "{moved} of {}",
        forwarded.operations
    );
}
