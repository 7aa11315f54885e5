//! One worker: a mio event loop that owns the partition and every connection. Each turn reads
//! what is available, decodes and executes every complete request, and writes each
//! connection's replies with one write.

use crate::config::Settings;
use crate::execute::{execute, After};
use crate::stats::State;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tierkv_engine::{unix_now, Partition, PartitionConfig};
use tierkv_protocol::{binary, decode_request, reply, Command, Decoded, ErrorReply, Limits, Request};

const LISTENER: Token = Token(usize::MAX);
/// Replies a connection may have waiting before the server stops executing its requests (it
/// may exceed this by one reply of at most one item).
pub const MAX_PENDING_OUTPUT_BYTES: usize = 4 << 20;
/// Bytes read per read call.
const READ_CHUNK_BYTES: usize = 64 << 10;

struct Connection {
    stream: TcpStream,
    input: Vec<u8>,
    output: Vec<u8>,
    /// Bytes still to discard after an oversized request (memcached's swallow).
    swallow: usize,
    /// The error reply sent once the swallow is over, as memcached sends it.
    after_swallow: Option<ErrorReply>,
    /// Keys of the first pending multi-get already answered (it paused for the output limit).
    resume: usize,
    /// The peer closed its side (or the socket failed): read to the end of stream.
    hangup: bool,
    closing: bool,
}

/// Set by SIGINT/SIGTERM; the loop checks it every turn (at least once a second).
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn request_stop(_signal: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Makes SIGINT and SIGTERM stop the server cleanly instead of killing it mid-write.
fn install_signal_handlers() -> Result<(), String> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe; the
        // sigaction struct is zero-initialised plain data with the handler and an empty mask.
        let installed = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = request_stop as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut()) == 0
        };
        if !installed {
            return Err(format!("cannot install the handler for signal {signal}"));
        }
    }
    Ok(())
}

/// Serves until SIGINT or SIGTERM.
pub fn serve(settings: &Settings) -> Result<(), String> {
    install_signal_handlers()?;
    let config = PartitionConfig {
        memory_bytes: settings.memory_bytes,
        index_buckets: None,
        max_item_bytes: settings.max_item_bytes,
        expected_item_bytes: tierkv_engine::DEFAULT_EXPECTED_ITEM_BYTES,
    };
    let mut partition = Partition::new(&config).map_err(|e| format!("-m/--memory-limit: {e}"))?;
    let limits = Limits { max_value_bytes: settings.max_item_bytes, ..Limits::default() };
    let mut listener =
        TcpListener::bind(settings.address).map_err(|e| format!("cannot listen on {}: {e}", settings.address))?;
    let mut poll = Poll::new().map_err(|e| e.to_string())?;
    poll.registry().register(&mut listener, LISTENER, Interest::READABLE).map_err(|e| e.to_string())?;
    if settings.verbose > 0 {
        eprintln!("tierkv: listening on {} with {} MiB", settings.address, settings.memory_bytes >> 20);
    }
    let mut worker = Worker {
        connections: Vec::new(),
        free: Vec::new(),
        state: State::new(settings, unix_now()),
        chunk: vec![0u8; READ_CHUNK_BYTES],
        input_limit: input_limit(&limits),
        limits,
    };
    pin_to_first_allowed_cpu(settings.verbose > 0);
    let mut events = Events::with_capacity(1024);
    // Connections with work left over from their last turn (more input to read, or requests
    // that waited for their replies to drain); served again without waiting for an event.
    let mut again: Vec<usize> = Vec::new();
    let mut next: Vec<usize> = Vec::new();
    while !STOP.load(Ordering::Relaxed) {
        let timeout = if again.is_empty() { Duration::from_secs(1) } else { Duration::ZERO };
        match poll.poll(&mut events, Some(timeout)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.to_string()),
        }
        partition.set_clock(unix_now());
        for event in events.iter() {
            if event.token() == LISTENER {
                worker.accept(&listener, &poll)?;
            } else {
                // A short read normally means the socket is drained, but data and the peer's
                // close can arrive in one edge; then the read must go on to the end of stream.
                let hangup = event.is_read_closed() || event.is_error();
                if let Some(Some(connection)) = worker.connections.get_mut(event.token().0) {
                    connection.hangup |= hangup;
                }
                worker.turn(event.token().0, &mut partition, &poll, &mut next);
            }
        }
        for slot in again.drain(..) {
            worker.turn(slot, &mut partition, &poll, &mut next);
        }
        std::mem::swap(&mut again, &mut next);
    }
    if settings.verbose > 0 {
        eprintln!("tierkv: stopping on signal");
    }
    Ok(())
}

/// The most input a connection buffers: its largest possible request and one read more.
/// Per connection, buffers stay below this plus `MAX_PENDING_OUTPUT_BYTES` and one reply.
fn input_limit(limits: &Limits) -> usize {
    (limits.max_value_bytes + limits.max_line_bytes + 2).max(limits.max_retrieval_line_bytes()) + READ_CHUNK_BYTES
}

