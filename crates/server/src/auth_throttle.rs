//! Slows password guessing (`-Y`, `-S`): after a failed attempt, the next attempt from the same
//! source (an IPv4 address, an IPv6 /64, or all local-socket clients together) waits, twice as
//! long after each further failure, up to `MAX_DELAY`; a success or `FORGET` without failures
//! clears it. The table holds at most `MAX_SOURCES` sources (the one whose wait ends first makes
//! room), so forged or many addresses cost bounded memory.
//!
//! It must not sleep or touch connections: it says until when a source must wait, and the
//! worker parks the connection on a timer.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// The wait after the first failure; it doubles with each further one.
pub(crate) const FIRST_DELAY: Duration = Duration::from_millis(10);
/// The longest wait between two attempts from one source.
pub(crate) const MAX_DELAY: Duration = Duration::from_secs(2);
/// A source with no failure for this long starts again from nothing.
const FORGET: Duration = Duration::from_secs(600);
/// Sources remembered at once.
pub(crate) const MAX_SOURCES: usize = 10_000;

/// Where attempts come from: an IPv4 address, an IPv6 /64, or None for local sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Source(Option<u128>);

impl Source {
    pub(crate) fn of(ip: Option<IpAddr>) -> Source {
        Source(ip.map(|ip| match ip {
            IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => u128::from(v4.to_ipv6_mapped()),
                None => u128::from(v6) & !u128::from(u64::MAX),
            },
        }))
    }
}

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    /// Attempts wait until then.
    until: Instant,
    last: Instant,
}

#[derive(Default)]
pub(crate) struct Throttle {
    sources: HashMap<Source, Failures>,
}

impl Throttle {
    /// Until when an attempt from `source` must wait (None: it may go now). An attempt of a
    /// source that failed before holds the others back for `FIRST_DELAY` (until its outcome
    /// is known), so connections on other workers cannot slip through the same opening.
    pub(crate) fn wait(&mut self, source: Source, now: Instant) -> Option<Instant> {
        let failures = self.sources.get_mut(&source)?;
        if failures.until > now {
            return Some(failures.until);
        }
        failures.until = now + FIRST_DELAY;
        None
    }

    /// A failed attempt from `source`: the delay its next attempt waits.
    pub(crate) fn failed(&mut self, source: Source, now: Instant) -> Duration {
        if !self.sources.contains_key(&source) && self.sources.len() >= MAX_SOURCES {
            self.make_room(now);
        }
        let entry = self.sources.entry(source).or_insert(Failures { count: 0, until: now, last: now });
        if now.duration_since(entry.last) >= FORGET {
            entry.count = 0;
        }
        entry.count = entry.count.saturating_add(1);
        let delay = FIRST_DELAY.saturating_mul(1 << (entry.count - 1).min(16)).min(MAX_DELAY);
        (entry.until, entry.last) = (now + delay, now);
        delay
    }

    /// A successful attempt: the source starts again from nothing.
    pub(crate) fn succeeded(&mut self, source: Source) {
        self.sources.remove(&source);
    }

    /// Drops the sources forgotten by now, and if none was, the one whose wait ends first.
    fn make_room(&mut self, now: Instant) {
        self.sources.retain(|_, f| now.duration_since(f.last) < FORGET);
        if self.sources.len() >= MAX_SOURCES {
            if let Some(first) = self.sources.iter().min_by_key(|(_, f)| f.until).map(|(s, _)| *s) {
                self.sources.remove(&first);
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.sources.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn each_failure_doubles_the_wait_up_to_the_limit_and_a_success_clears_it() {
        let (mut throttle, now) = (Throttle::default(), Instant::now());
        let source = Source::of(Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))));
        assert_eq!(throttle.wait(source, now), None);
        assert_eq!(throttle.failed(source, now), FIRST_DELAY);
        assert_eq!(throttle.wait(source, now), Some(now + FIRST_DELAY));
        let later = now + FIRST_DELAY;
        assert_eq!(throttle.wait(source, later), None, "the wait ends");
        assert_eq!(throttle.wait(source, later), Some(later + FIRST_DELAY), "one attempt at a time");
        assert_eq!(throttle.failed(source, now), FIRST_DELAY * 2);
        let delays: Vec<Duration> = (0..20).map(|_| throttle.failed(source, now)).collect();
        assert_eq!(*delays.last().unwrap(), MAX_DELAY);
        assert!(delays.windows(2).all(|w| w[1] >= w[0]));
        let other = Source::of(Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))));
        assert_eq!(throttle.wait(other, now), None, "another address is not slowed");
        throttle.succeeded(source);
        assert_eq!(throttle.wait(source, now), None);
        assert_eq!(throttle.failed(source, now + FORGET), FIRST_DELAY);
    }

    #[test]
    fn ipv6_addresses_of_one_64_are_one_source_and_ipv4_mapped_ones_are_ipv4() {
        let a = Source::of(Some(IpAddr::V6("2001:db8:1:2::1".parse::<Ipv6Addr>().unwrap())));
        let b = Source::of(Some(IpAddr::V6("2001:db8:1:2:ffff:1:2:3".parse::<Ipv6Addr>().unwrap())));
        let c = Source::of(Some(IpAddr::V6("2001:db8:1:3::1".parse::<Ipv6Addr>().unwrap())));
        assert_eq!(a, b);
        assert_ne!(a, c);
        let mapped = Source::of(Some(IpAddr::V6("::ffff:10.0.0.1".parse::<Ipv6Addr>().unwrap())));
        assert_eq!(mapped, Source::of(Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)))));
        assert_eq!(Source::of(None), Source::of(None));
    }

    #[test]
    fn the_table_stays_bounded_whatever_the_number_of_sources() {
        let (mut throttle, now) = (Throttle::default(), Instant::now());
        for i in 0..(MAX_SOURCES as u32 + 500) {
            let source = Source::of(Some(IpAddr::V4(Ipv4Addr::from(i))));
            throttle.failed(source, now + Duration::from_micros(u64::from(i)));
            assert!(throttle.len() <= MAX_SOURCES);
        }
        let newest = Source::of(Some(IpAddr::V4(Ipv4Addr::from(MAX_SOURCES as u32 + 499))));
        assert!(throttle.wait(newest, now).is_some(), "the newest failure is kept");
    }
}
