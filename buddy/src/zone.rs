//! A zone's free area and the buddy algorithm proper.
//!
//! The three kernel routines, on pages (never a `pfn_to_page` per hop):
//! - `__free_one_page`: while below `MAX_PAGE_ORDER`, find the buddy at
//!   `pfn ^ (1 << order)` (optionally after `pfn_valid`), stop unless it is
//!   a free block of the same order in the same zone, else unlink it and
//!   merge; put the result on `free_area[order]`.
//! - `__rmqueue_smallest`: take the first block of the smallest order that
//!   has one;
//! - `expand`: split it, putting the upper halves back on lower orders.
//!
//! Everything here runs under the zone lock ([`crate::lock::SpinLock`]).
//!
//! This module and `list` are the only places that write a `struct page`:
//! the rest of the allocator moves [`OwnedBlock`] tokens. A [`Zone`] is
//! built and given its memory here too (`memmap_init_zone` +
//! `__free_pages_core`), with every precondition checked first, so the
//! construction and hotplug paths cannot hand the lists a page twice.

use std::marker::PhantomData;

use sparsemem::{
    MIGRATE_TYPES, MemoryModel, Migratetype, NR_PAGE_ORDERS, NodeId, Order, Page, PageFlag, Pfn,
};

use crate::era::{Era, Path};
use crate::gfp::{AllocFlags, Wmark};
use crate::watermark::{MIN_PERCPU_PAGELIST_HIGH_FRACTION, Watermarks, zone_highsize};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use crate::error::AllocError;
use crate::list::{OwnedBlock, PageList, page_offset};
use crate::lock::SpinLock;
use crate::variant::Variant;

/// Zone types, lowest first (`enum zone_type`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub enum ZoneType {
    /// Below 16 MiB.
    Dma,
    /// Below 4 GiB.
    Dma32,
    /// Everything else that booted.
    Normal,
    /// Hot-added memory, onlined movable.
    Movable,
}

impl ZoneType {
    /// Every zone type, lowest first.
    pub const ALL: [ZoneType; 4] = [
        ZoneType::Dma,
        ZoneType::Dma32,
        ZoneType::Normal,
        ZoneType::Movable,
    ];

    /// The kernel's name.
    pub fn name(self) -> &'static str {
        match self {
            ZoneType::Dma => "DMA",
            ZoneType::Dma32 => "DMA32",
            ZoneType::Normal => "Normal",
            ZoneType::Movable => "Movable",
        }
    }
}

/// Zone statistics. Plain counters: the buddy-path ones live in the free
/// area and change only under the zone lock; the per-CPU path counts in its
/// handle and folds in when it next takes the lock (as the kernel's per-CPU
/// vm events are folded), so no counter costs an atomic operation.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct ZoneStats {
    /// Blocks allocated, per order.
    pub allocs: [u64; NR_PAGE_ORDERS],
    /// Blocks freed, per order.
    pub frees: [u64; NR_PAGE_ORDERS],
    /// Buddy merges.
    pub merges: u64,
    /// Block splits in `expand`.
    pub splits: u64,
    /// `rmqueue_bulk` calls (pcp refills).
    pub pcp_refills: u64,
    /// `free_pcppages_bulk` calls (pcp drains).
    pub pcp_drains: u64,
    /// Blocks moved from the zone to per-CPU lists by refills (one
    /// `mm_page_alloc_zone_locked` event with `percpu_refill=1` each in
    /// the kernel).
    pub pcp_refill_blocks: u64,
    /// Blocks moved back by drains (one `mm_page_pcpu_drain` event each).
    pub pcp_drain_blocks: u64,
    /// `pfn_valid` calls made by the hole check.
    pub hole_checks: u64,
    /// Allocations served from another migratetype's lists
    /// (`__rmqueue_fallback`).
    pub fallbacks: u64,
    /// Pageblocks claimed for another migratetype (`move_freepages_block`).
    pub steals: u64,
    /// Hole checks that said "invalid".
    pub hole_hits: u64,
    /// Freed blocks put at the tail of their list because their buddy one
    /// order up is free (`buddy_merge_likely`).
    pub merge_likely_tails: u64,
}

impl std::ops::AddAssign for ZoneStats {
    fn add_assign(&mut self, other: ZoneStats) {
        for o in 0..NR_PAGE_ORDERS {
            self.allocs[o] += other.allocs[o];
            self.frees[o] += other.frees[o];
        }
        self.merges += other.merges;
        self.splits += other.splits;
        self.pcp_refills += other.pcp_refills;
        self.pcp_drains += other.pcp_drains;
        self.pcp_refill_blocks += other.pcp_refill_blocks;
        self.pcp_drain_blocks += other.pcp_drain_blocks;
        self.hole_checks += other.hole_checks;
        self.hole_hits += other.hole_hits;
        self.fallbacks += other.fallbacks;
        self.steals += other.steals;
        self.merge_likely_tails += other.merge_likely_tails;
    }
}

/// A zone's id: its index in [`crate::Allocator::zones`], stored in each of
/// its pages (`page_zonenum` with the node folded in: pfnlab numbers zones
/// allocator-wide, at most [`crate::MAX_ZONES`]).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct ZoneId(u8);

impl ZoneId {
    /// Wraps a raw id; whether a zone has it is the allocator's question.
    pub const fn new(id: u8) -> ZoneId {
        ZoneId(id)
    }

    /// The raw id.
    pub const fn get(self) -> u8 {
        self.0
    }

