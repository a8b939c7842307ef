//! The measured kernels, shared by the `pfnlab` command and the criterion
//! benches so both time the same code: model lookups over precomputed pfn
//! sets, and allocator workloads over the library's own paths.
//!
//! Every kernel is `#[inline(never)]`, takes its inputs by reference and
//! returns a value derived from all of its work, which the caller passes
//! through `black_box`, so no lookup can be optimised away. Elements are not
//! passed through `black_box` one by one: that is a compiler barrier which
//! would force the model's fields to be reloaded on every iteration, a cost
//! the kernel's loops do not pay.

use std::hint::black_box;

use buddy::{Allocator, BuddyModel, Gfp, PageChain, PerCpu, Variant};
use sparsemem::reference::{Reference, Semantics};
use sparsemem::{BuddyPage, Layout, NodeId, Order, Pfn, UserFlag};

use crate::threads::{Placement, on_threads};

mod llfree;
pub use llfree::{llfree_bursts, llfree_bursts_threads, llfree_pairs};

/// A small, fast, seeded generator (xorshift64).
#[derive(Clone, Debug)]
pub struct XorShift(pub u64);

impl XorShift {
    /// The next value.
    #[inline(always)]
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// `n` pseudo-random pfns that are valid in every model (pages of RAM or
/// hotplug ranges), weighted by range size.
pub fn valid_pfns(layout: &Layout, n: usize, seed: u64) -> Vec<Pfn> {
    let ranges: Vec<(u64, u64)> = layout
        .memory_ranges()
        .map(|(_, a, b)| (a.get(), b.get()))
        .collect();
    let total: u64 = ranges.iter().map(|(a, b)| b - a).sum();
    let mut rng = XorShift(seed | 1);
    (0..n)
        .map(|_| {
            let mut at = rng.next_u64() % total;
            for &(a, b) in &ranges {
                if at < b - a {
                    return Pfn::new(a + at);
                }
                at -= b - a;
            }
            unreachable!("at < total")
        })
        .collect()
}

/// `n` pseudo-random pfns that no section-based model considers valid:
/// inside the span where the layout has holes, else just past its end.
pub fn hole_pfns(layout: &Layout, n: usize, seed: u64) -> Vec<Pfn> {
    // Whole sections: a superset of every model's valid pfns.
    let reference = Reference::new(layout, Semantics::Section);
    let (lo, hi) = layout.memory_span();
    let g = layout.geometry();
    let span = (hi.get() - lo.get()).max(1);
    let beyond = hi.get().next_multiple_of(g.pages_per_section()) + g.pages_per_section();
    let mut rng = XorShift(seed | 1);
    (0..n)
        .map(|_| {
            for _ in 0..64 {
                let pfn = Pfn::new(lo.get() + rng.next_u64() % span);
                if !reference.pfn_valid(pfn) {
                    return pfn;
                }
            }
            Pfn::new((beyond + rng.next_u64() % (1 << 20)).min(g.max_pfn().get() - 1))
        })
        .collect()
}

/// `pfn_valid` on every pfn; returns how many were valid.
#[inline(never)]
pub fn count_valid<M: BuddyModel>(model: &M, pfns: &[Pfn]) -> u64 {
    let mut valid = 0;
    for &pfn in pfns {
        valid += u64::from(model.pfn_valid(pfn));
    }
    valid
}

/// `pfn_to_page` (validated) and a read of the flags word, the
/// allocator's pattern; returns a fold of the flags.
#[inline(never)]
pub fn read_flags<M: BuddyModel>(model: &M, pfns: &[Pfn]) -> u64 {
    let mut acc = 0;
    for &pfn in pfns {
        if let Some(page) = model.pfn_to_page(pfn) {
            acc ^= page.flags();
        }
    }
    acc
}

/// Pfns that are all valid in one model, checked once, so the flags can be
/// read without `pfn_valid` (the baseline the probe is held against).
pub struct CheckedPfns<'a, M> {
    model: &'a M,
    pfns: &'a [Pfn],
}

impl<'a, M: BuddyModel> CheckedPfns<'a, M> {
    /// `Some` when every pfn is valid in `model`.
    pub fn new(model: &'a M, pfns: &'a [Pfn]) -> Option<Self> {
        pfns.iter()
            .all(|&p| model.pfn_valid(p))
            .then_some(CheckedPfns { model, pfns })
    }
}

