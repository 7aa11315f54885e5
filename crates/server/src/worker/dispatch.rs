//! Where one decoded request goes: executed here, forwarded to its owner as the next part of
//! the connection's reply order, or split (a multi-get over several owners) into single-key
//! lines.
//!
//! It must not read or write sockets.

use super::connection::Connection;
use super::connection::Step;
use super::forwarded::Route;
use super::order::Part;
use super::{Core, Gather};
use crate::after::After;
use crate::execute::{execute, get_value_within, Progress};
use crate::limits::MAX_PARTS;
use crate::pending::{Kind, Learned, Pending};
use tierkv_engine::KeyHash;
use tierkv_protocol::{reply, Command};
use tierkv_protocol::{ReplyStyle, Request};

/// Forwards one request to `owner` as the next part of the connection's reply order (the
/// owner's reply fills the part); false if the queue to `owner` has no room.
pub(super) fn forward_part(
    connection: &mut Connection,
    slot: usize,
    core: &mut Core,
    owner: usize,
    kind: Kind,
    learned: Learned,
    request: &[u8],
) -> bool {
    let seq = connection.order.next_seq();
    let pending = Pending::new(slot, connection.generation, connection.fd, seq, kind, learned);
    if !core.links.forward(owner, pending, &[request]) {
        return false;
    }
    connection.order.push_waiting(core.pool.pop().unwrap_or_default(), 1);
    true
}

/// Executes one request here or hands it to the workers that must see it.
pub(super) fn dispatch(
    connection: &mut Connection,
    slot: usize,
    core: &mut Core,
    request: &Request<'_>,
    raw: &[u8],
    route: Route,
    hash: Option<KeyHash>,
) -> Step {
    let read = matches!(request.command, Command::Get { .. });
    if route != Route::Local
        && (connection.order.len() >= MAX_PARTS || (read && connection.remote_reads >= connection.remote_read_limit()))
    {
        return Step::Blocked;
    }
    let fd = connection.fd;
    let entry = |seq: u64, kind: Kind| Pending::new(slot, connection.generation, fd, seq, kind, Learned::default());
    match route {
        Route::AfterForwarded if !connection.order.is_empty() => Step::Blocked,
        Route::Local if core.parking.enabled && hash.is_some() => {
            if connection.order.len() >= MAX_PARTS
                || (read && connection.remote_reads >= connection.remote_read_limit())
            {
                return Step::Blocked;
            }
            let kind = if read { Kind::Read } else { Kind::Request };
            if core.park_local(connection, slot, Learned::of(request, raw, hash), raw, kind) {
                return Step::Done(After::Continue);
            }
            let mut progress = Progress { next_key: connection.resume, output_limit: connection.output_limit };
            let out = connection.local_out(&mut core.pool);
            let after = execute(&mut core.partition, request, out, &mut core.state, &mut progress);
            connection.resume = progress.next_key;
            Step::Done(after)
        }
        Route::Local | Route::AfterForwarded => {
            let mut progress = Progress { next_key: connection.resume, output_limit: connection.output_limit };
            let out = connection.local_out(&mut core.pool);
            let after = execute(&mut core.partition, request, out, &mut core.state, &mut progress);
            connection.resume = progress.next_key;
            Step::Done(after)
        }
        Route::Remote(owner) => remote(connection, slot, core, owner, request, raw, hash),
        Route::Split => split_get(connection, slot, core, request, true),
        Route::Conns => {
            if !core.links.can_forward_to_all() || connection.order.len() >= MAX_PARTS {
                return Step::Blocked;
            }
            let seq = connection.order.next_seq();
            for owner in (0..core.workers).filter(|&owner| owner != core.id) {
                let forwarded = core.links.forward(owner, entry(seq, Kind::Conns), &[]);
                debug_assert!(forwarded, "room was checked for every worker");
            }
            // This worker's own lines are written after the turn (`Worker::answer_conns`).
            connection.order.push_waiting(core.pool.pop().unwrap_or_default(), core.workers);
            core.conns_due.push((slot, seq));
            Step::Done(After::Continue)
        }
        Route::Flush(_) | Route::Reset | Route::Gather(_) => {
            if !core.links.can_forward_to_all() || (connection.gather.is_some() && matches!(route, Route::Gather(_))) {
                return Step::Blocked;
            }
            let seq = connection.order.next_seq();
            let kind = match route {
                Route::Flush(delay) => Kind::Flush { delay },
                Route::Reset => Kind::Reset,
                _ => Kind::Snapshot,
            };
            for owner in (0..core.workers).filter(|&owner| owner != core.id) {
                let forwarded = core.links.forward(owner, entry(seq, kind), &[]);
                debug_assert!(forwarded, "room was checked for every worker");
            }
            let mut part = Part::waiting_for(core.pool.pop().unwrap_or_default(), core.workers - 1);
            match route {
                // Executed here as usual (counted once); the other workers only flush or reset.
                Route::Flush(_) | Route::Reset => {
                    execute(&mut core.partition, request, &mut part.bytes, &mut core.state, &mut Progress::whole());
                }
                Route::Gather(group) => {
                    let binary = match request.style {
                        ReplyStyle::Binary(info) => Some(info),
                        _ => None,
                    };
                    let total = core.state.snapshot(&core.partition);
                    connection.gather = Some(Box::new(Gather { seq, total, group, binary }));
                }
                _ => unreachable!("broadcast routes only"),
            }
            connection.order.push_part(part);
            Step::Done(After::Continue)
        }
    }
}

