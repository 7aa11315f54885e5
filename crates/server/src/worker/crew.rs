//! Requests for keys another worker owns, done here. With `--concurrency crew` or `crcw`, a
//! text `get`/`gets` key, a binary GET, GETQ, GETK or GETKQ, or an `mg` asking only for what a
//! copy holds (value, key, flags, CAS, size, quiet, opaque), is read through the owner's
//! `CrewReader` with no message and no lock (MICA's CREW). With `crcw`, any other request of one such key (a write, or a read the reader
//! leaves to the owner) is executed here under the owner's partition lock when the lock is free
//! (`sys::partition_lock`); otherwise it is forwarded as before.
//!
//! A connection does either only while nothing of it waits at another worker, so a request
//! never passes one it sent earlier. It must not write another worker's partition without
//! holding that partition's lock.

use super::connection::Connection;
use super::Core;
use crate::after::After;
use crate::execute::{execute, get_value, Progress};
use crate::sys::partition_lock::{GuestLock, Lockable};
use std::sync::Arc;
use tierkv_engine::CrewGet;
use tierkv_engine::{AnyPartition as Partition, KeyHash};
use tierkv_protocol::{reply, Command};
use tierkv_protocol::{ReplyStyle, Request};

impl Core {
    /// Reads `owner`'s key through its `CrewReader` into `crew_value`, counted as a concurrent
    /// read: Some(hit's client flags and CAS, or None for a miss), or None if the read must go
    /// to the owner (something of this connection waits elsewhere, no reader, or the reader
    /// leaves it to the owner).
    fn crew_read(
        &mut self,
        connection: &Connection,
        owner: usize,
        key: &[u8],
        hash: KeyHash,
    ) -> Option<Option<(u32, u64)>> {
        if !connection.order.is_empty() {
            return None;
        }
        let reader = self.readers.get(owner).and_then(std::sync::OnceLock::get)?;
        let now = tierkv_engine::Engine::now(&*self.partition);
        let found = match reader.get(key, hash, now, &mut self.crew_value) {
            CrewGet::Owner => return None,
            CrewGet::Hit { flags, cas } => Some((flags, cas)),
            CrewGet::Miss => None,
        };
        self.state.counters.crew_reads += 1;
        Some(found)
    }

    /// `crew_read`, counted as a local get is (a hit or miss, `stats detail`, the key log).
    fn counted_crew_read(
        &mut self,
        connection: &Connection,
        owner: usize,
        key: &[u8],
        hash: KeyHash,
    ) -> Option<Option<(u32, u64)>> {
        let found = self.crew_read(connection, owner, key, hash)?;
        self.state.counters.read(false, found.is_some());
        self.state.observe_get(key, found.map(|_| self.crew_value.len()), true);
        Some(found)
    }

    /// Answers one text get key owned by `owner` here: its VALUE block (or nothing on a miss),
    /// counted as a local get is. False if this read must go to the owner.
    pub(super) fn crew_get_key(
        &mut self,
        connection: &mut Connection,
        owner: usize,
        key: &[u8],
        hash: KeyHash,
        return_cas: bool,
    ) -> bool {
        let Some(found) = self.counted_crew_read(connection, owner, key, hash) else { return false };
        if let Some((flags, cas)) = found {
            // A UDP reply that this value would take past its bound is refused before the
            // value is copied into it.
            let bytes = reply::value_bytes(key, flags, self.crew_value.len(), return_cas.then_some(cas));
            if connection.udp_room().is_some_and(|room| bytes > room) {
                connection.refuse_udp();
                return true;
            }
            let out = connection.local_out(&mut self.pool);
            reply::value(out, key, flags, &self.crew_value, return_cas.then_some(cas));
        }
        true
    }