/// Reads the flags word of checked pfns with `pfn_to_page_unchecked`.
#[inline(never)]
pub fn read_flags_unchecked<M: BuddyModel>(checked: &CheckedPfns<'_, M>) -> u64 {
    let mut acc = 0;
    for &pfn in checked.pfns {
        // SAFETY: `CheckedPfns::new` verified pfn_valid for every pfn on
        // this model, which it borrows shared, so no hotplug intervened.
        acc ^= unsafe { checked.model.pfn_to_page_unchecked(pfn) }.flags();
    }
    acc
}

/// `pfn_valid` on `n` consecutive pfns from `start`.
#[inline(never)]
pub fn count_valid_sequential<M: BuddyModel>(model: &M, start: Pfn, n: u64) -> u64 {
    let mut valid = 0;
    for pfn in start.get()..start.get() + n {
        valid += u64::from(model.pfn_valid(black_box(Pfn::new(pfn))));
    }
    valid
}

/// `n` order-0 alloc+free pairs on the zone path. On an allocator whose
/// memory is all in `MAX_PAGE_ORDER` blocks, each pair splits a block all
/// the way down and merges it all the way back (ten hole checks per free
/// with the check on).
#[inline(never)]
pub fn zone_pairs<M: BuddyModel, V: Variant>(alloc: &Allocator<M, V>, node: NodeId, n: u64) -> u64 {
    zone_pairs_gfp(alloc, node, n, Gfp::HIGHUSER_MOVABLE)
}

/// [`zone_pairs`] with the request's GFP mask.
#[inline(never)]
pub fn zone_pairs_gfp<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    node: NodeId,
    n: u64,
    gfp: Gfp,
) -> u64 {
    let mut acc = 0;
    for _ in 0..n {
        let pfn = alloc
            .alloc_pages(Order::ZERO, gfp, node, None)
            .expect("memory");
        acc ^= pfn.get();
        alloc.free_pages(pfn, Order::ZERO).expect("free");
    }
    acc
}

/// `n` order-0 alloc+free pairs through the per-CPU list (no split or
/// merge once the list is warm), asking for `GFP_HIGHUSER_MOVABLE` as a
/// caller writes it: a constant at the call site, which the compiler
/// folds into the inlined path as it folds a peer's `alloc(1)`.
#[inline(never)]
pub fn pcp_pairs<M: BuddyModel, V: Variant>(cpu: &mut PerCpu<'_, M, V>, n: u64) -> u64 {
    pcp_pairs_gfp(cpu, n, Gfp::HIGHUSER_MOVABLE)
}

/// [`pcp_pairs`] with the request's GFP mask (a value the path works out
/// at run time when the caller's mask is not a constant).
#[inline(always)]
pub fn pcp_pairs_gfp<M: BuddyModel, V: Variant>(
    cpu: &mut PerCpu<'_, M, V>,
    n: u64,
    gfp: Gfp,
) -> u64 {
    let mut acc = 0;
    for _ in 0..n {
        let pfn = cpu.alloc(gfp).expect("memory");
        acc ^= pfn.get();
        cpu.free(pfn).expect("free");
    }
    acc
}

/// `rounds` × (`burst` single allocations, then `burst` frees) through the
/// per-CPU lists; `held` is scratch space.
#[inline(never)]
pub fn bursts<M: BuddyModel, V: Variant>(
    cpu: &mut PerCpu<'_, M, V>,
    rounds: u64,
    burst: usize,
    held: &mut Vec<Pfn>,
) -> u64 {
    let mut acc = 0;
    for _ in 0..rounds {
        for _ in 0..burst {
            held.push(cpu.alloc(Gfp::HIGHUSER_MOVABLE).expect("memory"));
        }
        for pfn in held.drain(..) {
            acc ^= pfn.get();
            cpu.free(pfn).expect("free");
        }
    }
    acc
}

/// `rounds` × (one bulk list allocation of `size`, threaded through the
/// pages' `lru` links, then freeing it by walking the list), as the 2021
/// series' test module did.
#[inline(never)]
pub fn bulk_lists<'a, M: BuddyModel, V: Variant>(
    cpu: &mut PerCpu<'a, M, V>,
    rounds: u64,
    size: usize,
    list: &mut PageChain<'a, M, V>,
) -> u64 {
    let mut acc = 0;
    for _ in 0..rounds {
        let got = cpu
            .alloc_bulk_list(size, Gfp::HIGHUSER_MOVABLE, list)
            .expect("bulk size");
        acc += got as u64;
        cpu.free_bulk_list(list).expect("free");
    }
    acc
}

