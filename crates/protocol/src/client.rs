//! The client side: encode any `Request` in its protocol (text, meta or binary), and decode
//! replies in place. tierkv-bench and the client crate use these; the tests use them to
//! round-trip every request through the server-side decoders.

use crate::binary::{self, Header, HEADER_BYTES, REQUEST_MAGIC, RESPONSE_MAGIC};
use crate::number::{strtoull, write_i64, write_u64};
use crate::reply::{MetaCode, Status};
use crate::{BinaryRequestInfo, Command, Limits, ReplyStyle, Request, StoreMode};

const CRLF: &[u8] = b"\r\n";

/// Appends `request` to `out` in the protocol its style names.
pub fn encode_request(out: &mut Vec<u8>, request: &Request<'_>) {
    match &request.style {
        ReplyStyle::Text { noreply } => encode_text(out, &request.command, *noreply),
        ReplyStyle::Meta(flags) => encode_meta(out, &request.command, flags.tokens),
        ReplyStyle::Binary(info) => encode_binary(out, &request.command, info),
    }
}

fn push_noreply(out: &mut Vec<u8>, noreply: bool) {
    if noreply {
        out.extend_from_slice(b" noreply");
    }
}

fn encode_text(out: &mut Vec<u8>, command: &Command<'_>, noreply: bool) {
    match command {
        Command::Get { keys, return_cas, touch, .. } => {
            out.extend_from_slice(match (return_cas, touch.is_some()) {
                (false, false) => &b"get"[..],
                (true, false) => b"gets",
                (false, true) => b"gat",
                (true, true) => b"gats",
            });
            if let Some(exptime) = touch {
                out.push(b' ');
                write_i64(out, *exptime);
            }
            for key in keys.iter() {
                out.push(b' ');
                out.extend_from_slice(key);
            }
        }
        Command::Store { .. } => encode_store(out, command, noreply),
        Command::Delete { key, .. } => {
            out.extend_from_slice(b"delete ");
            out.extend_from_slice(key.raw);
            push_noreply(out, noreply);
        }
        Command::Arith { key, delta, decrement, .. } => {
            out.extend_from_slice(if *decrement { b"decr " } else { b"incr " });
            out.extend_from_slice(key.raw);
            out.push(b' ');
            write_u64(out, *delta);
            push_noreply(out, noreply);
        }
        Command::Atomic { key, code, signed, operand, operand2 } => {
            crate::atomic::write_text_request(out, key.raw, *code, *signed, *operand, *operand2);
            push_noreply(out, noreply);
        }
        Command::Vector { key, call, .. } => {
            // The line and its data block, CRLF included: nothing more to add.
            return crate::vector::write_request(out, key.raw, call, noreply);
        }
        Command::Touch { key, exptime } => {
            out.extend_from_slice(b"touch ");
            out.extend_from_slice(key.raw);
            out.push(b' ');
            write_i64(out, *exptime);
            push_noreply(out, noreply);
        }
        Command::FlushAll { delay } => {
            out.extend_from_slice(b"flush_all");
            if *delay != 0 {
                out.push(b' ');
                write_i64(out, *delay);
            }
            push_noreply(out, noreply);
        }
        Command::Stats { args } => {
            out.extend_from_slice(b"stats");
            if !args.is_empty() {
                out.push(b' ');
                out.extend_from_slice(args);
            }
        }
        Command::Version => out.extend_from_slice(b"version"),
        Command::Quit => out.extend_from_slice(b"quit"),
        Command::Verbosity { level } => {
            out.extend_from_slice(b"verbosity ");
            write_u64(out, u64::from(*level));
            push_noreply(out, noreply);
        }
        Command::Noop => out.extend_from_slice(b"mn"),
        Command::MetaDebug { key } => {
            out.extend_from_slice(b"me ");
            out.extend_from_slice(key.raw);
        }
        Command::Admin { line } => out.extend_from_slice(line),
        Command::Sasl { .. } => {}
    }
    out.extend_from_slice(CRLF);
}

