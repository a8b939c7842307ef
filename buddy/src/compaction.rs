//! Memory compaction: the two scanners, migration between them, and the
//! checks around a run.
//!
//! `compact_zone` (mm/compaction.c, Linux 2.6.35: `748446bb6b5a`) runs two
//! scanners towards each other: the *migrate* scanner
//! (`isolate_migratepages`) from the zone's start upwards, isolating pages
//! that could be moved, and the *free* scanner (`isolate_freepages`) from
//! the zone's end downwards, isolating free pages to move them into;
//! `migrate_pages` (mm/migrate.c) moves the first into the second through
//! `compaction_alloc` and `compaction_free`, and `release_free_list` gives
//! back the free pages left over. A run ends when `compact_finished` says
//! so: the scanners met in one pageblock (`COMPACT_COMPLETE`, the only end
//! of an `order = -1` run such as `/proc/sys/vm/compact_memory`'s), or, at
//! a pageblock's end, a free block of the requested order is on the
//! request's list or one `find_suitable_fallback` would claim from
//! (`COMPACT_SUCCESS`). Both scanners go pageblock by pageblock and ask
//! [`pageblock_pfn_to_page`] first — the check the 2016 `zone->contiguous`
//! change took out of the loop — and both honour and set the pageblock
//! *skip* hints (`isolation_suitable`, `set_pageblock_skip`). Their work is
//! what `/proc/vmstat` counts (3.8 on): `compact_migrate_scanned`,
//! `compact_free_scanned`, `compact_isolated` ([`CompactCounts`],
//! [`CompactVmstat`]), and migration's `pgmigrate_success` and
//! `pgmigrate_fail`.
//!
//! What pfnlab models:
//! - migrate scanner (`isolate_migratepages_block`): a free block
//!   (`PageBuddy`) or a compound page is skipped by its order (its pages
//!   still count as scanned); a page is *movable* when it heads an
//!   allocation (one reference, not reserved, not on a per-CPU list, not
//!   compound) in a `MIGRATE_MOVABLE` pageblock and, in a run that
//!   migrates ([`compact_zone`]), has an owner ([`Owners`](crate::Owners),
//!   the stand-in for `PageLRU`) of order 0; an owned block of a higher
//!   order is passed over whole, as the kernel before 6.9 passed over every
//!   compound page. Isolation stops at [`COMPACT_CLUSTER_MAX`] pages; a
//!   pageblock scanned whole with nothing isolated gets its skip hint.
//! - free scanner (`isolate_freepages` / `isolate_freepages_block`): only
//!   pageblocks not headed by a free block of at least the run's order
//!   (at least a pageblock for an order-0 or `-1` run), and of those only
//!   `MIGRATE_MOVABLE` ones unless `ignore_block_suitable`
//!   (`suitable_migration_target`); each free block found is taken
//!   off its list and split into order-0 pages (`__isolate_free_page`,
//!   `split_map_pages`), until as many free pages as migrate pages are in
//!   hand; a pageblock scanned whole gets its skip hint.
//! - the free pages in hand are one order-0 list, `cc->freepages` as it
//!   was until 6.8; 6.9 (`733aea0b3a7b`, `ee6f62fd34f0`) made it one list
//!   per order so that large folios could move. The order-0 list is the one
//!   that decides what moves here, since the migrate scanner takes only
//!   base pages; `compaction_alloc` has nothing for a larger source.
//! - migration ([`migrate_pages`](crate::migrate_pages)): an owned,
//!   unpinned page outside a `MIGRATE_HIGHATOMIC` pageblock moves (the
//!   HIGHATOMIC refusal is pfnlab's own guard for the atomic reserve, not a
//!   kernel rule: the kernel decides movability per folio); a pinned one
//!   is not isolated (the anonymous-folio reference check in
//!   `isolate_migratepages_block`), so it counts only as scanned; `-ENOMEM` from `compaction_alloc`
//!   before the scanners met ends the run `COMPACT_CONTENDED`.
//! - modes: a sync run is `compact_memory`'s (whole zone, skip hints
//!   ignored, [`CompactControl::PROC`]), `COMPACT_PRIO_SYNC_FULL`'s (the
//!   same, and free pages taken from any pageblock:
//!   [`CompactControl::direct_sync`]) or `COMPACT_PRIO_SYNC_LIGHT`'s (from
//!   the cached pfns, hints honoured: [`CompactControl::direct_sync_light`]);
//!   an async direct run ([`CompactControl::direct_async`]) starts at the
//!   cached pfns, honours the hints, takes only `MIGRATE_MOVABLE` source
//!   pageblocks for a movable request (`suitable_migration_source`), and
//!   ends `COMPACT_CONTENDED` when its budget of pageblocks
//!   ([`CompactControl::budget_pageblocks`], the stand-in for the
//!   contention abort) is spent. [`CompactControl::direct`] maps a
//!   [`CompactPriority`] to its control as `compact_zone_order` does.
//! - before a run for an order: `COMPACT_SUCCESS` at once if the zone
//!   passes its min watermark with a free block of the order, and
//!   `COMPACT_SKIPPED` unless [`compaction_suitable`] (6.15's form: an
//!   order-0 check at the watermark plus [`compact_gap`], plus the low less
//!   the min watermark for a costly order, and for a costly order a
//!   [`fragmentation_index`] above [`EXTFRAG_THRESHOLD`], 500,
//!   from 2.6.35's `5e7719058079`).
//! - deferral (2.6.35, `4f92e2586b43`), on [`CompactState`]:
//!   `defer_compaction`, `compaction_deferred`, `compaction_defer_reset`
//!   (the shift capped at [`COMPACT_MAX_DEFER_SHIFT`], so at most 63
//!   attempts are skipped) and `compaction_restarting`, after which a run
//!   clears its skip hints. The caller decides when to defer, as
//!   `try_to_compact_pages` does.
//! - an era before 2.6.35 has no compaction ([`CompactError::NoCompaction`]).
//!
//! What it leaves out, deliberately: `fast_find_migrateblock` and
//! `fast_isolate_freepages` (5.1); the watermark check of
//! `__isolate_free_page`; async compaction's free-scanner stride and its
//! `skip_on_failure` chunks; the `finish_pageblock` rescan after a failed
//! migration; page capture (5.1); kcompactd, proactive compaction and
//! defrag_mode; compaction inside the allocator's own slow path: direct
//! compaction is [`alloc_pages_direct_compact`], which a caller holding
//! the owners calls (`__alloc_pages_direct_compact` and
//! `try_to_compact_pages` at one [`CompactPriority`], counting
//! `compact_stall`, `compact_success` and `compact_fail`), or
//! [`alloc_pages_direct_compact_retry`], the slow path's loop of them with
//! `should_compact_retry`'s priority steps but without the direct reclaim
//! between them. Also left out: an async run for a non-movable request
//! takes every pageblock as a source, where the kernel's
//! `suitable_migration_source` takes only those of the request's
//! migratetype; the kernel keeps separate cached migrate pfns for async
//! and sync runs, and sets `whole_zone` for a run whose cached migrate pfn
//! is at or below the zone's first (`compact_init_migrate_pfn`), so that
//! it ends `COMPACT_COMPLETE`, not `PARTIAL_SKIPPED`; pfnlab does neither.
//! The skip hints live in
//! [`CompactState`], beside the zone, not in the fourth pageblock bit; the
//! cached restart pfns are where an aborted run stopped, reset when the
//! scanners meet. [`compact_zone_scan`] is the scanners alone with nothing
//! moved, the walk experiment's subject.

