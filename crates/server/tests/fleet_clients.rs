//! The blocking and the async tierkv-client pass one suite against a mixed fleet (three tierkv
//! servers with direct ports and one memcached): every call, request direction with no
//! forwarding, keys read back by pylibmc and through twemproxy, and failover and return when
//! a server dies and comes back.

mod common;

use common::*;
use std::process::Command;
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
