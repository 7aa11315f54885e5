//! Workers: one thread per partition, pinned to its own CPU, each a mio event loop that owns
//! its partition, its connections and its listening sockets (MICA's exclusive partitions).
//! Every worker accepts on the main port (one socket, its connections dealt out round-robin)
//! and, with `--direct-ports`, on its own port. A turn of a connection reads what is
//! available, decodes complete requests, executes those whose keys this worker owns and forwards the others to their owners in batches
//! (`forward`); replies leave in request order, one write per connection per turn.
//!
//! This file holds the worker's state (connections, their reply order, the limits); the work
//! is in the children: `event_loop` (start and loop), `admission` (accept, idle kicks,
//! descriptors), `budget` (connection memory), `lifecycle` (a turn, close, delivery of
//! forwarded replies), `turns` (reading, batching, writing), `dispatch` (here, forwarded or
//! split), `requests` (long gets, refusals), `forwarded` (other workers' requests, routing),
//! `streams` (watch, dumps, `stats conns`), `udp_session` (datagrams).

use crate::forward::Links;
use crate::net::Listener;
use crate::stats::{Group, Snapshot, State};
use crate::sys::partition_lock::{Lockable, Owned};
use mio::{Poll, Token};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use tierkv_engine::AnyPartition as Partition;
use tierkv_protocol::{BinaryRequestInfo, Limits};

mod admission;
mod auth;
mod budget;
mod connection;
mod crew;
mod dispatch;
mod event_loop;
mod flash;
mod forwarded;
mod lifecycle;
mod order;
mod parking;
mod requests;
mod streams;
mod turns;
mod udp_session;
mod yields;

use budget::Budget;
use connection::Connection;
pub(crate) use event_loop::serve;

const WAKER: Token = Token(usize::MAX);
const FLASH_EVENT: Token = Token(usize::MAX - 1);
/// A worker's TCP listening socket i has the token `TCP_LISTENERS - i`, its UDP socket i
/// `UDP_SOCKETS - i` (at most two of each per address: the shared port and the direct port).
const TCP_LISTENERS: usize = usize::MAX - 16;
const UDP_SOCKETS: usize = TCP_LISTENERS - 2 * crate::config::MAX_ADDRESSES;

/// What a token names: a connection's slot, or one of the worker's own sockets.
enum Source {
    Connection(usize),
    TcpListener(usize),
    Udp(usize),
    Waker,
    Flash,
}

impl Source {
    fn of(token: Token) -> Source {
        match token {
            WAKER => Source::Waker,
            FLASH_EVENT => Source::Flash,
            Token(t) if t > UDP_SOCKETS - 2 * crate::config::MAX_ADDRESSES && t <= UDP_SOCKETS => {
                Source::Udp(UDP_SOCKETS - t)
            }
            Token(t) if t > UDP_SOCKETS && t <= TCP_LISTENERS => Source::TcpListener(TCP_LISTENERS - t),
            Token(slot) => Source::Connection(slot),
        }
    }
}

/// A `stats` request waiting for the other workers' figures.
struct Gather {
    seq: u64,
    total: Snapshot,
    group: Group,
    binary: Option<BinaryRequestInfo>,
}

/// The sockets and wake-up one worker is started with.
struct Start {
    id: usize,
    poll: Poll,
    /// TCP listening sockets, each with whether it is a shared port (its connections dealt by
    /// `--spread`) rather than this worker's direct port.
    listeners: Vec<(Listener, bool)>,
    /// UDP on the shared port and on this worker's direct port, on every address.
    udp: Vec<Option<mio::net::UdpSocket>>,
    links: Links,
    cpu: Option<usize>,
}

/// What all workers share besides the forwarding queues: counts and settings changed rarely.
struct Shared {
    /// Connections open in the whole server (for `-c`).
    open_connections: AtomicUsize,
    /// Connections accepted on the shared port for each worker whose turn they were.
    handoff: Vec<admission::Handoff>,
    /// Whose turn the next connection accepted on the shared port is (`--spread round-robin`,
    /// or a connection whose CPU is unknown).
    next_worker: AtomicUsize,
    /// TCP connections dealt to each worker and not closed yet (`admission::deal`).
    worker_conns: Vec<AtomicUsize>,
    /// The CPUs (modulo 64) accepted connections' packets have arrived on.
    arrival_cpus: std::sync::atomic::AtomicU64,
    /// `--udp-amplification`: UDP replies to a datagram total at most this many times its size.
    udp_amplification: usize,
    /// Failed authentication attempts, logged at most once a second by all workers together.
    auth_log: Arc<std::sync::Mutex<auth::AuthLog>>,
    /// The settings and what every worker's `State` shares (verbosity, memory limit, `stats
    /// detail`, watchers, TLS, users).
    server: Arc<crate::stats::ServerState>,
    /// `--metrics-port`: where workers publish their figures.
    metrics: Option<Arc<crate::metrics::Published>>,
    /// `--flash-path`: the flash file every partition has a region of.
    flash_file: Option<Arc<tierkv_engine::flash::TierFile>>,
    /// `--concurrency crew|crcw`: each worker's read-only view of its partition, for the others.
    readers: Arc<Vec<std::sync::OnceLock<tierkv_engine::CrewReader>>>,
    /// `--concurrency crcw`: each worker's partition lock, for the others (none with a flash
    /// tier: its state and I/O stay the owner's).
    lockables: Arc<Vec<std::sync::OnceLock<Arc<Lockable<Partition>>>>>,
}

