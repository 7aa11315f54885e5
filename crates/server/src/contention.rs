//! Whether the server's CPUs are shared with other busy work right now, as the workers' yields
//! measure it (`worker/yields.rs`), for the shared port's dealing (`worker/admission.rs`) and
//! `stats tierkv`. Only atomics: no locks, no system calls.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long one worker's verdict of contention holds unless renewed.
const CONTENTION_HOLDS: Duration = Duration::from_secs(5);

/// Until when (milliseconds from `base`) each worker last found its CPU shared with other busy
/// work (`yields::YieldGate::verdict`). The CPUs count as shared while more than half of the
/// workers' verdicts hold: one busy process beside `-t 2` takes one CPU, and a client thread
/// and its worker still do best together on the other (closed-loop p99 2.5 ms grouped, 3.3 ms
/// dealt in turn, memcached 2.3-2.5); beside three both CPUs are shared (4.2 ms in turn, 5.2
/// grouped, memcached 4.2-4.8).
#[derive(Debug)]
pub(crate) struct Contention {
    base: Instant,
    until_ms: Vec<AtomicU64>,
    /// `--test-contended`: always shared, whatever the verdicts.
    forced: bool,
}

impl Contention {
    pub(crate) fn new(workers: usize, forced: bool) -> Contention {
        let until_ms = (0..workers.max(1)).map(|_| AtomicU64::new(0)).collect();
        Contention { base: Instant::now(), until_ms, forced }
    }

    fn millis(&self) -> u64 {
        self.base.elapsed().as_millis() as u64
    }

    /// Worker `worker`'s verdict: contention holds for `CONTENTION_HOLDS` from now; a verdict
    /// of none lets an earlier one run out (a yield of a fully busy worker says nothing).
    pub(crate) fn note(&self, worker: usize, contended: bool) {
        if let (true, Some(until)) = (contended, self.until_ms.get(worker)) {
            until.store(self.millis() + CONTENTION_HOLDS.as_millis() as u64, Ordering::Relaxed);
        }
    }

    /// The workers whose verdict of contention holds.
    pub(crate) fn workers_contended(&self) -> usize {
        let now = self.millis();
        self.until_ms.iter().filter(|until| now < until.load(Ordering::Relaxed)).count()
    }

    /// Whether the CPUs count as shared: more than half of the workers found theirs so.
    pub(crate) fn holds(&self) -> bool {
        self.forced || self.workers_contended() * 2 > self.until_ms.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpus_count_as_shared_while_more_than_half_the_workers_found_so() {
        let contention = Contention::new(2, false);
        assert!(!contention.holds());
        contention.note(0, false);
        assert!(!contention.holds(), "no verdict of contention yet");
        contention.note(0, true);
        assert_eq!(contention.workers_contended(), 1);
        assert!(!contention.holds(), "one CPU of two");
        contention.note(1, true);
        contention.note(1, false);
        assert!(contention.holds(), "both; a later calm verdict does not end one");
        // As if worker 0's verdict was given longer ago than it holds.
        contention.until_ms[0].store(contention.millis().saturating_sub(1), Ordering::Relaxed);
        assert!(!contention.holds(), "it runs out");
        let one = Contention::new(1, false);
        one.note(0, true);
        assert!(one.holds());
        one.note(5, true);
        assert!(Contention::new(2, true).holds(), "--test-contended");
    }
}
