//! Executes one decoded request on the partition and appends its reply, in the protocol the
//! request came in (text, meta or binary), as memcached 1.6.18 replies.

pub(crate) use crate::after::After;
use crate::detail::Event;
use crate::outcome::{self, Outcome};
use crate::stats::{self, Counters, Group, State};
use tierkv_engine as engine;
use tierkv_engine::Engine;
use tierkv_protocol::binary::{self, status};
use tierkv_protocol::meta::MetaFlags;
use tierkv_protocol::reply::{self, returned, MetaCode, MetaReturn, Status};
use tierkv_protocol::{BinaryRequestInfo, Command, ErrorReply, ReplyStyle, Request, StoreMode};

/// The engine's store mode for a decoded one.
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

/// GET or get-and-touch of one key, counted for `stats` as memcached counts them (a gat is
/// a touch, not a get).
#[inline]
fn fetch<'p>(
    partition: &'p mut engine::AnyPartition,
    key: &[u8],
    touch: Option<i64>,
    state: &mut State,
) -> Option<engine::Item<'p>> {
    let item = match touch {
        Some(exptime) => partition.get_and_touch(key, exptime),
        None => partition.get(key),
    };
    let item = item.ok().flatten();
    state.counters.read(touch.is_some(), item.is_some());
    state.observe_get(key, item.as_ref().map(|item| item.value.len()), true);
    item
}

/// A text get's one key: its VALUE block if found (counted as `fetch` counts).
#[inline]
pub(crate) fn get_value(
    partition: &mut engine::AnyPartition,
    key: &[u8],
    return_cas: bool,
    touch: Option<i64>,
    out: &mut Vec<u8>,
    state: &mut State,
) {
    get_value_within(partition, key, return_cas, touch, out, state, usize::MAX);
}

/// `get_value` for a reply that may take at most `room` more bytes: false, with nothing
/// written, if the key's VALUE block would not fit (its size is known before it is copied).
#[inline]
pub(crate) fn get_value_within(
    partition: &mut engine::AnyPartition,
    key: &[u8],
    return_cas: bool,
    touch: Option<i64>,
    out: &mut Vec<u8>,
    state: &mut State,
    room: usize,
) -> bool {
    let Some(item) = fetch(partition, key, touch, state) else { return true };
    let cas = return_cas.then_some(item.cas);
    if reply::value_bytes(key, item.flags, item.value.len(), cas) > room {
        return false;
    }
    reply::value(out, key, item.flags, item.value, cas);
    true
}

/// A store through the engine, counted for `stats`. With `invalidate` (meta `I`) a late
/// writer's value is kept, marked stale.
fn counted_store(
    partition: &mut engine::AnyPartition,
    request: &engine::StoreRequest<'_>,
    invalidate: bool,
    state: &mut State,
) -> Result<engine::StoreOutcome, engine::EngineError> {
    if state.observe & crate::watch::FETCHERS != 0 {
        observe_store_lookup(partition, request.key, state);
    }
    let counters = &mut state.counters;
    counters.cmd_set += 1;
    let outcome = if invalidate { partition.store_invalidating(request) } else { partition.store(request) };
    match (&outcome, request.mode) {
        (Ok(engine::StoreOutcome::Stored { .. }), engine::StoreMode::Cas) => counters.cas_hits += 1,
        (Ok(engine::StoreOutcome::Exists), engine::StoreMode::Cas) => counters.cas_badval += 1,
        (Ok(engine::StoreOutcome::NotFound), engine::StoreMode::Cas) => counters.cas_misses += 1,
        (Err(engine::EngineError::ItemTooLarge { .. }), _) => counters.store_too_large += 1,
        (Err(engine::EngineError::OutOfMemory), _) => counters.store_no_memory += 1,
        _ => {}
    }
    if state.observe != 0 {
        observe_store(state, request, &outcome);
    }
    outcome
}

/// The `watch fetchers` line memcached logs for the lookup every store makes first.
#[inline(never)]
fn observe_store_lookup(partition: &mut engine::AnyPartition, key: &[u8], state: &State) {
    let size = partition.debug_item(key).ok().flatten().map(|item| item.value_len);
    state.observe_get(key, size, false);
}

