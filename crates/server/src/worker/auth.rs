//! memcached's ASCII authentication (`-Y`) on a connection: before the client has
//! authenticated, its input goes here instead of to the request decoder. Each attempt is
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
