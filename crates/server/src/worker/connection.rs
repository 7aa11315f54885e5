//! A connection: its socket, buffers and reply order, and the phase it is in (`Phase`), which
//! only the transitions here change; reading into and writing from its buffers.
//!
//! It must not decode or execute requests (`turns` does) and must not know other connections.

use super::order::ReplyOrder;
use super::Gather;
use crate::after::After;
use crate::dump::Dump;
use crate::limits::MAX_PENDING_OUTPUT_BYTES;
use crate::net::Stream;
use crate::stats::State;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use tierkv_protocol::{BinaryRequestInfo, ErrorReply};

/// What one turn of a connection left behind.
#[derive(PartialEq, Eq)]
pub(super) enum Turn {
    /// Finished; close it.
    Close,
    /// Waiting for a read or write event, or for replies from other workers.
    Wait,
    /// Work remains that no event will announce.
    Again,
}

/// Where a connection is in its life. Every phase but `Serving` takes no requests; the
/// transitions below are the only way a connection changes phase:
///
/// ```text
/// Authenticating --authenticated--> Serving --swallow--> Swallowing --done--> Serving
///                                   Serving --skip_line--> SkippingLine --newline--> Serving
///                                   Serving --start_dump--> Dumping --end_dump--> Serving
///                                   Serving --start_watching--> Watching
/// any phase --close_after_replies--> Closing (final: it closes once its replies are out)
/// ```
///
/// Besides its phase, a connection may wait (`blocked`: on the worker's list of connections
/// woken when forwarded replies or forwarding room arrive) and may be starved (on the budget's
/// list); those are places in the worker's queues, not phases, and any phase that takes work
/// may be in them.
pub(super) enum Phase {
    /// `-Y`: nothing is served before the client has authenticated.
    Authenticating,
    /// Taking requests.
    Serving,
    /// Discarding `bytes` more of an oversized request (memcached's swallow), then sending
    /// `then`, as memcached answers once the swallow is over.
    Swallowing { bytes: usize, then: Option<ErrorReply> },
    /// Discarding input through the next newline (the rest of a get line refused midway).
    SkippingLine,
    /// A dump of the items in progress; requests wait until its END.
    Dumping(Box<Dump>),
    /// A watcher (`watch`) with this id: it streams log lines and takes no requests.
    Watching(u64),
    /// It takes nothing more and closes once its last replies are out.
    Closing,
}

pub(super) struct Connection {
    /// The TCP socket; None for the reply to one UDP request (it has `udp`).
    pub(super) stream: Option<Stream>,
    pub(super) udp: Option<UdpReply>,
    /// For UDP: where each message ends in `output`.
    pub(super) marks: Vec<usize>,
    /// Tells this connection from an earlier one in the same slot.
    pub(super) generation: u64,
    pub(super) input: Vec<u8>,
    pub(super) output: Vec<u8>,
    /// Replies that wait for an earlier one from another worker.
    pub(super) order: ReplyOrder,
    /// Forwarded reads (`Kind::Read`, `Kind::GetKey`) not answered yet.
    pub(super) remote_reads: usize,
    pub(super) gather: Option<Box<Gather>>,
    /// Where it is in its life (see `Phase`); changed only by the transitions below.
    phase: Phase,
    /// Stopped taking requests until forwarded replies or forwarding room come back (it is on
    /// the worker's `blocked` list).
    pub(super) blocked: bool,
    /// Keys of the first pending multi-get already answered (it paused for the output limit).
    pub(super) resume: usize,
    /// When it last sent a request (Unix seconds; `stats conns`).
    pub(super) last_command: u32,
    /// Its socket's descriptor (-1 for UDP), for watch lines.
    pub(super) fd: i32,
    /// The peer closed its side (or the socket failed): read to the end of stream.
    pub(super) hangup: bool,
    /// `-Y`/`-S`: attempts that failed on this connection.
    pub(super) auth_failures: u32,
    /// `-Y`/`-S`: its source failed lately, and its next attempt waits until then (the
    /// worker parks it on a timer).
    pub(super) auth_until: Option<std::time::Instant>,
    /// Replies it may have waiting before its requests stop (set each turn: smaller under
    /// memory pressure).
    pub(super) output_limit: usize,
    /// Bytes of its buffers as last counted in the worker's `Budget`.
    pub(super) accounted: usize,
    /// It waits in the budget's starved list.
    pub(super) starved: bool,
    /// The size of the incomplete request at the front of its input, when the decoder knows.
    pub(super) wanted: usize,
    /// When its incomplete request larger than `PRESSED_INPUT_BYTES` began, or last waited on
    /// the server (Unix seconds; `--request-min-rate` counts from here).
    pub(super) request_since: u32,
}

