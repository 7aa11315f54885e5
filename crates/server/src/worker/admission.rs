//! Who gets in and who is sent away: the open-files limit the server needs (checked at start),
//! accepting connections (with memcached's refusal past `-c`, and a spare descriptor so that
//! running out of descriptors refuses clients instead of leaving them hanging) and dealing
//! those of the shared port out (`--spread`), and closing connections idle longer than `-o
//! idle_timeout`, sending a large request too slowly, or holding connection memory granted
//! for a request they stopped sending (`check_grants`).
//!
//! It must not touch requests: a connection is admitted or closed here, served elsewhere.

use super::budget::GRANT_STALL;
use super::connection::Connection;
use super::Worker;
use crate::config::{Settings, Spread};
use crate::error::ServeError;
use crate::limits::PRESSED_INPUT_BYTES;
use crate::net::{Listener, Stream};
use crate::sys;
use mio::{Interest, Poll, Token};
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;
use tierkv_engine::{unix_now, Engine};

/// Descriptors the server needs beyond one per connection: listeners, epoll and wake-up
/// descriptors, UDP sockets and spare descriptors per worker, standard streams, pid file.
pub(crate) fn descriptors_needed(settings: &Settings) -> u64 {
    settings.conn_limit as u64 + 8 * settings.threads as u64 + 32
}

/// Raises the soft open-files limit to what `-c` needs, or refuses to start (as memcached
/// does) when the hard limit does not allow it.
pub(crate) fn raise_open_files(settings: &Settings) -> Result<(), ServeError> {
    let needed = descriptors_needed(settings);
    let (soft, hard) = sys::open_files_limit().map_err(ServeError::OpenFilesUnknown)?;
    if soft >= needed {
        return Ok(());
    }
    let refused = |limit: u64| ServeError::OpenFiles { conn_limit: settings.conn_limit, needed, limit };
    if hard < needed {
        return Err(refused(hard));
    }
    sys::set_open_files_limit(needed, hard).map_err(|_| refused(soft))
}

/// A descriptor held in reserve: given up to accept (and refuse) one client when the process
/// has no descriptor left.
pub(super) fn spare_descriptor() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

/// Connections accepted for one worker by another (the shared port's round-robin).
#[derive(Default)]
pub(super) struct Handoff {
    /// Set after a connection is put in, so the worker looks without taking the lock.
    pending: AtomicBool,
    /// At most `-c` in all: every one is counted in `open_connections` first.
    streams: Mutex<Vec<Stream>>,
}

impl Handoff {
    fn put(&self, stream: Stream) {
        self.streams.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(stream);
        self.pending.store(true, Ordering::Release);
    }

    fn take(&self) -> Option<Vec<Stream>> {
        if !self.pending.load(Ordering::Relaxed) || !self.pending.swap(false, Ordering::Acquire) {
            return None;
        }
        Some(std::mem::take(&mut *self.streams.lock().unwrap_or_else(std::sync::PoisonError::into_inner)))
    }
}

/// memcached's reply to a client beyond the connection limit (then the connection closes).
const TOO_MANY: &[u8] = b"ERROR Too many open connections\r\n";

/// Connections a worker may hold beyond half again its share before `deal` passes them on.
const GROUP_SLACK: usize = 16;