    /// The id as an index into per-zone arrays.
    #[inline(always)]
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl std::fmt::Display for ZoneId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One zone (`struct zone`): its span, its free area behind the zone lock,
/// and its per-CPU sizing.
pub struct Zone<V> {
    /// The zone type.
    pub kind: ZoneType,
    /// Its node.
    pub node: NodeId,
    /// Its id, stored in its pages.
    pub id: ZoneId,
    pub(crate) start: Pfn,
    pub(crate) end: Pfn,
    pub(crate) managed: u64,
    pub(crate) free: SpinLock<FreeArea<V>>,
    pub(crate) batch: u32,
    pub(crate) high: u32,
    /// `pageset_high_max`: how far 6.7's tuning may raise a CPU's `high`
    /// (equal to `high` before 6.7, or with `percpu_pagelist_high_fraction`).
    pub(crate) high_max: u32,
    pub(crate) watermarks: Watermarks,
    /// `lowmem_reserve[]`: pages this zone keeps back from a request whose
    /// highest zone is the index (`setup_per_zone_lowmem_reserve`).
    pub(crate) lowmem_reserve: [u64; 4],
    /// `vm_stat[NR_FREE_PAGES]`: free pages as the watermark checks read
    /// them, without the lock. Per-CPU handles fold their changes in at
    /// `stat_threshold` (`__mod_zone_page_state`), so it lags the free
    /// lists by at most that much per handle.
    pub(crate) vm_free: AtomicI64,
    /// `stat_threshold` (`calculate_normal_threshold`).
    pub(crate) stat_threshold: i64,
    /// `ZONE_BELOW_HIGH` (6.7 on): an allocation found the zone below its
    /// high watermark; set by the allocation path, cleared by a drain
    /// that brought it back above. A hint read without a lock, so
    /// `Relaxed`, as the kernel's `test_bit`/`set_bit` on `zone->flags`.
    pub(crate) below_high: AtomicBool,
}

/// `pcp->high` before 5.14: six batches (`pageset_set_batch`,
/// mm/page_alloc.c: `high = 6 * batch`).
pub const PCP_HIGH_BATCHES: u32 = 6;

impl<V: Variant> Zone<V> {
    /// An empty zone spanning `[start, end)`, with blocks up to
    /// `max_order` (the geometry's `MAX_PAGE_ORDER`); memory comes with
    /// [`Zone::give_range`].
    pub(crate) fn new(
        kind: ZoneType,
        node: NodeId,
        id: ZoneId,
        [start, end]: [Pfn; 2],
        max_order: Order,
        path: Path,
    ) -> Zone<V> {
        Zone {
            kind,
            node,
            id,
            start,
            end,
            managed: 0,
            free: SpinLock::with_kind(
                FreeArea::new(id.get(), [start, end], max_order, path),
                path.zone_lock,
            ),
            batch: 1,
            high: PCP_HIGH_BATCHES,
            high_max: PCP_HIGH_BATCHES,
            watermarks: Watermarks::default(),
            lowmem_reserve: [0; 4],
            vm_free: AtomicI64::new(0),
            stat_threshold: 0,
            below_high: AtomicBool::new(false),
        }
    }

    /// `MAX_PAGE_ORDER` of this zone's geometry.
    pub fn max_order(&self) -> Order {
        self.free.lock().max_order()
    }

    /// First pfn of the span.
    pub fn start_pfn(&self) -> Pfn {
        self.start
    }

    /// One past the last pfn of the span.
    pub fn end_pfn(&self) -> Pfn {
        self.end
    }

    /// Whether `pfn` lies in the zone's span.
    #[inline(always)]
    pub fn spans(&self, pfn: Pfn) -> bool {
        self.start <= pfn && pfn < self.end
    }

    /// Pages given to the allocator.
    pub fn managed_pages(&self) -> u64 {
        self.managed
    }

    /// Per-CPU `batch`.
    pub fn batch(&self) -> u32 {
        self.batch
    }

    /// Per-CPU `high` as the zone sets it (`pageset_high_min` from 6.7).
    pub fn high(&self) -> u32 {
        self.high
    }

    /// `pageset_high_max`: the most 6.7's tuning raises a CPU's `high` to
    /// (the same as [`Zone::high`] in older eras).
    pub fn high_max(&self) -> u32 {
        self.high_max
    }

    /// Free pages on the zone's lists (not counting per-CPU lists).
    pub fn free_pages(&self) -> u64 {
        self.free.lock().free_pages()
    }

    /// `nr_free` per order.
    pub fn nr_free(&self) -> [u64; NR_PAGE_ORDERS] {
        self.free.lock().nr_free()
    }

    /// The zone's statistics (taken under its lock).
    pub fn stats(&self) -> ZoneStats {
        self.free.lock().stats
    }

    /// Zone-lock acquisitions so far.
    pub fn lock_acquisitions(&self) -> u64 {
        self.free.acquisitions()
    }

    /// The zone's watermarks (`min_wmark_pages` and so on).
    pub fn watermarks(&self) -> Watermarks {
        self.watermarks
    }

    /// `lowmem_reserve[]`, indexed by the highest zone type of a request.
    pub fn lowmem_reserve(&self) -> [u64; 4] {
        self.lowmem_reserve
    }

    /// `zone_page_state(zone, NR_FREE_PAGES)`: the counter the watermark
    /// checks read (never negative; it can lag the free lists by the
    /// per-CPU deltas not yet folded in).
    #[inline(always)]
    pub fn nr_free_pages_state(&self) -> u64 {
        self.vm_free.load(Ordering::Relaxed).max(0) as u64
    }

    /// Whether `ZONE_BELOW_HIGH` is set.
    #[inline(always)]
    pub fn below_high(&self) -> bool {
        self.below_high.load(Ordering::Relaxed)
    }

    /// Sets or clears `ZONE_BELOW_HIGH`.
    #[inline(always)]
    pub(crate) fn set_below_high(&self, below: bool) {
        self.below_high.store(below, Ordering::Relaxed);
    }

