//! A zone (`struct zone`): its span, its managed memory, its watermarks
//! and per-CPU sizing, and its free area behind the zone lock.
//!
//! A [`Zone`] is built and given its memory here (`memmap_init_zone` +
//! `__free_pages_core`), and gives it back on offline, with every
//! precondition checked first, so the construction and hotplug paths
//! cannot hand the lists a page twice. The claim of a free
//! ([`claim_for_free`], `page_ref_freeze`) is here too: it decides which
//! zone a freed pfn belongs to before anything is written.
//!
//! The buddy algorithm proper is [`free_area`]'s (with the merge of a free,
//! [`merge`]), the migratetype fallback [`fallback`]'s; all run under the
//! zone lock
//! ([`crate::lock::SpinLock`]).
//!
//! # Safety
//! These modules and `list` are the only places that write a `struct
//! page`: the rest of the allocator moves [`OwnedBlock`] tokens. Here the
//! writes are of pages no list and no caller holds: reserved pages a zone
//! takes over (`give_range`, under `&mut self`), pages of blocks just
//! taken off the lists (`take_range`), and the reference count a claim
//! freezes with a compare-exchange, which exactly one racing free wins.
//! Every pointer comes from the model's `pfn_to_page_ptr` of a pfn checked
//! valid, or from an owned head plus an offset inside its block.

mod fallback;
mod free_area;
mod highatomic;
mod merge;
mod rebuild;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use sparsemem::{BuddyPage, NR_PAGE_ORDERS, NodeId, Order, Page, PageFlag, PageLayout, Pfn};

use crate::era::{Era, Path};
use crate::error::RangeError;
use crate::gfp::{AllocFlags, Wmark};
use crate::list::{OwnedBlock, TrylockFreePages, page_offset};
use crate::lock::SpinLock;
use crate::types::{BuddyModel, HighatomicRules, MAX_NR_ZONES, ZoneId, ZoneStats, ZoneType};
use crate::variant::Variant;
use crate::watermark::{MIN_PERCPU_PAGELIST_HIGH_FRACTION, Watermarks, zone_highsize};

pub(crate) use fallback::FALLBACKS;
pub use free_area::FreeArea;
pub(crate) use merge::FpiFlags;

