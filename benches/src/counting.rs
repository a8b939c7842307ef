//! A memory model that counts: [`Counted`] wraps any model, answers every
//! call from it, and counts (and samples) the calls an allocator path makes
//! — `pfn_valid`, `pfn_to_page`, `page_to_pfn` and the pageblock lookups.
//! `pfnlab bench breakdown` runs a path once over it to learn how many
//! memory-model operations the path makes and at which pfns, then times
//! those operations alone over the same pfns ([`ModelOps::replay_ns`]).
//!
//! The counters are atomics and the samples sit behind a mutex, so a path
//! over a `Counted` model is slower than over the model itself: it is run
//! for its counts, never timed.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use sparsemem::{
    Geometry, HotplugError, MemmapBytes, MemoryModel, Migratetype, NodeId, PageLayout, Pfn,
};

use crate::timing::{Measurement, measure};

/// The memory-model operations an allocator path makes.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum ModelOp {
    /// `pfn_valid`.
    PfnValid,
    /// `pfn_to_page` guarded by `pfn_valid`.
    PfnToPage,
    /// `pfn_to_page` without the check (the descriptor pointer).
    PfnToPagePtr,
    /// `page_to_pfn`.
    PageToPfn,
    /// `get_pfnblock_migratetype`.
    GetPageblock,
    /// `set_pfnblock_migratetype`.
    SetPageblock,
}

impl ModelOp {
    /// Every operation, in report order.
    pub const ALL: [ModelOp; 6] = [
        ModelOp::PfnValid,
        ModelOp::PfnToPage,
        ModelOp::PfnToPagePtr,
        ModelOp::PageToPfn,
        ModelOp::GetPageblock,
        ModelOp::SetPageblock,
    ];

    /// The kernel function's name.
    pub fn name(self) -> &'static str {
        match self {
            ModelOp::PfnValid => "pfn_valid",
            ModelOp::PfnToPage => "pfn_to_page",
            ModelOp::PfnToPagePtr => "pfn_to_page_unchecked",
            ModelOp::PageToPfn => "page_to_pfn",
            ModelOp::GetPageblock => "get_pfnblock_migratetype",
            ModelOp::SetPageblock => "set_pfnblock_migratetype",
        }
    }
}

/// Samples kept per operation: enough to time the operation over the
/// path's own pfns, few enough to stay in cache as they did on the path.
pub const SAMPLES: usize = 4096;

/// Counts and sampled pfns per [`ModelOp`].
#[derive(Default)]
struct Tally {
    counts: [AtomicU64; 6],
    /// `pfn_valid` calls that answered "hole".
    holes: AtomicU64,
    samples: Mutex<[Vec<u64>; 6]>,
}

/// A model that counts the calls made to it; see the module documentation.
pub struct Counted<M> {
    inner: M,
    tally: Tally,
}

impl<M: MemoryModel> Counted<M> {
    /// Wraps `inner`.
    pub fn new(inner: M) -> Counted<M> {
        Counted {
            inner,
            tally: Tally::default(),
        }
    }

    /// The wrapped model.
    pub fn inner(&self) -> &M {
        &self.inner
    }

    #[inline]
    fn count(&self, op: ModelOp, pfn: u64) {
        let i = op as usize;
        // Only the first `SAMPLES` calls since the last reset can still
        // find room for a sample: the lock is not taken for the rest.
        let before = self.tally.counts[i].fetch_add(1, Relaxed);
        if before < SAMPLES as u64
            && let Ok(mut s) = self.tally.samples.lock()
            && s[i].len() < SAMPLES
        {
            s[i].push(pfn);
        }
    }

    /// `pfn_valid` calls so far that answered "hole".
    pub fn hole_hits(&self) -> u64 {
        self.tally.holes.load(Relaxed)
    }

    /// Forgets every count and sample (after a warm-up).
    pub fn reset(&self) {
        for c in &self.tally.counts {
            c.store(0, Relaxed);
        }
        self.tally.holes.store(0, Relaxed);
        if let Ok(mut s) = self.tally.samples.lock() {
            s.iter_mut().for_each(Vec::clear);
        }
    }