    /// Adds `delta` to `NR_FREE_PAGES` at once (a change made without a
    /// per-CPU handle).
    #[inline(always)]
    pub(crate) fn mod_free_pages(&self, delta: i64) {
        self.vm_free.fetch_add(delta, Ordering::Relaxed);
    }

    /// `zone_watermark_fast` / `__zone_watermark_ok` for a request of
    /// `order` whose highest zone is `highest`, against `mark` pages: the
    /// zone must keep more than `mark` (less the reserves the flags may
    /// use) plus its `lowmem_reserve` free after the allocation. The
    /// kernel then also looks for a free block of the order on the lists;
    /// pfnlab leaves that to `__rmqueue`, which answers it under the lock.
    #[inline(always)]
    pub(crate) fn watermark_ok(
        &self,
        order: Order,
        mark: u64,
        highest: ZoneType,
        flags: AllocFlags,
    ) -> bool {
        let free = self.nr_free_pages_state() as i64;
        let reserve = self.lowmem_reserve[highest as usize] as i64;
        let mark = mark as i64;
        // The order-0 fast check.
        if order == Order::ZERO && free > mark + reserve {
            return true;
        }
        let mut min = mark;
        if flags.min_reserve {
            min -= min / 2;
        }
        if flags.non_block {
            min -= min / 4;
        }
        free - ((1i64 << order.get()) - 1) > min + reserve
    }

    /// `zone_watermark_ok(z, order, mark, classzone_idx, 0)`: whether the
    /// zone keeps more than `mark` free pages above the reserve it holds
    /// for requests whose highest zone is `highest`, after an `order`
    /// block. For walks built outside the allocator
    /// ([`PerCpu::buffered_rmqueue`](crate::PerCpu::buffered_rmqueue)).
    pub fn zone_watermark_ok(&self, order: Order, mark: u64, highest: ZoneType) -> bool {
        self.watermark_ok(order, mark, highest, AllocFlags::FAST)
    }

    /// The mark `flags` test in this zone (`wmark_pages`), `None` for
    /// `ALLOC_NO_WATERMARKS`.
    #[inline(always)]
    pub(crate) fn wmark_pages(&self, flags: AllocFlags) -> Option<u64> {
        Some(match flags.wmark? {
            Wmark::Min => self.watermarks.min,
            Wmark::Low => self.watermarks.low,
        })
    }

    /// Sets `batch` (the kernel's `zone_batchsize` unless overridden),
    /// `high` and `high_max` (`zone_set_pageset_high_and_batch`): `6 ×
    /// batch` before Linux 5.14; after, `zone_highsize` of the low
    /// watermark and of an eighth of the managed pages
    /// (`MIN_PERCPU_PAGELIST_HIGH_FRACTION`), or both of the managed pages
    /// over `percpu_pagelist_high_fraction` when that is set.
    pub(crate) fn set_pcp_sizes(&mut self, options: &crate::Options, nr_split_cpus: u32) {
        let era = options.era;
        self.batch = options
            .pcp_batch
            .unwrap_or_else(|| zone_batchsize_for(self.managed, era))
            .max(1);
        (self.high, self.high_max) = if era.pcp_high_from_watermark() {
            let highsize = |total_pages| zone_highsize(total_pages, self.batch, nr_split_cpus);
            match options.percpu_pagelist_high_fraction {
                0 => (
                    highsize(self.watermarks.low),
                    highsize(self.managed / u64::from(MIN_PERCPU_PAGELIST_HIGH_FRACTION)),
                ),
                fraction => {
                    let high = highsize(self.managed / u64::from(fraction));
                    (high, high)
                }
            }
        } else {
            (PCP_HIGH_BATCHES * self.batch, PCP_HIGH_BATCHES * self.batch)
        };
    }

    /// Grows the span to cover `[start, end)` (hot-added memory).
    pub(crate) fn grow(&mut self, start: Pfn, end: Pfn) {
        self.start = self.start.min(start);
        self.end = self.end.max(end);
        let (start, end) = (self.start, self.end);
        self.free.get_mut().resize(start, end);
    }

    /// Gives `[first, end)` to the zone, as boot (`memmap_init_zone` +
    /// `memblock_free_all`) and `online_pages` (`memmap_init_range` +
    /// `online_pages_range`) do: each page gets the zone's ids and loses
    /// `PG_reserved`, then the range is freed in the largest aligned blocks,
    /// to the head of the lists at boot and to the tail when onlining
    /// (`FPI_TO_TAIL`, so freshly onlined memory is used last). Refused,
    /// with nothing changed, unless every pfn is valid, reserved (so not
    /// yet managed), not device memory and inside the span, and — without
    /// the hole check — every `MAX_PAGE_ORDER` block around it is wholly
    /// valid.
    pub(crate) fn give_range<M: MemoryModel>(
        &mut self,
        model: &M,
        [first, end]: [Pfn; 2],
        to_tail: bool,
    ) -> Result<(), AllocError> {
        check_blocks::<M, V>(model, first, end)?;
        for pfn in first.get()..end.get() {
            let pfn = Pfn::new(pfn);
            match model.pfn_to_page(pfn) {
                Some(page) if page.is_zone_device() => {
                    return Err(AllocError::DeviceMemory { pfn });
                }
                Some(page) if page.test(PageFlag::Reserved) && self.spans(pfn) => {}
                Some(_) if self.spans(pfn) => return Err(AllocError::AlreadyManaged { pfn }),
                _ => return Err(AllocError::OutsideZone { pfn }),
            }
        }
        for pfn in first.get()..end.get() {
            // SAFETY: (1) valid (checked above) and the model is borrowed;
            // (2) reserved, so on no list and in no caller's hands: this zone
            // takes ownership of the descriptor (`&mut self`).
            unsafe {
                let page = model.pfn_to_page_unchecked(Pfn::new(pfn));
                page.set_zone_node(self.id.get(), self.node.get());
                page.set_refcount(0);
                page.clear(PageFlag::Reserved);
            }
        }
        let area = self.free.get_mut();
        let max_order = area.max_order();
        for_each_aligned_block(first, end, max_order, |pfn, order| {
            // SAFETY: the pages were reserved until just now, so the block
            // is on no list and nobody else holds it; pointer from
            // pfn_to_page_ptr of a pfn checked valid above.
            let block = unsafe { OwnedBlock::new(model.pfn_to_page_ptr(pfn), pfn, order) };
            area.free_one_to(model, block, to_tail);
        });
        self.managed += end.get() - first.get();
        Ok(())
    }

