//! The requests the client sends, in memcached's text protocol, and what the replies (decoded
//! by `tierkv_protocol::client`) answer; no I/O: both the blocking and the async client encode
//! and decode through here.
//!
//! It must not allocate per byte read, and it must never trust a reply's lengths beyond what
//! the buffer holds.

use tierkv_protocol::client::{decode_reply, Reply as Wire, ReplyDecoded};
use tierkv_protocol::reply::Status;
pub use tierkv_protocol::{AtomicCode, VectorElem, VectorOpCode};
use tierkv_protocol::{Limits, VectorCall};

/// The longest key memcached accepts.
pub const MAX_KEY: usize = 250;
/// The longest reply line read (a VALUE header is at most about 300 bytes).
const MAX_LINE: usize = 8 << 10;

/// How a storage command stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    /// `set`.
    Set,
    /// `add`: only when absent.
    Add,
    /// `replace`: only when present.
    Replace,
    /// `append` to the value.
    Append,
    /// `prepend` to the value.
    Prepend,
    /// `cas` with this unique.
    Cas(u64),
}

/// One atomic request (docs/protocol-extensions.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Atomic<'a> {
    /// The counter's key.
    pub key: &'a [u8],
    /// The operation.
    pub code: AtomicCode,
    /// i64 (true) or u64 (false).
    pub signed: bool,
    /// The operand (for compare-and-swap, the expected value).
    pub operand: u64,
    /// `cas`: the new value.
    pub operand2: u64,
}

