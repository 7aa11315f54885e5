//! tierkv-protocol: memcached's text, meta and binary protocols and the UDP frame header, as pure
//! functions over byte slices, for both sides of a connection (server: decode requests, encode
//! replies; client: encode requests, decode replies). Text, meta and binary requests decode into
//! one set of types (`Request`), so the server handles each command once.
//!
//! It must never do I/O, touch the engine, spawn threads, or allocate per request on the common
//! path; every input size is bounded by `Limits`, and oversized input becomes an error that says
//! how many bytes to skip.

pub mod base64;
pub mod binary;
pub mod client;
pub mod meta;
mod number;
pub mod reply;
mod request;
pub mod text;
pub mod udp;

pub use number::{strtol32, strtoul32, strtoull, write_i64, write_u64};
pub use request::*;

/// Bounds on what a peer may send; every decoder enforces them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest key (memcached: 250).
    pub max_key_bytes: usize,
    /// Longest value accepted; larger ones are refused and skipped.
    pub max_value_bytes: usize,
    /// Longest command line still waiting for its newline (memcached: 2048), except retrieval
    /// lines.
    pub max_line_bytes: usize,
    /// Most keys in one get/gets/gat/gats.
    pub max_keys_per_get: usize,
    /// Most tokens after the key of a meta command (memcached: 20 tokens in all).
    pub max_meta_flags: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_key_bytes: 250,
            max_value_bytes: 1024 * 1024,
            max_line_bytes: 2048,
            max_keys_per_get: 1024,
            max_meta_flags: 17,
        }
    }
}

impl Limits {
    /// Longest retrieval line: a command, an exptime and `max_keys_per_get` keys.
    pub fn max_retrieval_line_bytes(&self) -> usize {
        16 + self.max_keys_per_get * (self.max_key_bytes + 1) + 2
    }
}

/// What a decoder made of the front of its input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A complete request and the bytes it used.
    Request { request: Request<'a>, consumed: usize },
    /// The input ends inside a request; at least `needed` bytes in all are required (0 when
    /// the decoder cannot tell yet).
    Incomplete { needed: usize },
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
    Binary { status: u16, info: BinaryRequestInfo },
    /// No reply at all (the connection is closed).
    Nothing,
}

impl ProtocolError {
    pub(crate) fn new(reply: ErrorReply, skip: usize) -> ProtocolError {
        ProtocolError { reply, skip, close: false, noreply: false }
    }

    pub(crate) fn closing(reply: ErrorReply, skip: usize) -> ProtocolError {
        ProtocolError { reply, skip, close: true, noreply: false }
    }
}

/// Decodes the request at the front of `input`, whichever protocol it uses (a first byte of
/// 0x80 is binary, anything else text or meta).
pub fn decode_request<'a>(input: &'a [u8], limits: &Limits) -> Decoded<'a> {
    match input.first() {
        None => Decoded::Incomplete { needed: 1 },
        Some(&binary::REQUEST_MAGIC) => binary::decode_request(input, limits),
        Some(_) => text::decode_request(input, limits),
    }
}