    /// Takes `[start, end)` out of the zone (`offline_pages` after the
    /// isolation found it free): each `(head, order)` of `blocks` must be a
    /// free block of this zone and together they must cover the range. The
    /// pages become reserved again; the parts of straddling blocks outside
    /// the range go back on the lists. Nothing changes if a block is not
    /// free.
    pub(crate) fn take_range<M: MemoryModel>(
        &mut self,
        model: &M,
        start: Pfn,
        end: Pfn,
        blocks: &[(Pfn, Order)],
    ) -> Result<(), AllocError> {
        let area = self.free.get_mut();
        if let Some(&(pfn, _)) = blocks
            .iter()
            .find(|&&(h, o)| !area.is_free_block(model, h, o))
        {
            return Err(AllocError::NotAllocated { pfn });
        }
        let taken: Vec<OwnedBlock> = blocks
            .iter()
            .filter_map(|&(head, order)| area.take_free_block(model, head, order))
            .collect();
        for pfn in start.get()..end.get() {
            if let Some(page) = model.pfn_to_page(Pfn::new(pfn)) {
                // SAFETY: the page lies in a block just taken off the lists
                // (the blocks cover the range), so this zone owns it.
                unsafe { page.set(PageFlag::Reserved) };
            }
        }
        for block in taken {
            let (head, block_end) = (block.pfn(), block.pfn() + block.order().nr_pages());
            let max_order = area.max_order();
            for (a, b) in [(head, start.max(head)), (end.min(block_end), block_end)] {
                for_each_aligned_block(a, b, max_order, |pfn, order| {
                    // SAFETY: a piece of an owned block outside the range:
                    // valid, in this zone and on no list; the pointer comes
                    // from the owned head plus the in-block offset.
                    let piece = unsafe {
                        OwnedBlock::new(
                            page_offset(block.as_ptr(), (pfn.get() - head.get()) as i64),
                            pfn,
                            order,
                        )
                    };
                    area.free_one(model, piece);
                });
            }
        }
        self.managed -= end.get() - start.get();
        self.shrink_span(start, end);
        Ok(())
    }