/// Where the reply to one UDP request goes, and how large it may be.
#[derive(Clone, Copy)]
pub(super) struct UdpReply {
    pub(super) peer: SocketAddr,
    pub(super) request_id: u16,
    /// The socket it came in on (0: the shared UDP port, 1: this worker's direct port).
    pub(super) socket: usize,
    /// Reply bytes on the wire allowed (`--udp-amplification` times the datagram's size).
    pub(super) limit: usize,
    /// The first binary request's header (a too-large reply is refused in its protocol).
    pub(super) binary: Option<BinaryRequestInfo>,
    /// The reply outgrew `MAX_UDP_REPLY_BYTES` and is refused whatever the sender.
    pub(super) oversized: bool,
}

impl Connection {
    /// A connection in `Serving` (`Authenticating` with `authenticate`).
    pub(super) fn new(
        stream: Option<Stream>,
        udp: Option<UdpReply>,
        generation: u64,
        authenticate: bool,
    ) -> Connection {
        let fd = stream.as_ref().map_or(-1, std::os::fd::AsRawFd::as_raw_fd);
        Connection {
            auth_failures: 0,
            auth_until: None,
            stream,
            udp,
            marks: Vec::new(),
            generation,
            input: Vec::new(),
            output: Vec::new(),
            order: ReplyOrder::default(),
            remote_reads: 0,
            gather: None,
            phase: if authenticate { Phase::Authenticating } else { Phase::Serving },
            blocked: false,
            resume: 0,
            last_command: 0,
            fd,
            hangup: false,
            output_limit: MAX_PENDING_OUTPUT_BYTES,
            accounted: 0,
            starved: false,
            wanted: 0,
            request_since: 0,
        }
    }

    /// Its phase.
    #[inline]
    pub(super) fn phase(&self) -> &Phase {
        &self.phase
    }

    /// Whether it may be served (it is past `Authenticating`).
    #[inline]
    pub(super) fn authenticated(&self) -> bool {
        !matches!(self.phase, Phase::Authenticating)
    }

    /// Authenticating -> Serving.
    pub(super) fn grant(&mut self) {
        if matches!(self.phase, Phase::Authenticating) {
            self.phase = Phase::Serving;
        }
    }

    /// Any phase -> Closing: it takes nothing more and closes once its replies are out.
    pub(super) fn close_after_replies(&mut self) {
        self.phase = Phase::Closing;
    }

    #[inline]
    pub(super) fn is_closing(&self) -> bool {
        matches!(self.phase, Phase::Closing)
    }

    /// Serving -> Swallowing `bytes` (more than zero), then `then` goes out.
    pub(super) fn swallow(&mut self, bytes: usize, then: Option<ErrorReply>) {
        debug_assert!(matches!(self.phase, Phase::Serving), "only a serving connection refuses requests");
        if matches!(self.phase, Phase::Serving) && bytes > 0 {
            self.phase = Phase::Swallowing { bytes, then };
        }
    }

