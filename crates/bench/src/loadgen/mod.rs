//! The closed-loop load generator behind `tierkv-bench run`: many connections on one thread,
//! each keeping `pipeline` single-key requests in flight, encoded into one buffer and sent with
//! one write per round; every reply parsed in place and checked against its request.

use crate::resp;
use crate::workload::{key_sequence, write_text_key, Distribution, Rng};
use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tierkv_protocol::client::{decode_reply, quick, Reply, ReplyDecoded};
use tierkv_protocol::reply::{MetaCode, Status};
use tierkv_protocol::{binary, Limits};

mod measure;
pub mod tls;
mod udp;
pub use measure::{measure, pin_to_cpu, process_cpu_seconds, Measurement};
use udp::*;

/// The protocol the generator speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    /// memcached's text protocol.
    Text,
    /// memcached's meta protocol.
    Meta,
    /// memcached's binary protocol.
    Binary,
    /// Redis's RESP.
    Resp,
}

/// One run's settings.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The server's address.
    pub target: SocketAddr,
    /// The protocol spoken.
    pub protocol: Protocol,
    /// The share of requests that are gets (the rest are sets).
    pub get_ratio: f64,
    /// Distinct keys.
    pub keys: u64,
    /// Bytes per key.
    pub key_bytes: usize,
    /// Bytes per value, smallest and largest.
    pub value_bytes: (usize, usize),
    /// How keys are drawn.
    pub dist: Distribution,
    /// Client connections.
    pub connections: usize,
    /// Requests each connection keeps in flight.
    pub pipeline: usize,
    /// How long the run lasts.
    pub seconds: f64,
    /// Set every key before the run.
    pub preload: bool,
    /// The random seed (runs with one seed draw the same keys).
    pub seed: u64,
    /// Open loop at this many operations per second (None: closed loop).
    pub rate: Option<f64>,
    /// Closed loop with a sliding window (memtier's pipelining, fio's queue depth): each
    /// connection sends a new request as each reply arrives, keeping `pipeline` in flight,
    /// instead of waiting for its whole round.
    pub window: bool,
    /// Load-generating threads; connections (and the open-loop rate) are split between them.
    pub threads: usize,
    /// Request direction (closed loop only): the address of each partition of a tierkv
    /// server. Every connection becomes one socket per partition, and each request goes to the
    /// socket of the partition that owns its key (`tierkv_client::partition_of`).
    pub direct: Option<Vec<SocketAddr>>,
    /// memcached's UDP protocol instead of TCP: every connection is a UDP socket with one
    /// request (one datagram) in flight (text or binary protocol; the preload uses TCP).
    pub udp: bool,
    /// TLS (a server started with `-Z`): the client configuration every connection uses.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl RunResult {
    /// Nothing measured yet.
    pub fn empty() -> Result<RunResult, String> {
        let latency_ns = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).map_err(|e| e.to_string())?;
        Ok(RunResult {
            operations: 0,
            gets: 0,
            get_hits: 0,
            refused_sets: 0,
            lost: 0,
            elapsed: Duration::ZERO,
            latency_ns,
        })
    }
}

/// What a run measured.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// Requests answered.
    pub operations: u64,
    /// Gets among them.
    pub gets: u64,
    /// Gets that found their key.
    pub get_hits: u64,
    /// SETs refused for lack of memory.
    pub refused_sets: u64,
    /// UDP requests whose reply did not come within `UDP_REPLY_TIMEOUT` (not counted as
    /// operations).
    pub lost: u64,
    /// How long the run took.
    pub elapsed: Duration,
    /// Request latencies in nanoseconds.
    pub latency_ns: Histogram<u64>,
}

/// Longest a connection may wait for a reply before the run fails.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);
/// Bytes a connection may buffer while waiting for the rest of a reply.
const MAX_REPLY_BUFFER_BYTES: usize = 8 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Get,
    Set,
}

struct Connection {
    stream: TcpStream,
    output: Vec<u8>,
    written: usize,
    input: Vec<u8>,
    /// Requests in flight, oldest first, with the time each was meant to be sent (latency is
    /// measured from it, so a late send counts against the server: no coordinated omission).
    pending: VecDeque<(Kind, Instant)>,
    /// A text GET hit whose END has not arrived yet.
    awaiting_end: bool,
    /// The TLS session, when the target serves TLS.
    tls: Option<Box<rustls::ClientConnection>>,
}

/// Values: slices of one random pool.
struct Values {
    pool: Vec<u8>,
    range: (usize, usize),
}

