//! Workers: one thread per partition, pinned to its own CPU, each a mio event loop that owns
//! its partition, its connections and its listening sockets (MICA's exclusive partitions).
//! Every worker accepts on the main port (SO_REUSEPORT) and, with `--direct-ports`, on its own
//! port. A turn of a connection reads what is available, decodes complete requests, executes
//! those whose keys this worker owns and forwards the others to their owners in batches
//! (`forward`); replies leave in request order, one write per connection per turn.

use crate::config::Settings;
use crate::execute::{execute, stats_reply, After};
use crate::forward::{Batch, Entry, Kind, Links, Message, Peer};
use crate::signals::{install_signal_handlers, STOP};
use crate::stats::{Group, Snapshot, State};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tierkv_engine::{unix_now, AnyPartition as Partition, KeyHash, PartitionConfig};
use tierkv_protocol::udp::FrameHeader;
use tierkv_protocol::{binary, decode_request, reply, BinaryRequestInfo, Command, Decoded, ErrorReply, Limits};
use tierkv_protocol::{Key, ReplyStyle, Request};

mod admission;
mod budget;
mod requests;
mod streams;

use budget::*;
use requests::*;
use streams::*;

const MAIN_LISTENER: Token = Token(usize::MAX);
const DIRECT_LISTENER: Token = Token(usize::MAX - 1);
const WAKER: Token = Token(usize::MAX - 2);
const UDP_MAIN: Token = Token(usize::MAX - 3);
const UDP_DIRECT: Token = Token(usize::MAX - 4);
/// A UDP reply may be this many times the size of its request (frame headers included) until
/// the sender has proven it receives at its address (see `Proven`).
pub const UDP_AMPLIFICATION: usize = 10;
/// The largest UDP reply even to a proven sender.
const MAX_UDP_REPLY_BYTES: usize = 4 << 20;
/// Replies a connection may have waiting before the server stops executing its requests (it
/// may exceed this by one reply of at most one item): about what a socket's send buffer holds.
/// Under memory pressure the mark is `PRESSED_OUTPUT_BYTES` (see `budget`).
pub const MAX_PENDING_OUTPUT_BYTES: usize = 256 << 10;
/// Bytes read per read call.
const READ_CHUNK_BYTES: usize = 64 << 10;
/// Replies a connection may have waiting behind one not yet back from another worker.
const MAX_PARTS: usize = 256;
/// Forwarded reads (gets, whose replies carry an item) a connection may have outstanding:
/// bounds the replies that can arrive for it at once, beyond `MAX_PENDING_OUTPUT_BYTES`. Other
/// forwarded requests (small replies) are bounded by `MAX_PARTS`.
pub const MAX_REMOTE_READS_PER_CONNECTION: usize = 16;
/// Reply buffers kept for reuse per worker (each at most `POOL_BUFFER_BYTES`).
const POOL_BUFFERS: usize = 256;
const POOL_BUFFER_BYTES: usize = 4 << 10;
/// Requests decoded and prefetched together in one step of a turn.
const BATCH: usize = 32;
/// Connections served again (left-over work, no event) per loop iteration, at most.
const AGAIN_PER_LOOP: usize = 64;

/// One reply in a connection's reply order: written here, or still due from other workers.
struct Part {
    bytes: Vec<u8>,
    /// Replies (or acknowledgements) still due from other workers.
    waiting: usize,
    /// The end of one UDP message (no bytes): where the output stands is recorded in `marks`.
    mark: bool,
}

/// A `stats` request waiting for the other workers' figures.
struct Gather {
    seq: u64,
    total: Snapshot,
    group: Group,
    binary: Option<BinaryRequestInfo>,
}

struct Connection {
    /// The TCP socket; None for the reply to one UDP request (it has `udp`).
    stream: Option<TcpStream>,
    udp: Option<UdpReply>,
    /// For UDP: where each message ends in `output`.
    marks: Vec<usize>,
    /// Tells this connection from an earlier one in the same slot.
    generation: u64,
    input: Vec<u8>,
    output: Vec<u8>,
    /// Replies that wait for an earlier one from another worker, oldest first.
    parts: VecDeque<Part>,
    /// Sequence number of `parts[0]`.
    first_seq: u64,
    /// Forwarded reads (`Kind::Read`, `Kind::GetKey`) not answered yet.
    remote_reads: usize,
    gather: Option<Box<Gather>>,
    /// Stopped taking requests until forwarded replies come back.
    blocked: bool,
    /// Bytes still to discard after an oversized request (memcached's swallow).
    swallow: usize,
    /// The error reply sent once the swallow is over, as memcached sends it.
    after_swallow: Option<ErrorReply>,
    /// Keys of the first pending multi-get already answered (it paused for the output limit).
    resume: usize,
    /// Discard input through the next newline (the rest of a get line refused midway).
    skip_line: bool,
    /// A dump of the items in progress (the connection takes no requests meanwhile).
    dump: Option<Box<crate::dump::Dump>>,
    /// When it last sent a request (Unix seconds; `stats conns`).
    last_command: u32,
    /// Its socket's descriptor (-1 for UDP), for watch lines.
    fd: i32,
    /// It is a watcher (`watch`) with this id: it streams log lines and takes no requests.
    watching: Option<u64>,
    /// The peer closed its side (or the socket failed): read to the end of stream.
    hangup: bool,
    closing: bool,
    /// Replies it may have waiting before its requests stop (set each turn: smaller under
    /// memory pressure).
    output_limit: usize,
    /// Bytes of its buffers as last counted in the worker's `Budget`.
    accounted: usize,
    /// It waits in the budget's starved list.
    starved: bool,
}

/// Where the reply to one UDP request goes, and how large it may be.
#[derive(Clone, Copy)]
struct UdpReply {
    peer: SocketAddr,
    request_id: u16,
    /// The socket it came in on (0: the shared UDP port, 1: this worker's direct port).
    socket: usize,
    /// Reply bytes on the wire allowed before the sender has proven it receives there.
    limit: usize,
    /// The first binary request's header (a too-large reply is refused in its protocol).
    binary: Option<BinaryRequestInfo>,
    /// The reply outgrew `MAX_UDP_REPLY_BYTES` and is refused whatever the sender.
    oversized: bool,
}

