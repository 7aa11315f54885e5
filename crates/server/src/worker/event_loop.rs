//! The workers' start and event loop: binding the shared listening sockets, one thread per
//! partition pinned to its CPU, and the loop that polls, takes other workers' messages,
//! accepts, serves connection turns and sends batches.
//!
//! It must not execute requests itself: it hands connections to `turns`, forwarded work to
//! `forwarded`, datagrams to `udp_session`.

use super::admission;
use super::budget::Budget;
use super::streams::listener_addresses;
use super::turns::input_limit;
use super::yields::YieldGate;
use super::{Core, Shared, Source, Start, Worker, TCP_LISTENERS, UDP_SOCKETS, WAKER};
use crate::config::Concurrency;
use crate::config::Settings;
use crate::error::ServeError;
use crate::forward::{Links, Message, Peer};
use crate::limits::{AGAIN_PER_LOOP, READ_CHUNK_BYTES};
use crate::net::tls::{Acceptor, TlsContext};
use crate::net::Listener;
use crate::pending::Kind;
use crate::stats::{ServerState, State};
use crate::sys::partition_lock::Owned;
use crate::sys::signals::{install_signal_handlers, RELOAD, STOP};
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token, Waker};
use std::io::{self};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tierkv_engine::Engine;
use tierkv_engine::{unix_now, AnyPartition as Partition, PartitionConfig};
use tierkv_protocol::Limits;

/// Serves until SIGINT or SIGTERM: binds every socket, then runs one worker per partition.
pub(crate) fn serve(settings: &Settings) -> Result<(), ServeError> {
    install_signal_handlers().map_err(ServeError::system("install the SIGINT/SIGTERM handlers"))?;
    admission::raise_open_files(settings)?;
    let workers = settings.threads;
    // Before the main port listens, so that a client that can connect finds the metrics port
    // (and the flash file's lock) in place too.
    let shared = Arc::new(shared_state(settings)?);
    let mut listeners: Vec<Vec<(Listener, bool)>> = (0..workers).map(|_| Vec::new()).collect();
    let backlog = settings.backlog as i32;
    match &settings.unix_socket {
        Some((path, mask)) => {
            let bound = crate::net::bind_unix(path, *mask, workers, backlog)
                .map_err(|error| ServeError::Unix { path: path.clone(), error })?;
            for (mine, listener) in listeners.iter_mut().zip(bound) {
                mine.push((listener, true));
            }
        }
        None => {
            for &address in &settings.addresses {
                for (mine, listener) in listeners.iter_mut().zip(bind_one(address, workers, backlog)?) {
                    mine.push((Listener::Tcp(listener), true));
                }
            }
        }
    }
    let mut polls = Vec::with_capacity(workers);
    let mut peers = Vec::with_capacity(workers);
    for _ in 0..workers {
        let poll = Poll::new().map_err(ServeError::system("create a poll instance"))?;
        let waker = Waker::new(poll.registry(), WAKER).map_err(ServeError::system("create a waker"))?;
        peers.push(Peer { sleeping: AtomicBool::new(false), waker });
        polls.push(poll);
    }
    let links = crate::forward::connect(&Arc::new(peers));
    let cpus = crate::sys::allowed_cpus();
    let ips = distinct_ips(settings);
    // memcached's UDP port: one socket on each address, read by every worker.
    let mut udp_main = Vec::new();
    if let Some(port) = settings.udp_port {
        for &ip in &ips {
            let at = SocketAddr::new(ip, port);
            udp_main.push(crate::sys::udp::bind(at).map_err(ServeError::socket("-U/--udp-port", at))?);
        }
    }
    let mut starts = Vec::with_capacity(workers);
    for (id, ((poll, mut listeners), links)) in polls.into_iter().zip(listeners).zip(links).enumerate() {
        let mut udp = Vec::new();
        for main in &udp_main {
            let shared = main.try_clone().map_err(ServeError::system("share the UDP socket between workers"))?;
            udp.push(Some(mio::net::UdpSocket::from_std(shared)));
        }
        if let Some(base) = settings.direct_ports {
            for &ip in &ips {
                let at = SocketAddr::new(ip, base + id as u16);
                let direct = TcpListener::bind(at).map_err(ServeError::socket("--direct-ports", at))?;
                listeners.push((Listener::Tcp(direct), false));
                if settings.udp_port.is_some() {
                    let socket = crate::sys::udp::bind(at).map_err(ServeError::socket("--direct-ports (UDP)", at))?;
                    udp.push(Some(mio::net::UdpSocket::from_std(socket)));
                }
            }
        }
        let cpu = (settings.pin_workers && !cpus.is_empty()).then(|| cpus[id % cpus.len()]);
        starts.push(Start { id, poll, listeners, udp, links, cpu });
    }
    // One line whatever the verbosity, so the journal of a daemon says what it serves.
    eprintln!("{}", start_line(settings));
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
                .map_err(ServeError::system("start a worker thread"))
        })
        .collect::<Result<_, _>>()?;
    let mut result = Ok(());
    for thread in threads {
        match thread.join() {
            Ok(Ok(())) => {}
            Ok(Err(message)) => result = Err(message),
            Err(_) => result = Err(ServeError::WorkerPanicked),
        }
    }
    if settings.verbose > 0 {
        eprintln!("tierkv: stopped");
    }
    result
}

