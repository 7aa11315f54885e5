//! The blocking client: a fleet of servers behind one handle that any number of threads share.
//! Each call plans its requests (server by ketama, then partition port), sends each place's
//! requests pipelined on a pooled connection, every place before reading any, and reads the
//! replies back into the caller's order. No runtime and no background thread: ejected servers
//! return and partitions are refreshed when a call notices their time has come.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Instant;

use crate::api::Pipeline;
use crate::codec::{Op, Reply};
use crate::conn::Conn;
use crate::error::{Error, Failure};
use crate::fleet::Config;
use crate::ketama::ServerSpec;
use crate::plan::{finish, merge, plan, subset, Group};
use crate::shared::{one_server, Shared};
use crate::Topology;

/// A client of a fleet. `Send + Sync`: share it between threads (each call takes its own
/// connections from the pools).
pub struct Client {
    shared: Shared<Conn>,
}

/// What happened to one place's connection during a call.
struct Outcome {
    conn: Option<Conn>,
    failure: Option<Failure>,
}

impl Client {
    /// A client of the fleet `config` describes. Nothing is connected until used.
    pub fn new(config: Config) -> Result<Client, Error> {
        Ok(Client { shared: Shared::new(config)? })
    }

    /// A client of one server, with the defaults.
    pub fn connect(address: impl ToSocketAddrs) -> Result<Client, Error> {
        let addr = address.to_socket_addrs().ok().and_then(|mut a| a.next());
        Client::new(one_server(addr.ok_or_else(|| Error::Config("no address".into()))?))
    }

    /// The server `key` goes to now (None when every server is ejected).
    pub fn server_for(&self, key: &[u8]) -> Option<ServerSpec> {
        self.shared.server_for(key)
    }

    /// What the client knows of each server's partitions (None: not tierkv, or not asked yet).
    pub fn topologies(&self) -> Vec<Option<Topology>> {
        self.shared.topologies()
    }

    fn take(&self, addr: SocketAddr) -> Result<Conn, Error> {
        match self.shared.pooled(addr) {
            Some(conn) => Ok(conn),
            None => {
                // Cloned so that the fleet is not locked while connecting.
                let config = self.shared.fleet().config.clone();
                Conn::open(addr, &config)
            }
        }
    }

    /// Brings back servers whose retry interval is over and asks servers for their partitions
    /// when that is due.
    fn prepare(&self) {
        let now = Instant::now();
        for (server, addr) in self.shared.due(now) {
            let fetched = self.take(addr).and_then(|mut conn| {
                let reply = conn.stats("tierkv")?;
                self.shared.give_back(addr, conn);
                Ok(reply)
            });
            self.shared.fleet().learned(server, fetched, now);
        }
    }

    /// Runs a batch of requests and returns one result per request, in order. Requests for one
    /// place are pipelined; the places are written to before any is read.
    pub fn run(&self, ops: &[Op<'_>]) -> Vec<Result<Reply, Error>> {
        self.run_once(ops, true)
    }

    fn run_once(&self, ops: &[Op<'_>], retry: bool) -> Vec<Result<Reply, Error>> {
        let mut replies: Vec<Option<Reply>> = vec![None; ops.len()];
        let mut errors: Vec<Option<Error>> = vec![None; ops.len()];
        self.prepare();
        let groups = {
            let fleet = self.shared.fleet();
            plan(ops, |key| fleet.place(key), &mut errors, fleet.config.binary())
        };
        let mut failures = Vec::new();
        for (group, outcome) in groups.iter().zip(self.exchange(&groups, ops, &mut replies)) {
            if let Some(conn) = outcome.conn {
                self.shared.give_back(group.place.addr, conn);
            }
            failures.push(outcome.failure);
        }
        let again = self.shared.fleet().settle(&groups, failures, ops, &replies, &mut errors, retry);
        if !again.is_empty() {
            let retried = self.run_once(&subset(ops, &again), false);
            merge(&again, retried, &mut replies, &mut errors);
        }
        finish(replies, errors)
    }

    /// Sends every group's rounds and reads their replies, round by round.
    fn exchange(&self, groups: &[Group], ops: &[Op<'_>], replies: &mut [Option<Reply>]) -> Vec<Outcome> {
        let mut outcomes: Vec<Outcome> = groups
            .iter()
            .map(|g| match self.take(g.place.addr) {
                Ok(conn) => Outcome { conn: Some(conn), failure: None },
                Err(error) => Outcome { conn: None, failure: Some(Failure { error, sent: false }) },
            })
            .collect();
        let rounds = groups.iter().map(|g| g.rounds.len()).max().unwrap_or(0);
        for r in 0..rounds {
            for (group, outcome) in groups.iter().zip(outcomes.iter_mut()) {
                let (Some(round), Some(conn)) = (group.rounds.get(r), outcome.conn.as_mut()) else { continue };
                if let Err(failure) = conn.send(&round.bytes) {
                    outcome.conn = None;
                    outcome.failure = Some(failure);
                }
            }
            for (group, outcome) in groups.iter().zip(outcomes.iter_mut()) {
                let (Some(round), Some(conn)) = (group.rounds.get(r), outcome.conn.as_mut()) else { continue };
                if let Err(failure) = conn.receive(&round.expects, ops, replies) {
                    outcome.conn = None;
                    outcome.failure = Some(failure);
                }
            }
        }
        outcomes
    }

    /// Runs a pipeline built with [`Pipeline`].
    pub fn execute(&self, pipeline: &Pipeline<'_>) -> Vec<Result<Reply, Error>> {
        self.run(&pipeline.ops)
    }
}

crate::api::typed_methods!(Client,);