mod direct;
mod finish;
mod proactive;
mod retry;
mod run;

pub use direct::{CompactPriority, alloc_pages_direct_compact};
pub use finish::{
    COMPACT_MAX_DEFER_SHIFT, CompactResult, ContigPageInfo, EXTFRAG_THRESHOLD, compact_gap,
    compaction_suitable, fill_contig_page_info, fragmentation_index,
};
pub use proactive::{
    DEFAULT_COMPACTION_PROACTIVENESS, HPAGE_FRAG_CHECK_INTERVAL_MSEC, Kcompactd, ProactiveError,
    ProactiveRun, compaction_hpage_order, extfrag_for_order, fragmentation_score_node,
    fragmentation_score_wmark, fragmentation_score_zone, proactive_compact_node,
};
pub use retry::{
    CompactTry, MAX_COMPACT_RETRIES, alloc_pages_direct_compact_retry, should_compact_retry,
};
pub use run::{CompactRun, CompactVmstat, compact_zone};

use sparsemem::{BuddyPage, Migratetype, Order, PageFlag, PageLayout, Pfn};

use crate::alloc::Allocator;
use crate::era::Era;
use crate::migrate::Owners;
use crate::types::{BuddyModel, ZoneId};
use crate::variant::Variant;
use crate::walk::{__pageblock_pfn_to_page, pageblock_pfn_to_page};
use crate::zone::Zone;