/// One zone (`struct zone`): its span, its free area behind the zone lock,
/// and its per-CPU sizing.
pub struct Zone<V, P = Page> {
    /// The zone type.
    pub kind: ZoneType,
    /// Its node.
    pub node: NodeId,
    /// Its id, stored in its pages.
    pub id: ZoneId,
    pub(crate) start: Pfn,
    pub(crate) end: Pfn,
    /// `managed_pages`: pages given to the allocator. Atomic as the
    /// kernel's `atomic_long_t` is: deferred init adds to it through a
    /// shared allocator (`__free_pages_core`); `Relaxed` everywhere, as
    /// `zone_managed_pages` reads it, a count no other memory hangs on.
    pub(crate) managed: AtomicU64,
    pub(crate) free_area: SpinLock<FreeArea<V, P>>,
    pub(crate) batch: u32,
    pub(crate) high: u32,
    /// `pageset_high_max`: how far 6.7's tuning may raise a CPU's `high`
    /// (equal to `high` before 6.7, or with `percpu_pagelist_high_fraction`).
    pub(crate) high_max: u32,
    pub(crate) watermarks: Watermarks,
    /// `lowmem_reserve[]`: pages this zone keeps back from a request whose
    /// highest zone is the index (`setup_per_zone_lowmem_reserve`).
    pub(crate) lowmem_reserve: [u64; MAX_NR_ZONES],
    /// `vm_stat[NR_FREE_PAGES]`: free pages as the watermark checks read
    /// them, without the lock. Per-CPU handles fold their changes in at
    /// `stat_threshold` (`__mod_zone_page_state`), so it lags the free
    /// lists by at most that much per handle.
    pub(crate) vm_free: AtomicI64,
    /// `nr_free_highatomic`: the free pages of the `MIGRATE_HIGHATOMIC`
    /// reserve (the free area's counter, read here without the lock).
    pub(crate) free_highatomic: Arc<AtomicU64>,
    /// `nr_reserved_highatomic`: pages of the pageblocks reserved, written
    /// under the zone lock by `zone::highatomic`, read without it
    /// (`READ_ONCE`), so `Relaxed`.
    pub(crate) nr_reserved_highatomic: Arc<AtomicU64>,
    /// The counter the watermark hides from a request without the
    /// reserve's rights, chosen once by the era: `nr_reserved_highatomic`
    /// with 5.13's rules, `nr_free_highatomic` with 6.18's (6.12's
    /// `c928807f6f6b`; one load on the path).
    highatomic_unusable: Arc<AtomicU64>,
    /// The era's rules for the reserve.
    pub(crate) highatomic: HighatomicRules,
    /// `stat_threshold` (`calculate_normal_threshold`).
    pub(crate) stat_threshold: i64,
    /// `zone->contiguous`, kept by `walk::set_zone_contiguous`.
    pub(crate) contiguous: bool,
    /// `ZONE_BELOW_HIGH` (6.7 on): an allocation found the zone below its
    /// high watermark; set by the allocation path, cleared by a drain
    /// that brought it back above. A hint read without a lock, so
    /// `Relaxed`, as the kernel's `test_bit`/`set_bit` on `zone->flags`.
    pub(crate) below_high: AtomicBool,
    /// `zone->trylock_free_pages` (6.15): blocks `free_pages_nolock`
    /// could not free because the zone lock was held, waiting for the
    /// next free that takes it ([`Zone::free_trylock_pages`]).
    pub(crate) trylock_free_pages: TrylockFreePages<P>,
    /// Whether the era has `free_pages_nolock` (6.15 on), so a locked
    /// free checks `trylock_free_pages` at all; an older era's path has no
    /// such check.
    alloc_nolock: bool,
}

/// `pcp->high` before 5.14: six batches (`pageset_set_batch`,
/// mm/page_alloc.c: `high = 6 * batch`).
pub const PCP_HIGH_BATCHES: u32 = 6;

