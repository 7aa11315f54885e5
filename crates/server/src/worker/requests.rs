//! Taking requests from a connection's input beyond plain decoding: `get` lines too long to
//! take whole (answered in pieces as they arrive), requests the decoder refused (and the
//! unlink of a set refused as too large), and what a refusal leaves to discard.

use super::connection::Connection;
use super::connection::Step;
use super::dispatch::{forward_part, split_get};
use super::Core;
use crate::after::After;
use crate::limits::{LONG_GET_CHUNK_BYTES, MAX_PARTS, MAX_UNTAKEN_GET_BYTES};
use crate::pending::{Kind, Learned};
use tierkv_engine::Engine;
use tierkv_engine::KeyHash;
use tierkv_protocol::Key;
use tierkv_protocol::{binary, reply, ErrorReply};

/// How processing goes on after one step.
pub(super) enum Flow {
    /// Decode the next request.
    Next,
    /// Stop for this turn (the state says why: output limit, blocked, closing).
    Stop,
}

/// What follows a batch that ended early: nothing (None), the wait for more input or a long
/// get line's turn (Some(None)), or a refused request (Some(Some(error))).
pub(super) fn after_batch(
    connection: &mut Connection,
    slot: usize,
    core: &mut Core,
    next: Option<Option<tierkv_protocol::ProtocolError>>,
    input: &mut [u8],
    at: &mut usize,
    stopped_early: &mut bool,
) -> Flow {
    match next {
        None => Flow::Next,
        Some(None) => match long_get(connection, slot, core, &input[*at..]) {
            Some(step) => finish_long_get(connection, step, input, at, stopped_early),
            None => Flow::Stop,
        },
        Some(Some(error)) => refuse(connection, slot, core, &error, input, at),
    }
}

/// Stops for the output limit: behind a forwarded reply the wait ends when it arrives
/// (blocked); otherwise when the socket takes the output (true: stopped early).
pub(super) fn stop_for_output(connection: &mut Connection) -> bool {
    if connection.order.is_empty() {
        true
    } else {
        connection.blocked = true;
        false
    }
}

/// Discards what an earlier refusal left to skip (memcached's swallow of a refused value, or
/// the rest of a refused get line); true if everything read so far was discarded.
pub(super) fn discard(connection: &mut Connection, input: &[u8], at: &mut usize, pool: &mut Vec<Vec<u8>>) -> bool {
    let rest = &input[*at..];
    let (skip, owed, more) = connection.discard(rest.len(), || memchr::memchr(b'\n', rest));
    *at += skip;
    if let Some(error) = owed {
        reply::error(connection.local_out(pool), &error);
    }
    more
}

/// What taking a piece of a long get line did.
pub(super) enum LongStep {
    /// Its keys are answered (or on their way); the rest of the line starts with a key,
    /// `consumed` bytes in, and gets `verb` put before it.
    Taken { consumed: usize, verb: &'static [u8] },
    /// The line was refused (a key too long); its rest is being skipped.
    Refused,
    /// Stopped (output limit, forwarding room) before its keys were all answered.
    Stopped(Step),
}

/// Answers the keys at the front of a get line too long to take whole; None if `input` does
/// not start with one (then the line is decoded as usual, or waited for).
pub(super) fn long_get(connection: &mut Connection, slot: usize, core: &mut Core, input: &[u8]) -> Option<LongStep> {
    if input.len() <= LONG_GET_CHUNK_BYTES {
        return None;
    }
    let refused = |connection: &mut Connection, core: &mut Core| {
        reply::error(connection.local_out(&mut core.pool), &ErrorReply::Client("bad command line format"));
        connection.skip_line();
        connection.resume = 0;
        Some(LongStep::Refused)
    };
    match tierkv_protocol::text::long_get(input, &core.limits, LONG_GET_CHUNK_BYTES) {
        tierkv_protocol::text::LongGet::Keys { request, consumed, verb } => {
            match split_get(connection, slot, core, &request, false) {
                Step::Done(After::Continue) => Some(LongStep::Taken { consumed, verb }),
                step => Some(LongStep::Stopped(step)),
            }
        }
        tierkv_protocol::text::LongGet::BadKey => refused(connection, core),
        tierkv_protocol::text::LongGet::Wait if input.len() > MAX_UNTAKEN_GET_BYTES => refused(connection, core),
        tierkv_protocol::text::LongGet::Wait | tierkv_protocol::text::LongGet::No => None,
    }
}

/// Moves past a piece of a long get line: the rest of the line becomes a get line of its own.
pub(super) fn finish_long_get(
    connection: &mut Connection,
    step: LongStep,
    input: &mut [u8],
    at: &mut usize,
    stopped_early: &mut bool,
) -> Flow {
    match step {
        LongStep::Taken { consumed, verb } => {
            let start = *at + consumed - verb.len();
            input[start..start + verb.len()].copy_from_slice(verb);
            *at = start;
            Flow::Next
        }
        LongStep::Refused => Flow::Next,
        LongStep::Stopped(Step::Blocked) => {
            connection.blocked = true;
            Flow::Stop
        }
        LongStep::Stopped(_) => {
            *stopped_early = true;
            Flow::Stop
        }
    }
}

/// Answers a request the decoder refused, skipping it (or arranging to swallow the rest of
/// it); a set refused as too large first removes the key's old item, as memcached does.
pub(super) fn refuse(
    connection: &mut Connection,
    slot: usize,
    core: &mut Core,
    error: &tierkv_protocol::ProtocolError,
    input: &[u8],
    at: &mut usize,
) -> Flow {
    if let Some(span) = error.unlink {
        if !unlink(connection, slot, core, span.key(&input[*at..])) {
            connection.blocked = true;
            return Flow::Stop;
        }
    }
    if error.reply == ErrorReply::Server(TOO_LARGE)
        || matches!(error.reply, ErrorReply::Binary { status, .. } if status == binary::status::E2BIG)
    {
        core.state.counters.store_too_large += 1;
    }
    // memcached answers a request it swallows once the swallow is over; one that closes the
    // connection is answered at once (its body never comes).
    let reply = (!error.noreply).then_some(error.reply);
    let available = input.len() - *at;
    if error.skip > available && !error.close {
        *at = input.len();
        connection.swallow(error.skip - available, reply);
    } else {
        *at += error.skip.min(available);
        if let Some(reply) = reply {
            reply::error(connection.local_out(&mut core.pool), &reply);
        }
    }
    if error.close {
        connection.close_after_replies();
        return Flow::Stop;
    }
    Flow::Next
}

/// Removes `key`'s item wherever it lives, counting nothing (memcached's unlink after a set
/// refused as too large); false if there was no room to forward it yet.
pub(super) fn unlink(connection: &mut Connection, slot: usize, core: &mut Core, key: Key<'_>) -> bool {
    let mut buffer = [0u8; 256];
    let Some(key) = key.decode_into(&mut buffer) else { return true };
    let hash = KeyHash::of(key);
    let owner = hash.partition(core.workers as u32) as usize;
    if owner == core.id {
        let _ = core.partition.delete(key, 0);
        return true;
    }
    if connection.order.len() >= MAX_PARTS {
        return false;
    }
    forward_part(connection, slot, core, owner, Kind::Unlink, Learned { hash: hash.0, ..Learned::default() }, key)
}

/// memcached's reply to a value beyond the item size limit.
const TOO_LARGE: &str = "object too large for cache";
