//! A worker's partition behind a lock the other workers can take for one request
//! (`--concurrency crcw`): the owner takes it lazily, on its first use of the partition after
//! a release, and gives it up at the points of its loop where it does no engine work (before
//! a socket's read, after a turn's requests, before it waits); another worker that finds it
//! free executes one request of a key this partition owns itself, with no message and no
//! wake-up of the owner, and forwards the request when it is taken.
//!
//! Only the owner ever waits for the lock, and only for another worker's one request; other
//! workers only try it (for at most `GUEST_PATIENCE`), so no two workers can wait for each
//! other. The owner's wait is bounded too: it spins for `OWNER_SPINS` looks, then sleeps
//! (`std::thread::park`, a futex) until the guest's unlock wakes it, so an owner whose guest
//! lost its CPU gives its own CPU away instead of spinning or yielding it to a busy neighbour.
//! This module must not know what a partition is or does.

use std::cell::{Cell, UnsafeCell};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// Looks of a waiting owner at the flag before it sleeps (a running holder executes one
/// request: well under a microsecond).
const OWNER_SPINS: u32 = 256;
/// The longest sleep of a waiting owner before it looks again (a lost wake-up costs this).
const OWNER_NAP: Duration = Duration::from_millis(1);
/// How long a guest tries for a taken flag before it forwards its request instead: a running
/// owner holds it for one batch of engine work, one that lost its CPU for a scheduler slice.
/// Measured with memcaslap beside three CPU-bound processes (-t 2): with 2 us, a fifth of the
/// remaining forwards went and requests/s rose 3-8% (docs/benchmarks.md, "Real conditions").
pub(crate) const GUEST_PATIENCE: Duration = Duration::from_micros(2);
/// How long a guest waits for the lock with `GuestLock::Wait` before it forwards after all.
const GUEST_TEST_WAIT: Duration = Duration::from_secs(1);

/// How guests take the lock (`--test-guest-lock`, for tests that must see one path every
/// time, whatever the machine's load).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GuestLock {
    /// For up to `GUEST_PATIENCE`, then the request is forwarded (the server's way).
    Try,
    /// Never: every request is forwarded, as when the lock is always found taken.
    Never,
    /// Until the owner gives it back (it does before every wait and socket call), yielding
    /// between looks; forwarded only after `GUEST_TEST_WAIT`.
    Wait,
}

/// Spins of a trying guest between two looks at the clock.
const GUEST_SPINS_PER_LOOK: u32 = 16;

/// The flag's states.
const FREE: u8 = 0;
const TAKEN: u8 = 1;
/// Taken, and the owner sleeps until it is given back.
const OWNER_WAITS: u8 = 2;

/// A value and the flag that says a thread has it.
pub(crate) struct Lockable<T> {
    state: AtomicU8,
    /// The owner's thread, for the guest's unlock to wake (set before the owner first sleeps).
    owner: OnceLock<Thread>,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through an `Owned` that holds the flag or a `Guard`
// (which exists only while its thread holds the flag), so one thread at a time has it, as with
// `std::sync::Mutex<T>`; moving a `T` between threads needs `T: Send`.
unsafe impl<T: Send> Sync for Lockable<T> {}

impl<T> Lockable<T> {
    /// Takes the flag if it is free; the guard gives it back when dropped.
    pub(crate) fn try_lock(&self) -> Option<Guard<'_, T>> {
        self.state
            .compare_exchange(FREE, TAKEN, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            .then(|| Guard { lockable: self })
    }

    /// Tries for the flag for up to `patience`, watching it without writing in between (the
    /// owner's hold is one batch of engine work while it runs); None if it stays taken, as
    /// when its owner lost its CPU while holding it.
    pub(crate) fn try_lock_for(&self, patience: Duration) -> Option<Guard<'_, T>> {
        let mut deadline = None;
        loop {
            if let Some(guard) = self.try_lock() {
                return Some(guard);
            }
            for _ in 0..GUEST_SPINS_PER_LOOK {
                std::hint::spin_loop();
                if self.state.load(Ordering::Relaxed) == FREE {
                    break;
                }
            }
            let now = Instant::now();
            if now >= *deadline.get_or_insert(now + patience) {
                return self.try_lock();
            }
        }
    }

