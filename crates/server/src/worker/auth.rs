//! memcached's authentication on a connection, ASCII (`-Y`) or binary SASL (`-S`): before the
//! client has authenticated, its input goes here instead of to the request decoder. Each attempt is
//! answered and counted (`auth_cmds`, `auth_errors`); once one succeeds, the rest of the input
//! is served as usual.

use super::{Connection, Core};
use tierkv_protocol::auth::{self, AsciiAuth};

/// Takes authentication attempts from the front of the input; true once the connection has
/// authenticated (what follows is then served), false while it has not.
pub(super) fn authenticate(connection: &mut Connection, core: &mut Core) -> bool {
    let Some(table) = core.state.auth.clone() else {
        connection.authenticated = true;
        return true;
    };
    if core.state.settings.sasl {
        return sasl_authenticate(connection, core, &table);
    }
    let input = std::mem::take(&mut connection.input);
    let mut at = 0;
    while !connection.authenticated && at < input.len() {
        let out = connection.local_out(&mut core.pool);
        match auth::decode(&input[at..]) {
            AsciiAuth::Incomplete => break,
            AsciiAuth::Close => {
                connection.closing = true;
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
                    connection.authenticated = true;
                } else {
                    core.state.counters.auth_errors += 1;
                    out.extend_from_slice(auth::FAILED);
                }
                at += consumed;
            }
        }
    }
    connection.input = input;
    connection.input.drain(..at);
    connection.authenticated
}

/// `-S` before authentication: SASL requests and VERSION are answered; any other binary
/// request gets AUTH_ERROR and the connection closes, as does a text request (the connection
/// speaks binary only).
fn sasl_authenticate(connection: &mut Connection, core: &mut Core, table: &crate::auth::AuthTable) -> bool {
    use tierkv_protocol::binary::{self, status, REQUEST_MAGIC};
    use tierkv_protocol::{Command, Decoded, ReplyStyle};
    let input = std::mem::take(&mut connection.input);
    let mut at = 0;
    while !connection.authenticated && !connection.closing && at < input.len() {
        // memcached reads a whole header before it looks at the magic byte.
        if input.len() - at < binary::HEADER_BYTES {
            break;
        }
        if input[at] != REQUEST_MAGIC {
            connection.closing = true;
            at = input.len();
            break;
        }
        let (request, consumed) = match binary::decode_request(&input[at..], &core.limits) {
            Decoded::Incomplete { .. } => break,
            Decoded::Error(_) => {
                connection.closing = true;
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
        connection.authenticated = authenticated;
        connection.closing |= close;
    }
    if connection.closing {
        at = input.len();
    }
    connection.input = input;
    connection.input.drain(..at);
    connection.authenticated
}