/// `rounds` × (one bulk array allocation of `slots.len()`, then freeing).
#[inline(never)]
pub fn bulk_arrays<M: BuddyModel, V: Variant>(
    cpu: &mut PerCpu<'_, M, V>,
    rounds: u64,
    slots: &mut [Option<Pfn>],
) -> u64 {
    let mut acc = 0;
    for _ in 0..rounds {
        acc += cpu
            .alloc_bulk_array(Gfp::HIGHUSER_MOVABLE, slots)
            .expect("bulk size") as u64;
        for slot in slots.iter_mut() {
            if let Some(pfn) = slot.take() {
                cpu.free(pfn).expect("free");
            }
        }
    }
    acc
}

/// Pages `page_test` allocates before freeing them (AIM9's batch).
pub const PAGE_TEST_BATCH: usize = 512;

/// AIM9 `page_test`-like rounds: [`PAGE_TEST_BATCH`] order-0 allocations on
/// the zone path, then as many frees; returns the pages handled.
#[inline(never)]
pub fn page_test_rounds<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    node: NodeId,
    rounds: u64,
    held: &mut Vec<Pfn>,
) -> u64 {
    page_test_rounds_with(alloc, node, rounds, held, Gfp::HIGHUSER_MOVABLE, false)
}

/// [`page_test_rounds`] with the request's GFP mask and, with `zap`, the
/// per-page memory-model touchpoints of 2.6.20's unmap path before each
/// free: `vm_normal_page`'s `pfn_valid` and `pfn_to_page` (a read of the
/// descriptor's flags) for the pfn in the PTE being zapped.
#[inline(never)]
pub fn page_test_rounds_with<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    node: NodeId,
    rounds: u64,
    held: &mut Vec<Pfn>,
    gfp: Gfp,
    zap: bool,
) -> u64 {
    let model = alloc.model();
    let mut acc = 0u64;
    for _ in 0..rounds {
        for _ in 0..PAGE_TEST_BATCH {
            held.push(
                alloc
                    .alloc_pages(Order::ZERO, gfp, node, None)
                    .expect("memory"),
            );
        }
        for pfn in held.drain(..) {
            if zap {
                // vm_normal_page: `if (!pfn_valid(pfn)) ...; return pfn_to_page(pfn)`.
                acc ^= model.pfn_to_page(pfn).map_or(0, |p| p.flags());
            }
            alloc.free_pages(pfn, Order::ZERO).expect("free");
        }
    }
    std::hint::black_box(acc);
    rounds * PAGE_TEST_BATCH as u64
}

/// `FREE_PTE_NR`: the pages an SMP 2.6.9 `mmu_gather` collects while
/// `munmap` zaps PTEs before `tlb_finish_mmu` frees them; a UP kernel's
/// gather is in fast mode and frees each page as it is unmapped.
pub const FREE_PTE_NR: usize = 506;

/// One iteration of the flags experiment, the seed's program as the kernel
/// served it: `nr_pages` anonymous faults, then one `munmap`.
///
/// - Each fault (`do_anonymous_page`) allocates an order-0
///   `GFP_HIGHUSER_MOVABLE | __GFP_ZERO` page (`clear_page` on its real
///   frame when the allocator has frames), the program's store lands in
///   it, and `mark_page_accessed` sets `PG_referenced`.
/// - `munmap` clears `PG_referenced` as it zaps each PTE
///   (`page_remove_rmap`'s young-bit transfer) and releases the pages
///   through the gather: batches of [`FREE_PTE_NR`] on SMP, one by one on UP.
///
/// The `PG_referenced` operations go through [`Variant::set_bit`]: atomic
/// in every SMP variant (the 2004 patch left them alone), unlocked on UP.
#[inline(never)]
pub fn flags_iteration<M: BuddyModel, V: Variant>(
    cpu: &mut PerCpu<'_, M, V>,
    nr_pages: usize,
    held: &mut Vec<Pfn>,
) -> u64 {
    let alloc = cpu.allocator();
    let model = alloc.model();
    for _ in 0..nr_pages {
        let pfn = cpu
            .alloc(Gfp::HIGHUSER_MOVABLE | Gfp::ZERO)
            .expect("memory");
        if let Some(frame) = alloc.page_address(pfn) {
            // SAFETY: the frame is this iteration's page, allocated just now
            // and not freed until below; only this thread writes it.
            unsafe { std::ptr::write_volatile(frame.as_ptr(), 1) };
        }
        if let Some(page) = model.pfn_to_page(pfn) {
            // SAFETY: the page is held by this thread, the only writer of
            // its flags outside the allocator (the UP contract).
            unsafe { V::set_bit(page, UserFlag::Referenced) };
        }
        held.push(pfn);
    }
    let gather = if V::SMP { FREE_PTE_NR } else { 1 };
    let n = held.len() as u64;
    for batch in held.chunks(gather) {
        for &pfn in batch {
            if let Some(page) = model.pfn_to_page(pfn) {
                // SAFETY: as above.
                unsafe { V::clear_bit(page, UserFlag::Referenced) };
            }
        }
        for &pfn in batch {
            cpu.free(pfn).expect("free");
        }
    }
    held.clear();
    n
}

