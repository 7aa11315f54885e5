//! One worker: a mio event loop that owns the partition and every connection. Each turn reads
//! what is available, decodes and executes every complete request, and writes each
//! connection's replies with one write.

use crate::config::Settings;
use crate::execute::{execute, After, Counters};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tierkv_engine::{unix_now, Partition, PartitionConfig};
use tierkv_protocol::{decode_request, reply, Decoded, Limits};

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
    let mut open = 0usize;
    let mut counters = Counters::default();
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
                accept(&listener, &poll, &mut connections, &mut free, &mut open, settings)?;
                continue;
            }
            let slot = event.token().0;
            let Some(connection) = connections.get_mut(slot).and_then(Option::as_mut) else { continue };
            let alive = serve_connection(connection, &mut partition, &limits, &mut counters, &mut chunk);
            if !alive {
                let _ = poll.registry().deregister(&mut connection.stream);
                connections[slot] = None;
                free.push(slot);
                open -= 1;
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
    open: &mut usize,
    settings: &Settings,
) -> Result<(), String> {
    loop {
        let (mut stream, _) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return Ok(()),
        };
        if *open >= settings.conn_limit {
            // memcached's reply, then the connection is closed.
            let _ = stream.write(b"ERROR Too many open connections\r\n");
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
        connections[slot] =
            Some(Connection { stream, input: Vec::new(), output: Vec::new(), swallow: 0, closing: false });
        *open += 1;
    }
}

/// Reads, executes and writes for one ready connection; false when it is finished.
fn serve_connection(
    connection: &mut Connection,
    partition: &mut Partition,
    limits: &Limits,
    counters: &mut Counters,
    chunk: &mut [u8],
) -> bool {
    if !flush(connection) {
        return false;
    }
    // A client that does not read its replies is not read from either, until it catches up
    // (a writable event brings it back here).
    if !connection.closing && connection.output.len() <= MAX_PENDING_OUTPUT_BYTES {
        let Ok(eof) = read_some(connection, chunk) else { return false };
        process(connection, partition, limits, counters);
        if !flush(connection) || eof {
            return false;
        }
    }
    // A closing connection stays until its last replies are out.
    !(connection.closing && connection.output.is_empty())
}

/// Reads until a short read; true at end of stream.
fn read_some(connection: &mut Connection, chunk: &mut [u8]) -> io::Result<bool> {
    loop {
        match connection.stream.read(chunk) {
            Ok(0) => return Ok(true),
            Ok(n) => {
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
fn process(connection: &mut Connection, partition: &mut Partition, limits: &Limits, counters: &mut Counters) {
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
        }
        if connection.output.len() > MAX_PENDING_OUTPUT_BYTES || at == input.len() {
            break;
        }
        match decode_request(&input[at..], limits) {
            Decoded::Request { request, consumed } => {
                at += consumed;
                if execute(partition, &request, &mut connection.output, counters) == After::Close {
                    connection.closing = true;
                    break;
                }
            }
            Decoded::Incomplete { .. } => break,
            Decoded::Error(error) => {
                if !error.noreply {
                    reply::error(&mut connection.output, &error.reply);
                }
                let available = input.len() - at;
                if error.skip > available {
                    at = input.len();
                    connection.swallow = error.skip - available;
                } else {
                    at += error.skip;
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
fn flush(connection: &mut Connection) -> bool {
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
    true
}