/// What a starting server says: its version, where it listens, its workers, memory and flash.
fn start_line(settings: &Settings) -> String {
    let addresses: Vec<String> = settings.addresses.iter().map(SocketAddr::to_string).collect();
    let listen = settings.unix_socket.as_ref().map_or(addresses.join(" "), |(path, _)| path.display().to_string());
    let udp = settings.udp_port.map_or("UDP off".to_string(), |port| format!("UDP port {port}"));
    let direct = settings.direct_ports.map(|base| format!(", direct ports from {base}")).unwrap_or_default();
    let flash = settings
        .flash
        .as_ref()
        .map_or("flash off".to_string(), |flash| format!("flash {} ({} MiB)", flash.path.display(), flash.size >> 20));
    let workers = if settings.threads == 1 { "1 worker".to_string() } else { format!("{} workers", settings.threads) };
    format!(
        "tierkv {}: listening on {listen} ({udp}{direct}), {workers}, {} MiB, {flash}",
        crate::VERSION,
        settings.memory_bytes >> 20
    )
}

/// What every worker shares: counts, tunables, and the security and metrics set up once
/// (certificates, users, the metrics server), each failing start-up with its flag named.
fn shared_state(settings: &Settings) -> Result<Shared, ServeError> {
    let mut server = ServerState::new(settings);
    let tls = match &settings.tls {
        Some(tls) => {
            let context = TlsContext::new(tls.clone(), unix_now().into(), Arc::clone(&server.verbosity));
            Some(Arc::new(context.map_err(ServeError::Tls)?))
        }
        None => None,
    };
    let auth = match &settings.auth_file {
        Some(path) => Some(Arc::new(crate::auth::AuthTable::load(path).map_err(ServeError::Auth)?)),
        None => None,
    };
    let metrics = match settings.metrics {
        Some(at) => {
            let published =
                crate::metrics::Published::new(settings.threads, Arc::clone(&server.memory_limit), tls.clone());
            let published = Arc::new(published);
            crate::metrics::serve(at, Arc::clone(&published)).map_err(ServeError::socket("--metrics-port", at))?;
            Some(published)
        }
        None => None,
    };
    let flash_file = match &settings.flash {
        Some(flash) => Some(Arc::new(super::flash::open_file(flash, settings.threads)?)),
        None => None,
    };
    (server.tls, server.auth) = (tls, auth);
    Ok(Shared {
        flash_file,
        readers: Arc::new((0..settings.threads).map(|_| std::sync::OnceLock::new()).collect()),
        lockables: Arc::new((0..settings.threads).map(|_| std::sync::OnceLock::new()).collect()),
        open_connections: AtomicUsize::new(0),
        handoff: (0..settings.threads).map(|_| admission::Handoff::default()).collect(),
        next_worker: AtomicUsize::new(0),
        worker_conns: (0..settings.threads).map(|_| AtomicUsize::new(0)).collect(),
        arrival_cpus: std::sync::atomic::AtomicU64::new(0),
        udp_amplification: settings.udp_amplification,
        auth_log: Arc::default(),
        metrics,
        server: Arc::new(server),
    })
}

