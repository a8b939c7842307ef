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
//! pfnlab does not have, is left out, and so are `should_compact_retry`'s
//! retries at a higher priority (the caller picks the priority).

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

/// `enum compact_priority`: how hard a direct compaction tries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompactPriority {
    /// `COMPACT_PRIO_ASYNC` (`INIT_COMPACT_PRIORITY`): async, from the
    /// cached pfns, skip hints honoured, deferred zones skipped; a
    /// failure does not defer.
    Async,
    /// `COMPACT_PRIO_SYNC_FULL` (`MIN_COMPACT_PRIORITY`): the whole zone,
    /// skip hints ignored, deferral ignored.
    SyncFull,
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
/// module documentation), compacts each zone of its zonelist at
/// `prio` (`try_to_compact_pages`: a deferred zone is skipped unless
/// `SyncFull`; a zone that succeeds resets its deferral and ends the walk;
/// a non-async run that completes without success defers the zone), and
/// tries once more. `vmstat` counts `compact_stall` when a zone was
/// compacted, then `compact_success` or `compact_fail`, and every run's
/// scanning and migration. `states` holds each zone's compaction state
/// by zone index ([`CompactState::for_zones`]).
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
    // Under defrag_mode, the allocation without compaction's help keeps
    // ALLOC_NOFRAGMENT to the end; the fallback waits for compaction.
    let try_alloc = || {
        if defrag_mode {
            alloc.alloc_pages_nofragment(order, gfp, node)
        } else {
            alloc.alloc_pages(order, gfp, node, None)
        }
    };
    // "Reclaim/compaction failed to prevent the fallback".
    let fall_back = |failed: Result<Pfn, RequestError>| {
        if defrag_mode {
            alloc.alloc_pages(order, gfp, node, None)
        } else {
            failed
        }
    };
    let first = try_alloc();
    if first.is_ok() {
        return first;
    }
    let ac = alloc.prepare_alloc_pages(gfp)?;
    if !compaction_wanted(alloc, &ac, order, defrag_mode) {
        return fall_back(first);
    }
    let ran = try_to_compact_pages(alloc, &ac, (order, prio), node, owners, states, vmstat)?;
    if !ran {
        return fall_back(first);
    }
    vmstat.compact_stall += 1;
    let got = try_alloc();
    match got {
        Ok(pfn) => {
            vmstat.compact_success += 1;
            let zone = alloc.zones().iter().position(|z| z.spans(pfn));
            if let Some(state) = zone.and_then(|i| states.get_mut(i)) {
                state.compaction_defer_reset(order, true);
            }
            got
        }
        Err(_) => {
            vmstat.compact_fail += 1;
            fall_back(got)
        }
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
    let gfp = ac.gfp;
    let above_zero = order > Order::ZERO;
    let costly = order.get() > PAGE_ALLOC_COSTLY_ORDER;
    let unmovable = above_zero && ac.migratetype != Migratetype::Movable;
    let pfmemalloc = gfp.pfmemalloc_allowed();
    let first = (costly || unmovable) && !pfmemalloc;
    (first || (defrag_mode && above_zero))
        && gfp.contains(Gfp::DIRECT_RECLAIM)
        && gfp.contains(Gfp::IO)
        && alloc.options().era.has_compaction()
}

/// `try_to_compact_pages` for the request `ac` of `order`: each zone of
/// `node`'s zonelist the request may use, compacted at `prio` (a deferred zone skipped unless `SyncFull`; a zone that
/// succeeds resets its deferral and ends the walk; a non-async run that
/// completes without success defers the zone). Returns whether a zone
/// was compacted or deferred (a stall).
#[allow(clippy::too_many_arguments)]
fn try_to_compact_pages<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    ac: &AllocContext,
    (order, prio): (Order, CompactPriority),
    node: NodeId,
    owners: &mut Owners,
    states: &mut [CompactState],
    vmstat: &mut CompactVmstat,
) -> Result<bool, RequestError> {
    let mut ran = false;
    for &zid in alloc.zonelist(node, ac.gfp)? {
        let Some(zone) = alloc.zone(zid) else {
            continue;
        };
        let Some(state) = states.get_mut(zid.index()) else {
            continue;
        };
        if zone.kind > ac.highest_zone {
            continue;
        }
        if prio != CompactPriority::SyncFull && state.compaction_deferred(order) {
            // `COMPACT_DEFERRED`: not `SKIPPED`, so it counts as a stall.
            ran = true;
            continue;
        }
        let cc = match prio {
            CompactPriority::Async => CompactControl::direct_async(order, ac.migratetype, None),
            CompactPriority::SyncFull => CompactControl::direct_sync(order, ac.migratetype),
        };
        let run = match compact_zone(alloc, zid, state, owners, cc) {
            Ok(run) => run,
            Err(CompactError::NoZone(_) | CompactError::NoCompaction(_)) => continue,
        };
        vmstat.account(&run);
        ran |= run.result != CompactResult::Skipped;
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
    Ok(ran)
}
