//! Whether the server's CPUs are shared with other busy work right now, as the workers' yields
//! measure it (`worker/yields.rs`), for the shared port's dealing (`worker/admission.rs`) and
//! `stats tierkv`. Only atomics: no locks, no system calls.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// How long one worker's verdict of contention holds unless renewed.
const CONTENTION_HOLDS: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether any worker's recent yields found its CPU shared with other busy work
/// (`yields::YieldGate::verdict`): until when, in milliseconds from `base`.
#[derive(Debug)]
pub(crate) struct Contention {
    base: Instant,
    until_ms: AtomicU64,
}

impl Contention {
    pub(crate) fn new() -> Contention {
        Contention { base: Instant::now(), until_ms: AtomicU64::new(0) }
    }

    fn millis(&self) -> u64 {
        self.base.elapsed().as_millis() as u64
    }

    /// One worker's verdict: contention holds for `CONTENTION_HOLDS` from now; a verdict of
    /// none lets an earlier one run out (another worker's CPU may still be shared).
    pub(crate) fn note(&self, contended: bool) {
        if contended {
            let until = self.millis() + CONTENTION_HOLDS.as_millis() as u64;
            self.until_ms.fetch_max(until, Ordering::Relaxed);
        }
    }

    /// Whether some worker found contention within `CONTENTION_HOLDS`.
    pub(crate) fn holds(&self) -> bool {
        self.millis() < self.until_ms.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_of_contention_holds_for_a_while_and_one_of_none_does_not_end_it() {
        let contention = Contention::new();
        assert!(!contention.holds());
        contention.note(false);
        assert!(!contention.holds(), "no verdict of contention yet");
        contention.note(true);
        contention.note(false);
        assert!(contention.holds(), "another worker's calm does not end it");
        // As if the verdict was given longer ago than it holds.
        contention.until_ms.store(contention.millis().saturating_sub(1), Ordering::Relaxed);
        assert!(!contention.holds(), "it runs out");
    }
}
