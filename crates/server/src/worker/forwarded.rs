//! Requests from other workers executed here, and where a request is executed (`route`).
//!
//! It must not write to sockets: replies go back in batches through `forward`.

use super::Core;
use crate::forward::Batch;
use crate::limits::BATCH;
use crate::pending::{Kind, Pending};
use crate::stats::Group;
use tierkv_engine::Access;
use tierkv_engine::Engine;
use tierkv_engine::KeyHash;
use tierkv_protocol::{decode_request, Command, Decoded};
use tierkv_protocol::{Key, Request};

impl Core {
    /// Executes a batch another worker forwarded and sends the replies back. The keys of each
    /// run of `BATCH` entries are prefetched together first, as for local requests.
    pub(super) fn execute_forwarded(&mut self, from: usize, mut batch: Box<Batch>, conns: &[u8]) {
        self.state.fd = -1;
        self.partition.apply_crew_notices();
        let Batch { requests, entries, replies } = &mut *batch;
        let mut request_start = 0;
        for chunk in entries.chunks_mut(BATCH) {
            let mut hashes = [KeyHash(0); BATCH];
            let mut count = 0;
            for entry in chunk.iter().filter(|entry| entry.learned.hash != 0) {
                hashes[count] = KeyHash(entry.learned.hash);
                count += 1;
            }
            self.partition.prefetch(&hashes[..count], Access::Read);
            let mut skip = 0;
            for at in 0..chunk.len() {
                if skip > 0 {
                    skip -= 1;
                    continue;
                }
                if let Some(run) = self.forwarded_atomic_run(&mut chunk[at..], request_start, requests, replies) {
                    request_start = chunk[at + run - 1].request_end;
                    skip = run - 1;
                    continue;
                }
                let entry = &mut chunk[at];
                self.state.fd = entry.fd;
                let request = &requests[request_start..entry.request_end];
                request_start = entry.request_end;
                match entry.kind {
                    Kind::Request | Kind::Read | Kind::GetKey { .. } => {
                        if self.defer_for_flash(entry, request, from) {
                            entry.kind = Kind::Deferred;
                        } else {
                            self.run_entry(entry.kind, request, replies);
                        }
                    }
                    Kind::Flush { delay } => self.partition.flush_all(delay),
                    Kind::Snapshot => self.state.snapshot(&self.partition).write_to(replies),
                    Kind::Reset => self.state.reset(&self.partition),
                    Kind::Unlink => {
                        let _ = self.partition.delete(request, 0);
                    }
                    Kind::Dump => crate::dump::execute_request(&mut self.partition, request, replies),
                    Kind::Conns => replies.extend_from_slice(conns),
                    Kind::Deferred => {}
                }
                entry.reply_end = replies.len();
            }
        }
        self.links.reply(from, batch);
    }

    /// Parks a forwarded request whose key must be read from flash first (its reply goes back
    /// to `from` in a late message); true if parked.
    /// What the sender learned decoding it says whether it must wait: it is not decoded here.
    fn defer_for_flash(&mut self, entry: &Pending, request: &[u8], from: usize) -> bool {
        self.parking.enabled && self.park(*entry, request, Some(from))
    }

