//! The bound on connection memory (`--conn-memory`). Every worker holds an equal share of the
//! budget and counts what its connections' buffers hold (input read, replies not yet written,
//! replies waiting behind a forwarded one: their capacities). A request is counted as its
//! bytes arrive, never by the size it declares, so a client that announces a large value and
//! sends little of it holds little. While the count is over the share the worker is under
//! pressure, and then, as memcached does with a client that does not read:
//! - a connection with replies still waiting is neither read nor executed until its client
//!   drains them (a writable event, or the forwarded replies, bring it back);
//! - any other connection reads at most `PRESSED_INPUT_BYTES`, or its incomplete request its
//!   fair share (`--conn-memory-share` of the budget, divided by the worker's connections),
//!   and stops executing once `PRESSED_OUTPUT_BYTES` of replies wait, so a fresh client is
//!   still served;
//! - a connection that cannot go on without reading more (a request larger than that) waits
//!   in `starved` until the pressure ends; but one at a time, the finisher, is let through to
//!   the end of its request, so the requests that hold the budget can always finish and give
//!   it back. A finisher whose socket runs dry before its request is whole gives its place
//!   to the next at once (so hundreds of silent senders cost the next one milliseconds each,
//!   not seconds) and keeps a grant: what it read beyond its fair share. Grants that deliver
//!   nothing more (counting the bytes waiting in their sockets) for `GRANT_STALL` while they
//!   hold more than twice the share are closed, oldest first, and no new grant is made until
//!   they fit in it again: silent senders cannot pile up memory either. Meanwhile the grants
//!   waiting to read take the finisher's turn in order, and one waiting with bytes in its
//!   socket is not judged stalled: the wait is the server's.
//!
//! So under pressure the buffers stay within the budget, twice the budget in grants (plus
//! the largest request, which a grant may reach before it is counted), the fair shares, the
//! finisher's request and, per connection, one pressed read and one pressed batch of replies
//! (plus the one item a reply may carry beyond it).
//!
//! It must not allocate per request: accounting is a few additions per connection turn (a
//! grant is a large request under pressure).

use super::connection::Connection;
use crate::limits::{MAX_PENDING_OUTPUT_BYTES, PRESSED_INPUT_BYTES, TRIM_AFTER_BYTES};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How long a grant may deliver nothing (not a byte more read or waiting in its socket) while
/// grants hold more than twice the share, before it is closed: longer than TCP's shortest
/// retransmission timeout (200 ms), so one lost packet does not cut an honest sender off.
pub(super) const GRANT_STALL: Duration = Duration::from_millis(250);

/// A connection let through as finisher that ran dry before its request was whole.
#[derive(Debug, Clone, Copy)]
pub(super) struct Grant {
    pub(super) generation: u64,
    pub(super) slot: usize,
    /// Bytes of its request delivered (read, or waiting in the socket) when last looked at.
    pub(super) delivered: usize,
    /// When `delivered` last grew.
    pub(super) since: Instant,
}

/// One worker's share of the connection memory budget.
pub(super) struct Budget {
    /// Bytes this worker's connections' buffers hold (as last accounted).
    held: usize,
    /// The share: past it the worker is under pressure.
    limit: usize,
    /// Percent of `limit` incomplete requests may hold under pressure (`--conn-memory-share`).
    share_percent: usize,
    /// Connections that stopped for want of input they may not read under pressure.
    starved: Vec<usize>,
    /// The connection (by generation) let through to the end of its request under pressure,
    /// and its input's length when last looked at (`still_finishing`).
    finisher: Option<(u64, usize)>,
    /// Bytes of closed connections' buffers since the allocator last gave memory back.
    freed: usize,
    /// Former finishers still reading their requests, oldest grant first.
    pub(super) grants: VecDeque<Grant>,
    /// Bytes the grants' buffers held when last counted (`Worker::check_grants`).
    pub(super) grants_held: usize,
}

impl Budget {
    /// A worker's share of `total`: an equal part, but at least twice what one connection may
    /// hold outside pressure (its largest request and its output mark), so that one client
    /// alone, however large its requests, never brings its worker under pressure.
    pub(super) fn share(total: usize, workers: usize, input_limit: usize) -> usize {
        (total / workers.max(1)).max(2 * (input_limit + MAX_PENDING_OUTPUT_BYTES))
    }

