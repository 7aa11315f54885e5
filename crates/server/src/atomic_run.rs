//! tierkv's atomics and vectors in the server (docs/protocol-extensions.md). A run of
//! consecutive atomics on one key and counter kind, or of vector updates on one key, is
//! executed with one lookup and one write (KV-Direct's hot-key combining); each request still
//! gets the reply it would have had alone, in order. `--no-atomic-combining` applies them one
//! by one, for measuring.

use crate::outcome;
use crate::stats::{AtomicScratch, State};
use tierkv_engine as engine;
use tierkv_engine::Engine;
use tierkv_protocol::reply::{self, MetaCode, MetaReturn, Status};
use tierkv_protocol::{
    AtomicCode, Command, ErrorReply, Key, ReplyStyle, Request, VectorCall, VectorElem, VectorOpCode,
};

/// The engine's request for a protocol atomic.
pub(crate) fn engine_request(code: AtomicCode, signed: bool, operand: u64, operand2: u64) -> engine::AtomicRequest {
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

/// An atomic's key (as sent: two requests join only if they sent it alike) and kind, if
/// `request` is one.
fn key_and_kind<'a>(request: &Request<'a>) -> Option<(Key<'a>, bool)> {
    match request.command {
        Command::Atomic { key, signed, .. } => Some((key, signed)),
        _ => None,
    }
}

/// A vector update's key (text or meta).
fn vector_update_key<'a>(request: &Request<'a>) -> Option<Key<'a>> {
    match (request.command, request.style) {
        (
            Command::Vector { key, call: VectorCall::Update { .. }, .. },
            ReplyStyle::Text { .. } | ReplyStyle::Meta(_),
        ) => Some(key),
        _ => None,
    }
}

/// Whether `request` can start a run.
pub(crate) fn starts_run(request: &Request<'_>) -> bool {
    key_and_kind(request).is_some() || vector_update_key(request).is_some()
}

/// Whether `next` may join a run that `first` starts: atomics on the same key and kind, or
/// vector updates on the same key.
pub(crate) fn joins(first: &Request<'_>, next: &Request<'_>) -> bool {
    matches!((key_and_kind(first), key_and_kind(next)), (Some(a), Some(b)) if a == b)
        || matches!((vector_update_key(first), vector_update_key(next)), (Some(a), Some(b)) if a == b)
}

fn elem(e: VectorElem) -> engine::ElemType {
    match e {
        VectorElem::I64 => engine::ElemType::I64,
        VectorElem::U64 => engine::ElemType::U64,
        VectorElem::F64 => engine::ElemType::F64,
        VectorElem::F32 => engine::ElemType::F32,
    }
}