impl<'a> Atomic<'a> {
    /// Fetch-and-add of `delta` on a u64 counter.
    pub fn add(key: &'a [u8], delta: u64) -> Atomic<'a> {
        Atomic { key, code: AtomicCode::Add, signed: false, operand: delta, operand2: 0 }
    }
}

/// One request. Every request names one key, which decides where it goes.
#[derive(Clone, Copy, Debug)]
pub enum Op<'a> {
    /// `get`: the value, flags.
    Get(&'a [u8]),
    /// `gets`: the value, flags and CAS unique.
    Gets(&'a [u8]),
    /// A storage command.
    Store {
        /// How.
        mode: StoreMode,
        /// Key.
        key: &'a [u8],
        /// Value.
        value: &'a [u8],
        /// Client flags.
        flags: u32,
        /// memcached's exptime: 0 never, up to 30 days relative, else a Unix time.
        exptime: u32,
    },
    /// `delete`.
    Delete(&'a [u8]),
    /// `incr` by a delta.
    Incr(&'a [u8], u64),
    /// `decr` by a delta.
    Decr(&'a [u8], u64),
    /// `touch` with a new exptime.
    Touch(&'a [u8], u32),
    /// A tierkv atomic (`atomic ...`).
    Atomic(Atomic<'a>),
    /// `vnew`: a vector of zeroes.
    VectorNew {
        /// Key.
        key: &'a [u8],
        /// Element type.
        elem: VectorElem,
        /// Elements.
        len: u32,
    },
    /// `vupd`: an element-wise update with little-endian `data` at `offset`.
    VectorUpdate {
        /// Key.
        key: &'a [u8],
        /// Operation.
        op: VectorOpCode,
        /// Element type.
        elem: VectorElem,
        /// First element.
        offset: u32,
        /// Operand elements, little-endian.
        data: &'a [u8],
    },
    /// `vget`: elements `offset..offset + count`.
    VectorGet {
        /// Key.
        key: &'a [u8],
        /// First element.
        offset: u32,
        /// Elements.
        count: u32,
    },
}

impl<'a> Op<'a> {
    /// The key the request is about.
    pub fn key(&self) -> &'a [u8] {
        match *self {
            Op::Get(key) | Op::Gets(key) | Op::Delete(key) | Op::Incr(key, _) | Op::Decr(key, _) => key,
            Op::Touch(key, _) => key,
            Op::Store { key, .. } | Op::VectorNew { key, .. } | Op::VectorUpdate { key, .. } => key,
            Op::VectorGet { key, .. } => key,
            Op::Atomic(a) => a.key,
        }
    }
}

/// A value read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// The value.
    pub value: Vec<u8>,
    /// Its client flags.
    pub flags: u32,
    /// Its CAS unique (`gets` only).
    pub cas: Option<u64>,
}

/// The server's answer to one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A retrieval found the key.
    Hit(Item),
    /// A retrieval did not.
    Miss,
    /// `STORED`.
    Stored,
    /// `NOT_STORED` (add, replace, append, prepend that did not apply).
    NotStored,
    /// `EXISTS`: a cas lost.
    Exists,
    /// `NOT_FOUND`.
    NotFound,
    /// `DELETED`.
    Deleted,
    /// `TOUCHED`.
    Touched,
    /// `OK` (a vector update).
    Ok,
    /// The value after incr or decr.
    Number(u64),
    /// An atomic ran: the value before and after.
    AtomicDone {
        /// Before.
        old: u64,
        /// After.
        new: u64,
    },
    /// An atomic compare-and-swap found this value.
    AtomicMismatch {
        /// The value held.
        current: u64,
    },
    /// `ERROR`, `CLIENT_ERROR ...` or `SERVER_ERROR ...`: the server's line.
    ServerError(String),
}

/// The reply a request was sent expecting.
#[derive(Clone, Debug)]
pub(crate) enum Expect {
    /// `VALUE` blocks then `END` for these requests (indices into the batch), in key order.
    Values { ops: Vec<usize> },
    /// One line.
    Line { op: usize },
    /// One atomic reply line.
    Atomic { op: usize, signed: bool },
    /// One binary response.
    Binary { op: usize },
    /// Binary responses to quiet gets (hits only), then the `NOOP`'s.
    BinaryGets { ops: Vec<usize> },
}

impl Expect {
    /// The requests (indices into the batch) this reply answers.
    pub(crate) fn ops(&self) -> &[usize] {
        match self {
            Expect::Values { ops } | Expect::BinaryGets { ops } => ops,
            Expect::Line { op } | Expect::Atomic { op, .. } | Expect::Binary { op } => std::slice::from_ref(op),
        }
    }
}

/// A reply the client cannot read: the connection is out of step and must be dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolError(pub String);

/// Checks a key as memcached would, before anything is sent.
pub fn check_key(key: &[u8]) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_KEY {
        return Err(format!("key of {} bytes (1 to {MAX_KEY})", key.len()));
    }
    if key.iter().any(|&b| b <= b' ' || b == 0x7f) {
        return Err("key with a space or control character".to_string());
    }
    Ok(())
}

fn number(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(n.to_string().as_bytes());
}

/// Appends the request for one op that is not a retrieval by `get`/`gets`, and returns what
/// to expect.
pub(crate) fn encode(out: &mut Vec<u8>, index: usize, op: &Op<'_>) -> Expect {
    let line = Expect::Line { op: index };
    match *op {
        Op::Get(_) | Op::Gets(_) => unreachable!("retrievals are written by RetrievalLine"),
        Op::Store { mode, key, value, flags, exptime } => {
            let verb: &[u8] = match mode {
                StoreMode::Set => b"set ",
                StoreMode::Add => b"add ",
                StoreMode::Replace => b"replace ",
                StoreMode::Append => b"append ",
                StoreMode::Prepend => b"prepend ",
                StoreMode::Cas(_) => b"cas ",
            };
            out.extend_from_slice(verb);
            out.extend_from_slice(key);
            out.extend_from_slice(format!(" {flags} {exptime} {}", value.len()).as_bytes());
            if let StoreMode::Cas(unique) = mode {
                out.push(b' ');
                number(out, unique);
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
            line
        }
        Op::Delete(key) => words(out, &[b"delete ", key], None, line),
        Op::Incr(key, delta) => words(out, &[b"incr ", key], Some(delta), line),
        Op::Decr(key, delta) => words(out, &[b"decr ", key], Some(delta), line),
        Op::Touch(key, exptime) => words(out, &[b"touch ", key], Some(u64::from(exptime)), line),
        Op::Atomic(a) => {
            tierkv_protocol::atomic::write_text_request(out, a.key, a.code, a.signed, a.operand, a.operand2);
            out.extend_from_slice(b"\r\n");
            Expect::Atomic { op: index, signed: a.signed }
        }
        Op::VectorNew { key, elem, len } => {
            tierkv_protocol::vector::write_request(out, key, &VectorCall::New { elem, len }, false);
            line
        }
        Op::VectorUpdate { key, op, elem, offset, data } => {
            let call = VectorCall::Update { op, elem, offset, data };
            tierkv_protocol::vector::write_request(out, key, &call, false);
            line
        }
        Op::VectorGet { key, offset, count } => {
            tierkv_protocol::vector::write_request(out, key, &VectorCall::Get { offset, count }, false);
            Expect::Values { ops: vec![index] }
        }
    }
}

fn words(out: &mut Vec<u8>, parts: &[&[u8]], n: Option<u64>, expect: Expect) -> Expect {
    parts.iter().for_each(|p| out.extend_from_slice(p));
    if let Some(n) = n {
        out.push(b' ');
        number(out, n);
    }
    out.extend_from_slice(b"\r\n");
    expect
}

/// What the client accepts from a server: values up to 1 GiB, reply lines up to 8 KiB.
const LIMITS: Limits = Limits {
    max_key_bytes: MAX_KEY,
    max_value_bytes: 1 << 30,
    max_line_bytes: MAX_LINE,
    max_meta_flags: 17,
    binary: true,
    text: true,
};

/// The reply at the front of `buf`, decoded by the protocol crate (text, or binary when it
/// starts with the response magic): Ok(None) until it is complete.
pub(crate) fn decode(buf: &[u8]) -> Result<Option<(Wire<'_>, usize)>, ProtocolError> {
    match decode_reply(buf, &LIMITS) {
        ReplyDecoded::Reply { reply, consumed } => Ok(Some((reply, consumed))),
        ReplyDecoded::Incomplete { .. } => Ok(None),
        ReplyDecoded::Invalid(why) => Err(ProtocolError(why.to_string())),
    }
}

/// The bytes the reply at the front of `buf` needs in all, when its header says (0 when not
/// known): a read buffer grows once for a large value.
pub(crate) fn needed(buf: &[u8]) -> usize {
    match decode_reply(buf, &LIMITS) {
        ReplyDecoded::Incomplete { needed } => needed,
        _ => 0,
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn unexpected(raw: &[u8]) -> ProtocolError {
    ProtocolError(format!("unexpected reply {:?}", text(raw.strip_suffix(b"\r\n").unwrap_or(raw))))
}

/// `ERROR`, `CLIENT_ERROR ...` and `SERVER_ERROR ...`, with the server's words.
fn server_error(wire: &Wire<'_>) -> Option<Reply> {
    match wire {
        Wire::Error => Some(Reply::ServerError("ERROR".into())),
        Wire::ClientError(rest) => Some(Reply::ServerError(format!("CLIENT_ERROR {}", text(rest)))),
        Wire::ServerError(rest) => Some(Reply::ServerError(format!("SERVER_ERROR {}", text(rest)))),
        _ => None,
    }
}

/// A one-line reply (`raw`: its bytes, for an atomic's numbers, which the decoder leaves).
pub(crate) fn line_reply(wire: &Wire<'_>, raw: &[u8], atomic: Option<bool>) -> Result<Reply, ProtocolError> {
    if let Some(error) = server_error(wire) {
        return Ok(error);
    }
    Ok(match (wire, atomic) {
        (Wire::Status(Status::Stored), _) => Reply::Stored,
        (Wire::Status(Status::NotFound), _) => Reply::NotFound,
        (Wire::Status(Status::Ok | Status::Exists), Some(signed)) => {
            atomic_reply(raw.strip_suffix(b"\r\n").unwrap_or(raw), signed).ok_or_else(|| unexpected(raw))?
        }
        (Wire::Status(Status::NotStored), None) => Reply::NotStored,
        (Wire::Status(Status::Exists), None) => Reply::Exists,
        (Wire::Status(Status::Deleted), None) => Reply::Deleted,
        (Wire::Status(Status::Touched), None) => Reply::Touched,
        (Wire::Status(Status::Ok), None) => Reply::Ok,
        (Wire::Number(n), None) => Reply::Number(*n),
        _ => return Err(unexpected(raw)),
    })
}

fn atomic_reply(line: &[u8], signed: bool) -> Option<Reply> {
    let line = std::str::from_utf8(line).ok()?;
    let value = |w: &str| if signed { w.parse::<i64>().ok().map(|v| v as u64) } else { w.parse::<u64>().ok() };
    let mut words = line.split(' ');
    match (words.next()?, words.next(), words.next(), words.next()) {
        ("OK", Some(old), Some(new), None) => Some(Reply::AtomicDone { old: value(old)?, new: value(new)? }),
        ("EXISTS", Some(current), None, None) => Some(Reply::AtomicMismatch { current: value(current)? }),
        _ => None,
    }
}

/// One element of a retrieval reply.
#[derive(Debug)]
pub(crate) enum Retrieved<'a> {
    /// A `VALUE` block: its key and the item.
    Value(&'a [u8], Item),
    /// `END`.
    End,
    /// An error line in place of the reply.
    Error(Reply),
}

/// What a decoded reply is as an element of a retrieval reply.
pub(crate) fn retrieved<'a>(wire: Wire<'a>, raw: &[u8]) -> Result<Retrieved<'a>, ProtocolError> {
    if let Some(error) = server_error(&wire) {
        return Ok(Retrieved::Error(error));
    }
    match wire {
        Wire::Value { key, flags, data, cas } => Ok(Retrieved::Value(key, Item { value: data.to_vec(), flags, cas })),
        Wire::Status(Status::End) => Ok(Retrieved::End),
        _ => Err(unexpected(raw)),
    }
}