impl Worker {
    /// Accepts every pending connection on `listener`. On the shared port (`spread`) each goes
    /// to the worker whose turn it is, round-robin over all of them, as memcached's listener
    /// thread deals connections out: every worker gets the same share of the clients whoever
    /// happened to accept them.
    pub(super) fn accept(&mut self, listener: &Listener, poll: &Poll, spread: bool) {
        loop {
            let mut stream = match listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if sys::out_of_descriptors(&e) => {
                    if !self.refuse_one(listener) {
                        // No spare either: try again shortly (the loop polls with a short
                        // timeout while this is set), as memcached backs off its accepts.
                        self.accept_again = true;
                        return;
                    }
                    continue;
                }
                Err(_) => return,
            };
            let limit = self.core.state.shared.settings.conn_limit;
            if self.shared.open_connections.fetch_add(1, Ordering::Relaxed) >= limit {
                self.shared.open_connections.fetch_sub(1, Ordering::Relaxed);
                let _ = stream.write(TOO_MANY);
                self.core.state.counters.rejected_connections += 1;
                continue;
            }
            stream.set_nodelay();
            let target = if spread { self.deal(&stream) } else { self.core.id };
            self.shared.worker_conns[target].fetch_add(1, Ordering::Relaxed);
            if target == self.core.id {
                self.adopt(stream, poll);
            } else {
                self.shared.handoff[target].put(stream);
                self.core.links.wake(target);
            }
        }
    }

    /// The worker a connection accepted on the shared port goes to (`--spread`). With `cpu`,
    /// the worker of the CPU its packets arrive on: the connections of one client thread then
    /// share a worker, whose replies wake that thread alone, and the scheduler keeps the pair
    /// on one CPU (a closed loop of 32 connections from two threads at `-t 2`: 300k requests/s
    /// at p99 0.25 ms, against 190-260k at 0.3-2.5 ms when each thread's connections were
    /// split). The exceptions:
    /// - While most workers find their CPUs shared with other busy work (`Contention`), in
    ///   turn, as memcached deals: a client thread and its worker on one CPU can only run one
    ///   at a time, and beside busy processes they get one share of it where two threads would
    ///   get two (beside three busy processes: 98k requests/s grouped against 132k in turn).
    /// - From another host, until packets have arrived on two CPUs, in turn: there the CPU is
    ///   the network card's receive queue's, and one queue would group nothing. A client on
    ///   this host sends from its own CPU, which is the thing to group by (its first thread's
    ///   connections were dealt in turn when they were the first seen).
    /// - A worker holding more than half again its share plus `GROUP_SLACK` passes the
    ///   connection to the one with the fewest. The slack lets a client thread open its pool
    ///   on one worker before the next thread connects (without it a thread's 16 connections
    ///   were split 12 and 4).
    fn deal(&self, stream: &Stream) -> usize {
        let workers = self.core.workers;
        let by_turn = || self.shared.next_worker.fetch_add(1, Ordering::Relaxed) % workers;
        if self.core.state.shared.settings.spread == Spread::RoundRobin {
            return by_turn();
        }
        if self.shared.server.contention.holds() {
            return by_turn();
        }
        let Some(cpu) = incoming_cpu(stream) else { return by_turn() };
        // Packets all arriving on one CPU (one receive queue) would group nothing: in turn.
        let seen = self.shared.arrival_cpus.fetch_or(1 << (cpu % 64), Ordering::Relaxed) | 1 << (cpu % 64);
        if seen.count_ones() < 2 && !from_this_host(stream) {
            return by_turn();
        }
        let target = cpu % workers;
        let count = |w: usize| self.shared.worker_conns[w].load(Ordering::Relaxed);
        let share = (0..workers).map(count).sum::<usize>() / workers;
        if count(target) < share + share / 2 + GROUP_SLACK {
            return target;
        }
        (0..workers).min_by_key(|&w| count(w)).unwrap_or(target)
    }

    /// Connections other workers accepted for this one.
    pub(super) fn adopt_handed(&mut self, poll: &Poll) {
        if let Some(streams) = self.shared.handoff[self.core.id].take() {
            for stream in streams {
                self.adopt(stream, poll);
            }
        }
    }

    /// Serves an accepted connection (counted in `open_connections` already) from now on.
    fn adopt(&mut self, mut stream: Stream, poll: &Poll) {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.connections.push(None);
            self.connections.len() - 1
        });
        if let Some(acceptor) = self.acceptor.as_mut() {
            stream = match stream.into_tls(acceptor) {
                Ok(stream) => stream,
                Err(_) => {
                    self.free.push(slot);
                    self.shared.open_connections.fetch_sub(1, Ordering::Relaxed);
                    self.shared.worker_conns[self.core.id].fetch_sub(1, Ordering::Relaxed);
                    return;
                }
            };
        }
        if poll.registry().register(&mut stream, Token(slot), Interest::READABLE | Interest::WRITABLE).is_err() {
            self.free.push(slot);
            self.shared.open_connections.fetch_sub(1, Ordering::Relaxed);
            self.shared.worker_conns[self.core.id].fetch_sub(1, Ordering::Relaxed);
            let _ = stream.write(TOO_MANY);
            self.core.state.counters.rejected_connections += 1;
            return;
        }
        self.next_generation += 1;
        let mut connection =
            Connection::new(Some(stream), None, self.next_generation, self.shared.server.auth.is_some());
        connection.last_command = self.core.partition.now();
        self.connections[slot] = Some(connection);
        self.core.state.curr_connections += 1;
        self.core.state.counters.total_connections += 1;
    }

    /// SIGHUP: loads the TLS certificates again (the old ones stay if that fails).
    pub(super) fn reload_certificates(&mut self) {
        let Some(tls) = &self.shared.server.tls else { return };
        match tls.refresh(unix_now().into()) {
            Ok(()) if self.core.state.shared.settings.verbose > 0 => eprintln!("tierkv: TLS certificates reloaded"),
            Ok(()) => {}
            Err(message) => eprintln!("tierkv: SIGHUP: {message}; the previous certificates stay"),
        }
    }

    /// Out of descriptors: frees the spare, accepts one waiting client on it, refuses it with
    /// memcached's error and takes the spare back. False if there was no spare or no client.
    fn refuse_one(&mut self, listener: &Listener) -> bool {
        if self.spare.take().is_none() {
            return false;
        }
        let refused = match listener.accept() {
            Ok(mut stream) => {
                let _ = stream.write(TOO_MANY);
                self.core.state.counters.rejected_connections += 1;
                true
            }
            Err(_) => false,
        };
        self.spare = spare_descriptor();
        refused
    }

    /// Once a second (the loop checks the clock): takes the finisher's place from one that
    /// stopped sending (`Budget`), closes the connections that have completed no request for
    /// longer than `-o idle_timeout` and have no replies waiting (memcached's idle kicks; a request left
    /// half sent, or trickled in a byte at a time, counts as idle too), and those sending a
    /// large request slower than `--request-min-rate` (`slow_request`). A connection waiting
    /// on the server (for connection memory, or for replies from another worker or from
    /// flash) is never kicked: its clocks start again when the wait ends.
    pub(super) fn kick_idle_and_slow(&mut self, poll: &Poll) {
        let settings = &self.core.state.shared.settings;
        let (timeout, requests) = (settings.idle_timeout, settings.requests);
        let now = self.core.partition.now();
        self.idle_checked = now;
        if self.core.id == 0 {
            self.check_flash_path();
        }
        self.note_flash_health();
        for slot in 0..self.connections.len() {
            let Some(connection) = self.connections[slot].as_mut() else { continue };
            self.core.budget.still_finishing(connection);
            if connection.starved || connection.blocked || !connection.order.is_empty() {
                connection.last_command = now;
                connection.request_since = now;
                continue;
            }
            if connection.stream.is_none() || connection.watching().is_some() || connection.dump().is_some() {
                continue;
            }
            let idle =
                timeout > 0 && connection.output.is_empty() && now.saturating_sub(connection.last_command) > timeout;
            if idle {
                self.core.state.counters.idle_kicks += 1;
                self.close(slot, poll);
            } else if slow_request(connection, now, requests) {
                self.core.state.counters.slow_request_kicks += 1;
                if self.core.state.shared.settings.verbose > 0 {
                    let (wanted, read) = (connection.wanted, connection.input.len());
                    let since = now.saturating_sub(connection.request_since);
                    let peer = Stream::peer_label(connection.stream.as_ref());
                    eprintln!(
                        "tierkv: closed a connection from {peer}: {read} bytes of a {wanted}-byte request in \
                         {since} s, slower than --request-min-rate {} KiB/s after --request-grace {} s",
                        requests.min_rate_bytes >> 10,
                        requests.grace_seconds
                    );
                }
                self.close(slot, poll);
            }
        }
    }
}

