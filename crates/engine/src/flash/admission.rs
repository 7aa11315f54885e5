//! Which writes reach flash. Flash wears out with every byte written, so inserts pass a policy:
//! everything, a random fraction, or a write budget in MB/s per device (Kangaroo budgets 62.5 MB/s
//! for a 1.9 TB drive at three drive-writes per day). GC rewrites spend the same budget.

use super::io::sim::SimRng;

/// An admission policy, as configured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AdmissionPolicy {
    /// Every evicted item is written.
    All,
    /// Admit each insert with this probability (0..=1).
    Probability(f64),
    /// At most this many MB (10^6 bytes) per second reach the device, split evenly between the
    /// partitions; a second's worth may burst.
    RateMbps(f64),
}

impl std::str::FromStr for AdmissionPolicy {
    type Err = String;
    /// `all`, `p:0.25` or `mbps:62.5`.
    fn from_str(s: &str) -> Result<AdmissionPolicy, String> {
        let number = |v: &str| v.parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0);
        match s.split_once(':') {
            None if s == "all" => Ok(AdmissionPolicy::All),
            Some(("p", v)) => number(v)
                .filter(|p| *p <= 1.0)
                .map(AdmissionPolicy::Probability)
                .ok_or_else(|| format!("bad probability {v:?}: expected 0..=1")),
            Some(("mbps", v)) => number(v)
                .filter(|r| *r > 0.0)
                .map(AdmissionPolicy::RateMbps)
                .ok_or_else(|| format!("bad rate {v:?}: expected MB/s above 0")),
            _ => Err(format!("unknown admission policy {s:?}: expected all, p:<0..1> or mbps:<MB/s>")),
        }
    }
}

/// Decides, per write, whether it reaches flash. `now_ns` is a monotonic clock.
pub trait Admission: Send {
    /// An insert of `bytes` bytes.
    fn admit(&mut self, bytes: usize, now_ns: u64) -> bool;
    /// A GC rewrite of `bytes` bytes (only budgets refuse these).
    fn admit_rewrite(&mut self, _bytes: usize, _now_ns: u64) -> bool {
        true
    }
}

struct AdmitAll;

impl Admission for AdmitAll {
    fn admit(&mut self, _bytes: usize, _now_ns: u64) -> bool {
        true
    }
}

struct AdmitProbability {
    per_million: u32,
    rng: SimRng,
}

impl Admission for AdmitProbability {
    fn admit(&mut self, _bytes: usize, _now_ns: u64) -> bool {
        self.rng.chance(self.per_million)
    }
}

/// A token bucket in bytes, refilled at `bytes_per_sec`, holding at most one second's worth.
struct RateLimit {
    bytes_per_sec: f64,
    tokens: f64,
    last_ns: u64,
}

impl RateLimit {
    fn take(&mut self, bytes: usize, now_ns: u64) -> bool {
        let elapsed = now_ns.saturating_sub(self.last_ns) as f64 / 1e9;
        self.last_ns = self.last_ns.max(now_ns);
        self.tokens = (self.tokens + elapsed * self.bytes_per_sec).min(self.bytes_per_sec);
        if self.tokens >= bytes as f64 {
            self.tokens -= bytes as f64;
            true
        } else {
            false
        }
    }
}

impl Admission for RateLimit {
    fn admit(&mut self, bytes: usize, now_ns: u64) -> bool {
        self.take(bytes, now_ns)
    }
    fn admit_rewrite(&mut self, bytes: usize, now_ns: u64) -> bool {
        self.take(bytes, now_ns)
    }
}

/// The policy for one of `partitions` partitions; `seed` varies the random choices.
pub fn admission_for(policy: AdmissionPolicy, partitions: u32, seed: u64, now_ns: u64) -> Box<dyn Admission> {
    match policy {
        AdmissionPolicy::All => Box::new(AdmitAll),
        AdmissionPolicy::Probability(p) => {
            Box::new(AdmitProbability { per_million: (p * 1e6).round() as u32, rng: SimRng::new(seed) })
        }
        AdmissionPolicy::RateMbps(mbps) => {
            let bytes_per_sec = mbps * 1e6 / f64::from(partitions.max(1));
            Box::new(RateLimit { bytes_per_sec, tokens: bytes_per_sec, last_ns: now_ns })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_and_reject_nonsense() {
        assert_eq!("all".parse(), Ok(AdmissionPolicy::All));
        assert_eq!("p:0.25".parse(), Ok(AdmissionPolicy::Probability(0.25)));
        assert_eq!("mbps:62.5".parse(), Ok(AdmissionPolicy::RateMbps(62.5)));
        for bad in ["", "p:2", "p:-1", "mbps:0", "mbps:x", "lru", "p:nan"] {
            assert!(bad.parse::<AdmissionPolicy>().is_err(), "{bad}");
        }
    }

    #[test]
    fn probability_admits_about_that_fraction() {
        let mut a = admission_for(AdmissionPolicy::Probability(0.25), 1, 9, 0);
        let admitted = (0..100_000).filter(|_| a.admit(100, 0)).count();
        assert!((23_000..27_000).contains(&admitted), "{admitted}");
        assert!(a.admit_rewrite(100, 0));
    }

    #[test]
    fn the_rate_limit_holds_bytes_per_second_split_between_partitions() {
        // 2 MB/s over 2 partitions: 1 MB/s each; a second's burst, then the refill rate.
        let mut a = admission_for(AdmissionPolicy::RateMbps(2.0), 2, 0, 0);
        let first_second = (0..20_000).filter(|_| a.admit(100, 0)).count();
        assert_eq!(first_second, 10_000);
        let later = (0..20_000).filter(|_| a.admit(100, 500_000_000)).count();
        assert_eq!(later, 5_000, "half a second refills half a budget");
        assert!(!a.admit_rewrite(100, 500_000_000), "rewrites spend the same budget");
    }
}
