//! tierkv's atomics in the server (docs/protocol-extensions.md). A run of consecutive atomics on
//! one key and counter kind in one connection's batch is executed with one lookup and one
//! write (KV-Direct's hot-key combining); each request still gets the reply it would have had
//! alone, in order. `--no-atomic-combining` applies them one by one, for measuring.

use crate::outcome;
use crate::stats::State;
use tierkv_engine as engine;
use tierkv_engine::Engine;
use tierkv_protocol::{AtomicCode, Command, ErrorReply, ReplyStyle, Request};

/// The engine's request for a protocol atomic.
pub fn engine_request(code: AtomicCode, signed: bool, operand: u64, operand2: u64) -> engine::AtomicRequest {
    let op = match code {
        AtomicCode::Add => engine::AtomicOp::Add(operand),
        AtomicCode::Cas => engine::AtomicOp::Cas { expected: operand, new: operand2 },
        AtomicCode::Min => engine::AtomicOp::Min(operand),
        AtomicCode::Max => engine::AtomicOp::Max(operand),
        AtomicCode::And => engine::AtomicOp::And(operand),
        AtomicCode::Or => engine::AtomicOp::Or(operand),
        AtomicCode::Xor => engine::AtomicOp::Xor(operand),
    };
    engine::AtomicRequest { op, kind: if signed { engine::CounterKind::I64 } else { engine::CounterKind::U64 } }
}

/// An atomic's key and kind, if `request` is one (text or binary).
fn key_and_kind<'a>(request: &Request<'a>) -> Option<(&'a [u8], bool)> {
    match (request.command, request.style) {
        (Command::Atomic { key, signed, .. }, ReplyStyle::Text { .. } | ReplyStyle::Binary(_)) => {
            Some((key.raw, signed))
        }
        _ => None,
    }
}

/// Whether `next` may join a run that `first` starts: atomics on the same key and kind.
pub fn joins(first: &Request<'_>, next: &Request<'_>) -> bool {
    matches!((key_and_kind(first), key_and_kind(next)), (Some(a), Some(b)) if a == b)
}

/// Executes `requests` (atomics on one key and kind, in order) and writes every reply.
pub fn execute_run(
    partition: &mut engine::AnyPartition,
    requests: &[&Request<'_>],
    out: &mut Vec<u8>,
    state: &mut State,
) {
    execute_run_marked(partition, requests, out, state, &mut |_| {});
}

/// `execute_run`, calling `mark(out.len())` after each request's reply (forwarded requests
/// come from several connections, each with its own reply span).
pub fn execute_run_marked(
    partition: &mut engine::AnyPartition,
    requests: &[&Request<'_>],
    out: &mut Vec<u8>,
    state: &mut State,
    mark: &mut dyn FnMut(usize),
) {
    let Some((key, _)) = requests.first().and_then(|r| key_and_kind(r)) else {
        for _ in requests {
            tierkv_protocol::reply::error(out, &ErrorReply::Error);
            mark(out.len());
        }
        return;
    };
    let engine_requests: Vec<engine::AtomicRequest> = requests
        .iter()
        .filter_map(|r| match r.command {
            Command::Atomic { code, signed, operand, operand2, .. } => {
                Some(engine_request(code, signed, operand, operand2))
            }
            _ => None,
        })
        .collect();
    let mut results = Vec::with_capacity(engine_requests.len());
    let combine = state.settings.atomic_combining && engine_requests.len() > 1;
    let failed = if combine {
        partition.atomic_many(key, &engine_requests, &mut results).err()
    } else {
        engine_requests.iter().try_for_each(|r| partition.atomic_many(key, std::slice::from_ref(r), &mut results)).err()
    };
    // An error writing the combined value (memory) answers every request of the run with it.
    while results.len() < engine_requests.len() {
        results.push(Err(failed.unwrap_or(engine::EngineError::OutOfMemory)));
    }
    count(state, &results, combine);
    for (request, result) in requests.iter().zip(&results) {
        let Command::Atomic { signed, .. } = request.command else { continue };
        match request.style {
            ReplyStyle::Text { noreply: false } => outcome::text_atomic(out, signed, result),
            ReplyStyle::Text { noreply: true } => {}
            ReplyStyle::Binary(info) => outcome::binary_atomic(out, &info, result),
            ReplyStyle::Meta(_) => tierkv_protocol::reply::error(out, &ErrorReply::Error),
        }
        mark(out.len());
    }
}

fn count(state: &mut State, results: &[Result<engine::AtomicOutcome, engine::EngineError>], combined: bool) {
    let c = &mut state.counters;
    c.cmd_atomic += results.len() as u64;
    let misses = results.iter().filter(|r| matches!(r, Ok(engine::AtomicOutcome::NotFound))).count() as u64;
    c.atomic_misses += misses;
    c.atomic_hits += results.len() as u64 - misses;
    if combined {
        let changes =
            results.iter().filter(|r| matches!(r, Ok(engine::AtomicOutcome::Done { old, new }) if old != new)).count()
                as u64;
        c.atomic_lookups_saved += results.len() as u64 - 1;
        c.atomic_writes_saved += changes.saturating_sub(1);
    }
}