    /// KV-Direct's hot-key combining across connections: consecutive forwarded atomics (or
    /// vector updates) on one key, from any connections, run with one lookup and one write, each
    /// entry keeping its own reply span. Returns how many entries ran (one alone runs here too,
    /// so it is decoded once), or None if the entry cannot start a run.
    fn forwarded_atomic_run(
        &mut self,
        entries: &mut [Pending],
        start: usize,
        requests: &[u8],
        replies: &mut Vec<u8>,
    ) -> Option<usize> {
        // With a flash tier, each atomic waits for its own key's item (no combining).
        if self.parking.enabled {
            return None;
        }
        // Only an atomic can start a run: a glance at its first bytes spares other requests a
        // second decode.
        let head = &requests[start..entries[0].request_end];
        let binary_atomic = head.first() == Some(&0x80) && matches!(head.get(1), Some(&(0x60 | 0x61)));
        if !head.starts_with(b"atomic ") && !head.starts_with(b"vupd ") && !binary_atomic {
            return None;
        }
        let decode = |from: usize, to: usize| match decode_request(&requests[from..to], &self.limits) {
            Decoded::Request { request, .. } => Some(request),
            _ => None,
        };
        let first = decode(start, entries[0].request_end).filter(crate::atomic_run::starts_run)?;
        // At most a chunk of entries (BATCH): the run is gathered on the stack.
        let mut run = [first; BATCH];
        let mut len = 1;
        while len < entries.len() && entries[len].kind == Kind::Request {
            match decode(entries[len - 1].request_end, entries[len].request_end)
                .filter(|n| crate::atomic_run::joins(&first, n))
            {
                Some(next) => run[len] = next,
                None => break,
            }
            len += 1;
        }
        let refs: [&Request<'_>; BATCH] = std::array::from_fn(|i| &run[i]);
        let mut marked = 0;
        crate::atomic_run::execute_run_marked(
            &mut self.partition,
            &refs[..len],
            replies,
            &mut self.state,
            &mut |end| {
                entries[marked].reply_end = end;
                marked += 1;
            },
        );
        Some(len)
    }

    /// The worker that owns `key`.
    pub(super) fn owner(&self, key: &[u8]) -> usize {
        KeyHash::of(key).partition(self.workers as u32) as usize
    }

    /// Where a request is executed, and the hash of its one key (None for requests without
    /// exactly one valid key), which the executing worker prefetches with.
    pub(super) fn route(&self, request: &Request<'_>) -> (Route, Option<KeyHash>) {
        let hashed = |key: Key<'_>| {
            let mut buffer = [0u8; 256];
            key.decode_into(&mut buffer).map(KeyHash::of)
        };
        let hash = match request.command {
            Command::Get { keys, .. } if keys.len() != 1 => {
                if !self.parking.enabled && (self.workers == 1 || keys.iter().all(|key| self.owner(key) == self.id)) {
                    return (Route::Local, None);
                }
                return (Route::Split, None);
            }
            Command::FlushAll { delay } if self.workers > 1 && self.state.shared.settings.admin.flush => {
                return (Route::Flush(delay), None)
            }
            // memcached answers `stats conns` in text only (binary: Not found, below).
            Command::Stats { args }
                if crate::stats::subcommand(args) == b"conns"
                    && !matches!(request.style, tierkv_protocol::ReplyStyle::Binary(_)) =>
            {
                return (Route::Conns, None)
            }
            Command::Stats { args } if crate::stats::subcommand(args) == b"detail" => {
                return (Route::AfterForwarded, None)
            }
            Command::Stats { args } if self.workers > 1 => {
                let route = match Group::parse(args) {
                    Some(Group::Reset) => Route::Reset,
                    Some(group) => Route::Gather(group),
                    None => Route::Local,
                };
                return (route, None);
            }
            ref command => command.key().and_then(hashed),
        };
        match hash.map(|hash| hash.partition(self.workers as u32) as usize) {
            Some(owner) if owner != self.id => (Route::Remote(owner), hash),
            _ => (Route::Local, hash),
        }
    }
}

/// Where a request is executed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Route {
    Local,
    /// Forwarded to this worker.
    Remote(usize),
    /// A multi-key get whose keys several workers own: one part per key, then END.
    Split,
    /// flush_all: here and on every worker.
    Flush(i64),
    /// stats reset: here and on every worker.
    Reset,
    /// stats: figures from every worker, summed.
    Gather(Group),
    /// stats conns: every worker's sockets.
    Conns,
    /// Here, once the connection's forwarded requests are done (`stats detail` reads and
    /// switches what every worker counts).
    AfterForwarded,
}