/// The IPs of `-l`'s addresses, each once: UDP and the direct ports listen on each.
fn distinct_ips(settings: &Settings) -> Vec<std::net::IpAddr> {
    let mut ips = Vec::new();
    for address in &settings.addresses {
        if !ips.contains(&address.ip()) {
            ips.push(address.ip());
        }
    }
    ips
}

/// The one listening socket on `address`, as `count` handles (one per worker, all on the same
/// socket). Bound without SO_REUSEPORT, as memcached binds: another process cannot join the
/// port (its bind fails with "address in use"), where with SO_REUSEPORT any process of the same
/// user could silently take a share of the new connections. The workers spread what they
/// accept (`admission.rs`). An IPv6 address takes IPv6 alone, as memcached's, so that `-l *`
/// (or `0.0.0.0,::`) binds both families on one port.
pub(super) fn bind_one(address: SocketAddr, count: usize, backlog: i32) -> Result<Vec<TcpListener>, ServeError> {
    let fail = ServeError::socket("-l/--listen and -p/--port", address);
    let socket =
        socket2::Socket::new(socket2::Domain::for_address(address), socket2::Type::STREAM, None).map_err(fail)?;
    if address.is_ipv6() {
        socket.set_only_v6(true).map_err(fail)?;
    }
    socket.set_reuse_address(true).map_err(fail)?;
    socket.set_nonblocking(true).map_err(fail)?;
    socket.bind(&address.into()).map_err(fail)?;
    socket.listen(backlog).map_err(fail)?;
    let listener: std::net::TcpListener = socket.into();
    let mut handles = Vec::with_capacity(count);
    for _ in 1..count {
        handles.push(TcpListener::from_std(listener.try_clone().map_err(fail)?));
    }
    handles.push(TcpListener::from_std(listener));
    Ok(handles)
}

/// Waits for events or messages on an idle worker: first up to `yields` times it yields its CPU
/// and looks again without blocking, then it blocks for at most `idle`. When the load's
/// clients share the workers' CPUs, the thread a yield lets run is often the client about to
/// send the next request; finding that request after a yield costs two system calls, where
/// blocking costs a context switch out and a wake-up back in (`DEFAULT_IDLE_YIELDS`). With
/// flash reads in flight it first looks without blocking for up to `flash_poll`, yielding
/// between looks (a client on the same CPU runs meanwhile): the completion's eventfd (signalled
/// when a system call of this thread runs the ring's completion work) or a request ends the
/// wait without a sleep and a wake-up. Both kinds of yield stop while yields are slow (the CPU
/// is shared with other busy work, `yields.rs`): then the worker blocks at once.
fn wait_for_work(
    poll: &mut Poll,
    events: &mut Events,
    links: &mut Links,
    inbox: &mut Vec<(usize, Message)>,
    (idle, flash_poll): (Duration, Duration),
    (yields, gate): (usize, &mut YieldGate),
) -> io::Result<()> {
    let start = Instant::now();
    if !flash_poll.is_zero() && gate.open(start) {
        if look_for_work(poll, events, links, inbox)? {
            return Ok(());
        }
        while start.elapsed() < flash_poll {
            let fast = gate.yield_now();
            if work_after_yield(poll, events, links, inbox, gate)? {
                return Ok(());
            }
            if !fast {
                break;
            }
        }
    }
    for _ in 0..yields {
        if !gate.open(start) {
            break;
        }
        let fast = gate.yield_now();
        if work_after_yield(poll, events, links, inbox, gate)? {
            return Ok(());
        }
        if !fast {
            break;
        }
    }
    let timeout = if links.may_sleep(inbox) { idle } else { Duration::ZERO };
    let polled = poll.poll(events, Some(timeout));
    links.awake();
    polled
}

/// Whether events or other workers' messages wait, looked for without blocking.
fn look_for_work(
    poll: &mut Poll,
    events: &mut Events,
    links: &mut Links,
    inbox: &mut Vec<(usize, Message)>,
) -> io::Result<bool> {
    poll.poll(events, Some(Duration::ZERO))?;
    links.receive(inbox);
    Ok(!events.is_empty() || !inbox.is_empty())
}

/// After a yield: looks for work and tells the gate whether there was some.
fn work_after_yield(
    poll: &mut Poll,
    events: &mut Events,
    links: &mut Links,
    inbox: &mut Vec<(usize, Message)>,
    gate: &mut YieldGate,
) -> io::Result<bool> {
    let work = look_for_work(poll, events, links, inbox)?;
    gate.found(work);
    Ok(work)
}

