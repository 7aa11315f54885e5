//! Executes one decoded request on the partition and appends its reply, in the protocol the
//! request came in (text, meta or binary), as memcached 1.6.18 replies.

use tierkv_engine as engine;
use tierkv_protocol::binary::{self, status};
use tierkv_protocol::meta::MetaFlags;
use tierkv_protocol::reply::{self, returned, MetaCode, MetaReturn, Status};
use tierkv_protocol::{BinaryRequestInfo, Command, ErrorReply, ReplyStyle, Request, StoreMode};

/// The version tierkv reports: the memcached release whose protocol it speaks, then its own.
/// Clients (libmemcached among them) read the leading number to pick features, so it leads.
pub const VERSION: &str = concat!("1.6.18-tierkv-", env!("CARGO_PKG_VERSION"));

/// What the connection does after a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum After {
    Continue,
    Close,
}

/// Counters for `stats`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    pub cmd_get: u64,
    pub cmd_set: u64,
    pub get_hits: u64,
    pub get_misses: u64,
}

fn store_mode(mode: StoreMode) -> engine::StoreMode {
    match mode {
        StoreMode::Set => engine::StoreMode::Set,
        StoreMode::Add => engine::StoreMode::Add,
        StoreMode::Replace => engine::StoreMode::Replace,
        StoreMode::Append => engine::StoreMode::Append,
        StoreMode::Prepend => engine::StoreMode::Prepend,
        StoreMode::Cas => engine::StoreMode::Cas,
    }
}

/// GET or get-and-touch of one key, counted for `stats`.
fn fetch<'p>(
    partition: &'p mut engine::Partition,
    key: &[u8],
    touch: Option<i64>,
    counters: &mut Counters,
) -> Option<engine::Item<'p>> {
    counters.cmd_get += 1;
    let item = match touch {
        Some(exptime) => partition.get_and_touch(key, exptime),
        None => partition.get(key),
    };
    match item {
        Ok(Some(item)) => {
            counters.get_hits += 1;
            Some(item)
        }
        _ => {
            counters.get_misses += 1;
            None
        }
    }
}

/// The engine's incr/decr request for a decoded one.
fn arith_request(
    delta: u64,
    decrement: bool,
    cas: u64,
    initial: Option<tierkv_protocol::ArithInitial>,
) -> engine::ArithRequest {
    engine::ArithRequest {
        delta,
        decrement,
        cas,
        initial: initial.map(|i| engine::ArithInitial { value: i.value, flags: 0, exptime: i.exptime }),
    }
}

/// Appends the reply to `request` to `out`.
pub fn execute(
    partition: &mut engine::Partition,
    request: &Request<'_>,
    out: &mut Vec<u8>,
    counters: &mut Counters,
) -> After {
    let noreply = match request.style {
        ReplyStyle::Text { noreply } => noreply,
        ReplyStyle::Meta(flags) => {
            execute_meta(partition, &request.command, &flags, out, counters);
            return After::Continue;
        }
        ReplyStyle::Binary(info) => return execute_binary(partition, &request.command, &info, out, counters),
    };
    // Replies are written to a scratch position and dropped again for noreply.
    let start = out.len();
    let after = execute_text(partition, request, out, counters);
    if noreply {
        out.truncate(start);
    }
    after
}

