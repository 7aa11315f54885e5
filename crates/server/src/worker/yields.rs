//! Whether an idle worker's yields of its CPU pay right now. A yield pays when the thread it
//! lets run is a client of this server on the same CPU, about to send the next request: the
//! worker finds the request a few microseconds later without blocking and being woken. It
//! costs when the CPU is shared with other busy work: the scheduler then hands that work a
//! whole slice (milliseconds) per yield, and requests wait for it (with three CPU-bound
//! processes beside `-t 2`, memcaslap's requests/s fell to a seventh).
//!
//! So every yield is timed. One that takes longer than `SLOW_YIELD` turns yielding off for a
//! quiet period, which doubles with every slow yield after it (up to `QUIET_MAX`) and starts
//! again from `QUIET_MIN` after a fast one. While yielding is off, an idle worker blocks at
//! once, as memcached's threads do. This module must not poll or touch sockets.

use std::time::{Duration, Instant};

/// A yield that returns later than this handed the CPU to something other than a client's
/// next request (a client's turn between two requests takes a few microseconds).
pub(crate) const SLOW_YIELD: Duration = Duration::from_micros(50);
/// The first quiet period after a slow yield.
pub(crate) const QUIET_MIN: Duration = Duration::from_millis(10);
/// The longest quiet period: one slow yield a second costs a worker at most one slice.
pub(crate) const QUIET_MAX: Duration = Duration::from_secs(1);

/// A worker's record of how its recent yields went.
#[derive(Debug)]
pub(crate) struct YieldGate {
    /// No yields before this instant.
    quiet_until: Option<Instant>,
    /// The next quiet period, doubled by every slow yield.
    quiet: Duration,
    /// Yields made (for `stats tierkv`).
    pub(crate) yields: u64,
    /// Yields that took longer than `SLOW_YIELD`.
    pub(crate) slow: u64,
}

impl Default for YieldGate {
    fn default() -> YieldGate {
        YieldGate { quiet_until: None, quiet: QUIET_MIN, yields: 0, slow: 0 }
    }
}

impl YieldGate {
    /// Whether yielding is on now.
    pub(crate) fn open(&mut self, now: Instant) -> bool {
        match self.quiet_until {
            Some(until) if now < until => false,
            Some(_) => {
                self.quiet_until = None;
                true
            }
            None => true,
        }
    }

    /// Yields the CPU once, timing it; false if the yield was slow (yielding is now off).
    pub(crate) fn yield_now(&mut self) -> bool {
        let start = Instant::now();
        std::thread::yield_now();
        self.record(start, Instant::now())
    }

    /// The yields and slow yields counted since the last call, for the worker's counters.
    pub(crate) fn take_counts(&mut self) -> (u64, u64) {
        (std::mem::take(&mut self.yields), std::mem::take(&mut self.slow))
    }

    /// Notes a yield that ran from `start` to `end`; false if it was slow.
    pub(crate) fn record(&mut self, start: Instant, end: Instant) -> bool {
        debug_assert!(end >= start);
        self.yields += 1;
        if end.duration_since(start) <= SLOW_YIELD {
            self.quiet = QUIET_MIN;
            return true;
        }
        self.slow += 1;
        self.quiet_until = Some(end + self.quiet);
        self.quiet = (self.quiet * 2).min(QUIET_MAX);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_yield_turns_yielding_off_for_a_growing_quiet_period() {
        let mut gate = YieldGate::default();
        let t0 = Instant::now();
        assert!(gate.open(t0));
        assert!(gate.record(t0, t0 + Duration::from_micros(10)), "a fast yield");
        assert!(gate.open(t0));
        let end = t0 + Duration::from_millis(2);
        assert!(!gate.record(t0, end), "a yield that took a scheduler slice is slow");
        assert!(!gate.open(end + QUIET_MIN / 2));
        assert!(gate.open(end + QUIET_MIN));
        // The next slow yield waits twice as long, and so on up to the most.
        let later = end + QUIET_MIN;
        assert!(!gate.record(later, later + Duration::from_millis(1)));
        let after = later + Duration::from_millis(1);
        assert!(!gate.open(after + QUIET_MIN * 2 - Duration::from_micros(1)));
        assert!(gate.open(after + QUIET_MIN * 2));
        for _ in 0..20 {
            gate.record(after, after + SLOW_YIELD * 2);
        }
        assert_eq!(gate.quiet, QUIET_MAX);
        assert_eq!((gate.yields, gate.slow), (23, 22));
    }

    #[test]
    fn a_fast_yield_resets_the_quiet_period() {
        let mut gate = YieldGate::default();
        let t0 = Instant::now();
        for _ in 0..5 {
            gate.record(t0, t0 + Duration::from_millis(3));
        }
        assert!(gate.quiet > QUIET_MIN);
        assert!(gate.record(t0, t0 + Duration::from_micros(5)));
        assert_eq!(gate.quiet, QUIET_MIN);
    }

    #[test]
    fn yields_on_an_idle_cpu_are_mostly_fast() {
        // A real yield with nothing else runnable on this thread's CPU returns at once; the
        // count is kept either way (a loaded test machine may make some slow).
        let mut gate = YieldGate::default();
        let fast = (0..100).filter(|_| gate.yield_now()).count();
        assert_eq!(gate.yields, 100);
        assert_eq!(gate.slow as usize, 100 - fast);
    }
}
