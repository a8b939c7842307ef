//! Direct compaction for a request the slow path compacts for (a costly
//! order, or a non-movable one above order 0): `__alloc_pages_direct_compact`
//! and `try_to_compact_pages` (mm/page_alloc.c, mm/compaction.c; 2.6.35's
//! `56de7263fcf3`), called by the caller of the allocator with the owners
//! and the zones' compaction states, since the allocator keeps neither.
//!
//! Under `vm.defrag_mode` (6.15) it is also where the slow path compacts
//! before it lets a request fall back into another migratetype's
//! pageblock: the tries before and after compaction keep
//! `ALLOC_NOFRAGMENT`, every order above 0 compacts (the kernel's
//! `__alloc_pages_direct_compact` after reclaim; order 0 never does), and
//! only a request that still fails asks once more without the flag, as
//! `__alloc_pages_slowpath` does once reclaim and compaction have failed.
//! Without the sysctl, a costly order and a non-movable order above 0
//! compact here, as the slow path's first compaction does: the kernel's
//! compaction of smaller movable orders after direct reclaim, which
//! pfnlab does not have, is left out. [`alloc_pages_direct_compact`]
//! compacts once at the priority its caller picks;
//! [`alloc_pages_direct_compact_retry`](super::alloc_pages_direct_compact_retry)
//! is the slow path's loop, which starts at `COMPACT_PRIO_ASYNC` and
//! raises the priority as `should_compact_retry` does.

use sparsemem::{Migratetype, NodeId, Order, Pfn};

use super::finish::CompactResult;
use super::run::{CompactVmstat, compact_zone};
use super::{CompactControl, CompactError, CompactState};
use crate::alloc::Allocator;
use crate::error::RequestError;
use crate::gfp::{AllocContext, Gfp};
use crate::migrate::Owners;
use crate::types::{BuddyModel, PAGE_ALLOC_COSTLY_ORDER};
use crate::variant::Variant;

/// `enum compact_priority` (include/linux/compaction.h, Linux 6.18): how
/// hard a direct compaction tries. What each sets is
/// `compact_zone_order`'s (mm/compaction.c): see [`CompactControl::direct`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompactPriority {
    /// `COMPACT_PRIO_ASYNC` (`INIT_COMPACT_PRIORITY`): `MIGRATE_ASYNC`,
    /// from the cached pfns, skip hints honoured, deferred zones skipped;
    /// a failure does not defer.
    Async,
    /// `COMPACT_PRIO_SYNC_LIGHT` (`DEF_COMPACT_PRIORITY`, and
    /// `MIN_COMPACT_COSTLY_PRIORITY`: the most a costly order gets):
    /// `MIGRATE_SYNC_LIGHT`, from the cached pfns, skip hints and
    /// deferral honoured, free pages only from movable pageblocks; a run
    /// that ends with the scanners met defers the zone.
    SyncLight,
    /// `COMPACT_PRIO_SYNC_FULL` (`MIN_COMPACT_PRIORITY`):
    /// `MIGRATE_SYNC_LIGHT` too, but the whole zone, skip hints, deferral
    /// and the free scanner's pageblock type ignored
    /// (`ignore_block_suitable`).
    SyncFull,
}

impl CompactPriority {
    /// `INIT_COMPACT_PRIORITY`: the slow path's first direct compaction.
    pub const INIT: CompactPriority = CompactPriority::Async;
    /// `DEF_COMPACT_PRIORITY`: the slow path's compaction after reclaim.
    pub const DEF: CompactPriority = CompactPriority::SyncLight;
    /// `MIN_COMPACT_PRIORITY`: the highest priority.
    pub const MIN: CompactPriority = CompactPriority::SyncFull;
    /// `MIN_COMPACT_COSTLY_PRIORITY`: the highest a costly order gets
    /// (Linux 4.10, "mm, compaction: restrict full priority to non-costly
    /// orders").
    pub const MIN_COSTLY: CompactPriority = CompactPriority::SyncLight;