/// A store's `watch mutations` line, with memcached's status and command names.
#[inline(never)]
fn observe_store(
    state: &State,
    request: &engine::StoreRequest<'_>,
    outcome: &Result<engine::StoreOutcome, engine::EngineError>,
) {
    let status = match outcome {
        Ok(engine::StoreOutcome::Stored { .. }) => "stored",
        Ok(engine::StoreOutcome::NotStored) => "not_stored",
        Ok(engine::StoreOutcome::Exists) => "exists",
        Ok(engine::StoreOutcome::NotFound) => "not_found",
        Err(engine::EngineError::OutOfMemory) => "no_memory",
        Err(engine::EngineError::ItemTooLarge { .. }) => "too_large",
        Err(
            engine::EngineError::EmptyKey
            | engine::EngineError::KeyTooLong { .. }
            | engine::EngineError::NonNumeric
            | engine::EngineError::Vector(_),
        ) => "not_stored",
    };
    let command = match request.mode {
        engine::StoreMode::Set => "set",
        engine::StoreMode::Add => "add",
        engine::StoreMode::Replace => "replace",
        engine::StoreMode::Append => "append",
        engine::StoreMode::Prepend => "prepend",
        engine::StoreMode::Cas => "cas",
    };
    state.observe_store(request.key, status, command, request.exptime, request.value.len());
}

/// A delete through the engine, counted for `stats` (and `stats detail` with `detailed`:
/// memcached counts text and binary deletes there, not meta ones).
fn counted_delete(
    partition: &mut engine::AnyPartition,
    key: &[u8],
    cas: u64,
    state: &mut State,
    detailed: bool,
) -> Result<engine::DeleteOutcome, engine::EngineError> {
    if detailed {
        state.detail(key, Event::Delete);
    }
    let outcome = partition.delete(key, cas);
    match outcome {
        Ok(engine::DeleteOutcome::Deleted) => state.counters.delete_hits += 1,
        Ok(engine::DeleteOutcome::NotFound) => state.counters.delete_misses += 1,
        _ => {}
    }
    outcome
}

/// incr/decr through the engine, counted for `stats`.
fn counted_arith(
    partition: &mut engine::AnyPartition,
    key: &[u8],
    request: &engine::ArithRequest,
    counters: &mut Counters,
) -> Result<engine::ArithOutcome, engine::EngineError> {
    let outcome = partition.arith(key, request);
    let (hits, misses) = if request.decrement {
        (&mut counters.decr_hits, &mut counters.decr_misses)
    } else {
        (&mut counters.incr_hits, &mut counters.incr_misses)
    };
    match outcome {
        Ok(engine::ArithOutcome::Value { .. }) => *hits += 1,
        Ok(engine::ArithOutcome::NotFound) => *misses += 1,
        _ => {}
    }
    outcome
}

/// touch through the engine, counted for `stats`.
fn counted_touch(partition: &mut engine::AnyPartition, key: &[u8], exptime: i64, counters: &mut Counters) -> bool {
    let hit = matches!(partition.touch(key, exptime), Ok(true));
    counters.read(true, hit);
    hit
}

/// flush_all, counted for `stats`.
fn counted_flush_all(partition: &mut engine::AnyPartition, delay: i64, counters: &mut Counters) {
    counters.cmd_flush += 1;
    partition.flush_all(delay);
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

/// How far a multi-key get has come, and the output at which it pauses (the connection's
/// limit: smaller under memory pressure).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Progress {
    /// The first key not answered yet.
    pub next_key: usize,
    /// Reply bytes past which a get with keys left pauses (`After::Pause`).
    pub output_limit: usize,
}

impl Progress {
    /// For a request answered in one go (other workers' requests, broadcasts): gets never pause.
    pub(crate) fn whole() -> Progress {
        Progress { next_key: 0, output_limit: usize::MAX }
    }
}

/// Appends the reply to `request` to `out`.
pub(crate) fn execute(
    partition: &mut engine::AnyPartition,
    request: &Request<'_>,
    out: &mut Vec<u8>,
    state: &mut State,
    progress: &mut Progress,
) -> After {
    let noreply = match request.style {
        ReplyStyle::Text { noreply } => noreply,
        ReplyStyle::Meta(flags) => {
            state.counters.cmd_meta += 1;
            execute_meta(partition, &request.command, &flags, out, state);
            return After::Continue;
        }
        ReplyStyle::Binary(info) => return execute_binary(partition, &request.command, &info, out, state),
    };
    // Replies are written to a scratch position and dropped again for noreply.
    let start = out.len();
    let after = execute_text(partition, request, out, state, progress);
    if noreply {
        out.truncate(start);
    }
    after
}