    /// `shrink_zone_span`: a range taken from an edge of the span moves
    /// that edge (a range in the middle leaves the span as it is); a zone
    /// left with nothing spans nothing.
    fn shrink_span(&mut self, start: Pfn, end: Pfn) {
        if start <= self.start && end > self.start {
            self.start = end.min(self.end);
        }
        if end >= self.end && start < self.end {
            self.end = start.max(self.start);
        }
    }
}

/// `change_pageblock_range`: every pageblock of the block of `order` at
/// `head` (one when the block is smaller) gets migratetype `mt`.
pub(crate) fn change_pageblock_range<M: MemoryModel>(
    model: &M,
    head: Pfn,
    order: usize,
    mt: Migratetype,
) {
    let pageblock = model.geometry().pageblock_nr_pages();
    let first = head.get() & !(pageblock - 1);
    let end = (head.get() + (1u64 << order)).max(first + pageblock);
    for pfn in (first..end).step_by(pageblock as usize) {
        model.set_pfnblock_migratetype(Pfn::new(pfn), mt);
    }
}

/// Calls `f` for the largest naturally aligned blocks, up to `max_order`,
/// that tile `[first, end)`, lowest first (how `__free_pages_core` callers
/// split a range).
pub(crate) fn for_each_aligned_block(
    first: Pfn,
    end: Pfn,
    max_order: Order,
    mut f: impl FnMut(Pfn, Order),
) {
    let mut pfn = first.get();
    while pfn < end.get() {
        let mut order = pfn.trailing_zeros().min(u32::from(max_order.get()));
        while pfn + (1 << order) > end.get() {
            order -= 1;
        }
        f(Pfn::new(pfn), Order::new(order as u8));
        pfn += 1 << order;
    }
}

/// Without the hole check, refuses ranges whose `MAX_PAGE_ORDER` blocks
/// contain invalid pfns: the buddy of a valid page is read without a
/// `pfn_valid`, as the kernel does without `HOLES_IN_ZONE`.
pub(crate) fn check_blocks<M: MemoryModel, V: Variant>(
    model: &M,
    first: Pfn,
    end: Pfn,
) -> Result<(), AllocError> {
    if V::HOLE_CHECK {
        return Ok(());
    }
    let block = model.geometry().max_order_nr_pages();
    let step = model.geometry().pages_per_subsection().min(block);
    let mut head = first.get() & !(block - 1);
    while head < end.get() {
        let probes = (head..head + block)
            .step_by(step as usize)
            .chain([head + block - 1]);
        for pfn in probes.map(Pfn::new) {
            if !model.pfn_valid(pfn) {
                return Err(AllocError::HolesInBlock { pfn });
            }
        }
        head += block;
    }
    Ok(())
}

/// The kernel's `zone_batchsize`: 0.1 % of the zone or 1 MiB of 4 KiB
/// pages, a quarter of that, rounded down to `2^n - 1` (63 for zones of
/// 1 GiB and up).
pub fn zone_batchsize(managed_pages: u64) -> u32 {
    zone_batchsize_capped(managed_pages, 256)
}

/// `zone_batchsize` as of `era`: the 2.6 kernels capped the batch at
/// 512 KiB of pages where later ones allow 1 MiB, so a large zone's batch
/// is 31 in 2.6.9 and 2.6.23 (`high` 186) and 63 from 5.13.
pub fn zone_batchsize_for(managed_pages: u64, era: Era) -> u32 {
    zone_batchsize_capped(managed_pages, if era < Era::V5_13 { 128 } else { 256 })
}

fn zone_batchsize_capped(managed_pages: u64, cap_pages: u64) -> u32 {
    let batch = (managed_pages >> 10).min(cap_pages) / 4;
    let batch = batch.max(1);
    let b = batch + batch / 2;
    ((1u64 << (63 - b.leading_zeros())) - 1).max(1) as u32
}

/// Checks that `pfn` heads an allocated block of `order` in one of `zones`
/// and claims it (`page_ref_freeze`, refcount 1 → 0), so no other free can;
/// nothing changes on error. Returns the block and its zone id; the caller
/// classifies a refused claim.
#[inline(always)]
pub(crate) fn claim_for_free<M: MemoryModel, V: Variant>(
    model: &M,
    zones: &[Zone<V>],
    pfn: Pfn,
    order: Order,
) -> Result<(OwnedBlock, ZoneId), ClaimError> {
    let ptr = model
        .pfn_to_page_ptr_checked(pfn)
        .ok_or(ClaimError::OutsideZone)?;
    // SAFETY: a valid pfn's descriptor, live while `model` is borrowed.
    let page = unsafe { &*ptr };
    let zid = ZoneId(page.zone_id());
    let in_zone = zones
        .get(zid.index())
        .is_some_and(|z| z.spans(pfn) && !page.test(PageFlag::Reserved));
    if !in_zone {
        return Err(ClaimError::OutsideZone);
    }
    if page.private() != u64::from(order.get()) && page.refcount() == 1 {
        return Err(ClaimError::WrongOrder {
            allocated: page.private(),
        });
    }
    // SAFETY: the refcount is the allocator's field; the compare-exchange
    // lets exactly one of several racing frees win.
    if !unsafe { page.ref_freeze(1) } {
        return Err(ClaimError::NotAllocated(zid));
    }
    // SAFETY: (1) `ptr` is the valid pfn's descriptor pointer, with its
    // section's provenance; (2) refcount 1 with the order in `private`
    // means an allocated head, on no list, and the freeze made this caller
    // its only owner.
    Ok((unsafe { OwnedBlock::new(ptr, pfn, order) }, zid))
}

/// Why [`claim_for_free`] refused.
#[derive(Debug)]
pub(crate) enum ClaimError {
    /// Not a managed page of any zone.
    OutsideZone,
    /// An allocated head of another order.
    WrongOrder {
        /// The order it was allocated with.
        allocated: u64,
    },
    /// Not an allocated head (free already, or a tail); its zone id.
    NotAllocated(ZoneId),
}

/// `free_area[]` of one zone, behind the zone lock: a list per order and
/// migratetype (`free_list[MIGRATE_TYPES]`).
///
/// Invariants:
/// - a page is on `lists[o][mt]` iff it heads a free block of order `o`;
///   then it is marked buddy with `private == o` and the block lies in the
///   zone;
/// - with migratetypes (2.6.24 on), `mt` is the migratetype of every
///   pageblock the block covers (the model's pageblock flags), as Linux
///   6.x keeps it; without, every block is on the `Movable` list;
/// - the lists of order `o` hold `nr_free[o]` blocks;
/// - with the bitmap variant, bit `(pfn - bitmap_base) >> (o + 1)` of
///   `bitmap[o]` is set iff exactly one block of the pair at order `o` is
///   free;
/// - without the hole check, every `MAX_PAGE_ORDER` block holding a page of
///   the zone is wholly valid ([`check_blocks`] before memory is given).
pub struct FreeArea<V> {
    /// Statistics, changed only under the zone lock.
    pub stats: ZoneStats,
    pub(crate) lists: [[PageList; MIGRATE_TYPES]; NR_PAGE_ORDERS],
    /// Whether the era groups pages by mobility (migratetype lists and
    /// pageblock lookups on free).
    pub(crate) migratetypes: bool,
    /// Whether a freed block whose next-order buddy is free goes to the
    /// tail of its list (`buddy_merge_likely`, 2.6.35 on).
    merge_likely: bool,
    bitmap: Vec<Vec<u64>>,
    bitmap_base: u64,
    zone_id: u8,
    /// `MAX_PAGE_ORDER` of the geometry: lists above it stay empty.
    max_order: usize,
    _variant: PhantomData<V>,
}

impl<V: Variant> FreeArea<V> {
    /// Empty free lists for zone `zone_id` spanning `[start, end)`, with
    /// blocks up to `max_order`, shaped as the era's `path` has them.
    pub(crate) fn new(zone_id: u8, [start, end]: [Pfn; 2], max_order: Order, path: Path) -> Self {
        let mut area = FreeArea {
            stats: ZoneStats::default(),
            lists: Default::default(),
            migratetypes: path.migratetypes,
            merge_likely: path.merge_likely,
            bitmap: Vec::new(),
            bitmap_base: start.get() & !(max_order.nr_pages() - 1),
            zone_id,
            max_order: max_order.index(),
            _variant: PhantomData,
        };
        area.resize(start, end);
        area
    }

    /// The largest order of this zone's blocks (`MAX_PAGE_ORDER`).
    pub fn max_order(&self) -> Order {
        Order::new(self.max_order as u8)
    }