    /// The counts and samples so far.
    pub fn ops(&self) -> ModelOps {
        let samples = self
            .tally
            .samples
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default();
        ModelOps {
            counts: std::array::from_fn(|i| self.tally.counts[i].load(Relaxed)),
            samples,
        }
    }
}

/// What [`Counted`] saw: calls per operation and the first pfns of each.
#[derive(Clone, Debug, Default)]
pub struct ModelOps {
    /// Calls per operation, in [`ModelOp::ALL`] order.
    pub counts: [u64; 6],
    /// The first [`SAMPLES`] pfns of each operation, in call order.
    pub samples: [Vec<u64>; 6],
}

impl ModelOps {
    /// Calls of `op`.
    pub fn count(&self, op: ModelOp) -> u64 {
        self.counts[op as usize]
    }

    /// Every memory-model call.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Times each sampled operation alone on `model`, replaying its pfns in
    /// the path's order (cache-warm, as on the path), and returns the ns
    /// and TSC cycles one call costs, per operation (`None` for an
    /// operation the path never made).
    pub fn replay_ns<M: MemoryModel>(&self, model: &M, trials: usize) -> [Option<Measurement>; 6] {
        std::array::from_fn(|i| {
            let pfns: Vec<Pfn> = self.samples[i].iter().map(|&p| Pfn::new(p)).collect();
            if pfns.is_empty() {
                return None;
            }
            let op = ModelOp::ALL[i];
            // The unchecked and reverse lookups were made on valid pfns;
            // one that is no longer valid is left out.
            let pfns: Vec<Pfn> = match op {
                ModelOp::PageToPfn | ModelOp::PfnToPagePtr => {
                    pfns.into_iter().filter(|&p| model.pfn_valid(p)).collect()
                }
                _ => pfns,
            };
            let pages: Vec<&M::Page> = match op {
                ModelOp::PageToPfn => pfns.iter().filter_map(|&p| model.pfn_to_page(p)).collect(),
                _ => Vec::new(),
            };
            if pfns.is_empty() {
                return None;
            }
            Some(measure(trials, || {
                let reps = 16;
                let mut acc = 0u64;
                for _ in 0..reps {
                    acc ^= replay(model, op, &pfns, &pages);
                }
                std::hint::black_box(acc);
                reps * pfns.len() as u64
            }))
        })
    }

    /// ns per path iteration spent in memory-model calls, estimated as the
    /// calls per iteration times each call's replayed cost.
    pub fn model_ns_per(&self, iterations: u64, costs: &[Option<Measurement>; 6]) -> (f64, f64) {
        let it = iterations.max(1) as f64;
        self.counts
            .iter()
            .zip(costs)
            .filter_map(|(&n, c)| {
                c.as_ref().map(|m| {
                    (
                        n as f64 / it * m.ns_per_op.median,
                        n as f64 / it * m.cycles_per_op.median,
                    )
                })
            })
            .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y))
    }
}

/// One pass of `op` over `pfns` (or the pages they name); for the
/// unchecked lookup every pfn is valid on `model`.
#[inline(never)]
fn replay<M: MemoryModel>(model: &M, op: ModelOp, pfns: &[Pfn], pages: &[&M::Page]) -> u64 {
    let mut acc = 0u64;
    match op {
        ModelOp::PfnValid => {
            for &p in pfns {
                acc += u64::from(model.pfn_valid(p));
            }
        }
        ModelOp::PfnToPage => {
            for &p in pfns {
                // The descriptor's first word (`page->flags`, or the
                // memdesc word at 8 bytes), whatever the page's size.
                acc ^= model
                    .pfn_to_page(p)
                    .map_or(0, |pg| u64::from(pg.is_present()));
            }
        }
        ModelOp::PfnToPagePtr => {
            for &p in pfns {
                // SAFETY: `replay_ns` kept only pfns valid on `model`, which
                // stays borrowed shared, so no hotplug intervenes.
                acc ^= unsafe { model.pfn_to_page_ptr(p) } as u64;
            }
        }
        ModelOp::PageToPfn => {
            for &page in pages {
                acc ^= model.page_to_pfn(page).get();
            }
        }
        ModelOp::GetPageblock => {
            for &p in pfns {
                acc += model.get_pfnblock_migratetype(p) as u64;
            }
        }
        ModelOp::SetPageblock => {
            for &p in pfns {
                let mt = model.get_pfnblock_migratetype(p);
                model.set_pfnblock_migratetype(p, mt);
                acc += mt as u64;
            }
        }
    }
    acc
}

