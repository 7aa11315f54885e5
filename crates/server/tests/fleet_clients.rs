//! The blocking and the async tierkv-client pass one suite against a mixed fleet (three tierkv
//! servers with direct ports and one memcached): every call, request direction with no
//! forwarding, keys read back by pylibmc and through twemproxy, and failover and return when
//! a server dies and comes back.

mod common;

use common::*;
use std::process::Command;
use std::time::Duration;
use tierkv_client::ketama::ServerSpec;
use tierkv_client::{Atomic, AtomicReply, Config, Error, Op, Pipeline, Reply, StoreMode};

/// tierkv with two workers and direct ports, on `port` (a fresh one when None).
fn tierkv_direct(port: Option<(u16, u16)>) -> (Server, u16) {
    let (port, base) = port.unwrap_or_else(|| (free_port(), free_ports(2)));
    let mut command = Command::new(TIERKV);
    command.args(["-p", &port.to_string(), "-m", "64", "-t", "2", "--direct-ports", &base.to_string()]);
    (start(command, port), base)
}

struct Fleet {
    tierkv: Vec<(Server, u16)>,
    memcached: Server,
}

impl Fleet {
    fn start() -> Fleet {
        Fleet { tierkv: (0..3).map(|_| tierkv_direct(None)).collect(), memcached: memcached() }
    }

    /// Weights 1, 2, 1 for tierkv and 1 for memcached.
    fn specs(&self) -> Vec<ServerSpec> {
        let mut specs: Vec<ServerSpec> = self
            .tierkv
            .iter()
            .enumerate()
            .map(|(i, (s, _))| ServerSpec { weight: if i == 1 { 2 } else { 1 }, ..ServerSpec::new("127.0.0.1", s.1) })
            .collect();
        specs.push(ServerSpec::new("127.0.0.1", self.memcached.1));
        specs
    }

    fn forwarded(&self) -> u64 {
        self.tierkv.iter().map(|(s, _)| stat_number(s.1, "tierkv", "forwarded_requests")).sum()
    }
}

fn keys(count: usize, prefix: &str) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}:{i}")).collect()
}