impl Worker {
    /// Counts what the grants (former finishers still reading their requests) hold; while
    /// that is more than twice the share, closes the oldest that delivered nothing for `GRANT_STALL`
    /// (bytes waiting in its socket count as delivered), so their memory comes back and the
    /// next client with a large request is let through.
    pub(super) fn check_grants(&mut self, poll: &Poll) {
        let (connections, budget) = (&self.connections, &mut self.core.budget);
        let mut held = 0;
        budget.grants.retain(|g| match connections.get(g.slot).and_then(Option::as_ref) {
            Some(c) if c.generation == g.generation && c.wanted > PRESSED_INPUT_BYTES => {
                held += c.input.capacity();
                true
            }
            _ => false,
        });
        budget.grants_held = held;
        let now = Instant::now();
        let mut at = 0;
        while at < self.core.budget.grants.len() && self.core.budget.grants_full() {
            let grant = self.core.budget.grants[at];
            let Some(connection) = self.connections[grant.slot].as_ref() else { break };
            let queued = connection.stream.as_ref().map_or(0, Stream::queued_input);
            let delivered = connection.input.len() + queued;
            // Waiting for its turn with bytes it sent unread: the wait is ours, not its.
            let waits_on_us = connection.starved && queued > 0;
            if self.core.budget.is_finisher(connection) || delivered > grant.delivered || waits_on_us {
                let grant = &mut self.core.budget.grants[at];
                (grant.delivered, grant.since) = (delivered.max(grant.delivered), now);
                at += 1;
                continue;
            }
            if now.duration_since(grant.since) < GRANT_STALL {
                at += 1;
                continue;
            }
            self.core.budget.grants_held -= connection.input.capacity();
            self.core.budget.grants.remove(at);
            self.core.state.counters.slow_request_kicks += 1;
            if self.core.state.shared.settings.verbose > 0 {
                let (read, wanted) = (connection.input.len(), connection.wanted);
                let peer = Stream::peer_label(connection.stream.as_ref());
                eprintln!(
                    "tierkv: closed a connection from {peer}: {read} bytes of a {wanted}-byte request, nothing more \
                     for {} ms while other clients wait for connection memory",
                    GRANT_STALL.as_millis()
                );
            }
            self.close(grant.slot, poll);
        }
    }
}