    /// Serving -> SkippingLine.
    pub(super) fn skip_line(&mut self) {
        debug_assert!(matches!(self.phase, Phase::Serving), "only a serving connection refuses requests");
        if matches!(self.phase, Phase::Serving) {
            self.phase = Phase::SkippingLine;
        }
    }

    /// Takes up to `available` bytes of input to discard in `Swallowing` or `SkippingLine`
    /// (`newline`: where the next newline is, if any): returns the bytes to drop and, once
    /// the discard is over (back to Serving), the reply owed for the refused request.
    #[inline]
    pub(super) fn discard(
        &mut self,
        available: usize,
        newline: impl FnOnce() -> Option<usize>,
    ) -> (usize, Option<ErrorReply>, bool) {
        match &mut self.phase {
            Phase::Swallowing { bytes, then } => {
                let skip = (*bytes).min(available);
                *bytes -= skip;
                if *bytes > 0 {
                    return (skip, None, true);
                }
                let then = then.take();
                self.phase = Phase::Serving;
                (skip, then, false)
            }
            Phase::SkippingLine => match newline() {
                Some(at) => {
                    self.phase = Phase::Serving;
                    (at + 1, None, false)
                }
                None => (available, None, true),
            },
            _ => (0, None, false),
        }
    }

    /// Serving -> Dumping.
    pub(super) fn start_dump(&mut self, dump: Dump) {
        debug_assert!(matches!(self.phase, Phase::Serving), "a dump starts from a request");
        if matches!(self.phase, Phase::Serving) {
            self.phase = Phase::Dumping(Box::new(dump));
        }
    }

    /// The dump in progress.
    #[inline]
    pub(super) fn dump(&self) -> Option<&Dump> {
        match &self.phase {
            Phase::Dumping(dump) => Some(dump),
            _ => None,
        }
    }

    #[inline]
    pub(super) fn dump_mut(&mut self) -> Option<&mut Dump> {
        match &mut self.phase {
            Phase::Dumping(dump) => Some(dump),
            _ => None,
        }
    }

    /// Dumping -> Serving (its END is written).
    pub(super) fn end_dump(&mut self) {
        if matches!(self.phase, Phase::Dumping(_)) {
            self.phase = Phase::Serving;
        }
    }

    /// Serving -> Watching.
    pub(super) fn start_watching(&mut self, id: u64) {
        debug_assert!(matches!(self.phase, Phase::Serving), "a watch starts from a request");
        if matches!(self.phase, Phase::Serving) {
            self.phase = Phase::Watching(id);
        }
    }

    /// The watcher id, if it is one.
    #[inline]
    pub(super) fn watching(&self) -> Option<u64> {
        match self.phase {
            Phase::Watching(id) => Some(id),
            _ => None,
        }
    }

    /// Bytes its buffers hold (their capacities), for the budget.
    #[inline]
    pub(super) fn buffer_bytes(&self) -> usize {
        let parts = self.order.buffer_bytes();
        self.input.capacity() + self.output.capacity() + self.marks.capacity() * 8 + parts
    }

    /// Where a reply produced now goes (see `ReplyOrder::local_out`).
    #[inline]
    pub(super) fn local_out(&mut self, pool: &mut Vec<Vec<u8>>) -> &mut Vec<u8> {
        self.order.local_out(&mut self.output, pool)
    }

    /// Moves completed replies at the front of the order to the output.
    #[inline]
    pub(super) fn drain_parts(&mut self, pool: &mut Vec<Vec<u8>>) {
        self.order.drain(&mut self.output, &mut self.marks, pool);
    }

    /// Ends one UDP message here (after every reply given so far).
    #[inline]
    pub(super) fn mark(&mut self) {
        self.order.mark(self.output.len(), &mut self.marks);
    }

    /// Reply bytes waiting to be written: the output and the parts behind a forwarded reply.
    #[inline]
    pub(super) fn pending_bytes(&self) -> usize {
        self.output.len() + self.order.pending_bytes()
    }