/// The worker's connections and the state `stats` reports.
struct Worker {
    connections: Vec<Option<Connection>>,
    free: Vec<usize>,
    state: State,
    chunk: Vec<u8>,
    limits: Limits,
    input_limit: usize,
}

/// What one turn of a connection left behind.
#[derive(PartialEq, Eq)]
enum Turn {
    /// Finished; close it.
    Close,
    /// Waiting for a read or write event.
    Wait,
    /// Work remains that no event will announce.
    Again,
}

impl Worker {
    fn accept(&mut self, listener: &TcpListener, poll: &Poll) -> Result<(), String> {
        loop {
            let (mut stream, _) = match listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Ok(()),
            };
            if self.state.curr_connections as usize >= self.state.settings.conn_limit {
                // memcached's reply, then the connection is closed.
                let _ = stream.write(b"ERROR Too many open connections\r\n");
                self.state.counters.rejected_connections += 1;
                continue;
            }
            let slot = self.free.pop().unwrap_or_else(|| {
                self.connections.push(None);
                self.connections.len() - 1
            });
            let _ = stream.set_nodelay(true);
            poll.registry()
                .register(&mut stream, Token(slot), Interest::READABLE | Interest::WRITABLE)
                .map_err(|e| e.to_string())?;
            self.connections[slot] = Some(Connection {
                stream,
                input: Vec::new(),
                output: Vec::new(),
                swallow: 0,
                after_swallow: None,
                resume: 0,
                hangup: false,
                closing: false,
            });
            self.state.curr_connections += 1;
            self.state.counters.total_connections += 1;
        }
    }

    /// One turn of the connection in `slot`: closes it when it is finished, queues it in
    /// `again` when it has work no event will announce.
    fn turn(&mut self, slot: usize, partition: &mut Partition, poll: &Poll, again: &mut Vec<usize>) {
        let Some(connection) = self.connections.get_mut(slot).and_then(Option::as_mut) else { return };
        match serve_connection(connection, partition, &self.limits, self.input_limit, &mut self.state, &mut self.chunk)
        {
            Turn::Wait => {}
            Turn::Again => again.push(slot),
            Turn::Close => {
                let _ = poll.registry().deregister(&mut connection.stream);
                self.connections[slot] = None;
                self.free.push(slot);
                self.state.curr_connections -= 1;
            }
        }
    }
}

/// Writes what is pending, reads a bounded amount, executes every complete request the output
/// limit allows, and writes the replies.
fn serve_connection(
    connection: &mut Connection,
    partition: &mut Partition,
    limits: &Limits,
    input_limit: usize,
    state: &mut State,
    chunk: &mut [u8],
) -> Turn {
    if !flush(connection, state) {
        return Turn::Close;
    }
    if connection.closing {
        // A closing connection stays until its last replies are out.
        return if connection.output.is_empty() { Turn::Close } else { Turn::Wait };
    }
    // A client that does not read its replies is not read from either, until it catches up
    // (a writable event brings it back here).
    if connection.output.len() > MAX_PENDING_OUTPUT_BYTES {
        return Turn::Wait;
    }
    let Ok(read) = read_some(connection, chunk, input_limit, state) else { return Turn::Close };
    let stopped_early = process(connection, partition, limits, state);
    if !flush(connection, state) || read == ReadEnd::Eof {
        return Turn::Close;
    }
    release_idle_buffers(connection);
    if connection.closing {
        return if connection.output.is_empty() { Turn::Close } else { Turn::Wait };
    }
    // With replies still pending the socket is full and a writable event will come; otherwise
    // leftover requests or unread input need another turn.
    if connection.output.is_empty() && (stopped_early || read == ReadEnd::Limited) {
        Turn::Again
    } else {
        Turn::Wait
    }
}

/// Buffers above this size are given back once empty, so idle connections stay small.
const KEEP_BUFFER_BYTES: usize = 256 << 10;

fn release_idle_buffers(connection: &mut Connection) {
    if connection.output.is_empty() && connection.output.capacity() > KEEP_BUFFER_BYTES {
        connection.output = Vec::new();
    }
    if connection.input.is_empty() && connection.input.capacity() > KEEP_BUFFER_BYTES {
        connection.input = Vec::new();
    }
}

/// How a read ended.
#[derive(PartialEq, Eq)]
enum ReadEnd {
    /// The socket had nothing more (a readable event will announce more).
    Drained,
    /// The input buffer reached its limit first.
    Limited,
    Eof,
}