/// Every call of the client against the fleet; `$aw` is `await` for the async client.
macro_rules! suite {
    ($client:expr, $fleet:expr $(, $aw:ident)?) => {{
        let c = &$client;
        let fleet: &Fleet = $fleet;
        let before = fleet.forwarded();
        assert!(c.set(b"a", b"1")$(.$aw)?.unwrap());
        assert_eq!(c.get(b"a")$(.$aw)?.unwrap(), Some(b"1".to_vec()));
        assert_eq!(c.get(b"absent")$(.$aw)?.unwrap(), None);
        let binary: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
        assert!(c.store(StoreMode::Set, b"bin", &binary, 0xdead_beef, 0)$(.$aw)?.unwrap());
        let item = c.get_item(b"bin")$(.$aw)?.unwrap().unwrap();
        assert_eq!((item.value == binary, item.flags, item.cas), (true, 0xdead_beef, None));
        let unique = c.gets(b"a")$(.$aw)?.unwrap().unwrap().cas.unwrap();
        assert!(!c.store(StoreMode::Cas(unique + 1), b"a", b"x", 0, 0)$(.$aw)?.unwrap());
        assert!(c.store(StoreMode::Cas(unique), b"a", b"2", 0, 0)$(.$aw)?.unwrap());
        assert!(!c.store(StoreMode::Add, b"a", b"3", 0, 0)$(.$aw)?.unwrap());
        assert!(c.store(StoreMode::Append, b"a", b"0", 0, 0)$(.$aw)?.unwrap());
        assert!(c.store(StoreMode::Prepend, b"a", b"1", 0, 0)$(.$aw)?.unwrap());
        assert_eq!(c.incr(b"a", 5)$(.$aw)?.unwrap(), Some(125));
        assert_eq!(c.decr(b"a", 200)$(.$aw)?.unwrap(), Some(0));
        assert_eq!(c.incr(b"absent", 1)$(.$aw)?.unwrap(), None);
        assert!(c.touch(b"a", 100)$(.$aw)?.unwrap());
        assert!(c.delete(b"a")$(.$aw)?.unwrap());
        assert!(!c.delete(b"a")$(.$aw)?.unwrap());
        assert!(matches!(c.get(b"bad key")$(.$aw)?, Err(Error::BadKey(_))));
        assert!(matches!(c.incr(b"bin", 1)$(.$aw)?, Err(Error::Server(line)) if line.starts_with("CLIENT_ERROR")));

        // 10,000 keys over four servers and eight partitions, in one call each way.
        let names = keys(10_000, "many");
        let values: Vec<String> = names.iter().map(|k| format!("value of {k}")).collect();
        let items: Vec<(&[u8], &[u8])> = names.iter().zip(&values).map(|(k, v)| (k.as_bytes(), v.as_bytes())).collect();
        assert!(c.set_many(&items, 0)$(.$aw)?.unwrap().iter().all(|&s| s));
        let mut asked: Vec<&[u8]> = names.iter().map(|k| k.as_bytes()).collect();
        asked.insert(5000, b"many:absent");
        asked.push(b"many:17");
        let got = c.get_many(&asked)$(.$aw)?.unwrap();
        assert_eq!(got.len(), 10_002);
        assert_eq!(got[5000], None);
        for (i, value) in values.iter().enumerate() {
            let at = if i < 5000 { i } else { i + 1 };
            assert_eq!(got[at].as_deref(), Some(value.as_bytes()), "{}", names[i]);
        }
        assert_eq!(got[10_001].as_deref(), Some(values[17].as_bytes()));
        let deleted = c.delete_many(&asked[..10])$(.$aw)?.unwrap();
        assert_eq!(deleted, vec![true; 10]);

        // A pipeline keeps each key's order.
        let mut pipeline = Pipeline::new();
        pipeline.set(b"p", b"1").get(b"p").incr(b"p", 9).get(b"p").delete(b"p").get(b"p").op(Op::Touch(b"p", 5));
        let replies: Vec<Reply> = c.execute(&pipeline)$(.$aw)?.into_iter().map(Result::unwrap).collect();
        assert_eq!(replies[0], Reply::Stored);
        assert!(matches!(&replies[1], Reply::Hit(item) if item.value == b"1"));
        assert_eq!(replies[2], Reply::Number(10));
        assert!(matches!(&replies[3], Reply::Hit(item) if item.value == b"10"));
        assert_eq!(replies[4..], [Reply::Deleted, Reply::Miss, Reply::NotFound]);

        // Atomics on a key a tierkv server owns.
        let memcached_port = fleet.memcached.1;
        let on_tierkv = |prefix: &str| {
            (0..).map(|i| format!("{prefix}:{i}")).find(|k| c.server_for(k.as_bytes()).unwrap().port != memcached_port).unwrap()
        };
        let (counter, nothing) = (on_tierkv("counter"), on_tierkv("nothing"));
        assert!(c.set(counter.as_bytes(), b"10")$(.$aw)?.unwrap());
        let replies = c.atomics(&[Atomic::add(counter.as_bytes(), 5), Atomic::add(counter.as_bytes(), 1), Atomic::add(nothing.as_bytes(), 1)])$(.$aw)?.unwrap();
        assert_eq!(replies, [AtomicReply::Done { old: 10, new: 15 }, AtomicReply::Done { old: 15, new: 16 }, AtomicReply::NotFound]);

        // Every key went straight to its partition's port: no tierkv worker forwarded one.
        assert_eq!(fleet.forwarded(), before, "forwarded requests");
        let topologies = c.topologies();
        for (i, (_, base)) in fleet.tierkv.iter().enumerate() {
            let topology = topologies[i].as_ref().expect("tierkv publishes its partitions");
            assert_eq!((topology.partitions, topology.direct_port_base), (2, Some(*base)));
        }
        assert!(topologies[3].is_none(), "memcached is used by its main port");
        let on_memcached = names.iter().filter(|k| c.server_for(k.as_bytes()).unwrap().port == memcached_port).count();
        assert!(on_memcached > 1000, "memcached holds {on_memcached} keys");
    }};
}

#[test]
fn the_blocking_client_passes_the_suite_against_a_mixed_fleet() {
    let fleet = Fleet::start();
    let client = tierkv_client::blocking::Client::new(Config::new(fleet.specs())).unwrap();
    suite!(client, &fleet);
}

#[test]
fn the_async_client_passes_the_suite_against_a_mixed_fleet() {
    let fleet = Fleet::start();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let client = tierkv_client::tokio::Client::new(Config::new(fleet.specs())).unwrap();
        suite!(client, &fleet, await);
    });
}