    /// Executes one request of `owner`'s key here, under `owner`'s partition lock (`crcw`), its
    /// reply going where a local one would; None (forward it) if the lock is taken or not
    /// offered, or if something of this connection waits at another worker.
    pub(super) fn locked_execute(
        &mut self,
        connection: &mut Connection,
        owner: usize,
        request: &Request<'_>,
    ) -> Option<After> {
        self.before_guest_lock();
        let mut partition = owner_lock(&self.lockables, self.guest_lock, connection, owner)?;
        let mut progress = Progress { next_key: connection.resume, output_limit: connection.output_limit };
        let out = connection.local_out(&mut self.pool);
        let after = execute(&mut partition, request, out, &mut self.state, &mut progress);
        drop(partition);
        connection.resume = progress.next_key;
        self.state.counters.locked_requests += 1;
        Some(after)
    }

    /// One key of a split text get (or gat) of `owner`'s key answered here under `owner`'s
    /// partition lock (its VALUE block, no END); false if it must be forwarded.
    pub(super) fn locked_get_key(
        &mut self,
        connection: &mut Connection,
        owner: usize,
        key: &[u8],
        return_cas: bool,
        touch: Option<i64>,
    ) -> bool {
        self.before_guest_lock();
        let Some(mut partition) = owner_lock(&self.lockables, self.guest_lock, connection, owner) else { return false };
        let out = connection.local_out(&mut self.pool);
        get_value(&mut partition, key, return_cas, touch, out, &mut self.state);
        drop(partition);
        self.state.counters.locked_requests += 1;
        true
    }

    /// A whole single-key text get (VALUE and END), a binary get, or an mg whose flags a copy
    /// can answer, of `owner`'s key answered here; false if it must go to the owner.
    pub(super) fn crew_get(
        &mut self,
        connection: &mut Connection,
        owner: usize,
        request: &Request<'_>,
        hash: Option<KeyHash>,
    ) -> bool {
        let (Command::Get { keys, return_cas, touch: None, base64: false }, Some(hash)) = (&request.command, hash)
        else {
            return false;
        };
        let Some(key) = keys.iter().next().filter(|_| keys.len() == 1) else { return false };
        match &request.style {
            ReplyStyle::Text { .. } => {
                if !self.crew_get_key(connection, owner, key, hash, *return_cas) {
                    return false;
                }
                reply::status(connection.local_out(&mut self.pool), reply::Status::End);
                true
            }
            ReplyStyle::Meta(flags) if crate::execute::concurrent_meta_get_allowed(flags) => {
                let Some(found) = self.crew_read(connection, owner, key, hash) else { return false };
                let hit = found.map(|(client_flags, cas)| (client_flags, cas, &self.crew_value[..]));
                let out = connection.local_out(&mut self.pool);
                crate::execute::concurrent_meta_get(out, key, flags, hit, &mut self.state);
                true
            }
            ReplyStyle::Binary(info) => {
                let Some(found) = self.counted_crew_read(connection, owner, key, hash) else { return false };
                let hit = found.map(|(client_flags, cas)| (client_flags, cas, &self.crew_value[..]));
                crate::execute::binary_get_reply(connection.local_out(&mut self.pool), info, key, hit);
                true
            }
            _ => false,
        }
    }
}

impl Core {
    /// A worker about to wait for another worker's lock (`GuestLock::Wait`) holds none of its
    /// own: two workers waiting for each other's locks would each wait out the limit.
    fn before_guest_lock(&mut self) {
        if self.guest_lock == GuestLock::Wait {
            self.partition.release();
        }
    }
}

/// `owner`'s partition for one request (`crcw`), taken as `how` says, its fetched-bit notices
/// applied first as the owner applies them; None if the lock is taken or not offered, or if
/// something of this connection waits at another worker (a request must not pass an earlier
/// one).
fn owner_lock<'a>(
    lockables: &'a [std::sync::OnceLock<Arc<Lockable<Partition>>>],
    how: GuestLock,
    connection: &Connection,
    owner: usize,
) -> Option<crate::sys::partition_lock::Guard<'a, Partition>> {
    if !connection.order.is_empty() {
        return None;
    }
    let lockable = lockables.get(owner).and_then(std::sync::OnceLock::get)?;
    let mut partition = lockable.guest_lock(how)?;
    partition.apply_crew_notices();
    Some(partition)
}