impl Values {
    fn new(range: (usize, usize), seed: u64) -> Values {
        let mut rng = Rng::new(seed);
        Values { pool: (0..(1 << 16) + range.1).map(|_| rng.next_u64() as u8).collect(), range }
    }

    fn pick(&self, rng: &mut Rng) -> &[u8] {
        let (min, max) = self.range;
        let len = min + rng.below((max - min + 1) as u64) as usize;
        let start = rng.below(1 << 16) as usize;
        &self.pool[start..start + len]
    }
}

fn encode(out: &mut Vec<u8>, protocol: Protocol, kind: Kind, key: &[u8], value: &[u8], opaque: u32) {
    match (protocol, kind) {
        (Protocol::Text, Kind::Get) => quick::get(out, key),
        (Protocol::Text, Kind::Set) => quick::set(out, key, 0, 0, value),
        (Protocol::Meta, Kind::Get) => {
            out.extend_from_slice(b"mg ");
            out.extend_from_slice(key);
            out.extend_from_slice(b" v\r\n");
        }
        (Protocol::Meta, Kind::Set) => {
            out.extend_from_slice(b"ms ");
            out.extend_from_slice(key);
            out.push(b' ');
            tierkv_protocol::write_u64(out, value.len() as u64);
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        (Protocol::Binary, Kind::Get) => quick::binary_getk(out, key, opaque),
        (Protocol::Binary, Kind::Set) => {
            binary::write_request(out, binary::opcode::SET, opaque, 0, &[0; 8], key, value)
        }
        (Protocol::Resp, Kind::Get) => resp::encode_get(out, key),
        (Protocol::Resp, Kind::Set) => resp::encode_set(out, key, value),
    }
}

/// Outcome of matching one reply against the oldest pending request.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Matched {
    /// The request is answered; hit for a GET.
    Done { hit: bool },
    /// A text VALUE line: the END follows.
    NeedEnd,
    /// A SET the server refused for lack of memory (memcached's `SERVER_ERROR out of memory`
    /// under pressure): answered, counted apart.
    Refused,
}

fn check_reply(
    protocol: Protocol,
    kind: Kind,
    awaiting_end: bool,
    input: &[u8],
    limits: &Limits,
) -> Result<Option<(Matched, usize)>, String> {
    if protocol == Protocol::Resp {
        return match resp::decode_reply(input) {
            resp::Decoded::Incomplete => Ok(None),
            resp::Decoded::Invalid(why) => Err(format!("invalid RESP reply: {why}")),
            resp::Decoded::Done(reply, used) => match (kind, reply) {
                (Kind::Get, resp::Reply::Bulk(value)) => Ok(Some((Matched::Done { hit: value.is_some() }, used))),
                (Kind::Set, resp::Reply::Simple(b"OK")) => Ok(Some((Matched::Done { hit: false }, used))),
                (Kind::Set, resp::Reply::Error(message)) if message.starts_with(b"OOM") => {
                    Ok(Some((Matched::Refused, used)))
                }
                (_, other) => Err(format!("{kind:?} got the RESP reply {other:?}")),
            },
        };
    }
    let (reply, used) = match decode_reply(input, limits) {
        ReplyDecoded::Incomplete { .. } => return Ok(None),
        ReplyDecoded::Invalid(why) => return Err(format!("invalid reply: {why}")),
        ReplyDecoded::Reply { reply, consumed } => (reply, consumed),
    };
    let matched = match (protocol, kind, reply) {
        (Protocol::Text, Kind::Get, Reply::Value { .. }) if !awaiting_end => Matched::NeedEnd,
        (Protocol::Text, Kind::Get, Reply::Status(Status::End)) => Matched::Done { hit: awaiting_end },
        (Protocol::Text, Kind::Set, Reply::Status(Status::Stored)) => Matched::Done { hit: false },
        (Protocol::Text | Protocol::Meta, Kind::Set, Reply::ServerError(message))
            if message.starts_with(b"out of memory") =>
        {
            Matched::Refused
        }
        (Protocol::Binary, Kind::Set, Reply::Binary { header, .. })
            if header.status_or_vbucket == binary::status::ENOMEM =>
        {
            Matched::Refused
        }
        (Protocol::Meta, Kind::Get, Reply::Meta { code: MetaCode::Va, .. }) => Matched::Done { hit: true },
        (Protocol::Meta, Kind::Get, Reply::Meta { code: MetaCode::En, .. }) => Matched::Done { hit: false },
        (Protocol::Meta, Kind::Set, Reply::Meta { code: MetaCode::Hd, .. }) => Matched::Done { hit: false },
        (Protocol::Binary, Kind::Get, Reply::Binary { header, .. })
            if header.opcode == binary::opcode::GETK
                && matches!(header.status_or_vbucket, binary::status::SUCCESS | binary::status::KEY_ENOENT) =>
        {
            Matched::Done { hit: header.status_or_vbucket == binary::status::SUCCESS }
        }
        (Protocol::Binary, Kind::Set, Reply::Binary { header, .. })
            if header.opcode == binary::opcode::SET && header.status_or_vbucket == binary::status::SUCCESS =>
        {
            Matched::Done { hit: false }
        }
        (_, _, other) => return Err(format!("{kind:?} got the reply {}", describe(&other))),
    };
    Ok(Some((matched, used)))
}