fn execute_text(
    partition: &mut engine::Partition,
    request: &Request<'_>,
    out: &mut Vec<u8>,
    counters: &mut Counters,
) -> After {
    match request.command {
        Command::Get { keys, return_cas, touch, .. } => {
            for key in keys.iter() {
                if let Some(item) = fetch(partition, key, touch, counters) {
                    reply::value(out, key, item.flags, item.value, return_cas.then_some(item.cas));
                }
            }
            reply::status(out, Status::End);
        }
        Command::Store { mode, key, flags, exptime, value, cas } => {
            counters.cmd_set += 1;
            let store = engine::StoreRequest { mode: store_mode(mode), key: key.raw, value, flags, exptime, cas };
            match partition.store(&store) {
                Ok(engine::StoreOutcome::Stored { .. }) => reply::status(out, Status::Stored),
                Ok(engine::StoreOutcome::NotStored) => reply::status(out, Status::NotStored),
                Ok(engine::StoreOutcome::Exists) => reply::status(out, Status::Exists),
                Ok(engine::StoreOutcome::NotFound) => reply::status(out, Status::NotFound),
                Err(engine::EngineError::ItemTooLarge { .. }) => {
                    reply::error(out, &ErrorReply::Server("object too large for cache"))
                }
                Err(_) => reply::error(out, &ErrorReply::Client("bad command line format")),
            }
        }
        Command::Delete { key, cas } => match partition.delete(key.raw, cas) {
            Ok(engine::DeleteOutcome::Deleted) => reply::status(out, Status::Deleted),
            Ok(engine::DeleteOutcome::Exists) => reply::status(out, Status::Exists),
            Ok(engine::DeleteOutcome::NotFound) | Err(_) => reply::status(out, Status::NotFound),
        },
        Command::Arith { key, delta, decrement, cas, initial } => {
            let arith = arith_request(delta, decrement, cas, initial);
            match partition.arith(key.raw, &arith) {
                Ok(engine::ArithOutcome::Value { value, .. }) => reply::number(out, value),
                Ok(engine::ArithOutcome::NotFound) => reply::status(out, Status::NotFound),
                Ok(engine::ArithOutcome::Exists) => reply::status(out, Status::Exists),
                Err(engine::EngineError::NonNumeric) => {
                    reply::error(out, &ErrorReply::Client("cannot increment or decrement non-numeric value"))
                }
                Err(_) => reply::error(out, &ErrorReply::Server("out of memory")),
            }
        }
        Command::Touch { key, exptime } => match partition.touch(key.raw, exptime) {
            Ok(true) => reply::status(out, Status::Touched),
            Ok(false) | Err(_) => reply::status(out, Status::NotFound),
        },
        Command::FlushAll { delay } => {
            partition.flush_all(delay);
            reply::status(out, Status::Ok);
        }
        Command::Version => reply::version(out, VERSION.as_bytes()),
        Command::Verbosity { .. } => reply::status(out, Status::Ok),
        Command::Quit => return After::Close,
        Command::Stats { args: [] } => {
            let now = partition.now().to_string();
            reply::stat(out, b"pid", std::process::id().to_string().as_bytes());
            reply::stat(out, b"time", now.as_bytes());
            reply::stat(out, b"version", VERSION.as_bytes());
            reply::stat(out, b"cmd_get", counters.cmd_get.to_string().as_bytes());
            reply::stat(out, b"cmd_set", counters.cmd_set.to_string().as_bytes());
            reply::stat(out, b"get_hits", counters.get_hits.to_string().as_bytes());
            reply::stat(out, b"get_misses", counters.get_misses.to_string().as_bytes());
            reply::stat(out, b"limit_maxbytes", partition.allocated_bytes().to_string().as_bytes());
            reply::status(out, Status::End);
        }
        Command::Stats { .. } | Command::Noop | Command::MetaDebug { .. } | Command::Sasl { .. } => {
            reply::error(out, &ErrorReply::Error)
        }
    }
    After::Continue
}

/// Seconds an item has left (-1 for never), as meta `t` reports it.
fn ttl_left(expiry: u32, now: u32) -> i64 {
    if expiry == 0 {
        -1
    } else {
        i64::from(expiry) - i64::from(now)
    }
}