    /// Makes the bitmap cover the zone span `[start, end)` (which may have
    /// grown either way by hot add), keeping every pair bit.
    pub(crate) fn resize(&mut self, start: Pfn, end: Pfn) {
        if !V::BITMAP {
            return;
        }
        let new_base = self
            .bitmap_base
            .min(start.get() & !(self.max_order().nr_pages() - 1));
        let span = end.get().saturating_sub(new_base);
        let old = std::mem::take(&mut self.bitmap);
        self.bitmap = (0..self.max_order)
            .map(|o| vec![0u64; ((span >> (o + 1)) + 1).div_ceil(64) as usize])
            .collect();
        let shift = self.bitmap_base - new_base;
        for (o, map) in old.iter().enumerate() {
            let offset = shift >> (o + 1);
            for bit in
                (0..map.len() as u64 * 64).filter(|b| map[(b / 64) as usize] & (1 << (b % 64)) != 0)
            {
                let to = bit + offset;
                self.bitmap[o][(to / 64) as usize] |= 1 << (to % 64);
            }
        }
        self.bitmap_base = new_base;
    }

    /// `nr_free` per order.
    pub fn nr_free(&self) -> [u64; NR_PAGE_ORDERS] {
        std::array::from_fn(|o| self.lists[o].iter().map(PageList::len).sum())
    }

    /// Free pages on the lists.
    pub fn free_pages(&self) -> u64 {
        self.nr_free().iter().enumerate().map(|(o, n)| n << o).sum()
    }

    /// Pfns of the blocks on the free lists of one order (for checks).
    pub fn block_pfns<M: MemoryModel>(&self, model: &M, order: Order) -> Vec<Pfn> {
        Migratetype::ALL
            .into_iter()
            .flat_map(|mt| self.block_pfns_of(model, order, mt))
            .collect()
    }

    /// Pfns of the blocks on the free list of one order and migratetype.
    pub fn block_pfns_of<M: MemoryModel>(
        &self,
        model: &M,
        order: Order,
        mt: Migratetype,
    ) -> Vec<Pfn> {
        self.lists[order.index()][mt.index()]
            .iter()
            // SAFETY: listed pages are live descriptors of `model`'s memmap.
            .map(|p| model.page_to_pfn(unsafe { &*p }))
            .collect()
    }

    /// The zone's id, as its pages carry it.
    pub(crate) fn zone_id(&self) -> u8 {
        self.zone_id
    }

    /// The list a block headed at `pfn` belongs on: its pageblock's
    /// migratetype (`get_pfnblock_migratetype`, a memory-model lookup), or
    /// the one list of an era without migratetypes.
    #[inline(always)]
    pub(crate) fn list_mt<M: MemoryModel>(&self, model: &M, pfn: Pfn) -> Migratetype {
        if self.migratetypes {
            model.get_pfnblock_migratetype(pfn)
        } else {
            Migratetype::Movable
        }
    }

    /// `__test_and_change_bit` on the pair bit of `pfn` at `order`: returns
    /// the old value.
    #[inline(always)]
    fn toggle(&mut self, order: usize, pfn: u64) -> bool {
        let bit = (pfn - self.bitmap_base) >> (order + 1);
        let word = &mut self.bitmap[order][(bit / 64) as usize];
        let mask = 1u64 << (bit % 64);
        let old = *word & mask != 0;
        *word ^= mask;
        old
    }

    /// Puts a block head on `free_area[order].free_list[mt]`, at the head of
    /// the list or (`to_tail`) at its tail.
    ///
    /// # Safety
    /// `page` is a live descriptor heading a free block of this zone, on no
    /// list.
    #[inline(always)]
    pub(crate) unsafe fn add(
        &mut self,
        page: *const Page,
        order: usize,
        mt: Migratetype,
        to_tail: bool,
    ) {
        // SAFETY: the caller's contract.
        let pr = unsafe { &*page };
        // SAFETY: the caller hands this zone a block it owns, under the lock.
        unsafe {
            pr.set_private(order as u64);
            V::set(pr, PageFlag::Buddy);
        }
        // SAFETY: as above; the list's contract is the same.
        unsafe {
            if to_tail {
                self.lists[order][mt.index()].push_back(page);
            } else {
                self.lists[order][mt.index()].push_front(page);
            }
        }
    }

    /// Takes a block head off `free_area[order].free_list[mt]`.
    ///
    /// # Safety
    /// `page` is on `lists[order][mt]`.
    #[inline(always)]
    pub(crate) unsafe fn del(&mut self, page: *const Page, order: usize, mt: Migratetype) {
        // SAFETY: the caller's contract.
        unsafe { self.lists[order][mt.index()].unlink(page) };
        // SAFETY: listed pages are live, and the unlinked page is this
        // zone's under the lock.
        unsafe { V::clear(&*page, PageFlag::Buddy) };
    }

    /// `page_is_buddy`: a free block head of this order in this zone.
    #[inline(always)]
    fn page_is_buddy(&self, buddy: &Page, order: usize) -> bool {
        buddy.test(PageFlag::Buddy)
            && buddy.private() == order as u64
            && buddy.zone_id() == self.zone_id
    }

    /// Whether `head` is the head of a free block of `order` on these lists.
    pub(crate) fn is_free_block<M: MemoryModel>(&self, model: &M, head: Pfn, order: Order) -> bool {
        model
            .pfn_to_page(head)
            .is_some_and(|page| self.page_is_buddy(page, order.index()))
    }

