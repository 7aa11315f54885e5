//! From an engine outcome to reply bytes: one function per protocol (`text`, `meta`, `binary`),
//! each naming every engine error, so that a new error cannot fall silently into another's
//! reply. The replies are memcached 1.6.18's. Executing the request (and counting it) is
//! `execute.rs`'s job; nothing here touches the partition.

use tierkv_engine::{ArithOutcome, AtomicOutcome, DeleteOutcome, EngineError, StoreMode, StoreOutcome};
use tierkv_protocol::binary::{self, status};
use tierkv_protocol::meta::MetaFlags;
use tierkv_protocol::reply::{self, returned, MetaCode, MetaReturn, Status};
use tierkv_protocol::{BinaryRequestInfo, ErrorReply};

/// memcached's reply (with `-M`) to a store that finds no memory.
const OUT_OF_MEMORY_STORING: &str = "out of memory storing object";
/// memcached's reply to an incr/decr that cannot allocate the new value.
const OUT_OF_MEMORY: &str = "out of memory";
const TOO_LARGE: &str = "object too large for cache";
const NON_NUMERIC: &str = "cannot increment or decrement non-numeric value";
const BAD_FORMAT: &str = "bad command line format";

/// What the engine answered to a storage command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Store(StoreMode, Result<StoreOutcome, EngineError>),
    Delete(Result<DeleteOutcome, EngineError>),
    Arith(Result<ArithOutcome, EngineError>),
}

/// The text (and meta) error line for an engine error. An arithmetic command that cannot
/// write its new value answers as memcached's `EOM`; keys are refused by the decoder first,
/// but an engine refusal of one answers as memcached does a bad key.
pub(crate) fn text_error(error: EngineError, arith: bool) -> ErrorReply {
    match error {
        EngineError::EmptyKey | EngineError::KeyTooLong { .. } => ErrorReply::Client(BAD_FORMAT),
        EngineError::NonNumeric => ErrorReply::Client(NON_NUMERIC),
        EngineError::Vector(error) => ErrorReply::Client(vector_error(error)),
        EngineError::ItemTooLarge { .. } | EngineError::OutOfMemory if arith => ErrorReply::Server(OUT_OF_MEMORY),
        EngineError::ItemTooLarge { .. } => ErrorReply::Server(TOO_LARGE),
        EngineError::OutOfMemory => ErrorReply::Server(OUT_OF_MEMORY_STORING),
    }
}

/// The CLIENT_ERROR message of a refused vector request (docs/protocol-extensions.md).
pub(crate) fn vector_error(error: tierkv_engine::VectorError) -> &'static str {
    match error {
        tierkv_engine::VectorError::NotAVector => "not a vector",
        tierkv_engine::VectorError::TypeMismatch => "vector type mismatch",
        tierkv_engine::VectorError::OutOfBounds => "vector slice out of bounds",
        tierkv_engine::VectorError::BadData => "vector data is not whole elements",
    }
}

/// The binary status for an engine error.
pub(crate) fn binary_error(error: EngineError, arith: bool) -> u16 {
    match error {
        EngineError::EmptyKey | EngineError::KeyTooLong { .. } => status::EINVAL,
        EngineError::NonNumeric => status::DELTA_BADVAL,
        EngineError::Vector(_) => status::EINVAL,
        EngineError::ItemTooLarge { .. } if arith => status::ENOMEM,
        EngineError::ItemTooLarge { .. } => status::E2BIG,
        EngineError::OutOfMemory => status::ENOMEM,
    }
}