    /// The kernel's value: lower is a higher priority.
    fn value(self) -> u8 {
        match self {
            CompactPriority::SyncFull => 0,
            CompactPriority::SyncLight => 1,
            CompactPriority::Async => 2,
        }
    }

    /// `(*compact_priority)--`: the next higher priority, if it is not
    /// past `min`.
    pub fn raise_toward(self, min: CompactPriority) -> Option<CompactPriority> {
        if self.value() <= min.value() {
            return None;
        }
        Some(match self {
            CompactPriority::Async => CompactPriority::SyncLight,
            _ => CompactPriority::SyncFull,
        })
    }
}

impl CompactControl {
    /// A direct compaction at `COMPACT_PRIO_SYNC_LIGHT`
    /// (`DEF_COMPACT_PRIORITY`, `MIGRATE_SYNC_LIGHT`): from the cached
    /// pfns, skip hints honoured, every pageblock a source, free pages
    /// only from `MIGRATE_MOVABLE` pageblocks.
    pub fn direct_sync_light(order: Order, migratetype: Migratetype) -> Self {
        CompactControl {
            ignore_skip_hint: false,
            whole_zone: false,
            use_contiguous: true,
            budget_pageblocks: None,
            async_movable: false,
            ignore_block_suitable: false,
            order: Some(order),
            migratetype,
        }
    }

    /// `compact_zone_order`'s control for a direct compaction at `prio`
    /// (mm/compaction.c, Linux 6.18): `MIGRATE_ASYNC` at
    /// `COMPACT_PRIO_ASYNC` and `MIGRATE_SYNC_LIGHT` above it;
    /// `whole_zone`, `ignore_skip_hint` and `ignore_block_suitable` only at
    /// `MIN_COMPACT_PRIORITY`. pfnlab's async run has no budget here (no
    /// contention to abort on).
    pub fn direct(prio: CompactPriority, order: Order, migratetype: Migratetype) -> Self {
        match prio {
            CompactPriority::Async => CompactControl::direct_async(order, migratetype, None),
            CompactPriority::SyncLight => CompactControl::direct_sync_light(order, migratetype),
            CompactPriority::SyncFull => CompactControl::direct_sync(order, migratetype),
        }
    }
}

impl CompactState {
    /// A fresh state for each of `alloc`'s zones, by zone index.
    pub fn for_zones<M: BuddyModel, V: Variant>(alloc: &Allocator<M, V>) -> Vec<CompactState> {
        let block = alloc.model().geometry().pageblock_nr_pages();
        alloc
            .zones()
            .iter()
            .map(|z| CompactState::new(z, block))
            .collect()
    }
}

/// The allocation of `order` with `gfp` on `node`, with direct compaction
/// where the slow path would run it: a request that fails, may reclaim
/// (`__GFP_DIRECT_RECLAIM`) and may do I/O (`__GFP_IO`), of a costly order
/// (above `PAGE_ALLOC_COSTLY_ORDER`) or of an order above 0 that is not
/// movable (under `vm.defrag_mode` any order above 0, with the fallback
/// into another migratetype's pageblock only after compaction: see the
/// module documentation), compacts each zone of its zonelist once at
/// `prio` (`try_to_compact_pages`: a deferred zone is skipped below
/// `SyncFull`; a zone that succeeds resets its deferral and ends the
/// walk; a non-async run that ends with the scanners met without success
/// defers the zone), and tries once more. `vmstat` counts `compact_stall`
/// when a zone was compacted or deferred, then `compact_success` or
/// `compact_fail`, and every run's scanning and migration. `states` holds
/// each zone's compaction state by zone index
/// ([`CompactState::for_zones`]).
#[allow(clippy::too_many_arguments)]
pub fn alloc_pages_direct_compact<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    order: Order,
    gfp: Gfp,
    node: NodeId,
    owners: &mut Owners,
    states: &mut [CompactState],
    prio: CompactPriority,
    vmstat: &mut CompactVmstat,
) -> Result<Pfn, RequestError> {
    let defrag_mode = alloc.options().defrag_mode;
    let first = try_alloc(alloc, order, gfp, node);
    if !matches!(first, Err(RequestError::NoMemory { .. })) {
        // A page, or a request the allocator refuses outright.
        return first;
    }
    let ac = alloc.prepare_alloc_pages(gfp)?;
    if !compaction_wanted(alloc, &ac, order, defrag_mode) {
        return fall_back(alloc, order, gfp, node, first);
    }
    let direct = Direct {
        alloc,
        ac: &ac,
        order,
        node,
    };
    match direct.compact(prio, owners, states, vmstat)? {
        (Some(pfn), _) => Ok(pfn),
        (None, _) => fall_back(alloc, order, gfp, node, first),
    }
}

