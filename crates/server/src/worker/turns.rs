//! One connection turn: write what is pending, read a bounded amount, decode and batch the
//! complete requests, execute or forward them in order, write the replies.
//!
//! It must not block and must not hold more than the limits and the budget allow.

use super::auth::authenticate;
use super::connection::Turn;
use super::connection::{flush, read_some, release_idle_buffers, Connection, ReadEnd, Step};
use super::dispatch::dispatch;
use super::forwarded::Route;
use super::requests::{after_batch, discard, finish_long_get, long_get, stop_for_output, Flow, LongStep};
use super::streams::{run_dump, start_watch, watch_turn};
use super::Core;
use crate::after::After;
use crate::limits::{
    BATCH, KEEP_BUFFER_BYTES, LONG_GET_CHUNK_BYTES, MAX_PENDING_OUTPUT_BYTES, PRESSED_INPUT_BYTES, PRESSED_KEEP_BYTES,
    PRESSED_OUTPUT_BYTES, READ_CHUNK_BYTES,
};
use crate::net::Stream;
use tierkv_engine::Access;
use tierkv_engine::Engine;
use tierkv_engine::KeyHash;
use tierkv_protocol::Request;
use tierkv_protocol::{decode_request, Command, Decoded, Limits};

/// The most input a connection buffers: its largest possible request and one read more.
/// Per connection, buffers stay below this plus `MAX_PENDING_OUTPUT_BYTES` and the replies of
/// `MAX_REMOTE_READS_PER_CONNECTION` forwarded reads.
pub(super) fn input_limit(limits: &Limits) -> usize {
    limits.max_value_bytes + limits.max_line_bytes + 2 + READ_CHUNK_BYTES
}

/// Writes what is pending, reads a bounded amount, executes every complete request the limits
/// allow, and writes the replies.
pub(super) fn serve_connection(
    connection: &mut Connection,
    slot: usize,
    core: &mut Core,
    input_limit: usize,
    chunk: &mut [u8],
) -> Turn {
    // The socket's system calls are made without the partition lock, so other workers can
    // take it meanwhile (`crcw`): a write that wakes a client on this CPU may hand it the CPU,
    // and a lock held through that waits for this worker's next slice.
    core.partition.release();
    connection.drain_parts(&mut core.pool);
    if !flush(connection, &mut core.state) {
        return Turn::Close;
    }
    if connection.is_closing() {
        // A closing connection stays until its last replies are out.
        let sent = connection.output.is_empty() && !connection.stream.as_ref().is_some_and(Stream::pending_output);
        return if sent && connection.settled() { Turn::Close } else { Turn::Wait };
    }
    // A client that does not read its replies is not read from either, until it catches up
    // (a writable event brings it back here); under memory pressure, none that has replies
    // waiting (forwarded replies bring it back when they arrive).
    let pressure = core.budget.pressure();
    if connection.output.len() > MAX_PENDING_OUTPUT_BYTES || (pressure && connection.pending_bytes() > 0) {
        if connection.output.is_empty() {
            connection.blocked = true;
        }
        return Turn::Wait;
    }
    connection.output_limit = if pressure { PRESSED_OUTPUT_BYTES } else { MAX_PENDING_OUTPUT_BYTES };
    let connections = core.state.curr_connections as usize;
    let input_limit =
        if pressure { core.budget.pressed_input(connection, input_limit, connections) } else { input_limit };
    if let Some(id) = connection.watching() {
        return watch_turn(connection, id, core, chunk);
    }
    if connection.dump().is_some() {
        if let Some(turn) = run_dump(connection, slot, core) {
            return turn;
        }
    }
    core.state.fd = connection.fd;
    core.partition.release();
    let Ok(read) = read_some(connection, chunk, input_limit, &mut core.state) else { return Turn::Close };
    let (input_before, wanted_before) = (connection.input.len(), connection.wanted);
    // -Y: nothing is served before the client has authenticated.
    let stopped_early =
        (connection.authenticated() || authenticate(connection, core)) && process(connection, slot, core);
    let (taken, now) = (connection.input.len() < input_before, core.partition.now());
    if taken || stopped_early {
        // Idle kicks count from the last request taken: bytes trickled in do not count.
        connection.last_command = now;
    }
    if connection.wanted > PRESSED_INPUT_BYTES && (taken || wanted_before <= PRESSED_INPUT_BYTES) {
        // A large request begins: --request-min-rate counts from now.
        connection.request_since = now;
    }
    core.budget.finished(connection);
    if read == ReadEnd::Drained && connection.wanted > PRESSED_INPUT_BYTES {
        core.budget.ran_dry(slot, connection, std::time::Instant::now());
    }
    core.partition.release();
    connection.drain_parts(&mut core.pool);
    if !flush(connection, &mut core.state) {
        return Turn::Close;
    }
    let nothing_taken = connection.input.len() == input_before && !stopped_early && !connection.blocked;
    if pressure && read == ReadEnd::Limited && nothing_taken {
        // Nothing could be taken from a full pressed input (a request larger than it): finish
        // it if no one else is, else wait for the pressure to end or for the finisher.
        if core.budget.claim_finisher(connection) {
            return Turn::Again;
        }
        core.budget.starve(slot, connection);
        return Turn::Wait;
    }
    if read == ReadEnd::Eof && !(stopped_early || connection.blocked || connection.dump().is_some()) {
        // Requests read before the end still get their replies: the connection closes once
        // every complete request in its input has been taken.
        connection.close_after_replies();
    }
    release_idle_buffers(connection, if pressure { PRESSED_KEEP_BYTES } else { KEEP_BUFFER_BYTES });
    if connection.is_closing() {
        let sent = connection.output.is_empty() && !connection.stream.as_ref().is_some_and(Stream::pending_output);
        return if sent && connection.settled() { Turn::Close } else { Turn::Wait };
    }
    // With replies still pending the socket is full and a writable event will come; a blocked
    // connection is served again when replies arrive; otherwise leftover requests or unread
    // input need another turn.
    if connection.output.is_empty() && !connection.blocked && (stopped_early || read == ReadEnd::Limited) {
        Turn::Again
    } else {
        Turn::Wait
    }
}