fn describe(reply: &Reply<'_>) -> String {
    match reply {
        Reply::ClientError(message) => format!("CLIENT_ERROR {}", String::from_utf8_lossy(message)),
        Reply::ServerError(message) => format!("SERVER_ERROR {}", String::from_utf8_lossy(message)),
        Reply::Binary { header, .. } => {
            format!("binary opcode {:#x} status {:#x}", header.opcode, header.status_or_vbucket)
        }
        other => format!("{other:?}"),
    }
}

/// Runs the configured load for `config.seconds` (the preload, if wanted, is `preload`'s job);
/// Err names what went wrong (nothing listening, a wrong or missing reply, a closed connection).
pub fn run(config: &RunConfig) -> Result<RunResult, String> {
    let values = Values::new(config.value_bytes, config.seed ^ 0x5EED);
    let mut rng = Rng::new(config.seed ^ 0xA11CE);
    if config.keys > KEY_POOL as u64 {
        // A pool of draws would make its own (smaller) working set: draw each key afresh.
        let mut keys = Rng::new(config.seed);
        let zipf = match config.dist {
            Distribution::Zipf(theta) => Some(crate::workload::ScrambledZipfian::new(config.keys, theta)),
            Distribution::ZipfKeys(theta) => {
                Some(crate::workload::ScrambledZipfian::over(config.keys, theta, config.keys.max(2)))
            }
            Distribution::Uniform => None,
        };
        return drive(config, &values, config.seconds, |_| {
            let key = match &zipf {
                Some(zipf) => zipf.next(&mut keys),
                None => keys.below(config.keys),
            };
            (key, rng.next_f64() < config.get_ratio)
        });
    }
    let sequence = key_sequence(config.dist, config.keys, KEY_POOL, config.seed);
    drive(config, &values, config.seconds, |r| {
        (u64::from(sequence[r & (sequence.len() - 1)]), rng.next_f64() < config.get_ratio)
    })
}

/// Key draws made before a run and cycled through: a million, so key spaces up to this size
/// see every key they would see drawn live.
const KEY_POOL: usize = 1 << 20;

/// Writes every key once, pipelined, before measuring.
pub fn preload(config: &RunConfig) -> Result<(), String> {
    let values = &Values::new(config.value_bytes, config.seed ^ 0x5EED);
    let keys = config.keys;
    let mut next = 0u64;
    let preload_config =
        RunConfig { pipeline: config.pipeline.max(16), rate: None, threads: 1, udp: false, ..config.clone() };
    let result = drive_until(&preload_config, values, || {
        let key = next;
        next += 1;
        (key < keys).then_some((key, false))
    })?;
    if result.operations < keys {
        return Err(format!("preload wrote {} of {keys} keys", result.operations));
    }
    Ok(())
}

fn drive(
    config: &RunConfig,
    values: &Values,
    seconds: f64,
    mut pick: impl FnMut(usize) -> (u64, bool),
) -> Result<RunResult, String> {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut issued = 0usize;
    let next = || {
        if Instant::now() >= deadline {
            return None;
        }
        issued += 1;
        Some(pick(issued))
    };
    if config.udp {
        drive_udp(config, values, next)
    } else {
        drive_until(config, values, next)
    }
}