/// `COMPACT_CLUSTER_MAX` (`SWAP_CLUSTER_MAX`, include/linux/swap.h): the
/// migrate scanner's isolation batch.
pub const COMPACT_CLUSTER_MAX: u64 = 32;

/// Why a compaction run cannot start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactError {
    /// No zone has this id.
    NoZone(ZoneId),
    /// The era predates memory compaction (2.6.35).
    NoCompaction(Era),
}

impl std::fmt::Display for CompactError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CompactError::NoZone(z) => write!(f, "no zone {z}"),
            CompactError::NoCompaction(era) => {
                write!(f, "{era:?} has no memory compaction (added in 2.6.35)")
            }
        }
    }
}

impl std::error::Error for CompactError {}

/// How one run goes (`struct compact_control`'s switches).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactControl {
    /// `ignore_skip_hint`: scan pageblocks whose skip hint is set
    /// (`/proc/sys/vm/compact_memory` does).
    pub ignore_skip_hint: bool,
    /// `whole_zone`: start at the zone's ends, not at the cached pfns.
    pub whole_zone: bool,
    /// Use `zone->contiguous` (the 2016 change); off, every pageblock gets
    /// the full `__pageblock_pfn_to_page` check, as before it.
    pub use_contiguous: bool,
    /// Stop after this many pageblocks checked, keeping the cached pfns
    /// (pfnlab's stand-in for an async run's contention abort).
    pub budget_pageblocks: Option<u64>,
    /// `cc->mode == MIGRATE_ASYNC` in a direct compaction for a movable
    /// request (a THP fault): `suitable_migration_source` passes over every
    /// pageblock that is not `MIGRATE_MOVABLE` once it has been checked,
    /// without scanning it. Off, every checked pageblock is a source, as
    /// in sync compaction and `/proc/sys/vm/compact_memory`.
    pub async_movable: bool,
    /// `ignore_block_suitable`: the free scanner takes free pages from a
    /// pageblock of any migratetype, not only `MIGRATE_MOVABLE` ones
    /// (`suitable_migration_target`); set only at
    /// `COMPACT_PRIO_SYNC_FULL` (`compact_zone_order`).
    pub ignore_block_suitable: bool,
    /// `cc->order`: the order a run works for, `None` for the kernel's
    /// `-1` (the whole zone, until the scanners meet).
    pub order: Option<Order>,
    /// `cc->migratetype`: the request's (`gfp_migratetype`), whose free
    /// lists `compact_finished` looks at.
    pub migratetype: Migratetype,
}

impl CompactControl {
    /// `compact_node`, as `echo 1 > /proc/sys/vm/compact_memory` runs it.
    pub const PROC: CompactControl = CompactControl {
        ignore_skip_hint: true,
        whole_zone: true,
        use_contiguous: true,
        budget_pageblocks: None,
        async_movable: false,
        ignore_block_suitable: false,
        order: None,
        migratetype: Migratetype::Movable,
    };

    /// A direct compaction for an `order` allocation of `migratetype` at
    /// `COMPACT_PRIO_ASYNC` (`MIGRATE_ASYNC`): skip hints honoured, from
    /// the cached pfns, only movable source pageblocks for a movable
    /// request; `budget_pageblocks` stands in for its contention abort.
    pub fn direct_async(order: Order, migratetype: Migratetype, budget: Option<u64>) -> Self {
        CompactControl {
            ignore_skip_hint: false,
            whole_zone: false,
            use_contiguous: true,
            budget_pageblocks: budget,
            async_movable: migratetype == Migratetype::Movable,
            ignore_block_suitable: false,
            order: Some(order),
            migratetype,
        }
    }

    /// A direct compaction at `COMPACT_PRIO_SYNC_FULL`
    /// (`MIN_COMPACT_PRIORITY`): the whole zone, skip hints ignored, every
    /// pageblock a source, and free pages from a pageblock of any
    /// migratetype (`ignore_block_suitable`).
    pub fn direct_sync(order: Order, migratetype: Migratetype) -> Self {
        CompactControl {
            ignore_block_suitable: true,
            order: Some(order),
            migratetype,
            ..CompactControl::PROC
        }
    }
}

