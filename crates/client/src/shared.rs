//! What a client shares between its callers, blocking or async: the fleet's state and the idle
//! connections per place. Locks are held only inside these methods, never across I/O.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use crate::error::Error;
use crate::fleet::{Config, Fleet};
use crate::ketama::ServerSpec;
use crate::Topology;

pub(crate) struct Shared<C> {
    fleet: Mutex<Fleet>,
    pools: Mutex<HashMap<SocketAddr, Vec<C>>>,
    /// Idle connections kept per place (`Config::pool_size`).
    pool_size: usize,
}

impl<C> Shared<C> {
    pub(crate) fn new(config: Config) -> Result<Shared<C>, Error> {
        let pool_size = config.pool_size;
        Ok(Shared { fleet: Mutex::new(Fleet::new(config)?), pools: Mutex::new(HashMap::new()), pool_size })
    }

    pub(crate) fn fleet(&self) -> MutexGuard<'_, Fleet> {
        self.fleet.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn pools(&self) -> MutexGuard<'_, HashMap<SocketAddr, Vec<C>>> {
        self.pools.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// An idle connection to `addr`, if one is pooled.
    pub(crate) fn pooled(&self, addr: SocketAddr) -> Option<C> {
        self.pools().get_mut(&addr).and_then(Vec::pop)
    }

    /// Keeps a connection that answered everything, up to the pool's size.
    pub(crate) fn give_back(&self, addr: SocketAddr, conn: C) {
        let mut pools = self.pools();
        let pool = pools.entry(addr).or_default();
        if pool.len() < self.pool_size {
            pool.push(conn);
        }
    }

    /// The server `key` goes to now (None when every server is ejected).
    pub(crate) fn server_for(&self, key: &[u8]) -> Option<ServerSpec> {
        let fleet = self.fleet();
        fleet.server_for(key).ok().map(|i| fleet.nodes[i].spec.clone())
    }

    /// What is known of each server's partitions.
    pub(crate) fn topologies(&self) -> Vec<Option<Topology>> {
        self.fleet().topologies()
    }

    /// Brings back servers whose retry interval is over; returns the servers (index, main
    /// address) whose partitions are to be asked for now.
    pub(crate) fn due(&self, now: Instant) -> Vec<(usize, SocketAddr)> {
        let mut fleet = self.fleet();
        fleet.refresh(now);
        fleet.stale_partitions(now).into_iter().map(|i| (i, fleet.nodes[i].addr)).collect()
    }
}

/// A fleet of the one server at `addr`, with the defaults.
pub(crate) fn one_server(addr: SocketAddr) -> Config {
    Config::new(vec![ServerSpec::new(&addr.ip().to_string(), addr.port())])
}
