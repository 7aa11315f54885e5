//! memcached's `watch`: connections that stream log lines of what the server does
//! (`fetchers`: every key read, `mutations`: every store), in memcached 1.6's line format.
//! Lines are formatted by the worker that executes the request and queued per watcher under
//! one lock, as memcached's logger queues them; each watcher's queue holds at most
//! `WATCHER_BUFFER_BYTES` (memcached's size): lines that find it full are dropped and counted,
//! and the watcher then reads `skipped=N` before the next line, as memcached writes it. The
//! worker that owns a watching connection moves its lines to the socket every turn.
//!
//! Workers read which streams are watched once a turn (`active`), so the request path pays one
//! branch while nobody watches.

use crate::limits::{MAX_WATCHERS, WATCHER_BUFFER_BYTES};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;

/// The `stats detail` bit of a worker's observation flags (`State::observe`).
pub(crate) const DETAIL: u8 = 1;
/// `watch fetchers`: a line per key read.
pub(crate) const FETCHERS: u8 = 2;
/// `watch mutations`: a line per store.
pub(crate) const MUTATIONS: u8 = 4;

struct Watcher {
    id: u64,
    streams: u8,
    lines: Vec<u8>,
    skipped: u64,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    watchers: Vec<Watcher>,
}

/// Every watcher of the server.
#[derive(Default)]
pub(crate) struct Watchers {
    /// The union of the watched streams.
    active: AtomicU8,
    /// memcached's global id of log lines.
    gid: AtomicU64,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Watchers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Watchers({:#x})", self.active())
    }
}

impl Watchers {
    /// The streams someone watches now.
    pub(crate) fn active(&self) -> u8 {
        self.active.load(Ordering::Relaxed)
    }

    fn update_active(&self, inner: &Inner) {
        self.active.store(inner.watchers.iter().fold(0, |all, w| all | w.streams), Ordering::Relaxed);
    }

    /// A new watcher of `streams`; None when there are `MAX_WATCHERS` already.
    pub(crate) fn add(&self, streams: u8) -> Option<u64> {
        let mut inner = self.inner.lock().ok()?;
        if inner.watchers.len() >= MAX_WATCHERS {
            return None;
        }
        inner.next_id += 1;
        let id = inner.next_id;
        inner.watchers.push(Watcher { id, streams, lines: Vec::new(), skipped: 0 });
        self.update_active(&inner);
        Some(id)
    }

    /// The watcher `id` is gone (its connection closed).
    pub(crate) fn remove(&self, id: u64) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.watchers.retain(|w| w.id != id);
            self.update_active(&inner);
        }
    }

    /// Queues the line `format(gid)` for every watcher of `stream`.
    pub(crate) fn log(&self, stream: u8, format: impl FnOnce(u64) -> String) {
        let Ok(mut inner) = self.inner.lock() else { return };
        if !inner.watchers.iter().any(|w| w.streams & stream != 0) {
            return;
        }
        let line = format(self.gid.fetch_add(1, Ordering::Relaxed) + 1);
        for watcher in inner.watchers.iter_mut().filter(|w| w.streams & stream != 0) {
            if watcher.lines.len() + line.len() > WATCHER_BUFFER_BYTES {
                watcher.skipped += 1;
            } else {
                watcher.lines.extend_from_slice(line.as_bytes());
            }
        }
    }

    /// Moves the lines queued for watcher `id` to `out` (after `skipped=N` if some were
    /// dropped); false if there is no such watcher.
    pub(crate) fn take(&self, id: u64, out: &mut Vec<u8>) -> bool {
        let Ok(mut inner) = self.inner.lock() else { return false };
        let Some(watcher) = inner.watchers.iter_mut().find(|w| w.id == id) else { return false };
        if watcher.skipped > 0 {
            out.extend_from_slice(format!("skipped={}\n", watcher.skipped).as_bytes());
            watcher.skipped = 0;
        }
        out.append(&mut watcher.lines);
        true
    }
}

/// memcached's `ts=` field: seconds and microseconds.
fn timestamp() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    format!("{}.{}", now.as_secs(), now.subsec_micros())
}

fn encoded(key: &[u8]) -> String {
    let mut out = Vec::with_capacity(key.len());
    crate::dump::uri_encode(key, &mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// memcached's `item_get` line (`size` is the value's length; misses have class 0).
pub(crate) fn item_get_line(gid: u64, key: &[u8], found: bool, size: usize, fd: i32) -> String {
    let (status, class) = if found { ("found", 1) } else { ("not_found", 0) };
    format!(
        "ts={} gid={gid} type=item_get key={} status={status} clsid={class} cfd={fd} size={size}\n",
        timestamp(),
        encoded(key)
    )
}

/// memcached's `item_store` line.
pub(crate) fn item_store_line(
    gid: u64,
    key: &[u8],
    status: &str,
    command: &str,
    ttl: i64,
    size: usize,
    fd: i32,
) -> String {
    format!(
        "ts={} gid={gid} type=item_store key={} status={status} cmd={command} ttl={} clsid=1 cfd={fd} size={size}\n",
        timestamp(),
        encoded(key),
        ttl.max(0)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watchers_get_their_streams_bounded() {
        let watchers = Watchers::default();
        let fetcher = watchers.add(FETCHERS).unwrap();
        let mutator = watchers.add(MUTATIONS).unwrap();
        assert_eq!(watchers.active(), FETCHERS | MUTATIONS);
        watchers.log(FETCHERS, |gid| item_get_line(gid, b"a b", true, 3, 7));
        watchers.log(MUTATIONS, |gid| item_store_line(gid, b"k", "stored", "set", 0, 1, 7));
        let mut out = Vec::new();
        assert!(watchers.take(fetcher, &mut out));
        let line = String::from_utf8(out).unwrap();
        assert!(line.starts_with("ts="));
        assert!(line.contains(" gid=1 type=item_get key=a%20b status=found clsid=1 cfd=7 size=3\n"), "{line}");
        let mut out = Vec::new();
        watchers.take(mutator, &mut out);
        assert!(String::from_utf8(out).unwrap().contains(" gid=2 type=item_store key=k status=stored cmd=set ttl=0 "));
        // A full buffer drops lines and says how many.
        for _ in 0..WATCHER_BUFFER_BYTES / 50 + 100 {
            watchers.log(FETCHERS, |gid| item_get_line(gid, b"k", false, 0, 7));
        }
        let mut out = Vec::new();
        watchers.take(fetcher, &mut out);
        assert!(out.len() <= WATCHER_BUFFER_BYTES + 32 && out.starts_with(b"skipped="));
        watchers.remove(fetcher);
        watchers.remove(mutator);
        assert_eq!(watchers.active(), 0);
        assert!(!watchers.take(fetcher, &mut out));
        let ids: Vec<_> = (0..MAX_WATCHERS + 1).map(|_| watchers.add(FETCHERS)).collect();
        assert!(ids[..MAX_WATCHERS].iter().all(Option::is_some) && ids[MAX_WATCHERS].is_none());
    }
}