/// `rounds` marking set + clear pairs on `page`'s flags word with the
/// variant's operations (`PG_referenced`, so no allocator state changes):
/// the cost of the operation the flags experiment's variants differ in.
#[inline(never)]
pub fn mark_pairs<V: Variant, P: BuddyPage>(page: &P, rounds: u64) {
    for _ in 0..rounds {
        // SAFETY: the caller holds `page` (allocated, not yet freed) and no
        // other thread writes its flags while this runs.
        unsafe {
            V::set(std::hint::black_box(page), sparsemem::PageFlag::Referenced);
            V::clear(page, sparsemem::PageFlag::Referenced);
        }
    }
}

/// A frame allocator as the peer workloads see it: one order-0 frame out,
/// one back. Implemented for the floor buddy and, with the `peers` feature,
/// for the peer crates (`crate::experiments::peers`).
pub trait Frames {
    /// One frame, or `None` when none is free.
    fn alloc_frame(&mut self) -> Option<u64>;
    /// Gives back a frame.
    ///
    /// # Safety
    /// `frame` was returned by `alloc_frame` of this allocator and not
    /// given back since (some peers cannot check it, and trust it).
    unsafe fn free_frame(&mut self, frame: u64);
}

/// A frame allocator several threads share: one frame out, one back,
/// through `&self` (a lock-free allocator, or any [`Frames`] behind a
/// mutex).
pub trait SharedFrames: Sync {
    /// One frame, or `None` when none is free.
    fn alloc_frame(&self) -> Option<u64>;
    /// Gives back a frame.
    ///
    /// # Safety
    /// As for [`Frames::free_frame`].
    unsafe fn free_frame(&self, frame: u64);
}

impl<F: Frames + Send> SharedFrames for std::sync::Mutex<F> {
    #[inline]
    fn alloc_frame(&self) -> Option<u64> {
        self.lock().ok()?.alloc_frame()
    }
    #[inline]
    unsafe fn free_frame(&self, frame: u64) {
        if let Ok(mut f) = self.lock() {
            // SAFETY: the caller's promise, passed on.
            unsafe { f.free_frame(frame) };
        }
    }
}

/// `n` order-0 alloc+free pairs on a peer (what [`pcp_pairs`] and
/// [`zone_pairs`] do on pfnlab's allocator).
#[inline(never)]
pub fn frame_pairs<F: Frames>(frames: &mut F, n: u64) -> u64 {
    let mut acc = 0;
    for _ in 0..n {
        let f = frames.alloc_frame().expect("a free frame");
        acc ^= f;
        // SAFETY: `f` was just allocated from `frames` and is given back once.
        unsafe { frames.free_frame(std::hint::black_box(f)) };
    }
    acc
}

/// `rounds` × (`burst` allocations, then `burst` frees) on a peer (what
/// [`bursts`] does on pfnlab's allocator); `held` is scratch space.
#[inline(never)]
pub fn frame_bursts<F: Frames>(
    frames: &mut F,
    rounds: u64,
    burst: usize,
    held: &mut Vec<u64>,
) -> u64 {
    let mut acc = 0;
    for _ in 0..rounds {
        for _ in 0..burst {
            held.push(frames.alloc_frame().expect("a free frame"));
        }
        for f in held.drain(..) {
            acc ^= f;
            // SAFETY: each held frame was allocated above and is freed once.
            unsafe { frames.free_frame(f) };
        }
    }
    acc
}

/// A shared peer seen through one thread's reference is a [`Frames`].
impl<F: SharedFrames> Frames for &F {
    #[inline]
    fn alloc_frame(&mut self) -> Option<u64> {
        SharedFrames::alloc_frame(*self)
    }
    #[inline]
    unsafe fn free_frame(&mut self, frame: u64) {
        // SAFETY: the caller's promise, passed on.
        unsafe { SharedFrames::free_frame(*self, frame) }
    }
}