/// The text protocol's reply.
pub(crate) fn text(out: &mut Vec<u8>, outcome: &Outcome) {
    let line = match *outcome {
        Outcome::Store(_, Ok(stored)) => match stored {
            StoreOutcome::Stored { .. } => Status::Stored,
            StoreOutcome::NotStored => Status::NotStored,
            StoreOutcome::Exists => Status::Exists,
            StoreOutcome::NotFound => Status::NotFound,
        },
        Outcome::Delete(Ok(deleted)) => match deleted {
            DeleteOutcome::Deleted => Status::Deleted,
            DeleteOutcome::Exists => Status::Exists,
            DeleteOutcome::NotFound => Status::NotFound,
        },
        Outcome::Arith(Ok(ArithOutcome::Value { value, .. })) => return reply::number(out, value),
        Outcome::Arith(Ok(ArithOutcome::NotFound)) => Status::NotFound,
        Outcome::Arith(Ok(ArithOutcome::Exists)) => Status::Exists,
        Outcome::Store(_, Err(error)) | Outcome::Delete(Err(error)) => {
            return reply::error(out, &text_error(error, false))
        }
        Outcome::Arith(Err(error)) => return reply::error(out, &text_error(error, true)),
    };
    reply::status(out, line);
}

/// The meta protocol's reply to ms, md and ma (`key` decoded; `ttl` what `t` returns for an
/// arithmetic result). `q` drops the nominal reply (HD), except for a counter `ma` created.
pub(crate) fn meta(out: &mut Vec<u8>, flags: &MetaFlags<'_>, key: &[u8], outcome: &Outcome, ttl: Option<i64>) {
    let mut info = MetaReturn { key: Some(key), ..MetaReturn::default() };
    let mut value = None;
    let digits;
    let arith = matches!(outcome, Outcome::Arith(_));
    let (code, letters) = match *outcome {
        Outcome::Store(_, Ok(stored)) => match stored {
            StoreOutcome::Stored { cas } => {
                info.cas = Some(cas);
                (MetaCode::Hd, returned::SET)
            }
            // memcached returns `c0` when nothing was stored.
            StoreOutcome::NotStored => {
                info.cas = Some(0);
                (MetaCode::Ns, returned::SET)
            }
            StoreOutcome::Exists => {
                info.cas = Some(0);
                (MetaCode::Ex, returned::SET)
            }
            StoreOutcome::NotFound => {
                info.cas = Some(0);
                (MetaCode::Nf, returned::SET)
            }
        },
        Outcome::Delete(Ok(deleted)) => match deleted {
            DeleteOutcome::Deleted => (MetaCode::Hd, returned::DELETE),
            DeleteOutcome::Exists => (MetaCode::Ex, returned::DELETE),
            DeleteOutcome::NotFound => (MetaCode::Nf, returned::DELETE),
        },
        Outcome::Arith(Ok(ArithOutcome::Value { value: number, cas, created })) => {
            if flags.quiet() && !created {
                return;
            }
            (info.cas, info.ttl) = (Some(cas), ttl);
            if flags.return_value() {
                digits = tierkv_engine::CounterValue::new(number, 0);
                value = Some(digits.digits());
                (MetaCode::Va, returned::ARITH)
            } else {
                (MetaCode::Hd, returned::ARITH)
            }
        }
        Outcome::Arith(Ok(ArithOutcome::NotFound)) => (MetaCode::Nf, returned::ARITH),
        Outcome::Arith(Ok(ArithOutcome::Exists)) => (MetaCode::Ex, returned::ARITH),
        Outcome::Store(_, Err(error)) | Outcome::Delete(Err(error)) => {
            return reply::error(out, &text_error(error, false))
        }
        Outcome::Arith(Err(error)) => return reply::error(out, &text_error(error, true)),
    };
    if flags.quiet() && code == MetaCode::Hd && !arith {
        return;
    }
    reply::meta(out, code, flags, letters, &info, value);
}