fn execute_text(
    partition: &mut engine::AnyPartition,
    request: &Request<'_>,
    out: &mut Vec<u8>,
    state: &mut State,
    progress: &mut Progress,
) -> After {
    match request.command {
        Command::Get { keys, return_cas, touch, .. } => {
            let count = keys.len();
            for (number, key) in keys.iter().enumerate().skip(progress.next_key) {
                get_value(partition, key, return_cas, touch, out, state);
                if out.len() > progress.output_limit && number + 1 < count {
                    progress.next_key = number + 1;
                    return After::Pause;
                }
            }
            progress.next_key = 0;
            reply::status(out, Status::End);
        }
        Command::Store { mode, key, flags, exptime, value, cas } => {
            state.detail(key.raw, Event::Set);
            let store = engine::StoreRequest { mode: store_mode(mode), key: key.raw, value, flags, exptime, cas };
            let result = counted_store(partition, &store, false, state);
            // memcached unlinks the old item when a plain set is refused as too large.
            if mode == StoreMode::Set && matches!(result, Err(engine::EngineError::ItemTooLarge { .. })) {
                let _ = partition.delete(key.raw, 0);
            }
            outcome::text(out, &Outcome::Store(store.mode, result));
        }
        Command::Delete { key, cas } => {
            outcome::text(out, &Outcome::Delete(counted_delete(partition, key.raw, cas, state, true)));
        }
        Command::Arith { key, delta, decrement, cas, initial } => {
            let arith = arith_request(delta, decrement, cas, initial);
            outcome::text(out, &Outcome::Arith(counted_arith(partition, key.raw, &arith, &mut state.counters)));
        }
        Command::Atomic { .. } | Command::Vector { .. } => {
            crate::atomic_run::execute_run(partition, &[request], out, state)
        }
        Command::Touch { key, exptime } => match counted_touch(partition, key.raw, exptime, &mut state.counters) {
            true => reply::status(out, Status::Touched),
            false => reply::status(out, Status::NotFound),
        },
        Command::FlushAll { .. } if !state.shared.settings.admin.flush => {
            state.counters.cmd_flush += 1;
            reply::error(out, &ErrorReply::Client("flush_all not allowed"));
        }
        Command::FlushAll { delay } => {
            counted_flush_all(partition, delay, &mut state.counters);
            reply::status(out, Status::Ok);
        }
        Command::Version => reply::version(out, crate::VERSION.as_bytes()),
        Command::Verbosity { level } => {
            state.shared.verbosity.store(level, std::sync::atomic::Ordering::Relaxed);
            reply::status(out, Status::Ok);
        }
        Command::Quit => return After::Close,
        Command::Stats { args } if crate::stats::subcommand(args) == b"detail" => {
            state.shared.detail.command(args, out);
            // Counting starts (or stops) with the next request, here at once.
            state.refresh_observe();
        }
        Command::Stats { args } if crate::stats::subcommand(args) == b"cachedump" => {
            return crate::admin::stats_cachedump(args, state, out)
        }
        Command::Stats { args } => match Group::parse(args) {
            Some(group) => {
                if group == Group::Reset {
                    state.reset(partition);
                }
                let total = state.snapshot(partition);
                stats_reply(group, None, state, &total, partition, out);
            }
            None => reply::error(out, &ErrorReply::Error),
        },
        Command::Admin { line } => return crate::admin::execute(line, partition, state, out),
        Command::Noop | Command::MetaDebug { .. } | Command::Sasl { .. } => reply::error(out, &ErrorReply::Error),
    }
    After::Continue
}

/// The reply to `stats <group>` from the figures summed over workers: text lines, or one
/// binary packet per stat and an empty one (`info` given). `Reset` only acknowledges.
pub(crate) fn stats_reply(
    group: Group,
    info: Option<&BinaryRequestInfo>,
    state: &State,
    total: &stats::Snapshot,
    partition: &engine::AnyPartition,
    out: &mut Vec<u8>,
) {
    match info {
        None if group == Group::Reset => out.extend_from_slice(b"RESET\r\n"),
        None => {
            stats::report(group, state, total, partition, &mut |name, value| {
                reply::stat(out, name.as_bytes(), value.as_bytes())
            });
            reply::status(out, Status::End);
        }
        Some(info) => {
            stats::report(group, state, total, partition, &mut |name, value| {
                binary::write_response(out, info, status::SUCCESS, 0, &[], name.as_bytes(), value.as_bytes())
            });
            binary::write_response(out, info, status::SUCCESS, 0, &[], &[], &[]);
        }
    }
}