/// The meta commands: mn, mg, ms, md, ma (memcached 1.6 replies; `q` drops the nominal reply).
fn execute_meta(
    partition: &mut engine::Partition,
    command: &Command<'_>,
    flags: &MetaFlags<'_>,
    out: &mut Vec<u8>,
    counters: &mut Counters,
) {
    let mut key_buffer = [0u8; 256];
    let quiet = flags.quiet();
    let now = partition.now();
    match *command {
        Command::Noop => reply::meta(out, MetaCode::Mn, flags, b"", &MetaReturn::default(), None),
        Command::Get { keys, base64, .. } => {
            let raw = keys.iter().next().unwrap_or_default();
            let key = tierkv_protocol::Key { raw, base64 }.decode_into(&mut key_buffer).unwrap_or_default();
            match fetch(partition, key, flags.ttl, counters) {
                Some(item) => {
                    let info = MetaReturn {
                        key: Some(key),
                        size: Some(item.value.len()),
                        ttl: Some(ttl_left(item.expiry, now)),
                        cas: Some(item.cas),
                        client_flags: Some(item.flags),
                        ..MetaReturn::default()
                    };
                    let (code, value) =
                        if flags.has(b'v') { (MetaCode::Va, Some(item.value)) } else { (MetaCode::Hd, None) };
                    reply::meta(out, code, flags, returned::GET_HIT, &info, value);
                }
                None if !quiet => {
                    let info = MetaReturn { key: Some(key), ..MetaReturn::default() };
                    reply::meta(out, MetaCode::En, flags, returned::GET_MISS, &info, None);
                }
                None => {}
            }
        }
        Command::Store { mode, key, flags: client_flags, exptime, value, cas } => {
            counters.cmd_set += 1;
            let key = key.decode_into(&mut key_buffer).unwrap_or_default();
            let store = engine::StoreRequest { mode: store_mode(mode), key, value, flags: client_flags, exptime, cas };
            let (code, new_cas) = match partition.store(&store) {
                Ok(engine::StoreOutcome::Stored { cas }) => (MetaCode::Hd, Some(cas)),
                Ok(engine::StoreOutcome::NotStored) => (MetaCode::Ns, None),
                Ok(engine::StoreOutcome::Exists) => (MetaCode::Ex, None),
                Ok(engine::StoreOutcome::NotFound) => (MetaCode::Nf, None),
                Err(_) => return reply::error(out, &ErrorReply::Server("object too large for cache")),
            };
            if !(quiet && code == MetaCode::Hd) {
                let info = MetaReturn { key: Some(key), cas: new_cas, ..MetaReturn::default() };
                reply::meta(out, code, flags, returned::SET, &info, None);
            }
        }
        Command::Delete { key, cas } => {
            let key = key.decode_into(&mut key_buffer).unwrap_or_default();
            let code = match partition.delete(key, cas) {
                Ok(engine::DeleteOutcome::Deleted) => MetaCode::Hd,
                Ok(engine::DeleteOutcome::Exists) => MetaCode::Ex,
                Ok(engine::DeleteOutcome::NotFound) | Err(_) => MetaCode::Nf,
            };
            if !(quiet && code == MetaCode::Hd) {
                let info = MetaReturn { key: Some(key), ..MetaReturn::default() };
                reply::meta(out, code, flags, returned::DELETE, &info, None);
            }
        }
        Command::Arith { key, delta, decrement, initial, cas } => {
            let key = key.decode_into(&mut key_buffer).unwrap_or_default();
            let arith = arith_request(delta, decrement, cas, initial);
            match partition.arith(key, &arith) {
                Ok(engine::ArithOutcome::Value { value, cas }) => {
                    // The TTL needs the item again; look it up only when `t` asks for it.
                    let ttl = if flags.has(b't') {
                        partition.get(key).ok().flatten().map(|item| ttl_left(item.expiry, now))
                    } else {
                        None
                    };
                    let info = MetaReturn { key: Some(key), cas: Some(cas), ttl, ..MetaReturn::default() };
                    if flags.has(b'v') {
                        let digits = engine::CounterValue::new(value, 0);
                        reply::meta(out, MetaCode::Va, flags, returned::ARITH, &info, Some(digits.digits()));
                    } else if !quiet {
                        reply::meta(out, MetaCode::Hd, flags, returned::ARITH, &info, None);
                    }
                }
                Ok(engine::ArithOutcome::NotFound) => {
                    let info = MetaReturn { key: Some(key), ..MetaReturn::default() };
                    reply::meta(out, MetaCode::Nf, flags, returned::ARITH, &info, None);
                }
                Ok(engine::ArithOutcome::Exists) => {
                    let info = MetaReturn { key: Some(key), ..MetaReturn::default() };
                    reply::meta(out, MetaCode::Ex, flags, returned::ARITH, &info, None);
                }
                Err(engine::EngineError::NonNumeric) => {
                    reply::error(out, &ErrorReply::Client("cannot increment or decrement non-numeric value"))
                }
                Err(_) => reply::error(out, &ErrorReply::Server("out of memory")),
            }
        }
        // me (meta debug) and the rest are not served yet.
        _ => reply::error(out, &ErrorReply::Error),
    }
}