/// Whether `connection` sends its large request (beyond `PRESSED_INPUT_BYTES`) so slowly that
/// it must go: after the grace time, it has delivered (read, or waiting in its socket) less
/// than the minimum rate times the seconds since. So one that stops midway goes after the grace plus what it sent at that rate:
/// its claim on memory is bounded by what it delivers.
fn slow_request(connection: &Connection, now: u32, requests: crate::config::RequestSettings) -> bool {
    if requests.min_rate_bytes == 0 || connection.wanted <= PRESSED_INPUT_BYTES {
        return false;
    }
    let counted = u64::from(now.saturating_sub(connection.request_since).saturating_sub(requests.grace_seconds));
    let due = requests.min_rate_bytes.saturating_mul(counted);
    // Bytes waiting in the socket reached the server: a worker that was itself descheduled,
    // or held back reading, must not count them against the client.
    (connection.input.len() as u64) < due
        && ((connection.input.len() + connection.stream.as_ref().map_or(0, Stream::queued_input)) as u64) < due
}

/// Whether the client runs on this host (loopback, or the server's own address): its packets
/// arrive on the CPU its thread sent them from.
fn from_this_host(stream: &Stream) -> bool {
    match (stream.peer_ip(), stream.local()) {
        (Some(peer), _) if peer.is_loopback() => true,
        (Some(peer), Some(crate::conns::Endpoint::Inet(local))) => peer == local.ip(),
        _ => false,
    }
}

/// The CPU that last processed the connection's packets (`SO_INCOMING_CPU`), if known.
fn incoming_cpu(stream: &Stream) -> Option<usize> {
    use std::os::fd::AsRawFd;
    let mut cpu: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cpu`, a live c_int on the stack.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_INCOMING_CPU,
            (&mut cpu as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (rc == 0 && cpu >= 0).then_some(cpu as usize)
}
