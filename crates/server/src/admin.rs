//! memcached's administrative commands (`shutdown`, `slabs`, `cache_memlimit`, `lru_crawler`,
//! `lru`, `watch`) with memcached 1.6.18's replies, mapped onto tierkv's engine: it has no slab
//! classes (the whole log is class 1 wherever a class appears), no LRU segments and no crawler
//! thread, so tuning commands without a meaning here are accepted with memcached's reply and
//! change nothing (the README lists them).
//!
//! It must not touch the data path: these are parsed only when a line names one of them.

use crate::after::After;
use crate::dump::{DumpKind, CLASS};
use crate::stats::State;
use std::sync::atomic::Ordering;
use tierkv_engine::AnyPartition;
use tierkv_engine::Engine;
use tierkv_protocol::reply::{self, Status};
use tierkv_protocol::{strtol32, strtoul32, ErrorReply};

/// The most slab class ids memcached knows (`MAX_NUMBER_OF_SLAB_CLASSES`).
pub(crate) const SLAB_CLASSES: u32 = 64;

/// memcached's refusal of a metadump behind replies it has not written yet (a metadump takes
/// over the connection).
pub(crate) const METADUMP_BEHIND_REPLIES: &[u8] = b"ERROR cannot pipeline other commands before metadump\r\n";

/// memcached's `refresh_certs`: loads the TLS certificates again; the old ones stay on failure.
fn refresh_certs(state: &State, out: &mut Vec<u8>) {
    match &state.shared.tls {
        None => out.extend_from_slice(b"Error TLS not enabled\r\n"),
        Some(tls) => match tls.refresh(tierkv_engine::unix_now().into()) {
            Ok(()) => reply::status(out, Status::Ok),
            Err(message) => out.extend_from_slice(format!("{message}\r\n").as_bytes()),
        },
    }
}

/// Executes an administrative command line and appends memcached's reply.
pub(crate) fn execute(line: &[u8], partition: &mut AnyPartition, state: &mut State, out: &mut Vec<u8>) -> After {
    let mut tokens: Vec<&[u8]> = line.split(|&b| b == b' ').filter(|token| !token.is_empty()).collect();
    // memcached's tokenizer stops at 24 tokens; nothing here needs more.
    tokens.truncate(24);
    let noreply = tokens.len() > 1 && tokens.last() == Some(&&b"noreply"[..]);
    let start = out.len();
    let after = match tokens[0] {
        b"shutdown" => shutdown(&tokens, state, out),
        b"slabs" => {
            slabs(&tokens, out);
            After::Continue
        }
        b"cache_memlimit" => {
            cache_memlimit(&tokens, partition, state, out);
            After::Continue
        }
        b"lru_crawler" => lru_crawler(&tokens, state, out),
        b"lru" => {
            lru(&tokens, out);
            After::Continue
        }
        b"watch" => watch(&tokens, state, out),
        b"refresh_certs" => {
            refresh_certs(state, out);
            After::Continue
        }
        _ => {
            reply::error(out, &ErrorReply::Error);
            After::Continue
        }
    };
    // memcached's set_noreply_maybe: these commands honour a trailing noreply.
    let honours_noreply = matches!(tokens[0], b"cache_memlimit" | b"lru" | b"watch")
        || (tokens[0] == b"slabs" && tokens.get(1) == Some(&&b"automove"[..]));
    if noreply && honours_noreply {
        out.truncate(start);
    }
    after
}

