//! Requests for keys another worker owns, done here. With `--concurrency crew` or `crcw`, a
//! text `get`/`gets` key, or an `mg` asking only for what a copy holds (value, key, flags, CAS,
//! size, quiet, opaque), is read through the owner's `CrewReader` with no message and no lock
//! (MICA's CREW). With `crcw`, any other request of one such key (a write, or a read the reader
//! leaves to the owner) is executed here under the owner's partition lock when the lock is free
//! (`sys::partition_lock`); otherwise it is forwarded as before.
//!
//! A connection does either only while nothing of it waits at another worker, so a request
//! never passes one it sent earlier. It must not write another worker's partition without
//! holding that partition's lock.

use super::*;
use tierkv_engine::CrewGet;

impl Core {
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
        if !connection.order.is_empty() {
            return false;
        }
        let Some(reader) = self.readers.get(owner).and_then(std::sync::OnceLock::get) else { return false };
        let now = tierkv_engine::Engine::now(&*self.partition);
        match reader.get(key, hash, now, &mut self.crew_value) {
            CrewGet::Owner => return false,
            CrewGet::Hit { flags, cas } => {
                self.state.counters.read(false, true);
                self.state.observe_get(key, Some(self.crew_value.len()), true);
                let out = connection.local_out(&mut self.pool);
                reply::value(out, key, flags, &self.crew_value, return_cas.then_some(cas));
            }
            CrewGet::Miss => {
                self.state.counters.read(false, false);
                self.state.observe_get(key, None, true);
            }
        }
        self.state.counters.crew_reads += 1;
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
        if !connection.order.is_empty() {
            return None;
        }
        let mut partition = self.lockables.get(owner).and_then(std::sync::OnceLock::get)?.try_lock()?;
        // As on the owner: fetched bits handed over by concurrent reads are set first.
        partition.apply_crew_notices();
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
        if !connection.order.is_empty() {
            return false;
        }
        let Some(mut partition) =
            self.lockables.get(owner).and_then(std::sync::OnceLock::get).and_then(|l| l.try_lock())
        else {
            return false;
        };
        partition.apply_crew_notices();
        let out = connection.local_out(&mut self.pool);
        get_value(&mut partition, key, return_cas, touch, out, &mut self.state);
        drop(partition);
        self.state.counters.locked_requests += 1;
        true
    }

    /// A whole single-key text get (VALUE and END), or an mg whose flags a copy can answer, of
    /// `owner`'s key answered here; false if it must go to the owner.
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
                self.crew_meta_get(connection, owner, key, hash, flags)
            }
            _ => false,
        }
    }

    /// An mg of `owner`'s key answered here from a validated copy (`concurrent_meta_get`);
    /// false if it must go to the owner.
    fn crew_meta_get(
        &mut self,
        connection: &mut Connection,
        owner: usize,
        key: &[u8],
        hash: KeyHash,
        flags: &tierkv_protocol::meta::MetaFlags<'_>,
    ) -> bool {
        if !connection.order.is_empty() {
            return false;
        }
        let Some(reader) = self.readers.get(owner).and_then(std::sync::OnceLock::get) else { return false };
        let now = tierkv_engine::Engine::now(&*self.partition);
        let hit = match reader.get(key, hash, now, &mut self.crew_value) {
            CrewGet::Owner => return false,
            CrewGet::Hit { flags, cas } => Some((flags, cas, &self.crew_value[..])),
            CrewGet::Miss => None,
        };
        let out = connection.local_out(&mut self.pool);
        crate::execute::concurrent_meta_get(out, key, flags, hit, &mut self.state);
        self.state.counters.crew_reads += 1;
        true
    }
}
