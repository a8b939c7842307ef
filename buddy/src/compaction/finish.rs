//! When compaction is worth starting, when a run is done, and when a zone
//! that failed is left alone: `compaction_suitable`, the fragmentation
//! index, `compact_finished` and the deferral of mm/compaction.c (all
//! from 2.6.35: `4f92e2586b43` brought deferral, `5e7719058079` the
//! `extfrag_threshold`).

use sparsemem::{Migratetype, Order};

use super::{CompactState, Scan};
use crate::types::{BuddyModel, PAGE_ALLOC_COSTLY_ORDER};
use crate::variant::Variant;
use crate::zone::{FALLBACKS, Zone};

/// `COMPACT_MAX_DEFER_SHIFT` (mm/compaction.c): a zone that keeps failing
/// skips at most `(1 << 6) - 1` attempts in a row.
pub const COMPACT_MAX_DEFER_SHIFT: u32 = 6;

/// `sysctl_extfrag_threshold`'s default (`vm.extfrag_threshold`, 2.6.35):
/// a costly request is not compacted for while the fragmentation index is
/// at most this (the failure is a lack of memory, not fragmentation).
pub const EXTFRAG_THRESHOLD: i32 = 500;

/// How a compaction run ended (`enum compact_result`'s values that the
/// model reaches).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompactResult {
    /// `COMPACT_SKIPPED`: `compaction_suitable` said no.
    Skipped,
    /// `COMPACT_DEFERRED`: a direct compaction passed over every zone it
    /// did not skip, each deferred (`try_to_compact_pages`' result, never
    /// a run's).
    Deferred,
    /// `COMPACT_CONTINUE`: the run goes on.
    Continue,
    /// `COMPACT_COMPLETE`: the scanners met on a whole-zone run.
    Complete,
    /// `COMPACT_PARTIAL_SKIPPED`: the scanners met on a run that started
    /// at the cached pfns.
    PartialSkipped,
    /// `COMPACT_CONTENDED`: an async run's abort (the budget), or the
    /// free scanner ran dry before the scanners met.
    Contended,
    /// `COMPACT_SUCCESS`: a free block of the order is on the request's
    /// lists or one it may fall back to.
    Success,
}

impl CompactResult {
    /// The value's place in `enum compact_result`
    /// (include/linux/compaction.h), whose order `try_to_compact_pages`
    /// takes the largest of over the zones it tries.
    pub(super) fn rank(self) -> u8 {
        match self {
            CompactResult::Skipped => 0,
            CompactResult::Deferred => 1,
            CompactResult::Continue => 2,
            CompactResult::Complete => 3,
            CompactResult::PartialSkipped => 4,
            CompactResult::Contended => 5,
            CompactResult::Success => 6,
        }
    }
}

/// `compact_gap(order)`: the free pages compaction wants beyond the
/// watermark, twice the request, as room for the targets.
pub fn compact_gap(order: Order) -> u64 {
    2 << order.get()
}

/// `struct contig_page_info` (mm/vmstat.c): what the fragmentation
/// indices and the proactive score are computed from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ContigPageInfo {
    /// Free pages.
    pub free_pages: u64,
    /// Free blocks of every order.
    pub free_blocks_total: u64,
    /// Free blocks of the requested order the free memory holds whole.
    pub free_blocks_suitable: u64,
}

/// `fill_contig_page_info` (mm/vmstat.c) over `nr_free` (free blocks per
/// order) for a request of `order`.
pub fn fill_contig_page_info(nr_free: &[u64], order: usize) -> ContigPageInfo {
    let mut info = ContigPageInfo::default();
    for (o, &blocks) in nr_free.iter().enumerate() {
        info.free_blocks_total += blocks;
        info.free_pages += blocks << o;
        if o >= order {
            info.free_blocks_suitable += blocks << (o - order);
        }
    }
    info
}

/// `__fragmentation_index` over a zone's `nr_free` (mm/vmstat.c): -1000
/// when a free block of `order` or more exists; 0 with no free blocks;
/// otherwise `1000 - (1000 + free_pages * 1000 / 2^order) / blocks`, near
/// 0 for a lack of memory and near 1000 for fragmentation.
pub fn fragmentation_index(nr_free: &[u64], order: Order) -> i32 {
    let info = fill_contig_page_info(nr_free, order.index());
    if info.free_blocks_total == 0 {
        return 0;
    }
    if info.free_blocks_suitable > 0 {
        return -1000;
    }
    let rest = (1000 + info.free_pages * 1000 / order.nr_pages()) / info.free_blocks_total;
    (1000 - rest as i64) as i32
}

