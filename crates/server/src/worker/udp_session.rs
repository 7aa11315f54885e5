//! UDP sessions: a batch of datagrams becomes requests on short-lived reply connections; a
//! finished reply is framed and queued within memcached's UDP limits and the amplification
//! bound (`--udp-amplification` times the datagram, whoever the sender), then sent in batches.
//!
//! It must not keep state between datagrams beyond the reply queues.

use super::connection::Step;
use super::connection::{Connection, UdpReply};
use super::dispatch::dispatch;
use super::forwarded::Route;
use super::Worker;
use crate::after::After;
use crate::limits::{MAX_UDP_REPLY_BYTES, POOL_BUFFERS, POOL_BUFFER_BYTES, RECV_BATCH};
use std::net::SocketAddr;
use tierkv_protocol::udp::FrameHeader;
use tierkv_protocol::ReplyStyle;
use tierkv_protocol::{binary, decode_request, reply, Command, Decoded, ErrorReply};

impl Worker {
    /// Takes one batch of datagrams from UDP socket `socket` and answers or forwards every
    /// request in them; asks for another turn when the batch was full.
    pub(super) fn receive_udp(&mut self, socket: usize) {
        let (Some(udp), Some(mut receiver)) = (self.udp[socket].take(), self.receiver.take()) else { return };
        self.core.partition.apply_crew_notices();
        match receiver.receive(&udp) {
            Ok(count) => {
                for i in 0..count {
                    if let Some((peer, datagram)) = receiver.datagram(i) {
                        self.udp_datagram(socket, peer, datagram);
                    }
                }
                self.udp_again[socket] = count == RECV_BATCH;
            }
            Err(_) => self.udp_again[socket] = false,
        }
        self.udp[socket] = Some(udp);
        self.receiver = Some(receiver);
    }

    /// Every request in one datagram, executed here or forwarded to its owner; the replies go
    /// back in request order once all are in, each request's reply (and each key's of a text
    /// multi-get) its own message of datagrams, as memcached sends them.
    pub(super) fn udp_datagram(&mut self, socket: usize, peer: SocketAddr, datagram: &[u8]) {
        // Too short, or part of a multi-datagram request: dropped, as memcached drops them.
        let Ok((header, payload)) = FrameHeader::decode_request(datagram) else { return };
        let target = UdpReply {
            peer,
            request_id: header.request_id,
            socket,
            limit: self.shared.udp_amplification.saturating_mul(datagram.len()),
            binary: None,
            oversized: false,
        };
        // Replies are built only up to the bound: past it the datagram is refused whole.
        let bound = target.limit.min(MAX_UDP_REPLY_BYTES);
        let slot = self.free.pop().unwrap_or_else(|| {
            self.connections.push(None);
            self.connections.len() - 1
        });
        self.next_generation += 1;
        let connection =
            self.connections[slot].insert(Connection::new(None, Some(target), self.next_generation, false));
        connection.marks = self.mark_pool.pop().unwrap_or_default();
        connection.output_limit = bound;
        let core = &mut self.core;
        let mut at = 0;
        while at < payload.len() {
            if connection.udp_refused() {
                connection.refuse_udp();
                break;
            }
            match decode_request(&payload[at..], &core.limits) {
                Decoded::Request { request, consumed } => {
                    if let (Some(udp), ReplyStyle::Binary(info)) = (connection.udp.as_mut(), request.style) {
                        udp.binary = udp.binary.or(Some(info));
                    }
                    let (mut route, hash) = core.route(&request);
                    if matches!(request.command, Command::Get { keys, .. } if keys.len() > 1) {
                        // One message per key: the keys are read one by one wherever they live.
                        route = Route::Split;
                    }
                    let raw = &payload[at..at + consumed];
                    at += consumed;
                    match dispatch(connection, slot, core, &request, raw, route, hash) {
                        Step::Done(After::Continue) => connection.mark(),
                        // Over the largest reply: refused whole.
                        Step::Done(After::Pause) => {
                            connection.refuse_udp();
                            break;
                        }
                        // A dump streams over TCP only; over UDP it gets no reply.
                        Step::Done(After::Close | After::Dump(_) | After::Watch(_)) => break,
                        // No room to forward now: the rest is dropped, as a full receive
                        // buffer would drop it.
                        Step::Blocked => {
                            self.senders[socket].dropped += 1;
                            break;
                        }
                    }
                }
                // The rest of the datagram is not a whole request: nothing more to answer.
                Decoded::Incomplete { .. } => break,
                Decoded::Error(error) => {
                    if error.skip > payload.len() - at {
                        break;
                    }
                    at += error.skip;
                    if !error.noreply {
                        reply::error(connection.local_out(&mut core.pool), &error.reply);
                        connection.mark();
                    }
                    if error.close {
                        break;
                    }
                }
            }
        }
        // Requests forwarded and not yet answered are waited for; their replies finish it.
        connection.close_after_replies();
        if connection.settled() {
            self.finish_udp(slot);
        }
    }

