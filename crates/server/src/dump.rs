//! Dumps of the items (`lru_crawler metadump`, `stats cachedump`): a connection walks every
//! worker's partition in bounded steps (`DUMP_STEP_BUCKETS` index buckets at a time), its own
//! in place and the others' through the forwarding queues, one step per turn while its output
//! is below `DUMP_OUTPUT_BYTES`, so serving never stalls behind a dump and a slow reader holds
//! at most a bounded backlog. Lines use memcached's formats; tierkv's one class is 1.

use crate::limits::{CACHEDUMP_MAX_BYTES, DUMP_STEP_BUCKETS};
use tierkv_engine::Engine;
use tierkv_engine::{AnyPartition, ItemDebug};

/// The one class tierkv reports: the whole log (or store arena).
pub(crate) const CLASS: u32 = 1;

/// Which items a dump lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DumpKind {
    /// `lru_crawler metadump`: every live item, one `key=...` line each, then END.
    Metadump,
    /// `stats cachedump 1 N`: `ITEM key [bytes b; exp s]` lines, at most `limit` (0: all)
    /// and at most memcached's 2 MB of lines, then END.
    Cachedump { limit: u64 },
}

/// memcached's URI encoding of keys in dumps: letters, digits and `-._~` stay, everything else
/// becomes `%XX`.
pub(crate) fn uri_encode(key: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &byte in key {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 15)]]);
        }
    }
}

/// A connection's dump in progress.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dump {
    pub kind: DumpKind,
    /// The worker whose partition is being walked (workers are walked 0, 1, ...).
    pub worker: usize,
    pub cursor: usize,
    /// A step is out at another worker.
    pub waiting: bool,
    /// Items listed so far and bytes of lines so far (cachedump's limits).
    pub items: u64,
    pub bytes: usize,
}

impl Dump {
    pub(crate) fn new(kind: DumpKind) -> Dump {
        Dump { kind, worker: 0, cursor: 0, waiting: false, items: 0, bytes: 0 }
    }

    /// Items the next step may still list (None: no limit).
    pub(crate) fn item_budget(&self) -> Option<u64> {
        match self.kind {
            DumpKind::Cachedump { limit: 0 } | DumpKind::Metadump => None,
            DumpKind::Cachedump { limit } => Some(limit.saturating_sub(self.items)),
        }
    }

    /// Takes in what a step did: lines and items written, where the partition's walk goes
    /// on (None: that partition is done). True when the whole dump is over.
    pub(crate) fn advance(&mut self, next: Option<usize>, items: u64, bytes: usize, workers: usize) -> bool {
        self.items += items;
        self.bytes += bytes;
        self.waiting = false;
        match next {
            Some(cursor) => self.cursor = cursor,
            None => {
                self.worker += 1;
                self.cursor = 0;
            }
        }
        let full = self.item_budget() == Some(0)
            || (matches!(self.kind, DumpKind::Cachedump { .. }) && self.bytes >= CACHEDUMP_MAX_BYTES);
        full || self.worker >= workers
    }
}

/// One step over `partition` from `cursor`: appends the lines of at most `item_budget` items
/// (and, for a cachedump, no more than its byte cap allows after `bytes_so_far`); returns
/// where the walk goes on and how many items were listed.
pub(crate) fn step(
    partition: &mut AnyPartition,
    kind: DumpKind,
    cursor: usize,
    item_budget: Option<u64>,
    bytes_so_far: usize,
    out: &mut Vec<u8>,
) -> (Option<usize>, u64) {
    let now = i64::from(partition.now());
    let mut listed = 0u64;
    let mut bytes = bytes_so_far;
    let mut full = false;
    let next = partition.dump_step(cursor, DUMP_STEP_BUCKETS, &mut |key: &[u8], debug: &ItemDebug| {
        if full || item_budget.is_some_and(|budget| listed >= budget) {
            full = true;
            return;
        }
        let start = out.len();
        match kind {
            DumpKind::Metadump => metadump_line(key, debug, now, out),
            DumpKind::Cachedump { .. } => {
                let exptime = if debug.ttl < 0 { 0 } else { now + debug.ttl };
                out.extend_from_slice(b"ITEM ");
                out.extend_from_slice(key);
                out.extend_from_slice(format!(" [{} b; {exptime} s]\r\n", debug.value_len).as_bytes());
                // memcached stops where the next line would pass its 2 MB buffer.
                if bytes + out.len() - start + 6 > CACHEDUMP_MAX_BYTES {
                    out.truncate(start);
                    full = true;
                    return;
                }
            }
        }
        bytes += out.len() - start;
        listed += 1;
    });
    (if full { None } else { next }, listed)
}