/// Binary `stats detail on|off|dump`: memcached answers on and off with the terminator alone,
/// dump with one `detailed` stat whose value is the text dump, anything else "Not found".
fn binary_detail(args: &[u8], info: &BinaryRequestInfo, state: &mut State, out: &mut Vec<u8>) {
    let mut words = args.split(|&b| b == b' ').filter(|word| !word.is_empty()).skip(1);
    match words.next() {
        Some(word @ (b"on" | b"off" | b"dump")) => {
            let mut text = Vec::new();
            state.shared.detail.command(args, &mut text);
            state.refresh_observe();
            if word == b"dump" {
                binary::write_response(out, info, status::SUCCESS, 0, &[], b"detailed", &text);
            }
            binary::write_response(out, info, status::SUCCESS, 0, &[], &[], &[]);
        }
        _ => binary::write_error(out, info, status::KEY_ENOENT),
    }
}

/// Seconds an item has left (-1 for never), as meta `t` reports it.
fn ttl_left(expiry: u32, now: u32) -> i64 {
    if expiry == 0 {
        -1
    } else {
        i64::from(expiry) - i64::from(now)
    }
}

/// mg: the item's value and the flags asked for, or EN (memcached applies the flags in order).
fn meta_get(
    partition: &mut engine::AnyPartition,
    key: &[u8],
    flags: &MetaFlags<'_>,
    out: &mut Vec<u8>,
    state: &mut State,
    now: u32,
) {
    let ask = engine::MetaGet {
        touch: flags.ttl(),
        vivify: flags.vivify_ttl(),
        recache: flags.recache_ttl(),
        last_access: flags.return_last_access(),
    };
    let ttl_before_touch =
        if flags.ttl_before_touch() { partition.debug_item(key).ok().flatten().map(|item| item.ttl) } else { None };
    let found = partition.meta_get(key, &ask).ok().flatten();
    state.counters.read(ask.touch.is_some(), found.is_some());
    state.observe_get(key, found.as_ref().map(|found| found.item.value.len()), false);
    match found {
        Some(engine::MetaItem { item, won, last_access }) => {
            let info = MetaReturn {
                key: Some(key),
                size: Some(item.value.len()),
                ttl: Some(ttl_before_touch.unwrap_or(ttl_left(item.expiry, now))),
                cas: Some(item.cas),
                client_flags: Some(item.flags),
                last_access: Some(last_access),
                fetched: Some(item.fetched),
                won,
                stale: item.stale,
                token_sent: item.token_sent,
                previous: None,
            };
            meta_get_reply(out, key, flags, Some((info, item.value)));
        }
        None => meta_get_reply(out, key, flags, None),
    }
}

/// mg's reply: the hit's figures and value, or EN (nothing with `q`).
fn meta_get_reply(out: &mut Vec<u8>, key: &[u8], flags: &MetaFlags<'_>, hit: Option<(MetaReturn<'_>, &[u8])>) {
    match hit {
        Some((info, value)) => {
            let (code, value) = if flags.return_value() { (MetaCode::Va, Some(value)) } else { (MetaCode::Hd, None) };
            reply::meta(out, code, flags, returned::GET_HIT, &info, value);
        }
        None if !flags.quiet() => {
            let info = MetaReturn { key: Some(key), ..MetaReturn::default() };
            reply::meta(out, MetaCode::En, flags, returned::GET_MISS, &info, None);
        }
        None => {}
    }
}

/// Whether a concurrent read (`worker/crew.rs`) can answer an mg with these flags from its
/// validated copy: only the value, key, client flags, CAS, size, quiet and opaque are asked
/// for. Any other flag (a touch, a TTL, the hit bit or access time, vivify, recache, a base64
/// key) needs the owner's item.
pub(crate) fn concurrent_meta_get_allowed(flags: &MetaFlags<'_>) -> bool {
    flags.iter().all(|token| matches!(token.first(), Some(b'v' | b'k' | b'f' | b'c' | b's' | b'q' | b'O')))
}