/// What one run did, in `/proc/vmstat`'s terms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompactCounts {
    /// `compact_migrate_scanned`.
    pub migrate_scanned: u64,
    /// `compact_free_scanned`.
    pub free_scanned: u64,
    /// Pages the migrate scanner isolated.
    pub migrate_isolated: u64,
    /// Free pages the free scanner isolated.
    pub free_isolated: u64,
    /// `pageblock_pfn_to_page` calls.
    pub pageblock_checks: u64,
    /// Pageblocks passed over for their skip hint.
    pub skipped_by_hint: u64,
    /// Pageblocks an async run passed over as unsuitable migration
    /// sources (not `MIGRATE_MOVABLE`).
    pub skipped_unsuitable: u64,
    /// Whether the scanners met (`COMPACT_COMPLETE`).
    pub complete: bool,
}

impl CompactCounts {
    /// `compact_isolated`: both scanners' isolations.
    pub fn compact_isolated(&self) -> u64 {
        self.migrate_isolated + self.free_isolated
    }
}

/// A zone's compaction state: skip hints and cached restart pfns
/// (`compact_cached_migrate_pfn`, `compact_cached_free_pfn`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompactState {
    zone_start: Pfn,
    zone_end: Pfn,
    pageblock_nr_pages: u64,
    skip: Vec<bool>,
    cached_migrate_pfn: Pfn,
    cached_free_pfn: Pfn,
    /// `compact_considered`.
    considered: u32,
    /// `compact_defer_shift`.
    defer_shift: u32,
    /// `compact_order_failed`.
    order_failed: u8,
}

impl CompactState {
    /// A fresh state for `zone`: no hints, cached pfns at the zone's ends.
    pub fn new<V, P>(zone: &Zone<V, P>, pageblock_nr_pages: u64) -> CompactState {
        let first = zone.start.get() / pageblock_nr_pages;
        let last = zone.end.get().div_ceil(pageblock_nr_pages);
        let mut s = CompactState {
            zone_start: zone.start,
            zone_end: zone.end,
            pageblock_nr_pages,
            skip: vec![false; (last - first) as usize],
            cached_migrate_pfn: zone.start,
            cached_free_pfn: zone.start,
            considered: 0,
            defer_shift: 0,
            order_failed: 0,
        };
        s.reset_cached_positions();
        s
    }

    /// `reset_cached_positions`.
    fn reset_cached_positions(&mut self) {
        self.cached_migrate_pfn = self.zone_start;
        self.cached_free_pfn = self.block_start(Pfn::new(
            self.zone_end
                .get()
                .saturating_sub(1)
                .max(self.zone_start.get()),
        ));
    }

    /// `__reset_isolation_suitable`: clears every hint and resets the
    /// cached pfns.
    pub fn reset_isolation_suitable(&mut self) {
        self.skip.fill(false);
        self.reset_cached_positions();
    }

    fn block_start(&self, pfn: Pfn) -> Pfn {
        Pfn::new(pfn.get() & !(self.pageblock_nr_pages - 1))
    }

    fn index(&self, pfn: Pfn) -> Option<usize> {
        let i = pfn.get() / self.pageblock_nr_pages;
        i.checked_sub(self.zone_start.get() / self.pageblock_nr_pages)
            .map(|i| i as usize)
            .filter(|&i| i < self.skip.len())
    }

    /// `get_pageblock_skip`.
    pub fn skip_hint(&self, pfn: Pfn) -> bool {
        self.index(pfn).is_some_and(|i| self.skip[i])
    }

    fn set_skip(&mut self, pfn: Pfn) {
        if let Some(i) = self.index(pfn) {
            self.skip[i] = true;
        }
    }

    /// `compact_cached_migrate_pfn`.
    pub fn cached_migrate_pfn(&self) -> Pfn {
        self.cached_migrate_pfn
    }

    /// `compact_cached_free_pfn`.
    pub fn cached_free_pfn(&self) -> Pfn {
        self.cached_free_pfn
    }
}