/// `key=... exp=... la=... cas=... fetch=... cls=1 size=...`, as memcached's crawler writes it
/// (exp and la are Unix times; exp is -1 for items that never expire).
fn metadump_line(key: &[u8], debug: &ItemDebug, now: i64, out: &mut Vec<u8>) {
    out.extend_from_slice(b"key=");
    uri_encode(key, out);
    let exp = if debug.ttl < 0 { -1 } else { now + debug.ttl };
    let last_access = now - i64::from(debug.last_access);
    let fetched = if debug.fetched { "yes" } else { "no" };
    let tail =
        format!(" exp={exp} la={last_access} cas={} fetch={fetched} cls={CLASS} size={}\n", debug.cas, debug.size);
    out.extend_from_slice(tail.as_bytes());
}

/// The bytes of a step request forwarded to another worker.
pub(crate) fn encode_request(dump: &Dump) -> [u8; 25] {
    let mut bytes = [0u8; 25];
    let (tag, limit) = match dump.kind {
        DumpKind::Metadump => (0u8, 0),
        DumpKind::Cachedump { limit } => (1, limit),
    };
    bytes[0] = tag;
    // What the step may still list (0: no limit).
    let budget = if limit == 0 { 0 } else { limit.saturating_sub(dump.items) };
    bytes[1..9].copy_from_slice(&budget.to_le_bytes());
    bytes[9..17].copy_from_slice(&(dump.cursor as u64).to_le_bytes());
    bytes[17..25].copy_from_slice(&(dump.bytes as u64).to_le_bytes());
    bytes
}

/// Runs a forwarded step request on this worker's partition; the reply is the lines and a
/// 16-byte trailer (next cursor or u64::MAX, items listed).
pub(crate) fn execute_request(partition: &mut AnyPartition, request: &[u8], replies: &mut Vec<u8>) {
    let word = |at: usize| u64::from_le_bytes(request[at..at + 8].try_into().expect("8 bytes"));
    if request.len() != 25 {
        return;
    }
    let kind = if request[0] == 0 { DumpKind::Metadump } else { DumpKind::Cachedump { limit: word(1) } };
    let budget = match kind {
        DumpKind::Cachedump { limit } if limit > 0 => Some(limit),
        _ => None,
    };
    let (next, listed) = step(partition, kind, word(9) as usize, budget, word(17) as usize, replies);
    replies.extend_from_slice(&next.map_or(u64::MAX, |cursor| cursor as u64).to_le_bytes());
    replies.extend_from_slice(&listed.to_le_bytes());
}

/// Splits a forwarded step's reply into its lines and (next cursor, items listed).
pub(crate) fn decode_reply(reply: &[u8]) -> Option<(&[u8], Option<usize>, u64)> {
    let lines = reply.len().checked_sub(16)?;
    let word = |at: usize| u64::from_le_bytes(reply[at..at + 8].try_into().expect("8 bytes"));
    let next = word(lines);
    Some((&reply[..lines], (next != u64::MAX).then_some(next as usize), word(lines + 8)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_uri_encoded_as_memcached_does() {
        let mut out = Vec::new();
        uri_encode(b"a:b c%d\x01-._~Z9", &mut out);
        assert_eq!(out, b"a%3Ab%20c%25d%01-._~Z9");
    }
}
