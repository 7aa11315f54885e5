//! The bound on connection memory (`--conn-memory`). Every worker holds an equal share of the
//! budget and counts what its connections' buffers hold (input read, replies not yet written,
//! replies waiting behind a forwarded one: their capacities). While the count is over the
//! share the worker is under pressure, and then, as memcached does with a client that does not
//! read:
//! - a connection with replies still waiting is neither read nor executed until its client
//!   drains them (a writable event, or the forwarded replies, bring it back);
//! - any other connection reads at most `PRESSED_INPUT_BYTES` and stops executing once
//!   `PRESSED_OUTPUT_BYTES` of replies wait, so a fresh client is still served;
//! - a connection that cannot go on without reading more (a request larger than that) waits
//!   in `starved` until the pressure ends; but a request begun while there was room is
//!   granted the rest of its bytes (its whole size counted from the start), so the requests
//!   that hold the budget can always finish and give it back.
//!
//! So the buffers of all connections stay within the budget plus, per connection, one pressed
//! read and one pressed batch of replies (plus the one item a reply may carry beyond it).
//!
//! It must not allocate per request: accounting is a few additions per connection turn.

use super::Connection;
use crate::limits::{MAX_PENDING_OUTPUT_BYTES, TRIM_AFTER_BYTES};

/// One worker's share of the connection memory budget.
pub(super) struct Budget {
    /// Bytes this worker's connections' buffers hold (as last accounted).
    held: usize,
    /// The share: past it the worker is under pressure.
    limit: usize,
    /// Connections that stopped for want of input they may not read under pressure.
    starved: Vec<usize>,
    /// Bytes of closed connections' buffers since the allocator last gave memory back.
    freed: usize,
}

impl Budget {
    /// A worker's share of `total`: an equal part, but at least twice what one connection may
    /// hold outside pressure (its largest request and its output mark), so that one client
    /// alone, however large its requests, never brings its worker under pressure.
    pub(super) fn share(total: usize, workers: usize, input_limit: usize) -> usize {
        (total / workers.max(1)).max(2 * (input_limit + MAX_PENDING_OUTPUT_BYTES))
    }

    pub(super) fn new(limit: usize) -> Budget {
        Budget { held: 0, limit, starved: Vec::new(), freed: 0 }
    }

    /// Whether connections must hold back now.
    #[inline]
    pub(super) fn pressure(&self) -> bool {
        self.held > self.limit
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

    /// The starved connections, once the pressure has ended (to be served again).
    pub(super) fn relieved(&mut self) -> Vec<usize> {
        if self.pressure() || self.starved.is_empty() {
            return Vec::new();
        }
        std::mem::take(&mut self.starved)
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
        let mut budget = Budget::new(10_000);
        let mut connection = Connection::new(None, None, 1);
        connection.input.reserve_exact(6000);
        budget.account(&mut connection);
        assert_eq!(budget.held(), connection.input.capacity());
        assert!(!budget.pressure());
        connection.output.reserve_exact(6000);
        budget.account(&mut connection);
        assert!(budget.pressure());
        budget.starve(7, &mut connection);
        budget.starve(7, &mut connection);
        assert!(budget.relieved().is_empty(), "still under pressure");
        connection.output = Vec::new();
        budget.account(&mut connection);
        assert!(!budget.pressure());
        assert_eq!(budget.relieved(), vec![7], "once, however often it starved");
        budget.forget(&connection);
        assert_eq!(budget.held(), 0);
    }
}