/// mg's reply and counts from a concurrent read's copy: `hit` is (client flags, CAS, value).
pub(crate) fn concurrent_meta_get(
    out: &mut Vec<u8>,
    key: &[u8],
    flags: &MetaFlags<'_>,
    hit: Option<(u32, u64, &[u8])>,
    state: &mut State,
) {
    debug_assert!(concurrent_meta_get_allowed(flags));
    state.counters.read(false, hit.is_some());
    state.observe_get(key, hit.map(|(_, _, value)| value.len()), false);
    let hit = hit.map(|(client_flags, cas, value)| {
        let info = MetaReturn {
            key: Some(key),
            size: Some(value.len()),
            cas: Some(cas),
            client_flags: Some(client_flags),
            ..MetaReturn::default()
        };
        (info, value)
    });
    meta_get_reply(out, key, flags, hit);
}

/// A binary get's reply (GET, GETQ, GETK, GETKQ and the GAT forms): `hit` is (client flags,
/// CAS, value), from the owner's item or a concurrent read's copy.
pub(crate) fn binary_get_reply(
    out: &mut Vec<u8>,
    info: &BinaryRequestInfo,
    key: &[u8],
    hit: Option<(u32, u64, &[u8])>,
) {
    match hit {
        Some((flags, cas, value)) => {
            let returned_key = if info.return_key { key } else { &[] };
            binary::write_response(out, info, status::SUCCESS, cas, &flags.to_be_bytes(), returned_key, value);
        }
        // memcached answers a GETK miss with the key and no message.
        None if info.return_key && !info.quiet => {
            binary::write_response(out, info, status::KEY_ENOENT, 0, &[], key, &[])
        }
        None if !info.quiet => binary::write_error(out, info, status::KEY_ENOENT),
        None => {}
    }
}

/// The meta commands: mn, mg, ms, md, ma (memcached 1.6 replies; `q` drops the nominal reply).
fn execute_meta(
    partition: &mut engine::AnyPartition,
    command: &Command<'_>,
    flags: &MetaFlags<'_>,
    out: &mut Vec<u8>,
    state: &mut State,
) {
    let mut key_buffer = [0u8; 256];
    let now = partition.now();
    match *command {
        Command::Noop => reply::meta(out, MetaCode::Mn, flags, b"", &MetaReturn::default(), None),
        Command::Get { keys, base64, .. } => {
            let raw = keys.iter().next().unwrap_or_default();
            let key = tierkv_protocol::Key { raw, base64 }.decode_into(&mut key_buffer).unwrap_or_default();
            meta_get(partition, key, flags, out, state, now);
        }
        Command::Store { mode, key, flags: client_flags, exptime, value, cas } => {
            let key = key.decode_into(&mut key_buffer).unwrap_or_default();
            let store = engine::StoreRequest { mode: store_mode(mode), key, value, flags: client_flags, exptime, cas };
            let result = counted_store(partition, &store, flags.invalidate(), state);
            outcome::meta(out, flags, key, &Outcome::Store(store.mode, result), None);
        }
        Command::Delete { key, cas } => {
            let key = key.decode_into(&mut key_buffer).unwrap_or_default();
            // With I the item is marked stale instead of removed.
            let outcome = if flags.invalidate() {
                partition.invalidate(key, cas, flags.ttl())
            } else {
                counted_delete(partition, key, cas, state, false)
            };
            outcome::meta(out, flags, key, &Outcome::Delete(outcome), None);
        }
        Command::Arith { key, delta, decrement, initial, cas } => {
            let key = key.decode_into(&mut key_buffer).unwrap_or_default();
            let arith = arith_request(delta, decrement, cas, initial);
            let result = counted_arith(partition, key, &arith, &mut state.counters);
            // The TTL needs the item again; look it up only when `t` asks for it.
            let ttl = match result {
                Ok(engine::ArithOutcome::Value { .. }) if flags.return_ttl() => {
                    partition.debug_item(key).ok().flatten().map(|item| item.ttl)
                }
                _ => None,
            };
            outcome::meta(out, flags, key, &Outcome::Arith(result), ttl);
        }
        Command::Atomic { .. } | Command::Vector { .. } => {
            let request = Request { command: *command, style: ReplyStyle::Meta(*flags) };
            crate::atomic_run::execute_run(partition, &[&request], out, state);
        }
        Command::MetaDebug { key } => {
            let key = key.decode_into(&mut key_buffer).unwrap_or_default();
            match partition.debug_item(key) {
                Ok(Some(debug)) => {
                    // memcached's slab class means nothing here; size is the item's log bytes.
                    out.extend_from_slice(b"ME ");
                    out.extend_from_slice(key);
                    let fetched = if debug.fetched { "yes" } else { "no" };
                    let line = format!(
                        " exp={} la={} cas={} fetch={fetched} cls=1 size={}\r\n",
                        debug.ttl, debug.last_access, debug.cas, debug.size
                    );
                    out.extend_from_slice(line.as_bytes());
                }
                _ => out.extend_from_slice(b"EN\r\n"),
            }
        }
        _ => reply::error(out, &ErrorReply::Error),
    }
}