    /// The flag the way `how` says a guest takes it.
    pub(crate) fn guest_lock(&self, how: GuestLock) -> Option<Guard<'_, T>> {
        match how {
            GuestLock::Try => self.try_lock_for(GUEST_PATIENCE),
            GuestLock::Never => None,
            GuestLock::Wait => {
                let deadline = Instant::now() + GUEST_TEST_WAIT;
                loop {
                    if let Some(guard) = self.try_lock() {
                        return Some(guard);
                    }
                    if Instant::now() >= deadline {
                        return None;
                    }
                    std::thread::yield_now();
                }
            }
        }
    }

    /// The owner takes the flag, waiting for a guest's one request; true if it slept.
    fn lock(&self) -> bool {
        for _ in 0..OWNER_SPINS {
            if self.state.compare_exchange_weak(FREE, TAKEN, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                return false;
            }
            std::hint::spin_loop();
        }
        self.owner.get_or_init(std::thread::current);
        loop {
            match self.state.compare_exchange(FREE, TAKEN, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(OWNER_WAITS) => std::thread::park_timeout(OWNER_NAP),
                Err(_) => {
                    // Tell the guest to wake this thread; if it gave the flag back meanwhile,
                    // take it on the next round.
                    let told = self.state.compare_exchange(TAKEN, OWNER_WAITS, Ordering::Acquire, Ordering::Relaxed);
                    if told.is_ok() {
                        std::thread::park_timeout(OWNER_NAP);
                    }
                }
            }
        }
    }

    fn unlock(&self) {
        let was = self.state.swap(FREE, Ordering::Release);
        debug_assert_ne!(was, FREE, "unlocking a free lock");
        if was == OWNER_WAITS {
            if let Some(owner) = self.owner.get() {
                owner.unpark();
            }
        }
    }
}

/// Another worker's hold on the value, for one request.
pub(crate) struct Guard<'a, T> {
    lockable: &'a Lockable<T>,
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while this thread holds the flag (`try_lock`).
        unsafe { &*self.lockable.value.get() }
    }
}

impl<T> DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference through the guard.
        unsafe { &mut *self.lockable.value.get() }
    }
}

impl<T> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        self.lockable.unlock();
    }
}

/// The owner's handle: every use of the value takes the lock if this handle does not hold it,
/// and `release` gives it back. Not shared (`Cell`), so one thread uses it.
pub(crate) struct Owned<T> {
    lockable: Arc<Lockable<T>>,
    held: Cell<bool>,
    /// Times the owner slept waiting for a guest since `take_waits` last ran.
    waits: Cell<u64>,
    /// Other threads may take the lock; when false, `release` keeps it (nothing else asks).
    shared: bool,
}

impl<T> Owned<T> {
    /// The owner's handle on `value`, held from the start.
    pub(crate) fn new(value: T) -> Owned<T> {
        let lockable =
            Arc::new(Lockable { state: AtomicU8::new(TAKEN), owner: OnceLock::new(), value: UnsafeCell::new(value) });
        Owned { lockable, held: Cell::new(true), waits: Cell::new(0), shared: false }
    }

    /// The lock for other threads to try; from now on `release` gives it up.
    pub(crate) fn share(&mut self) -> Arc<Lockable<T>> {
        self.shared = true;
        Arc::clone(&self.lockable)
    }

    /// Gives the lock up until the next use of the value. `&mut self`: no reference from an
    /// earlier use can outlive it.
    #[inline]
    pub(crate) fn release(&mut self) {
        if self.shared && self.held.replace(false) {
            self.lockable.unlock();
        }
    }

    /// Whether this handle holds the lock now (a shared one gives it up at `release`).
    pub(crate) fn held(&self) -> bool {
        self.shared && self.held.get()
    }

    /// The times the owner slept waiting for a guest since the last call (`lock_waits`).
    pub(crate) fn take_waits(&self) -> u64 {
        self.waits.replace(0)
    }

    #[inline]
    fn hold(&self) {
        if !self.held.get() {
            if self.lockable.lock() {
                self.waits.set(self.waits.get() + 1);
            }
            self.held.set(true);
        }
    }
}

impl<T> Deref for Owned<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        self.hold();
        // SAFETY: `hold` made this thread the flag's holder, and it stays so until `release`,
        // which takes `&mut self` and so cannot run while the returned reference lives.
        unsafe { &*self.lockable.value.get() }
    }
}

