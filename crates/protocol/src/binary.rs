//! memcached's binary protocol: the 24-byte header, every opcode memcached answers, and replies.
//!
//! ```text
//!  byte  0        1        2-3       4        5         6-7              8-11       12-15    16-23
//!      +--------+--------+---------+--------+---------+----------------+----------+--------+-------+
//!      | magic  | opcode | key len | extras | data    | reserved (req) | body len | opaque | cas   |
//!      | 80/81  |        | (BE)    | len    | type    | status (resp)  | (BE)     |        | (BE)  |
//!      +--------+--------+---------+--------+---------+----------------+----------+--------+-------+
//!  body = extras, key, value
//! ```

use crate::{ArithInitial, BinaryRequestInfo, Command, Decoded, ErrorReply, Key, Keys, Limits, ProtocolError};
use crate::{ReplyStyle, Request, StoreMode};

/// Magic byte of a request.
pub const REQUEST_MAGIC: u8 = 0x80;
/// Magic byte of a response.
pub const RESPONSE_MAGIC: u8 = 0x81;
/// Bytes of a header.
pub const HEADER_BYTES: usize = 24;

/// Opcodes memcached 1.6 answers.
pub mod opcode {
    /// Get a key's value.
    pub const GET: u8 = 0x00;
    /// Store a value.
    pub const SET: u8 = 0x01;
    /// Store a value if the key is absent.
    pub const ADD: u8 = 0x02;
    /// Store a value if the key is present.
    pub const REPLACE: u8 = 0x03;
    /// Remove a key.
    pub const DELETE: u8 = 0x04;
    /// Add to a counter.
    pub const INCREMENT: u8 = 0x05;
    /// Take from a counter.
    pub const DECREMENT: u8 = 0x06;
    /// Close the connection.
    pub const QUIT: u8 = 0x07;
    /// Forget every item.
    pub const FLUSH: u8 = 0x08;
    /// GET, quiet on a miss.
    pub const GETQ: u8 = 0x09;
    /// Nothing; answered (ends a run of quiet requests).
    pub const NOOP: u8 = 0x0a;
    /// The server's version.
    pub const VERSION: u8 = 0x0b;
    /// GET, with the key in the reply.
    pub const GETK: u8 = 0x0c;
    /// GETK, quiet on a miss.
    pub const GETKQ: u8 = 0x0d;
    /// Add bytes after a value.
    pub const APPEND: u8 = 0x0e;
    /// Add bytes before a value.
    pub const PREPEND: u8 = 0x0f;
    /// Statistics.
    pub const STAT: u8 = 0x10;
    /// SET, quiet on success.
    pub const SETQ: u8 = 0x11;
    /// ADD, quiet on success.
    pub const ADDQ: u8 = 0x12;
    /// REPLACE, quiet on success.
    pub const REPLACEQ: u8 = 0x13;
    /// DELETE, quiet on success.
    pub const DELETEQ: u8 = 0x14;
    /// INCREMENT, quiet on success.
    pub const INCREMENTQ: u8 = 0x15;
    /// DECREMENT, quiet on success.
    pub const DECREMENTQ: u8 = 0x16;
    /// QUIT without a reply.
    pub const QUITQ: u8 = 0x17;
    /// FLUSH, quiet on success.
    pub const FLUSHQ: u8 = 0x18;
    /// APPEND, quiet on success.
    pub const APPENDQ: u8 = 0x19;
    /// PREPEND, quiet on success.
    pub const PREPENDQ: u8 = 0x1a;
    /// Set a key's expiry.
    pub const TOUCH: u8 = 0x1c;
    /// Get a value and set its expiry.
    pub const GAT: u8 = 0x1d;
    /// GAT, quiet on a miss.
    pub const GATQ: u8 = 0x1e;
    /// The SASL mechanisms offered.
    pub const SASL_LIST_MECHS: u8 = 0x20;
    /// Start SASL authentication.
    pub const SASL_AUTH: u8 = 0x21;
    /// Continue SASL authentication.
    pub const SASL_STEP: u8 = 0x22;
    /// GAT, with the key in the reply.
    pub const GATK: u8 = 0x23;
    /// GATK, quiet on a miss.
    pub const GATKQ: u8 = 0x24;
    /// tierkv's atomics (docs/protocol-extensions.md); memcached leaves 0x60.. unused.
    pub const ATOMIC: u8 = 0x60;
    /// ATOMIC, quiet on success.
    pub const ATOMICQ: u8 = 0x61;
}

