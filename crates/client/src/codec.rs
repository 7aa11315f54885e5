//! The requests the client sends and the replies it reads, in memcached's text protocol, with
//! no I/O: both the blocking and the async client encode and decode through here.
//!
//! It must not allocate per byte read, and it must never trust a reply's lengths beyond what
//! the buffer holds.

use std::ops::Range;

use tierkv_protocol::VectorCall;
pub use tierkv_protocol::{AtomicCode, VectorElem, VectorOpCode};

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

/// The first line in `buf`, without its CRLF, and the bytes it takes.
fn line(buf: &[u8]) -> Result<Option<(&[u8], usize)>, ProtocolError> {
    match buf.windows(2).position(|w| w == b"\r\n") {
        Some(end) => Ok(Some((&buf[..end], end + 2))),
        None if buf.len() > MAX_LINE => Err(ProtocolError(format!("a reply line over {MAX_LINE} bytes"))),
        None => Ok(None),
    }
}

fn text(line: &[u8]) -> String {
    String::from_utf8_lossy(line).into_owned()
}

fn server_error(line: &[u8]) -> Option<Reply> {
    let is_error = line == b"ERROR" || line.starts_with(b"CLIENT_ERROR") || line.starts_with(b"SERVER_ERROR");
    is_error.then(|| Reply::ServerError(text(line)))
}

/// A one-line reply from the start of `buf`: Ok(None) until the line is complete.
pub(crate) fn parse_line(buf: &[u8], atomic: Option<bool>) -> Result<Option<(Reply, usize)>, ProtocolError> {
    let Some((line, used)) = line(buf)? else { return Ok(None) };
    if let Some(error) = server_error(line) {
        return Ok(Some((error, used)));
    }
    let bad = || ProtocolError(format!("unexpected reply {:?}", text(line)));
    let reply = match (line, atomic) {
        (b"STORED", _) => Reply::Stored,
        (b"NOT_FOUND", _) => Reply::NotFound,
        (_, Some(signed)) => atomic_reply(line, signed).ok_or_else(bad)?,
        (b"NOT_STORED", _) => Reply::NotStored,
        (b"EXISTS", _) => Reply::Exists,
        (b"DELETED", _) => Reply::Deleted,
        (b"TOUCHED", _) => Reply::Touched,
        (b"OK", _) => Reply::Ok,
        (digits, _) => Reply::Number(std::str::from_utf8(digits).ok().and_then(|d| d.parse().ok()).ok_or_else(bad)?),
    };
    Ok(Some((reply, used)))
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
pub(crate) enum Retrieved {
    /// A `VALUE` block: the key's place in the buffer and the item.
    Value(Range<usize>, Item),
    /// `END`.
    End,
    /// An error line in place of the reply.
    Error(Reply),
}

/// One element of a retrieval reply from the start of `buf`: Ok(None) until it is complete.
pub(crate) fn parse_retrieved(buf: &[u8]) -> Result<Option<(Retrieved, usize)>, ProtocolError> {
    let Some((line, used)) = line(buf)? else { return Ok(None) };
    if line == b"END" {
        return Ok(Some((Retrieved::End, used)));
    }
    if let Some(error) = server_error(line) {
        return Ok(Some((Retrieved::Error(error), used)));
    }
    let bad = || ProtocolError(format!("unexpected reply {:?}", text(line)));
    let fields = line.strip_prefix(b"VALUE ").ok_or_else(bad)?;
    let words: Vec<&[u8]> = fields.split(|&b| b == b' ').collect();
    let parse = |w: &[u8]| std::str::from_utf8(w).ok().and_then(|w| w.parse::<u64>().ok());
    let (key, flags, bytes, cas) = match words[..] {
        [key, flags, bytes] => (key, parse(flags), parse(bytes), None),
        [key, flags, bytes, cas] => (key, parse(flags), parse(bytes), Some(parse(cas).ok_or_else(bad)?)),
        _ => return Err(bad()),
    };
    let flags = flags.and_then(|f| u32::try_from(f).ok()).ok_or_else(bad)?;
    let bytes = bytes.and_then(|b| usize::try_from(b).ok()).ok_or_else(bad)?;
    let total = used.checked_add(bytes).and_then(|t| t.checked_add(2)).ok_or_else(bad)?;
    if buf.len() < total {
        return Ok(None);
    }
    if &buf[total - 2..total] != b"\r\n" {
        return Err(ProtocolError("a value not followed by CRLF".to_string()));
    }
    let key_start = b"VALUE ".len();
    let item = Item { value: buf[used..total - 2].to_vec(), flags, cas };
    Ok(Some((Retrieved::Value(key_start..key_start + key.len(), item), total)))
}

/// How many bytes a `VALUE` header in `buf` says its block needs, when known: used to grow the
/// read buffer once for a large value.
pub(crate) fn wanted(buf: &[u8]) -> Option<usize> {
    if buf.first() == Some(&0x81) && buf.len() >= 24 {
        return (u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize).checked_add(24);
    }
    let (line, used) = line(buf).ok()??;
    let bytes: usize = std::str::from_utf8(line.strip_prefix(b"VALUE ")?).ok()?.split(' ').nth(2)?.parse().ok()?;
    used.checked_add(bytes)?.checked_add(2)
}