    /// Takes the free block `(head, order)` off its list (offline), if it is
    /// one.
    pub(crate) fn take_free_block<M: MemoryModel>(
        &mut self,
        model: &M,
        head: Pfn,
        order: Order,
    ) -> Option<OwnedBlock> {
        if !self.is_free_block(model, head, order) {
            return None;
        }
        // SAFETY: the pfn is valid (is_free_block found its page).
        let page = unsafe { model.pfn_to_page_ptr(head) };
        if V::BITMAP && order.index() < self.max_order {
            self.toggle(order.index(), head.get());
        }
        let mt = self.list_mt(model, head);
        // SAFETY: page_is_buddy says it heads a free block of this order of
        // this zone, so it is on lists[order], on its pageblock's
        // migratetype list (type invariant).
        unsafe { self.del(page, order.index(), mt) };
        // SAFETY: just unlinked: a block of this zone on no list, owned by
        // the caller from now on.
        Some(unsafe { OwnedBlock::new(page, head, order) })
    }

    /// `__free_one_page`: frees `block` and merges it with free buddies,
    /// putting the result at the head of its list.
    #[inline(always)]
    pub(crate) fn free_one<M: MemoryModel>(&mut self, model: &M, block: OwnedBlock) {
        self.free_one_to(model, block, false);
    }

    /// `__free_one_page` with `FPI_TO_TAIL` chosen by the caller.
    ///
    /// The buddy is reached as `page + (buddy_pfn - pfn)` without a
    /// `pfn_to_page`; with the hole check it is first tested with
    /// `pfn_valid`, without it the zone's invariant (every `MAX_PAGE_ORDER`
    /// block holding its memory is wholly valid) makes it readable.
    #[inline(always)]
    pub(crate) fn free_one_to<M: MemoryModel>(
        &mut self,
        model: &M,
        block: OwnedBlock,
        to_tail: bool,
    ) {
        let mut page = block.as_ptr();
        let mut pfn = block.pfn().get();
        let mut order = block.order().index();
        // `get_pfnblock_migratetype` of the freed page: the per-free lookup.
        let mt = self.list_mt(model, block.pfn());
        let pageblock_order = model.geometry().pageblock_order().index();
        while order < self.max_order {
            let buddy_pfn = pfn ^ (1 << order);
            if V::HOLE_CHECK {
                self.stats.hole_checks += 1;
                if !model.pfn_valid(Pfn::new(buddy_pfn)) {
                    self.stats.hole_hits += 1;
                    break;
                }
            }
            // SAFETY: the buddy is in the same MAX_PAGE_ORDER block, hence the
            // same section, and its pfn is valid (just checked, or by the
            // zone's invariant); `page` has provenance over the section.
            let buddy = unsafe { page_offset(page, buddy_pfn as i64 - pfn as i64) };
            // SAFETY: a valid descriptor (above) of the borrowed model.
            let buddy_ref = unsafe { &*buddy };
            if V::BITMAP {
                if !self.toggle(order, pfn) {
                    break;
                }
                debug_assert!(self.page_is_buddy(buddy_ref, order));
            } else if !self.page_is_buddy(buddy_ref, order) {
                break;
            }
            // Below a pageblock the buddy shares the freed page's block, so
            // its list; from a pageblock up it has its own migratetype.
            let buddy_mt = if order >= pageblock_order {
                self.list_mt(model, Pfn::new(buddy_pfn))
            } else {
                mt
            };
            // SAFETY: page_is_buddy (or the pair bit) says the buddy heads a
            // free block of this order, so it is on lists[order][buddy_mt].
            unsafe { self.del(buddy, order, buddy_mt) };
            if buddy_mt != mt {
                // "Match buddy type": the merged block is one migratetype.
                change_pageblock_range(model, Pfn::new(buddy_pfn), order, mt);
            }
            self.stats.merges += 1;
            if buddy_pfn < pfn {
                page = buddy;
            }
            pfn &= buddy_pfn;
            order += 1;
        }
        let to_tail = to_tail || self.buddy_merge_likely(model, page, pfn, order);
        // SAFETY: `page` heads the merged free block, owned (the token and
        // the merged buddies, just unlinked) and on no list.
        unsafe { self.add(page, order, mt, to_tail) };
    }

    /// `buddy_merge_likely`: whether the block `(pfn, order)` that stopped
    /// merging would merge one order up as soon as its buddy is freed —
    /// the buddy of the pair it would form is free already. Then it goes to
    /// the tail of its list, so it is allocated last. Another memmap read
    /// per free, at a pfn computed from the freed one; with the hole check
    /// both pfns are tested first (the kernel tested only the buddy's;
    /// pfnlab must not read a hole's descriptor).
    #[inline(always)]
    fn buddy_merge_likely<M: MemoryModel>(
        &mut self,
        model: &M,
        page: *const Page,
        pfn: u64,
        order: usize,
    ) -> bool {
        if !self.merge_likely || order + 1 >= self.max_order {
            return false;
        }
        let buddy_pfn = pfn ^ (1 << order);
        let combined_pfn = buddy_pfn & pfn;
        let higher_buddy_pfn = combined_pfn ^ (1 << (order + 1));
        if V::HOLE_CHECK {
            self.stats.hole_checks += 2;
            if !model.pfn_valid(Pfn::new(buddy_pfn)) || !model.pfn_valid(Pfn::new(higher_buddy_pfn))
            {
                self.stats.hole_hits += 1;
                return false;
            }
        }
        // SAFETY: the higher buddy is in the freed block's MAX_PAGE_ORDER
        // block (order + 1 < max_order), so in its section, and valid (just
        // checked, or by the zone's invariant); `page` has provenance over
        // the section.
        let higher_buddy =
            unsafe { &*page_offset(page.cast_mut(), higher_buddy_pfn as i64 - pfn as i64) };
        let likely = self.page_is_buddy(higher_buddy, order + 1);
        self.stats.merge_likely_tails += u64::from(likely);
        likely
    }