    pub(super) fn new(limit: usize, share_percent: u32) -> Budget {
        let share_percent = share_percent as usize;
        let (grants, grants_held) = (VecDeque::new(), 0);
        Budget { held: 0, limit, share_percent, starved: Vec::new(), finisher: None, freed: 0, grants, grants_held }
    }

    /// Whether connections must hold back now.
    #[inline]
    pub(super) fn pressure(&self) -> bool {
        self.held > self.limit
    }

    /// The input `connection` may hold under pressure, of `full` outside it, while the worker
    /// has `connections` open: the finisher's request in full; anyone else's fair share.
    pub(super) fn pressed_input(&self, connection: &Connection, full: usize, connections: usize) -> usize {
        if self.is_finisher(connection) {
            return full;
        }
        let fair = self.limit / 100 * self.share_percent / connections.max(1);
        fair.max(PRESSED_INPUT_BYTES).min(full)
    }

    /// `connection` cannot go on under pressure: true if it becomes the finisher (no other
    /// is), false if it must wait.
    pub(super) fn claim_finisher(&mut self, connection: &Connection) -> bool {
        if self.finisher.is_some() || (self.grants_full() && !self.has_grant(connection)) {
            return false;
        }
        self.finisher = Some((connection.generation, connection.input.len()));
        true
    }

    pub(super) fn is_finisher(&self, connection: &Connection) -> bool {
        self.finisher.is_some_and(|(generation, _)| generation == connection.generation)
    }

    /// Once a second: a finisher that read nothing since the last look loses its place to the
    /// next in line (it stopped sending; `--request-min-rate` closes it later).
    pub(super) fn still_finishing(&mut self, connection: &Connection) {
        if let Some((generation, seen)) = self.finisher.as_mut() {
            if *generation == connection.generation {
                if *seen == connection.input.len() {
                    self.finisher = None;
                } else {
                    *seen = connection.input.len();
                }
            }
        }
    }

    /// The finisher's socket ran dry before its request was whole: the place goes to the next
    /// at once, and `slot` keeps a grant (what it read) until its request is whole or it is
    /// closed for stalling.
    pub(super) fn ran_dry(&mut self, slot: usize, connection: &Connection, now: Instant) {
        if !self.is_finisher(connection) {
            return;
        }
        self.finisher = None;
        if !self.has_grant(connection) {
            let delivered = connection.input.len();
            self.grants.push_back(Grant { generation: connection.generation, slot, delivered, since: now });
        }
    }

    fn has_grant(&self, connection: &Connection) -> bool {
        self.grants.iter().any(|g| g.generation == connection.generation)
    }

    /// Whether the grants hold twice the share already: no new one until some finish or go.
    pub(super) fn grants_full(&self) -> bool {
        self.grants_held > 2 * self.limit
    }

    /// After `connection`'s turn: a finisher whose large request is complete lets the next in.
    pub(super) fn finished(&mut self, connection: &Connection) {
        if self.is_finisher(connection) && connection.wanted <= PRESSED_INPUT_BYTES {
            self.finisher = None;
        }
    }

    /// Counts what `connection`'s buffers hold now instead of what they held when last
    /// accounted.
    pub(super) fn account(&mut self, connection: &mut Connection) {
        let now = connection.buffer_bytes();
        self.held = self.held - connection.accounted + now;
        connection.accounted = now;
    }

    /// `connection` closes: nothing of it is held any more.
    pub(super) fn forget(&mut self, connection: &Connection) {
        self.held -= connection.accounted;
        self.freed += connection.accounted;
        if self.is_finisher(connection) {
            self.finisher = None;
        }
    }

    /// Once enough connection memory was freed, asks the allocator to return its free pages
    /// to the kernel (glibc keeps small freed blocks otherwise), so RSS falls back after many
    /// clients leave.
    pub(super) fn trim(&mut self) {
        if self.freed < TRIM_AFTER_BYTES {
            return;
        }
        self.freed = 0;
        crate::sys::trim_heap();
    }