/// One request of a key `owner` owns: read here concurrently, executed here under the owner's
/// lock, or forwarded (`crew.rs`).
fn remote(
    connection: &mut Connection,
    slot: usize,
    core: &mut Core,
    owner: usize,
    request: &Request<'_>,
    raw: &[u8],
    hash: Option<KeyHash>,
) -> Step {
    let read = matches!(request.command, Command::Get { .. });
    if read && core.crew_get(connection, owner, request, hash) {
        return Step::Done(After::Continue);
    }
    if let Some(after) = core.locked_execute(connection, owner, request) {
        return Step::Done(after);
    }
    let kind = if read { Kind::Read } else { Kind::Request };
    if !forward_part(connection, slot, core, owner, kind, Learned::of(request, raw, hash), raw) {
        return Step::Blocked;
    }
    connection.remote_reads += usize::from(read);
    core.state.counters.forwarded_requests += 1;
    Step::Done(After::Continue)
}

/// A multi-key text get whose keys several workers own: each key is read where it lives, as
/// its own part of the reply order, and one END follows them all (with `end`; without, more
/// keys of the same line follow).
pub(super) fn split_get(
    connection: &mut Connection,
    slot: usize,
    core: &mut Core,
    request: &Request<'_>,
    end: bool,
) -> Step {
    let Command::Get { keys, return_cas, touch, .. } = request.command else {
        unreachable!("only text gets are split")
    };
    for (number, key) in keys.iter().enumerate().skip(connection.resume) {
        if connection.udp_refused() {
            // Past a UDP reply's bound: the datagram is refused whole (`udp_datagram`).
            return Step::Done(After::Pause);
        }
        if connection.order.len() >= MAX_PARTS || connection.remote_reads >= connection.remote_read_limit() {
            connection.resume = number;
            return Step::Blocked;
        }
        let hash = KeyHash::of(key);
        let owner = hash.partition(core.workers as u32) as usize;
        let (kind, learned) = (Kind::GetKey { cas: return_cas, touch }, Learned::of_key(key, hash, touch.is_some()));
        if owner == core.id && core.parking.enabled && core.park_local(connection, slot, learned, key, kind) {
            if connection.udp.is_some() && number + 1 < keys.len() {
                connection.mark();
            }
            continue;
        }
        if owner == core.id {
            let room = connection.udp_room().unwrap_or(usize::MAX);
            let out = connection.local_out(&mut core.pool);
            if !get_value_within(&mut core.partition, key, return_cas, touch, out, &mut core.state, room) {
                return Step::Done(After::Pause);
            }
            if connection.over_output_limit() && number + 1 < keys.len() {
                connection.resume = number + 1;
                return Step::Done(After::Pause);
            }
            if connection.udp.is_some() && number + 1 < keys.len() {
                connection.mark();
            }
            continue;
        }
        if (touch.is_none() && core.crew_get_key(connection, owner, key, hash, return_cas))
            || core.locked_get_key(connection, owner, key, return_cas, touch)
        {
            if connection.udp.is_some() && number + 1 < keys.len() {
                connection.mark();
            }
            continue;
        }
        // The owner answers the key with its VALUE (or nothing), no END.
        if !forward_part(connection, slot, core, owner, kind, learned, key) {
            connection.resume = number;
            return Step::Blocked;
        }
        connection.remote_reads += 1;
        core.state.counters.forwarded_requests += 1;
        if connection.udp.is_some() && number + 1 < keys.len() {
            connection.mark();
        }
    }
    connection.resume = 0;
    if end {
        reply::status(connection.local_out(&mut core.pool), reply::Status::End);
    }
    Step::Done(After::Continue)
}
