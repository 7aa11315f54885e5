//! `stats`: tierkv's names are memcached 1.6.18's, and its counters count what memcached's
//! count, checked by running one script on both and comparing the numbers.

mod common;

use common::{exchange, exchange_binary_to_sentinel, memcached, memcached_with, tierkv, tierkv_with};
use std::collections::HashMap;

/// The `STAT name value` lines of a reply.
fn parse(reply: &[u8]) -> HashMap<String, String> {
    let text = String::from_utf8_lossy(reply);
    assert!(text.ends_with("END\r\n"), "stats reply ends with END: {text}");
    text.lines()
        .filter_map(|line| line.strip_prefix("STAT "))
        .map(|line| {
            let (name, value) = line.split_once(' ').unwrap();
            (name.to_string(), value.to_string())
        })
        .collect()
}

const SCRIPT: &[u8] = b"set a 0 0 1\r\n1\r\nget a b\r\ngets a\r\ngat 10 a b\r\ntouch a 5\r\ntouch b 5\r\n\
mg a v\r\nmg b v\r\nms c 1\r\n1\r\nma a\r\nma b\r\nmd c\r\nmd c\r\n\
cas a 0 0 1 999\r\n1\r\ncas zz 0 0 1 1\r\n1\r\nincr a 1\r\ndecr a 1\r\nincr zz 1\r\ndecr zz 1\r\n\
add a 0 0 1\r\n2\r\nreplace a 0 0 1\r\n3\r\nappend a 0 0 1\r\n4\r\ndelete a\r\ndelete a\r\n\
set big 0 0 2000000\r\n";

/// Counters whose meaning tierkv shares with memcached exactly.
const SHARED_COUNTERS: &[&str] = &[
    "cmd_get",
    "cmd_set",
    "cmd_flush",
    "cmd_touch",
    "get_hits",
    "get_misses",
    "get_expired",
    "get_flushed",
    "delete_misses",
    "delete_hits",
    "incr_misses",
    "incr_hits",
    "decr_misses",
    "decr_hits",
    "cas_misses",
    "cas_hits",
    "cas_badval",
    "touch_hits",
    "touch_misses",
    "store_too_large",
    "curr_items",
    "curr_connections",
    "rejected_connections",
    "limit_maxbytes",
];

fn run_script(port: u16) -> HashMap<String, String> {
    // An item the flush hides, then read: get_flushed counts it.
    let big = [SCRIPT, &vec![b'x'; 2_000_000], b"\r\nset fl 0 0 1\r\nx\r\nflush_all 0\r\nget fl\r\n"].concat();
    let _ = exchange(port, &big);
    parse(&exchange(port, b"stats\r\n"))
}

#[test]
fn counters_count_what_memcached_counts() {
    // Two workers: the keys of the script live in both partitions and the figures are summed.
    let (ours, theirs) = (tierkv_with(&["-t", "2"]), memcached());
    let (mine, reference) = (run_script(ours.1), run_script(theirs.1));
    for name in SHARED_COUNTERS {
        assert_eq!(mine.get(*name), reference.get(*name), "stat {name}");
    }
    assert_eq!(mine["cmd_flush"], "1");
    assert_eq!((mine["threads"].as_str(), reference["threads"].as_str()), ("2", "1"));
    assert_eq!(mine["version"], format!("1.6.18-tierkv-{}", env!("CARGO_PKG_VERSION")));
    // Bytes read include the 2 MB value; the stats request itself is counted too.
    assert!(mine["bytes_read"].parse::<u64>().unwrap() > 2_000_000);
    assert!(mine["cmd_meta"].parse::<u64>().unwrap() >= 6);
}

#[test]
fn every_name_is_one_memcached_reports_in_the_same_group() {
    let (ours, theirs) = (tierkv(), memcached());
    for group in ["", " settings", " slabs", " items", " sizes"] {
        let request = format!("stats{group}\r\n");
        let (mine, reference) =
            (parse(&exchange(ours.1, request.as_bytes())), parse(&exchange(theirs.1, request.as_bytes())));
        for name in mine.keys() {
            assert!(reference.contains_key(name), "stats{group}: memcached has no {name}");
        }
        if group.is_empty() || group == " settings" {
            // Every name memcached prints, in its order.
            let names = |reply: Vec<u8>| -> Vec<String> {
                let text = String::from_utf8_lossy(&reply).to_string();
                text.lines()
                    .filter_map(|l| l.strip_prefix("STAT "))
                    .map(|l| l.split(' ').next().unwrap().to_string())
                    .collect()
            };
            let (mine, reference) =
                (names(exchange(ours.1, request.as_bytes())), names(exchange(theirs.1, request.as_bytes())));
            assert_eq!(mine, reference, "stats{group}");
            assert!(mine.len() >= 76, "stats{group} reports {} names", mine.len());
        }
    }
    for bad in ["stats nonsense\r\n", "stats detailx\r\n"] {
        assert_eq!(exchange(ours.1, bad.as_bytes()), exchange(theirs.1, bad.as_bytes()), "{bad}");
    }
}