impl Connection {
    fn new(stream: Option<TcpStream>, udp: Option<UdpReply>, generation: u64) -> Connection {
        let fd = stream.as_ref().map_or(-1, std::os::fd::AsRawFd::as_raw_fd);
        Connection {
            stream,
            udp,
            marks: Vec::new(),
            generation,
            input: Vec::new(),
            output: Vec::new(),
            parts: VecDeque::new(),
            first_seq: 0,
            remote_reads: 0,
            gather: None,
            blocked: false,
            swallow: 0,
            after_swallow: None,
            resume: 0,
            skip_line: false,
            dump: None,
            last_command: 0,
            fd,
            watching: None,
            hangup: false,
            closing: false,
            output_limit: MAX_PENDING_OUTPUT_BYTES,
            accounted: 0,
            starved: false,
        }
    }

    /// Bytes its buffers hold (their capacities), for the budget.
    fn buffer_bytes(&self) -> usize {
        let parts: usize = self.parts.iter().map(|part| part.bytes.capacity()).sum();
        self.input.capacity() + self.output.capacity() + self.marks.capacity() * 8 + parts
    }

    /// Sequence number the next part gets.
    fn next_seq(&self) -> u64 {
        self.first_seq + self.parts.len() as u64
    }

    /// Where a reply produced now goes: straight to the output when nothing is waiting ahead
    /// of it, otherwise into the last part (if complete) or a new one.
    fn local_out(&mut self, pool: &mut Vec<Vec<u8>>) -> &mut Vec<u8> {
        if self.parts.is_empty() {
            return &mut self.output;
        }
        if self.parts.back().is_some_and(|part| part.waiting > 0 || part.mark) {
            self.parts.push_back(Part { bytes: pool.pop().unwrap_or_default(), waiting: 0, mark: false });
        }
        &mut self.parts.back_mut().expect("a part was just ensured").bytes
    }

    /// Moves completed replies at the front of the order to the output.
    fn drain_parts(&mut self, pool: &mut Vec<Vec<u8>>) {
        while self.parts.front().is_some_and(|part| part.waiting == 0) {
            let mut part = self.parts.pop_front().expect("front exists");
            self.first_seq += 1;
            if part.mark {
                self.marks.push(self.output.len());
            }
            self.output.extend_from_slice(&part.bytes);
            if pool.len() < POOL_BUFFERS && part.bytes.capacity() <= POOL_BUFFER_BYTES {
                part.bytes.clear();
                pool.push(part.bytes);
            }
        }
    }

    /// Ends one UDP message here (after every reply given so far).
    fn mark(&mut self) {
        if self.parts.is_empty() {
            self.marks.push(self.output.len());
        } else {
            self.parts.push_back(Part { bytes: Vec::new(), waiting: 0, mark: true });
        }
    }

    /// Reply bytes waiting to be written: the output and the parts behind a forwarded reply.
    fn pending_bytes(&self) -> usize {
        self.output.len() + self.parts.iter().map(|part| part.bytes.len()).sum::<usize>()
    }

    /// Whether replies waiting to be written have reached the limit.
    fn over_output_limit(&self) -> bool {
        self.output.len() > self.output_limit || (!self.parts.is_empty() && self.pending_bytes() > self.output_limit)
    }

    /// Whether everything it was asked has been answered into `output`.
    fn settled(&self) -> bool {
        self.parts.is_empty()
    }
}

/// The sockets and wake-up one worker is started with.
struct Start {
    id: usize,
    poll: Poll,
    main: TcpListener,
    direct: Option<TcpListener>,
    /// UDP on the shared port and on this worker's direct port.
    udp: [Option<mio::net::UdpSocket>; 2],
    links: Links,
    cpu: Option<usize>,
}

/// What all workers share besides the forwarding queues: counts and settings changed rarely.
struct Shared {
    /// Connections open in the whole server (for `-c`).
    open_connections: AtomicUsize,
    verbosity: Arc<std::sync::atomic::AtomicU32>,
    memory_limit: Arc<AtomicUsize>,
    detail: Arc<crate::detail::Detail>,
    watchers: Arc<crate::watch::Watchers>,
    proven: Proven,
}

/// Addresses with a TCP connection open to this server now. A TCP handshake proves that the
/// address receives what is sent to it, so UDP replies to it need no amplification bound
/// (memcached's 2018 reflection attacks sent large replies to forged source addresses).
#[derive(Default)]
struct Proven(std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>);

impl Proven {
    fn enter(&self, address: std::net::IpAddr) {
        if let Ok(mut map) = self.0.lock() {
            *map.entry(address).or_insert(0) += 1;
        }
    }

    fn leave(&self, address: std::net::IpAddr) {
        if let Ok(mut map) = self.0.lock() {
            if let Some(count) = map.get_mut(&address) {
                *count -= 1;
                if *count == 0 {
                    map.remove(&address);
                }
            }
        }
    }

    fn contains(&self, address: std::net::IpAddr) -> bool {
        self.0.lock().map(|map| map.contains_key(&address)).unwrap_or(false)
    }
}

/// Serves until SIGINT or SIGTERM: binds every socket, then runs one worker per partition.
pub fn serve(settings: &Settings) -> Result<(), String> {
    install_signal_handlers()?;
    admission::raise_open_files(settings)?;
    let workers = settings.threads;
    let address = settings.address;
    let mains = bind_shared(address, workers)?;
    let mut polls = Vec::with_capacity(workers);
    let mut peers = Vec::with_capacity(workers);
    for _ in 0..workers {
        let poll = Poll::new().map_err(|e| e.to_string())?;
        let waker = Waker::new(poll.registry(), WAKER).map_err(|e| e.to_string())?;
        peers.push(Peer { sleeping: AtomicBool::new(false), waker });
        polls.push(poll);
    }
    let links = crate::forward::connect(&Arc::new(peers));
    let cpus = crate::config::cpu_list();
    let shared = Arc::new(Shared {
        open_connections: AtomicUsize::new(0),
        verbosity: State::new(settings, 0).verbosity,
        memory_limit: Arc::new(AtomicUsize::new(settings.memory_bytes)),
        detail: Arc::new(crate::detail::Detail::new(settings.admin.prefix_delimiter)),
        watchers: Arc::default(),
        proven: Proven::default(),
    });
    let mut starts = Vec::with_capacity(workers);
    for (id, ((poll, main), links)) in polls.into_iter().zip(mains).zip(links).enumerate() {
        let direct = match settings.direct_ports {
            Some(base) => {
                let port = base + id as u16;
                let at = SocketAddr::new(address.ip(), port);
                let listener =
                    TcpListener::bind(at).map_err(|e| format!("--direct-ports: cannot listen on {at}: {e}"))?;
                Some(listener)
            }
            None => None,
        };
        let mut udp = [None, None];
        if let Some(port) = settings.udp_port {
            let at = SocketAddr::new(address.ip(), port);
            udp[0] = Some(crate::udp::bind(at, true).map_err(|e| format!("-U/--udp-port: cannot bind {at}: {e}"))?);
            if let Some(base) = settings.direct_ports {
                let at = SocketAddr::new(address.ip(), base + id as u16);
                udp[1] = Some(
                    crate::udp::bind(at, false).map_err(|e| format!("--direct-ports: cannot bind UDP {at}: {e}"))?,
                );
            }
        }
        let cpu = (!cpus.is_empty()).then(|| cpus[id % cpus.len()]);
        starts.push(Start { id, poll, main, direct, udp, links, cpu });
    }
    if settings.verbose > 0 {
        eprintln!(
            "tierkv: listening on {address} with {} MiB in {workers} partitions{}",
            settings.memory_bytes >> 20,
            settings.direct_ports.map(|base| format!(", direct ports from {base}")).unwrap_or_default()
        );
    }
    let threads: Vec<_> = starts
        .into_iter()
        .map(|start| {
            let settings = settings.clone();
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("tierkv-worker-{}", start.id))
                .spawn(move || {
                    let result = run_worker(start, &settings, shared);
                    // One worker failing stops the others.
                    STOP.store(true, Ordering::Relaxed);
                    result
                })
                .map_err(|e| format!("cannot start a worker thread: {e}"))
        })
        .collect::<Result<_, _>>()?;
    let mut result = Ok(());
    for thread in threads {
        match thread.join() {
            Ok(Ok(())) => {}
            Ok(Err(message)) => result = Err(message),
            Err(_) => result = Err("a worker thread panicked".to_string()),
        }
    }
    if settings.verbose > 0 {
        eprintln!("tierkv: stopped");
    }
    result
}