/// Response statuses and memcached's message for each.
pub mod status {
    /// Done.
    pub const SUCCESS: u16 = 0x00;
    /// No such key.
    pub const KEY_ENOENT: u16 = 0x01;
    /// The key exists (or its CAS differs).
    pub const KEY_EEXISTS: u16 = 0x02;
    /// The value is too large.
    pub const E2BIG: u16 = 0x03;
    /// Invalid arguments.
    pub const EINVAL: u16 = 0x04;
    /// Not stored.
    pub const NOT_STORED: u16 = 0x05;
    /// The value is not a number.
    pub const DELTA_BADVAL: u16 = 0x06;
    /// Authentication failed (or is required).
    pub const AUTH_ERROR: u16 = 0x20;
    /// Authentication continues.
    pub const AUTH_CONTINUE: u16 = 0x21;
    /// Unknown command.
    pub const UNKNOWN_COMMAND: u16 = 0x81;
    /// Out of memory.
    pub const ENOMEM: u16 = 0x82;
    /// Internal error.
    pub const EINTERNAL: u16 = 0x84;

    /// The body memcached sends with an error status.
    pub fn message(status: u16) -> &'static [u8] {
        match status {
            ENOMEM => b"Out of memory",
            EINTERNAL => b"Internal error",
            UNKNOWN_COMMAND => b"Unknown command",
            KEY_ENOENT => b"Not found",
            EINVAL => b"Invalid arguments",
            KEY_EEXISTS => b"Data exists for key.",
            E2BIG => b"Too large.",
            DELTA_BADVAL => b"Non-numeric server-side value for incr or decr",
            NOT_STORED => b"Not stored.",
            AUTH_ERROR => b"Auth failure.",
            _ => b"",
        }
    }
}

/// A decoded header (request or response).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// REQUEST_MAGIC or RESPONSE_MAGIC.
    pub magic: u8,
    /// The command.
    pub opcode: u8,
    /// Bytes of key.
    pub key_len: u16,
    /// Bytes of extras.
    pub extras_len: u8,
    /// Always 0 (raw bytes).
    pub data_type: u8,
    /// vbucket in requests, status in responses.
    pub status_or_vbucket: u16,
    /// Bytes after the header: extras, key and value.
    pub body_len: u32,
    /// The client's tag, echoed.
    pub opaque: u32,
    /// The item's CAS (0: none).
    pub cas: u64,
}

impl Header {
    /// Reads a header from the first 24 bytes of `bytes`.
    pub fn read(bytes: &[u8; HEADER_BYTES]) -> Header {
        Header {
            magic: bytes[0],
            opcode: bytes[1],
            key_len: u16::from_be_bytes([bytes[2], bytes[3]]),
            extras_len: bytes[4],
            data_type: bytes[5],
            status_or_vbucket: u16::from_be_bytes([bytes[6], bytes[7]]),
            body_len: u32::from_be_bytes(bytes[8..12].try_into().unwrap()),
            opaque: u32::from_be_bytes(bytes[12..16].try_into().unwrap()),
            cas: u64::from_be_bytes(bytes[16..24].try_into().unwrap()),
        }
    }

    /// Appends the header to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.push(self.magic);
        out.push(self.opcode);
        out.extend_from_slice(&self.key_len.to_be_bytes());
        out.push(self.extras_len);
        out.push(self.data_type);
        out.extend_from_slice(&self.status_or_vbucket.to_be_bytes());
        out.extend_from_slice(&self.body_len.to_be_bytes());
        out.extend_from_slice(&self.opaque.to_be_bytes());
        out.extend_from_slice(&self.cas.to_be_bytes());
    }
}

/// What a reply to a request with this opcode echoes: quiet and key-returning variants as the
/// opcode says.
pub fn request_info(op: u8, opaque: u32) -> BinaryRequestInfo {
    use opcode::*;
    let quiet = matches!(
        op,
        GETQ | GETKQ
            | SETQ
            | ADDQ
            | REPLACEQ
            | DELETEQ
            | INCREMENTQ
            | DECREMENTQ
            | QUITQ
            | FLUSHQ
            | APPENDQ
            | PREPENDQ
            | GATQ
            | GATKQ
            | ATOMICQ
    );
    BinaryRequestInfo { opcode: op, opaque, quiet, return_key: matches!(op, GETK | GETKQ | GATK | GATKQ) }
}

