//! Connections that stream instead of answering one request at a time: watchers (`watch`),
//! dumps of the items (`lru_crawler metadump`, `stats cachedump`), and the `stats conns`
//! listing that only the worker owning the connections can write.

use super::connection::flush;
use super::connection::Turn;
use super::connection::{Connection, Phase};
use super::dispatch::forward_part;
use super::{Core, Worker};
use crate::conns::Endpoint;
use crate::limits::{DUMP_OUTPUT_BYTES, MAX_PARTS, WATCHER_BUFFER_BYTES};
use crate::net::Listener;
use crate::pending::{Kind, Learned};
use mio::Poll;
use std::io::{self, Read};
use tierkv_engine::unix_now;
use tierkv_protocol::reply;

/// Makes the connection a watcher of `streams` with memcached's replies; false if refused.
pub(super) fn start_watch(connection: &mut Connection, core: &mut Core, streams: u8) -> bool {
    if !connection.order.is_empty() {
        // Replies still due from other workers would end up behind the log lines.
        connection
            .local_out(&mut core.pool)
            .extend_from_slice(b"ERROR cannot pipeline other commands before watch\r\n");
        return false;
    }
    let out = connection.local_out(&mut core.pool);
    match core.state.shared.watchers.add(streams) {
        None => {
            out.extend_from_slice(b"WATCHER_TOO_MANY log watcher limit reached\r\n");
            false
        }
        Some(id) => {
            out.extend_from_slice(b"OK\r\n");
            connection.start_watching(id);
            core.state.refresh_observe();
            true
        }
    }
}

/// A watcher's turn: its queued log lines go out (while less than a watcher buffer waits to be
/// written), anything it sends is read and dropped, and its end of stream closes it.
pub(super) fn watch_turn(connection: &mut Connection, id: u64, core: &mut Core, chunk: &mut [u8]) -> Turn {
    if connection.output.len() < WATCHER_BUFFER_BYTES {
        core.state.shared.watchers.take(id, &mut connection.output);
    }
    if !flush(connection, &mut core.state) {
        return Turn::Close;
    }
    let ended = loop {
        let Some(stream) = connection.stream.as_mut() else { break true };
        match stream.read(chunk) {
            Ok(0) => break true,
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => break e.kind() != io::ErrorKind::WouldBlock,
        }
    };
    if ended {
        Turn::Close
    } else {
        Turn::Wait
    }
}

/// Takes the steps of a connection's dump that its output has room for; Some(turn) while the
/// dump goes on (the connection takes no requests until its END).
pub(super) fn run_dump(connection: &mut Connection, slot: usize, core: &mut Core) -> Option<Turn> {
    use crate::dump::{encode_request, step};
    while let Some(dump) = connection.dump().copied() {
        if dump.waiting {
            return Some(Turn::Wait);
        }
        if connection.pending_bytes() >= DUMP_OUTPUT_BYTES {
            if !flush(connection, &mut core.state) {
                return Some(Turn::Close);
            }
            // A socket that took less than the backlog announces room with a writable event.
            if connection.pending_bytes() >= DUMP_OUTPUT_BYTES {
                return Some(Turn::Wait);
            }
            continue;
        }
        if dump.worker == core.id {
            let out = connection.local_out(&mut core.pool);
            let start = out.len();
            let (next, items) = step(&mut core.partition, dump.kind, dump.cursor, dump.item_budget(), dump.bytes, out);
            let bytes = out.len() - start;
            let state = connection.dump_mut().expect("a dump is on");
            if state.advance(next, items, bytes, core.workers) {
                connection.end_dump();
                reply::status(connection.local_out(&mut core.pool), reply::Status::End);
            }
            continue;
        }
        if connection.order.len() >= MAX_PARTS {
            connection.blocked = true;
            return Some(Turn::Wait);
        }
        if !forward_part(connection, slot, core, dump.worker, Kind::Dump, Learned::default(), &encode_request(&dump)) {
            connection.blocked = true;
            return Some(Turn::Wait);
        }
        connection.dump_mut().expect("a dump is on").waiting = true;
    }
    // Done: the dump's END is queued; requests that followed it go on.
    None
}

/// A worker's listening sockets as `stats conns` lists them: descriptor, address, UDP.
pub(super) fn listener_addresses(
    listeners: &[(Listener, bool)],
    udp: &[Option<mio::net::UdpSocket>],
) -> Vec<(i32, Endpoint, bool)> {
    use std::os::fd::AsRawFd;
    let tcp = listeners.iter().filter_map(|(l, _)| Some((l.as_raw_fd(), l.endpoint()?, false)));
    let udp = udp.iter().flatten().filter_map(|s| Some((s.as_raw_fd(), Endpoint::Inet(s.local_addr().ok()?), true)));
    tcp.chain(udp).collect()
}

impl Worker {
    /// `stats conns` lines of this worker's sockets; `requester` is the connection asking.
    pub(super) fn conns_lines(&self, requester: Option<usize>) -> Vec<u8> {
        use crate::conns::{lines, Summary};
        let now = unix_now();
        let mut out = Vec::new();
        for (fd, addr, udp) in &self.listeners {
            let (fd, addr, udp) = (*fd, addr.clone(), *udp);
            let state = if udp { "conn_read" } else { "conn_listening" };
            let since = now.saturating_sub(self.started);
            lines(&Summary { fd, addr, listen_addr: None, udp, state, secs_since_last_cmd: since }, &mut out);
        }
        for (slot, connection) in self.connections.iter().enumerate() {
            let Some(connection) = connection else { continue };
            let Some(stream) = &connection.stream else { continue };
            let (Some(addr), Some(local)) = (stream.peer(), stream.local()) else { continue };
            let state = match connection.phase() {
                _ if requester == Some(slot) => "conn_parse_cmd",
                Phase::Closing => "conn_closing",
                Phase::Swallowing { .. } => "conn_swallow",
                _ if !connection.output.is_empty() => "conn_mwrite",
                // A request whose size the decoder knows is incomplete: a value still coming.
                _ if connection.wanted > 0 && !connection.input.is_empty() => "conn_nread",
                _ => "conn_read",
            };
            use std::os::fd::AsRawFd;
            let summary = Summary {
                fd: stream.as_raw_fd(),
                addr,
                listen_addr: Some(local),
                udp: false,
                state,
                secs_since_last_cmd: now.saturating_sub(connection.last_command),
            };
            lines(&summary, &mut out);
        }
        out
    }

    /// Writes this worker's own `stats conns` lines into the requests that wait for them.
    pub(super) fn answer_conns(&mut self, poll: &Poll) {
        for (slot, seq) in std::mem::take(&mut self.core.conns_due) {
            let lines = self.conns_lines(Some(slot));
            let Some(connection) = self.connections[slot].as_mut() else { continue };
            let Some(part) = connection.order.part_mut(seq) else { continue };
            part.bytes.extend_from_slice(&lines);
            part.waiting -= 1;
            if part.waiting == 0 {
                crate::conns::finish(&mut part.bytes);
            }
            connection.drain_parts(&mut self.core.pool);
            if connection.udp.is_some() {
                if connection.settled() && connection.is_closing() {
                    self.finish_udp(slot);
                }
            } else if !flush(connection, &mut self.core.state) {
                self.close(slot, poll);
            }
        }
    }
}