/// The text reply to a tierkv atomic (docs/protocol-extensions.md).
pub(crate) fn text_atomic(out: &mut Vec<u8>, signed: bool, result: &Result<AtomicOutcome, EngineError>) {
    match *result {
        Ok(AtomicOutcome::Done { old, new }) => tierkv_protocol::atomic::write_done(out, old, new, signed),
        Ok(AtomicOutcome::Mismatch { current }) => tierkv_protocol::atomic::write_mismatch(out, current, signed),
        Ok(AtomicOutcome::NotFound) => reply::status(out, Status::NotFound),
        Err(EngineError::NonNumeric) => reply::error(
            out,
            &ErrorReply::Client(if signed { "value is not an i64 counter" } else { "value is not a u64 counter" }),
        ),
        Err(error) => reply::error(out, &text_error(error, true)),
    }
}

/// The meta reply to a tierkv atomic (`mx`): HD, or VA with the new value (`v`), EX when a
/// `cas` finds another value, NF; `p` returns the value before (for EX, the current one).
/// `q` drops HD and VA.
pub(crate) fn meta_atomic(
    out: &mut Vec<u8>,
    flags: &MetaFlags<'_>,
    key: &[u8],
    signed: bool,
    result: &Result<AtomicOutcome, EngineError>,
) {
    let mut info = MetaReturn { key: Some(key), ..MetaReturn::default() };
    let mut digits = Vec::new();
    let code = match *result {
        Ok(AtomicOutcome::Done { .. }) if flags.quiet() => return,
        Ok(AtomicOutcome::Done { old, new }) => {
            info.previous = Some((old, signed));
            if flags.return_value() {
                tierkv_protocol::atomic::write_number(&mut digits, new, signed);
                MetaCode::Va
            } else {
                MetaCode::Hd
            }
        }
        Ok(AtomicOutcome::Mismatch { current }) => {
            info.previous = Some((current, signed));
            MetaCode::Ex
        }
        Ok(AtomicOutcome::NotFound) => MetaCode::Nf,
        Err(_) => return text_atomic(out, signed, result),
    };
    reply::meta(out, code, flags, returned::ATOMIC, &info, Some(&digits));
}

/// The binary reply to a tierkv atomic: old and new value (big-endian) on success, the
/// current value with KEY_EEXISTS when a `cas` finds another; quiet requests drop a success.
pub(crate) fn binary_atomic(out: &mut Vec<u8>, info: &BinaryRequestInfo, result: &Result<AtomicOutcome, EngineError>) {
    match *result {
        Ok(AtomicOutcome::Done { old, new }) if !info.quiet => {
            let mut value = [0u8; 16];
            value[..8].copy_from_slice(&old.to_be_bytes());
            value[8..].copy_from_slice(&new.to_be_bytes());
            binary::write_response(out, info, status::SUCCESS, 0, &[], &[], &value);
        }
        Ok(AtomicOutcome::Done { .. }) => {}
        Ok(AtomicOutcome::Mismatch { current }) => {
            binary::write_response(out, info, status::KEY_EEXISTS, 0, &[], &[], &current.to_be_bytes());
        }
        Ok(AtomicOutcome::NotFound) => binary::write_error(out, info, status::KEY_ENOENT),
        Err(error) => binary::write_error(out, info, binary_error(error, true)),
    }
}