#[test]
fn reset_zeroes_counters_but_not_items() {
    let server = tierkv();
    exchange(server.1, b"set a 0 0 1\r\nx\r\nget a\r\nget b\r\n");
    assert_eq!(exchange(server.1, b"stats reset\r\n"), b"RESET\r\n");
    // The connections before this one are closed, but on a loaded machine the worker that
    // owns one may not have seen its end yet: ask again, a few seconds at most.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let (mut stats, mut asked) = (parse(&exchange(server.1, b"stats\r\n")), 1);
    while stats["curr_connections"] != "1" && std::time::Instant::now() < deadline {
        (stats, asked) = (parse(&exchange(server.1, b"stats\r\n")), asked + 1);
    }
    assert_eq!((stats["cmd_get"].as_str(), stats["get_hits"].as_str(), stats["total_items"].as_str()), ("0", "0", "0"));
    assert_eq!(stats["curr_items"], "1");
    assert_eq!(stats["curr_connections"], "1");
    assert_eq!(stats["total_connections"], asked.to_string(), "connections accepted since the reset");
}

#[test]
fn settings_follow_flags_and_verbosity() {
    let server = tierkv();
    exchange(server.1, b"verbosity 2\r\n");
    let settings = parse(&exchange(server.1, b"stats settings\r\n"));
    assert_eq!(settings["maxbytes"], (64u64 << 20).to_string());
    assert_eq!(settings["tcpport"], server.1.to_string());
    assert_eq!(settings["verbosity"], "2");
    assert_eq!(settings["item_size_max"], (1u64 << 20).to_string());
    let switches = ["shutdown_command", "flush_enabled", "dump_enabled"].map(|name| settings[name].clone());
    assert_eq!(switches, ["no", "yes", "yes"]);
    // memcached's -A, -F and -X show in its settings; tierkv's match it flag for flag.
    for flags in [&[][..], &["-A", "-F", "-X"][..]] {
        let (ours, theirs) = (tierkv_with(flags), memcached_with(flags));
        let switches = |port: u16| {
            let settings = parse(&exchange(port, b"stats settings\r\n"));
            ["shutdown_command", "flush_enabled", "dump_enabled"].map(|name| settings[name].clone())
        };
        assert_eq!(switches(ours.1), switches(theirs.1), "flags {flags:?}");
        if !flags.is_empty() {
            assert_eq!(switches(ours.1), ["yes", "no", "no"]);
        }
    }
    // The lines for sockets, authentication and TLS, without and with -b.
    const NAMES: [&str; 16] = [
        "domain_socket",
        "umask",
        "tcp_backlog",
        "binding_protocol",
        "auth_enabled_sasl",
        "auth_enabled_ascii",
        "ssl_enabled",
        "ssl_chain_cert",
        "ssl_key",
        "ssl_verify_mode",
        "ssl_keyformat",
        "ssl_ciphers",
        "ssl_ca_cert",
        "ssl_wbuf_size",
        "ssl_session_cache",
        "ssl_min_version",
    ];
    for flags in [&[][..], &["-b", "64"][..]] {
        let (ours, theirs) = (tierkv_with(flags), memcached_with(flags));
        let lines = |port: u16| {
            let settings = parse(&exchange(port, b"stats settings\r\n"));
            NAMES.map(|name| format!("{name} {}", settings.get(name).map_or("(missing)", |v| v.as_str())))
        };
        assert_eq!(lines(ours.1), lines(theirs.1), "flags {flags:?}");
    }
}

#[test]
fn binary_stat_sends_one_packet_per_stat() {
    use tierkv_protocol::binary::opcode::STAT;
    let server = tierkv();
    let mut request = Vec::new();
    tierkv_protocol::binary::write_request(&mut request, STAT, 7, 0, &[], b"", b"");
    tierkv_protocol::binary::write_request(&mut request, STAT, 8, 0, &[], b"nonsense", b"");
    let reply = exchange(server.1, &request);
    let mut at = 0;
    let mut names = Vec::new();
    let mut statuses = Vec::new();
    while at + 24 <= reply.len() {
        let key_len = u16::from_be_bytes([reply[at + 2], reply[at + 3]]) as usize;
        let body = u32::from_be_bytes(reply[at + 8..at + 12].try_into().unwrap()) as usize;
        statuses.push(u16::from_be_bytes([reply[at + 6], reply[at + 7]]));
        names.push(String::from_utf8_lossy(&reply[at + 24..at + 24 + key_len]).to_string());
        at += 24 + body;
    }
    assert_eq!(at, reply.len());
    let end = names.iter().position(String::is_empty).expect("an empty packet ends the stats");
    assert!(names[..end].iter().any(|n| n == "pid") && names[..end].iter().any(|n| n == "curr_items"));
    assert_eq!(statuses[end + 1], 1, "an unknown group is KEY_ENOENT");
}

