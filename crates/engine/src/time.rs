//! memcached's expiry rules and the partition's coarse clock.
//!
//! An exptime of 0 never expires; a negative one has already expired; up to 30 days it counts
//! from now; above that it is an absolute Unix time (and one in the past has expired). Expiries
//! are stored as absolute Unix seconds in a u32 (0 = never), and an item has expired once
//! `expiry <= now`.

/// Largest exptime memcached treats as relative (30 days, in seconds).
pub(crate) const RELATIVE_EXPTIME_MAX: i64 = 60 * 60 * 24 * 30;

/// The stored expiry meaning "already expired": second 1 of the epoch is always in the past.
pub(crate) const EXPIRED: u32 = 1;

/// Converts a memcached exptime to an absolute expiry (0 = never) given the current time.
pub(crate) fn expiry_from_exptime(exptime: i64, now: u32) -> u32 {
    match exptime {
        0 => 0,
        i64::MIN..=-1 => EXPIRED,
        1..=RELATIVE_EXPTIME_MAX => u32::try_from(i64::from(now) + exptime).unwrap_or(u32::MAX),
        _ => u32::try_from(exptime).unwrap_or(u32::MAX),
    }
}

/// Whether an item with this stored expiry has expired at `now`.
#[inline]
pub(crate) fn is_expired(expiry: u32, now: u32) -> bool {
    expiry != 0 && expiry <= now
}

/// The current Unix time in whole seconds: what a worker reads once per loop turn and passes to
/// `Partition::set_clock`, never once per operation.
pub fn unix_now() -> u32 {
    let seconds = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    u32::try_from(seconds).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcached_exptime_rules() {
        let now = 1_800_000_000;
        assert_eq!(expiry_from_exptime(0, now), 0);
        assert_eq!(expiry_from_exptime(-1, now), EXPIRED);
        assert_eq!(expiry_from_exptime(i64::MIN, now), EXPIRED);
        assert_eq!(expiry_from_exptime(10, now), now + 10);
        assert_eq!(expiry_from_exptime(RELATIVE_EXPTIME_MAX, now), now + 2_592_000);
        assert_eq!(expiry_from_exptime(RELATIVE_EXPTIME_MAX + 1, now), 2_592_001, "absolute time");
        assert!(is_expired(expiry_from_exptime(RELATIVE_EXPTIME_MAX + 1, now), now));
        assert_eq!(expiry_from_exptime(i64::from(now) + 5, now), now + 5);
        assert_eq!(expiry_from_exptime(i64::MAX, now), u32::MAX);
        assert!(!is_expired(0, now));
        assert!(is_expired(now, now), "an item expires at its expiry second");
        assert!(!is_expired(now + 1, now));
    }

    #[test]
    fn clock_reads_a_plausible_time() {
        assert!(unix_now() > 1_600_000_000);
    }
}

/// When log positions were written, at one-second resolution: the tail position at each
/// second the clock was set. Answers "how long ago was position p written" for meta `l` and
/// `me`; positions older than the oldest mark get that mark's time.
pub(crate) struct ClockMarks {
    /// (tail position, Unix seconds), oldest first from `start`, as a ring.
    marks: Box<[(u64, u32)]>,
    start: usize,
    len: usize,
}

/// Seconds remembered (about 68 minutes of a busy clock).
const CLOCK_MARKS: usize = 4096;

impl ClockMarks {
    pub(crate) fn new() -> ClockMarks {
        ClockMarks { marks: vec![(0, 0); CLOCK_MARKS].into_boxed_slice(), start: 0, len: 0 }
    }

    /// Marks for a log that starts empty at `now`.
    pub(crate) fn starting(now: u32) -> ClockMarks {
        let mut marks = ClockMarks::new();
        marks.mark(0, now);
        marks
    }

    fn get(&self, i: usize) -> (u64, u32) {
        self.marks[(self.start + i) % CLOCK_MARKS]
    }

    /// Records that positions from `tail` on are written at `now` or later.
    pub(crate) fn mark(&mut self, tail: u64, now: u32) {
        if self.len > 0 && self.get(self.len - 1).1 >= now {
            return;
        }
        if self.len == CLOCK_MARKS {
            self.start = (self.start + 1) % CLOCK_MARKS;
            self.len -= 1;
        }
        self.marks[(self.start + self.len) % CLOCK_MARKS] = (tail, now);
        self.len += 1;
    }

    /// The second in which `position` was written (the last mark at or before it).
    pub(crate) fn time_at(&self, position: u64) -> u32 {
        if self.len == 0 {
            return 0;
        }
        // Marks before `position`: a binary search over the ring in age order.
        let (mut low, mut high) = (0, self.len);
        while low < high {
            let mid = (low + high) / 2;
            if self.get(mid).0 <= position {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        self.get(low.saturating_sub(1)).1
    }
}

#[cfg(test)]
mod clock_tests {
    use super::*;

    #[test]
    fn positions_map_to_the_second_they_were_written() {
        let mut marks = ClockMarks::new();
        marks.mark(0, 100);
        marks.mark(500, 101);
        marks.mark(500, 101);
        marks.mark(900, 105);
        assert_eq!(
            (marks.time_at(0), marks.time_at(499), marks.time_at(500), marks.time_at(10_000)),
            (100, 100, 101, 105)
        );
        for second in 0..CLOCK_MARKS as u32 + 10 {
            marks.mark(1000 + u64::from(second) * 10, 200 + second);
        }
        assert_eq!(marks.time_at(1000 + 3000 * 10 + 5), 3200);
        // 4109 marks in all: the 13 oldest are forgotten.
        assert_eq!(marks.time_at(0), 210, "older than every mark: the oldest mark's time");
    }
}
