//! The slow path's compaction loop: `__alloc_pages_slowpath`'s first
//! direct compaction at `INIT_COMPACT_PRIORITY`, then, on each pass of its
//! `retry:` loop, one at the current priority, with `should_compact_retry`
//! deciding whether to go round again and at what priority (mm/page_alloc.c,
//! Linux 6.18; `should_compact_retry` in the form Johannes Weiner's "mm:
//! compaction: simplify should_compact_retry()" gave it in 6.5).
//!
//! What the kernel does between two compactions and pfnlab leaves out:
//! direct reclaim (`__alloc_pages_direct_reclaim`, which also drains the
//! per-CPU lists), `should_reclaim_retry` (which, while some zone would
//! pass its min watermark at the order were every reclaimable page freed,
//! loops back without asking `should_compact_retry`, up to
//! `MAX_RECLAIM_RETRIES` passes without progress), and, once both say no,
//! the OOM killer, whose kills send a non-costly request round again.
//! The kernel asks `should_compact_retry` only when reclaim made progress
//! (`did_some_progress`). pfnlab has no reclaimable pages, so each pass
//! here is taken as one on which reclaim reported progress, freed nothing
//! compaction could use, and `should_reclaim_retry` said no, as it does
//! when no zone has a free block of the order. The count of compactions is
//! then the kernel's for such a zone. With no reclaim progress at all the
//! kernel never asks `should_compact_retry`: it stops after its second
//! compaction unless `should_reclaim_retry` sends it round, and a
//! non-costly request then goes to the OOM killer; where
//! `should_reclaim_retry` says yes, it compacts again without counting a
//! retry, so more often than here.
//!
//! A `COMPACT_SKIPPED` try ends the loop: the kernel retries it while
//! `compaction_zonelist_suitable` finds a zone that reclaim could lift
//! over compaction's watermark, and with nothing reclaimed the next try
//! here would be the same try again.

use sparsemem::{NodeId, Order, Pfn};

use super::CompactState;
use super::direct::{CompactPriority, Direct, fall_back, first_compaction, try_alloc};
use super::finish::CompactResult;
use super::run::CompactVmstat;
use crate::alloc::Allocator;
use crate::error::RequestError;
use crate::gfp::Gfp;
use crate::migrate::Owners;
use crate::types::{BuddyModel, PAGE_ALLOC_COSTLY_ORDER};
use crate::variant::Variant;

/// `MAX_COMPACT_RETRIES` (mm/page_alloc.c): compactions in a row that
/// report success without the allocation succeeding before the slow path
/// raises the priority or gives up; a quarter of it for a costly order.
pub const MAX_COMPACT_RETRIES: u32 = 16;

/// One direct compaction of the slow path: its priority and
/// `try_to_compact_pages`' result (what the `mm_compaction_try_to_compact_pages`
/// and `compact_retry` tracepoints show).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactTry {
    /// The priority it ran at.
    pub priority: CompactPriority,
    /// The largest result over the zones it tried.
    pub result: CompactResult,
}

/// `should_compact_retry` (mm/page_alloc.c, 6.5 on) for a request of
/// `order` whose last compaction ended `result`: never for order 0 or a
/// `COMPACT_SKIPPED` try (see the module documentation); after a
/// `COMPACT_SUCCESS` that the allocation did not profit from, again at the
/// same priority while `retries` stays within [`MAX_COMPACT_RETRIES`]
/// (a quarter of it for a costly order); otherwise at the next higher
/// priority, `retries` cleared, until `MIN_COMPACT_PRIORITY`
/// (`MIN_COMPACT_COSTLY_PRIORITY` for a costly order) has been tried.
pub fn should_compact_retry(
    order: Order,
    result: CompactResult,
    priority: &mut CompactPriority,
    retries: &mut u32,
) -> bool {
    if order == Order::ZERO || result == CompactResult::Skipped {
        return false;
    }
    let costly = order.get() > PAGE_ALLOC_COSTLY_ORDER;
    if result == CompactResult::Success {
        let max = if costly {
            MAX_COMPACT_RETRIES / 4
        } else {
            MAX_COMPACT_RETRIES
        };
        *retries += 1;
        if *retries <= max {
            return true;
        }
    }
    let min = if costly {
        CompactPriority::MIN_COSTLY
    } else {
        CompactPriority::MIN
    };
    match priority.raise_toward(min) {
        Some(higher) => {
            *priority = higher;
            *retries = 0;
            true
        }
        None => false,
    }
}