    /// `slot` waits for the pressure to end before it can read again.
    pub(super) fn starve(&mut self, slot: usize, connection: &mut Connection) {
        if !connection.starved {
            connection.starved = true;
            self.starved.push(slot);
        }
    }

    /// The starved connections to serve again: all of them once the pressure has ended;
    /// under pressure, while there is no finisher, the one that waited longest (it becomes
    /// the finisher if it still cannot go on).
    pub(super) fn relieved(&mut self) -> Vec<usize> {
        if self.starved.is_empty() {
            return Vec::new();
        }
        if !self.pressure() {
            return std::mem::take(&mut self.starved);
        }
        self.next_turn().map(|at| vec![self.starved.remove(at)]).unwrap_or_default()
    }

    /// Under pressure, which starved connection (its place in `starved`) takes the finisher's
    /// turn: none while there is a finisher; the longest-waiting one while the grants fit;
    /// while they hold too much, the longest-waiting grant (finishing its request gives memory
    /// back; a silent one runs dry at once and is closed for stalling), so an honest grant is
    /// not left unread until it looks stalled.
    fn next_turn(&self) -> Option<usize> {
        if self.finisher.is_some() || self.starved.is_empty() {
            None
        } else if !self.grants_full() {
            Some(0)
        } else {
            self.starved.iter().position(|&slot| self.grants.iter().any(|g| g.slot == slot))
        }
    }

    /// Whether `relieved` would let a starved connection go on now (so the worker must not
    /// sleep before it asks).
    pub(super) fn can_relieve(&self) -> bool {
        !self.starved.is_empty() && (!self.pressure() || self.next_turn().is_some())
    }

    /// Bytes held now.
    pub(super) fn held(&self) -> usize {
        self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounting_follows_the_buffers_and_pressure_starts_past_the_limit() {
        let mut budget = Budget::new(10_000, 50);
        let mut connection = Connection::new(None, None, 1, false);
        connection.input.reserve_exact(6000);
        budget.account(&mut connection);
        assert_eq!(budget.held(), connection.input.capacity());
        assert!(!budget.pressure());
        connection.output.reserve_exact(6000);
        budget.account(&mut connection);
        assert!(budget.pressure());
        budget.starve(7, &mut connection);
        budget.starve(7, &mut connection);
        assert!(budget.claim_finisher(&connection), "the first to be stuck finishes its request");
        assert!(budget.relieved().is_empty(), "still under pressure, with a finisher");
        connection.output = Vec::new();
        budget.account(&mut connection);
        assert!(!budget.pressure());
        assert_eq!(budget.relieved(), vec![7], "once, however often it starved");
        budget.forget(&connection);
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn incomplete_requests_get_fair_shares_and_one_finisher_goes_to_the_end() {
        let mut budget = Budget::new(100_000, 50);
        let (mut first, second) = (Connection::new(None, None, 1, false), Connection::new(None, None, 2, false));
        // Half the budget over 10 connections, but never below the pressed read.
        assert_eq!(budget.pressed_input(&first, 1 << 20, 10), 5000);
        assert_eq!(budget.pressed_input(&first, 1 << 20, 100), PRESSED_INPUT_BYTES);
        assert_eq!(budget.pressed_input(&first, 3000, 10), 3000, "never past the full limit");
        assert!(budget.claim_finisher(&first) && !budget.claim_finisher(&second), "one at a time");
        assert_eq!(budget.pressed_input(&first, 1 << 20, 10), 1 << 20, "the finisher reads to the end");
        assert_eq!(budget.pressed_input(&second, 1 << 20, 10), 5000);
        // It keeps its place while it reads, loses it when it stops, and gives it up when done.
        first.wanted = 1 << 20;
        first.input.extend_from_slice(&[0; 100]);
        budget.still_finishing(&first);
        assert!(budget.is_finisher(&first), "it read since it was let through");
        budget.still_finishing(&first);
        assert!(!budget.is_finisher(&first) && budget.claim_finisher(&second), "it stopped: the next goes");
        first.wanted = 0;
        budget.finished(&first);
        assert!(budget.is_finisher(&second), "only the finisher's own end frees the place");
        budget.forget(&second);
        assert!(budget.claim_finisher(&first), "a finisher that closes frees it too");
    }
}