/// The allocation the slow path tries around compaction: under
/// `vm.defrag_mode` it keeps `ALLOC_NOFRAGMENT` to the end, so the
/// fallback waits for compaction.
pub(super) fn try_alloc<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    order: Order,
    gfp: Gfp,
    node: NodeId,
) -> Result<Pfn, RequestError> {
    if alloc.options().defrag_mode {
        alloc.alloc_pages_nofragment(order, gfp, node)
    } else {
        alloc.alloc_pages(order, gfp, node, None)
    }
}

/// "Reclaim/compaction failed to prevent the fallback": under
/// `vm.defrag_mode` one more try without `ALLOC_NOFRAGMENT`, for a request
/// that would retry; otherwise `failed`.
pub(super) fn fall_back<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    order: Order,
    gfp: Gfp,
    node: NodeId,
    failed: Result<Pfn, RequestError>,
) -> Result<Pfn, RequestError> {
    if alloc.options().defrag_mode {
        alloc.alloc_pages(order, gfp, node, None)
    } else {
        failed
    }
}

/// Whether the slow path compacts for the request `ac` of `order` here.
///
/// Its first direct compaction, before any reclaim (`__alloc_pages_slowpath`
/// in mm/page_alloc.c): a request that may reclaim, of a costly
/// order or of any order above 0 that is not movable (whose fallback
/// would mix a pageblock), and that may not ignore the watermarks
/// (`gfp_pfmemalloc_allowed`: those are served from the reserves first).
/// Under `vm.defrag_mode`, any order above 0 once the reserves are tried.
/// Either way only with `__GFP_IO` (`gfp_compaction_allowed`, tested in
/// `try_to_compact_pages`), and in an era with compaction.
fn compaction_wanted<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    ac: &AllocContext,
    order: Order,
    defrag_mode: bool,
) -> bool {
    let above_zero = order > Order::ZERO;
    let first = first_compaction(ac, order);
    (first || (defrag_mode && above_zero && ac.gfp.contains(Gfp::DIRECT_RECLAIM)))
        && ac.gfp.contains(Gfp::IO)
        && alloc.options().era.has_compaction()
}

/// The slow path's gate for its first compaction, before reclaim
/// (`__alloc_pages_slowpath`, Linux 6.18): a request that may reclaim, of
/// a costly order or a non-movable order above 0, that may not ignore the
/// watermarks.
pub(super) fn first_compaction(ac: &AllocContext, order: Order) -> bool {
    let costly = order.get() > PAGE_ALLOC_COSTLY_ORDER;
    let unmovable = order > Order::ZERO && ac.migratetype != Migratetype::Movable;
    (costly || unmovable) && !ac.gfp.pfmemalloc_allowed() && ac.gfp.contains(Gfp::DIRECT_RECLAIM)
}

/// One request's direct compactions: what `__alloc_pages_direct_compact`
/// works with.
pub(super) struct Direct<'a, M: BuddyModel, V> {
    pub(super) alloc: &'a Allocator<M, V>,
    pub(super) ac: &'a AllocContext,
    pub(super) order: Order,
    pub(super) node: NodeId,
}

