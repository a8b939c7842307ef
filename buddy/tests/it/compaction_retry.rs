//! Direct compaction's priorities and the slow path's retry loop: what
//! each priority sets (`compact_zone_order`), the free scanner's
//! `suitable_migration_target` against `cc->order` and with
//! `ignore_block_suitable`, deferral below `MIN_COMPACT_PRIORITY`, and
//! `should_compact_retry`'s escalation from `COMPACT_PRIO_ASYNC`. Every
//! test ends with the whole-allocator checks against a plain reference of
//! the allocated blocks, so no page is lost.
//!
//! Every zone here is 16 MiB (4,096 pages, eight pageblocks of 512) from
//! 16 MiB: one ZONE_DMA32 whose min watermark is 128 pages.

use buddy::testing::{Reference, check_conservation};
use buddy::{
    CompactControl, CompactPriority, CompactState, CompactTry, CompactVmstat, Era, Gfp, Options,
    Owners, RequestError, alloc_pages_direct_compact, alloc_pages_direct_compact_retry,
    compact_zone_scan,
};
use sparsemem::{Layout, MemoryModel, Migratetype, NodeId, Order, Pfn, SparseExtreme};

use crate::common::{PAGEBLOCK, SmallAlloc as Alloc, zone_16m};

/// A zone whose every page is allocated, movable: owned when `owned`,
/// else listed in `others`.
struct Full {
    alloc: Alloc,
    layout: Layout,
    owners: Owners,
    others: Vec<Pfn>,
}

impl Full {
    fn new(owned: bool) -> Full {
        let layout = zone_16m();
        let model = SparseExtreme::new(&layout).unwrap();
        let alloc = Alloc::new(model, &layout, Options::for_era(Era::V6_18)).unwrap();
        let (mut owners, mut others) = (Owners::new(), Vec::new());
        // Past the watermarks to the last page.
        let gfp = Gfp::HIGHUSER_MOVABLE;
        while let Ok(pfn) = alloc.alloc_pages(Order::ZERO, gfp | Gfp::MEMALLOC, NodeId::ZERO, None)
        {
            if owned {
                owners.own(&alloc, pfn, Order::ZERO, gfp).unwrap();
            } else {
                others.push(pfn);
            }
        }
        Full {
            alloc,
            layout,
            owners,
            others,
        }
    }

    fn block(&self, i: u64) -> Pfn {
        Pfn::new(self.alloc.zones()[0].start_pfn().get() + i * PAGEBLOCK)
    }

    /// Frees the pages `free` picks, owned or not.
    fn free(&mut self, mut free: impl FnMut(Pfn) -> bool) {
        let ids: Vec<_> = self
            .owners
            .iter()
            .filter(|&(id, p, _)| free(p) && !self.owners.is_pinned(id))
            .map(|(id, _, _)| id)
            .collect();
        for id in ids {
            let (pfn, order) = self.owners.disown(id).unwrap();
            self.alloc.free_pages(pfn, order).unwrap();
        }
        let alloc = &self.alloc;
        self.others.retain(|&p| {
            let keep = !free(p);
            if !keep {
                alloc.free_pages(p, Order::ZERO).unwrap();
            }
            keep
        });
    }

    /// Conservation and structure with the owners' pages, the others and
    /// `extra` allocated.
    fn check(&self, extra: &[(Pfn, Order)]) {
        let mut reference = Reference::default();
        let owned = self.owners.iter().map(|(_, p, o)| (p, o));
        let others = self.others.iter().map(|&p| (p, Order::ZERO));
        for (pfn, order) in owned.chain(others).chain(extra.iter().copied()) {
            reference.record(&self.layout, pfn, order).unwrap();
        }
        check_conservation(&self.alloc, 0, &reference).unwrap();
    }
}

/// A zone where only `COMPACT_PRIO_SYNC_FULL` can make an order-3 block:
/// every page owned and movable, the last two pageblocks made Unmovable
/// with three of every four pages freed (free blocks of order 1 at most).
/// The free scanner finds free pages only there, which it takes only with
/// `ignore_block_suitable`.
fn sync_full_only() -> Full {
    let mut full = Full::new(true);
    let (six, end) = (full.block(6), full.alloc.zones()[0].end_pfn());
    for b in [6, 7] {
        let start = full.block(b);
        full.alloc
            .model()
            .set_pfnblock_migratetype(start, Migratetype::Unmovable);
    }
    full.free(|p| p >= six && p < end && p.get() % 4 != 0);
    full
}