/// Opens `config.connections` connections to each of `routes`, registered with `poll`.
fn connect_all(config: &RunConfig, routes: &[SocketAddr], poll: &Poll) -> Result<Vec<Connection>, String> {
    let fan = routes.len();
    let mut connections = Vec::with_capacity(config.connections * fan);
    for i in 0..config.connections * fan {
        let target = routes[i % fan];
        let std_stream = std::net::TcpStream::connect_timeout(&target, Duration::from_secs(2))
            .map_err(|e| format!("cannot connect to {target}: {e}"))?;
        std_stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let mut std_stream = std_stream;
        let tls = match &config.tls {
            Some(tls) => Some(tls::handshake(tls, target.ip(), &mut std_stream)?),
            None => None,
        };
        std_stream.set_nonblocking(true).map_err(|e| e.to_string())?;
        let mut stream = TcpStream::from_std(std_stream);
        poll.registry()
            .register(&mut stream, Token(i), Interest::READABLE | Interest::WRITABLE)
            .map_err(|e| e.to_string())?;
        connections.push(Connection {
            stream,
            output: Vec::with_capacity(config.pipeline * (64 + config.value_bytes.1)),
            written: 0,
            input: Vec::with_capacity(64 * 1024),
            pending: VecDeque::with_capacity(config.pipeline),
            awaiting_end: false,
            tls,
        });
    }
    Ok(connections)
}

/// Takes every complete reply at the front of `connection`'s input, counting each into
/// `result` (and noting the progress).
fn take_replies(
    connection: &mut Connection,
    config: &RunConfig,
    limits: &Limits,
    result: &mut RunResult,
    last_progress: &mut Instant,
) -> Result<(), String> {
    let mut at = 0;
    while let Some(&(kind, intended)) = connection.pending.front() {
        let Some((matched, used)) =
            check_reply(config.protocol, kind, connection.awaiting_end, &connection.input[at..], limits)?
        else {
            break;
        };
        at += used;
        *last_progress = Instant::now();
        match matched {
            Matched::NeedEnd => connection.awaiting_end = true,
            Matched::Done { .. } | Matched::Refused => {
                let hit = matches!(matched, Matched::Done { hit: true });
                result.refused_sets += u64::from(matched == Matched::Refused);
                connection.awaiting_end = false;
                connection.pending.pop_front();
                result.operations += 1;
                if kind == Kind::Get {
                    result.gets += 1;
                    result.get_hits += u64::from(hit);
                }
                let nanos = intended.elapsed().as_nanos().max(1) as u64;
                result.latency_ns.saturating_record(nanos);
            }
        }
    }
    connection.input.drain(..at);
    if connection.input.len() > MAX_REPLY_BUFFER_BYTES {
        return Err("a reply exceeded the reply buffer limit".into());
    }
    Ok(())
}

/// The event loop: `next` gives (key number, is_get) for each request until it returns None.
fn drive_until(
    config: &RunConfig,
    values: &Values,
    mut next: impl FnMut() -> Option<(u64, bool)>,
) -> Result<RunResult, String> {
    let limits = Limits { max_value_bytes: config.value_bytes.1.max(1 << 20), ..Limits::default() };
    let mut poll = Poll::new().map_err(|e| e.to_string())?;
    let routes: Vec<SocketAddr> = config.direct.clone().unwrap_or_else(|| vec![config.target]);
    let fan = routes.len();
    if fan > 1 && config.rate.is_some() {
        return Err("request direction (--direct) runs the closed loop only; drop --rate".into());
    }
    let mut connections = connect_all(config, &routes, &poll)?;
    let mut result = RunResult::empty()?;
    let mut rng = Rng::new(config.seed ^ 0xFACE);
    let mut key = vec![0u8; config.key_bytes];
    let mut read_buffer = vec![0u8; 64 * 1024];
    let mut finished = false;
    let start = Instant::now();
    let mut active = 0usize;
    let mut open = config.rate.map(|rate| OpenLoop { rate, start, issued: 0, next_connection: 0 });
    if open.is_none() {
        // Closed loop: start a round on every connection (every group of sockets).
        for group in connections.chunks_mut(fan) {
            if start_round(group, config, values, &mut rng, &mut key, &mut next, start) {
                active += 1;
            } else {
                finished = true;
            }
        }
    }
    let mut events = Events::with_capacity(1024);
    let mut last_progress = Instant::now();
    loop {
        if let Some(open) = open.as_mut() {
            finished = open.top_up(&mut connections, config, values, &mut rng, &mut key, &mut next)?;
            active = connections.iter().filter(|c| !c.pending.is_empty()).count();
            if finished && active == 0 {
                break;
            }
        } else if active == 0 {
            break;
        }
        let timeout = if open.is_some() { Duration::from_micros(200) } else { Duration::from_millis(100) };
        poll.poll(&mut events, Some(timeout)).map_err(|e| e.to_string())?;
        let waiting = connections.iter().any(|c| !c.pending.is_empty());
        if events.is_empty() && waiting && last_progress.elapsed() > REPLY_TIMEOUT {
            return Err(stalled(config, &connections, &result));
        }
        if !waiting {
            last_progress = Instant::now();
        }
        for event in events.iter() {
            let first = event.token().0 / fan * fan;
            let connection = &mut connections[event.token().0];
            if connection.pending.is_empty() {
                continue;
            }
            flush(connection).map_err(|e| format!("write to {} failed: {e}", config.target))?;
            if !event.is_readable() {
                continue;
            }
            let closed =
                fill(connection, &mut read_buffer).map_err(|e| format!("read from {} failed: {e}", config.target))?;
            take_replies(connection, config, &limits, &mut result, &mut last_progress)?;
            if config.window && fan == 1 && open.is_none() {
                finished = finished || !top_up_window(connection, config, values, &mut rng, &mut key, &mut next)?;
                active -= usize::from(window_done(connection, config, closed)?);
                continue;
            }
            if connection.pending.is_empty() {
                if !connection.input.is_empty() {
                    return Err(format!("{} sent bytes nobody asked for", config.target));
                }
                if open.is_some() {
                    continue;
                }
                // A round ends when every socket of the connection's group has its replies.
                let group = &mut connections[first..first + fan];
                if group.iter().any(|socket| !socket.pending.is_empty()) {
                    continue;
                }
                let now = Instant::now();
                let more = !finished && start_round(group, config, values, &mut rng, &mut key, &mut next, now);
                if !more {
                    finished = true;
                    active -= 1;
                }
            } else if closed {
                return Err(format!(
                    "{} closed the connection with {} replies missing",
                    config.target,
                    connection.pending.len()
                ));
            }
        }
    }
    result.elapsed = start.elapsed();
    Ok(result)
}