/// A text storage command's line and data block (its last CRLF is the caller's).
fn encode_store(out: &mut Vec<u8>, command: &Command<'_>, noreply: bool) {
    let Command::Store { mode, key, flags, exptime, value, cas } = command else { return };
    out.extend_from_slice(match mode {
        StoreMode::Set => &b"set "[..],
        StoreMode::Add => b"add ",
        StoreMode::Replace => b"replace ",
        StoreMode::Append => b"append ",
        StoreMode::Prepend => b"prepend ",
        StoreMode::Cas => b"cas ",
    });
    out.extend_from_slice(key.raw);
    out.push(b' ');
    write_u64(out, u64::from(*flags));
    out.push(b' ');
    write_i64(out, *exptime);
    out.push(b' ');
    write_u64(out, value.len() as u64);
    if *mode == StoreMode::Cas {
        out.push(b' ');
        write_u64(out, *cas);
    }
    push_noreply(out, noreply);
    out.extend_from_slice(CRLF);
    out.extend_from_slice(value);
}

fn encode_meta(out: &mut Vec<u8>, command: &Command<'_>, flag_tokens: &[u8]) {
    // tierkv's own meta commands put their arguments before the flags.
    match *command {
        Command::Atomic { key, code, signed, operand, operand2 } => {
            crate::atomic::write_meta_request(out, key.raw, (code, signed, operand, operand2), flag_tokens);
            return out.extend_from_slice(CRLF);
        }
        Command::Vector { key, call, .. } => {
            return crate::vector::write_meta_request(out, key.raw, &call, flag_tokens)
        }
        _ => {}
    }
    let (name, key, value): (&[u8], &[u8], Option<&[u8]>) = match command {
        Command::Get { keys, .. } => (b"mg", keys.iter().next().unwrap_or(b""), None),
        Command::Store { key, value, .. } => (b"ms", key.raw, Some(*value)),
        Command::Delete { key, .. } => (b"md", key.raw, None),
        Command::Arith { key, .. } => (b"ma", key.raw, None),
        Command::MetaDebug { key } => (b"me", key.raw, None),
        _ => (b"mn", b"", None),
    };
    out.extend_from_slice(name);
    if !key.is_empty() {
        out.push(b' ');
        out.extend_from_slice(key);
    }
    if let Some(value) = value {
        out.push(b' ');
        write_u64(out, value.len() as u64);
    }
    if let Command::MetaDebug { key } = command {
        if key.base64 {
            out.extend_from_slice(b" b");
        }
    } else if !flag_tokens.is_empty() {
        out.push(b' ');
        out.extend_from_slice(flag_tokens);
    }
    out.extend_from_slice(CRLF);
    if let Some(value) = value {
        out.extend_from_slice(value);
        out.extend_from_slice(CRLF);
    }
}