/// One vector command, or a run of vector updates on one key, each answered in order.
fn execute_vectors(
    partition: &mut engine::AnyPartition,
    requests: &[&Request<'_>],
    out: &mut Vec<u8>,
    state: &mut State,
    mark: &mut dyn FnMut(usize),
) {
    let Some(Command::Vector { key: sent, .. }) = requests.first().map(|r| r.command) else { return };
    let mut buffer = [0u8; 256];
    let key = sent.decode_into(&mut buffer).unwrap_or_default();
    let mut updates = Vec::with_capacity(requests.len());
    for request in requests {
        let Command::Vector { call, flags, exptime, .. } = request.command else { continue };
        state.counters.cmd_vector += 1;
        match call {
            VectorCall::Update { op, elem: e, offset, data } => {
                let op = match op {
                    VectorOpCode::Add => engine::VectorOp::Add,
                    VectorOpCode::Min => engine::VectorOp::Min,
                    VectorOpCode::Max => engine::VectorOp::Max,
                    VectorOpCode::Set => engine::VectorOp::Set,
                };
                updates.push((request, engine::VectorUpdate { op, elem: elem(e), offset, data }));
            }
            VectorCall::New { elem: e, len } => {
                let answer = match partition.vector_create(key, elem(e), len, flags, exptime) {
                    Ok(_) => Answer::Created,
                    Err(error) => Answer::Refused(outcome::text_error(error, false)),
                };
                answer.write(out, &request.style, key);
                mark(out.len());
            }
            VectorCall::Get { .. } | VectorCall::Len => {
                vector_read(partition, key, call, &request.style, out);
                mark(out.len());
            }
        }
    }
    if updates.is_empty() {
        return;
    }
    let only: Vec<engine::VectorUpdate<'_>> = updates.iter().map(|(_, u)| *u).collect();
    let mut results = Vec::with_capacity(only.len());
    let failed = if state.shared.settings.atomic_combining {
        partition.vector_update_many(key, &only, &mut results).err()
    } else {
        only.iter().try_for_each(|u| partition.vector_update_many(key, std::slice::from_ref(u), &mut results)).err()
    };
    while results.len() < only.len() {
        results.push(Err(failed.unwrap_or(engine::EngineError::OutOfMemory)));
    }
    if state.shared.settings.atomic_combining && only.len() > 1 {
        state.counters.atomic_lookups_saved += only.len() as u64 - 1;
    }
    for ((request, _), result) in updates.iter().zip(&results) {
        let answer = match result {
            Ok(true) => Answer::Updated,
            Ok(false) => Answer::Missing(VectorVerb::Update),
            Err(error) => Answer::Refused(outcome::text_error(*error, false)),
        };
        answer.write(out, &request.style, key);
        mark(out.len());
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum VectorVerb {
    Update,
    Get,
    Len,
}

/// What a vector command answers, before it is shaped for its protocol.
enum Answer<'v> {
    Created,
    Updated,
    /// No such key: for an update (text NOT_FOUND, meta NF), a `get` (END, EN) or a `len`
    /// (NOT_FOUND, EN).
    Missing(VectorVerb),
    Slice(&'v [u8]),
    Length(engine::ElemType, u32),
    Refused(ErrorReply),
}

impl Answer<'_> {
    /// Text: STORED, OK, NOT_FOUND, `VALUE <key> 0 <bytes>`/END, `VECTOR <type> <length>`
    /// (`noreply` drops every reply). Meta: HD, NF, EN, `VA` with the slice or with
    /// `<type> <length>` (`q` drops HD and EN).
    fn write(&self, out: &mut Vec<u8>, style: &ReplyStyle<'_>, key: &[u8]) {
        let length_text;
        let (meta_code, value) = match (self, style) {
            (_, ReplyStyle::Text { noreply: true }) | (_, ReplyStyle::Binary(_)) => return,
            (Answer::Refused(error), _) => return reply::error(out, error),
            (Answer::Created, ReplyStyle::Text { .. }) => return reply::status(out, Status::Stored),
            (Answer::Updated, ReplyStyle::Text { .. }) => return reply::status(out, Status::Ok),
            (Answer::Missing(verb), ReplyStyle::Text { .. }) => {
                return reply::status(out, if *verb == VectorVerb::Get { Status::End } else { Status::NotFound })
            }
            (Answer::Slice(data), ReplyStyle::Text { .. }) => {
                reply::value(out, key, 0, data, None);
                return reply::status(out, Status::End);
            }
            (Answer::Length(e, len), ReplyStyle::Text { .. }) => {
                let line = format!("VECTOR {} {len}\r\n", elem_name(*e));
                return out.extend_from_slice(line.as_bytes());
            }
            (Answer::Created | Answer::Updated, ReplyStyle::Meta(_)) => (MetaCode::Hd, None),
            (Answer::Missing(VectorVerb::Update), ReplyStyle::Meta(_)) => (MetaCode::Nf, None),
            (Answer::Missing(_), ReplyStyle::Meta(_)) => (MetaCode::En, None),
            (Answer::Slice(data), ReplyStyle::Meta(_)) => (MetaCode::Va, Some(*data)),
            (Answer::Length(e, len), ReplyStyle::Meta(_)) => {
                length_text = format!("{} {len}", elem_name(*e));
                (MetaCode::Va, Some(length_text.as_bytes()))
            }
        };
        let ReplyStyle::Meta(flags) = style else { return };
        if flags.quiet() && matches!(meta_code, MetaCode::Hd | MetaCode::En) {
            return;
        }
        let info = MetaReturn { key: Some(key), ..MetaReturn::default() };
        reply::meta(out, meta_code, flags, reply::returned::VECTOR, &info, value);
    }
}

fn elem_name(e: engine::ElemType) -> &'static str {
    match e {
        engine::ElemType::I64 => "i64",
        engine::ElemType::U64 => "u64",
        engine::ElemType::F64 => "f64",
        engine::ElemType::F32 => "f32",
    }
}

/// `get` (a slice) and `len` (type and length) of a vector.
fn vector_read(
    partition: &mut engine::AnyPartition,
    key: &[u8],
    call: VectorCall<'_>,
    style: &ReplyStyle<'_>,
    out: &mut Vec<u8>,
) {
    let Ok(Some(item)) = partition.get(key) else {
        let verb = if call == VectorCall::Len { VectorVerb::Len } else { VectorVerb::Get };
        return Answer::Missing(verb).write(out, style, key);
    };
    let answer = match call {
        VectorCall::Get { offset, count } => match engine::vector_slice(item.value, offset, count) {
            Ok((_, range)) => Answer::Slice(&item.value[range]),
            Err(error) => Answer::Refused(ErrorReply::Client(outcome::vector_error(error))),
        },
        _ => match engine::vector_header(item.value) {
            Some((e, len)) => Answer::Length(e, len),
            None => Answer::Refused(ErrorReply::Client("not a vector")),
        },
    };
    answer.write(out, style, key);
}

/// Executes `requests` (atomics on one key and kind, in order) and writes every reply.
pub(crate) fn execute_run(
    partition: &mut engine::AnyPartition,
    requests: &[&Request<'_>],
    out: &mut Vec<u8>,
    state: &mut State,
) {
    execute_run_marked(partition, requests, out, state, &mut |_| {});
}

/// `execute_run`, calling `mark(out.len())` after each request's reply (forwarded requests
/// come from several connections, each with its own reply span).
pub(crate) fn execute_run_marked(
    partition: &mut engine::AnyPartition,
    requests: &[&Request<'_>],
    out: &mut Vec<u8>,
    state: &mut State,
    mark: &mut dyn FnMut(usize),
) {
    if matches!(requests.first().map(|r| r.command), Some(Command::Vector { .. })) {
        return execute_vectors(partition, requests, out, state, mark);
    }
    let Some((sent, _)) = requests.first().and_then(|r| key_and_kind(r)) else {
        for _ in requests {
            tierkv_protocol::reply::error(out, &ErrorReply::Error);
            mark(out.len());
        }
        return;
    };
    let mut buffer = [0u8; 256];
    let key = sent.decode_into(&mut buffer).unwrap_or_default();
    // The engine's requests and answers go to buffers kept in `state`: no allocation per run.
    let AtomicScratch { requests: mut engine_requests, mut results } = std::mem::take(&mut state.atomic_scratch);
    engine_requests.clear();
    results.clear();
    engine_requests.extend(requests.iter().filter_map(|r| match r.command {
        Command::Atomic { code, signed, operand, operand2, .. } => {
            Some(engine_request(code, signed, operand, operand2))
        }
        _ => None,
    }));
    let combine = state.shared.settings.atomic_combining && engine_requests.len() > 1;
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
            ReplyStyle::Meta(flags) => outcome::meta_atomic(out, &flags, key, signed, result),
        }
        mark(out.len());
    }
    state.atomic_scratch = AtomicScratch { requests: engine_requests, results };
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