/// `count` listening sockets on one address, each with SO_REUSEPORT so the kernel spreads new
/// connections over the workers. A first plain bind checks that nobody else serves the port
/// (SO_REUSEPORT would otherwise let a second server share it silently).
fn bind_shared(address: SocketAddr, count: usize) -> Result<Vec<TcpListener>, String> {
    let fail = |e: io::Error| format!("cannot listen on {address}: {e}");
    // The probe binds without listening: a client that connected to a listening probe would
    // think the server up, then be refused in the moment before the real sockets listen.
    let probe =
        socket2::Socket::new(socket2::Domain::for_address(address), socket2::Type::STREAM, None).map_err(fail)?;
    probe.set_reuse_address(true).map_err(fail)?;
    probe.bind(&address.into()).map_err(fail)?;
    let address =
        probe.local_addr().map_err(fail)?.as_socket().ok_or_else(|| fail(std::io::ErrorKind::Other.into()))?;
    drop(probe);
    (0..count)
        .map(|_| {
            let socket = socket2::Socket::new(socket2::Domain::for_address(address), socket2::Type::STREAM, None)
                .map_err(fail)?;
            socket.set_reuse_address(true).map_err(fail)?;
            socket.set_reuse_port(true).map_err(fail)?;
            socket.set_nonblocking(true).map_err(fail)?;
            socket.bind(&address.into()).map_err(fail)?;
            socket.listen(1024).map_err(fail)?;
            Ok(TcpListener::from_std(socket.into()))
        })
        .collect()
}

/// The worker's part that executes requests: everything but the connections.
struct Core {
    id: usize,
    workers: usize,
    partition: Partition,
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
    /// UDP sockets (shared port, direct port), their batched receive buffers and reply queues.
    udp: [Option<mio::net::UdpSocket>; 2],
    receiver: Option<Box<crate::udp::Receiver>>,
    senders: [crate::udp::Sender; 2],
    /// UDP sockets that may hold more datagrams than the last batch took.
    udp_again: [bool; 2],
    /// Slots of this worker's watching connections (served every loop turn).
    watching: Vec<usize>,
    /// This worker's listening sockets as `stats conns` shows them (descriptor, address, UDP).
    listeners: Vec<(i32, SocketAddr, bool)>,
    /// When the worker started (Unix seconds): listeners' `secs_since_last_cmd`.
    started: u32,
    /// A descriptor kept in reserve for refusing clients when none is left (`admission`).
    spare: Option<std::fs::File>,
    /// Accepting stopped for want of descriptors: try again soon.
    accept_again: bool,
    /// The second the idle connections were last looked for.
    idle_checked: u32,
}

