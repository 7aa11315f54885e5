//! memcached's `stats conns`: one group of lines per listening socket and per client
//! connection, keyed by its file descriptor. Each worker lists its own sockets; the worker that
//! serves the request gathers every worker's lines in one reply (see `Route::Conns`).

use std::net::SocketAddr;

/// A socket's address: an IP address and port, or a Unix socket's path (empty for a
/// connected client, which has none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Inet(SocketAddr),
    Unix(String),
}

/// What `stats conns` shows of one socket.
pub(crate) struct Summary {
    pub fd: i32,
    /// The peer (clients) or the bound address (listeners).
    pub addr: Endpoint,
    /// The address the client connected to (None for listeners).
    pub listen_addr: Option<Endpoint>,
    pub udp: bool,
    /// memcached's connection state name.
    pub state: &'static str,
    pub secs_since_last_cmd: u32,
}

/// memcached's `get_conn_text`: `tcp:1.2.3.4:5`, `tcp6:[::1]:5`, `udp:...`, `unix:/path`, and
/// `?:<AF 0>` for a Unix client (accept gives it an empty address of family 0).
fn address(endpoint: &Endpoint, udp: bool) -> String {
    let addr = match endpoint {
        Endpoint::Inet(addr) => addr,
        Endpoint::Unix(path) if path.len() < 2 => return "?:<AF 0>".to_string(),
        Endpoint::Unix(path) => return format!("unix:{path}"),
    };
    let protocol = match (udp, addr.is_ipv6()) {
        (false, false) => "tcp",
        (false, true) => "tcp6",
        (true, false) => "udp",
        (true, true) => "udp6",
    };
    format!("{protocol}:{addr}")
}

/// Appends memcached's lines for `summary`.
pub(crate) fn lines(summary: &Summary, out: &mut Vec<u8>) {
    let fd = summary.fd;
    let mut put = |name: &str, value: &str| out.extend_from_slice(format!("STAT {fd}:{name} {value}\r\n").as_bytes());
    put("addr", &address(&summary.addr, summary.udp));
    if let Some(listen) = &summary.listen_addr {
        put("listen_addr", &address(listen, summary.udp));
    }
    put("state", summary.state);
    put("secs_since_last_cmd", &summary.secs_since_last_cmd.to_string());
}

/// Orders every worker's lines gathered in `lines` by descriptor, as memcached lists its
/// connections (listeners first, then clients as they came; a client's own line is last
/// when it is the newest, which memcached's tests rely on), and ends the reply.
pub(crate) fn finish(lines: &mut Vec<u8>) {
    let fd_of = |line: &[u8]| -> i64 {
        let digits = line.strip_prefix(b"STAT ").unwrap_or_default();
        let end = digits.iter().position(|&b| b == b':').unwrap_or(0);
        std::str::from_utf8(&digits[..end]).ok().and_then(|text| text.parse().ok()).unwrap_or(i64::MAX)
    };
    let mut sorted: Vec<&[u8]> = lines.split_inclusive(|&b| b == b'\n').collect();
    // Stable: each socket's lines keep their order.
    sorted.sort_by_key(|line| fd_of(line));
    let sorted = sorted.concat();
    *lines = sorted;
    tierkv_protocol::reply::status(lines, tierkv_protocol::reply::Status::End);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathered_lines_are_listed_by_descriptor() {
        let mut lines =
            b"STAT 3:addr a\r\nSTAT 3:state s\r\nSTAT 12:addr b\r\nSTAT 4:addr c\r\nSTAT 4:state t\r\n".to_vec();
        finish(&mut lines);
        let expected =
            "STAT 3:addr a\r\nSTAT 3:state s\r\nSTAT 4:addr c\r\nSTAT 4:state t\r\nSTAT 12:addr b\r\nEND\r\n";
        assert_eq!(String::from_utf8(lines).unwrap(), expected);
    }

    #[test]
    fn lines_follow_memcached() {
        let mut out = Vec::new();
        let client = Summary {
            fd: 24,
            addr: Endpoint::Inet("127.0.0.1:48292".parse().unwrap()),
            listen_addr: Some(Endpoint::Inet("127.0.0.1:21211".parse().unwrap())),
            udp: false,
            state: "conn_parse_cmd",
            secs_since_last_cmd: 0,
        };
        lines(&client, &mut out);
        let expected = "STAT 24:addr tcp:127.0.0.1:48292\r\nSTAT 24:listen_addr tcp:127.0.0.1:21211\r\n\
                        STAT 24:state conn_parse_cmd\r\nSTAT 24:secs_since_last_cmd 0\r\n";
        assert_eq!(String::from_utf8(out).unwrap(), expected);
        assert_eq!(address(&Endpoint::Unix("/run/tierkv.sock".into()), false), "unix:/run/tierkv.sock");
        assert_eq!(address(&Endpoint::Unix(String::new()), false), "?:<AF 0>");
        assert_eq!(address(&Endpoint::Inet("[::1]:5".parse().unwrap()), true), "udp6:[::1]:5");
    }
}