/// What each priority sets, as `compact_zone_order` has it: only
/// `MIN_COMPACT_PRIORITY` scans the whole zone, ignores the skip hints and
/// the free scanner's pageblock type; only async passes over non-movable
/// sources for a movable request.
#[test]
fn each_priority_sets_the_control_as_compact_zone_order_does() {
    let (three, mt) = (Order::new(3), Migratetype::Movable);
    let flags = |prio| {
        let cc = CompactControl::direct(prio, three, mt);
        assert_eq!((cc.order, cc.migratetype), (Some(three), mt));
        assert_eq!(cc.budget_pageblocks, None);
        (
            cc.whole_zone,
            cc.ignore_skip_hint,
            cc.ignore_block_suitable,
            cc.async_movable,
        )
    };
    assert_eq!(flags(CompactPriority::Async), (false, false, false, true));
    assert_eq!(
        flags(CompactPriority::SyncLight),
        (false, false, false, false)
    );
    assert_eq!(flags(CompactPriority::SyncFull), (true, true, true, false));
    assert_eq!(CompactPriority::INIT, CompactPriority::Async);
    assert_eq!(CompactPriority::DEF, CompactPriority::SyncLight);
    const { assert!(!CompactControl::PROC.ignore_block_suitable) };
}

/// `suitable_migration_target` tests the free block heading a pageblock
/// against `cc->order` when it is above 0, against `pageblock_order`
/// otherwise: the last pageblock, headed by a free order-2 block and
/// otherwise full, is a target (scanned whole, so its skip hint is set)
/// for an order-0, order-3 or `-1` run, and not for an order-1 or order-2
/// one.
#[test]
fn the_free_scanner_tests_the_head_block_against_cc_order() {
    let mut full = Full::new(false);
    let last = full.block(7);
    full.free(|p| p >= last && p.get() < last.get() + 4);
    let zone = &full.alloc.zones()[0];
    for (order, target) in [
        (None, true),
        (Some(0), true),
        (Some(1), false),
        (Some(2), false),
        (Some(3), true),
    ] {
        let cc = CompactControl {
            order: order.map(Order::new),
            ..CompactControl::PROC
        };
        let mut state = CompactState::new(zone, PAGEBLOCK);
        let n = compact_zone_scan(&full.alloc, zone.id, &mut state, cc).unwrap();
        assert!(n.complete && n.migrate_isolated > 0, "{n:?}");
        assert_eq!(state.skip_hint(last), target, "order {order:?}: {n:?}");
        assert_eq!(n.free_isolated, if target { 4 } else { 0 }, "{n:?}");
    }
    full.check(&[]);
}

/// With `ignore_block_suitable` the free scanner takes free pages from an
/// Unmovable pageblock; without it, it passes the pageblock over (and,
/// the zone's only free pages being there, isolates none).
#[test]
fn sync_full_takes_free_pages_from_a_non_movable_pageblock() {
    let full = sync_full_only();
    let zone = &full.alloc.zones()[0];
    let (six, seven) = (full.block(6), full.block(7));
    for ignore in [false, true] {
        let cc = CompactControl {
            ignore_block_suitable: ignore,
            ..CompactControl::direct_sync_light(Order::new(3), Migratetype::Unmovable)
        };
        let mut state = CompactState::new(zone, PAGEBLOCK);
        let n = compact_zone_scan(&full.alloc, zone.id, &mut state, cc).unwrap();
        assert!(n.migrate_isolated > 0, "{n:?}");
        assert_eq!(n.free_isolated > 0, ignore, "{n:?}");
        // A pageblock the free scanner took as a target and scanned whole
        // gets its skip hint.
        let hinted = [six, seven].map(|b| state.skip_hint(b));
        assert_eq!(hinted.contains(&true), ignore, "{hinted:?} {n:?}");
    }
    full.check(&[]);
}

/// A deferred zone is passed over below `MIN_COMPACT_PRIORITY` (a stall
/// with nothing scanned, and a failure) and compacted at it.
#[test]
fn deferral_is_honoured_below_sync_full() {
    let mut full = sync_full_only();
    let three = Order::new(3);
    let mut got = Vec::new();
    for prio in [
        CompactPriority::Async,
        CompactPriority::SyncLight,
        CompactPriority::SyncFull,
    ] {
        let mut states = CompactState::for_zones(&full.alloc);
        states[0].defer_compaction(three);
        let mut vmstat = CompactVmstat::default();
        let r = alloc_pages_direct_compact(
            &full.alloc,
            three,
            Gfp::KERNEL,
            NodeId::ZERO,
            &mut full.owners,
            &mut states,
            prio,
            &mut vmstat,
        );
        assert_eq!(vmstat.compact_stall, 1, "{prio:?} {vmstat:?}");
        if prio == CompactPriority::SyncFull {
            got.push((r.expect("sync full makes the block"), three));
            assert_eq!(vmstat.compact_success, 1, "{vmstat:?}");
            assert!(vmstat.compact_migrate_scanned > 0, "{vmstat:?}");
            assert_eq!(states[0].defer_shift(), 0, "success resets the deferral");
        } else {
            assert!(r.is_err(), "{prio:?}");
            assert_eq!(vmstat.compact_fail, 1, "{vmstat:?}");
            assert_eq!(vmstat.compact_migrate_scanned, 0, "{prio:?} {vmstat:?}");
        }
    }
    full.check(&got);
}