fn run_worker(start: Start, settings: &Settings, shared: Arc<Shared>) -> Result<(), String> {
    let Start { id, mut poll, mut main, mut direct, mut udp, links, cpu } = start;
    let workers = settings.threads;
    let config = PartitionConfig {
        memory_bytes: settings.memory_bytes / workers,
        max_memory_bytes: Some(settings.memory_max_bytes / workers),
        index_buckets: None,
        max_item_bytes: settings.max_item_bytes,
        expected_item_bytes: tierkv_engine::DEFAULT_EXPECTED_ITEM_BYTES,
    };
    let partition = Partition::new(settings.mode, &config).map_err(|e| format!("-m/--memory-limit: {e}"))?;
    let limits = Limits { max_value_bytes: settings.max_item_bytes, ..Limits::default() };
    poll.registry().register(&mut main, MAIN_LISTENER, Interest::READABLE).map_err(|e| e.to_string())?;
    if let Some(direct) = direct.as_mut() {
        poll.registry().register(direct, DIRECT_LISTENER, Interest::READABLE).map_err(|e| e.to_string())?;
    }
    for (socket, token) in udp.iter_mut().zip([UDP_MAIN, UDP_DIRECT]) {
        if let Some(socket) = socket.as_mut() {
            poll.registry().register(socket, token, Interest::READABLE).map_err(|e| e.to_string())?;
        }
    }
    if let Some(cpu) = cpu {
        pin_to_cpu(cpu, settings.verbose > 0, id);
    }
    let mut worker = Worker {
        core: Core {
            id,
            workers,
            partition,
            state: State::new(settings, unix_now())
                .sharing_tunables(Arc::clone(&shared.verbosity), Arc::clone(&shared.memory_limit))
                .sharing(Arc::clone(&shared.detail), Arc::clone(&shared.watchers)),
            limits,
            links,
            pool: Vec::new(),
            conns_due: Vec::new(),
            memory_applied: settings.memory_bytes,
            budget: Budget::new(settings.conn_memory_bytes / workers),
        },
        connections: Vec::new(),
        free: Vec::new(),
        mark_pool: Vec::new(),
        next_generation: 0,
        shared,
        chunk: vec![0u8; READ_CHUNK_BYTES],
        input_limit: input_limit(&limits),
        again: Vec::new(),
        blocked: Vec::new(),
        receiver: udp[0].is_some().then(|| Box::new(crate::udp::Receiver::new())),
        udp,
        senders: Default::default(),
        udp_again: [false; 2],
        watching: Vec::new(),
        listeners: Vec::new(),
        started: unix_now(),
        spare: admission::spare_descriptor(),
        accept_again: false,
        idle_checked: 0,
    };
    worker.listeners = listener_addresses(&main, direct.as_ref(), &worker.udp);
    let mut events = Events::with_capacity(1024);
    let mut inbox: Vec<(usize, Message)> = Vec::new();
    let mut again: Vec<usize> = Vec::new();
    while !STOP.load(Ordering::Relaxed) {
        worker.core.links.receive(&mut inbox);
        let busy =
            !again.is_empty() || !worker.again.is_empty() || !inbox.is_empty() || worker.udp_again.contains(&true);
        // Watchers get their lines at least every 100 ms.
        let idle = if worker.watching.is_empty() { Duration::from_secs(1) } else { Duration::from_millis(100) };
        let idle = if worker.accept_again { Duration::from_millis(10) } else { idle };
        let timeout = if busy || !worker.core.links.may_sleep(&mut inbox) { Duration::ZERO } else { idle };
        let polled = poll.poll(&mut events, Some(timeout));
        worker.core.links.awake();
        match polled {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.to_string()),
        }
        worker.core.partition.set_clock(unix_now());
        // After every receive: a request forwarded after `stats detail on` sees it on.
        worker.core.state.refresh_observe();
        let core = &mut worker.core;
        crate::admin::apply_memory_limit(&mut core.partition, &core.state, &mut core.memory_applied);
        // Other workers' requests and replies first: someone is waiting for them.
        for (from, message) in inbox.drain(..) {
            match message {
                Message::Requests(batch) => {
                    let conns = if batch.entries.iter().any(|entry| entry.kind == Kind::Conns) {
                        worker.conns_lines(None)
                    } else {
                        Vec::new()
                    };
                    worker.core.execute_forwarded(from, batch, &conns)
                }
                Message::Replies(batch) => worker.deliver(from, batch, &poll),
            }
        }
        for event in events.iter() {
            match event.token() {
                MAIN_LISTENER => worker.accept(&main, &poll),
                DIRECT_LISTENER => {
                    if let Some(direct) = &direct {
                        worker.accept(direct, &poll);
                    }
                }
                WAKER => {}
                UDP_MAIN => worker.udp_again[0] = true,
                UDP_DIRECT => worker.udp_again[1] = true,
                Token(slot) => {
                    // A short read normally means the socket is drained, but data and the
                    // peer's close can arrive in one edge; then the read must go on to the end.
                    let hangup = event.is_read_closed() || event.is_error();
                    if let Some(Some(connection)) = worker.connections.get_mut(slot) {
                        connection.hangup |= hangup;
                    }
                    worker.turn(slot, &poll);
                }
            }
        }
        if std::mem::take(&mut worker.accept_again) {
            worker.accept(&main, &poll);
            if let Some(direct) = &direct {
                worker.accept(direct, &poll);
            }
        }
        worker.kick_idle(&poll);
        worker.core.budget.trim();
        worker.core.state.conn_buffer_bytes = worker.core.budget.held() as u64;
        let relieved = worker.core.budget.relieved();
        worker.again.extend(relieved);
        // At most AGAIN_PER_LOOP leftover turns between two polls, so new clients and events
        // wait for a slice of the busy connections, not for all of them.
        again.append(&mut worker.again);
        let slice = again.len().min(AGAIN_PER_LOOP);
        for slot in again.drain(..slice) {
            worker.turn(slot, &poll);
        }
        for socket in 0..2 {
            if std::mem::take(&mut worker.udp_again[socket]) {
                worker.receive_udp(socket);
            }
        }
        if !worker.core.conns_due.is_empty() {
            worker.answer_conns(&poll);
        }
        for slot in std::mem::take(&mut worker.watching) {
            worker.turn(slot, &poll);
        }
        worker.send_udp();
        worker.core.links.send_all();
    }
    if settings.verbose > 0 {
        eprintln!("tierkv: worker {id} stopping on signal");
    }
    Ok(())
}

/// The most input a connection buffers: its largest possible request and one read more.
/// Per connection, buffers stay below this plus `MAX_PENDING_OUTPUT_BYTES` and the replies of
/// `MAX_REMOTE_READS_PER_CONNECTION` forwarded reads.
fn input_limit(limits: &Limits) -> usize {
    limits.max_value_bytes + limits.max_line_bytes + 2 + READ_CHUNK_BYTES
}

/// What one turn of a connection left behind.
#[derive(PartialEq, Eq)]
enum Turn {
    /// Finished; close it.
    Close,
    /// Waiting for a read or write event, or for replies from other workers.
    Wait,
    /// Work remains that no event will announce.
    Again,
}

impl Worker {
    /// One turn of the connection in `slot`: closes it when it is finished, queues it when it
    /// has work no event will announce.
    fn turn(&mut self, slot: usize, poll: &Poll) {
        let Some(connection) = self.connections.get_mut(slot).and_then(Option::as_mut) else { return };
        connection.starved = false;
        let turn = serve_connection(connection, slot, &mut self.core, self.input_limit, &mut self.chunk);
        self.core.budget.account(connection);
        if connection.blocked {
            self.blocked.push(slot);
        }
        if connection.watching.is_some() && turn != Turn::Close && !self.watching.contains(&slot) {
            self.watching.push(slot);
        }

        match turn {
            Turn::Wait => {}
            Turn::Again => self.again.push(slot),
            Turn::Close => self.close(slot, poll),
        }
    }