fn encode_binary(out: &mut Vec<u8>, command: &Command<'_>, info: &BinaryRequestInfo) {
    let mut extras = [0u8; 20];
    let (extras_len, key, value, cas): (usize, &[u8], &[u8], u64) = match command {
        Command::Get { keys, touch, .. } => {
            let key = keys.iter().next().unwrap_or(b"");
            match touch {
                Some(exptime) => {
                    extras[..4].copy_from_slice(&(*exptime as u32).to_be_bytes());
                    (4, key, b"", 0)
                }
                None => (0, key, b"", 0),
            }
        }
        Command::Store { mode, key, flags, exptime, value, cas } => {
            if matches!(mode, StoreMode::Append | StoreMode::Prepend) {
                (0, key.raw, value, *cas)
            } else {
                extras[..4].copy_from_slice(&flags.to_be_bytes());
                extras[4..8].copy_from_slice(&(*exptime as u32).to_be_bytes());
                (8, key.raw, value, *cas)
            }
        }
        Command::Delete { key, cas } => (0, key.raw, b"", *cas),
        Command::Arith { key, delta, initial, cas, .. } => {
            extras[..8].copy_from_slice(&delta.to_be_bytes());
            let (initial_value, expiration) = match initial {
                Some(initial) => (initial.value, initial.exptime as u32),
                None => (0, u32::MAX),
            };
            extras[8..16].copy_from_slice(&initial_value.to_be_bytes());
            extras[16..20].copy_from_slice(&expiration.to_be_bytes());
            (20, key.raw, b"", *cas)
        }
        Command::Touch { key, exptime } => {
            extras[..4].copy_from_slice(&(*exptime as u32).to_be_bytes());
            (4, key.raw, b"", 0)
        }
        Command::Atomic { key, code, signed, operand, operand2 } => {
            extras[0] = crate::atomic::binary_op(*code);
            extras[1] = u8::from(*signed);
            extras[2..10].copy_from_slice(&operand.to_be_bytes());
            extras[10..18].copy_from_slice(&operand2.to_be_bytes());
            (18, key.raw, b"", 0)
        }
        Command::FlushAll { delay } if *delay != 0 => {
            extras[..4].copy_from_slice(&(*delay as u32).to_be_bytes());
            (4, b"", b"", 0)
        }
        Command::Stats { args } => (0, *args, b"", 0),
        Command::Sasl { key, value, .. } => (0, *key, *value, 0),
        _ => (0, b"", b"", 0),
    };
    let header = Header {
        magic: REQUEST_MAGIC,
        opcode: info.opcode,
        key_len: key.len() as u16,
        extras_len: extras_len as u8,
        data_type: 0,
        status_or_vbucket: 0,
        body_len: (extras_len + key.len() + value.len()) as u32,
        opaque: info.opaque,
        cas,
    };
    header.write(out);
    out.extend_from_slice(&extras[..extras_len]);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

pub use crate::binary::request_info as binary_info;

/// A reply as the client sees it, borrowing the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply<'a> {
    /// `VALUE <key> <flags> <bytes> [<cas>]` and its data block.
    Value {
        /// The key.
        key: &'a [u8],
        /// Client flags.
        flags: u32,
        /// The value.
        data: &'a [u8],
        /// Its CAS (gets).
        cas: Option<u64>,
    },
    /// END, STORED, NOT_STORED, EXISTS, NOT_FOUND, DELETED, TOUCHED, OK, RESET.
    Status(Status),
    /// An incr/decr result.
    Number(u64),
    /// `VERSION <version>`.
    Version(&'a [u8]),
    /// `STAT <name> <value>`.
    Stat {
        /// The statistic.
        name: &'a [u8],
        /// Its value.
        value: &'a [u8],
    },
    /// `ERROR`.
    Error,
    /// `CLIENT_ERROR <message>`.
    ClientError(&'a [u8]),
    /// `SERVER_ERROR <message>`.
    ServerError(&'a [u8]),
    /// A meta reply: code, returned flags as sent, value block for VA.
    Meta {
        /// The return code (HD, VA, EN, ...).
        code: MetaCode,
        /// The returned flags.
        flags: &'a [u8],
        /// The value (VA).
        value: Option<&'a [u8]>,
    },
    /// A binary response.
    Binary {
        /// The header.
        header: Header,
        /// Its extras.
        extras: &'a [u8],
        /// Its key.
        key: &'a [u8],
        /// Its value.
        value: &'a [u8],
    },
}

/// What a reply decoder made of the front of its input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyDecoded<'a> {
    /// A whole reply.
    Reply {
        /// The reply.
        reply: Reply<'a>,
        /// The bytes it took.
        consumed: usize,
    },
    /// At least `needed` bytes in all are required (0 when unknown yet).
    Incomplete {
        /// The bytes the reply needs at least (0: unknown).
        needed: usize,
    },
    /// Not a reply memcached sends; the connection cannot continue.
    Invalid(&'static str),
}

/// Decodes the reply at the front of `input` (binary if it starts with the response magic).
pub fn decode_reply<'a>(input: &'a [u8], limits: &Limits) -> ReplyDecoded<'a> {
    match input.first() {
        None => ReplyDecoded::Incomplete { needed: 1 },
        Some(&RESPONSE_MAGIC) => decode_binary_reply(input, limits),
        Some(_) => decode_text_reply(input, limits),
    }
}

fn decode_binary_reply<'a>(input: &'a [u8], limits: &Limits) -> ReplyDecoded<'a> {
    let Some(bytes) = input.first_chunk::<HEADER_BYTES>() else {
        return ReplyDecoded::Incomplete { needed: HEADER_BYTES };
    };
    let header = Header::read(bytes);
    let body = header.body_len as usize;
    let (key_len, extras_len) = (usize::from(header.key_len), usize::from(header.extras_len));
    if key_len + extras_len > body || body > limits.max_value_bytes + key_len + extras_len {
        return ReplyDecoded::Invalid("bad binary response lengths");
    }
    let total = HEADER_BYTES + body;
    if input.len() < total {
        return ReplyDecoded::Incomplete { needed: total };
    }
    let extras = &input[HEADER_BYTES..HEADER_BYTES + extras_len];
    let key = &input[HEADER_BYTES + extras_len..HEADER_BYTES + extras_len + key_len];
    let value = &input[HEADER_BYTES + extras_len + key_len..total];
    ReplyDecoded::Reply { reply: Reply::Binary { header, extras, key, value }, consumed: total }
}