#[test]
fn items_and_slabs_number_classes_as_memcached_does() {
    let (ours, theirs) = (tierkv_with(&["-t", "2"]), memcached());
    let big = "y".repeat(5000);
    let script = format!(
        "set a 0 0 1\r\nx\r\nset bb 5 0 10\r\n0123456789\r\nset c 0 0 5000\r\n{big}\r\nset d 0 0 700\r\n{}\r\n",
        "z".repeat(700)
    );
    for port in [ours.1, theirs.1] {
        exchange(port, script.as_bytes());
    }
    let figures = |port: u16, group: &str, names: &[&str]| -> Vec<(String, String)> {
        let mut lines: Vec<(String, String)> = parse(&exchange(port, format!("stats {group}\r\n").as_bytes()))
            .into_iter()
            .filter(|(name, _)| names.iter().any(|wanted| name.ends_with(wanted)))
            .collect();
        lines.sort();
        lines
    };
    let items = [":number", ":mem_requested", ":evicted"];
    assert_eq!(figures(ours.1, "items", &items), figures(theirs.1, "items", &items));
    let slabs = [":chunk_size", ":used_chunks", ":total_pages", "active_slabs"];
    assert_eq!(figures(ours.1, "slabs", &slabs), figures(theirs.1, "slabs", &slabs));
    // tierkv maps its whole budget at start: total_malloced is what memcached -L would have
    // taken, the limit, and does not grow as items come (memcached's t/issue_14.t).
    let malloced = figures(ours.1, "slabs", &["total_malloced"]);
    assert_eq!(malloced, vec![("total_malloced".to_string(), (64u64 << 20).to_string())]);
    assert_eq!(parse(&exchange(ours.1, b"stats items\r\n"))["items:19:mem_requested"], "5060");
}

#[test]
fn with_a_flash_tier_every_extstore_name_memcached_prints_is_there() {
    let dir = std::env::temp_dir().join(format!("tierkv-stats-ext-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (ours_file, theirs_file) = (dir.join("tierkv.flash"), dir.join("memcached.ext"));
    let ours = tierkv_with(&["-t", "1", "--flash-path", ours_file.to_str().unwrap(), "--flash-size", "64m"]);
    let theirs = memcached_with(&["-o", &format!("ext_path={}:64m", theirs_file.display())]);
    let (mine, reference) = (parse(&exchange(ours.1, b"stats\r\n")), parse(&exchange(theirs.1, b"stats\r\n")));
    for name in reference.keys() {
        assert!(mine.contains_key(name), "memcached -o ext_path prints {name}, tierkv does not");
    }
    drop((ours, theirs));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The binary packets of a reply, checked for framing: (opcode, status, key) each.
fn binary_packets(mut reply: &[u8]) -> Vec<(u8, u16, Vec<u8>)> {
    let mut packets = Vec::new();
    while !reply.is_empty() {
        assert!(reply.len() >= 24 && reply[0] == 0x81, "a binary response header: {reply:?}");
        let key_len = usize::from(u16::from_be_bytes([reply[2], reply[3]]));
        let extras = usize::from(reply[4]);
        let body = u32::from_be_bytes(reply[8..12].try_into().unwrap()) as usize;
        assert!(key_len + extras <= body && reply.len() >= 24 + body, "a whole packet: {reply:?}");
        let status = u16::from_be_bytes([reply[6], reply[7]]);
        packets.push((reply[1], status, reply[24 + extras..24 + extras + key_len].to_vec()));
        reply = &reply[24 + body..];
    }
    packets
}

#[test]
fn binary_stats_keep_the_framing_for_every_group_as_memcached_does() {
    let (ours, theirs) = (tierkv_with(&["-t", "2"]), memcached());
    for group in ["", "settings", "items", "slabs", "sizes", "conns", "bogus", "cachedump 1 1", "detail dump", "reset"]
    {
        let mut request = Vec::new();
        tierkv_protocol::binary::write_request(&mut request, 0x10, 7, 0, &[], group.as_bytes(), &[]);
        let answers = [&ours, &theirs].map(|server| {
            let packets = binary_packets(&exchange_binary_to_sentinel(server.1, &request));
            let (sentinel, stats) = packets.split_last().expect("the sentinel's answer");
            assert_eq!(sentinel.0, 0x0a, "the NOOP after stats {group:?} is answered");
            assert!(stats.iter().all(|packet| packet.0 == 0x10), "stats {group:?}: {stats:?}");
            let (end, named) = stats.split_last().expect("a last packet");
            assert!(named.iter().all(|packet| packet.1 == 0 && !packet.2.is_empty()), "{named:?}");
            // What a client sees: whether there are stats, and how the reply ends.
            (named.is_empty(), end.1, end.2.is_empty())
        });
        assert_eq!(answers[0], answers[1], "binary stats {group:?}: tierkv, then memcached");
    }
}
