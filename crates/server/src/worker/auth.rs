//! memcached's authentication on a connection, ASCII (`-Y`) or binary SASL (`-S`): before the
//! client has authenticated, its input goes here instead of to the request decoder. Each attempt is
//! answered and counted (`auth_cmds`, `auth_errors`); once one succeeds, the rest of the input
//! is served as usual. A failure is logged with the client's address (at most a line a second
//! per worker), and after `--auth-max-failures` of them the connection is closed. After a
//! failure, the next attempt from the same source waits (`auth_throttle.rs`: doubling up to
//! 2 s), on any connection: the connection is parked until then (`Worker::auth_waits`), the
//! worker goes on serving others. Guessing costs seconds per guess, and it shows.

use std::time::{Duration, Instant};

use super::connection::Connection;
use super::{Core, Worker};
use crate::auth_throttle::{Source, Throttle};
use tierkv_protocol::auth::{self, AsciiAuth};

/// Failed attempts, logged at most once a second (the line says how many went unlogged), and
/// the sources whose attempts wait; shared by the workers.
#[derive(Default)]
pub(super) struct AuthLog {
    next: Option<Instant>,
    unlogged: u64,
    throttle: Throttle,
}

impl Worker {
    /// Parked authentication attempts whose wait is over get their turn.
    pub(super) fn end_auth_waits(&mut self) {
        if self.auth_waits.is_empty() {
            return;
        }
        let now = Instant::now();
        let connections = &self.connections;
        let again = &mut self.again;
        self.auth_waits.retain(|&(slot, generation, until)| {
            if until > now {
                return true;
            }
            if connections.get(slot).and_then(Option::as_ref).is_some_and(|c| c.generation == generation) {
                again.push(slot);
            }
            false
        });
    }
}

/// Whether `connection`'s attempts must wait (its source failed lately): then it is parked
/// until the wait ends, and nothing of its input is taken meanwhile.
fn must_wait(connection: &mut Connection, core: &Core) -> bool {
    let source = Source::of(connection.stream.as_ref().and_then(crate::net::Stream::peer_ip));
    let until = core.auth_log.lock().ok().and_then(|mut log| log.throttle.wait(source, Instant::now()));
    connection.auth_until = until;
    until.is_some()
}

/// A successful attempt: its source is no longer slowed.
fn succeeded(connection: &Connection, core: &Core) {
    let source = Source::of(connection.stream.as_ref().and_then(crate::net::Stream::peer_ip));
    if let Ok(mut log) = core.auth_log.lock() {
        log.throttle.succeeded(source);
    }
}

impl AuthLog {
    /// Logs `what` now, or counts it if a line went out less than a second ago.
    fn note(&mut self, now: Instant, what: impl FnOnce() -> String) {
        if self.next.is_some_and(|next| now < next) {
            self.unlogged += 1;
            return;
        }
        let unlogged = std::mem::take(&mut self.unlogged);
        let more = if unlogged > 0 { format!(" ({unlogged} more not logged)") } else { String::new() };
        eprintln!("tierkv: {}{more}", what());
        self.next = Some(now + Duration::from_secs(1));
    }
}

/// A failed attempt (`kind` says how; `user` as given): logged, and the connection closed once
/// it has failed `--auth-max-failures` times.
fn failed(connection: &mut Connection, core: &mut Core, kind: &str, user: &[u8]) {
    connection.auth_failures += 1;
    let max = core.state.shared.settings.auth_max_failures;
    let close = max > 0 && connection.auth_failures >= max;
    let (stream, failures) = (connection.stream.as_ref(), connection.auth_failures);
    let source = Source::of(stream.and_then(crate::net::Stream::peer_ip));
    if let Ok(mut log) = core.auth_log.lock() {
        let now = Instant::now();
        let delay = log.throttle.failed(source, now);
        log.note(now, || {
            let peer = crate::net::Stream::peer_label(stream);
            let user = String::from_utf8_lossy(&user[..user.len().min(64)]).into_owned();
            let then = if close { ", closing the connection" } else { "" };
            format!(
                "{kind} authentication failed for user {user:?} from {peer} ({failures} on this connection{then}; \
                 its next attempt waits {} ms)",
                delay.as_millis()
            )
        });
    }
    if close {
        connection.close_after_replies();
    }
}