fn decode_text_reply<'a>(input: &'a [u8], limits: &Limits) -> ReplyDecoded<'a> {
    let Some(newline) = memchr::memchr(b'\n', input) else {
        if input.len() > limits.max_line_bytes {
            return ReplyDecoded::Invalid("reply line too long");
        }
        return ReplyDecoded::Incomplete { needed: 0 };
    };
    if newline == 0 || input[newline - 1] != b'\r' {
        return ReplyDecoded::Invalid("reply line not terminated by \\r\\n");
    }
    let line = &input[..newline - 1];
    let consumed = newline + 1;
    let (word, rest) = match memchr::memchr(b' ', line) {
        Some(space) => (&line[..space], &line[space + 1..]),
        None => (line, &line[line.len()..]),
    };
    let simple = |reply| ReplyDecoded::Reply { reply, consumed };
    match word {
        b"VALUE" => value_reply(input, rest, consumed, limits),
        b"VA" => meta_value_reply(input, rest, consumed, limits),
        b"END" => simple(Reply::Status(Status::End)),
        b"STORED" => simple(Reply::Status(Status::Stored)),
        b"NOT_STORED" => simple(Reply::Status(Status::NotStored)),
        b"EXISTS" => simple(Reply::Status(Status::Exists)),
        b"NOT_FOUND" => simple(Reply::Status(Status::NotFound)),
        b"DELETED" => simple(Reply::Status(Status::Deleted)),
        b"TOUCHED" => simple(Reply::Status(Status::Touched)),
        b"OK" => simple(Reply::Status(Status::Ok)),
        b"RESET" => simple(Reply::Status(Status::Reset)),
        b"ERROR" => simple(Reply::Error),
        b"CLIENT_ERROR" => simple(Reply::ClientError(rest)),
        b"SERVER_ERROR" => simple(Reply::ServerError(rest)),
        b"VERSION" => simple(Reply::Version(rest)),
        b"STAT" => {
            let (name, value) = match memchr::memchr(b' ', rest) {
                Some(space) => (&rest[..space], &rest[space + 1..]),
                None => (rest, &rest[rest.len()..]),
            };
            simple(Reply::Stat { name, value })
        }
        b"HD" | b"EN" | b"NS" | b"EX" | b"NF" | b"MN" => {
            let code = match word {
                b"HD" => MetaCode::Hd,
                b"EN" => MetaCode::En,
                b"NS" => MetaCode::Ns,
                b"EX" => MetaCode::Ex,
                b"NF" => MetaCode::Nf,
                _ => MetaCode::Mn,
            };
            simple(Reply::Meta { code, flags: rest, value: None })
        }
        _ => match strtoull(line) {
            Some(number) => simple(Reply::Number(number)),
            None => ReplyDecoded::Invalid("unknown reply"),
        },
    }
}