/// `compaction_suitable` (6.15's form, the watermark the caller's): an
/// order-0 watermark check at `watermark + compact_gap(order)`, raised for
/// a costly order by the zone's low less its min watermark (as
/// `__compaction_suitable` does), and, for a costly order, a fragmentation
/// index above [`EXTFRAG_THRESHOLD`] (or -1000).
pub fn compaction_suitable<V: Variant, P: sparsemem::BuddyPage>(
    zone: &Zone<V, P>,
    order: Order,
    watermark: u64,
) -> bool {
    let costly = order.get() > PAGE_ALLOC_COSTLY_ORDER;
    let mut watermark = watermark + compact_gap(order);
    if costly {
        let w = zone.watermarks();
        watermark += w.low - w.min;
    }
    if !zone.zone_watermark_ok(Order::ZERO, watermark, zone.kind) {
        return false;
    }
    if !costly {
        return true;
    }
    let index = fragmentation_index(&zone.nr_free(), order);
    !(0..=EXTFRAG_THRESHOLD).contains(&index)
}

/// The free-list half of `__zone_watermark_ok` for `order`: a free block
/// of `order` or more on a list of the three mobility types (the
/// `MIGRATE_HIGHATOMIC` reserve is not the request's).
pub(super) fn has_free_block<V: Variant, P: sparsemem::BuddyPage>(
    zone: &Zone<V, P>,
    order: Order,
) -> bool {
    let area = zone.free_area.lock();
    let types = [
        Migratetype::Unmovable,
        Migratetype::Movable,
        Migratetype::Reclaimable,
    ];
    (order.index()..=area.max_order().index())
        .any(|o| types.iter().any(|mt| !area.lists[o][mt.index()].is_empty()))
}

impl CompactState {
    /// `defer_compaction`: a run for `order` failed; the zone skips the
    /// next `(1 << shift) - 1` attempts at that order or above.
    pub fn defer_compaction(&mut self, order: Order) {
        self.considered = 0;
        self.defer_shift = (self.defer_shift + 1).min(COMPACT_MAX_DEFER_SHIFT);
        self.order_failed = self.order_failed.min(order.get());
    }

    /// `compaction_deferred`: whether an attempt at `order` is skipped
    /// (each call counts as one attempt considered).
    pub fn compaction_deferred(&mut self, order: Order) -> bool {
        if order.get() < self.order_failed {
            return false;
        }
        let limit = 1u32 << self.defer_shift;
        self.considered = (self.considered + 1).min(limit);
        self.considered < limit
    }

    /// `compaction_defer_reset`: a run for `order` succeeded; with
    /// `alloc_success` the deferral is forgotten.
    pub fn compaction_defer_reset(&mut self, order: Order, alloc_success: bool) {
        if alloc_success {
            self.considered = 0;
            self.defer_shift = 0;
        }
        if order.get() >= self.order_failed {
            self.order_failed = order.get() + 1;
        }
    }

    /// `compaction_restarting`: deferred as long as it can be and every
    /// skipped attempt considered, so the next run clears the skip hints.
    pub fn compaction_restarting(&self, order: Order) -> bool {
        order.get() >= self.order_failed
            && self.defer_shift == COMPACT_MAX_DEFER_SHIFT
            && self.considered >= 1 << COMPACT_MAX_DEFER_SHIFT
    }

    /// `compact_defer_shift`.
    pub fn defer_shift(&self) -> u32 {
        self.defer_shift
    }
}

impl<M: BuddyModel, V: Variant> Scan<'_, M, V> {
    /// `__compact_finished`: the scanners met; an order's free block
    /// found at a pageblock's end; the budget spent; or go on.
    pub(super) fn compact_finished(&self) -> CompactResult {
        if self.met() {
            return if self.cc.whole_zone {
                CompactResult::Complete
            } else {
                CompactResult::PartialSkipped
            };
        }
        if let Some(order) = self.cc.order
            && self.migrate_pfn.get().is_multiple_of(self.block)
            && self.free_block_for(order)
        {
            return CompactResult::Success;
        }
        if self.out_of_budget() {
            return CompactResult::Contended;
        }
        CompactResult::Continue
    }

    /// Whether a free block of `order` or more is on the request's list,
    /// or on a list `find_suitable_fallback` would claim from.
    fn free_block_for(&self, order: Order) -> bool {
        let area = self.zone.free_area.lock();
        let mt = if area.migratetypes {
            self.cc.migratetype
        } else {
            Migratetype::Movable
        };
        let pageblock_order = self.model.geometry().pageblock_order().index();
        (order.index()..=area.max_order().index()).any(|o| {
            if !area.lists[o][mt.index()].is_empty() {
                return true;
            }
            let claimable = o >= pageblock_order / 2
                || mt == Migratetype::Unmovable
                || mt == Migratetype::Reclaimable;
            area.migratetypes
                && claimable
                && FALLBACKS
                    .get(mt.index())
                    .is_some_and(|fb| fb.iter().any(|f| !area.lists[o][f.index()].is_empty()))
        })
    }
}