/// `threads` threads each doing [`frame_bursts`] on one shared peer;
/// returns the pages allocated.
pub fn shared_bursts<F: SharedFrames>(
    frames: &F,
    threads: usize,
    rounds: u64,
    burst: usize,
) -> u64 {
    on_threads(
        threads,
        Placement::Free,
        |_| Vec::with_capacity(burst),
        |_, mut held| black_box(frame_bursts(&mut &*frames, rounds, burst, &mut held)),
    );
    threads as u64 * rounds * burst as u64
}

/// `threads` threads each doing [`bursts`] on its own per-CPU handle of one
/// pfnlab allocator; returns the pages allocated.
pub fn pcp_bursts_threads<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    node: NodeId,
    threads: usize,
    rounds: u64,
    burst: usize,
) -> u64 {
    on_threads(
        threads,
        Placement::Free,
        |_| {
            let cpu = alloc.cpu_on(node).expect("a node with memory");
            (cpu, Vec::with_capacity(burst))
        },
        |_, (mut cpu, mut held)| black_box(bursts(&mut cpu, rounds, burst, &mut held)),
    );
    threads as u64 * rounds * burst as u64
}

/// `n` `write()`s of one byte to a pipe, from mapped memory or (with
/// `faulting`) from a `PROT_NONE` page, so that the kernel faults in
/// `copy_from_user` and fixes the fault up through its exception table;
/// returns `n`.
pub fn kernel_fixup_writes(
    probe: &mut vmemmap::kernel_fixup::KernelFixupProbe,
    faulting: bool,
    n: u64,
) -> std::io::Result<u64> {
    for _ in 0..n {
        if faulting {
            probe.write_faulting()?;
        } else {
            probe.write_mapped()?;
        }
    }
    Ok(n)
}

/// Cache lines of a 4 KiB page.
const PAGE_LINES: u64 = 64;

/// The lock experiment's job, one process's life as a kernel build's
/// page allocator sees it: `pages` order-0 `GFP_HIGHUSER | __GFP_ZERO`
/// faults through `cpu` (each `clear_page`d on its real frame), after each
/// the process writes a number of the page's cache lines drawn uniformly
/// from 0 to 64 (mean 32) by `rng`; one order-1 `GFP_KERNEL` request on the
/// zone path (an 8 KiB kernel stack, `fork`), its latency in TSC cycles
/// pushed to `small`; then everything freed, the pages through `cpu`, the
/// stack on the zone path. Returns the pages allocated.
pub fn lock_job<M: BuddyModel, V: Variant>(
    cpu: &mut PerCpu<'_, M, V>,
    pages: usize,
    rng: &mut u64,
    held: &mut Vec<Pfn>,
    small: &mut Vec<u64>,
) -> u64 {
    let alloc = cpu.allocator();
    for _ in 0..pages {
        let pfn = cpu
            .alloc(Gfp::HIGHUSER | Gfp::ZERO)
            .expect("the job fits in memory");
        if let Some(frame) = alloc.page_address(pfn) {
            write_lines(frame, xorshift(rng) % (PAGE_LINES + 1));
        }
        held.push(pfn);
    }
    let t0 = crate::timing::tsc_now();
    let stack = cpu.alloc_pages(Order::new(1), Gfp::KERNEL);
    small.push(crate::timing::tsc_now() - t0);
    for pfn in held.drain(..) {
        cpu.free(pfn).expect("free");
    }
    if let Ok(stack) = stack {
        cpu.free_pages(stack, Order::new(1)).expect("free");
    }
    pages as u64
}

/// The process's writes to a page it just faulted: `lines` of its first
/// cache lines (at most the page's 64).
pub fn write_lines(frame: std::ptr::NonNull<u8>, lines: u64) {
    let bytes = (lines.min(PAGE_LINES) * 64) as usize;
    // SAFETY: `frame` is the start of a 4 KiB frame the caller allocated
    // and has not freed, written by this thread only; `bytes` stays inside
    // it.
    unsafe { std::ptr::write_bytes(frame.as_ptr(), 0x5a, bytes) };
}

/// xorshift64: the lock experiment's stated, seeded work distribution.
#[inline(always)]
pub fn xorshift(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    x
}