/// nutcracker in front of `specs`: ketama, md5, as the client places keys.
fn twemproxy(specs: &[ServerSpec]) -> (Server, u16, std::path::PathBuf) {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("tierkv-fleet-clients-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let servers: String = specs.iter().map(|s| format!("    - {s}:{}\n", s.weight)).collect();
    let yaml = format!(
        "fleet:\n  listen: 127.0.0.1:{port}\n  hash: md5\n  distribution: ketama\n  timeout: 5000\n  servers:\n{servers}"
    );
    std::fs::write(dir.join("nutcracker.yml"), yaml).unwrap();
    let mut command = Command::new("nutcracker");
    command.args(["-c", dir.join("nutcracker.yml").to_str().unwrap(), "-s", &free_port().to_string(), "-o"]);
    command.arg(dir.join("nutcracker.log"));
    (start(command, port), port, dir)
}

/// Reads `names` back through pylibmc (weighted ketama over the same fleet); the values must
/// be "value of <key>".
fn read_by_pylibmc(specs: &[ServerSpec], names: &[String]) {
    let servers: Vec<String> = specs.iter().map(|s| format!("{s}:{}", s.weight)).collect();
    let script = r#"
import sys, pylibmc
c = pylibmc.Client(sys.argv[1].split(","), behaviors={"ketama_weighted": True})
keys = sys.stdin.read().split()
found = {}
for at in range(0, len(keys), 1000):
    found.update(c.get_multi(keys[at:at + 1000]))
bad = [k for k in keys if found.get(k) != ("value of " + k).encode()]
print(len(keys) - len(bad), "of", len(keys), "read back; first wrong:", bad[:3])
sys.exit(1 if bad else 0)
"#;
    let mut child = Command::new("/usr/bin/python3")
        .args(["-c", script, &servers.join(",")])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("Debian's python3 with python3-pylibmc");
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), names.join("\n").as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "pylibmc: {}", String::from_utf8_lossy(&output.stdout));
}

/// 10,000 keys written by the client are read back by pylibmc and through twemproxy.
macro_rules! read_back_by_others {
    ($client:expr, $fleet:expr $(, $aw:ident)?) => {{
        let c = &$client;
        let specs = $fleet.specs();
        let names = keys(10_000, "shared");
        let values: Vec<String> = names.iter().map(|k| format!("value of {k}")).collect();
        let items: Vec<(&[u8], &[u8])> = names.iter().zip(&values).map(|(k, v)| (k.as_bytes(), v.as_bytes())).collect();
        assert!(c.set_many(&items, 0)$(.$aw)?.unwrap().iter().all(|&s| s));
        read_by_pylibmc(&specs, &names);
        let (_proxy, proxy_port, dir) = twemproxy(&specs);
        let through = tierkv_client::blocking::Client::connect(("127.0.0.1", proxy_port)).unwrap();
        let asked: Vec<&[u8]> = names.iter().map(|k| k.as_bytes()).collect();
        let got = through.get_many(&asked).unwrap();
        let right = got.iter().zip(&values).filter(|(g, v)| g.as_deref() == Some(v.as_bytes())).count();
        assert_eq!(right, names.len(), "read back through twemproxy");
        std::fs::remove_dir_all(dir).ok();
    }};
}

#[test]
fn keys_the_clients_write_are_read_back_by_pylibmc_and_twemproxy() {
    let fleet = Fleet::start();
    let client = tierkv_client::blocking::Client::new(Config::new(fleet.specs())).unwrap();
    read_back_by_others!(client, &fleet);
    let fleet = Fleet::start();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let client = tierkv_client::tokio::Client::new(Config::new(fleet.specs())).unwrap();
        read_back_by_others!(client, &fleet, await);
    });
}

