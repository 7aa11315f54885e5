//! Pending work: a request that cannot be answered at once (forwarded to its key's owner,
//! parked on a flash read, or one key of a multi-get split over several owners) is one
//! `Pending` value: where its reply goes (connection slot, generation, place in the reply
//! order), what is to be done with it (`Kind`), what decoding learned of it (`Learned`: the
//! key's hash, where the key lies, what it needs of the key's item) and where its request
//! bytes end in the buffer that holds them past the read buffer (a forwarded batch's
//! `requests`, or a parked request's own copy). Nothing that knows a `Pending` decodes its
//! request again to learn these.
//!
//! It must not execute anything: it only describes the work.

use tierkv_engine::KeyHash;
use tierkv_protocol::{Needs, Request};

/// What the worker that takes a `Pending` does with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Decode and execute the request bytes; the reply goes back whole.
    Request,
    /// A `Request` that reads an item (its reply may be large; the sender bounds how many it
    /// has outstanding).
    Read,
    /// One key of a multi-key text get: the request bytes are the key; reply with its VALUE
    /// lines only (the connection's worker writes the one END).
    GetKey {
        /// `gets`/`gats`: the CAS goes in the VALUE line.
        cas: bool,
        /// `gat`/`gats`: the new expiry.
        touch: Option<i64>,
    },
    /// flush_all on this partition too (counted once, by the connection's worker).
    Flush { delay: i64 },
    /// Send back this worker's `stats` figures.
    Snapshot,
    /// `stats reset` on this worker too.
    Reset,
    /// The request bytes are a key whose item must go (a set refused as too large); nothing
    /// is counted and the reply is empty.
    Unlink,
    /// `stats conns`: this worker's lines (no END).
    Conns,
    /// One step of a dump of this worker's items (`dump::encode_request`); the reply is the
    /// lines and where the walk goes on (`dump::decode_reply`).
    Dump,
    /// Set by the owner: the request waits for a flash read there, and its reply comes back
    /// later in a `Late` message (under the entry's first kind).
    Deferred,
}

impl Kind {
    /// Whether it reads items (its replies count against the connection's bound).
    pub(crate) fn reads(self) -> bool {
        matches!(self, Kind::Read | Kind::GetKey { .. })
    }
}

/// What decoding learned of a request, kept with it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Learned {
    /// The key's hash (0: no key), so the owner can prefetch a run of entries together.
    pub hash: u64,
    /// Where the key lies in the request bytes (offset, length); length 0 when it is not there
    /// as it is used (no key, or a base64 key, which is decoded where it is needed).
    pub key: (u32, u32),
    /// What the request needs of its key's item before it runs.
    pub needs: Needs,
}

impl Learned {
    /// What `request`, decoded from `raw`, says of itself (`hash`: its key's, when known).
    pub(crate) fn of(request: &Request<'_>, raw: &[u8], hash: Option<KeyHash>) -> Learned {
        let key =
            request.command.key().filter(|key| !key.base64).and_then(|key| span_in(raw, key.raw)).unwrap_or_default();
        Learned { hash: hash.map_or(0, |hash| hash.0), key, needs: request.needs() }
    }

    /// A split get's key: the whole request is the key.
    pub(crate) fn of_key(key: &[u8], hash: KeyHash, touch: bool) -> Learned {
        Learned { hash: hash.0, key: (0, key.len() as u32), needs: Needs { item: true, write: touch, copy: !touch } }
    }

    /// The key in `request` (the bytes this was learned from), if it lies there.
    pub(crate) fn key_in<'r>(&self, request: &'r [u8]) -> Option<&'r [u8]> {
        let (at, len) = (self.key.0 as usize, self.key.1 as usize);
        (len > 0).then(|| request.get(at..at + len)).flatten()
    }
}

/// Where `part` (a slice of `whole`) lies in `whole`, as (offset, length).
fn span_in(whole: &[u8], part: &[u8]) -> Option<(u32, u32)> {
    let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    (start + part.len() <= whole.len() && !part.is_empty()).then_some((start as u32, part.len() as u32))
}

/// A request that waits: its reply's place, its kind, what decoding learned, and (set as it
/// travels) where its request and reply bytes end in their batch.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pending {
    /// The connection (slot and generation, so a reply for a closed connection is dropped).
    pub slot: usize,
    pub generation: u64,
    /// The reply's position in the connection's reply order.
    pub seq: u64,
    pub kind: Kind,
    pub learned: Learned,
    /// End of this entry's request bytes in `Batch::requests`.
    pub request_end: usize,
    /// End of this entry's reply bytes in `Batch::replies` (set by the owner).
    pub reply_end: usize,
    /// The connection's descriptor, which `watch` lines name whichever worker runs it.
    pub fd: i32,
}

impl Pending {
    /// Work for the connection in `slot` (of `generation`, descriptor `fd`) whose reply is part
    /// `seq`.
    pub(crate) fn new(slot: usize, generation: u64, fd: i32, seq: u64, kind: Kind, learned: Learned) -> Pending {
        Pending { slot, generation, seq, kind, learned, request_end: 0, reply_end: 0, fd }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierkv_protocol::{decode_request, Decoded, Limits};

    fn learned(raw: &[u8]) -> Learned {
        let Decoded::Request { request, .. } = decode_request(raw, &Limits::default()) else { panic!("decodes") };
        Learned::of(&request, raw, None)
    }

    #[test]
    fn the_key_is_found_where_the_decoder_saw_it() {
        for (raw, key) in [
            (&b"get alpha\r\n"[..], &b"alpha"[..]),
            (b"set beta 0 0 1\r\nx\r\n", b"beta"),
            (b"mg gamma v\r\n", b"gamma"),
            (b"incr delta 5\r\n", b"delta"),
        ] {
            assert_eq!(learned(raw).key_in(raw), Some(key), "{}", String::from_utf8_lossy(raw));
        }
        let binary = tierkv_protocol::client::quick::binary_getk;
        let mut raw = Vec::new();
        binary(&mut raw, b"epsilon", 7);
        assert_eq!(learned(&raw).key_in(&raw), Some(&b"epsilon"[..]));
    }

    #[test]
    fn keyless_and_base64_requests_have_no_key_span() {
        assert_eq!(learned(b"version\r\n").key_in(b"version\r\n"), None);
        assert_eq!(learned(b"get a b\r\n").key_in(b"get a b\r\n"), None);
        let raw = b"mg Zm9v b v\r\n";
        assert_eq!(learned(raw).key_in(raw), None);
    }

    #[test]
    fn needs_follow_the_command() {
        let (item, write) = (true, true);
        assert_eq!(learned(b"get a\r\n").needs, Needs { item, write: false, copy: true });
        assert_eq!(learned(b"set a 0 0 1\r\nx\r\n").needs, Needs { item: false, write, copy: false });
        assert_eq!(learned(b"ms a 1\r\nx\r\n").needs, Needs { item, write, copy: false });
        assert_eq!(learned(b"delete a\r\n").needs, Needs { item, write, copy: false });
        assert_eq!(learned(b"gat 10 a\r\n").needs, Needs { item, write, copy: false });
        // A meta get reads more than the value (and may change the item): never a copy.
        assert_eq!(learned(b"mg a v\r\n").needs, Needs { item, write: false, copy: false });
        assert!(learned(b"gets a\r\n").needs.copy);
        assert_eq!(learned(b"version\r\n").needs, Needs::default());
    }
}
