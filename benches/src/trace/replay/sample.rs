//! A replay's series ([`ReplayOptions::sample_every`](super::ReplayOptions::sample_every)):
//! the allocator's free memory ([`FragSample`]) before the first event,
//! every K events, and after the last, with the time the samples took kept
//! apart from the pass's.

use std::time::Instant;

use buddy::{Allocator, BuddyModel, Variant};
use rustc_hash::FxHashMap;
use sparsemem::{Migratetype, Order, Pfn};

use crate::free_memory::{FragSample, Live, sample_buddy};

/// The series of one pass.
pub(super) struct Series {
    every: Option<u64>,
    samples: Vec<FragSample>,
    ns: u128,
}

impl Series {
    /// A series every `every` events (`None` or 0: none).
    pub(super) fn new(every: Option<u64>) -> Series {
        Series {
            every: every.filter(|&k| k > 0),
            samples: Vec::new(),
            ns: 0,
        }
    }

    /// Before the first event.
    pub(super) fn start(&mut self, take: impl FnOnce() -> FragSample) {
        if self.every.is_some() {
            self.samples.push(take());
        }
    }

    /// After `events` events: a sample when they make a multiple of K.
    pub(super) fn after(&mut self, events: u64, take: impl FnOnce() -> FragSample) {
        if self.every.is_some_and(|k| events.is_multiple_of(k)) {
            let t0 = Instant::now();
            self.samples.push(take());
            self.ns += t0.elapsed().as_nanos();
        }
    }

    /// After the last of `events` events (unless just taken): the samples,
    /// and the ns the ones during the pass took.
    pub(super) fn end(
        mut self,
        events: u64,
        take: impl FnOnce() -> FragSample,
    ) -> (Vec<FragSample>, u128) {
        if self.every.is_some() && self.samples.last().is_none_or(|s| s.ops != events) {
            self.samples.push(take());
        }
        (self.samples, self.ns)
    }
}

/// `alloc`'s free memory after `events` events, `held` (trace pfn → the
/// replay's block and the migratetype asked for) its live allocations.
/// The per-CPU lists keep their pages, as `/proc/pagetypeinfo` leaves them
/// out.
pub(super) fn sample<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    events: u64,
    held: &FxHashMap<u64, (Pfn, Order, Migratetype)>,
) -> FragSample {
    let live: Vec<Live> = held.values().map(|&b| Live::from(b)).collect();
    sample_buddy(alloc, events, &live)
}