/// A fleet of three tierkv servers; the middle one dies, is ejected after two failures, and
/// is taken back after the retry interval once it listens again. `$make` builds the client.
macro_rules! failover {
    ($make:expr $(, $aw:ident)?) => {{
        let mut servers: Vec<(Server, u16)> = (0..3).map(|_| tierkv_direct(None)).collect();
        let specs: Vec<ServerSpec> = servers.iter().map(|(s, _)| ServerSpec::new("127.0.0.1", s.1)).collect();
        let mut config = Config::new(specs);
        config.failure_limit = 2;
        config.retry_interval = Duration::from_secs(1);
        config.connect_timeout = Duration::from_millis(300);
        let c = $make(config);
        let names = keys(3000, "failover");
        let ops: Vec<Op<'_>> = names.iter().map(|k| Op::Store { mode: StoreMode::Set, key: k.as_bytes(), value: b"v", flags: 0, exptime: 0 }).collect();
        assert!(c.run(&ops)$(.$aw)?.iter().all(|r| r == &Ok(Reply::Stored)));
        let (victim_port, victim_base) = (servers[1].0 .1, servers[1].1);
        let on_victim: Vec<bool> = names.iter().map(|k| c.server_for(k.as_bytes()).unwrap().port == victim_port).collect();
        assert!(on_victim.iter().filter(|&&v| v).count() > 300);
        drop(servers.remove(1));

        // Requests for the dead server's keys fail (and only those) until it is ejected.
        let mut calls = 0;
        loop {
            calls += 1;
            let results = c.run(&ops)$(.$aw)?;
            let mut failed = 0;
            for (i, result) in results.iter().enumerate() {
                match result {
                    Ok(reply) => assert_eq!(reply, &Reply::Stored),
                    Err(error) => {
                        assert!(on_victim[i] && matches!(error, Error::Io { .. }), "{}: {error}", names[i]);
                        failed += 1;
                    }
                }
            }
            if failed == 0 {
                break;
            }
            assert!(calls < 3, "still failing after {calls} calls");
        }
        assert!(calls >= 2, "the dead server's keys failed first");
        assert!(names.iter().all(|k| c.server_for(k.as_bytes()).unwrap().port != victim_port));
        let asked: Vec<&[u8]> = names.iter().map(|k| k.as_bytes()).collect();
        assert!(c.get_many(&asked)$(.$aw)?.unwrap().iter().all(|v| v.as_deref() == Some(&b"v"[..])));

        // It listens again; after the retry interval its keys go back to it.
        let revived = tierkv_direct(Some((victim_port, victim_base)));
        std::thread::sleep(Duration::from_millis(1100));
        assert!(c.run(&ops)$(.$aw)?.iter().all(|r| r == &Ok(Reply::Stored)));
        let back = names.iter().filter(|k| c.server_for(k.as_bytes()).unwrap().port == victim_port).count();
        assert_eq!(back, on_victim.iter().filter(|&&v| v).count());
        assert_eq!(stat_number(revived.0 .1, "", "curr_items"), back as u64);
    }};
}

#[test]
fn the_blocking_client_ejects_a_dead_server_and_takes_it_back() {
    failover!(|config| tierkv_client::blocking::Client::new(config).unwrap());
}

#[test]
fn the_async_client_ejects_a_dead_server_and_takes_it_back() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async { failover!(|config| tierkv_client::tokio::Client::new(config).unwrap(), await) });
}

/// What a plain map says each request answers.
fn model_reply(model: &mut std::collections::HashMap<Vec<u8>, Vec<u8>>, op: &Op<'_>) -> Reply {
    let hit = |value: &Vec<u8>| Reply::Hit(tierkv_client::Item { value: value.clone(), flags: 0, cas: None });
    match *op {
        Op::Get(key) => model.get(key).map_or(Reply::Miss, hit),
        Op::Store { mode: StoreMode::Set, key, value, .. } => {
            model.insert(key.to_vec(), value.to_vec());
            Reply::Stored
        }
        Op::Store { mode: StoreMode::Append, key, value, .. } => match model.get_mut(key) {
            Some(held) => {
                held.extend_from_slice(value);
                Reply::Stored
            }
            None => Reply::NotStored,
        },
        Op::Delete(key) => model.remove(key).map_or(Reply::NotFound, |_| Reply::Deleted),
        _ => unreachable!("the model knows get, set, append and delete"),
    }
}

/// Random pipelines of gets, sets, appends and deletes over 200 keys and the whole fleet, each
/// reply checked against a `HashMap` model: order is kept per key however the batch is split.
#[test]
fn random_pipelines_over_a_fleet_answer_as_a_map_would() {
    let fleet = Fleet::start();
    let client = tierkv_client::blocking::Client::new(Config::new(fleet.specs())).unwrap();
    let names = keys(200, "model");
    let values: Vec<Vec<u8>> = (0..16).map(|i| vec![b'a' + i as u8; 1 + i * 97]).collect();
    let mut model = std::collections::HashMap::new();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    for batch in 0..300 {
        let ops: Vec<Op<'_>> = (0..1 + next(400))
            .map(|_| {
                let (key, value) = (names[next(names.len())].as_bytes(), values[next(values.len())].as_slice());
                match next(10) {
                    0..=4 => Op::Get(key),
                    5..=6 => Op::Store { mode: StoreMode::Set, key, value, flags: 0, exptime: 0 },
                    7 => Op::Store { mode: StoreMode::Append, key, value, flags: 0, exptime: 0 },
                    _ => Op::Delete(key),
                }
            })
            .collect();
        let replies = client.run(&ops);
        for (i, (op, reply)) in ops.iter().zip(replies).enumerate() {
            assert_eq!(reply.unwrap(), model_reply(&mut model, op), "batch {batch}, request {i}: {op:?}");
        }
    }
}
