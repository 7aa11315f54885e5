//! A worker's partition behind a lock the other workers can take for one request
//! (`--concurrency crcw`): the owner takes it lazily, on its first use of the partition after
//! a release, and gives it up at the points of its loop where it does no engine work (before
//! a socket's read, after a turn's requests, before it waits); another worker that finds it
//! free executes one request of a key this partition owns itself, with no message and no
//! wake-up of the owner, and forwards the request when it is taken.
//!
//! Only the owner ever waits for the lock, and only for another worker's one request; other
//! workers only try it, so no two workers can wait for each other. This module must not know
//! what a partition is or does.

use std::cell::{Cell, UnsafeCell};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Spins of a waiting owner between yields of its CPU (a holder executes one request).
const SPINS_PER_YIELD: u32 = 64;

/// A value and the flag that says a thread has it.
pub(crate) struct Lockable<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through an `Owned` that holds the flag or a `Guard`
// (which exists only while its thread holds the flag), so one thread at a time has it, as with
// `std::sync::Mutex<T>`; moving a `T` between threads needs `T: Send`.
unsafe impl<T: Send> Sync for Lockable<T> {}

impl<T> Lockable<T> {
    /// Takes the flag if it is free; the guard gives it back when dropped.
    pub(crate) fn try_lock(&self) -> Option<Guard<'_, T>> {
        self.locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            .then(|| Guard { lockable: self })
    }

    fn lock(&self) {
        let mut spins = 0u32;
        while self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            spins += 1;
            if spins.is_multiple_of(SPINS_PER_YIELD) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    fn unlock(&self) {
        debug_assert!(self.locked.load(Ordering::Relaxed), "unlocking a free lock");
        self.locked.store(false, Ordering::Release);
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
    /// Other threads may take the lock; when false, `release` keeps it (nothing else asks).
    shared: bool,
}

impl<T> Owned<T> {
    /// The owner's handle on `value`, held from the start.
    pub(crate) fn new(value: T) -> Owned<T> {
        let lockable = Arc::new(Lockable { locked: AtomicBool::new(true), value: UnsafeCell::new(value) });
        Owned { lockable, held: Cell::new(true), shared: false }
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

    #[inline]
    fn hold(&self) {
        if !self.held.get() {
            self.lockable.lock();
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
