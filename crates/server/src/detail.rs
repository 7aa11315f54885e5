//! memcached's `stats detail`: per-prefix counts of gets, hits, sets and deletes, kept only
//! while `stats detail on` (a prefix is a key's bytes before the `-D` delimiter; keys without
//! it are not counted, as in memcached). One table shared by every worker behind a lock, as
//! memcached keeps it: it is touched only while detail is on, and each worker sees "on" through
//! its own flag, refreshed once a turn, so the request path pays one branch when it is off.

use crate::limits::MAX_PREFIXES;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// What happened to a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    Get { hit: bool },
    Set,
    Delete,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    get: u64,
    hit: u64,
    set: u64,
    delete: u64,
}

/// The shared table and switch.
#[derive(Debug)]
pub(crate) struct Detail {
    enabled: AtomicBool,
    delimiter: u8,
    prefixes: Mutex<BTreeMap<Vec<u8>, Counts>>,
}

impl Detail {
    pub(crate) fn new(delimiter: u8) -> Detail {
        Detail { enabled: AtomicBool::new(false), delimiter, prefixes: Mutex::new(BTreeMap::new()) }
    }

    /// Whether counting is on (read once a turn by each worker).
    pub(crate) fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    pub(crate) fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    /// Counts `event` for `key`'s prefix.
    pub(crate) fn record(&self, key: &[u8], event: Event) {
        let Some(end) = key.iter().position(|&b| b == self.delimiter) else { return };
        let Ok(mut prefixes) = self.prefixes.lock() else { return };
        let full = prefixes.len() >= MAX_PREFIXES;
        let counts = match prefixes.get_mut(&key[..end]) {
            Some(counts) => counts,
            None if full => return,
            None => prefixes.entry(key[..end].to_vec()).or_default(),
        };
        match event {
            Event::Get { hit } => {
                counts.get += 1;
                counts.hit += u64::from(hit);
            }
            Event::Set => counts.set += 1,
            Event::Delete => counts.delete += 1,
        }
    }

    /// `stats detail dump`: memcached's `PREFIX` lines (in prefix order), then END.
    pub(crate) fn dump(&self, out: &mut Vec<u8>) {
        if let Ok(prefixes) = self.prefixes.lock() {
            for (prefix, c) in prefixes.iter() {
                out.extend_from_slice(b"PREFIX ");
                out.extend_from_slice(prefix);
                let counts = format!(" get {} hit {} set {} del {}\r\n", c.get, c.hit, c.set, c.delete);
                out.extend_from_slice(counts.as_bytes());
            }
        }
        out.extend_from_slice(b"END\r\n");
    }

    /// `stats reset` forgets every prefix, as memcached does.
    pub(crate) fn clear(&self) {
        if let Ok(mut prefixes) = self.prefixes.lock() {
            prefixes.clear();
        }
    }

    /// `stats detail on|off|dump` with memcached's replies.
    pub(crate) fn command(&self, args: &[u8], out: &mut Vec<u8>) {
        let mut words = args.split(|&b| b == b' ').filter(|word| !word.is_empty()).skip(1);
        match words.next() {
            Some(b"on") => {
                self.set_enabled(true);
                out.extend_from_slice(b"OK\r\n");
            }
            Some(b"off") => {
                self.set_enabled(false);
                out.extend_from_slice(b"OK\r\n");
            }
            Some(b"dump") => self.dump(out),
            _ => out.extend_from_slice(b"CLIENT_ERROR usage: stats detail on|off|dump\r\n"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_count_as_memcached_counts_them() {
        let detail = Detail::new(b':');
        detail.record(b"user:1", Event::Get { hit: true });
        detail.record(b"user:2", Event::Get { hit: false });
        detail.record(b"user:3", Event::Set);
        detail.record(b"a:b:c", Event::Delete);
        detail.record(b"nodelimiter", Event::Set);
        let mut out = Vec::new();
        detail.dump(&mut out);
        assert_eq!(out, b"PREFIX a get 0 hit 0 set 0 del 1\r\nPREFIX user get 2 hit 1 set 1 del 0\r\nEND\r\n");
        detail.clear();
        out.clear();
        detail.dump(&mut out);
        assert_eq!(out, b"END\r\n");
        for i in 0..MAX_PREFIXES + 10 {
            detail.record(format!("{i}:k").as_bytes(), Event::Set);
        }
        assert_eq!(detail.prefixes.lock().unwrap().len(), MAX_PREFIXES, "bounded");
    }
}