    fn close(&mut self, slot: usize, poll: &Poll) {
        if let Some(mut connection) = self.connections[slot].take() {
            self.free.push(slot);
            self.core.budget.forget(&connection);
            if let Some(id) = connection.watching {
                self.core.state.watchers.remove(id);
                self.watching.retain(|&watching| watching != slot);
            }
            if let Some(stream) = connection.stream.as_mut() {
                let _ = poll.registry().deregister(stream);
                if let Ok(peer) = stream.peer_addr() {
                    self.shared.proven.leave(peer.ip());
                }
                self.core.state.curr_connections -= 1;
                self.shared.open_connections.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Puts the replies in `batch` (sent to worker `from`) into their connections' reply order
    /// and writes what is now in order.
    fn deliver(&mut self, from: usize, batch: Box<Batch>, poll: &Poll) {
        let mut touched: Vec<usize> = Vec::new();
        for (entry, _, replies) in batch.ranges() {
            let Some(connection) = self.connections.get_mut(entry.slot).and_then(Option::as_mut) else { continue };
            if connection.generation != entry.generation || entry.seq < connection.first_seq {
                continue;
            }
            let index = (entry.seq - connection.first_seq) as usize;
            let Some(part) = connection.parts.get_mut(index) else { continue };
            let bytes = &batch.replies[replies];
            part.waiting = part.waiting.saturating_sub(1);
            match entry.kind {
                Kind::Request => part.bytes.extend_from_slice(bytes),
                Kind::Read | Kind::GetKey => {
                    part.bytes.extend_from_slice(bytes);
                    connection.remote_reads -= 1;
                }
                Kind::Flush { .. } | Kind::Reset | Kind::Unlink => {}
                Kind::Conns => {
                    part.bytes.extend_from_slice(bytes);
                    if part.waiting == 0 {
                        reply::status(&mut part.bytes, reply::Status::End);
                    }
                }
                Kind::Dump => {
                    if let Some((lines, next, items)) = crate::dump::decode_reply(bytes) {
                        part.bytes.extend_from_slice(lines);
                        if let Some(dump) = connection.dump.as_mut() {
                            if dump.advance(next, items, lines.len(), self.core.workers) {
                                reply::status(&mut part.bytes, reply::Status::End);
                                connection.dump = None;
                            }
                        }
                    }
                    connection.blocked = true;
                    self.blocked.push(entry.slot);
                }
                Kind::Snapshot => {
                    let done = part.waiting == 0;
                    if let Some(gather) = connection.gather.as_mut().filter(|g| g.seq == entry.seq) {
                        if let Some(snapshot) = Snapshot::read_from(bytes) {
                            gather.total.add(&snapshot);
                        }
                        if done {
                            let gather = connection.gather.take().expect("checked above");
                            let core = &self.core;
                            let part = &mut connection.parts[index];
                            stats_reply(
                                gather.group,
                                gather.binary.as_ref(),
                                &core.state,
                                &gather.total,
                                &core.partition,
                                &mut part.bytes,
                            );
                        }
                    }
                }
            }
            if touched.last() != Some(&entry.slot) {
                touched.push(entry.slot);
            }
        }
        self.core.links.returned(from, batch);
        for slot in touched {
            let Some(connection) = self.connections[slot].as_mut() else { continue };
            connection.drain_parts(&mut self.core.pool);
            self.core.budget.account(connection);
            if connection.udp.is_some() {
                if connection.settled() && connection.closing {
                    self.finish_udp(slot);
                }
                continue;
            }
            let failed = !flush(connection, &mut self.core.state);
            if failed || (connection.closing && connection.settled() && connection.output.is_empty()) {
                self.close(slot, poll);
            }
        }
        // Room has opened up: connections that stopped for it go again.
        for slot in self.blocked.drain(..) {
            if let Some(connection) = self.connections[slot].as_mut() {
                if std::mem::take(&mut connection.blocked) {
                    self.again.push(slot);
                }
            }
        }
    }
}

impl Worker {
    /// Takes one batch of datagrams from UDP socket `socket` and answers or forwards every
    /// request in them; asks for another turn when the batch was full.
    fn receive_udp(&mut self, socket: usize) {
        let (Some(udp), Some(mut receiver)) = (self.udp[socket].take(), self.receiver.take()) else { return };
        match receiver.receive(&udp) {
            Ok(count) => {
                for i in 0..count {
                    if let Some((peer, datagram)) = receiver.datagram(i) {
                        self.udp_datagram(socket, peer, datagram);
                    }
                }
                self.udp_again[socket] = count == crate::udp::RECV_BATCH;
            }
            Err(_) => self.udp_again[socket] = false,
        }
        self.udp[socket] = Some(udp);
        self.receiver = Some(receiver);
    }

    /// Every request in one datagram, executed here or forwarded to its owner; the replies go
    /// back in request order once all are in, each request's reply (and each key's of a text
    /// multi-get) its own message of datagrams, as memcached sends them.
    fn udp_datagram(&mut self, socket: usize, peer: SocketAddr, datagram: &[u8]) {
        // Too short, or part of a multi-datagram request: dropped, as memcached drops them.
        let Ok((header, payload)) = FrameHeader::decode_request(datagram) else { return };
        let target = UdpReply {
            peer,
            request_id: header.request_id,
            socket,
            limit: UDP_AMPLIFICATION * datagram.len(),
            binary: None,
            oversized: false,
        };
        let slot = self.free.pop().unwrap_or_else(|| {
            self.connections.push(None);
            self.connections.len() - 1
        });
        self.next_generation += 1;
        let connection = self.connections[slot].insert(Connection::new(None, Some(target), self.next_generation));
        connection.marks = self.mark_pool.pop().unwrap_or_default();
        let core = &mut self.core;
        let mut at = 0;
        while at < payload.len() {
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
                            if let Some(udp) = connection.udp.as_mut() {
                                udp.oversized = true;
                            }
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
        connection.closing = true;
        if connection.settled() {
            self.finish_udp(slot);
        }
    }

    /// Sends the replies of the UDP datagram in `slot` (complete now) and frees the slot.
    fn finish_udp(&mut self, slot: usize) {
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
        let within = wire <= target.limit || self.shared.proven.contains(target.peer.ip());
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
    fn send_udp(&mut self) {
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
const UDP_TOO_LARGE: &str = "reply too large for UDP";

impl Core {
    /// Executes a batch another worker forwarded and sends the replies back. The keys of each
    /// run of `BATCH` entries are prefetched together first, as for local requests.
    fn execute_forwarded(&mut self, from: usize, mut batch: Box<Batch>, conns: &[u8]) {
        self.state.fd = -1;
        let Batch { requests, entries, replies } = &mut *batch;
        let mut request_start = 0;
        for chunk in entries.chunks_mut(BATCH) {
            let mut hashes = [KeyHash(0); BATCH];
            let mut count = 0;
            for entry in chunk.iter().filter(|entry| entry.hash != 0) {
                hashes[count] = KeyHash(entry.hash);
                count += 1;
            }
            self.partition.prefetch_hashes(&hashes[..count]);
            for entry in chunk.iter_mut() {
                let request = &requests[request_start..entry.request_end];
                request_start = entry.request_end;
                match entry.kind {
                    Kind::Request | Kind::Read | Kind::GetKey => {
                        if let Decoded::Request { request, .. } = decode_request(request, &self.limits) {
                            let mut resume = 0;
                            execute(&mut self.partition, &request, replies, &mut self.state, &mut resume);
                            if entry.kind == Kind::GetKey && replies.ends_with(b"END\r\n") {
                                replies.truncate(replies.len() - 5);
                            }
                        }
                    }
                    Kind::Flush { delay } => self.partition.flush_all(delay),
                    Kind::Snapshot => self.state.snapshot(&self.partition).write_to(replies),
                    Kind::Reset => self.state.reset(&self.partition),
                    Kind::Unlink => {
                        let _ = self.partition.delete(request, 0);
                    }
                    Kind::Dump => crate::dump::execute_request(&mut self.partition, request, replies),
                    Kind::Conns => replies.extend_from_slice(conns),
                }
                entry.reply_end = replies.len();
            }
        }
        self.links.reply(from, batch);
    }

    /// The worker that owns `key`.
    fn owner(&self, key: &[u8]) -> usize {
        KeyHash::of(key).partition(self.workers as u32) as usize
    }

    /// Where a request is executed, and the hash of its one key (None for requests without
    /// exactly one valid key), which the executing worker prefetches with.
    fn route(&self, request: &Request<'_>) -> (Route, Option<KeyHash>) {
        let hashed = |key: Key<'_>| {
            let mut buffer = [0u8; 256];
            key.decode_into(&mut buffer).map(KeyHash::of)
        };
        let hash = match request.command {
            Command::Get { keys, base64, .. } => {
                if keys.len() == 1 {
                    hashed(Key { raw: keys.iter().next().unwrap_or_default(), base64 })
                } else if self.workers == 1 || keys.iter().all(|key| self.owner(key) == self.id) {
                    return (Route::Local, None);
                } else {
                    return (Route::Split, None);
                }
            }
            Command::Store { key, .. }
            | Command::Delete { key, .. }
            | Command::Arith { key, .. }
            | Command::Touch { key, .. }
            | Command::MetaDebug { key } => hashed(key),
            Command::FlushAll { delay } if self.workers > 1 && self.state.settings.admin.flush => {
                return (Route::Flush(delay), None)
            }
            Command::Stats { args } if crate::stats::subcommand(args) == b"conns" => return (Route::Conns, None),
            Command::Stats { args } if crate::stats::subcommand(args) == b"detail" => {
                return (Route::AfterForwarded, None)
            }
            Command::Stats { args } if self.workers > 1 => {
                let route = match Group::parse(args) {
                    Some(Group::Reset) => Route::Reset,
                    Some(group) => Route::Gather(group),
                    None => Route::Local,
                };
                return (route, None);
            }
            _ => None,
        };
        match hash.map(|hash| hash.partition(self.workers as u32) as usize) {
            Some(owner) if owner != self.id => (Route::Remote(owner), hash),
            _ => (Route::Local, hash),
        }
    }
}

/// Where a request is executed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Route {
    Local,
    /// Forwarded to this worker.
    Remote(usize),
    /// A multi-key get whose keys several workers own: one part per key, then END.
    Split,
    /// flush_all: here and on every worker.
    Flush(i64),
    /// stats reset: here and on every worker.
    Reset,
    /// stats: figures from every worker, summed.
    Gather(Group),
    /// stats conns: every worker's sockets.
    Conns,
    /// Here, once the connection's forwarded requests are done (`stats detail` reads and
    /// switches what every worker counts).
    AfterForwarded,
}

/// Writes what is pending, reads a bounded amount, executes every complete request the limits
/// allow, and writes the replies.
fn serve_connection(
    connection: &mut Connection,
    slot: usize,
    core: &mut Core,
    input_limit: usize,
    chunk: &mut [u8],
) -> Turn {
    connection.drain_parts(&mut core.pool);
    if !flush(connection, &mut core.state) {
        return Turn::Close;
    }
    if connection.closing {
        // A closing connection stays until its last replies are out.
        return if connection.output.is_empty() && connection.settled() { Turn::Close } else { Turn::Wait };
    }
    // A client that does not read its replies is not read from either, until it catches up
    // (a writable event brings it back here); under memory pressure, none that has replies
    // waiting (forwarded replies bring it back when they arrive).
    let pressure = core.budget.pressure();
    if connection.output.len() > MAX_PENDING_OUTPUT_BYTES || (pressure && connection.pending_bytes() > 0) {
        if connection.output.is_empty() {
            connection.blocked = true;
        }
        return Turn::Wait;
    }
    connection.output_limit = if pressure { PRESSED_OUTPUT_BYTES } else { MAX_PENDING_OUTPUT_BYTES };
    core.state.output_limit = connection.output_limit;
    let input_limit = if pressure { PRESSED_INPUT_BYTES.min(input_limit) } else { input_limit };
    if let Some(id) = connection.watching {
        return watch_turn(connection, id, core, chunk);
    }
    if connection.dump.is_some() {
        if let Some(turn) = run_dump(connection, slot, core) {
            return turn;
        }
    }
    core.state.fd = connection.fd;
    let Ok(read) = read_some(connection, chunk, input_limit, &mut core.state) else { return Turn::Close };
    if !connection.input.is_empty() {
        connection.last_command = core.partition.now();
    }
    let input_before = connection.input.len();
    let stopped_early = process(connection, slot, core);
    connection.drain_parts(&mut core.pool);
    if !flush(connection, &mut core.state) {
        return Turn::Close;
    }
    let nothing_taken = connection.input.len() == input_before && !stopped_early && !connection.blocked;
    if pressure && read == ReadEnd::Limited && nothing_taken {
        // Nothing could be taken from a full pressed input (a request larger than it): wait
        // for the pressure to end.
        core.budget.starve(slot, connection);
        return Turn::Wait;
    }
    if read == ReadEnd::Eof && !(stopped_early || connection.blocked || connection.dump.is_some()) {
        // Requests read before the end still get their replies: the connection closes once
        // every complete request in its input has been taken.
        connection.closing = true;
    }
    release_idle_buffers(connection, if pressure { PRESSED_KEEP_BYTES } else { KEEP_BUFFER_BYTES });
    if connection.closing {
        return if connection.output.is_empty() && connection.settled() { Turn::Close } else { Turn::Wait };
    }
    // With replies still pending the socket is full and a writable event will come; a blocked
    // connection is served again when replies arrive; otherwise leftover requests or unread
    // input need another turn.
    if connection.output.is_empty() && !connection.blocked && (stopped_early || read == ReadEnd::Limited) {
        Turn::Again
    } else {
        Turn::Wait
    }
}

/// Buffers above this size are given back once empty, so idle connections stay small.
const KEEP_BUFFER_BYTES: usize = 256 << 10;

fn release_idle_buffers(connection: &mut Connection, keep: usize) {
    if connection.output.is_empty() && connection.output.capacity() > keep {
        connection.output = Vec::new();
    }
    if connection.input.is_empty() && connection.input.capacity() > keep {
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
enum Step {
    Done(After),
    /// Not taken (no room to forward, or too much waiting): try again after replies arrive.
    Blocked,
}

/// Decodes and executes (or forwards) every complete request in the input while the limits
/// allow; true if it stopped for the output limit with requests left.
fn process(connection: &mut Connection, slot: usize, core: &mut Core) -> bool {
    let mut input = std::mem::take(&mut connection.input);
    let mut at = 0;
    let mut stopped_early = false;
    loop {
        if discard(connection, &input, &mut at, &mut core.pool) {
            break;
        }
        if at == input.len() {
            break;
        }
        if connection.over_output_limit() {
            stopped_early = stop_for_output(connection);
            break;
        }
        // Decode a run of complete requests, load the buckets and items of the keys this
        // worker owns into cache together, then execute them in order (MICA's batched
        // pipeline, one turn's worth).
        // Each request is decoded in place into its slot (a request is 120 bytes: moving it
        // again would cost a memcpy call per request).
        let mut batch: [Option<Decoded<'_>>; BATCH] = [None; BATCH];
        let mut routes = [(Route::Local, None); BATCH];
        let mut batch_len = 0;
        let mut decoded_end = at;
        let mut next = None;
        let mut long_step = None;
        while batch_len < BATCH && decoded_end < input.len() {
            // A long get line is taken in pieces, at the head of a batch of its own, without
            // decoding (and checking) the whole of it again for every piece.
            let rest = &input[decoded_end..];
            if rest.len() > LONG_GET_CHUNK_BYTES && tierkv_protocol::text::is_long_get(rest, LONG_GET_CHUNK_BYTES) {
                if batch_len == 0 {
                    long_step = long_get(connection, slot, core, &input[at..]);
                }
                if batch_len > 0 || long_step.is_some() {
                    next = Some(Decoded::Incomplete { needed: 0 });
                    break;
                }
            }
            let slot = &mut batch[batch_len];
            *slot = Some(decode_request(&input[decoded_end..], &core.limits));
            match slot {
                Some(Decoded::Request { request, consumed }) => {
                    routes[batch_len] = core.route(request);
                    batch_len += 1;
                    decoded_end += *consumed;
                }
                other => {
                    next = other.take();
                    break;
                }
            }
        }
        if batch_len > 1 {
            let mut hashes = [KeyHash(0); BATCH];
            let mut count = 0;
            for (route, hash) in &routes[..batch_len] {
                if let (Route::Local, Some(hash)) = (route, hash) {
                    hashes[count] = *hash;
                    count += 1;
                }
            }
            core.partition.prefetch_hashes(&hashes[..count]);
        }
        for (decoded, (route, hash)) in batch[..batch_len].iter().zip(&routes) {
            let Some(Decoded::Request { request, consumed }) = decoded else { continue };
            if connection.over_output_limit() {
                stopped_early = stop_for_output(connection);
                break;
            }
            let raw = &input[at..at + consumed];
            match dispatch(connection, slot, core, request, raw, *route, *hash) {
                Step::Done(After::Continue) => at += consumed,
                // A multi-get filled the output: the rest of its keys wait for a later turn.
                Step::Done(After::Pause) => {
                    stopped_early = true;
                    break;
                }
                Step::Done(After::Close) => {
                    at += consumed;
                    connection.closing = true;
                    break;
                }
                Step::Done(After::Dump(kind)) => {
                    at += consumed;
                    if kind == crate::admin::DumpKind::Metadump && !connection.parts.is_empty() {
                        // Replies still due from other workers: memcached's refusal (the admin
                        // command saw only this worker's unwritten replies).
                        connection.local_out(&mut core.pool).extend_from_slice(crate::admin::METADUMP_BEHIND_REPLIES);
                        continue;
                    }
                    connection.dump = Some(Box::new(crate::dump::Dump::new(kind)));
                    // No event announces the dump's steps: the connection goes again.
                    stopped_early = true;
                    break;
                }
                Step::Done(After::Watch(streams)) => {
                    at += consumed;
                    if start_watch(connection, core, streams) {
                        break;
                    }
                }
                Step::Blocked => {
                    connection.blocked = true;
                    break;
                }
            }
        }
        if connection.watching.is_some() {
            // A watcher takes no more requests; what it sent after `watch` is dropped.
            at = input.len();
            break;
        }
        if stopped_early || connection.closing || connection.blocked || connection.dump.is_some() {
            break;
        }
        let flow = match (long_step, next) {
            (Some(step), _) => finish_long_get(connection, step, &mut input, &mut at, &mut stopped_early),
            (None, next) => {
                // What stopped the batch, without its borrow of the input.
                let next = next.map(|decoded| match decoded {
                    Decoded::Error(error) => Some(error),
                    _ => None,
                });
                after_batch(connection, slot, core, next, &mut input, &mut at, &mut stopped_early)
            }
        };
        if let Flow::Stop = flow {
            break;
        }
    }
    connection.input = input;
    connection.input.drain(..at);
    stopped_early
}

/// Forwards one request to `owner` as the next part of the connection's reply order (the
/// owner's reply fills the part); false if the queue to `owner` has no room.
fn forward_part(
    connection: &mut Connection,
    slot: usize,
    core: &mut Core,
    owner: usize,
    kind: Kind,
    hash: u64,
    request: &[u8],
) -> bool {
    let seq = connection.next_seq();
    let entry = Entry { slot, generation: connection.generation, seq, kind, hash, request_end: 0, reply_end: 0 };
    if !core.links.forward(owner, entry, &[request]) {
        return false;
    }
    connection.parts.push_back(Part { bytes: core.pool.pop().unwrap_or_default(), waiting: 1, mark: false });
    true
}

/// Executes one request here or hands it to the workers that must see it.
fn dispatch(
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
        && (connection.parts.len() >= MAX_PARTS || (read && connection.remote_reads >= MAX_REMOTE_READS_PER_CONNECTION))
    {
        return Step::Blocked;
    }
    let entry = |seq: u64, kind: Kind| Entry {
        slot,
        generation: connection.generation,
        seq,
        kind,
        hash: hash.map_or(0, |hash| hash.0),
        request_end: 0,
        reply_end: 0,
    };
    match route {
        Route::AfterForwarded if !connection.parts.is_empty() => Step::Blocked,
        Route::Local | Route::AfterForwarded => {
            let mut resume = connection.resume;
            let out = connection.local_out(&mut core.pool);
            let after = execute(&mut core.partition, request, out, &mut core.state, &mut resume);
            connection.resume = resume;
            Step::Done(after)
        }
        Route::Remote(owner) => {
            let kind = if read { Kind::Read } else { Kind::Request };
            if !forward_part(connection, slot, core, owner, kind, hash.map_or(0, |hash| hash.0), raw) {
                return Step::Blocked;
            }
            connection.remote_reads += usize::from(read);
            core.state.counters.forwarded_requests += 1;
            Step::Done(After::Continue)
        }
        Route::Split => split_get(connection, slot, core, request, true),
        Route::Conns => {
            if !core.links.can_forward_to_all() || connection.parts.len() >= MAX_PARTS {
                return Step::Blocked;
            }
            let seq = connection.next_seq();
            for owner in (0..core.workers).filter(|&owner| owner != core.id) {
                let forwarded = core.links.forward(owner, entry(seq, Kind::Conns), &[]);
                debug_assert!(forwarded, "room was checked for every worker");
            }
            // This worker's own lines are written after the turn (`Worker::answer_conns`).
            connection.parts.push_back(Part {
                bytes: core.pool.pop().unwrap_or_default(),
                waiting: core.workers,
                mark: false,
            });
            core.conns_due.push((slot, seq));
            Step::Done(After::Continue)
        }
        Route::Flush(_) | Route::Reset | Route::Gather(_) => {
            if !core.links.can_forward_to_all() || (connection.gather.is_some() && matches!(route, Route::Gather(_))) {
                return Step::Blocked;
            }
            let seq = connection.next_seq();
            let kind = match route {
                Route::Flush(delay) => Kind::Flush { delay },
                Route::Reset => Kind::Reset,
                _ => Kind::Snapshot,
            };
            for owner in (0..core.workers).filter(|&owner| owner != core.id) {
                let forwarded = core.links.forward(owner, entry(seq, kind), &[]);
                debug_assert!(forwarded, "room was checked for every worker");
            }
            let mut part = Part { bytes: core.pool.pop().unwrap_or_default(), waiting: core.workers - 1, mark: false };
            match route {
                // Executed here as usual (counted once); the other workers only flush or reset.
                Route::Flush(_) | Route::Reset => {
                    let mut resume = 0;
                    execute(&mut core.partition, request, &mut part.bytes, &mut core.state, &mut resume);
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
            connection.parts.push_back(part);
            Step::Done(After::Continue)
        }
    }
}

/// A multi-key text get whose keys several workers own: each key is read where it lives, as
/// its own part of the reply order, and one END follows them all (with `end`; without, more
/// keys of the same line follow).
fn split_get(connection: &mut Connection, slot: usize, core: &mut Core, request: &Request<'_>, end: bool) -> Step {
    let Command::Get { keys, return_cas, touch, .. } = request.command else {
        unreachable!("only text gets are split")
    };
    let mut line = [0u8; GET_LINE_BYTES];
    for (number, key) in keys.iter().enumerate().skip(connection.resume) {
        if connection.parts.len() >= MAX_PARTS || connection.remote_reads >= MAX_REMOTE_READS_PER_CONNECTION {
            connection.resume = number;
            return Step::Blocked;
        }
        let hash = KeyHash::of(key);
        let owner = hash.partition(core.workers as u32) as usize;
        if owner == core.id {
            let out = connection.local_out(&mut core.pool);
            let item = match touch {
                Some(exptime) => core.partition.get_and_touch(key, exptime),
                None => core.partition.get(key),
            };
            let item = item.ok().flatten();
            core.state.counters.read(touch.is_some(), item.is_some());
            core.state.observe_get(key, item.as_ref().map(|item| item.value.len()), true);
            if let Some(item) = item {
                reply::value(out, key, item.flags, item.value, return_cas.then_some(item.cas));
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
        let line = single_get_line(&mut line, key, return_cas, touch);
        if !forward_part(connection, slot, core, owner, Kind::GetKey, hash.0, line) {
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

/// Room for the longest single-key get line: `gats`, an i64 exptime, a 250-byte key, spaces
/// and CRLF.
const GET_LINE_BYTES: usize = 5 + 20 + 1 + tierkv_engine::MAX_KEY_BYTES + 2;

/// The text get (`get`, `gets`, `gat`, `gats`) of one key, written into `buffer`.
fn single_get_line<'b>(
    buffer: &'b mut [u8; GET_LINE_BYTES],
    key: &[u8],
    return_cas: bool,
    touch: Option<i64>,
) -> &'b [u8] {
    use std::io::Write;
    let mut out = &mut buffer[..];
    let verb: &[u8] = match (touch.is_some(), return_cas) {
        (false, false) => b"get ",
        (false, true) => b"gets ",
        (true, false) => b"gat ",
        (true, true) => b"gats ",
    };
    // The buffer holds the longest line, so these writes cannot run out of room.
    let _ = out.write_all(verb);
    if let Some(exptime) = touch {
        let _ = write!(out, "{exptime} ");
    }
    let _ = out.write_all(key);
    let _ = out.write_all(b"\r\n");
    let written = GET_LINE_BYTES - out.len();
    &buffer[..written]
}

/// Writes what the socket takes; false if the connection failed. (A UDP reply is sent whole
/// when it is complete, not here.)
fn flush(connection: &mut Connection, state: &mut State) -> bool {
    let Some(stream) = connection.stream.as_mut() else { return true };
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

/// memcached's reply to a value beyond the item size limit.
const TOO_LARGE: &str = "object too large for cache";

/// Pins the calling thread (a worker) to `cpu`, so it never migrates and no two workers share
/// a CPU while there are enough.
fn pin_to_cpu(cpu: usize, verbose: bool, worker: usize) {
    // SAFETY: cpu_set_t is plain data that sched_setaffinity reads for the calling thread
    // (pid 0) within its size; CPU_SET indexes inside the set (cpu < CPU_SETSIZE, as it came
    // from the affinity mask).
    let pinned = unsafe {
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one) == 0
    };
    if verbose && pinned {
        eprintln!("tierkv: worker {worker} pinned to CPU {cpu}");
    }
}

#[cfg(test)]
mod get_line_tests {
    use super::*;

    #[test]
    fn single_get_lines_hold_the_longest_key_and_exptime() {
        let mut buffer = [0u8; GET_LINE_BYTES];
        assert_eq!(single_get_line(&mut buffer, b"k", false, None), b"get k\r\n");
        assert_eq!(single_get_line(&mut buffer, b"k", true, None), b"gets k\r\n");
        assert_eq!(single_get_line(&mut buffer, b"k", false, Some(-5)), b"gat -5 k\r\n");
        let key = [b'x'; tierkv_engine::MAX_KEY_BYTES];
        let line = single_get_line(&mut buffer, &key, true, Some(i64::MIN)).to_vec();
        assert_eq!(line, [b"gats -9223372036854775808 ".as_slice(), &key, b"\r\n"].concat());
    }
}