// SAFETY: every method answers from `inner`, so `inner`'s four promises
// are this model's: the same validity, the same descriptor pointers (with
// their provenance), `pfn_valid` from `inner`'s state, the same geometry.
// Counting touches only `tally`.
unsafe impl<M: MemoryModel> MemoryModel for Counted<M> {
    type Page = M::Page;

    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn geometry(&self) -> &Geometry {
        self.inner.geometry()
    }

    fn pfn_valid(&self, pfn: Pfn) -> bool {
        self.count(ModelOp::PfnValid, pfn.get());
        let valid = self.inner.pfn_valid(pfn);
        if !valid {
            self.tally.holes.fetch_add(1, Relaxed);
        }
        valid
    }

    unsafe fn pfn_to_page_ptr(&self, pfn: Pfn) -> *const M::Page {
        self.count(ModelOp::PfnToPagePtr, pfn.get());
        // SAFETY: the caller's promise (pfn_valid on this model, which is
        // inner's answer) is inner's precondition.
        unsafe { self.inner.pfn_to_page_ptr(pfn) }
    }

    fn pfn_to_page(&self, pfn: Pfn) -> Option<&M::Page> {
        self.count(ModelOp::PfnToPage, pfn.get());
        self.inner.pfn_to_page(pfn)
    }

    fn pfn_to_page_ptr_checked(&self, pfn: Pfn) -> Option<*const M::Page> {
        self.count(ModelOp::PfnToPage, pfn.get());
        self.inner.pfn_to_page_ptr_checked(pfn)
    }

    fn page_to_pfn(&self, page: &M::Page) -> Pfn {
        let pfn = self.inner.page_to_pfn(page);
        self.count(ModelOp::PageToPfn, pfn.get());
        pfn
    }

    fn pfn_to_online_page(&self, pfn: Pfn) -> Option<&M::Page> {
        self.inner.pfn_to_online_page(pfn)
    }

    fn memmap_bytes(&self) -> MemmapBytes {
        self.inner.memmap_bytes()
    }

    fn get_pfnblock_migratetype(&self, pfn: Pfn) -> Migratetype {
        self.count(ModelOp::GetPageblock, pfn.get());
        self.inner.get_pfnblock_migratetype(pfn)
    }

    fn set_pfnblock_migratetype(&self, pfn: Pfn, mt: Migratetype) {
        self.count(ModelOp::SetPageblock, pfn.get());
        self.inner.set_pfnblock_migratetype(pfn, mt)
    }

    fn hot_add(&mut self, start: Pfn, nr_pages: u64) -> Result<(), HotplugError> {
        self.inner.hot_add(start, nr_pages)
    }

    fn hot_remove(&mut self, start: Pfn, nr_pages: u64) -> Result<(), HotplugError> {
        self.inner.hot_remove(start, nr_pages)
    }

    fn add_device(&mut self, start: Pfn, nr_pages: u64, node: NodeId) -> Result<(), HotplugError> {
        self.inner.add_device(start, nr_pages, node)
    }

    fn remove_device(&mut self, start: Pfn, nr_pages: u64) -> Result<(), HotplugError> {
        self.inner.remove_device(start, nr_pages)
    }

    fn set_online(&mut self, start: Pfn, nr_pages: u64, online: bool) -> Result<(), HotplugError> {
        self.inner.set_online(start, nr_pages, online)
    }
}