/// Decodes and executes (or forwards) every complete request in the input while the limits
/// allow; true if it stopped for the output limit with requests left.
pub(super) fn process(connection: &mut Connection, slot: usize, core: &mut Core) -> bool {
    let (mut input, mut at, mut stopped_early) = (std::mem::take(&mut connection.input), 0, false);
    connection.wanted = 0;
    // Fetched bits other workers' concurrent reads handed over are set before anything runs.
    core.partition.apply_crew_notices();
    loop {
        if discard(connection, &input, &mut at, &mut core.pool) || at == input.len() {
            break;
        }
        if connection.over_output_limit() {
            stopped_early = stop_for_output(connection);
            break;
        }
        // Decode a run of complete requests, load the buckets and items of the keys this
        // worker owns into cache together, then execute them in order (MICA's batched
        // pipeline). Each request is decoded in place into its slot (120 bytes: no memcpy).
        let mut batch: [Option<Decoded<'_>>; BATCH] = [None; BATCH];
        let mut routes = [(Route::Local, None); BATCH];
        let (mut next, mut long_step) = (None, None);
        let batch_len =
            decode_batch(connection, slot, core, (&input, at), &mut batch, &mut routes, (&mut next, &mut long_step));
        if batch_len > 1 {
            prefetch_batch(core, &routes[..batch_len]);
        }
        let mut skip = 0;
        for (i, (decoded, (route, hash))) in batch[..batch_len].iter().zip(&routes).enumerate() {
            let Some(Decoded::Request { request, consumed }) = decoded else { continue };
            if let Some(bytes) = combine_atomics(connection, core, &mut skip, &batch[i..batch_len], &routes[i..]) {
                at += bytes;
                continue;
            }
            if connection.over_output_limit() {
                stopped_early = stop_for_output(connection);
                break;
            }
            let raw = &input[at..at + consumed];
            match dispatch(connection, slot, core, request, raw, *route, *hash) {
                Step::Done(After::Continue) => at += consumed,
                // A multi-get filled the output: the rest of its keys wait for a later turn.
                Step::Done(After::Pause) => {
                    stopped_early = true;
                    break;
                }
                Step::Done(After::Close) => {
                    at += consumed;
                    connection.close_after_replies();
                    break;
                }
                Step::Done(after @ (After::Dump(_) | After::Watch(_))) => {
                    at += consumed;
                    match begin_stream(connection, core, after) {
                        Some(early) => {
                            stopped_early = early;
                            break;
                        }
                        None => continue,
                    }
                }
                Step::Blocked => {
                    connection.blocked = true;
                    break;
                }
            }
        }
        if connection.watching().is_some() {
            // A watcher takes no more requests; what it sent after `watch` is dropped.
            at = input.len();
            break;
        }
        if stopped_early || connection.is_closing() || connection.blocked || connection.dump().is_some() {
            break;
        }
        let next = stopped_by(connection, next);
        let flow = match long_step {
            Some(step) => finish_long_get(connection, step, &mut input, &mut at, &mut stopped_early),
            None => after_batch(connection, slot, core, next, &mut input, &mut at, &mut stopped_early),
        };
        if let Flow::Stop = flow {
            break;
        }
    }
    connection.input = input;
    connection.input.drain(..at);
    stopped_early
}

/// Decodes a run of complete requests from `input[at..]` into `batch`, each with its route;
/// returns how many. `next` gets what stopped the run (an incomplete or invalid request),
/// `long_step` a long get line's piece taken instead (at the head of a batch of its own).
#[inline(always)]
fn decode_batch<'i>(
    connection: &mut Connection,
    slot: usize,
    core: &mut Core,
    (input, at): (&'i [u8], usize),
    batch: &mut [Option<Decoded<'i>>; BATCH],
    routes: &mut [(Route, Option<KeyHash>); BATCH],
    (next, long_step): (&mut Option<Decoded<'i>>, &mut Option<LongStep>),
) -> usize {
    let (mut batch_len, mut decoded_end) = (0, at);
    while batch_len < BATCH && decoded_end < input.len() {
        // A long get line is taken in pieces, at the head of a batch of its own, without
        // decoding (and checking) the whole of it again for every piece.
        let rest = &input[decoded_end..];
        if rest.len() > LONG_GET_CHUNK_BYTES && tierkv_protocol::text::is_long_get(rest, LONG_GET_CHUNK_BYTES) {
            if batch_len == 0 {
                *long_step = long_get(connection, slot, core, &input[at..]);
            }
            if batch_len > 0 || long_step.is_some() {
                *next = Some(Decoded::Incomplete { needed: 0 });
                break;
            }
        }
        let entry = &mut batch[batch_len];
        *entry = Some(decode_request(&input[decoded_end..], &core.limits));
        match entry {
            Some(Decoded::Request { request, consumed }) => {
                routes[batch_len] = core.route(request);
                batch_len += 1;
                decoded_end += *consumed;
            }
            other => {
                *next = other.take();
                break;
            }
        }
    }
    batch_len
}

/// How many requests from the start of `batch` form a run of atomics on one key, all local.
fn atomic_run_len(batch: &[Option<Decoded<'_>>], routes: &[(Route, Option<KeyHash>)]) -> usize {
    let Some(Decoded::Request { request: first, .. }) = &batch[0] else { return 0 };
    1 + batch[1..]
        .iter()
        .zip(&routes[1..])
        .take_while(|(decoded, (route, _))| {
            *route == Route::Local
                && matches!(decoded, Some(Decoded::Request { request, .. }) if crate::atomic_run::joins(first, request))
        })
        .count()
}

/// KV-Direct's hot-key combining: a local atomic that starts a run of atomics on its key is
/// executed with the rest of the run; returns the input bytes taken, or Some(0) for a request
/// already executed in a run (`skip` counts them), or None for anything else.
#[inline(always)]
fn combine_atomics(
    connection: &mut Connection,
    core: &mut Core,
    skip: &mut usize,
    batch: &[Option<Decoded<'_>>],
    routes: &[(Route, Option<KeyHash>)],
) -> Option<usize> {
    if *skip > 0 {
        *skip -= 1;
        return Some(0);
    }
    let Some(Decoded::Request { request, .. }) = &batch[0] else { return None };
    if !matches!(request.command, Command::Atomic { .. } | Command::Vector { .. })
        || routes[0].0 != Route::Local
        || core.parking.enabled
        || !crate::atomic_run::starts_run(request)
    {
        return None;
    }
    let run = atomic_run_len(batch, &routes[..batch.len()]);
    if run < 2 {
        return None;
    }
    *skip = run - 1;
    Some(execute_atomic_run(connection, core, &batch[..run]))
}

/// Executes a run of atomics on one key together; returns the input bytes they took.
#[inline(never)]
fn execute_atomic_run(connection: &mut Connection, core: &mut Core, run: &[Option<Decoded<'_>>]) -> usize {
    // A run is at most a batch: its requests are gathered on the stack.
    let requests: [Option<(&Request<'_>, usize)>; BATCH] = std::array::from_fn(|i| match run.get(i) {
        Some(Some(Decoded::Request { request, consumed })) => Some((request, *consumed)),
        _ => None,
    });
    let Some((first, _)) = requests[0] else { return 0 };
    let refs: [&Request<'_>; BATCH] = std::array::from_fn(|i| requests[i].map_or(first, |(request, _)| request));
    let count = requests.iter().take_while(|r| r.is_some()).count();
    let out = connection.local_out(&mut core.pool);
    crate::atomic_run::execute_run(&mut core.partition, &refs[..count], out, &mut core.state);
    requests.iter().flatten().map(|(_, consumed)| consumed).sum()
}

/// What stopped a batch, without its borrow of the input: an invalid request's error, or
/// None for an incomplete one (whose size, when the decoder knows it, is noted as wanted).
fn stopped_by(
    connection: &mut Connection,
    next: Option<Decoded<'_>>,
) -> Option<Option<tierkv_protocol::ProtocolError>> {
    if let Some(Decoded::Incomplete { needed }) = next {
        connection.wanted = needed;
    }
    next.map(|decoded| match decoded {
        Decoded::Error(error) => Some(error),
        _ => None,
    })
}

/// Starts loading the index buckets of a batch's local keys together.
#[inline]
fn prefetch_batch(core: &Core, routes: &[(Route, Option<KeyHash>)]) {
    let mut hashes = [KeyHash(0); BATCH];
    let mut count = 0;
    for (route, hash) in routes {
        if let (Route::Local, Some(hash)) = (route, hash) {
            hashes[count] = *hash;
            count += 1;
        }
    }
    core.partition.prefetch(&hashes[..count], Access::Read);
}

/// A request turned the connection into a stream (`After::Dump`, `After::Watch`): starts it.
/// None: go on with the next request; Some(early): stop taking requests (early: serve the
/// connection again without an event).
#[cold]
fn begin_stream(connection: &mut Connection, core: &mut Core, after: After) -> Option<bool> {
    match after {
        After::Dump(kind) => {
            if kind == crate::dump::DumpKind::Metadump && !connection.order.is_empty() {
                // Replies still due from other workers: memcached's refusal (the admin
                // command saw only this worker's unwritten replies).
                connection.local_out(&mut core.pool).extend_from_slice(crate::admin::METADUMP_BEHIND_REPLIES);
                return None;
            }
            connection.start_dump(crate::dump::Dump::new(kind));
            // No event announces the dump's steps: the connection goes again.
            Some(true)
        }
        After::Watch(streams) => start_watch(connection, core, streams).then_some(false),
        After::Continue | After::Pause | After::Close => None,
    }
}
