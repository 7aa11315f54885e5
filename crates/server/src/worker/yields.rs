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
//! once, as memcached's threads do.
//!
//! The same timings say whether the CPUs are shared with other busy work at all: a yield that
//! took a scheduler slice (`SLICE_YIELD`) and found no request waiting after it let a stranger
//! run (a client of this server that ran that long would have sent one). Over each `WINDOW`,
//! a worker more than `CONTENDED_SHARE` of whose yields were such reports contention, and the
//! shared port then deals new connections in turn (`admission::deal`). This module
//! must not poll or touch sockets.

use std::time::{Duration, Instant};

/// A yield that returns later than this handed the CPU to something other than a client's
/// next request (a client's turn between two requests takes a few microseconds).
pub(crate) const SLOW_YIELD: Duration = Duration::from_micros(50);
/// The first quiet period after a slow yield.
pub(crate) const QUIET_MIN: Duration = Duration::from_millis(10);
/// The longest quiet period: one slow yield a second costs a worker at most one slice.
pub(crate) const QUIET_MAX: Duration = Duration::from_secs(1);

/// How long one verdict on contention collects yields.
pub(crate) const WINDOW: Duration = Duration::from_millis(250);
/// A yield this long let other work run a scheduler slice (0.75-3 ms on Linux).
pub(crate) const SLICE_YIELD: Duration = Duration::from_micros(500);
/// A window with more than this share of yields that took a slice (one in twenty) is
/// contended.
pub(crate) const CONTENDED_SHARE: f64 = 0.05;

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
    /// How long the last yield took.
    last: Duration,
    /// The current window: when it began, its yields, and those that let a stranger run.
    window: (Option<Instant>, u32, u32),
}

impl Default for YieldGate {
    fn default() -> YieldGate {
        YieldGate {
            quiet_until: None,
            quiet: QUIET_MIN,
            yields: 0,
            slow: 0,
            last: Duration::ZERO,
            window: (None, 0, 0),
        }
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

    /// At the end of a window with yields in it: whether its yields say the CPUs are shared
    /// with other busy work. None while the window lasts or when it saw no yield (a worker
    /// that never ran out of work has nothing to say).
    pub(crate) fn verdict(&mut self, now: Instant) -> Option<bool> {
        let (start, yields, slow) = self.window;
        let start = start?;
        if now.duration_since(start) < WINDOW {
            return None;
        }
        self.window = (None, 0, 0);
        Some(f64::from(slow) > f64::from(yields) * CONTENDED_SHARE)
    }

    /// What the look for work after the last yield found: a yield that took a slice and was
    /// followed by no request let a stranger run.
    pub(crate) fn found(&mut self, work: bool) {
        let window = &mut self.window;
        window.1 = window.1.saturating_add(1);
        if self.last >= SLICE_YIELD && !work {
            window.2 = window.2.saturating_add(1);
        }
    }

    /// Notes a yield that ran from `start` to `end`; false if it was slow.
    pub(crate) fn record(&mut self, start: Instant, end: Instant) -> bool {
        debug_assert!(end >= start);
        self.yields += 1;
        self.window.0.get_or_insert(start);
        self.last = end.duration_since(start);
        if self.last <= SLOW_YIELD {
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
    fn a_window_where_more_than_one_yield_in_twenty_let_a_stranger_run_is_contended() {
        let mut gate = YieldGate::default();
        let t0 = Instant::now();
        assert_eq!(gate.verdict(t0 + WINDOW), None, "no yields, no verdict");
        let yielded = |gate: &mut YieldGate, at: Instant, took: Duration, work: bool| {
            gate.record(at, at + took);
            gate.found(work);
        };
        for i in 0..40 {
            yielded(&mut gate, t0 + Duration::from_millis(i), Duration::from_micros(5), false);
        }
        yielded(&mut gate, t0, Duration::from_millis(2), false);
        yielded(&mut gate, t0, Duration::from_micros(400), false);
        // A client of this server that ran a slice sent its next request meanwhile.
        for _ in 0..5 {
            yielded(&mut gate, t0, Duration::from_millis(2), true);
        }
        assert_eq!(gate.verdict(t0 + WINDOW / 2), None, "the window is not over");
        assert_eq!(gate.verdict(t0 + WINDOW), Some(false), "1 of 47 let a stranger run");
        let t1 = t0 + WINDOW * 2;
        for i in 0..10 {
            yielded(&mut gate, t1 + Duration::from_millis(i), Duration::from_micros(5), true);
        }
        yielded(&mut gate, t1, Duration::from_millis(2), false);
        assert_eq!(gate.verdict(t1 + WINDOW), Some(true), "1 of 11 let a stranger run");
        assert_eq!(gate.verdict(t1 + WINDOW * 3), None, "a new window starts with its first yield");
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