/// The binary protocol: memcached's statuses and bodies; quiet variants drop success replies
/// (and misses of gets).
fn execute_binary(
    partition: &mut engine::AnyPartition,
    command: &Command<'_>,
    info: &BinaryRequestInfo,
    out: &mut Vec<u8>,
    state: &mut State,
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
            let item = fetch(partition, key, touch, state);
            binary_get_reply(out, info, key, item.as_ref().map(|item| (item.flags, item.cas, item.value)));
        }
        Command::Store { mode, key, flags, exptime, value, cas } => {
            state.detail(key.raw, Event::Set);
            let store = engine::StoreRequest { mode: store_mode(mode), key: key.raw, value, flags, exptime, cas };
            let result = counted_store(partition, &store, false, state);
            outcome::binary(out, info, &Outcome::Store(store.mode, result));
        }
        Command::Delete { key, cas } => {
            outcome::binary(out, info, &Outcome::Delete(counted_delete(partition, key.raw, cas, state, true)));
        }
        Command::Arith { key, delta, decrement, initial, cas } => {
            let arith = arith_request(delta, decrement, cas, initial);
            outcome::binary(out, info, &Outcome::Arith(counted_arith(partition, key.raw, &arith, &mut state.counters)));
        }
        Command::Atomic { .. } => {
            let request = Request { command: *command, style: ReplyStyle::Binary(*info) };
            crate::atomic_run::execute_run(partition, &[&request], out, state);
        }
        Command::Touch { key, exptime } => match fetch(partition, key.raw, Some(exptime), state) {
            // memcached's touch reply carries the item's flags as extras.
            Some(item) => binary::write_response(out, info, status::SUCCESS, 0, &item.flags.to_be_bytes(), &[], &[]),
            None => error(out, status::KEY_ENOENT),
        },
        // memcached -F answers a binary flush with an authentication error.
        Command::FlushAll { .. } if !state.shared.settings.admin.flush => error(out, status::AUTH_ERROR),
        Command::FlushAll { delay } => {
            counted_flush_all(partition, delay, &mut state.counters);
            success(out, 0, &[]);
        }
        Command::Noop => binary::write_response(out, info, status::SUCCESS, 0, &[], &[], &[]),
        Command::Version => binary::write_response(out, info, status::SUCCESS, 0, &[], &[], crate::VERSION.as_bytes()),
        Command::Quit => {
            success(out, 0, &[]);
            return After::Close;
        }
        Command::Stats { args } if crate::stats::subcommand(args) == b"detail" => binary_detail(args, info, state, out),
        // One packet per stat (key = name, value = value), then an empty one.
        Command::Stats { args } => match Group::parse(args) {
            Some(group) => {
                if group == Group::Reset {
                    state.reset(partition);
                }
                let total = state.snapshot(partition);
                stats_reply(group, Some(info), state, &total, partition, out);
            }
            None => error(out, status::KEY_ENOENT),
        },
        // -S: SASL again on an authenticated connection; without it memcached answers SASL
        // opcodes with UNKNOWN_COMMAND.
        Command::Sasl { opcode, key, value } if state.shared.settings.sasl => {
            if let Some(table) = state.shared.auth.clone() {
                let outcome = crate::auth::sasl(&table, opcode, key, value, info, out);
                state.counters.sasl(outcome);
            }
        }
        _ => error(out, status::UNKNOWN_COMMAND),
    }
    After::Continue
}