impl<V: Variant, P: BuddyPage> Zone<V, P> {
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
    ) -> Zone<V, P> {
        let area = FreeArea::new(id.get(), [start, end], max_order, path);
        let reserved = Arc::default();
        let unusable = match path.highatomic {
            HighatomicRules::HighAtomic => Arc::clone(&area.free_highatomic),
            _ => Arc::clone(&reserved),
        };
        Zone {
            kind,
            node,
            id,
            start,
            end,
            managed: AtomicU64::new(0),
            free_highatomic: Arc::clone(&area.free_highatomic),
            nr_reserved_highatomic: reserved,
            highatomic_unusable: unusable,
            highatomic: path.highatomic,
            free_area: SpinLock::with_kind(area, path.zone_lock),
            batch: 1,
            high: PCP_HIGH_BATCHES,
            high_max: PCP_HIGH_BATCHES,
            watermarks: Watermarks::default(),
            lowmem_reserve: [0; MAX_NR_ZONES],
            vm_free: AtomicI64::new(0),
            stat_threshold: 0,
            contiguous: false,
            below_high: AtomicBool::new(false),
            trylock_free_pages: TrylockFreePages::default(),
            alloc_nolock: path.alloc_nolock,
        }
    }

    /// Pages freed by `free_pages_nolock` that wait on
    /// `zone->trylock_free_pages` for the next free that takes the zone
    /// lock: neither allocated nor on a free list, and not counted in
    /// `NR_FREE_PAGES` until then.
    pub fn nr_trylock_free_pages(&self) -> u64 {
        self.trylock_free_pages.nr_pages()
    }

    /// `free_one_page`'s first step once it holds the zone lock (`area`,
    /// its guard's) without `FPI_TRYLOCK` (6.15): every block waiting on
    /// `trylock_free_pages` goes to the free lists
    /// (`split_large_buddy`, and a `PGFREE` event each). Returns the pages
    /// freed, for the caller's `NR_FREE_PAGES`. One load when the list is
    /// empty, as the kernel's `llist_empty`; none before 6.15.
    #[inline(always)]
    pub(crate) fn free_trylock_pages<M: BuddyModel<Page = P>>(
        &self,
        model: &M,
        area: &mut FreeArea<V, P>,
    ) -> u64 {
        if !self.alloc_nolock || self.trylock_free_pages.is_empty() {
            return 0;
        }
        self.drain_trylock_free_pages(model, area)
    }

    /// The drain of [`Zone::free_trylock_pages`], out of line.
    #[cold]
    #[inline(never)]
    fn drain_trylock_free_pages<M: BuddyModel<Page = P>>(
        &self,
        model: &M,
        area: &mut FreeArea<V, P>,
    ) -> u64 {
        let mut pages = 0;
        for block in self.trylock_free_pages.take_all(model) {
            let order = block.order();
            area.free_one(model, block);
            area.stats.frees[order.index()] += 1;
            pages += order.nr_pages();
        }
        pages
    }

    /// `MAX_PAGE_ORDER` of this zone's geometry.
    pub fn max_order(&self) -> Order {
        self.free_area.lock().max_order()
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
        self.managed.load(Ordering::Relaxed)
    }

    /// Per-CPU `batch`.
    pub fn batch(&self) -> u32 {
        self.batch
    }

    /// Per-CPU `high`.
    pub fn high(&self) -> u32 {
        self.high
    }

    /// `pageset_high_max`: the most 6.7's tuning raises a CPU's `high` to
    /// (the same as [`Zone::high`] in older eras).
    pub fn high_max(&self) -> u32 {
        self.high_max
    }

    /// Free pages on the zone's lists, counted under the lock (not counting
    /// per-CPU lists; [`Zone::nr_free_pages_state`] is the lock-free
    /// counter the watermark checks read).
    pub fn nr_free_pages(&self) -> u64 {
        self.free_area.lock().nr_free_pages()
    }

    /// `nr_free` per order.
    pub fn nr_free(&self) -> [u64; NR_PAGE_ORDERS] {
        self.free_area.lock().nr_free()
    }

    /// The zone's statistics (taken under its lock).
    pub fn stats(&self) -> ZoneStats {
        self.free_area.lock().stats
    }

    /// Zone-lock acquisitions so far.
    pub fn lock_acquisitions(&self) -> u64 {
        self.free_area.acquisitions()
    }

    /// The zone's watermarks (`min_wmark_pages` and so on).
    pub fn watermarks(&self) -> Watermarks {
        self.watermarks
    }

    /// `lowmem_reserve[]`, indexed by the highest zone type of a request.
    pub fn lowmem_reserve(&self) -> [u64; MAX_NR_ZONES] {
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
    /// use) plus its `lowmem_reserve` free after the allocation, not
    /// counting the `MIGRATE_HIGHATOMIC` reserve unless the flags may use
    /// it (`__zone_watermark_unusable_free`). The
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
        let mut free = self.nr_free_pages_state() as i64;
        if !flags.reserves {
            free -= (self.highatomic_unusable.load(Ordering::Relaxed) as i64).min(free);
        }
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

    /// `nr_reserved_highatomic`: the pages of the pageblocks reserved for
    /// high-order atomic requests.
    pub fn nr_reserved_highatomic(&self) -> u64 {
        self.nr_reserved_highatomic.load(Ordering::Relaxed)
    }

    /// `nr_free_highatomic`: the reserve's free pages.
    pub fn nr_free_highatomic(&self) -> u64 {
        self.free_highatomic.load(Ordering::Relaxed)
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

    /// Sets `batch` (the kernel's `zone_batchsize` for `era` unless
    /// `batch_override` gives it), `high` and `high_max`
    /// (`zone_set_pageset_high_and_batch`): `6 × batch` before Linux 5.14;
    /// after, `zone_highsize` of the low watermark and of an eighth of the
    /// managed pages (`MIN_PERCPU_PAGELIST_HIGH_FRACTION`), or both of the
    /// managed pages over `high_fraction` (`percpu_pagelist_high_fraction`)
    /// when that is not 0, split over `nr_split_cpus`.
    pub(crate) fn set_pcp_sizes(
        &mut self,
        era: Era,
        batch_override: Option<u32>,
        high_fraction: u32,
        nr_split_cpus: u32,
    ) {
        self.batch = batch_override
            .unwrap_or_else(|| zone_batchsize_for(self.managed_pages(), era))
            .max(1);
        (self.high, self.high_max) = if era.pcp_high_from_watermark() {
            let highsize = |total_pages| zone_highsize(total_pages, self.batch, nr_split_cpus);
            match high_fraction {
                0 => (
                    highsize(self.watermarks.low),
                    highsize(self.managed_pages() / u64::from(MIN_PERCPU_PAGELIST_HIGH_FRACTION)),
                ),
                fraction => {
                    let high = highsize(self.managed_pages() / u64::from(fraction));
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
        self.free_area.get_mut().resize(start, end);
    }

    /// Gives `[first, end)` to the zone, as boot (`memmap_init_zone` +
    /// `memblock_free_all`) and `online_pages` (`memmap_init_range` +
    /// `online_pages_range`) do: each page gets the zone's ids and loses
    /// `PG_reserved`, then the range is freed in the largest aligned blocks,
    /// with `fpi`: to the head of the lists at boot and to the tail when
    /// onlining (`FPI_TO_TAIL`, so freshly onlined memory is used last). Refused,
    /// with nothing changed, unless every pfn is valid, reserved (so not
    /// yet managed), not device memory and inside the span, and — without
    /// the hole check — every `MAX_PAGE_ORDER` block around it is wholly
    /// valid.
    pub(crate) fn give_range<M: BuddyModel<Page = P>>(
        &mut self,
        model: &M,
        [first, end]: [Pfn; 2],
        fpi: FpiFlags,
    ) -> Result<(), RangeError> {
        check_blocks::<M, V>(model, first, end)?;
        for pfn in first.get()..end.get() {
            let pfn = Pfn::new(pfn);
            match model.pfn_to_page(pfn) {
                Some(page) if page.is_zone_device() => {
                    return Err(RangeError::DeviceMemory { pfn });
                }
                Some(page) if page.test(PageFlag::Reserved) && self.spans(pfn) => {}
                Some(_) if self.spans(pfn) => return Err(RangeError::AlreadyManaged { pfn }),
                _ => return Err(RangeError::OutsideZone { pfn }),
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
        let area = self.free_area.get_mut();
        let max_order = area.max_order();
        for_each_aligned_block(first, end, max_order, |pfn, order| {
            // SAFETY: the pages were reserved until just now, so the block
            // is on no list and nobody else holds it; pointer from
            // pfn_to_page_ptr of a pfn checked valid above.
            let block = unsafe { OwnedBlock::new(model.pfn_to_page_ptr(pfn), pfn, order) };
            area.free_one_fpi(model, block, fpi);
        });
        *self.managed.get_mut() += end.get() - first.get();
        Ok(())
    }

    /// Takes `[start, end)` out of the zone (`offline_pages` after the
    /// isolation found it free): each `(head, order)` of `blocks` must be a
    /// free block of this zone and together they must cover the range. The
    /// pages become reserved again; the parts of straddling blocks outside
    /// the range go back on the lists. Nothing changes if a block is not
    /// free.
    pub(crate) fn take_range<M: BuddyModel<Page = P>>(
        &mut self,
        model: &M,
        start: Pfn,
        end: Pfn,
        blocks: &[(Pfn, Order)],
    ) -> Result<(), RangeError> {
        let area = self.free_area.get_mut();
        if let Some(&(pfn, _)) = blocks
            .iter()
            .find(|&&(h, o)| !area.is_free_block(model, h, o))
        {
            return Err(RangeError::NotFree { pfn });
        }
        let taken: Vec<OwnedBlock<P>> = blocks
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
        *self.managed.get_mut() -= end.get() - start.get();
        self.shrink_span(start, end);
        Ok(())
    }

    /// `shrink_zone_span`: a range taken from an edge of the span moves
    /// that edge (a range in the middle leaves the span as it is); a zone
    /// left with nothing spans nothing.
    pub(crate) fn shrink_span(&mut self, start: Pfn, end: Pfn) {
        if start <= self.start && end > self.start {
            self.start = end.min(self.end);
        }
        if end >= self.end && start < self.end {
            self.end = start.max(self.start);
        }
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
pub(crate) fn check_blocks<M: BuddyModel, V: Variant>(
    model: &M,
    first: Pfn,
    end: Pfn,
) -> Result<(), RangeError> {
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
                return Err(RangeError::HolesInBlock { pfn });
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
pub(crate) fn claim_for_free<M: BuddyModel, V: Variant>(
    model: &M,
    zones: &[Zone<V, M::Page>],
    pfn: Pfn,
    order: Order,
) -> Result<(OwnedBlock<M::Page>, ZoneId), ClaimError> {
    let ptr = model
        .pfn_to_page_ptr_checked(pfn)
        .ok_or(ClaimError::OutsideZone)?;
    // SAFETY: a valid pfn's descriptor, live while `model` is borrowed.
    let page = unsafe { &*ptr };
    // A descriptor deferred init has not written (`PagePoisoned`: every
    // byte 0xff) names zone 255, which no allocator zone has (it is
    // ZONE_DEVICE's), and has PG_reserved set: either check below refuses
    // it before its order or count is read, so the hot path needs no test
    // of its own, as the kernel's has none outside CONFIG_DEBUG_VM.
    let zid = ZoneId::new(page.zone_id());
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

#[cfg(test)]
mod tests {
    use super::*;
    use sparsemem::MemoryModel;
    use sparsemem::Migratetype;

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
            .give_range(&model, [Pfn::new(0x800), start], FpiFlags::NONE)
            .unwrap_err();
        assert!(matches!(outside, RangeError::OutsideZone { pfn } if pfn == Pfn::new(0x800)));
        assert_eq!(zone.managed_pages(), 0);
        zone.give_range(&model, [start, end], FpiFlags::NONE)
            .unwrap();
        assert_eq!(
            (zone.managed_pages(), zone.nr_free_pages()),
            (0x1000, 0x1000)
        );
        let again = zone
            .give_range(&model, [start, Pfn::new(0x1200)], FpiFlags::NONE)
            .unwrap_err();
        assert!(matches!(again, RangeError::AlreadyManaged { pfn } if pfn == start));
        let past = zone
            .give_range(&model, [end, Pfn::new(0x2001)], FpiFlags::NONE)
            .unwrap_err();
        assert!(matches!(past, RangeError::OutsideZone { pfn } if pfn == end));
        assert_eq!(
            (zone.managed_pages(), zone.nr_free_pages()),
            (0x1000, 0x1000),
            "unchanged"
        );

        // take_range refuses a block that is not free, changing nothing.
        let held = zone
            .free_area
            .get_mut()
            .rmqueue_smallest(&model, Order::new(3), Migratetype::Movable)
            .unwrap();
        let (pfn, free) = (held.pfn(), zone.nr_free_pages());
        let e = zone
            .take_range(&model, pfn, pfn + 8, &[(pfn, Order::new(3))])
            .unwrap_err();
        assert!(
            matches!(e, RangeError::NotFree { pfn: p } if p == pfn),
            "{e}"
        );
        assert_eq!((zone.managed_pages(), zone.nr_free_pages()), (0x1000, free));
        assert!(
            model
                .pfn_to_page(pfn)
                .is_some_and(|p| !p.test(PageFlag::Reserved))
        );
        zone.free_area.get_mut().free_one(&model, held);
        assert_eq!(zone.nr_free_pages(), 0x1000);
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