/// Reads until the socket is drained or the input holds `input_limit` bytes.
fn read_some(
    connection: &mut Connection,
    chunk: &mut [u8],
    input_limit: usize,
    state: &mut State,
) -> io::Result<ReadEnd> {
    loop {
        if connection.input.len() >= input_limit {
            return Ok(ReadEnd::Limited);
        }
        match connection.stream.read(chunk) {
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

/// Decodes and executes every complete request in the input while the pending replies stay
/// under the limit; true if it stopped for the limit with requests left.
fn process(connection: &mut Connection, partition: &mut Partition, limits: &Limits, state: &mut State) -> bool {
    let input = &connection.input;
    let mut at = 0;
    let mut stopped_early = false;
    loop {
        if connection.swallow > 0 {
            let discard = connection.swallow.min(input.len() - at);
            at += discard;
            connection.swallow -= discard;
            if connection.swallow > 0 {
                break;
            }
            if let Some(error) = connection.after_swallow.take() {
                reply::error(&mut connection.output, &error);
            }
        }
        if at == input.len() {
            break;
        }
        if connection.output.len() > MAX_PENDING_OUTPUT_BYTES {
            stopped_early = true;
            break;
        }
        // Decode a run of complete requests, load their keys' buckets and items into cache
        // together, then execute them in order (MICA's batched pipeline, one turn's worth).
        let mut batch = [None; BATCH];
        let mut batch_len = 0;
        let mut decoded_end = at;
        let mut next = None;
        while batch_len < BATCH && decoded_end < input.len() {
            match decode_request(&input[decoded_end..], limits) {
                Decoded::Request { request, consumed } => {
                    batch[batch_len] = Some((request, consumed));
                    batch_len += 1;
                    decoded_end += consumed;
                }
                other => {
                    next = Some(other);
                    break;
                }
            }
        }
        if batch_len > 1 {
            let mut keys: [&[u8]; BATCH] = [&[]; BATCH];
            let mut key_count = 0;
            for (request, _) in batch[..batch_len].iter().flatten() {
                if let Some(key) = first_key(request) {
                    keys[key_count] = key;
                    key_count += 1;
                }
            }
            partition.prefetch_keys(&keys[..key_count]);
        }
        for (request, consumed) in batch[..batch_len].iter().flatten() {
            if connection.output.len() > MAX_PENDING_OUTPUT_BYTES {
                stopped_early = true;
                break;
            }
            match execute(partition, request, &mut connection.output, state, &mut connection.resume) {
                After::Continue => at += consumed,
                // A multi-get filled the output: the rest of its keys wait for a later turn.
                After::Pause => {
                    stopped_early = true;
                    break;
                }
                After::Close => {
                    at += consumed;
                    connection.closing = true;
                    break;
                }
            }
        }
        if stopped_early || connection.closing {
            break;
        }
        let Some(decoded) = next else { continue };
        match decoded {
            Decoded::Request { .. } => unreachable!("requests are batched above"),
            Decoded::Incomplete { .. } => break,
            Decoded::Error(error) => {
                if error.reply == ErrorReply::Server(TOO_LARGE)
                    || matches!(error.reply, ErrorReply::Binary { status, .. } if status == binary::status::E2BIG)
                {
                    state.counters.store_too_large += 1;
                }
                // memcached answers a request it swallows once the swallow is over.
                let reply = (!error.noreply).then_some(error.reply);
                let available = input.len() - at;
                if error.skip > available {
                    at = input.len();
                    connection.swallow = error.skip - available;
                    connection.after_swallow = reply;
                } else {
                    at += error.skip;
                    if let Some(reply) = reply {
                        reply::error(&mut connection.output, &reply);
                    }
                }
                if error.close {
                    connection.closing = true;
                    break;
                }
            }
        }
    }
    connection.input.drain(..at);
    stopped_early
}

/// Writes what the socket takes; false if the connection failed.
fn flush(connection: &mut Connection, state: &mut State) -> bool {
    let mut written = 0;
    while written < connection.output.len() {
        match connection.stream.write(&connection.output[written..]) {
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

/// memcached's reply to a value beyond the item size limit.
const TOO_LARGE: &str = "object too large for cache";

/// Pins the calling thread (the worker) to the first CPU the process may run on, so a
/// `taskset` or cgroup choice is honoured and the worker never migrates.
fn pin_to_first_allowed_cpu(verbose: bool) {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it and sched_setaffinity reads
    // it, both for the calling thread (pid 0) and within its size; CPU_ISSET/CPU_SET index
    // inside the set (cpu < CPU_SETSIZE).
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut allowed) != 0 {
            return;
        }
        let Some(cpu) = (0..libc::CPU_SETSIZE as usize).find(|&cpu| libc::CPU_ISSET(cpu, &allowed)) else { return };
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        let pinned = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one) == 0;
        if verbose && pinned {
            eprintln!("tierkv: worker pinned to CPU {cpu}");
        }
    }
}

/// Requests decoded and prefetched together in one step of a turn.
const BATCH: usize = 32;

/// The key whose bucket and item a request will read first (plain keys only).
fn first_key<'a>(request: &Request<'a>) -> Option<&'a [u8]> {
    match request.command {
        Command::Get { keys, base64: false, .. } => keys.iter().next(),
        Command::Store { key, .. }
        | Command::Delete { key, .. }
        | Command::Arith { key, .. }
        | Command::Touch { key, .. }
            if !key.base64 =>
        {
            Some(key.raw)
        }
        _ => None,
    }
}
