//! Who gets in and who is sent away: the open-files limit the server needs (checked at start),
//! accepting connections (with memcached's refusal past `-c`, and a spare descriptor so that
//! running out of descriptors refuses clients instead of leaving them hanging), and closing
//! connections idle longer than `-o idle_timeout`.
//!
//! It must not touch requests: a connection is admitted or closed here, served elsewhere.

use super::{Connection, Worker};
use crate::config::Settings;
use crate::error::ServeError;
use crate::net::Listener;
use crate::sys;
use mio::{Interest, Poll, Token};
use std::io::{self, Write};
use std::sync::atomic::Ordering;
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

/// memcached's reply to a client beyond the connection limit (then the connection closes).
const TOO_MANY: &[u8] = b"ERROR Too many open connections\r\n";

impl Worker {
    /// Accepts every pending connection on `listener`.
    pub(super) fn accept(&mut self, listener: &Listener, poll: &Poll) {
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
            let limit = self.core.state.settings.conn_limit;
            if self.shared.open_connections.fetch_add(1, Ordering::Relaxed) >= limit {
                self.shared.open_connections.fetch_sub(1, Ordering::Relaxed);
                let _ = stream.write(TOO_MANY);
                self.core.state.counters.rejected_connections += 1;
                continue;
            }
            let slot = self.free.pop().unwrap_or_else(|| {
                self.connections.push(None);
                self.connections.len() - 1
            });
            stream.set_nodelay();
            if let Some(acceptor) = self.acceptor.as_mut() {
                stream = match stream.into_tls(acceptor) {
                    Ok(stream) => stream,
                    Err(_) => {
                        self.free.push(slot);
                        self.shared.open_connections.fetch_sub(1, Ordering::Relaxed);
                        continue;
                    }
                };
            }
            if poll.registry().register(&mut stream, Token(slot), Interest::READABLE | Interest::WRITABLE).is_err() {
                self.free.push(slot);
                self.shared.open_connections.fetch_sub(1, Ordering::Relaxed);
                let _ = stream.write(TOO_MANY);
                self.core.state.counters.rejected_connections += 1;
                continue;
            }
            self.next_generation += 1;
            let mut connection = Connection::new(Some(stream), None, self.next_generation);
            connection.authenticated = self.shared.auth.is_none();
            connection.last_command = self.core.partition.now();
            self.connections[slot] = Some(connection);
            self.core.state.curr_connections += 1;
            self.core.state.counters.total_connections += 1;
        }
    }

    /// SIGHUP: loads the TLS certificates again (the old ones stay if that fails).
    pub(super) fn reload_certificates(&mut self) {
        let Some(tls) = &self.shared.tls else { return };
        match tls.refresh(unix_now().into()) {
            Ok(()) if self.core.state.settings.verbose > 0 => eprintln!("tierkv: TLS certificates reloaded"),
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

    /// Closes the connections that have completed no request for longer than `-o
    /// idle_timeout` and have no replies waiting (memcached's idle kicks; a request left half
    /// sent, or trickled in a byte at a time, counts as idle too); at most once a second. A
    /// connection waiting on the server (for connection memory, or for replies from another
    /// worker or from flash) is never kicked: its clock starts again when the wait ends.
    pub(super) fn kick_idle(&mut self, poll: &Poll) {
        let timeout = self.core.state.settings.idle_timeout;
        let now = self.core.partition.now();
        if timeout == 0 || now == self.idle_checked {
            return;
        }
        self.idle_checked = now;
        for slot in 0..self.connections.len() {
            let Some(connection) = self.connections[slot].as_mut() else { continue };
            if connection.starved || connection.blocked || !connection.order.is_empty() {
                connection.last_command = now;
                continue;
            }
            let waiting = connection.stream.is_some()
                && connection.watching.is_none()
                && connection.dump.is_none()
                && connection.output.is_empty()
                && connection.order.is_empty();
            if waiting && now.saturating_sub(connection.last_command) > timeout {
                self.core.state.counters.idle_kicks += 1;
                self.close(slot, poll);
            }
        }
    }
}