/// The binary protocol's reply; quiet requests drop a success.
pub(crate) fn binary(out: &mut Vec<u8>, info: &BinaryRequestInfo, outcome: &Outcome) {
    let success = |out: &mut Vec<u8>, cas: u64, value: &[u8]| {
        if !info.quiet {
            binary::write_response(out, info, status::SUCCESS, cas, &[], &[], value);
        }
    };
    let code = match *outcome {
        Outcome::Store(mode, Ok(stored)) => match stored {
            StoreOutcome::Stored { cas } => return success(out, cas, &[]),
            // memcached answers a refused add with EEXISTS and a refused replace with ENOENT.
            StoreOutcome::NotStored if mode == StoreMode::Add => status::KEY_EEXISTS,
            StoreOutcome::NotStored if mode == StoreMode::Replace => status::KEY_ENOENT,
            StoreOutcome::NotStored => status::NOT_STORED,
            StoreOutcome::Exists => status::KEY_EEXISTS,
            StoreOutcome::NotFound => status::KEY_ENOENT,
        },
        Outcome::Delete(Ok(deleted)) => match deleted {
            DeleteOutcome::Deleted => return success(out, 0, &[]),
            DeleteOutcome::Exists => status::KEY_EEXISTS,
            DeleteOutcome::NotFound => status::KEY_ENOENT,
        },
        Outcome::Arith(Ok(ArithOutcome::Value { value, cas, .. })) => return success(out, cas, &value.to_be_bytes()),
        Outcome::Arith(Ok(ArithOutcome::NotFound)) => status::KEY_ENOENT,
        Outcome::Arith(Ok(ArithOutcome::Exists)) => status::KEY_EEXISTS,
        Outcome::Store(_, Err(error)) | Outcome::Delete(Err(error)) => binary_error(error, false),
        Outcome::Arith(Err(error)) => binary_error(error, true),
    };
    binary::write_error(out, info, code);
}

#[cfg(test)]
mod tests {
    use super::*;

    const ERRORS: [EngineError; 5] = [
        EngineError::EmptyKey,
        EngineError::KeyTooLong { len: 251 },
        EngineError::ItemTooLarge { bytes: 2 << 20, max_bytes: 1 << 20 },
        EngineError::NonNumeric,
        EngineError::OutOfMemory,
    ];

    fn text_of(outcome: Outcome) -> String {
        let mut out = Vec::new();
        text(&mut out, &outcome);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn every_engine_error_has_memcached_s_text_reply() {
        let store: Vec<String> = ERRORS.iter().map(|&e| text_of(Outcome::Store(StoreMode::Set, Err(e)))).collect();
        assert_eq!(
            store,
            [
                "CLIENT_ERROR bad command line format\r\n",
                "CLIENT_ERROR bad command line format\r\n",
                "SERVER_ERROR object too large for cache\r\n",
                "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
                "SERVER_ERROR out of memory storing object\r\n",
            ]
        );
        let arith: Vec<String> = ERRORS.iter().map(|&e| text_of(Outcome::Arith(Err(e)))).collect();
        assert_eq!(
            arith,
            [
                "CLIENT_ERROR bad command line format\r\n",
                "CLIENT_ERROR bad command line format\r\n",
                "SERVER_ERROR out of memory\r\n",
                "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
                "SERVER_ERROR out of memory\r\n",
            ]
        );
        // A delete refused for its key was answered NOT_FOUND before.
        assert_eq!(text_of(Outcome::Delete(Err(EngineError::EmptyKey))), "CLIENT_ERROR bad command line format\r\n");
    }

    #[test]
    fn binary_errors_follow_memcached_s_statuses() {
        let store: Vec<u16> = ERRORS.iter().map(|&e| binary_error(e, false)).collect();
        assert_eq!(store, [status::EINVAL, status::EINVAL, status::E2BIG, status::DELTA_BADVAL, status::ENOMEM]);
        let arith: Vec<u16> = ERRORS.iter().map(|&e| binary_error(e, true)).collect();
        assert_eq!(arith, [status::EINVAL, status::EINVAL, status::ENOMEM, status::DELTA_BADVAL, status::ENOMEM]);
    }

    #[test]
    fn text_successes_and_misses() {
        assert_eq!(text_of(Outcome::Store(StoreMode::Add, Ok(StoreOutcome::NotStored))), "NOT_STORED\r\n");
        assert_eq!(text_of(Outcome::Store(StoreMode::Cas, Ok(StoreOutcome::NotFound))), "NOT_FOUND\r\n");
        assert_eq!(text_of(Outcome::Delete(Ok(DeleteOutcome::Exists))), "EXISTS\r\n");
        let value = ArithOutcome::Value { value: 42, cas: 7, created: false };
        assert_eq!(text_of(Outcome::Arith(Ok(value))), "42\r\n");
    }
}