impl<M: BuddyModel, V: Variant> Direct<'_, M, V> {
    /// `__alloc_pages_direct_compact` at `prio`: nothing for order 0;
    /// `try_to_compact_pages`, then, unless it skipped every zone, a
    /// stall and one more try, counted as a success (the zone's deferral
    /// reset) or a failure. Returns the page and `try_to_compact_pages`'
    /// result.
    pub(super) fn compact(
        &self,
        prio: CompactPriority,
        owners: &mut Owners,
        states: &mut [CompactState],
        vmstat: &mut CompactVmstat,
    ) -> Result<(Option<Pfn>, CompactResult), RequestError> {
        if self.order == Order::ZERO {
            return Ok((None, CompactResult::Skipped));
        }
        let result = self.try_to_compact_pages(prio, owners, states, vmstat)?;
        if result == CompactResult::Skipped {
            return Ok((None, result));
        }
        vmstat.compact_stall += 1;
        match try_alloc(self.alloc, self.order, self.ac.gfp, self.node) {
            Ok(pfn) => {
                vmstat.compact_success += 1;
                let zone = self.alloc.zones().iter().position(|z| z.spans(pfn));
                if let Some(state) = zone.and_then(|i| states.get_mut(i)) {
                    state.compaction_defer_reset(self.order, true);
                }
                Ok((Some(pfn), result))
            }
            Err(_) => {
                vmstat.compact_fail += 1;
                Ok((None, result))
            }
        }
    }

    /// `try_to_compact_pages` at `prio` (mm/compaction.c, Linux 6.18):
    /// `COMPACT_SKIPPED` without `__GFP_IO` or in an era without
    /// compaction; else each zone of the zonelist the request may use, a
    /// deferred zone passed over (`COMPACT_DEFERRED`) below
    /// `MIN_COMPACT_PRIORITY`, the others compacted with
    /// [`CompactControl::direct`]; a zone that succeeds resets its
    /// deferral and ends the walk; a run above `COMPACT_PRIO_ASYNC` that
    /// ends with the scanners met defers its zone. Returns the largest
    /// result in `enum compact_result`'s order.
    fn try_to_compact_pages(
        &self,
        prio: CompactPriority,
        owners: &mut Owners,
        states: &mut [CompactState],
        vmstat: &mut CompactVmstat,
    ) -> Result<CompactResult, RequestError> {
        let (alloc, ac, order) = (self.alloc, self.ac, self.order);
        let mut rc = CompactResult::Skipped;
        if !ac.gfp.contains(Gfp::IO) || !alloc.options().era.has_compaction() {
            return Ok(rc);
        }
        let max = |a: CompactResult, b: CompactResult| if b.rank() > a.rank() { b } else { a };
        for &zid in alloc.zonelist(self.node, ac.gfp)? {
            let Some(zone) = alloc.zone(zid) else {
                continue;
            };
            let Some(state) = states.get_mut(zid.index()) else {
                continue;
            };
            if zone.kind > ac.highest_zone {
                continue;
            }
            if prio != CompactPriority::MIN && state.compaction_deferred(order) {
                rc = max(rc, CompactResult::Deferred);
                continue;
            }
            let cc = CompactControl::direct(prio, order, ac.migratetype);
            let run = match compact_zone(alloc, zid, state, owners, cc) {
                Ok(run) => run,
                Err(CompactError::NoZone(_) | CompactError::NoCompaction(_)) => continue,
            };
            vmstat.account(&run);
            rc = max(rc, run.result);
            match run.result {
                CompactResult::Success => {
                    state.compaction_defer_reset(order, false);
                    break;
                }
                CompactResult::Complete | CompactResult::PartialSkipped
                    if prio != CompactPriority::Async =>
                {
                    state.defer_compaction(order);
                }
                _ => {}
            }
        }
        Ok(rc)
    }
}