pub(super) fn run_worker(start: Start, settings: &Settings, shared: Arc<Shared>) -> Result<(), ServeError> {
    let Start { id, mut poll, mut listeners, mut udp, links, cpu } = start;
    register_sockets(&poll, &mut listeners, &mut udp)?;
    if let Some(cpu) = cpu {
        pin_to_cpu(cpu, settings.verbose > 0, id);
    }
    let mut worker = Worker::new(id, settings, shared, links, udp)?;
    worker.watch_flash(&poll)?;
    worker.listeners = listener_addresses(&listeners, &worker.udp);
    let mut events = Events::with_capacity(1024);
    let mut inbox: Vec<(usize, Message)> = Vec::new();
    let mut again: Vec<usize> = Vec::new();
    while !STOP.load(Ordering::Relaxed) {
        worker.core.links.receive(&mut inbox);
        // Flash reads in flight are polled for, not waited on: the loop does not sleep.
        let busy = !again.is_empty()
            || !worker.again.is_empty()
            || !inbox.is_empty()
            || worker.udp_again.contains(&true)
            || worker.flash_waiting();
        // Only a worker about to wait asks how long (it scans the flash tier's pending reads).
        let waits = if busy { (Duration::ZERO, Duration::ZERO) } else { (worker.idle_limit(), worker.flash_poll()) };
        // Nothing below uses the partition until the poll returns: a worker must never sleep,
        // yield or wait for its CPU while other workers wait for its lock.
        worker.core.partition.release();
        let polled = if busy {
            poll.poll(&mut events, Some(Duration::ZERO))
        } else {
            let yields = (settings.idle_yields, &mut worker.yield_gate);
            let waited = wait_for_work(&mut poll, &mut events, &mut worker.core.links, &mut inbox, waits, yields);
            let (yields, slow) = worker.yield_gate.take_counts();
            worker.core.state.counters.idle_yields += yields;
            worker.core.state.counters.slow_yields += slow;
            if let Some(contended) = worker.yield_gate.verdict(Instant::now()) {
                worker.shared.server.contention.note(id, contended);
            }
            waited
        };
        debug_assert!(!worker.core.partition.held(), "the partition lock was taken during the wait");
        match polled {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ServeError::System { what: "poll for events", error: e }),
        }
        worker.core.partition.set_clock(unix_now());
        if id == 0 && RELOAD.swap(false, Ordering::Relaxed) {
            worker.reload_certificates();
        }
        worker.core.state.counters.lock_waits += worker.core.partition.take_waits();
        worker.publish_metrics();
        // After every receive: a request forwarded after `stats detail on` sees it on.
        worker.core.state.refresh_observe();
        let core = &mut worker.core;
        crate::admin::apply_memory_limit(&mut core.partition, &core.state, &mut core.memory_applied);
        // Other workers' requests and replies first: someone is waiting for them.
        worker.take_messages(&mut inbox, &poll);
        worker.handle_events(&events, &listeners, &poll);
        worker.flash_turn(&poll);
        if std::mem::take(&mut worker.accept_again) {
            for (listener, shared_port) in &listeners {
                worker.accept(listener, &poll, *shared_port);
            }
        }
        worker.adopt_handed(&poll);
        worker.housekeeping(&poll);
        // At most AGAIN_PER_LOOP leftover turns between two polls, so new clients and events
        // wait for a slice of the busy connections, not for all of them.
        again.append(&mut worker.again);
        let slice = again.len().min(AGAIN_PER_LOOP);
        for slot in again.drain(..slice) {
            worker.turn(slot, &poll);
        }
        for socket in 0..worker.udp_again.len() {
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
        // The flash reads this loop's requests queued: one submission for all of them.
        if let Some(tier) = worker.core.partition.flash() {
            tier.flash_submit();
        }
        // Waking other workers may hand one of them this CPU: not while holding the lock.
        worker.core.partition.release();
        worker.core.links.send_all();
    }
    if settings.verbose > 0 {
        eprintln!("tierkv: worker {id} stopping on signal");
    }
    worker.close_flash();
    Ok(())
}

