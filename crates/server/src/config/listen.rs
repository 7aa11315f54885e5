//! `-l`: the addresses the TCP (and UDP) port listens on, read as memcached reads them: a list
//! separated by commas or semicolons, the flag repeatable, each entry an IP address, an IPv6
//! address in brackets, a host name (every address it resolves to) or `*` (every interface,
//! IPv4 and IPv6), with an optional `:port` that overrides `-p` for that entry.
//!
//! It must not bind anything: it only turns the text into socket addresses.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};

/// At most this many distinct addresses (each costs every worker a listening socket, and a UDP
/// socket and a direct port when those are on).
pub(crate) const MAX_ADDRESSES: usize = 8;

/// Every address `-l` names, without repeats, in the order given; `127.0.0.1` when none is.
pub(super) fn addresses(lists: &[String], port: u16) -> Result<Vec<SocketAddr>, String> {
    let mut addresses: Vec<SocketAddr> = Vec::new();
    for entry in lists.iter().flat_map(|list| list.split([',', ';'])) {
        for address in entry_addresses(entry, port)? {
            if !addresses.contains(&address) {
                addresses.push(address);
            }
        }
    }
    if addresses.len() > MAX_ADDRESSES {
        return Err(format!("names {} addresses; tierkv listens on at most {MAX_ADDRESSES}", addresses.len()));
    }
    if addresses.is_empty() {
        addresses.push(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port));
    }
    Ok(addresses)
}

/// One entry's addresses.
fn entry_addresses(entry: &str, default_port: u16) -> Result<Vec<SocketAddr>, String> {
    let entry = entry.trim();
    if ["notls:", "btls:", "mtls:", "proto[", "tag[", "tag_"].iter().any(|option| entry.starts_with(option)) {
        return Err(format!("{entry:?}: per-listener options (notls, btls, mtls, proto, tag) are not supported"));
    }
    let (host, port) = split_port(entry)?;
    let port = match port {
        None => default_port,
        Some(text) => match text.parse::<u16>() {
            Ok(port) if port > 0 => port,
            _ => return Err(format!("{entry:?}: the port must be 1 to 65535")),
        },
    };
    if host == "*" {
        return Ok(vec![
            SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port),
            SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), port),
        ]);
    }
    if host.is_empty() {
        return Err(format!("{entry:?}: no address"));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    match (host, port).to_socket_addrs() {
        Ok(resolved) => {
            let resolved: Vec<SocketAddr> = resolved.collect();
            if resolved.is_empty() {
                return Err(format!("{host:?} resolves to no address"));
            }
            Ok(resolved)
        }
        Err(error) => Err(format!("{host:?} is not an IP address, and resolving it failed: {error}")),
    }
}

/// An entry's host and its port if it names one: `[v6]:port`, `host:port`; an entry with more
/// than one colon and no brackets is an IPv6 address without a port (as memcached reads it).
fn split_port(entry: &str) -> Result<(&str, Option<&str>), String> {
    if let Some(rest) = entry.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            return Err(format!("{entry:?}: an IPv6 address opened with [ is not closed"));
        };
        return match after {
            "" => Ok((host, None)),
            _ => match after.strip_prefix(':') {
                Some(port) => Ok((host, Some(port))),
                None => Err(format!("{entry:?}: only :port may follow ]")),
            },
        };
    }
    match entry.split_once(':') {
        Some((host, port)) if !port.contains(':') => Ok((host, Some(port))),
        _ => Ok((entry, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(lists: &[&str]) -> Result<Vec<String>, String> {
        let lists: Vec<String> = lists.iter().map(|list| list.to_string()).collect();
        Ok(addresses(&lists, 11211)?.iter().map(|address| address.to_string()).collect())
    }

    #[test]
    fn memcached_forms_are_read() {
        assert_eq!(parsed(&[]).unwrap(), ["127.0.0.1:11211"]);
        assert_eq!(parsed(&["127.0.0.1,::1"]).unwrap(), ["127.0.0.1:11211", "[::1]:11211"]);
        assert_eq!(parsed(&["127.0.0.1;127.0.0.2:4000"]).unwrap(), ["127.0.0.1:11211", "127.0.0.2:4000"]);
        assert_eq!(parsed(&["[::1]:4000", "[::1]"]).unwrap(), ["[::1]:4000", "[::1]:11211"]);
        assert_eq!(parsed(&["*"]).unwrap(), ["0.0.0.0:11211", "[::]:11211"]);
        // Repeats, given in one list or in several flags, are one address.
        assert_eq!(parsed(&["127.0.0.1", "127.0.0.1,127.0.0.1"]).unwrap(), ["127.0.0.1:11211"]);
    }

    #[test]
    fn host_names_resolve() {
        let local = parsed(&["localhost"]).unwrap();
        assert!(!local.is_empty() && local.iter().all(|a| a == "127.0.0.1:11211" || a == "[::1]:11211"), "{local:?}");
    }

    #[test]
    fn bad_entries_say_why() {
        assert!(parsed(&["[::1"]).unwrap_err().contains("not closed"));
        assert!(parsed(&["127.0.0.1:0"]).unwrap_err().contains("1 to 65535"));
        assert!(parsed(&["127.0.0.1:http"]).unwrap_err().contains("1 to 65535"));
        assert!(parsed(&["notls:127.0.0.1"]).unwrap_err().contains("not supported"));
        assert!(parsed(&["no-such-host.invalid"]).unwrap_err().contains("resolving it failed"));
        let many: Vec<String> = (1..=9).map(|i| format!("127.0.0.{i}")).collect();
        assert!(parsed(&[&many.join(",")]).unwrap_err().contains("at most 8"));
    }
}
