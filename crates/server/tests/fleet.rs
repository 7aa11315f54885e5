//! tierkv-client's fleet against real servers and the clients it must agree with: placement
//! key by key against pylibmc (libmemcached's weighted ketama) and twemproxy (ketama, md5, by
//! address and by label), before and after an ejection; a mixed fleet of tierkv and memcached
//! written by the client and read back by pylibmc and through twemproxy; request direction
//! with no forwarding; failover and return.

mod common;

use common::*;
use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};
use tierkv_client::blocking::Client;
use tierkv_client::ketama::{Ring, ServerSpec};

fn keys(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("user:{i}:profile")).collect()
}

fn flush(servers: &[&Server]) {
    for server in servers {
        assert!(exchange_to_sentinel(server.1, b"flush_all\r\n").starts_with(b"OK\r\n"));
    }
}

/// Where `tierkv-bench placement` (the client's ring) puts each key, among `specs` less the
/// ejected one.
fn ring_placement(specs: &[ServerSpec], ejected: Option<usize>, keys: &[String]) -> Vec<String> {
    let servers: Vec<String> = specs
        .iter()
        .map(|s| match &s.label {
            Some(label) => format!("{s}:{} {label}", s.weight),
            None => format!("{s}:{}", s.weight),
        })
        .collect();
    let args = tierkv_bench::fleet::PlacementArgs {
        servers: servers.join(","),
        eject: ejected.map(|i| specs[i].to_string()).unwrap_or_default(),
    };
    let mut out = Vec::new();
    tierkv_bench::fleet::placement(&args, keys.join("\n").as_bytes(), &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let placed: Vec<String> = text.lines().map(|l| l.split_once(' ').unwrap().1.to_string()).collect();
    assert_eq!(placed.len(), keys.len());
    let ring = Ring::build(specs.iter().enumerate().filter(|&(i, _)| Some(i) != ejected));
    for (key, server) in keys.iter().zip(&placed).step_by(97) {
        assert_eq!(server, &specs[ring.server_for(key.as_bytes()).unwrap()].to_string());
    }
    placed
}

/// Which backend holds each key ("-" for none), asked directly.
fn holders(backends: &[&Server], keys: &[String]) -> Vec<String> {
    let mut owner: HashMap<&str, String> = HashMap::new();
    for backend in backends {
        let client = Client::connect(("127.0.0.1", backend.1)).unwrap();
        for chunk in keys.chunks(5000) {
            let refs: Vec<&[u8]> = chunk.iter().map(|k| k.as_bytes()).collect();
            for (key, value) in chunk.iter().zip(client.get_many(&refs).unwrap()) {
                if value.is_some() {
                    assert!(owner.insert(key, format!("127.0.0.1:{}", backend.1)).is_none(), "{key} twice");
                }
            }
        }
    }
    keys.iter().map(|k| owner.get(k.as_str()).cloned().unwrap_or_else(|| "-".into())).collect()
}

fn pylibmc_placement(specs: &[ServerSpec], dead: Option<usize>, keys: &[String]) -> Vec<String> {
    let dir = std::env::temp_dir().join(format!("tierkv-pylibmc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (keys_file, out_file) = (dir.join("keys"), dir.join("placement"));
    std::fs::write(&keys_file, keys.join("\n")).unwrap();
    let servers: Vec<String> = specs.iter().map(|s| format!("{s}:{}", s.weight)).collect();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/pylibmc_placement.py");
    let mut command = Command::new("/usr/bin/python3");
    command.args([script, &servers.join(","), keys_file.to_str().unwrap(), out_file.to_str().unwrap()]);
    if let Some(dead) = dead {
        command.arg(specs[dead].to_string());
    }
    let output = command.output().expect("Debian's python3 with python3-pylibmc");
    assert!(output.status.success(), "pylibmc: {}", String::from_utf8_lossy(&output.stderr));
    let text = std::fs::read_to_string(&out_file).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    text.lines().map(|l| l.split_once(' ').unwrap().1.to_string()).collect()
}

struct Proxy {
    _server: Server,
    port: u16,
    dir: std::path::PathBuf,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

/// nutcracker with one pool: ketama, md5, these servers (labelled when `labels`), ejecting a
/// server after one failure for ten minutes.
fn twemproxy(specs: &[ServerSpec], labels: bool) -> Proxy {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("tierkv-fleet-twemproxy-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let servers: String = specs
        .iter()
        .map(|s| match (&s.label, labels) {
            (Some(label), true) => format!("    - {s}:{} {label}\n", s.weight),
            _ => format!("    - {s}:{}\n", s.weight),
        })
        .collect();
    let yaml = format!(
        "fleet:\n  listen: 127.0.0.1:{port}\n  hash: md5\n  distribution: ketama\n  timeout: 2000\n  \
auto_eject_hosts: true\n  server_failure_limit: 1\n  server_retry_timeout: 600000\n  servers:\n{servers}"
    );
    std::fs::write(dir.join("nutcracker.yml"), yaml).unwrap();
    let mut command = Command::new("nutcracker");
    command.args(["-c", dir.join("nutcracker.yml").to_str().unwrap(), "-s", &free_port().to_string(), "-o"]);
    command.arg(dir.join("nutcracker.log"));
    Proxy { _server: start(command, port), port, dir }
}

/// Writes every key through the proxy (after the proxy has ejected `dead`, if any).
fn write_through(proxy: &Proxy, keys: &[String], dead: bool) {
    let client = Client::connect(("127.0.0.1", proxy.port)).unwrap();
    if dead {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let probes: Vec<String> = (0..200).map(|i| format!("probe:{i}")).collect();
            let items: Vec<(&[u8], &[u8])> = probes.iter().map(|k| (k.as_bytes(), &b"p"[..])).collect();
            if client.set_many(&items, 0).is_ok_and(|stored| stored.iter().all(|&s| s)) {
                break;
            }
            assert!(Instant::now() < deadline, "twemproxy never ejected the dead server");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    for chunk in keys.chunks(5000) {
        let items: Vec<(&[u8], &[u8])> = chunk.iter().map(|k| (k.as_bytes(), &b"x"[..])).collect();
        assert!(client.set_many(&items, 0).unwrap().iter().all(|&s| s));
    }
}

/// Keys placed alike; the first differences are printed.
fn agreement(ours: &[String], theirs: &[String]) -> usize {
    let differ: Vec<(usize, &String, &String)> =
        ours.iter().zip(theirs).enumerate().filter(|(_, (a, b))| a != b).map(|(i, (a, b))| (i, a, b)).collect();
    for (i, a, b) in differ.iter().take(5) {
        eprintln!("key {i}: ours {a}, theirs {b}");
    }
    ours.len() - differ.len()
}

#[test]
fn placement_agrees_with_pylibmc_and_twemproxy_key_by_key() {
    // Store mode: its index never drops a key, so every key written is found where it went.
    let servers: Vec<Server> = (0..3).map(|_| tierkv_with(&["-t", "1", "--mode", "store"])).collect();
    let backends: Vec<&Server> = servers.iter().collect();
    let specs: Vec<ServerSpec> = servers
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut spec = ServerSpec::parse(&format!("127.0.0.1:{}:{}", s.1, i + 1)).unwrap();
            spec.label = Some(format!("cache-{}", (b'a' + i as u8) as char));
            spec
        })
        .collect();
    let unlabelled: Vec<ServerSpec> = specs.iter().map(|s| ServerSpec { label: None, ..s.clone() }).collect();
    let keys = keys(100_000);
    let ours = ring_placement(&unlabelled, None, &keys);
    for (i, server) in servers.iter().enumerate() {
        let share = ours.iter().filter(|s| s.ends_with(&format!(":{}", server.1))).count();
        assert!(share > 100_000 * (i + 1) / 6 / 2, "weight {} gets {share}", i + 1);
    }

    let pylibmc = pylibmc_placement(&unlabelled, None, &keys);
    assert_eq!(agreement(&ours, &pylibmc), keys.len(), "pylibmc");
    flush(&backends);
    let by_address = twemproxy(&specs, false);
    write_through(&by_address, &keys, false);
    assert_eq!(agreement(&ours, &holders(&backends, &keys)), keys.len(), "twemproxy by address");
    flush(&backends);
    let by_label = twemproxy(&specs, true);
    write_through(&by_label, &keys, false);
    let ours_labelled = ring_placement(&specs, None, &keys);
    assert_eq!(agreement(&ours_labelled, &holders(&backends, &keys)), keys.len(), "twemproxy by label");
    let same = ours.iter().zip(&ours_labelled).filter(|(a, b)| a == b).count();
    assert!(same < keys.len() / 2, "labels place keys elsewhere: {same} alike");

    // The middle server dies: each client ejects it and places its keys on the other two.
    flush(&backends);
    let mut servers = servers;
    drop(servers.remove(1));
    let live: Vec<&Server> = servers.iter().collect();
    let ours = ring_placement(&unlabelled, Some(1), &keys);
    let pylibmc = pylibmc_placement(&unlabelled, Some(1), &keys);
    assert_eq!(agreement(&ours, &pylibmc), keys.len(), "pylibmc after ejection");
    flush(&live);
    write_through(&by_address, &keys, true);
    assert_eq!(agreement(&ours, &holders(&live, &keys)), keys.len(), "twemproxy after ejection");
    eprintln!("placement: 100000/100000 with pylibmc and twemproxy (address, label), and after one ejection");
}