/// One run's scanners over one zone.
struct Scan<'a, M: BuddyModel, V> {
    alloc: &'a Allocator<M, V>,
    model: &'a M,
    zone: &'a Zone<V, M::Page>,
    cc: CompactControl,
    state: &'a mut CompactState,
    n: CompactCounts,
    block: u64,
    migrate_pfn: Pfn,
    free_pfn: Pfn,
    /// Whether the free scanner takes the free blocks it finds off the
    /// lists (a run that migrates) or only counts them.
    take: bool,
    /// `cc->migratepages`: the pfns the migrate scanner isolated.
    migratepages: Vec<Pfn>,
    /// `cc->freepages`: order-0 pages the free scanner isolated.
    freepages: Vec<Pfn>,
}

/// A compound page's order, from its first tail (`compound_order`).
fn compound_order<M: BuddyModel>(model: &M, pfn: Pfn, page: &M::Page) -> u64 {
    if !page.test(PageFlag::Head) {
        return 0;
    }
    model
        .pfn_to_page(pfn + 1)
        .map_or(0, |tail| tail.private().min(u64::from(Order::LIMIT.get())))
}

/// The migrate scanner's test: an allocation's head, not compound, in a
/// movable pageblock.
/// Whether `pfn`'s owner holds a pin: `isolate_migratepages_block`'s
/// pre-filter for an anonymous folio (no mapping, more references than
/// mappings: `folio_ref_count - 1 > folio_mapcount`) leaves it unisolated,
/// counted only as scanned. pfnlab's owners stand for mapped anonymous
/// pages here; a pinned page-cache page would pass the filter and fail in
/// migration instead.
fn pinned(owners: Option<&Owners>, pfn: Pfn) -> bool {
    owners.is_some_and(|o| o.owner_of(pfn).is_some_and(|id| o.is_pinned(id)))
}

fn movable<M: BuddyModel>(model: &M, pfn: Pfn, page: &M::Page) -> bool {
    page.refcount() > 0
        && !page.test(PageFlag::Reserved)
        && !page.test(PageFlag::Pcp)
        && !page.test(PageFlag::Buddy)
        && !page.test(PageFlag::Head)
        && page.compound_head().is_none()
        && !page.is_zone_device()
        && model.get_pfnblock_migratetype(pfn) == Migratetype::Movable
}