    /// Whether replies waiting to be written have reached the limit.
    #[inline]
    /// Forwarded reads it may have outstanding (fewer for a UDP datagram).
    pub(super) fn remote_read_limit(&self) -> usize {
        if self.udp.is_some() {
            crate::limits::MAX_UDP_REMOTE_READS
        } else {
            crate::limits::MAX_REMOTE_READS_PER_CONNECTION
        }
    }

    /// A UDP datagram's replies: the bytes still allowed before the amplification bound (None
    /// for a stream connection, whose replies only pause).
    pub(super) fn udp_room(&self) -> Option<usize> {
        self.udp.as_ref()?;
        Some(self.output_limit.saturating_sub(self.output.len() + self.pending_bytes()))
    }

    /// A UDP datagram whose replies would pass the bound: refused whole, nothing more built.
    pub(super) fn udp_refused(&self) -> bool {
        self.udp.as_ref().is_some_and(|udp| udp.oversized) || (self.udp.is_some() && self.over_output_limit())
    }

    /// A UDP datagram's replies are refused whole (nothing more is built for it).
    pub(super) fn refuse_udp(&mut self) {
        if let Some(udp) = self.udp.as_mut() {
            udp.oversized = true;
        }
    }

    pub(super) fn over_output_limit(&self) -> bool {
        self.output.len() > self.output_limit || (!self.order.is_empty() && self.pending_bytes() > self.output_limit)
    }

    /// Whether everything it was asked has been answered into `output`.
    #[inline]
    pub(super) fn settled(&self) -> bool {
        self.order.is_empty()
    }
}

#[inline]
pub(super) fn release_idle_buffers(connection: &mut Connection, keep: usize) {
    if connection.output.is_empty() && connection.output.capacity() > keep {
        connection.output = Vec::new();
    }
    if connection.input.is_empty() && connection.input.capacity() > keep {
        connection.input = Vec::new();
    }
}

/// How a read ended.
#[derive(PartialEq, Eq)]
pub(super) enum ReadEnd {
    /// The socket had nothing more (a readable event will announce more).
    Drained,
    /// The input buffer reached its limit first.
    Limited,
    Eof,
}

/// Reads until the socket is drained or the input holds `input_limit` bytes.
#[inline]
pub(super) fn read_some(
    connection: &mut Connection,
    chunk: &mut [u8],
    input_limit: usize,
    state: &mut State,
) -> io::Result<ReadEnd> {
    loop {
        if connection.input.len() >= input_limit {
            return Ok(ReadEnd::Limited);
        }
        let Some(stream) = connection.stream.as_mut() else { return Ok(ReadEnd::Drained) };
        let room = (input_limit - connection.input.len()).min(chunk.len());
        let chunk = &mut chunk[..room];
        match stream.read(chunk) {
            Ok(0) => return Ok(ReadEnd::Eof),
            Ok(n) => {
                state.counters.bytes_read += n as u64;
                connection.input.extend_from_slice(&chunk[..n]);
                if n < chunk.len() && !connection.hangup {
                    return Ok(ReadEnd::Drained);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(ReadEnd::Drained),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// How one request went.
pub(super) enum Step {
    Done(After),
    /// Not taken (no room to forward, or too much waiting): try again after replies arrive.
    Blocked,
}

/// Writes what the socket takes; false if the connection failed. (A UDP reply is sent whole
/// when it is complete, not here.)
#[inline]
pub(super) fn flush(connection: &mut Connection, state: &mut State) -> bool {
    let Some(stream) = connection.stream.as_mut() else { return true };
    // TLS: the records of earlier writes leave first (a no-op for sockets).
    if let Err(e) = stream.flush() {
        if e.kind() != io::ErrorKind::WouldBlock {
            return false;
        }
    }
    let mut written = 0;
    while written < connection.output.len() {
        match stream.write(&connection.output[written..]) {
            Ok(0) => return false,
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
    connection.output.drain(..written);
    state.counters.bytes_written += written as u64;
    true
}
