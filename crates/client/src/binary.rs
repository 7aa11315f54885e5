//! memcached's binary protocol, spoken to servers that require SASL (`-S`: they speak nothing
//! else). Requests carry their batch index as the opaque; a batch of gets is quiet `GETKQ`s
//! closed by a `NOOP`, so only hits come back. No I/O here.
//!
//! Responses are decoded by the protocol crate (`tierkv_protocol::client`). It never sends
//! tierkv's atomics or vectors, which have no binary form.

use tierkv_protocol::client::Reply as Wire;

use crate::codec::{Item, Op, Reply, StoreMode};

const REQUEST: u8 = 0x80;
const GETK: u8 = 0x0c;
const GETKQ: u8 = 0x0d;
const NOOP: u8 = 0x0a;
const STAT: u8 = 0x10;
const SASL_AUTH: u8 = 0x21;

/// One response.
pub(crate) struct Response<'a> {
    pub(crate) opcode: u8,
    pub(crate) status: u16,
    pub(crate) opaque: u32,
    pub(crate) cas: u64,
    pub(crate) extras: &'a [u8],
    pub(crate) key: &'a [u8],
    pub(crate) value: &'a [u8],
}

fn request(out: &mut Vec<u8>, opcode: u8, key: &[u8], extras: &[u8], value: &[u8], opaque: u32, cas: u64) {
    out.extend_from_slice(&[REQUEST, opcode]);
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.extend_from_slice(&[extras.len() as u8, 0, 0, 0]);
    out.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
    out.extend_from_slice(&opaque.to_be_bytes());
    out.extend_from_slice(&cas.to_be_bytes());
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Whether `op` has a binary form.
pub(crate) fn supports(op: &Op<'_>) -> bool {
    !matches!(op, Op::Atomic(_) | Op::VectorNew { .. } | Op::VectorUpdate { .. } | Op::VectorGet { .. })
}

/// A quiet get of `key` for request `index`.
pub(crate) fn encode_get(out: &mut Vec<u8>, index: usize, key: &[u8]) {
    request(out, GETKQ, key, &[], &[], index as u32, 0);
}

/// The `NOOP` that ends a batch of quiet gets.
pub(crate) fn end_gets(out: &mut Vec<u8>) {
    request(out, NOOP, &[], &[], &[], u32::MAX, 0);
}

/// Appends request `index` (anything but a get; `supports(op)` holds).
pub(crate) fn encode(out: &mut Vec<u8>, index: usize, op: &Op<'_>) {
    let opaque = index as u32;
    match *op {
        Op::Store { mode, key, value, flags, exptime } => {
            let mut extras = [0u8; 8];
            extras[..4].copy_from_slice(&flags.to_be_bytes());
            extras[4..].copy_from_slice(&exptime.to_be_bytes());
            let (opcode, extras, cas): (u8, &[u8], u64) = match mode {
                StoreMode::Set => (0x01, &extras, 0),
                StoreMode::Add => (0x02, &extras, 0),
                StoreMode::Replace => (0x03, &extras, 0),
                StoreMode::Append => (0x0e, &[], 0),
                StoreMode::Prepend => (0x0f, &[], 0),
                StoreMode::Cas(unique) => (0x01, &extras, unique),
            };
            request(out, opcode, key, extras, value, opaque, cas);
        }
        Op::Delete(key) => request(out, 0x04, key, &[], &[], opaque, 0),
        Op::Incr(key, delta) | Op::Decr(key, delta) => {
            // Delta, initial value, and an exptime of all ones: a missing key is NOT_FOUND, as
            // in the text protocol.
            let mut extras = [0xffu8; 20];
            extras[..8].copy_from_slice(&delta.to_be_bytes());
            extras[8..16].copy_from_slice(&0u64.to_be_bytes());
            let opcode = if matches!(op, Op::Incr(..)) { 0x05 } else { 0x06 };
            request(out, opcode, key, &extras, &[], opaque, 0);
        }
        Op::Touch(key, exptime) => request(out, 0x1c, key, &exptime.to_be_bytes(), &[], opaque, 0),
        Op::Get(key) | Op::Gets(key) => request(out, GETK, key, &[], &[], opaque, 0),
        Op::Atomic(_) | Op::VectorNew { .. } | Op::VectorUpdate { .. } | Op::VectorGet { .. } => {
            unreachable!("checked by supports()")
        }
    }
}

/// `SASL_AUTH` with the PLAIN mechanism.
pub(crate) fn sasl_plain(out: &mut Vec<u8>, user: &str, password: &str) {
    let credentials = [b"\0", user.as_bytes(), b"\0", password.as_bytes()].concat();
    request(out, SASL_AUTH, b"PLAIN", &[], &credentials, 0, 0);
}

/// `STAT` for a group (empty: the general stats).
pub(crate) fn stats(out: &mut Vec<u8>, group: &str) {
    request(out, STAT, group.as_bytes(), &[], &[], 0, 0);
}

/// A decoded reply as a binary response (None: a text reply where binary was expected).
pub(crate) fn response(wire: Wire<'_>) -> Option<Response<'_>> {
    match wire {
        Wire::Binary { header, extras, key, value } => Some(Response {
            opcode: header.opcode,
            status: header.status_or_vbucket,
            opaque: header.opaque,
            cas: header.cas,
            extras,
            key,
            value,
        }),
        _ => None,
    }
}

/// Whether a response ends a batch of quiet gets.
pub(crate) fn is_noop(response: &Response<'_>) -> bool {
    response.opcode == NOOP
}

/// The text protocol's reply for what the server answered to `op`.
pub(crate) fn reply_for(op: &Op<'_>, r: &Response<'_>) -> Reply {
    let text_error =
        |r: &Response<'_>| Reply::ServerError(format!("SERVER_ERROR {}", String::from_utf8_lossy(r.value)));
    match (op, r.status) {
        (Op::Get(_) | Op::Gets(_), 0) => {
            let flags = r.extras.get(..4).map_or(0, |f| u32::from_be_bytes(f.try_into().expect("four bytes")));
            let cas = matches!(op, Op::Gets(_)).then_some(r.cas);
            Reply::Hit(Item { value: r.value.to_vec(), flags, cas })
        }
        (Op::Get(_) | Op::Gets(_), 1) => Reply::Miss,
        (Op::Store { .. }, 0) => Reply::Stored,
        (Op::Store { mode: StoreMode::Cas(_), .. }, 1) => Reply::NotFound,
        (Op::Store { mode: StoreMode::Cas(_), .. }, 2) => Reply::Exists,
        (Op::Store { .. }, 1 | 2 | 5) => Reply::NotStored,
        (Op::Delete(_), 0) => Reply::Deleted,
        (Op::Incr(..) | Op::Decr(..), 0) => match r.value.try_into() {
            Ok(bytes) => Reply::Number(u64::from_be_bytes(bytes)),
            Err(_) => text_error(r),
        },
        (Op::Incr(..) | Op::Decr(..), 6) => {
            Reply::ServerError("CLIENT_ERROR cannot increment or decrement non-numeric value".into())
        }
        (Op::Touch(..), 0) => Reply::Touched,
        (_, 1) => Reply::NotFound,
        _ => text_error(r),
    }
}