/// The shape memcached requires of each opcode's body: (extras length, key required, value
/// allowed); None for opcodes it does not answer.
fn shape(op: u8) -> Option<(&'static [u8], Presence, bool)> {
    use opcode::*;
    use Presence::*;
    Some(match op {
        GET | GETQ | GETK | GETKQ => (&[0], Required, false),
        SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ => (&[8], Required, true),
        APPEND | APPENDQ | PREPEND | PREPENDQ => (&[0], Required, true),
        DELETE | DELETEQ => (&[0], Required, false),
        INCREMENT | INCREMENTQ | DECREMENT | DECREMENTQ => (&[20], Required, false),
        QUIT | QUITQ | NOOP | VERSION | SASL_LIST_MECHS => (&[0], Absent, false),
        FLUSH | FLUSHQ => (&[0, 4], Absent, false),
        STAT => (&[0], Optional, false),
        TOUCH | GAT | GATQ | GATK | GATKQ => (&[4], Required, false),
        SASL_AUTH | SASL_STEP => (&[0], Required, true),
        ATOMIC | ATOMICQ => (&[18], Required, false),
        _ => return None,
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Presence {
    Required,
    Optional,
    Absent,
}

/// Decodes the binary request at the front of `input` (which starts with the request magic).
pub fn decode_request<'a>(input: &'a [u8], limits: &Limits) -> Decoded<'a> {
    let Some(header_bytes) = input.first_chunk::<HEADER_BYTES>() else {
        return Decoded::Incomplete { needed: HEADER_BYTES };
    };
    let header = Header::read(header_bytes);
    if header.magic != REQUEST_MAGIC {
        return Decoded::Error(ProtocolError::closing(ErrorReply::Nothing, input.len()));
    }
    let info = request_info(header.opcode, header.opaque);
    let key_len = usize::from(header.key_len);
    let extras_len = usize::from(header.extras_len);
    let body_len = header.body_len as usize;
    let total = HEADER_BYTES + body_len;
    let invalid = || Decoded::Error(ProtocolError::closing(ErrorReply::Binary { status: status::EINVAL, info }, total));
    if key_len > limits.max_key_bytes {
        return invalid();
    }
    let Some((extras_allowed, key_presence, value_allowed)) = shape(header.opcode) else {
        // Debian's memcached 1.6.18 answers an unknown opcode and then closes the connection.
        let reply = ErrorReply::Binary { status: status::UNKNOWN_COMMAND, info };
        return Decoded::Error(ProtocolError::closing(reply, total));
    };
    let value_len = body_len.checked_sub(key_len + extras_len);
    let key_ok = match key_presence {
        Presence::Required => key_len > 0,
        Presence::Optional => true,
        Presence::Absent => key_len == 0,
    };
    let Some(value_len) =
        value_len.filter(|&v| key_ok && extras_allowed.contains(&header.extras_len) && (value_allowed || v == 0))
    else {
        return invalid();
    };
    if value_len > i32::MAX as usize {
        // memcached computes a value's length as a C int: from 2 GiB on it is negative, and it
        // closes the connection without a word.
        return Decoded::Error(ProtocolError::closing(ErrorReply::Nothing, total));
    }
    let key_start = HEADER_BYTES + extras_len;
    if value_len > limits.max_value_bytes.saturating_sub(crate::MEMCACHED_ITEM_OVERHEAD_BYTES + 4 + key_len) {
        // Near the limit: the flags (first extras word of a store) decide, as in memcached.
        if input.len() < key_start + key_len {
            return Decoded::Incomplete { needed: key_start + key_len };
        }
        let flags = if extras_len >= 4 { be32(&input[HEADER_BYTES..]) } else { 0 };
        if !limits.item_fits(key_len, flags, value_len) {
            let reply = ErrorReply::Binary { status: status::E2BIG, info };
            // memcached unlinks the old item when a SET (or SETQ) is refused as too large.
            let set = matches!(header.opcode, opcode::SET | opcode::SETQ);
            let key = &input[key_start..key_start + key_len];
            let unlink = set.then(|| crate::KeySpan::of(input, key, false));
            return Decoded::Error(ProtocolError { unlink, ..ProtocolError::new(reply, total) });
        }
    }
    if input.len() < total {
        return Decoded::Incomplete { needed: total };
    }
    let extras = &input[HEADER_BYTES..HEADER_BYTES + extras_len];
    if matches!(header.opcode, opcode::ATOMIC | opcode::ATOMICQ)
        && crate::atomic::from_binary(extras[0], extras[1]).is_none()
    {
        return Decoded::Error(ProtocolError::new(ErrorReply::Binary { status: status::EINVAL, info }, total));
    }
    let key = &input[HEADER_BYTES + extras_len..HEADER_BYTES + extras_len + key_len];
    let value = &input[HEADER_BYTES + extras_len + key_len..total];
    let request = Request { command: command(&header, extras, key, value), style: ReplyStyle::Binary(info) };
    Decoded::Request { request, consumed: total }
}

fn be32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes(bytes[..4].try_into().unwrap())
}