/// A data block of `length` bytes plus "\r\n" starting at `start`.
fn data_block<'a>(input: &'a [u8], start: usize, length: usize, limits: &Limits) -> Result<&'a [u8], ReplyDecoded<'a>> {
    if length > limits.max_value_bytes {
        return Err(ReplyDecoded::Invalid("value larger than the limit"));
    }
    let end = start + length;
    if input.len() < end + 2 {
        return Err(ReplyDecoded::Incomplete { needed: end + 2 });
    }
    if &input[end..end + 2] != CRLF {
        return Err(ReplyDecoded::Invalid("data block not terminated by \\r\\n"));
    }
    Ok(&input[start..end])
}

fn value_reply<'a>(input: &'a [u8], rest: &'a [u8], line_end: usize, limits: &Limits) -> ReplyDecoded<'a> {
    let mut fields = rest.split(|&b| b == b' ');
    let (Some(key), Some(flags), Some(length)) = (fields.next(), fields.next(), fields.next()) else {
        return ReplyDecoded::Invalid("short VALUE line");
    };
    let cas = match fields.next() {
        Some(token) => match strtoull(token) {
            Some(cas) => Some(cas),
            None => return ReplyDecoded::Invalid("bad VALUE cas"),
        },
        None => None,
    };
    let (Some(flags), Some(length)) = (strtoull(flags), strtoull(length)) else {
        return ReplyDecoded::Invalid("bad VALUE numbers");
    };
    match data_block(input, line_end, length as usize, limits) {
        Ok(data) => {
            let reply = Reply::Value { key, flags: flags as u32, data, cas };
            ReplyDecoded::Reply { reply, consumed: line_end + data.len() + 2 }
        }
        Err(decoded) => decoded,
    }
}

fn meta_value_reply<'a>(input: &'a [u8], rest: &'a [u8], line_end: usize, limits: &Limits) -> ReplyDecoded<'a> {
    let (length, flags) = match memchr::memchr(b' ', rest) {
        Some(space) => (&rest[..space], &rest[space + 1..]),
        None => (rest, &rest[rest.len()..]),
    };
    let Some(length) = strtoull(length) else {
        return ReplyDecoded::Invalid("bad VA length");
    };
    match data_block(input, line_end, length as usize, limits) {
        Ok(data) => {
            let reply = Reply::Meta { code: MetaCode::Va, flags, value: Some(data) };
            ReplyDecoded::Reply { reply, consumed: line_end + data.len() + 2 }
        }
        Err(decoded) => decoded,
    }
}

/// Convenience encoders for the common requests, for load generators.
pub mod quick {
    use crate::binary::{self, opcode};
    use crate::number::{write_i64, write_u64};

    use super::CRLF;

    /// `get <key>\r\n`.
    pub fn get(out: &mut Vec<u8>, key: &[u8]) {
        out.extend_from_slice(b"get ");
        out.extend_from_slice(key);
        out.extend_from_slice(CRLF);
    }

    /// `set <key> <flags> <exptime> <len>\r\n<value>\r\n`.
    pub fn set(out: &mut Vec<u8>, key: &[u8], flags: u32, exptime: i64, value: &[u8]) {
        out.extend_from_slice(b"set ");
        out.extend_from_slice(key);
        out.push(b' ');
        write_u64(out, u64::from(flags));
        out.push(b' ');
        write_i64(out, exptime);
        out.push(b' ');
        write_u64(out, value.len() as u64);
        out.extend_from_slice(CRLF);
        out.extend_from_slice(value);
        out.extend_from_slice(CRLF);
    }

    /// A binary GETK for `key`.
    pub fn binary_getk(out: &mut Vec<u8>, key: &[u8], opaque: u32) {
        binary::write_request(out, opcode::GETK, opaque, 0, &[], key, &[]);
    }
}

impl binary::Header {
    /// Whether this is a response with status SUCCESS.
    pub fn is_success(&self) -> bool {
        self.magic == RESPONSE_MAGIC && self.status_or_vbucket == binary::status::SUCCESS
    }
}