impl Worker {
    /// The longest an idle worker sleeps: a second; 100 ms while watchers wait for lines, 10 ms
    /// while accepts wait for a descriptor, half `GRANT_STALL` while grants hold too much, none
    /// while a starved connection may go on, and never past a parked authentication attempt's
    /// time or a failed flash write's retry.
    fn idle_limit(&self) -> Duration {
        let idle = if self.watching.is_empty() { Duration::from_secs(1) } else { Duration::from_millis(100) };
        let idle = if self.accept_again { Duration::from_millis(10) } else { idle };
        // Stalled grants are looked at again when their time is up; the next starved
        // connection goes on at once when it may.
        let idle = if self.core.budget.grants_full() { idle.min(super::budget::GRANT_STALL / 2) } else { idle };
        let idle = if self.core.budget.can_relieve() { Duration::ZERO } else { idle };
        // A parked authentication attempt is taken up when its wait ends.
        let idle = match self.auth_waits.iter().map(|&(_, _, until)| until).min() {
            Some(first) => idle.min(first.saturating_duration_since(Instant::now())),
            None => idle,
        };
        match self.core.partition.flash_ref().and_then(|tier| tier.flash_retry_in()) {
            Some(due) => idle.min(due.max(Duration::from_millis(1))),
            None => idle,
        }
    }

    /// What the poll reported: accepts on the listeners, readable UDP sockets and flash
    /// completions noted, and a turn for each connection with an event.
    #[inline(always)]
    fn handle_events(&mut self, events: &Events, listeners: &[(Listener, bool)], poll: &Poll) {
        for event in events.iter() {
            match Source::of(event.token()) {
                Source::TcpListener(i) => {
                    if let Some((listener, shared_port)) = listeners.get(i) {
                        self.accept(listener, poll, *shared_port);
                    }
                }
                Source::Waker => {}
                Source::Flash => self.flash_event(),
                Source::Udp(i) => {
                    if let Some(again) = self.udp_again.get_mut(i) {
                        *again = true;
                    }
                }
                Source::Connection(slot) => {
                    // A short read normally means the socket is drained, but data and the
                    // peer's close can arrive in one edge; then the read must go on to the end.
                    let hangup = event.is_read_closed() || event.is_error();
                    if let Some(Some(connection)) = self.connections.get_mut(slot) {
                        connection.hangup |= hangup;
                    }
                    self.turn(slot, poll);
                }
            }
        }
    }
}

impl Worker {
    /// Once a loop: the once-a-second sweep (idle and slow connections), the connection
    /// budget's accounts, and the starved connections it lets go on.
    fn housekeeping(&mut self, poll: &Poll) {
        if self.core.partition.now() != self.idle_checked {
            self.kick_idle_and_slow(poll);
        }
        self.check_grants(poll);
        self.end_auth_waits();
        self.core.budget.trim();
        self.core.state.conn_buffer_bytes = self.core.budget.held() as u64;
        let relieved = self.core.budget.relieved();
        self.again.extend(relieved);
    }

    /// Executes other workers' requests and delivers their replies.
    fn take_messages(&mut self, inbox: &mut Vec<(usize, Message)>, poll: &Poll) {
        for (from, message) in inbox.drain(..) {
            match message {
                Message::Requests(batch) => {
                    let conns = if batch.entries.iter().any(|entry| entry.kind == Kind::Conns) {
                        self.conns_lines(None)
                    } else {
                        Vec::new()
                    };
                    self.core.execute_forwarded(from, batch, &conns);
                    self.core.partition.release();
                }
                Message::Replies(batch) => self.deliver(from, batch, poll, false),
                Message::Late(batch) => self.deliver(from, batch, poll, true),
            }
        }
    }