/// The worker's part that executes requests: everything but the connections.
struct Core {
    id: usize,
    workers: usize,
    /// This worker's partition; other workers may take it for one request between the
    /// worker's releases (`crcw`).
    partition: Owned<Partition>,
    state: State,
    limits: Limits,
    links: Links,
    /// Reply buffers for parts, reused.
    pool: Vec<Vec<u8>>,
    /// `stats conns` requests (slot, reply sequence) waiting for this worker's own lines,
    /// which only the worker (that sees every connection) can write, after the turn.
    conns_due: Vec<(usize, u64)>,
    /// The whole-server memory limit this worker's partition was last sized for.
    memory_applied: usize,
    /// This worker's share of the connection memory budget.
    budget: Budget,
    /// Requests waiting for flash reads (`flash`).
    parking: parking::Parking,
    /// The other workers' read-only views (`crew.rs`), and where a value read there is copied.
    readers: Arc<Vec<std::sync::OnceLock<tierkv_engine::CrewReader>>>,
    crew_value: Vec<u8>,
    /// The other workers' partition locks (`crcw`).
    lockables: Arc<Vec<std::sync::OnceLock<Arc<Lockable<Partition>>>>>,
    /// How this worker takes those locks (`--test-guest-lock`).
    guest_lock: crate::sys::partition_lock::GuestLock,
    /// `Shared::auth_log`.
    auth_log: Arc<std::sync::Mutex<auth::AuthLog>>,
}

struct Worker {
    core: Core,
    connections: Vec<Option<Connection>>,
    free: Vec<usize>,
    /// Emptied `marks` lists of finished UDP datagrams, for the next ones (no allocation per
    /// datagram once warm).
    mark_pool: Vec<Vec<usize>>,
    next_generation: u64,
    shared: Arc<Shared>,
    chunk: Vec<u8>,
    input_limit: usize,
    /// Connections with work left over from their last turn, served again without an event.
    again: Vec<usize>,
    /// Connections that stopped for forwarded replies or forwarding room; served again when
    /// replies arrive.
    blocked: Vec<usize>,
    /// Connections whose next authentication attempt waits (slot, generation, until when).
    auth_waits: Vec<(usize, u64, std::time::Instant)>,
    /// UDP sockets (the shared port on each address, then the direct port on each), their
    /// batched receive buffers and reply queues.
    udp: Vec<Option<mio::net::UdpSocket>>,
    receiver: Option<Box<crate::sys::udp::Receiver>>,
    senders: Vec<crate::sys::udp::Sender>,
    /// UDP sockets that may hold more datagrams than the last batch took.
    udp_again: Vec<bool>,
    /// Slots of this worker's watching connections (served every loop turn).
    watching: Vec<usize>,
    /// This worker's listening sockets as `stats conns` shows them (descriptor, address, UDP).
    /// `--metrics-port`: request latency per command class, and when the figures were last
    /// published (unix seconds).
    latency: Option<[crate::metrics::Histogram; crate::metrics::CLASSES.len()]>,
    published_at: u32,
    /// `-Z`: this worker's handle on the TLS configuration.
    acceptor: Option<crate::net::tls::Acceptor>,
    listeners: Vec<(i32, crate::conns::Endpoint, bool)>,
    /// When the worker started (Unix seconds): listeners' `secs_since_last_cmd`.
    started: u32,
    /// A descriptor kept in reserve for refusing clients when none is left (`admission`).
    spare: Option<std::fs::File>,
    /// Accepting stopped for want of descriptors: try again soon.
    accept_again: bool,
    /// The second the idle connections were last looked for.
    idle_checked: u32,
    /// The flash I/O engine's completion eventfd, registered with the poll (None: no flash
    /// tier, or an engine without one, which is polled while requests are in flight).
    flash_fd: Option<std::os::fd::RawFd>,
    /// Whether idle yields pay now (they stop while the CPU is shared with busy work).
    yield_gate: yields::YieldGate,
    /// Its flash region's writes were failing at the last look (`flash::note_flash_health`).
    flash_degraded: bool,
}
