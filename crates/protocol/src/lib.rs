//! tierkv-protocol: memcached's text, meta and binary protocols and the UDP frame header, as pure
//! functions over byte slices, for both sides of a connection (server: decode requests, encode
//! replies; client: encode requests, decode replies). Text, meta and binary requests decode into
//! one set of types (`Request`), so the server handles each command once.
//!
//! It must never do I/O, touch the engine, spawn threads, or allocate per request on the common
//! path; every input size is bounded by `Limits`, and oversized input becomes an error that says
//! how many bytes to skip.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod atomic;
pub mod auth;
pub mod base64;
pub mod binary;
pub mod client;
pub mod meta;
mod number;
pub mod reply;
mod request;
pub mod text;
pub mod udp;
pub mod vector;

pub use number::{strtol32, strtoul32, strtoull, write_i64, write_u64};
pub use request::*;

/// Bounds on what a peer may send; every decoder enforces them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest key (memcached: 250).
    pub max_key_bytes: usize,
    /// Largest item (memcached's `-I`): a store whose key, value and memcached's per-item
    /// overhead (`MEMCACHED_ITEM_OVERHEAD_BYTES`) exceed it is refused and its value skipped.
    pub max_value_bytes: usize,
    /// Longest command line still waiting for its newline (memcached: 2048), except `get` and
    /// `gets` lines, which may be of any length (the server takes their keys as they arrive).
    pub max_line_bytes: usize,
    /// Most tokens after the key of a meta command (memcached: 20 tokens in all).
    pub max_meta_flags: usize,
    /// Binary requests are taken (memcached turns the binary protocol off with `-Y`: a
    /// request starting with its magic byte is then read as a text line).
    pub binary: bool,
    /// Text requests are taken (memcached's `-S` serves binary only: a text request closes
    /// the connection without a reply).
    pub text: bool,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_key_bytes: 250,
            max_value_bytes: 1024 * 1024,
            max_line_bytes: 2048,
            max_meta_flags: 17,
            binary: true,
            text: true,
        }
    }
}

/// What memcached 1.6 counts against `-I` beyond key and value: its 48-byte item header, the
/// 8-byte CAS, the key's NUL and the value's CRLF (4 bytes more when the flags are not 0).
pub const MEMCACHED_ITEM_OVERHEAD_BYTES: usize = 48 + 8 + 1 + 2;

impl Limits {
    /// Whether memcached would find room for an item of these sizes under the same `-I`
    /// (its `item_size_ok`), so both refuse a store at the same size.
    pub fn item_fits(&self, key_bytes: usize, flags: u32, value_bytes: usize) -> bool {
        let suffix = if flags == 0 { 0 } else { 4 };
        key_bytes.saturating_add(value_bytes).saturating_add(MEMCACHED_ITEM_OVERHEAD_BYTES + suffix)
            <= self.max_value_bytes
    }
}

/// What a decoder made of the front of its input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A complete request and the bytes it used.
    Request {
        /// The request.
        request: Request<'a>,
        /// The bytes it took.
        consumed: usize,
    },
    /// The input ends inside a request; at least `needed` bytes in all are required (0 when
    /// the decoder cannot tell yet).
    Incomplete {
        /// The request's whole size when known (0: not yet).
        needed: usize,
    },
    /// The request is invalid; see the error for the reply and how much to skip.
    Error(ProtocolError),
}

/// An invalid request: the reply memcached gives, and how to carry on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProtocolError {
    /// What to answer.
    pub reply: ErrorReply,
    /// Bytes to discard from the front of the input, possibly more than it holds yet (the rest
    /// is discarded as it arrives, memcached's "swallow").
    pub skip: usize,
    /// Close the connection after the reply.
    pub close: bool,
    /// The request carried `noreply` (memcached then suppresses even most error replies).
    pub noreply: bool,
    /// A set refused as too large: the key whose old item must go (memcached unlinks it, so a
    /// client told its update failed never reads the value it meant to replace).
    pub unlink: Option<KeySpan>,
}

/// Where a key lies in the input a decoder was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeySpan {
    /// Offset of the key's first byte from the start of the input.
    pub start: usize,
    /// Its length.
    pub len: usize,
    /// The key is base64 (meta `b`).
    pub base64: bool,
}

impl KeySpan {
    /// The span of `key`, a slice of `input`.
    pub(crate) fn of(input: &[u8], key: &[u8], base64: bool) -> KeySpan {
        let start = key.as_ptr() as usize - input.as_ptr() as usize;
        debug_assert!(start + key.len() <= input.len(), "the key lies in the input");
        KeySpan { start, len: key.len(), base64 }
    }

    /// The key in `input` (the same input the span was taken from, or one that starts alike).
    pub fn key<'a>(&self, input: &'a [u8]) -> Key<'a> {
        Key { raw: &input[self.start..self.start + self.len], base64: self.base64 }
    }
}

/// The error reply memcached sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorReply {
    /// `ERROR` (unknown command).
    Error,
    /// `CLIENT_ERROR <message>`.
    Client(&'static str),
    /// `SERVER_ERROR <message>`.
    Server(&'static str),
    /// A binary error status for the request described.
    Binary {
        /// The status to answer with.
        status: u16,
        /// The request's header.
        info: BinaryRequestInfo,
    },
    /// No reply at all (the connection is closed).
    Nothing,
}

impl ProtocolError {
    pub(crate) fn new(reply: ErrorReply, skip: usize) -> ProtocolError {
        ProtocolError { reply, skip, close: false, noreply: false, unlink: None }
    }

    pub(crate) fn closing(reply: ErrorReply, skip: usize) -> ProtocolError {
        ProtocolError { reply, skip, close: true, noreply: false, unlink: None }
    }
}

/// Decodes the request at the front of `input`, whichever protocol it uses (a first byte of
/// 0x80 is binary, anything else text or meta).
pub fn decode_request<'a>(input: &'a [u8], limits: &Limits) -> Decoded<'a> {
    match input.first() {
        None => Decoded::Incomplete { needed: 1 },
        Some(&binary::REQUEST_MAGIC) if limits.binary => binary::decode_request(input, limits),
        Some(_) if limits.text => text::decode_request(input, limits),
        // memcached reads a whole binary header before it finds the magic byte wrong.
        Some(_) if input.len() < binary::HEADER_BYTES => Decoded::Incomplete { needed: binary::HEADER_BYTES },
        Some(_) => Decoded::Error(ProtocolError::closing(ErrorReply::Nothing, input.len())),
    }
}