fn be64(bytes: &[u8]) -> u64 {
    u64::from_be_bytes(bytes[..8].try_into().unwrap())
}

/// The command of a request whose shape `decode_request` has checked.
fn command<'a>(header: &Header, extras: &[u8], key: &'a [u8], value: &'a [u8]) -> Command<'a> {
    use opcode::*;
    let op = header.opcode;
    match op {
        GET | GETQ | GETK | GETKQ => {
            Command::Get { keys: Keys::one(key), return_cas: true, touch: None, base64: false }
        }
        GAT | GATQ | GATK | GATKQ => {
            Command::Get { keys: Keys::one(key), return_cas: true, touch: Some(i64::from(be32(extras))), base64: false }
        }
        SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ | APPEND | APPENDQ | PREPEND | PREPENDQ => {
            // memcached turns set, add and replace with a CAS into a cas.
            let mode = match op {
                SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ if header.cas != 0 => StoreMode::Cas,
                SET | SETQ => StoreMode::Set,
                ADD | ADDQ => StoreMode::Add,
                REPLACE | REPLACEQ => StoreMode::Replace,
                APPEND | APPENDQ => StoreMode::Append,
                _ => StoreMode::Prepend,
            };
            let (flags, exptime) =
                if extras.len() == 8 { (be32(extras), i64::from(be32(&extras[4..]))) } else { (0, 0) };
            Command::Store { mode, key: Key::plain(key), flags, exptime, value, cas: header.cas }
        }
        DELETE | DELETEQ => Command::Delete { key: Key::plain(key), cas: header.cas },
        INCREMENT | INCREMENTQ | DECREMENT | DECREMENTQ => {
            let expiration = be32(&extras[16..]);
            // An expiration of all ones means "do not create on a miss".
            let initial = (expiration != u32::MAX)
                .then(|| ArithInitial { value: be64(&extras[8..]), exptime: i64::from(expiration) });
            Command::Arith {
                key: Key::plain(key),
                delta: be64(extras),
                decrement: matches!(op, DECREMENT | DECREMENTQ),
                initial,
                cas: header.cas,
            }
        }
        TOUCH => Command::Touch { key: Key::plain(key), exptime: i64::from(be32(extras)) },
        ATOMIC | ATOMICQ => {
            let (code, signed) = crate::atomic::from_binary(extras[0], extras[1]).expect("checked by decode_request");
            Command::Atomic {
                key: Key::plain(key),
                code,
                signed,
                operand: be64(&extras[2..]),
                operand2: be64(&extras[10..]),
            }
        }
        FLUSH | FLUSHQ => Command::FlushAll { delay: if extras.len() == 4 { i64::from(be32(extras)) } else { 0 } },
        STAT => Command::Stats { args: key },
        VERSION => Command::Version,
        NOOP => Command::Noop,
        QUIT | QUITQ => Command::Quit,
        _ => Command::Sasl { opcode: op, key, value },
    }
}

/// Appends a response to `out`: header, extras, key, value.
pub fn write_response(
    out: &mut Vec<u8>,
    info: &BinaryRequestInfo,
    status: u16,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    let header = Header {
        magic: RESPONSE_MAGIC,
        opcode: info.opcode,
        key_len: key.len() as u16,
        extras_len: extras.len() as u8,
        data_type: 0,
        status_or_vbucket: status,
        body_len: (extras.len() + key.len() + value.len()) as u32,
        opaque: info.opaque,
        cas,
    };
    header.write(out);
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Appends an error response with memcached's message for `status`.
pub fn write_error(out: &mut Vec<u8>, info: &BinaryRequestInfo, status: u16) {
    write_response(out, info, status, 0, &[], &[], status::message(status));
}

/// Appends a request to `out`: header, extras, key, value.
pub fn write_request(out: &mut Vec<u8>, op: u8, opaque: u32, cas: u64, extras: &[u8], key: &[u8], value: &[u8]) {
    let header = Header {
        magic: REQUEST_MAGIC,
        opcode: op,
        key_len: key.len() as u16,
        extras_len: extras.len() as u8,
        data_type: 0,
        status_or_vbucket: 0,
        body_len: (extras.len() + key.len() + value.len()) as u32,
        opaque,
        cas,
    };
    header.write(out);
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}