    /// Sends the replies of the UDP datagram in `slot` (complete now) and frees the slot.
    pub(super) fn finish_udp(&mut self, slot: usize) {
        let Some(connection) = self.connections[slot].take() else { return };
        self.free.push(slot);
        self.core.budget.forget(&connection);
        let Some(target) = connection.udp else { return };
        // Each message is the output between two marks (empty ones send nothing).
        let messages = || {
            let starts = std::iter::once(0).chain(connection.marks.iter().copied());
            starts
                .zip(&connection.marks)
                .filter(|(start, end)| end > &start)
                .map(|(start, &end)| &connection.output[start..end])
        };
        let wire: usize = messages().map(|message| tierkv_protocol::udp::framed_bytes(message.len())).sum();
        let within = wire <= target.limit;
        let sender = &mut self.senders[target.socket];
        if target.oversized || !within || connection.output.len() > MAX_UDP_REPLY_BYTES {
            // memcached's 2018 lesson: no large reply to an address that may be forged.
            let mut refusal = Vec::new();
            match target.binary {
                Some(info) => binary::write_response(
                    &mut refusal,
                    &info,
                    binary::status::E2BIG,
                    0,
                    &[],
                    &[],
                    UDP_TOO_LARGE.as_bytes(),
                ),
                None => reply::error(&mut refusal, &ErrorReply::Server(UDP_TOO_LARGE)),
            }
            if tierkv_protocol::udp::framed_bytes(refusal.len()) <= target.limit {
                sender.queue(target.peer, |bytes, record| {
                    let _ = tierkv_protocol::udp::frame_reply(&refusal, target.request_id, bytes, record);
                });
            }
        } else if !sender.has_room(wire) {
            sender.dropped += 1;
        } else {
            for message in messages() {
                sender.queue(target.peer, |bytes, record| {
                    let _ = tierkv_protocol::udp::frame_reply(message, target.request_id, bytes, record);
                });
            }
        }
        if self.mark_pool.len() < POOL_BUFFERS && connection.marks.capacity() <= 1024 {
            let mut marks = connection.marks;
            marks.clear();
            self.mark_pool.push(marks);
        }
        if connection.output.capacity() <= POOL_BUFFER_BYTES {
            let mut buffer = connection.output;
            buffer.clear();
            if self.core.pool.len() < POOL_BUFFERS {
                self.core.pool.push(buffer);
            }
        }
    }

    /// Sends every queued UDP reply.
    pub(super) fn send_udp(&mut self) {
        for (sender, socket) in self.senders.iter_mut().zip(&self.udp) {
            if let Some(socket) = socket {
                if !sender.is_empty() {
                    sender.send(socket);
                }
            }
        }
    }
}

/// What a UDP request gets instead of a reply over the amplification bound.
pub(super) const UDP_TOO_LARGE: &str = "reply too large for UDP";