impl<M: BuddyModel, V: Variant> Scan<'_, M, V> {
    fn block_end(&self, block_start: Pfn) -> Pfn {
        Pfn::new((block_start.get() | (self.block - 1)) + 1).min(self.zone.end)
    }

    fn out_of_budget(&self) -> bool {
        self.cc
            .budget_pageblocks
            .is_some_and(|b| self.n.pageblock_checks >= b)
    }

    fn check_block(&mut self, start: Pfn, end: Pfn) -> bool {
        self.n.pageblock_checks += 1;
        if self.cc.use_contiguous {
            pageblock_pfn_to_page(self.model, self.zone, start, end).is_some()
        } else {
            __pageblock_pfn_to_page(self.model, self.zone, start, end).is_some()
        }
    }

    /// `compact_scanners_met`.
    fn met(&self) -> bool {
        self.free_pfn.get() / self.block <= self.migrate_pfn.get() / self.block
    }

    /// `isolate_migratepages`: pageblocks from `migrate_pfn` up to the free
    /// scanner; returns the pages isolated (0: none before the scanners met
    /// or the budget ran out).
    fn isolate_migratepages(&mut self, owners: Option<&Owners>) -> u64 {
        let mut block_start = self
            .state
            .block_start(self.migrate_pfn)
            .max(self.zone.start);
        let mut block_end = self.block_end(block_start);
        while block_end <= self.free_pfn && !self.out_of_budget() {
            let low = self.migrate_pfn.max(block_start);
            let suitable = self.check_block(block_start, block_end);
            if suitable && !self.cc.ignore_skip_hint && self.state.skip_hint(block_start) {
                self.n.skipped_by_hint += 1;
            } else if suitable && !self.suitable_source(block_start) {
                self.n.skipped_unsuitable += 1;
            } else if suitable {
                let (next, isolated) = self.isolate_migratepages_block(low, block_end, owners);
                self.migrate_pfn = next;
                if next >= block_end && isolated == 0 {
                    self.state.set_skip(block_start);
                }
                if isolated > 0 {
                    return isolated;
                }
            }
            block_start = block_end;
            block_end = self.block_end(block_start);
            self.migrate_pfn = block_start;
        }
        0
    }

    /// `isolate_migratepages_block` over `[low, end)`: the pfn it stopped
    /// at and the pages it isolated. With `owners`, only an owned order-0
    /// page is isolated (an owner stands in for `PageLRU`) and an owned
    /// block of a higher order is passed over whole, as a compound page.
    fn isolate_migratepages_block(
        &mut self,
        mut low: Pfn,
        end: Pfn,
        owners: Option<&Owners>,
    ) -> (Pfn, u64) {
        let (mut scanned, mut isolated) = (0, 0);
        while low < end {
            scanned += 1;
            if let Some(page) = self.model.pfn_to_page(low) {
                let owned = owners.map(|o| o.owned_order(low));
                let skip = if page.test(PageFlag::Buddy) {
                    page.private().min(u64::from(Order::LIMIT.get()))
                } else if let Some(Some(order)) = owned {
                    u64::from(order.get())
                } else {
                    compound_order(self.model, low, page)
                };
                if skip > 0 {
                    low = low + ((1 << skip) - 1);
                    scanned += (1 << skip) - 1;
                } else if owned != Some(None)
                    && !pinned(owners, low)
                    && movable(self.model, low, page)
                {
                    self.migratepages.push(low);
                    isolated += 1;
                    if isolated == COMPACT_CLUSTER_MAX {
                        low = low + 1;
                        break;
                    }
                }
            }
            low = low + 1;
        }
        self.n.migrate_scanned += scanned;
        self.n.migrate_isolated += isolated;
        (low.min(end), isolated)
    }

    /// `suitable_migration_source`: any pageblock, except in an async run
    /// for a movable request, which takes only `MIGRATE_MOVABLE` ones.
    fn suitable_source(&self, block_start: Pfn) -> bool {
        !self.cc.async_movable
            || self.model.get_pfnblock_migratetype(block_start) == Migratetype::Movable
    }

    /// `suitable_migration_target`: a pageblock not headed by a free block
    /// of at least `cc->order` (of at least a pageblock for an order-0 or
    /// `-1` run), and `MIGRATE_MOVABLE` unless `ignore_block_suitable`.
    fn suitable_target(&self, block_start: Pfn) -> bool {
        let Some(page) = self.model.pfn_to_page(block_start) else {
            return false;
        };
        let order = match self.cc.order {
            Some(order) if order > Order::ZERO => order,
            _ => self.model.geometry().pageblock_order(),
        };
        if page.test(PageFlag::Buddy) && page.private() >= u64::from(order.get()) {
            return false;
        }
        self.cc.ignore_block_suitable
            || self.model.get_pfnblock_migratetype(block_start) == Migratetype::Movable
    }

    /// `isolate_freepages`: pageblocks from `free_pfn` down to the migrate
    /// scanner's next pageblock, until `wanted` free pages are isolated.
    fn isolate_freepages(&mut self, wanted: u64) {
        let low = self.block_end(self.state.block_start(self.migrate_pfn));
        let mut isolate_start = self.free_pfn;
        let mut block_start = self.state.block_start(isolate_start);
        let mut have = 0;
        while block_start >= low && !self.out_of_budget() {
            let block_end = self.block_end(block_start);
            let ok = self.check_block(block_start, block_end) && self.suitable_target(block_start);
            if ok && !self.cc.ignore_skip_hint && self.state.skip_hint(block_start) {
                self.n.skipped_by_hint += 1;
            } else if ok {
                let start = isolate_start.max(block_start);
                let (next, got) = self.isolate_freepages_block(start, block_end, wanted - have);
                have += got;
                isolate_start = next;
                if next >= block_end {
                    self.state.set_skip(block_start);
                    self.state.cached_free_pfn = self.state.cached_free_pfn.min(block_start);
                }
                if have >= wanted {
                    if next >= block_end {
                        isolate_start = Pfn::new(block_start.get().saturating_sub(self.block));
                    }
                    break;
                }
            }
            let Some(prev) = block_start.get().checked_sub(self.block) else {
                break;
            };
            block_start = Pfn::new(prev);
            isolate_start = block_start;
        }
        self.free_pfn = isolate_start.min(self.free_pfn);
    }

    /// `isolate_freepages_block` over `[start, end)`, up to `wanted`
    /// pages: the pfn it stopped at and the pages it isolated.
    fn isolate_freepages_block(&mut self, start: Pfn, end: Pfn, wanted: u64) -> (Pfn, u64) {
        let (mut pfn, mut scanned, mut isolated) = (start, 0, 0);
        while pfn < end {
            scanned += 1;
            if let Some(page) = self.model.pfn_to_page(pfn) {
                let compound = compound_order(self.model, pfn, page);
                if compound > 0 && pfn.get() + (1 << compound) <= end.get() {
                    pfn = pfn + ((1 << compound) - 1);
                    scanned += (1 << compound) - 1;
                } else if page.test(PageFlag::Buddy) && page.zone_id() == self.zone.id.get() {
                    let order = page.private().min(u64::from(Order::LIMIT.get()));
                    let nr = 1u64 << order;
                    scanned += nr - 1;
                    if self.take && !self.isolate_free_block(pfn, Order::new(order as u8)) {
                        pfn = pfn + 1;
                        continue;
                    }
                    isolated += nr;
                    if isolated >= wanted {
                        pfn = pfn + nr;
                        break;
                    }
                    pfn = pfn + (nr - 1);
                }
            }
            pfn = pfn + 1;
        }
        self.n.free_scanned += scanned;
        self.n.free_isolated += isolated;
        (pfn.min(end), isolated)
    }
}