    /// A worker with its own partition, sized from the settings.
    fn new(
        id: usize,
        settings: &Settings,
        shared: Arc<Shared>,
        links: Links,
        udp: Vec<Option<mio::net::UdpSocket>>,
    ) -> Result<Worker, ServeError> {
        let workers = settings.threads;
        let config = PartitionConfig {
            memory_bytes: settings.memory_bytes / workers,
            max_memory_bytes: Some(settings.memory_max_bytes / workers),
            index_buckets: None,
            max_item_bytes: settings.max_item_bytes,
            expected_item_bytes: tierkv_engine::DEFAULT_EXPECTED_ITEM_BYTES,
        };
        let mut partition = match Partition::new(settings.mode, &config) {
            // The address space kept for cache_memlimit's growth was refused (a strict
            // overcommit policy, an address-space limit): the partition keeps to -m.
            Err(tierkv_engine::ConfigError::OutOfMemory(_)) if settings.memory_max_bytes > settings.memory_bytes => {
                eprintln!(
                    "tierkv: worker {id}: no address space for --memory-max {} MiB; cache_memlimit cannot grow past -m",
                    settings.memory_max_bytes >> 20
                );
                Partition::new(settings.mode, &PartitionConfig { max_memory_bytes: None, ..config })
            }
            other => other,
        }
        .map_err(ServeError::Partition)?;
        if let (Some(flash), Some(file)) = (&settings.flash, &shared.flash_file) {
            super::flash::attach(&mut partition, flash, file, id, workers, settings.verbose)?;
        }
        if settings.concurrency != Concurrency::Erew {
            if let Some(reader) = partition.crew_reader() {
                let _ = shared.readers[id].set(reader);
            }
        }
        let mut partition = Owned::new(partition);
        if settings.concurrency == Concurrency::Crcw && settings.flash.is_none() && workers > 1 {
            let _ = shared.lockables[id].set(partition.share());
        }
        let limits = Limits { max_value_bytes: settings.max_item_bytes, ..Limits::default() };
        let acceptor = shared.server.tls.clone().map(Acceptor::new);
        let latency = shared.metrics.as_ref().map(|_| Default::default());
        // memcached's -Y turns the binary protocol off, its -S the text protocol.
        let limits = Limits { binary: shared.server.auth.is_none() || settings.sasl, text: !settings.sasl, ..limits };
        Ok(Worker {
            core: Core {
                id,
                workers,
                partition,
                state: State::new(Arc::clone(&shared.server), unix_now()),
                limits,
                links,
                pool: Vec::new(),
                conns_due: Vec::new(),
                memory_applied: settings.memory_bytes,
                budget: Budget::new(
                    Budget::share(settings.conn_memory_bytes, workers, input_limit(&limits)),
                    settings.requests.share_percent,
                ),
                parking: super::parking::Parking::new(
                    settings.flash.is_some(),
                    settings.flash.as_ref().map_or(Duration::ZERO, |flash| flash.poll),
                ),
                readers: Arc::clone(&shared.readers),
                crew_value: Vec::new(),
                lockables: Arc::clone(&shared.lockables),
                guest_lock: settings.guest_lock,
                auth_log: Arc::clone(&shared.auth_log),
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
            auth_waits: Vec::new(),
            receiver: (!udp.is_empty()).then(|| Box::new(crate::sys::udp::Receiver::new())),
            senders: udp.iter().map(|_| Default::default()).collect(),
            udp_again: vec![false; udp.len()],
            udp,
            watching: Vec::new(),
            listeners: Vec::new(),
            acceptor,
            latency,
            published_at: 0,
            started: unix_now(),
            spare: admission::spare_descriptor(),
            accept_again: false,
            idle_checked: 0,
            flash_fd: None,
            yield_gate: YieldGate::default(),
            flash_degraded: false,
        })
    }
}

/// Registers a worker's listening and UDP sockets for readable events.
fn register_sockets(
    poll: &Poll,
    listeners: &mut [(Listener, bool)],
    udp: &mut [Option<mio::net::UdpSocket>],
) -> Result<(), ServeError> {
    let registry = poll.registry();
    let fail = ServeError::system("register a socket for events");
    for (i, (listener, _)) in listeners.iter_mut().enumerate() {
        registry.register(listener, Token(TCP_LISTENERS - i), Interest::READABLE).map_err(fail)?;
    }
    for (i, socket) in udp.iter_mut().enumerate() {
        if let Some(socket) = socket.as_mut() {
            registry.register(socket, Token(UDP_SOCKETS - i), Interest::READABLE).map_err(fail)?;
        }
    }
    Ok(())
}

/// Pins the calling thread (a worker) to `cpu`, so it never migrates and no two workers share
/// a CPU while there are enough.
pub(super) fn pin_to_cpu(cpu: usize, verbose: bool, worker: usize) {
    if crate::sys::pin_to_cpu(cpu) && verbose {
        eprintln!("tierkv: worker {worker} pinned to CPU {cpu}");
    }
}
