//! Server-side reply encoders: they append memcached 1.6's exact reply bytes to a buffer the
//! caller owns and reuses (so a warmed-up connection never allocates to reply).

use crate::meta::MetaFlags;
use crate::number::{write_i64, write_u64};
use crate::{binary, ErrorReply};

const CRLF: &[u8] = b"\r\n";

/// Appends `bytes` then "\r\n".
pub fn line(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(bytes);
    out.extend_from_slice(CRLF);
}

/// `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n`.
pub fn value(out: &mut Vec<u8>, key: &[u8], flags: u32, data: &[u8], cas: Option<u64>) {
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    out.push(b' ');
    write_u64(out, u64::from(flags));
    out.push(b' ');
    write_u64(out, data.len() as u64);
    if let Some(cas) = cas {
        out.push(b' ');
        write_u64(out, cas);
    }
    out.extend_from_slice(CRLF);
    out.extend_from_slice(data);
    out.extend_from_slice(CRLF);
}

/// The bytes `value` writes for these arguments (with a `len`-byte value): what a reply with a
/// bound checks before the value is copied.
pub fn value_bytes(key: &[u8], flags: u32, len: usize, cas: Option<u64>) -> usize {
    let digits = |n: u64| n.checked_ilog10().unwrap_or(0) as usize + 1;
    let cas = cas.map_or(0, |cas| 1 + digits(cas));
    "VALUE ".len() + key.len() + 1 + digits(u64::from(flags)) + 1 + digits(len as u64) + cas + 2 + len + 2
}

/// The fixed one-line text replies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// `END`.
    End,
    /// `STORED`.
    Stored,
    /// `NOT_STORED`.
    NotStored,
    /// `EXISTS`.
    Exists,
    /// `NOT_FOUND`.
    NotFound,
    /// `DELETED`.
    Deleted,
    /// `TOUCHED`.
    Touched,
    /// `OK`.
    Ok,
    /// `RESET`.
    Reset,
}

impl Status {
    /// The reply line without its "\r\n".
    pub fn text(self) -> &'static [u8] {
        match self {
            Status::End => b"END",
            Status::Stored => b"STORED",
            Status::NotStored => b"NOT_STORED",
            Status::Exists => b"EXISTS",
            Status::NotFound => b"NOT_FOUND",
            Status::Deleted => b"DELETED",
            Status::Touched => b"TOUCHED",
            Status::Ok => b"OK",
            Status::Reset => b"RESET",
        }
    }
}

/// One of the fixed replies.
pub fn status(out: &mut Vec<u8>, status: Status) {
    line(out, status.text());
}

/// An incr/decr result: the number alone on a line.
pub fn number(out: &mut Vec<u8>, value: u64) {
    write_u64(out, value);
    out.extend_from_slice(CRLF);
}

/// `VERSION <version>`.
pub fn version(out: &mut Vec<u8>, version: &[u8]) {
    out.extend_from_slice(b"VERSION ");
    line(out, version);
}

/// `STAT <name> <value>`.
pub fn stat(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(b"STAT ");
    out.extend_from_slice(name);
    out.push(b' ');
    line(out, value);
}

/// A decoder's error reply (text or binary); nothing for `ErrorReply::Nothing`.
pub fn error(out: &mut Vec<u8>, reply: &ErrorReply) {
    match reply {
        ErrorReply::Error => line(out, b"ERROR"),
        ErrorReply::Client(message) => {
            out.extend_from_slice(b"CLIENT_ERROR ");
            line(out, message.as_bytes());
        }
        ErrorReply::Server(message) => {
            out.extend_from_slice(b"SERVER_ERROR ");
            line(out, message.as_bytes());
        }
        ErrorReply::Binary { status, info } => binary::write_error(out, info, *status),
        ErrorReply::Nothing => {}
    }
}