/// The allocation of `order` with `gfp` on `node` through the slow path's
/// compaction loop (see the module documentation for what it leaves out):
///
/// 1. the allocation; if it fails and the request may reclaim and do I/O,
///    then for a costly order or a non-movable order above 0 (and not one
///    that may ignore the watermarks) a direct compaction at
///    `INIT_COMPACT_PRIORITY` and a try. A costly `__GFP_NORETRY` request
///    whose compaction was skipped or deferred fails here, and otherwise
///    stays at `COMPACT_PRIO_ASYNC` from here on;
/// 2. each pass after: the allocation, then a direct compaction at the
///    current priority (`DEF_COMPACT_PRIORITY` at first) and a try; a
///    `__GFP_NORETRY` request, or a costly one without
///    `__GFP_RETRY_MAYFAIL`, stops after one pass; any other goes round
///    again while [`should_compact_retry`] says so.
///
/// A request the allocator refuses outright gets its error at once, with
/// no compaction. One that still fails is [`RequestError::NoMemory`], except under
/// `vm.defrag_mode`, where one that would retry tries once more without
/// `ALLOC_NOFRAGMENT`. `vmstat` counts each compaction as
/// [`alloc_pages_direct_compact`](super::alloc_pages_direct_compact) does;
/// `tries` gets each compaction's priority and result in turn. `states`
/// holds each zone's compaction state by zone index.
#[allow(clippy::too_many_arguments)]
pub fn alloc_pages_direct_compact_retry<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    order: Order,
    gfp: Gfp,
    node: NodeId,
    owners: &mut Owners,
    states: &mut [CompactState],
    vmstat: &mut CompactVmstat,
    tries: &mut Vec<CompactTry>,
) -> Result<Pfn, RequestError> {
    let failed = try_alloc(alloc, order, gfp, node);
    if !matches!(failed, Err(RequestError::NoMemory { .. })) {
        // A page, or a request the allocator refuses (an unknown node, an
        // order past the geometry's, an invalid mask): nothing to compact.
        return failed;
    }
    let ac = alloc.prepare_alloc_pages(gfp)?;
    if !gfp.contains(Gfp::DIRECT_RECLAIM) {
        return fall_back(alloc, order, gfp, node, failed);
    }
    let direct = Direct {
        alloc,
        ac: &ac,
        order,
        node,
    };
    let mut compact = |priority, tries: &mut Vec<CompactTry>| {
        let (got, result) = direct.compact(priority, owners, states, vmstat)?;
        if result != CompactResult::Skipped {
            tries.push(CompactTry { priority, result });
        }
        Ok::<_, RequestError>((got, result))
    };
    let costly = order.get() > PAGE_ALLOC_COSTLY_ORDER;
    let mut priority = CompactPriority::DEF;
    if first_compaction(&ac, order) {
        let (got, result) = compact(CompactPriority::INIT, tries)?;
        if let Some(pfn) = got {
            return Ok(pfn);
        }
        if costly && gfp.contains(Gfp::NORETRY) {
            if matches!(result, CompactResult::Skipped | CompactResult::Deferred) {
                return fall_back(alloc, order, gfp, node, failed);
            }
            priority = CompactPriority::INIT;
        }
    }
    let mut retries = 0;
    loop {
        if let Ok(pfn) = try_alloc(alloc, order, gfp, node) {
            return Ok(pfn);
        }
        let (got, result) = compact(priority, tries)?;
        if let Some(pfn) = got {
            return Ok(pfn);
        }
        if gfp.contains(Gfp::NORETRY) || (costly && !gfp.contains(Gfp::RETRY_MAYFAIL)) {
            break;
        }
        if !should_compact_retry(order, result, &mut priority, &mut retries) {
            break;
        }
    }
    fall_back(alloc, order, gfp, node, failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `should_compact_retry` from `DEF_COMPACT_PRIORITY` on the same
    /// result until it says no: the priority of each try, the first
    /// included.
    fn trail(order: u8, result: CompactResult) -> Vec<CompactPriority> {
        let (mut prio, mut retries) = (CompactPriority::DEF, 0);
        let mut seen = vec![prio];
        while should_compact_retry(Order::new(order), result, &mut prio, &mut retries) {
            seen.push(prio);
            assert!(seen.len() < 100, "the retries end");
        }
        seen
    }

    #[test]
    fn progress_retries_max_times_at_each_priority_a_failure_none() {
        use CompactPriority::{SyncFull, SyncLight};
        let n = MAX_COMPACT_RETRIES as usize;
        // Non-costly: 1 + 16 tries at SYNC_LIGHT, 1 + 16 at SYNC_FULL.
        let t = trail(2, CompactResult::Success);
        assert_eq!(t.len(), 2 * (n + 1));
        assert!(t[..=n].iter().all(|&p| p == SyncLight), "{t:?}");
        assert!(t[n + 1..].iter().all(|&p| p == SyncFull), "{t:?}");
        // Costly: a quarter of the retries, and never SYNC_FULL.
        let t = trail(9, CompactResult::Success);
        assert_eq!(t, vec![SyncLight; n / 4 + 1]);
        // A failure raises the priority at once.
        for r in [
            CompactResult::Complete,
            CompactResult::PartialSkipped,
            CompactResult::Contended,
            CompactResult::Deferred,
        ] {
            assert_eq!(trail(2, r), vec![SyncLight, SyncFull], "{r:?}");
            assert_eq!(trail(9, r), vec![SyncLight], "{r:?}");
        }
        assert_eq!(trail(2, CompactResult::Skipped), vec![SyncLight]);
        assert_eq!(trail(0, CompactResult::Success), vec![SyncLight]);
    }

    #[test]
    fn priorities_rise_from_async_and_stop_at_the_minimum() {
        use CompactPriority::{Async, SyncFull, SyncLight};
        assert_eq!(Async.raise_toward(SyncFull), Some(SyncLight));
        assert_eq!(SyncLight.raise_toward(SyncFull), Some(SyncFull));
        assert_eq!(SyncFull.raise_toward(SyncFull), None);
        assert_eq!(Async.raise_toward(SyncLight), Some(SyncLight));
        assert_eq!(SyncLight.raise_toward(SyncLight), None);
    }
}
