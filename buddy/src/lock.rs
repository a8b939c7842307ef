//! `spinlock_t`: the zone lock.
//!
//! The experiments measure lock hold times and waiters, so the zone lock is
//! a spinning lock like the kernel's, not a sleeping mutex: a waiter burns
//! its CPU until the holder releases. Three kinds, as the kernel's
//! `spinlock_t` was over the eras ([`ZoneLockKind`]): the unfair byte lock
//! (test-and-test-and-set), the ticket lock and the queued (MCS) lock.
//! `try_lock` (`spin_trylock`) takes the lock only if it is free and never
//! waits, as the paths that may run in any context (6.15's
//! `alloc_pages_nolock`, `free_pages_nolock`) take it. Every acquisition
//! is counted.
//!
//! # Safety
//! The lock hands out `&mut T` through a guard; exclusivity comes from the
//! kind's protocol, each an `Acquire` on taking the lock paired with a
//! `Release` on giving it up, so everything the previous holder wrote is
//! visible to the next:
//! - unfair: the `locked` flag, swapped false → true, stored false;
//! - ticket: `owner` reaching the ticket drawn from `next`, then bumped
//!   (a try draws only the ticket `owner` already shows);
//! - queued: the holder is the thread whose queue node the tail swap (or
//!   a try's compare-exchange from an empty queue) linked behind none, or whose predecessor cleared its node's `waiting`
//!   flag. Queue nodes are per-thread (thread-local, as the kernel's are
//!   per-CPU) and outlive every use: a thread cannot exit while it waits
//!   or holds, and its successor reads the node only until it is handed
//!   the lock.

use std::cell::{Cell, UnsafeCell};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};

/// Which spinning lock the zone lock is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ZoneLockKind {
    /// The byte lock of 2.6.23 and before (`lock decb`, spin while held):
    /// whoever's atomic lands first after a release takes it, so a waiter
    /// may lose to a CPU that just arrived, or to the releaser itself.
    #[default]
    Unfair,
    /// The ticket lock (2.6.25–4.1): waiters are served in arrival order.
    Ticket,
    /// A queued lock (MCS, the core of `qspinlock` since 4.2): each waiter
    /// spins on its own queue node, served in arrival order.
    Queued,
}

impl ZoneLockKind {
    /// Every kind.
    pub const ALL: [ZoneLockKind; 3] = [
        ZoneLockKind::Unfair,
        ZoneLockKind::Ticket,
        ZoneLockKind::Queued,
    ];

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            ZoneLockKind::Unfair => "unfair",
            ZoneLockKind::Ticket => "ticket",
            ZoneLockKind::Queued => "mcs",
        }
    }
}

/// A queued lock's per-thread node.
struct McsNode {
    next: AtomicPtr<McsNode>,
    waiting: AtomicBool,
}

/// Queue nodes a thread can hold at once (nested zone locks never exceed
/// two: hot-remove holds one zone while it looks at another).
const MCS_NODES: usize = 4;

thread_local! {
    static MCS: [McsNode; MCS_NODES] = const {
        [const {
            McsNode {
                next: AtomicPtr::new(std::ptr::null_mut()),
                waiting: AtomicBool::new(false),
            }
        }; MCS_NODES]
    };
    /// Which of this thread's nodes are queued or holding (bit per node).
    static MCS_USED: Cell<u8> = const { Cell::new(0) };
}

/// A spinning lock around `T`.
pub struct SpinLock<T> {
    kind: ZoneLockKind,
    /// Unfair: held.
    locked: AtomicBool,
    /// Ticket: the next ticket to draw and the ticket being served.
    next: AtomicU32,
    owner: AtomicU32,
    /// Queued: the last waiter's node (null when free).
    tail: AtomicPtr<McsNode>,
    acquisitions: AtomicU64,
    value: UnsafeCell<T>,
}