impl<T> DerefMut for Owned<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        self.hold();
        // SAFETY: as in `deref`; `&mut self` makes this the only reference through the handle.
        unsafe { &mut *self.lockable.value.get() }
    }
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        // Other threads' guards end before the value does: the owner waits for the flag.
        self.hold();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_value_cannot_be_tried_and_a_released_one_can() {
        let mut owned = Owned::new(5u64);
        let lockable = owned.share();
        assert_eq!(*owned, 5);
        assert!(lockable.try_lock().is_none(), "the owner holds it from the start");
        owned.release();
        {
            let mut guard = lockable.try_lock().expect("released");
            *guard += 1;
            assert!(lockable.try_lock().is_none(), "one guard at a time");
        }
        assert_eq!(*owned, 6, "the owner sees the other thread's change");
        assert!(lockable.try_lock().is_none(), "using the value took the lock again");
    }

    #[test]
    fn an_unshared_owner_keeps_its_lock_through_release() {
        let mut owned = Owned::new(1u8);
        owned.release();
        assert!(owned.lockable.try_lock().is_none());
    }

    /// A guest that lost its CPU while holding the lock (here: sleeps 50 ms holding it) makes
    /// the owner sleep, not spin: its wait is counted, it takes the lock as soon as the guest
    /// gives it back, and its thread used a small part of the wait's CPU time.
    #[test]
    fn the_owner_sleeps_while_a_guest_holds_the_lock_and_wakes_when_it_is_given_back() {
        let mut owned = Owned::new(0u64);
        let lockable = owned.share();
        owned.release();
        let (taken_tx, taken_rx) = std::sync::mpsc::channel();
        let guest = std::thread::spawn(move || {
            let mut guard = lockable.try_lock().expect("free");
            taken_tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            *guard += 1;
            Instant::now()
        });
        taken_rx.recv().unwrap();
        let cpu_before = thread_cpu();
        *owned += 1;
        let took = Instant::now();
        let given_back = guest.join().unwrap();
        assert_eq!(*owned, 2, "the guest's change came first");
        assert_eq!(owned.take_waits(), 1, "the owner slept once");
        assert!(took >= given_back, "the owner took the lock only after the guest gave it back");
        let cpu = thread_cpu() - cpu_before;
        assert!(cpu < Duration::from_millis(25), "the owner spun through the wait: {cpu:?} of CPU");
    }

    /// A guest gives up on a lock that stays taken after its patience, and gets one that is
    /// given back within it.
    #[test]
    fn a_guest_tries_for_a_bounded_time() {
        let mut owned = Owned::new(0u8);
        let lockable = owned.share();
        let started = Instant::now();
        assert!(lockable.try_lock_for(Duration::from_millis(5)).is_none(), "the owner holds it");
        assert!(started.elapsed() >= Duration::from_millis(5));
        assert!(started.elapsed() < Duration::from_secs(1));
        owned.release();
        assert!(lockable.try_lock_for(GUEST_PATIENCE).is_some());
    }

    /// The test hooks: `Never` forwards even with the lock free; `Wait` gets a lock the owner
    /// holds once the owner gives it back (later than `GUEST_PATIENCE` would have waited).
    #[test]
    fn a_guest_told_never_never_takes_the_lock_and_one_told_wait_waits_for_it() {
        let mut owned = Owned::new(0u8);
        let lockable = owned.share();
        owned.release();
        assert!(lockable.guest_lock(GuestLock::Never).is_none(), "the lock was free");
        assert!(lockable.guest_lock(GuestLock::Try).is_some());
        *owned += 1;
        let guest = {
            let lockable = Arc::clone(&lockable);
            std::thread::spawn(move || {
                lockable.guest_lock(GuestLock::Wait).map(|mut value| {
                    *value += 1;
                    *value
                })
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        owned.release();
        assert_eq!(guest.join().unwrap(), Some(2), "the waiting guest came after the owner's change");
        assert_eq!(*owned, 2);
    }

    /// CPU time of the calling thread.
    fn thread_cpu() -> Duration {
        let text = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        let fields: Vec<&str> = text.rsplit(')').next().unwrap().split_whitespace().collect();
        // utime and stime are fields 14 and 15 (1-based) of the whole line, 12 and 13 here.
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        Duration::from_millis(ticks * 10)
    }

    /// An owner and two other threads add to a pair of counters that must stay equal; every
    /// look at the pair, by any of them, must find it equal (a torn update would not be).
    #[test]
    fn owner_and_others_never_see_each_others_half_done_changes() {
        const ROUNDS: u64 = 200_000;
        let mut owned = Owned::new((0u64, 0u64));
        let lockable = owned.share();
        let others: Vec<_> = (0..2)
            .map(|_| {
                let lockable = Arc::clone(&lockable);
                std::thread::spawn(move || {
                    let mut done = 0;
                    while done < ROUNDS {
                        if let Some(mut pair) = lockable.try_lock() {
                            assert_eq!(pair.0, pair.1, "another thread's change seen half done");
                            pair.0 += 1;
                            std::hint::black_box(&mut *pair);
                            pair.1 += 1;
                            done += 1;
                        }
                    }
                })
            })
            .collect();
        for _ in 0..ROUNDS {
            let pair = &mut *owned;
            assert_eq!(pair.0, pair.1, "another thread's change seen half done");
            pair.0 += 1;
            pair.1 += 1;
            owned.release();
        }
        for other in others {
            other.join().unwrap();
        }
        assert_eq!(*owned, (3 * ROUNDS, 3 * ROUNDS), "no change was lost");
    }
}