/// The valid pfns of `range` by walk `W`, counted (`bench walk`). Each
/// pfn is handed to `black_box`, as a walker hands it to its body: a bare
/// count of FLATMEM's clamped walk is otherwise computed from the range's
/// ends without walking it.
#[inline(never)]
pub fn walk_valid<M: BuddyModel, W: sparsemem::walk::WalkStrategy>(
    model: &M,
    range: sparsemem::PfnRange,
) -> u64 {
    sparsemem::walk::walk_range::<M, W>(model, range).fold(0, |n, pfn| {
        std::hint::black_box(pfn);
        n + 1
    })
}

/// `reserve_bootmem_region`'s loop over `range` by walk `W`: each valid
/// pfn's descriptor is reached and its flags read (the kernel sets
/// `PG_reserved` there; a model borrowed shared reads instead).
#[inline(never)]
pub fn reserve_bootmem_walk<M: BuddyModel, W: sparsemem::walk::WalkStrategy>(
    model: &M,
    range: sparsemem::PfnRange,
) -> u64 {
    sparsemem::walk::walk_range::<M, W>(model, range)
        .map(|pfn| {
            model
                .pfn_to_page(pfn)
                .map_or(0, |p| black_box(p.flags()) & 1)
        })
        .sum()
}

/// `nr_hugepages` raised by `n` folios (`bench hvo`): the pool takes them
/// from the buddy and, with HVO, optimises them. Returns the folios got.
#[inline(never)]
pub fn hugetlb_grow<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    pool: &mut buddy::HugetlbPool,
    n: u64,
) -> Result<u64, buddy::HugetlbError> {
    pool.grow(alloc, n)
}

/// `nr_hugepages` lowered by `n` folios: restored (with HVO) and freed.
/// Returns the folios freed.
#[inline(never)]
pub fn hugetlb_shrink<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    pool: &mut buddy::HugetlbPool,
    n: u64,
) -> Result<u64, buddy::HugetlbError> {
    pool.shrink(alloc, n)
}

/// `compound_head` of each of `tails` (descriptors gathered before the
/// timing, so no model lookup is timed) with `head_of`, an encoding's
/// reader; returns a sum of the heads found.
#[inline(never)]
pub fn compound_heads(
    tails: &[&sparsemem::Page],
    head_of: impl Fn(&sparsemem::Page) -> *const sparsemem::Page,
) -> u64 {
    tails.iter().fold(0u64, |sum, tail| {
        sum.wrapping_add(head_of(tail).addr() as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmemmap::VmemmapTable;

    #[test]
    fn pfn_sets_are_what_they_claim() {
        let layout = Layout::preset("zone-device").unwrap();
        let model = VmemmapTable::new(&layout).unwrap();
        let valid = valid_pfns(&layout, 10_000, 7);
        assert_eq!(count_valid(&model, &valid), 10_000);
        let holes = hole_pfns(&layout, 10_000, 7);
        assert_eq!(count_valid(&model, &holes), 0);
        assert_eq!(count_valid_sequential(&model, Pfn::new(0), 100), 100);
    }
}

/// The allocations of [`timed_allocs`], in counter ticks: those that grew
/// the zone, and a sample of the rest.
#[derive(Clone, Debug, Default)]
pub struct TimedAllocs {
    /// Each allocation during which deferred pages were initialised.
    pub grew: Vec<u64>,
    /// About [`TimedAllocs::PLAIN_SAMPLES`] of the others, evenly spaced.
    pub plain: Vec<u64>,
}

impl TimedAllocs {
    /// How many of the allocations that did not grow are kept.
    pub const PLAIN_SAMPLES: u64 = 4096;
}

/// Order-0 allocations through `cpu`, each timed on its own and never
/// freed, until `pending` (the pages deferred init has yet to write)
/// reaches 0 or memory runs out (`bench memmap-lifecycle`: the
/// allocation that misses and calls `deferred_grow_zone`).
#[inline(never)]
pub fn timed_allocs<M: BuddyModel, V: Variant>(
    cpu: &mut PerCpu<'_, M, V>,
    gfp: Gfp,
    pending: impl Fn() -> u64,
) -> TimedAllocs {
    let mut out = TimedAllocs::default();
    let mut left = pending();
    let stride = (left / TimedAllocs::PLAIN_SAMPLES).max(1);
    let mut n = 0u64;
    while left > 0 {
        let c0 = crate::timing::tsc_start();
        let got = black_box(cpu.alloc(gfp));
        let c1 = crate::timing::tsc_stop();
        if got.is_err() {
            break;
        }
        let now = pending();
        if now < left {
            out.grew.push(c1 - c0);
        } else if n.is_multiple_of(stride) {
            out.plain.push(c1 - c0);
        }
        n += 1;
        left = now;
    }
    out
}