/// The binary protocol: memcached's statuses and bodies; quiet variants drop success replies
/// (and misses of gets).
fn execute_binary(
    partition: &mut engine::Partition,
    command: &Command<'_>,
    info: &BinaryRequestInfo,
    out: &mut Vec<u8>,
    counters: &mut Counters,
) -> After {
    let error = |out: &mut Vec<u8>, code: u16| binary::write_error(out, info, code);
    let success = |out: &mut Vec<u8>, cas: u64, value: &[u8]| {
        if !info.quiet {
            binary::write_response(out, info, status::SUCCESS, cas, &[], &[], value);
        }
    };
    match *command {
        Command::Get { keys, touch, .. } => {
            let key = keys.iter().next().unwrap_or_default();
            match fetch(partition, key, touch, counters) {
                Some(item) => {
                    let returned_key = if info.return_key { key } else { &[] };
                    binary::write_response(
                        out,
                        info,
                        status::SUCCESS,
                        item.cas,
                        &item.flags.to_be_bytes(),
                        returned_key,
                        item.value,
                    );
                }
                // memcached answers a GETK miss with the key and no message.
                None if info.return_key && !info.quiet => {
                    binary::write_response(out, info, status::KEY_ENOENT, 0, &[], key, &[])
                }
                None if !info.quiet => error(out, status::KEY_ENOENT),
                None => {}
            }
        }
        Command::Store { mode, key, flags, exptime, value, cas } => {
            counters.cmd_set += 1;
            let store = engine::StoreRequest { mode: store_mode(mode), key: key.raw, value, flags, exptime, cas };
            match partition.store(&store) {
                Ok(engine::StoreOutcome::Stored { cas }) => success(out, cas, &[]),
                Ok(engine::StoreOutcome::NotStored) if matches!(mode, StoreMode::Add) => {
                    error(out, status::KEY_EEXISTS)
                }
                Ok(engine::StoreOutcome::NotStored) if matches!(mode, StoreMode::Replace) => {
                    error(out, status::KEY_ENOENT)
                }
                Ok(engine::StoreOutcome::NotStored) => error(out, status::NOT_STORED),
                Ok(engine::StoreOutcome::Exists) => error(out, status::KEY_EEXISTS),
                Ok(engine::StoreOutcome::NotFound) => error(out, status::KEY_ENOENT),
                Err(_) => error(out, status::E2BIG),
            }
        }
        Command::Delete { key, cas } => match partition.delete(key.raw, cas) {
            Ok(engine::DeleteOutcome::Deleted) => success(out, 0, &[]),
            Ok(engine::DeleteOutcome::Exists) => error(out, status::KEY_EEXISTS),
            Ok(engine::DeleteOutcome::NotFound) | Err(_) => error(out, status::KEY_ENOENT),
        },
        Command::Arith { key, delta, decrement, initial, cas } => {
            let arith = arith_request(delta, decrement, cas, initial);
            match partition.arith(key.raw, &arith) {
                Ok(engine::ArithOutcome::Value { value, cas }) => success(out, cas, &value.to_be_bytes()),
                Ok(engine::ArithOutcome::NotFound) => error(out, status::KEY_ENOENT),
                Ok(engine::ArithOutcome::Exists) => error(out, status::KEY_EEXISTS),
                Err(engine::EngineError::NonNumeric) => error(out, status::DELTA_BADVAL),
                Err(_) => error(out, status::ENOMEM),
            }
        }
        Command::Touch { key, exptime } => match partition.get_and_touch(key.raw, exptime) {
            // memcached's touch reply carries the item's flags as extras.
            Ok(Some(item)) => {
                binary::write_response(out, info, status::SUCCESS, 0, &item.flags.to_be_bytes(), &[], &[])
            }
            _ => error(out, status::KEY_ENOENT),
        },
        Command::FlushAll { delay } => {
            partition.flush_all(delay);
            success(out, 0, &[]);
        }
        Command::Noop => binary::write_response(out, info, status::SUCCESS, 0, &[], &[], &[]),
        Command::Version => binary::write_response(out, info, status::SUCCESS, 0, &[], &[], VERSION.as_bytes()),
        Command::Quit => {
            success(out, 0, &[]);
            return After::Close;
        }
        Command::Stats { .. } => {
            // Only the terminating empty STAT packet for now.
            binary::write_response(out, info, status::SUCCESS, 0, &[], &[], &[]);
        }
        // No authentication is configured: memcached answers SASL opcodes with UNKNOWN_COMMAND.
        _ => error(out, status::UNKNOWN_COMMAND),
    }
    After::Continue
}