/// Meta reply codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaCode {
    /// Success without a value.
    Hd,
    /// Success with a value (`VA <len>`).
    Va,
    /// Miss (mg).
    En,
    /// Not stored.
    Ns,
    /// CAS mismatch.
    Ex,
    /// Not found.
    Nf,
    /// mn.
    Mn,
}

impl MetaCode {
    fn text(self) -> &'static [u8] {
        match self {
            MetaCode::Hd => b"HD",
            MetaCode::Va => b"VA",
            MetaCode::En => b"EN",
            MetaCode::Ns => b"NS",
            MetaCode::Ex => b"EX",
            MetaCode::Nf => b"NF",
            MetaCode::Mn => b"MN",
        }
    }
}

/// What a meta reply may return through flags; None where the reply has nothing to say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaReturn<'a> {
    /// The key's bytes (`k`; base64-encoded again when the request had `b`).
    pub key: Option<&'a [u8]>,
    /// Value size (`s`).
    pub size: Option<usize>,
    /// Seconds to live, -1 for never (`t`).
    pub ttl: Option<i64>,
    /// CAS (`c`).
    pub cas: Option<u64>,
    /// Client flags (`f`).
    pub client_flags: Option<u32>,
    /// Seconds since last access (`l`).
    pub last_access: Option<u32>,
    /// Fetched before (`h`).
    pub fetched: Option<bool>,
    /// Trailing state flags memcached appends after the requested ones: won (`W`), stale
    /// (`X`), token already sent (`Z`).
    pub won: bool,
    /// The item is stale (invalidated): the `X` flag.
    pub stale: bool,
    /// This client got the recache token: the `W` flag.
    pub token_sent: bool,
    /// tierkv's `mx`: the counter's value before the operation (`p`), and whether it is an i64.
    pub previous: Option<(u64, bool)>,
}

/// A meta reply line: the code, `VA`'s length, then for each request flag in request order the
/// returned flag if `letters` allows it and `info` has it, then the state flags; then the value
/// block if `value` is given (with `MetaCode::Va`).
pub fn meta(
    out: &mut Vec<u8>,
    code: MetaCode,
    flags: &MetaFlags<'_>,
    letters: &[u8],
    info: &MetaReturn<'_>,
    value: Option<&[u8]>,
) {
    out.extend_from_slice(code.text());
    if let (MetaCode::Va, Some(value)) = (code, value) {
        out.push(b' ');
        write_u64(out, value.len() as u64);
    }
    for token in flags.iter() {
        let letter = token[0];
        if !letters.contains(&letter) {
            continue;
        }
        match letter {
            b'O' => {
                out.push(b' ');
                out.extend_from_slice(token);
            }
            b'k' => {
                if let Some(key) = info.key {
                    out.extend_from_slice(b" k");
                    if flags.base64() {
                        crate::base64::encode(key, out);
                        out.extend_from_slice(b" b");
                    } else {
                        out.extend_from_slice(key);
                    }
                }
            }
            b's' => put_number(out, b's', info.size.map(|s| s as i64)),
            b't' => put_number(out, b't', info.ttl),
            b'c' => {
                if let Some(cas) = info.cas {
                    out.extend_from_slice(b" c");
                    write_u64(out, cas);
                }
            }
            b'f' => put_number(out, b'f', info.client_flags.map(i64::from)),
            b'l' => put_number(out, b'l', info.last_access.map(i64::from)),
            b'h' => put_number(out, b'h', info.fetched.map(i64::from)),
            b'p' => {
                if let Some((value, signed)) = info.previous {
                    out.extend_from_slice(b" p");
                    crate::atomic::write_number(out, value, signed);
                }
            }
            _ => {}
        }
    }
    for (set, letter) in [(info.token_sent, b'Z'), (info.stale, b'X'), (info.won, b'W')] {
        if set {
            out.push(b' ');
            out.push(letter);
        }
    }
    out.extend_from_slice(CRLF);
    if let (MetaCode::Va, Some(value)) = (code, value) {
        out.extend_from_slice(value);
        out.extend_from_slice(CRLF);
    }
}