/// The error for a server that answered nothing for `REPLY_TIMEOUT` while replies were due.
fn stalled(config: &RunConfig, connections: &[Connection], result: &RunResult) -> String {
    let missing: usize = connections.iter().map(|c| c.pending.len()).sum();
    format!(
        "no reply from {} within {} s ({missing} replies missing after {} answered)",
        config.target,
        REPLY_TIMEOUT.as_secs(),
        result.operations
    )
}

/// Encodes the next round (up to `pipeline` requests, all meant for `now`) for a connection
/// (one socket, or one per partition with request direction, each request on the socket of
/// its key's partition) and writes it; false when `next` is done.
fn start_round(
    group: &mut [Connection],
    config: &RunConfig,
    values: &Values,
    rng: &mut Rng,
    key: &mut [u8],
    next: &mut impl FnMut() -> Option<(u64, bool)>,
    now: Instant,
) -> bool {
    for socket in group.iter_mut() {
        socket.output.clear();
        socket.written = 0;
    }
    for _ in 0..config.pipeline {
        let Some(request) = next() else { break };
        let socket = if group.len() > 1 {
            write_text_key(request.0, key);
            tierkv_client::partition_of(key, group.len())
        } else {
            0
        };
        queue(&mut group[socket], config, values, rng, key, request, now);
    }
    let mut any = false;
    for socket in group.iter_mut().filter(|socket| !socket.pending.is_empty()) {
        if flush(socket).is_err() {
            return false;
        }
        any = true;
    }
    any
}

/// A sliding window's step: new requests for the replies just taken, in one write; false when
/// `next` has run out.
fn top_up_window(
    connection: &mut Connection,
    config: &RunConfig,
    values: &Values,
    rng: &mut Rng,
    key: &mut [u8],
    next: &mut impl FnMut() -> Option<(u64, bool)>,
) -> Result<bool, String> {
    if connection.pending.len() >= config.pipeline {
        return Ok(true);
    }
    connection.output.drain(..connection.written);
    connection.written = 0;
    let now = Instant::now();
    let mut more = true;
    while connection.pending.len() < config.pipeline {
        let Some(request) = next() else {
            more = false;
            break;
        };
        queue(connection, config, values, rng, key, request, now);
    }
    flush(connection).map_err(|e| format!("write to {} failed: {e}", config.target))?;
    Ok(more)
}

/// Whether a sliding window's connection has nothing left in flight (it is done: `next` ran
/// out before it could send more); an error if its server sent too much or closed early.
fn window_done(connection: &Connection, config: &RunConfig, closed: bool) -> Result<bool, String> {
    if connection.pending.is_empty() {
        if !connection.input.is_empty() {
            return Err(format!("{} sent bytes nobody asked for", config.target));
        }
        return Ok(true);
    }
    if closed {
        return Err(format!("{} closed the connection with replies missing", config.target));
    }
    Ok(false)
}

