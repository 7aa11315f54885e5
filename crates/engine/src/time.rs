//! memcached's expiry rules and the partition's coarse clock.
//!
//! An exptime of 0 never expires; a negative one has already expired; up to 30 days it counts
//! from now; above that it is an absolute Unix time (and one in the past has expired). Expiries
//! are stored as absolute Unix seconds in a u32 (0 = never), and an item has expired once
//! `expiry <= now`.

/// Largest exptime memcached treats as relative (30 days, in seconds).
pub const RELATIVE_EXPTIME_MAX: i64 = 60 * 60 * 24 * 30;

/// The stored expiry meaning "already expired": second 1 of the epoch is always in the past.
pub(crate) const EXPIRED: u32 = 1;

/// Converts a memcached exptime to an absolute expiry (0 = never) given the current time.
pub fn expiry_from_exptime(exptime: i64, now: u32) -> u32 {
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