fn put_number(out: &mut Vec<u8>, letter: u8, value: Option<i64>) {
    if let Some(value) = value {
        out.push(b' ');
        out.push(letter);
        write_i64(out, value);
    }
}

/// The flags each meta command returns (memcached 1.6.18).
pub mod returned {
    /// mg hit.
    pub const GET_HIT: &[u8] = b"OkstcflhO";
    /// mg miss (EN).
    pub const GET_MISS: &[u8] = b"Ok";
    /// ms.
    pub const SET: &[u8] = b"Okc";
    /// md.
    pub const DELETE: &[u8] = b"Ok";
    /// ma.
    pub const ARITH: &[u8] = b"Oktc";
    /// tierkv's `mx` (docs/protocol-extensions.md).
    pub const ATOMIC: &[u8] = b"Okp";
    /// tierkv's `mv`.
    pub const VECTOR: &[u8] = b"Ok";
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::parse_flags;

    #[test]
    fn value_bytes_is_what_value_writes() {
        for (key, flags, len, cas) in [
            (&b"k"[..], 0, 0, None),
            (b"key", 9, 10, Some(0)),
            (b"big", u32::MAX, 999_999, Some(u64::MAX)),
            (b"x", 10, 100, Some(99)),
        ] {
            let mut out = Vec::new();
            value(&mut out, key, flags, &vec![b'v'; len], cas);
            assert_eq!(value_bytes(key, flags, len, cas), out.len(), "{key:?} {flags} {len} {cas:?}");
        }
    }

    #[test]
    fn text_replies_are_exact() {
        let mut out = Vec::new();
        value(&mut out, b"k", 5, b"hi", None);
        value(&mut out, b"k", 0, b"", Some(77));
        status(&mut out, Status::End);
        number(&mut out, 18446744073709551615);
        version(&mut out, b"1.6.18");
        stat(&mut out, b"pid", b"42");
        error(&mut out, &ErrorReply::Client("bad data chunk"));
        error(&mut out, &ErrorReply::Server("object too large for cache"));
        error(&mut out, &ErrorReply::Error);
        assert_eq!(
            out,
            b"VALUE k 5 2\r\nhi\r\nVALUE k 0 0 77\r\n\r\nEND\r\n18446744073709551615\r\nVERSION 1.6.18\r\n\
STAT pid 42\r\nCLIENT_ERROR bad data chunk\r\nSERVER_ERROR object too large for cache\r\nERROR\r\n"
        );
    }

    #[test]
    fn meta_replies_return_flags_in_request_order() {
        let flags = parse_flags(b"v k t c f s Oabc q").unwrap();
        let info = MetaReturn {
            key: Some(b"foo"),
            size: Some(2),
            ttl: Some(-1),
            cas: Some(9),
            client_flags: Some(3),
            ..MetaReturn::default()
        };
        let mut out = Vec::new();
        meta(&mut out, MetaCode::Va, &flags, returned::GET_HIT, &info, Some(b"hi"));
        assert_eq!(out, b"VA 2 kfoo t-1 c9 f3 s2 Oabc\r\nhi\r\n");
        out.clear();
        meta(&mut out, MetaCode::En, &flags, returned::GET_MISS, &info, None);
        assert_eq!(out, b"EN kfoo Oabc\r\n");
        out.clear();
        let flags = parse_flags(b"b k").unwrap();
        meta(&mut out, MetaCode::Hd, &flags, returned::SET, &MetaReturn { key: Some(b"foo"), ..info }, None);
        assert_eq!(out, b"HD kZm9v b\r\n");
        out.clear();
        meta(&mut out, MetaCode::Mn, &MetaFlags::default(), b"", &MetaReturn::default(), None);
        assert_eq!(out, b"MN\r\n");
    }
}