// SAFETY: the lock gives one thread at a time access to `value`, so sharing
// the lock is sound when `T` may be sent between threads.
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> SpinLock<T> {
    /// An unlocked lock of `kind`.
    pub fn with_kind(value: T, kind: ZoneLockKind) -> SpinLock<T> {
        SpinLock {
            kind,
            locked: AtomicBool::new(false),
            next: AtomicU32::new(0),
            owner: AtomicU32::new(0),
            tail: AtomicPtr::new(std::ptr::null_mut()),
            acquisitions: AtomicU64::new(0),
            value: UnsafeCell::new(value),
        }
    }

    /// `spin_lock`.
    #[inline]
    pub fn lock(&self) -> SpinGuard<'_, T> {
        let node = match self.kind {
            ZoneLockKind::Unfair => {
                self.lock_unfair();
                std::ptr::null()
            }
            ZoneLockKind::Ticket => {
                self.lock_ticket();
                std::ptr::null()
            }
            ZoneLockKind::Queued => self.lock_queued(),
        };
        // A statistic, written only by the holder: a load and a store, not
        // a second locked operation per acquisition (the kernel's
        // `spin_lock` has one). Relaxed is enough: the lock's Acquire and
        // the previous holder's Release order its store before this load,
        // and readers take it after the threads are joined.
        let taken = self.acquisitions.load(Ordering::Relaxed);
        self.acquisitions.store(taken + 1, Ordering::Relaxed);
        SpinGuard { lock: self, node }
    }

    /// `spin_trylock`: the lock if it is free now, else `None` at once —
    /// never a wait (`spin_trylock_irqsave`, which 6.15's
    /// `alloc_pages_nolock` and `free_pages_nolock` take the zone lock
    /// with). For a fair lock "free" means no holder and no waiter, as
    /// `arch_spin_trylock` of the ticket lock and `queued_spin_trylock`
    /// read it: a try never jumps a queue.
    #[inline]
    pub fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        let node = match self.kind {
            ZoneLockKind::Unfair => {
                // Acquire on success: pairs with the Release store of the
                // previous holder's unlock.
                self.locked
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .ok()?;
                std::ptr::null()
            }
            ZoneLockKind::Ticket => {
                // Acquire: pairs with the previous holder's Release store of
                // `owner`. With `next == owner` nobody holds or waits; the
                // compare-exchange draws ticket `owner` only if nobody drew
                // one since, and `owner` cannot move while nobody holds.
                let owner = self.owner.load(Ordering::Acquire);
                self.next
                    .compare_exchange(
                        owner,
                        owner.wrapping_add(1),
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    )
                    .ok()?;
                std::ptr::null()
            }
            ZoneLockKind::Queued => self.try_lock_queued()?,
        };
        // As in `lock`: a holder-only statistic.
        let taken = self.acquisitions.load(Ordering::Relaxed);
        self.acquisitions.store(taken + 1, Ordering::Relaxed);
        Some(SpinGuard { lock: self, node })
    }

    /// The queued lock's try: this thread's next free node becomes the
    /// tail only if the queue is empty; returns it, or gives it back.
    #[inline(never)]
    fn try_lock_queued(&self) -> Option<*const McsNode> {
        if !self.tail.load(Ordering::Relaxed).is_null() {
            return None;
        }
        let node = Self::claim_node(false);
        // AcqRel on success: Acquire to see the previous holder's writes
        // (its Release compare-exchange emptied the queue), Release to
        // publish the node before a successor links to it.
        match self.tail.compare_exchange(
            std::ptr::null_mut(),
            node.cast_mut(),
            Ordering::AcqRel,
            Ordering::Relaxed,
        ) {
            Ok(_) => Some(node),
            Err(_) => {
                Self::release_node(node);
                None
            }
        }
    }

    #[inline(always)]
    fn lock_unfair(&self) {
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            while self.locked.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        }
    }

    #[inline(always)]
    fn lock_ticket(&self) {
        // Relaxed: drawing a ticket orders nothing; the Acquire load of
        // `owner` does.
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        while self.owner.load(Ordering::Acquire) != ticket {
            std::hint::spin_loop();
        }
    }

    /// Queues this thread's next free node and spins on it; returns it.
    #[inline(never)]
    fn lock_queued(&self) -> *const McsNode {
        let node = Self::claim_node(true);
        // SAFETY: `claim_node` gives a node of this thread's, used for this
        // lock only, that lives as long as the thread (module contract).
        let n = unsafe { &*node };
        // AcqRel: Acquire to see the predecessor's node initialised (and the
        // previous holder's writes when the queue was empty), Release to
        // publish this node before a successor links to it.
        let prev = self.tail.swap(node.cast_mut(), Ordering::AcqRel);
        if !prev.is_null() {
            // SAFETY: `prev` is a queued node: its thread spins in `lock` or
            // holds the lock, so the node lives until it hands the lock on,
            // which it cannot do before it sees this link.
            unsafe { &*prev }
                .next
                .store(node.cast_mut(), Ordering::Release);
            // Acquire: pairs with the predecessor's Release hand-off.
            while n.waiting.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
        }
        node
    }

    /// Hands the lock to the queued successor, or empties the queue.
    #[inline(never)]
    fn unlock_queued(&self, node: *const McsNode) {
        // SAFETY: `node` is this thread's node, taken in `lock_queued`.
        let n = unsafe { &*node };
        let mut next = n.next.load(Ordering::Acquire);
        if next.is_null() {
            // Release: the next holder (who finds the queue empty) sees our
            // writes through its AcqRel swap of `tail`.
            if self
                .tail
                .compare_exchange(
                    node.cast_mut(),
                    std::ptr::null_mut(),
                    Ordering::Release,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                Self::release_node(node);
                return;
            }
            // A successor swapped the tail and is about to link itself.
            loop {
                next = n.next.load(Ordering::Acquire);
                if !next.is_null() {
                    break;
                }
                std::hint::spin_loop();
            }
        }
        // SAFETY: `next` is the successor's node, live while it waits.
        // Release: the successor's Acquire spin sees every write we made.
        unsafe { &*next }.waiting.store(false, Ordering::Release);
        Self::release_node(node);
    }

    /// This thread's next free queue node, marked used, with no successor
    /// and `waiting` as given.
    #[inline(always)]
    fn claim_node(waiting: bool) -> *const McsNode {
        let index = MCS_USED.with(|used| {
            let bits = used.get();
            let i = bits.trailing_ones() as usize;
            assert!(
                i < MCS_NODES,
                "more than {MCS_NODES} zone locks held at once"
            );
            used.set(bits | 1 << i);
            i
        });
        let node: *const McsNode = MCS.with(|nodes| &nodes[index] as *const McsNode);
        // SAFETY: the node is this thread's, marked used for this lock only,
        // and lives as long as the thread (module contract).
        let n = unsafe { &*node };
        n.next.store(std::ptr::null_mut(), Ordering::Relaxed);
        n.waiting.store(waiting, Ordering::Relaxed);
        node
    }

    /// Marks this thread's `node` free for its next lock.
    fn release_node(node: *const McsNode) {
        let index = MCS.with(|nodes| nodes.iter().position(|n| std::ptr::eq(n, node)));
        if let Some(i) = index {
            MCS_USED.with(|used| used.set(used.get() & !(1 << i)));
        }
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
    /// The queued lock's node of this holder (null for the other kinds).
    node: *const McsNode,
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
        match self.lock.kind {
            // Release: pairs with the Acquire in `lock`.
            ZoneLockKind::Unfair => self.lock.locked.store(false, Ordering::Release),
            ZoneLockKind::Ticket => {
                // Only the holder writes `owner`.
                let served = self.lock.owner.load(Ordering::Relaxed);
                // Release: pairs with the next holder's Acquire load.
                self.lock
                    .owner
                    .store(served.wrapping_add(1), Ordering::Release);
            }
            ZoneLockKind::Queued => self.lock.unlock_queued(self.node),
        }
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

    /// No more spinners than CPUs: the kernel spins with preemption off,
    /// and a fair lock whose next owner is preempted here waits out the
    /// scheduler's timeslice at each hand-off (with 4 threads on 2 CPUs,
    /// up to a minute for this test).
    #[test]
    fn every_kind_excludes_and_counts() {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 4));
        for kind in ZoneLockKind::ALL {
            let lock = SpinLock::with_kind(0u64, kind);
            let rounds = if cfg!(miri) { 50 } else { 5_000 };
            std::thread::scope(|s| {
                for _ in 0..threads {
                    s.spawn(|| {
                        for _ in 0..rounds {
                            *lock.lock() += 1;
                        }
                    });
                }
            });
            let total = threads as u64 * rounds;
            assert_eq!(*lock.lock(), total, "{kind:?}");
            assert_eq!(lock.acquisitions(), total + 1, "{kind:?}");
        }
    }

    /// A try takes a free lock of every kind, fails at once while it is
    /// held (by this thread's guard or another thread's), counts only
    /// what it took, and leaves the lock whole for the next holder.
    #[test]
    fn try_lock_takes_a_free_lock_and_fails_on_a_held_one() {
        for kind in ZoneLockKind::ALL {
            let lock = SpinLock::with_kind(0u64, kind);
            let mut g = lock.try_lock().expect("free");
            *g += 1;
            assert!(lock.try_lock().is_none(), "{kind:?}: held by this thread");
            std::thread::scope(|s| {
                s.spawn(|| assert!(lock.try_lock().is_none(), "{kind:?}: held elsewhere"));
            });
            drop(g);
            let held = lock.lock();
            std::thread::scope(|s| {
                s.spawn(|| assert!(lock.try_lock().is_none(), "{kind:?}: lock()'s holder"));
            });
            drop(held);
            *lock.try_lock().expect("free again") += 1;
            assert_eq!(*lock.lock(), 2, "{kind:?}");
            assert_eq!(
                lock.acquisitions(),
                4,
                "{kind:?}: failed tries are not counted"
            );
        }
    }

    /// Tries and spinning takers mixed on several threads still exclude
    /// each other: every increment lands once.
    #[test]
    fn try_lock_excludes_spinning_holders() {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 4));
        for kind in ZoneLockKind::ALL {
            let lock = SpinLock::with_kind(0u64, kind);
            let rounds = if cfg!(miri) { 50 } else { 5_000 };
            let tried = std::sync::atomic::AtomicU64::new(0);
            std::thread::scope(|s| {
                for t in 0..threads {
                    let (lock, tried) = (&lock, &tried);
                    s.spawn(move || {
                        for _ in 0..rounds {
                            if t % 2 == 0 {
                                *lock.lock() += 1;
                            } else if let Some(mut g) = lock.try_lock() {
                                *g += 1;
                                tried.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    });
                }
            });
            let spinners = threads.div_ceil(2) as u64;
            let total = spinners * rounds + tried.load(Ordering::Relaxed);
            assert_eq!(*lock.lock(), total, "{kind:?}");
        }
    }

    /// Queued locks held at once (hot-remove's nesting), released in
    /// either order: each holder keeps its own node.
    #[test]
    fn queued_locks_nest_and_release_in_any_order() {
        let locks: Vec<_> = (0..3u8)
            .map(|i| SpinLock::with_kind(i, ZoneLockKind::Queued))
            .collect();
        let (g0, g1) = (locks[0].lock(), locks[1].lock());
        drop(g0);
        let g2 = locks[2].lock();
        assert_eq!(*g1 + *g2, 3);
        drop(g1);
        drop(g2);
        let all: Vec<_> = locks.iter().map(SpinLock::lock).collect();
        assert_eq!(all.iter().map(|g| **g).sum::<u8>(), 3);
    }
}