/// Takes authentication attempts from the front of the input; true once the connection has
/// authenticated (what follows is then served), false while it has not.
pub(super) fn authenticate(connection: &mut Connection, core: &mut Core) -> bool {
    let Some(table) = core.state.shared.auth.clone() else {
        connection.grant();
        return true;
    };
    if core.state.shared.settings.sasl {
        return sasl_authenticate(connection, core, &table);
    }
    let input = std::mem::take(&mut connection.input);
    let mut at = 0;
    while !connection.authenticated() && at < input.len() && !must_wait(connection, core) {
        let out = connection.local_out(&mut core.pool);
        match auth::decode(&input[at..]) {
            AsciiAuth::Incomplete => break,
            AsciiAuth::Close => {
                connection.close_after_replies();
                at = input.len();
            }
            AsciiAuth::Refused { reply, consumed } => {
                out.extend_from_slice(reply);
                at += consumed;
            }
            AsciiAuth::Credentials { user, password, consumed } => {
                core.state.counters.auth_cmds += 1;
                if table.check(user, password) {
                    out.extend_from_slice(b"STORED\r\n");
                    connection.grant();
                    succeeded(connection, core);
                } else {
                    core.state.counters.auth_errors += 1;
                    out.extend_from_slice(auth::FAILED);
                    failed(connection, core, "ASCII", user);
                }
                at += consumed;
                if connection.is_closing() {
                    at = input.len();
                }
            }
        }
    }
    connection.input = input;
    connection.input.drain(..at);
    connection.authenticated()
}

/// `-S` before authentication: SASL requests and VERSION are answered; any other binary
/// request gets AUTH_ERROR and the connection closes, as does a text request (the connection
/// speaks binary only).
fn sasl_authenticate(connection: &mut Connection, core: &mut Core, table: &crate::auth::AuthTable) -> bool {
    use tierkv_protocol::binary::{self, status, REQUEST_MAGIC};
    use tierkv_protocol::{Command, Decoded, ReplyStyle};
    let input = std::mem::take(&mut connection.input);
    let mut at = 0;
    while !connection.authenticated() && !connection.is_closing() && at < input.len() && !must_wait(connection, core) {
        // memcached reads a whole header before it looks at the magic byte.
        if input.len() - at < binary::HEADER_BYTES {
            break;
        }
        if input[at] != REQUEST_MAGIC {
            connection.close_after_replies();
            at = input.len();
            break;
        }
        let (request, consumed) = match binary::decode_request(&input[at..], &core.limits) {
            Decoded::Incomplete { .. } => break,
            Decoded::Error(_) => {
                connection.close_after_replies();
                at = input.len();
                break;
            }
            Decoded::Request { request, consumed } => (request, consumed),
        };
        at += consumed;
        let ReplyStyle::Binary(info) = request.style else { continue };
        let out = connection.local_out(&mut core.pool);
        let (authenticated, close) = match request.command {
            Command::Sasl { opcode, key, value } => {
                let outcome = crate::auth::sasl(table, opcode, key, value, &info, out);
                core.state.counters.sasl(outcome);
                if outcome == crate::auth::SaslOutcome::Refused {
                    // PLAIN's message is [authzid] NUL authcid NUL password.
                    let user = value.split(|&b| b == 0).nth(1).unwrap_or_default().to_vec();
                    failed(connection, core, "SASL", &user);
                }
                (outcome == crate::auth::SaslOutcome::Authenticated, false)
            }
            Command::Version => {
                binary::write_response(out, &info, status::SUCCESS, 0, &[], &[], crate::VERSION.as_bytes());
                (false, false)
            }
            _ => {
                binary::write_error(out, &info, status::AUTH_ERROR);
                (false, true)
            }
        };
        if authenticated {
            connection.grant();
            succeeded(connection, core);
        }
        if close {
            connection.close_after_replies();
        }
    }
    if connection.is_closing() {
        at = input.len();
    }
    connection.input = input;
    connection.input.drain(..at);
    connection.authenticated()
}