/// Encodes one request into the connection's output and records it as pending.
fn queue(
    connection: &mut Connection,
    config: &RunConfig,
    values: &Values,
    rng: &mut Rng,
    key: &mut [u8],
    (number, is_get): (u64, bool),
    intended: Instant,
) {
    write_text_key(number, key);
    let kind = if is_get { Kind::Get } else { Kind::Set };
    let opaque = connection.pending.len() as u32;
    encode(&mut connection.output, config.protocol, kind, key, values.pick(rng), opaque);
    connection.pending.push_back((kind, intended));
}

/// Open-loop scheduling: request k is due at start + k / rate.
struct OpenLoop {
    rate: f64,
    start: Instant,
    issued: u64,
    next_connection: usize,
}

impl OpenLoop {
    /// Sends every due request to connections with room (each connection's new requests in one
    /// write); true once `next` has run out.
    fn top_up(
        &mut self,
        connections: &mut [Connection],
        config: &RunConfig,
        values: &Values,
        rng: &mut Rng,
        key: &mut [u8],
        next: &mut impl FnMut() -> Option<(u64, bool)>,
    ) -> Result<bool, String> {
        let due = (self.start.elapsed().as_secs_f64() * self.rate) as u64;
        let count = connections.len();
        let mut visited = 0;
        while self.issued < due && visited < count {
            let connection = &mut connections[self.next_connection];
            self.next_connection = (self.next_connection + 1) % count;
            visited += 1;
            if connection.pending.len() >= config.pipeline {
                continue;
            }
            connection.output.drain(..connection.written);
            connection.written = 0;
            while self.issued < due && connection.pending.len() < config.pipeline {
                let Some(request) = next() else { return Ok(true) };
                let intended = self.start + Duration::from_secs_f64(self.issued as f64 / self.rate);
                queue(connection, config, values, rng, key, request, intended);
                self.issued += 1;
            }
            flush(connection).map_err(|e| format!("write to {} failed: {e}", config.target))?;
            visited = 0;
        }
        Ok(false)
    }
}

fn flush(connection: &mut Connection) -> io::Result<()> {
    if let Some(session) = connection.tls.as_mut() {
        return tls::flush(session, &mut connection.stream, &connection.output, &mut connection.written);
    }
    while connection.written < connection.output.len() {
        match connection.stream.write(&connection.output[connection.written..]) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "connection closed")),
            Ok(n) => connection.written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads what is available; true if the peer closed the connection.
fn fill(connection: &mut Connection, buffer: &mut [u8]) -> io::Result<bool> {
    if let Some(session) = connection.tls.as_mut() {
        return tls::fill(session, &mut connection.stream, buffer, &mut connection.input);
    }
    loop {
        match connection.stream.read(buffer) {
            Ok(0) => return Ok(true),
            Ok(n) => {
                connection.input.extend_from_slice(&buffer[..n]);
                if n < buffer.len() {
                    return Ok(false);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// `run` on `config.threads` threads, each with its share of the connections and rate, merged.
pub(super) fn run_threads(config: &RunConfig) -> Result<RunResult, String> {
    let threads = config.threads.clamp(1, config.connections);
    if threads == 1 {
        return run(config);
    }
    let shares: Vec<RunConfig> = (0..threads)
        .map(|t| RunConfig {
            connections: config.connections / threads + usize::from(t < config.connections % threads),
            rate: config.rate.map(|r| r / threads as f64),
            seed: config.seed.wrapping_add(t as u64 * 0x9E37_79B9),
            threads: 1,
            ..config.clone()
        })
        .collect();
    let results: Vec<Result<RunResult, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = shares.iter().map(|share| scope.spawn(move || run(share))).collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a load thread panicked".into()))).collect()
    });
    let mut merged: Option<RunResult> = None;
    for result in results {
        let result = result?;
        merged = Some(match merged {
            None => result,
            Some(mut total) => {
                total.operations += result.operations;
                total.gets += result.gets;
                total.get_hits += result.get_hits;
                total.refused_sets += result.refused_sets;
                total.lost += result.lost;
                total.elapsed = total.elapsed.max(result.elapsed);
                total.latency_ns.add(&result.latency_ns).map_err(|e| format!("{e:?}"))?;
                total
            }
        });
    }
    merged.ok_or_else(|| "no load threads".to_string())
}