    /// `__rmqueue_smallest` + `expand`: a block of `order`, taken off the
    /// lists, with the head pointer it was freed with.
    #[inline(always)]
    pub(crate) fn rmqueue_smallest<M: MemoryModel>(
        &mut self,
        model: &M,
        order: Order,
        mt: Migratetype,
    ) -> Option<OwnedBlock> {
        let low = order.index();
        for current in low..=self.max_order {
            let Some(page) = self.lists[current][mt.index()].pop_front() else {
                continue;
            };
            // SAFETY: listed pages are live descriptors of `model`'s memmap.
            let pr = unsafe { &*page };
            // SAFETY: just unlinked under the zone lock: this zone owns it.
            unsafe { V::clear(pr, PageFlag::Buddy) };
            let pfn = model.page_to_pfn(pr);
            if V::BITMAP && current < self.max_order {
                self.toggle(current, pfn.get());
            }
            // SAFETY: the block was free and is now off every list.
            unsafe { self.expand(page, pfn.get(), low, current, mt) };
            // SAFETY: its upper halves went back on the lists; the head block
            // of order `low` is on no list and goes to the caller alone.
            return Some(unsafe { OwnedBlock::new(page, pfn, order) });
        }
        None
    }

    /// `expand`: splits a block of order `high` down to `low`.
    ///
    /// # Safety
    /// `page` heads a block of order `high` of this zone that is on no list,
    /// with provenance over its section.
    #[inline(always)]
    unsafe fn expand(
        &mut self,
        page: *const Page,
        pfn: u64,
        low: usize,
        mut high: usize,
        mt: Migratetype,
    ) {
        while high > low {
            high -= 1;
            let size = 1u64 << high;
            // SAFETY: the upper half lies in the same block, so in the same
            // section, and is a valid descriptor.
            let half = unsafe { page_offset(page, size as i64) };
            // SAFETY: the upper half heads a free block of order `high`.
            unsafe { self.add(half, high, mt, false) };
            if V::BITMAP {
                self.toggle(high, pfn + size);
            }
            self.stats.splits += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Giving memory twice, or outside the span, is refused with nothing
    /// changed (the construction and online paths check first, so only
    /// this test reaches these answers).
    #[test]
    fn give_range_refuses_managed_memory_and_pfns_outside_the_span() {
        use sparsemem::{Layout, MemRange, NodeId, RangeKind, SparseExtreme};
        let layout = Layout::new(
            sparsemem::Geometry::X86_64,
            vec![MemRange::new(0, 32 << 20, RangeKind::Ram, 0)],
            "32m",
        )
        .unwrap();
        let model = SparseExtreme::new(&layout).unwrap();
        let (start, end) = (Pfn::new(0x1000), Pfn::new(0x2000));
        let mut zone = Zone::<crate::Kernel>::new(
            ZoneType::Dma32,
            NodeId::ZERO,
            ZoneId::new(0),
            [start, end],
            Order::new(10),
            Path::new(Era::default(), crate::Mechanisms::ALL),
        );
        let outside = zone
            .give_range(&model, [Pfn::new(0x800), start], false)
            .unwrap_err();
        assert!(matches!(outside, AllocError::OutsideZone { pfn } if pfn == Pfn::new(0x800)));
        assert_eq!(zone.managed_pages(), 0);
        zone.give_range(&model, [start, end], false).unwrap();
        assert_eq!((zone.managed_pages(), zone.free_pages()), (0x1000, 0x1000));
        let again = zone
            .give_range(&model, [start, Pfn::new(0x1200)], false)
            .unwrap_err();
        assert!(matches!(again, AllocError::AlreadyManaged { pfn } if pfn == start));
        let past = zone
            .give_range(&model, [end, Pfn::new(0x2001)], false)
            .unwrap_err();
        assert!(matches!(past, AllocError::OutsideZone { pfn } if pfn == end));
        assert_eq!(
            (zone.managed_pages(), zone.free_pages()),
            (0x1000, 0x1000),
            "unchanged"
        );

        // take_range refuses a block that is not free, changing nothing.
        let held = zone
            .free
            .get_mut()
            .rmqueue_smallest(&model, Order::new(3), Migratetype::Movable)
            .unwrap();
        let (pfn, free) = (held.pfn(), zone.free_pages());
        let e = zone
            .take_range(&model, pfn, pfn + 8, &[(pfn, Order::new(3))])
            .unwrap_err();
        assert!(
            matches!(e, AllocError::NotAllocated { pfn: p } if p == pfn),
            "{e}"
        );
        assert_eq!((zone.managed_pages(), zone.free_pages()), (0x1000, free));
        assert!(
            model
                .pfn_to_page(pfn)
                .is_some_and(|p| !p.test(PageFlag::Reserved))
        );
        zone.free.get_mut().free_one(&model, held);
        assert_eq!(zone.free_pages(), 0x1000);
    }

    #[test]
    fn batch_follows_the_kernel_formula() {
        assert_eq!(zone_batchsize(1 << 18), 63, "1 GiB zone");
        assert_eq!(zone_batchsize(1 << 22), 63, "16 GiB zone");
        assert_eq!(zone_batchsize(1 << 15), 7, "128 MiB zone");
        assert_eq!(zone_batchsize(4096), 1, "16 MiB DMA zone");
        // 96 MiB: batch 6, and 6 + 6 / 2 = 9 rounds down to 8, so 7 (the
        // half is what lifts it past a power of two).
        assert_eq!(zone_batchsize(24 << 10), 7, "96 MiB zone");
        assert_eq!(
            zone_batchsize_for(1 << 18, Era::V2_6_23),
            31,
            "2.6: 512 KiB cap"
        );
        assert_eq!(zone_batchsize_for(1 << 18, Era::V5_13), 63);
        assert_eq!(
            zone_batchsize_for(1 << 15, Era::V2_6_9),
            7,
            "below both caps"
        );
    }
}