/// The slow path's loop for an order-3 Unmovable request: its first
/// compaction async, then `DEF_COMPACT_PRIORITY`, then, after that fails,
/// `should_compact_retry` raises it to `SYNC_FULL`, which alone makes the
/// block: three stalls, two failures, one success.
#[test]
fn the_retry_loop_escalates_async_sync_light_sync_full() {
    let mut full = sync_full_only();
    let three = Order::new(3);
    let (mut vmstat, mut tries) = (CompactVmstat::default(), Vec::new());
    let mut states = CompactState::for_zones(&full.alloc);
    let got = alloc_pages_direct_compact_retry(
        &full.alloc,
        three,
        Gfp::KERNEL,
        NodeId::ZERO,
        &mut full.owners,
        &mut states,
        &mut vmstat,
        &mut tries,
    )
    .expect("sync full makes the block");
    let prios: Vec<_> = tries.iter().map(|t: &CompactTry| t.priority).collect();
    assert_eq!(
        prios,
        [
            CompactPriority::Async,
            CompactPriority::SyncLight,
            CompactPriority::SyncFull
        ],
        "{tries:?}"
    );
    assert_eq!(
        (
            vmstat.compact_stall,
            vmstat.compact_fail,
            vmstat.compact_success
        ),
        (3, 2, 1),
        "{vmstat:?}"
    );
    full.check(&[(got, three)]);
}

/// A costly `__GFP_NORETRY` request (a THP fault's) whose first async
/// compaction ran stays async for its one more pass and stops; with
/// `__GFP_RETRY_MAYFAIL` it goes on to `SYNC_LIGHT`, and no further: a
/// costly order never gets `SYNC_FULL`. Every pageblock holds a pinned
/// page, so no order-9 block can be made.
#[test]
fn a_noretry_costly_request_does_not_escalate() {
    let nine = Order::new(9);
    for (flag, want) in [
        (
            Gfp::NORETRY,
            [CompactPriority::Async, CompactPriority::Async],
        ),
        (
            Gfp::RETRY_MAYFAIL,
            [CompactPriority::Async, CompactPriority::SyncLight],
        ),
    ] {
        let mut full = Full::new(true);
        let firsts: Vec<_> = full
            .owners
            .iter()
            .filter(|(_, p, _)| p.get() % PAGEBLOCK == 0)
            .map(|(id, _, _)| id)
            .collect();
        for id in firsts {
            full.owners.pin(id).unwrap();
        }
        full.free(|p| p.get() % 2 == 1);
        let (mut vmstat, mut tries) = (CompactVmstat::default(), Vec::new());
        let mut states = CompactState::for_zones(&full.alloc);
        let got = alloc_pages_direct_compact_retry(
            &full.alloc,
            nine,
            Gfp::HIGHUSER_MOVABLE | flag,
            NodeId::ZERO,
            &mut full.owners,
            &mut states,
            &mut vmstat,
            &mut tries,
        );
        assert!(got.is_err(), "{tries:?}");
        let prios: Vec<_> = tries.iter().map(|t| t.priority).collect();
        assert_eq!(prios, want, "{flag:?}: {tries:?}");
        assert_eq!((vmstat.compact_stall, vmstat.compact_fail), (2, 2));
        assert!(vmstat.pgmigrate_success > 0, "{vmstat:?}");
        full.check(&[]);
    }
}

/// A request the allocator refuses (an unknown node, an order past the
/// geometry's) gets the allocator's own error, with nothing compacted.
#[test]
fn a_refused_request_gets_its_error_without_compaction() {
    let mut full = sync_full_only();
    let max = full.alloc.model().geometry().max_order();
    let cases = [
        (Order::new(3), NodeId::new(1)),
        (Order::new(max.get() + 1), NodeId::ZERO),
    ];
    for (order, node) in cases {
        let want = full.alloc.alloc_pages(order, Gfp::KERNEL, node, None);
        assert!(
            !matches!(want, Ok(_) | Err(RequestError::NoMemory { .. })),
            "{want:?}"
        );
        let (mut vmstat, mut tries) = (CompactVmstat::default(), Vec::new());
        let mut states = CompactState::for_zones(&full.alloc);
        let got = alloc_pages_direct_compact_retry(
            &full.alloc,
            order,
            Gfp::KERNEL,
            node,
            &mut full.owners,
            &mut states,
            &mut vmstat,
            &mut tries,
        );
        assert_eq!(format!("{got:?}"), format!("{want:?}"));
        assert!(tries.is_empty(), "{tries:?}");
        assert_eq!(vmstat, CompactVmstat::default());
    }
    full.check(&[]);
}
