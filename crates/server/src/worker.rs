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
use tierkv_protocol::{decode_request, reply, Decoded, ErrorReply, Limits};

const LISTENER: Token = Token(usize::MAX);
/// Replies a connection may have waiting before the server stops reading its requests.
const MAX_PENDING_OUTPUT_BYTES: usize = 4 << 20;
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
    let mut connections: Vec<Option<Connection>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut state = State::new(settings, unix_now());
    pin_to_first_allowed_cpu(settings.verbose > 0);
    let mut events = Events::with_capacity(1024);
    let mut chunk = vec![0u8; READ_CHUNK_BYTES];
    while !STOP.load(Ordering::Relaxed) {
        match poll.poll(&mut events, Some(Duration::from_secs(1))) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.to_string()),
        }
        partition.set_clock(unix_now());
        for event in events.iter() {
            if event.token() == LISTENER {
                accept(&listener, &poll, &mut connections, &mut free, &mut state)?;
                continue;
            }
            let slot = event.token().0;
            let Some(connection) = connections.get_mut(slot).and_then(Option::as_mut) else { continue };
            let alive = serve_connection(connection, &mut partition, &limits, &mut state, &mut chunk);
            if !alive {
                let _ = poll.registry().deregister(&mut connection.stream);
                connections[slot] = None;
                free.push(slot);
                state.curr_connections -= 1;
            }
        }
    }
    if settings.verbose > 0 {
        eprintln!("tierkv: stopping on signal");
    }
    Ok(())
}

fn accept(
    listener: &TcpListener,
    poll: &Poll,
    connections: &mut Vec<Option<Connection>>,
    free: &mut Vec<usize>,
    state: &mut State,
) -> Result<(), String> {
    loop {
        let (mut stream, _) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return Ok(()),
        };
        if state.curr_connections as usize >= state.settings.conn_limit {
            // memcached's reply, then the connection is closed.
            let _ = stream.write(b"ERROR Too many open connections\r\n");
            state.counters.rejected_connections += 1;
            continue;
        }
        let slot = free.pop().unwrap_or_else(|| {
            connections.push(None);
            connections.len() - 1
        });
        let _ = stream.set_nodelay(true);
        poll.registry()
            .register(&mut stream, Token(slot), Interest::READABLE | Interest::WRITABLE)
            .map_err(|e| e.to_string())?;
        connections[slot] = Some(Connection {
            stream,
            input: Vec::new(),
            output: Vec::new(),
            swallow: 0,
            after_swallow: None,
            closing: false,
        });
        state.curr_connections += 1;
        state.counters.total_connections += 1;
    }
}

/// Reads, executes and writes for one ready connection; false when it is finished.
fn serve_connection(
    connection: &mut Connection,
    partition: &mut Partition,
    limits: &Limits,
    state: &mut State,
    chunk: &mut [u8],
) -> bool {
    if !flush(connection, state) {
        return false;
    }
    // A client that does not read its replies is not read from either, until it catches up
    // (a writable event brings it back here).
    if !connection.closing && connection.output.len() <= MAX_PENDING_OUTPUT_BYTES {
        let Ok(eof) = read_some(connection, chunk, state) else { return false };
        process(connection, partition, limits, state);
        if !flush(connection, state) || eof {
            return false;
        }
    }
    // A closing connection stays until its last replies are out.
    !(connection.closing && connection.output.is_empty())
}

/// Reads until a short read; true at end of stream.
fn read_some(connection: &mut Connection, chunk: &mut [u8], state: &mut State) -> io::Result<bool> {
    loop {
        match connection.stream.read(chunk) {
            Ok(0) => return Ok(true),
            Ok(n) => {
                state.counters.bytes_read += n as u64;
                connection.input.extend_from_slice(&chunk[..n]);
                if n < chunk.len() {
                    return Ok(false);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Decodes and executes every complete request in the input.
fn process(connection: &mut Connection, partition: &mut Partition, limits: &Limits, state: &mut State) {
    let input = &connection.input;
    let mut at = 0;
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
        if connection.output.len() > MAX_PENDING_OUTPUT_BYTES || at == input.len() {
            break;
        }
        match decode_request(&input[at..], limits) {
            Decoded::Request { request, consumed } => {
                at += consumed;
                if execute(partition, &request, &mut connection.output, state) == After::Close {
                    connection.closing = true;
                    break;
                }
            }
            Decoded::Incomplete { .. } => break,
            Decoded::Error(error) => {
                if error.reply == ErrorReply::Server(TOO_LARGE)
                    || matches!(error.reply, ErrorReply::Binary { status, .. } if status == tierkv_protocol::binary::status::E2BIG)
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