fn line(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// memcached's safe_strtod (the lru and slabs tuning factors).
fn number<T: std::str::FromStr>(token: &[u8]) -> Option<T> {
    std::str::from_utf8(token).ok()?.parse().ok()
}

fn shutdown(tokens: &[&[u8]], state: &State, out: &mut Vec<u8>) -> After {
    if !state.shared.settings.admin.shutdown {
        line(out, "ERROR: shutdown not enabled");
        return After::Continue;
    }
    match tokens {
        [_] | [_, b"graceful"] => {
            // memcached raises SIGINT (or SIGUSR1 for graceful) and closes without a reply;
            // tierkv's workers finish their turn and stop the same way as on SIGTERM.
            crate::sys::signals::STOP.store(true, std::sync::atomic::Ordering::Relaxed);
            After::Close
        }
        _ => {
            line(out, "CLIENT_ERROR invalid shutdown mode");
            After::Continue
        }
    }
}

fn slabs(tokens: &[&[u8]], out: &mut Vec<u8>) {
    match tokens {
        [_, b"reassign", source, destination] => {
            let (Some(source), Some(destination)) = (strtol32(source), strtol32(destination)) else {
                return line(out, "CLIENT_ERROR bad command line format");
            };
            // No class has pages to give: tierkv's log is not cut into slab pages. Class ids run
            // from 0 (memcached's global page pool) to its largest at the default sizes (39).
            let classes = 0..=tierkv_engine::SIZE_CLASSES as i32;
            if source == destination {
                line(out, "SAME src and dst class are identical");
            } else if classes.contains(&source) && classes.contains(&destination) {
                line(out, "NOSPARE source class has no spare pages");
            } else {
                line(out, "BADCLASS invalid src or dst class id");
            }
        }
        [_, b"automove", b"ratio", ratio, ..] if number::<f64>(ratio).is_some() => line(out, "OK"),
        [_, b"automove", b"ratio", ..] => reply::error(out, &ErrorReply::Error),
        [_, b"automove", level, ..] => match strtoul32(level) {
            None => line(out, "CLIENT_ERROR bad command line format"),
            Some(0..=2) => line(out, "OK"),
            Some(_) => reply::error(out, &ErrorReply::Error),
        },
        _ => reply::error(out, &ErrorReply::Error),
    }
}

/// memcached's `cache_memlimit MB`. In cache mode every partition's log moves to its share of
/// the new limit less the index and scratch space, at least two largest items (a smaller
/// limit is accepted and leaves the log at that minimum, as memcached accepts any limit from
/// 8 MB), at most `--memory-max` (by default the machine's memory; above it: memcached's failure
/// reply). This worker sizes its own partition now, which
/// also proves the size valid for all (they are alike); the others follow at their next loop
/// turn (`apply_memory_limit`). Store mode cannot move its arena and accepts only its limit.
fn cache_memlimit(tokens: &[&[u8]], partition: &mut AnyPartition, state: &State, out: &mut Vec<u8>) {
    if !(2..=3).contains(&tokens.len()) {
        return reply::error(out, &ErrorReply::Error);
    }
    match strtoul32(tokens[1]) {
        None => reply::error(out, &ErrorReply::Error),
        Some(0..=7) => line(out, "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m"),
        Some(1_000_000_001..) => line(out, "MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes"),
        Some(megabytes) => {
            let bytes = (megabytes as usize) << 20;
            let unchanged = bytes == state.shared.memory_limit.load(Ordering::Relaxed);
            if unchanged || partition.set_memory_bytes(bytes / state.shared.settings.threads).is_ok() {
                state.shared.memory_limit.store(bytes, Ordering::Relaxed);
                line(out, "OK");
            } else {
                line(out, "MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust");
            }
        }
    }
}

/// Sizes this worker's partition for the limit `cache_memlimit` last set, once it changed
/// (called every loop turn; the size was checked when it was set).
pub(crate) fn apply_memory_limit(partition: &mut AnyPartition, state: &State, applied: &mut usize) {
    let limit = state.shared.memory_limit.load(Ordering::Relaxed);
    if limit != *applied {
        *applied = limit;
        if let Err(e) = partition.set_memory_bytes(limit / state.shared.settings.threads) {
            eprintln!("tierkv: cache_memlimit {} MB: {e}", limit >> 20);
        }
    }
}

/// Whether `classes` names memcached classes (`all`, or comma-separated ids from 1 to 63).
fn valid_classes(classes: &[u8]) -> bool {
    classes == b"all"
        || classes.split(|&b| b == b',').all(|id| strtoul32(id).is_some_and(|id| (1..SLAB_CLASSES).contains(&id)))
}

fn lru_crawler(tokens: &[&[u8]], state: &State, out: &mut Vec<u8>) -> After {
    match tokens {
        // tierkv drops expired items when it meets them; a crawl has nothing more to do.
        [_, b"crawl", classes] if valid_classes(classes) => line(out, "OK"),
        [_, b"crawl", _] => line(out, "BADCLASS invalid class id"),
        [_, b"metadump", classes] => {
            if !state.shared.settings.admin.dump {
                line(out, "ERROR metadump not allowed");
            } else if !out.is_empty() {
                out.extend_from_slice(METADUMP_BEHIND_REPLIES);
            } else if *classes == b"hash" || valid_classes(classes) {
                let all = *classes == b"hash" || *classes == b"all";
                let listed = all || classes.split(|&b| b == b',').any(|id| strtoul32(id) == Some(CLASS));
                if listed {
                    return After::Dump(DumpKind::Metadump);
                }
                reply::status(out, Status::End);
            } else {
                line(out, "BADCLASS invalid class id");
            }
        }
        [_, b"tocrawl", count] => match strtoul32(count) {
            Some(_) => line(out, "OK"),
            None => line(out, "CLIENT_ERROR bad command line format"),
        },
        [_, b"sleep", micros] => match strtoul32(micros) {
            Some(0..=1_000_000) => line(out, "OK"),
            Some(_) => line(out, "CLIENT_ERROR sleep must be one second or less"),
            None => line(out, "CLIENT_ERROR bad command line format"),
        },
        // memcached's crawler thread runs from start-up, so it answers enable with this.
        [_, b"enable"] => line(out, "ERROR failed to start lru crawler thread"),
        [_, b"disable"] => line(out, "OK"),
        _ => reply::error(out, &ErrorReply::Error),
    }
    After::Continue
}

fn lru(tokens: &[&[u8]], out: &mut Vec<u8>) {
    match tokens {
        [_, b"tune", hot, warm, hot_factor, factor, ..] => {
            let parsed = (strtoul32(hot), strtoul32(warm), number::<f64>(hot_factor), number::<f64>(factor));
            let (Some(hot), Some(warm), Some(hot_factor), Some(factor)) = parsed else {
                return reply::error(out, &ErrorReply::Error);
            };
            if u64::from(hot) + u64::from(warm) > 80 {
                line(out, "ERROR hot and warm pcts must not exceed 80");
            } else if factor <= 0.0 || hot_factor <= 0.0 {
                line(out, "ERROR hot/warm age factors must be greater than 0");
            } else {
                line(out, "OK");
            }
        }
        [_, b"mode", b"flat" | b"segmented", ..] => line(out, "OK"),
        [_, b"temp_ttl", ttl, ..] if strtol32(ttl).is_some() => line(out, "OK"),
        _ => reply::error(out, &ErrorReply::Error),
    }
}

/// memcached's `watch [streams]` (fetchers by default): the connection becomes a watcher.
/// Streams tierkv has nothing to report on (raw commands, system, connection and proxy events,
/// evictions: the log overwrites items without visiting them) are accepted and stay silent.
fn watch(tokens: &[&[u8]], state: &State, out: &mut Vec<u8>) -> After {
    if !state.shared.settings.admin.watch {
        line(out, "CLIENT_ERROR watch commands not allowed");
        return After::Continue;
    }
    let names = if tokens.last() == Some(&&b"noreply"[..]) { &tokens[1..tokens.len() - 1] } else { &tokens[1..] };
    const STREAMS: [&[u8]; 9] = [
        b"rawcmds",
        b"evictions",
        b"fetchers",
        b"mutations",
        b"sysevents",
        b"connevents",
        b"proxyreqs",
        b"proxyevents",
        b"proxyuser",
    ];
    // memcached checks for unwritten replies before it reads the stream names.
    if !out.is_empty() {
        out.extend_from_slice(b"ERROR cannot pipeline other commands before watch\r\n");
        return After::Continue;
    }
    if names.iter().any(|name| !STREAMS.contains(name)) {
        reply::error(out, &ErrorReply::Error);
        return After::Continue;
    }
    let streams = names.iter().fold(0, |all, name| {
        all | match *name {
            b"fetchers" => crate::watch::FETCHERS,
            b"mutations" => crate::watch::MUTATIONS,
            _ => 0,
        }
    });
    After::Watch(if names.is_empty() { crate::watch::FETCHERS } else { streams })
}

/// `stats cachedump <class> <limit>` (text only, as in memcached).
pub(crate) fn stats_cachedump(args: &[u8], state: &State, out: &mut Vec<u8>) -> After {
    if !state.shared.settings.admin.dump {
        line(out, "CLIENT_ERROR stats cachedump not allowed");
        return After::Continue;
    }
    let tokens: Vec<&[u8]> = args.split(|&b| b == b' ').filter(|token| !token.is_empty()).collect();
    if tokens.len() < 3 {
        line(out, "CLIENT_ERROR bad command line");
        return After::Continue;
    }
    let (Some(class), Some(limit)) = (strtoul32(tokens[1]), strtoul32(tokens[2])) else {
        line(out, "CLIENT_ERROR bad command line format");
        return After::Continue;
    };
    if class >= SLAB_CLASSES {
        line(out, "CLIENT_ERROR Illegal slab id");
        return After::Continue;
    }
    if class == CLASS {
        return After::Dump(DumpKind::Cachedump { limit: u64::from(limit) });
    }
    reply::status(out, Status::End);
    After::Continue
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_memcacheds() {
        assert!(valid_classes(b"all") && valid_classes(b"1,2,63"));
        assert!(!valid_classes(b"64") && !valid_classes(b"x") && !valid_classes(b"1,") && !valid_classes(b"-1"));
        assert!(!valid_classes(b"0"), "memcached's classes start at 1");
    }
}
