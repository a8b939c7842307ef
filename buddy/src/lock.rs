//! `spinlock_t`: the zone lock.
//!
//! The experiments measure lock hold times and waiters, so the zone lock is
//! a spinning lock like the kernel's, not a sleeping mutex: a waiter burns
//! its CPU until the holder releases. Test-and-test-and-set with
//! `spin_loop` hints; every acquisition is counted.
//!
//! # Safety
//! The lock hands out `&mut T` through a guard; exclusivity comes from the
//! `locked` flag: `Acquire` on the successful swap pairs with the `Release`
//! store in the guard's drop, so everything the previous holder wrote is
//! visible to the next.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A spinning lock around `T`.
pub struct SpinLock<T> {
    locked: AtomicBool,
    acquisitions: AtomicU64,
    value: UnsafeCell<T>,
}

// SAFETY: the lock gives one thread at a time access to `value`, so sharing
// the lock is sound when `T` may be sent between threads.
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> SpinLock<T> {
    /// An unlocked lock.
    pub fn new(value: T) -> SpinLock<T> {
        SpinLock {
            locked: AtomicBool::new(false),
            acquisitions: AtomicU64::new(0),
            value: UnsafeCell::new(value),
        }
    }

    /// `spin_lock`.
    #[inline]
    pub fn lock(&self) -> SpinGuard<'_, T> {
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            while self.locked.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        }
        // Relaxed: a statistic, read after the threads are joined.
        self.acquisitions.fetch_add(1, Ordering::Relaxed);
        SpinGuard { lock: self }
    }

    /// Exclusive access without locking (we own the lock uniquely).
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    /// How many times the lock was taken.
    pub fn acquisitions(&self) -> u64 {
        self.acquisitions.load(Ordering::Relaxed)
    }
}

/// Holds a [`SpinLock`]; unlocks on drop.
pub struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while this thread holds the lock.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as above, and `&mut self` makes this the only reference.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        // Release: pairs with the Acquire in `lock`.
        self.lock.locked.store(false, Ordering::Release);
    }
}

/// `pcp->lock` (6.x): a per-CPU, per-zone spin lock that the allocation
/// and free paths only ever *try* (`pcp_spin_trylock`); a failed try sends
/// the request to the zone instead. It guards no data here — a
/// [`PerCpu`](crate::PerCpu) handle is `&mut` to one thread — and is kept
/// for what it costs the path: a locked compare-exchange and a release
/// store per call.
#[derive(Default)]
pub struct TryLock(AtomicBool);

impl TryLock {
    /// `spin_trylock`: true if this call took the lock.
    #[inline(always)]
    pub fn try_lock(&self) -> bool {
        self.0
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// `spin_unlock`.
    #[inline(always)]
    pub fn unlock(&self) {
        // Release: pairs with the Acquire of the next `try_lock`.
        self.0.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excludes_and_counts() {
        let lock = SpinLock::new(0u64);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        *lock.lock() += 1;
                    }
                });
            }
        });
        assert_eq!(*lock.lock(), 40_000);
        assert_eq!(lock.acquisitions(), 40_001);
    }
}
