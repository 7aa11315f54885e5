//! Reads of keys another worker owns, done here (MICA's CREW, `--concurrency crew`): a text
//! `get`/`gets` key is read through the owner's `CrewReader` with no message to the owner;
//! what only the owner can answer (`CrewGet::Owner`) is forwarded as before.
//!
//! A connection reads here only while nothing of it waits at another worker, so a read never
//! passes a change it sent earlier. It must not write another worker's partition.

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
        let now = tierkv_engine::Engine::now(&self.partition);
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

    /// A whole single-key text get of `owner`'s key answered here (VALUE and END); false if it
    /// must be forwarded.
    pub(super) fn crew_get(
        &mut self,
        connection: &mut Connection,
        owner: usize,
        request: &Request<'_>,
        hash: Option<KeyHash>,
    ) -> bool {
        let (Command::Get { keys, return_cas, touch: None, base64: false }, ReplyStyle::Text { .. }, Some(hash)) =
            (&request.command, &request.style, hash)
        else {
            return false;
        };
        let Some(key) = keys.iter().next().filter(|_| keys.len() == 1) else { return false };
        if !self.crew_get_key(connection, owner, key, hash, *return_cas) {
            return false;
        }
        reply::status(connection.local_out(&mut self.pool), reply::Status::End);
        true
    }
}