impl<'a, M: BuddyModel, V: Variant> Scan<'a, M, V> {
    /// The scanners of a run over zone `zid`: at the zone's ends with
    /// `whole_zone`, else at `state`'s cached pfns (a state of another
    /// span starts afresh).
    fn start(
        alloc: &'a Allocator<M, V>,
        zid: ZoneId,
        state: &'a mut CompactState,
        cc: CompactControl,
        take: bool,
    ) -> Result<Scan<'a, M, V>, CompactError> {
        let era = alloc.options().era;
        if !era.has_compaction() {
            return Err(CompactError::NoCompaction(era));
        }
        let zone = alloc.zone(zid).ok_or(CompactError::NoZone(zid))?;
        let block = alloc.model().geometry().pageblock_nr_pages();
        if state.zone_start != zone.start || state.zone_end != zone.end {
            *state = CompactState::new(zone, block);
        }
        let (migrate_pfn, free_pfn) = if cc.whole_zone {
            let fresh = CompactState::new(zone, block);
            (fresh.cached_migrate_pfn, fresh.cached_free_pfn)
        } else {
            (state.cached_migrate_pfn, state.cached_free_pfn)
        };
        Ok(Scan {
            alloc,
            model: alloc.model(),
            zone,
            cc,
            state,
            n: CompactCounts::default(),
            block,
            migrate_pfn,
            free_pfn,
            take,
            migratepages: Vec::new(),
            freepages: Vec::new(),
        })
    }

    /// The end of a run: the cached pfns reset when the scanners met, kept
    /// where they stopped otherwise; the counts.
    fn finish(self) -> CompactCounts {
        let mut n = self.n;
        n.complete = self.free_pfn.get() / self.block <= self.migrate_pfn.get() / self.block;
        if n.complete {
            self.state.reset_cached_positions();
        } else {
            self.state.cached_migrate_pfn = self.migrate_pfn;
            self.state.cached_free_pfn = self.state.block_start(self.free_pfn);
        }
        n.complete = n.complete || self.zone.start >= self.zone.end;
        n
    }
}

/// The scanners alone over zone `zid` of `alloc`, nothing moved: every
/// isolated page is put back at once, as after a `migrate_pages` that
/// moved none, and the free scanner counts the free pages it would
/// isolate without taking them. The scanners run until they meet (or
/// the budget ends), counting as `/proc/vmstat` counts and keeping
/// `state`'s hints and cached pfns. [`compact_zone`] is the run that
/// migrates.
pub fn compact_zone_scan<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    zid: ZoneId,
    state: &mut CompactState,
    cc: CompactControl,
) -> Result<CompactCounts, CompactError> {
    let mut scan = Scan::start(alloc, zid, state, cc, false)?;
    while !scan.met() && !scan.out_of_budget() {
        let isolated = scan.isolate_migratepages(None);
        scan.migratepages.clear();
        if isolated > 0 {
            scan.isolate_freepages(isolated);
        }
    }
    Ok(scan.finish())
}
