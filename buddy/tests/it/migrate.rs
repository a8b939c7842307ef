//! Migration and compaction that moves pages: `migrate_pages` keeps a
//! frame's bytes and its owner, counts every failure by its reason and
//! loses nothing; `compact_zone` moves only owned, unpinned pages outside
//! `MIGRATE_HIGHATOMIC` pageblocks, and makes an order-9 block exactly
//! when a plain reference over the zone's pageblocks says it can; the
//! deferral numbers of mm/compaction.c.
//!
//! Every zone here is 16 MiB (4,096 pages, eight pageblocks of 512) from
//! 16 MiB: one ZONE_DMA32 whose min watermark is 128 pages.

use buddy::{
    Allocator, COMPACT_MAX_DEFER_SHIFT, CompactControl, CompactResult, CompactState, Era, Gfp,
    MigrateCounts, MigrateError, Options, OwnerError, OwnerId, Owners, alloc_migration_target,
    compact_zone, fragmentation_index, migrate_pages,
};
use proptest::prelude::*;
use sparsemem::{
    Layout, MemoryModel, Migratetype, NR_PAGE_ORDERS, NodeId, Order, Pfn, SparseExtreme,
};

use crate::common::{
    PAGEBLOCK, SmallAlloc as Alloc, alloc0, check, fill_zone, free_owned, zone_16m as layout,
};

fn allocator(layout: &Layout, frames: bool) -> Alloc {
    allocator_in(layout, frames, Era::V6_18)
}

fn allocator_in(layout: &Layout, frames: bool, era: Era) -> Alloc {
    let options = Options {
        frames,
        ..Options::for_era(era)
    };
    Allocator::new(SparseExtreme::new(layout).unwrap(), layout, options).unwrap()
}

/// Writes a pattern of `seed` over the block.
fn fill(alloc: &Alloc, pfn: Pfn, order: Order, seed: u8) {
    let addr = alloc.page_address(pfn).unwrap();
    let len = (4096u64 << order.get()) as usize;
    // SAFETY: the test holds the block (through its owner, with no
    // migration running); its frames are contiguous in the mapping.
    let bytes = unsafe { std::slice::from_raw_parts_mut(addr.as_ptr(), len) };
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = seed ^ (i as u8);
    }
}

fn holds(alloc: &Alloc, pfn: Pfn, order: Order, seed: u8) -> bool {
    let addr = alloc.page_address(pfn).unwrap();
    let len = (4096u64 << order.get()) as usize;
    // SAFETY: as in `fill`.
    let bytes = unsafe { std::slice::from_raw_parts(addr.as_ptr(), len) };
    bytes
        .iter()
        .enumerate()
        .all(|(i, &b)| b == seed ^ (i as u8))
}

#[test]
fn migration_keeps_contents_and_owners() {
    let layout = layout();
    let alloc = allocator(&layout, true);
    let mut owners = Owners::new();
    let mut held = Vec::new();
    for (i, order) in [0u8, 0, 2, 0, 1, 3, 0].into_iter().enumerate() {
        let order = Order::new(order);
        let gfp = Gfp::HIGHUSER_MOVABLE;
        let pfn = alloc.alloc_pages(order, gfp, NodeId::ZERO, None).unwrap();
        let id = owners.own(&alloc, pfn, order, gfp).unwrap();
        fill(&alloc, pfn, order, i as u8 + 1);
        held.push((id, pfn, order, i as u8 + 1));
    }
    let mut list: Vec<Pfn> = held.iter().map(|h| h.1).collect();
    let mut counts = MigrateCounts::default();
    let target = alloc_migration_target(&alloc, NodeId::ZERO, Gfp::HIGHUSER_MOVABLE);
    let left = migrate_pages(&alloc, &mut owners, &mut list, target, |_| {}, &mut counts);
    assert_eq!(left.unwrap(), 0);
    let pages: u64 = held.iter().map(|h| h.2.nr_pages()).sum();
    assert_eq!(
        (counts.pgmigrate_success, counts.pgmigrate_fail),
        (pages, 0)
    );
    for &(id, old, order, seed) in &held {
        let (pfn, got) = owners.resolve(id).unwrap();
        assert_eq!(got, order);
        assert_ne!(pfn, old, "{id:?} moved");
        assert_eq!(owners.owner_of(pfn), Some(id));
        assert_ne!(owners.owner_of(old), Some(id));
        assert!(
            holds(&alloc, pfn, order, seed),
            "{id:?}'s bytes moved with it"
        );
    }
    check(&alloc, &layout, &owners, &[]);
}

#[test]
fn each_failure_reason_is_counted_and_nothing_is_lost() {
    let layout = layout();
    let alloc = allocator(&layout, false);
    let mut owners = Owners::new();
    let unowned = alloc0(&alloc, Gfp::KERNEL).unwrap();
    let movable = Gfp::HIGHUSER_MOVABLE;
    assert!(
        owners
            .own(&alloc, unowned, Order::ZERO, Gfp::KERNEL)
            .is_err()
    );
    let own = |owners: &mut Owners| -> (OwnerId, Pfn) {
        let pfn = alloc0(&alloc, movable).unwrap();
        (owners.own(&alloc, pfn, Order::ZERO, movable).unwrap(), pfn)
    };
    let (pinned, pinned_pfn) = own(&mut owners);
    let (_, a) = own(&mut owners);
    let (_, b) = own(&mut owners);
    owners.pin(pinned).unwrap();
    // Not movable and pinned fail; the third gets no target and stops the
    // call, leaving the fourth untried and uncounted.
    let mut list = vec![unowned, pinned_pfn, a, b];
    let mut counts = MigrateCounts::default();
    let r = migrate_pages(
        &alloc,
        &mut owners,
        &mut list,
        |_, _| None,
        |_| {},
        &mut counts,
    );
    assert!(matches!(r, Err(MigrateError::NoTarget)), "{r:?}");
    assert_eq!(list, vec![unowned, pinned_pfn, a, b]);
    // The page without an owner is refused but, as in /proc/vmstat, not
    // counted as a failed migration.
    let want = MigrateCounts {
        pgmigrate_success: 0,
        pgmigrate_fail: 2,
        not_movable: 1,
        pinned: 1,
        stale: 0,
        no_target: 1,
        bad_target: 0,
    };
    assert_eq!(counts, want);
    check(&alloc, &layout, &owners, &[(unowned, Order::ZERO)]);
    // Unpinned, the page moves.
    owners.unpin(pinned).unwrap();
    assert!(owners.unpin(pinned).is_err());
    let mut list = vec![pinned_pfn];
    let target = alloc_migration_target(&alloc, NodeId::ZERO, movable);
    let r = migrate_pages(&alloc, &mut owners, &mut list, target, |_| {}, &mut counts);
    assert_eq!(r.unwrap(), 0);
    assert_eq!(counts.pgmigrate_success, 1);
    assert_ne!(owners.resolve(pinned).unwrap().0, pinned_pfn);
    check(&alloc, &layout, &owners, &[(unowned, Order::ZERO)]);
    // A block cannot be owned at an order it was not handed out at, nor
    // from a pfn that is not its head.
    let wrong_pfn = alloc0(&alloc, movable).unwrap();
    let r = owners.own(&alloc, wrong_pfn, Order::new(1), movable);
    assert!(
        matches!(r, Err(OwnerError::NotAllocated(p)) if p == wrong_pfn),
        "{r:?}"
    );
    let big = alloc
        .alloc_pages(Order::new(1), movable, NodeId::ZERO, None)
        .unwrap();
    let tail = Pfn::new(big.get() + 1);
    assert!(owners.own(&alloc, tail, Order::ZERO, movable).is_err());
    check(
        &alloc,
        &layout,
        &owners,
        &[
            (unowned, Order::ZERO),
            (wrong_pfn, Order::ZERO),
            (big, Order::new(1)),
        ],
    );
}

/// An owned block freed through the safe free path leaves a stale owner:
/// migration refuses it before it asks for a target, copies or frees
/// anything.
#[test]
fn a_stale_owner_is_refused() {
    let layout = layout();
    let alloc = allocator(&layout, true);
    let mut owners = Owners::new();
    let movable = Gfp::HIGHUSER_MOVABLE;
    let pfn = alloc0(&alloc, movable).unwrap();
    let id = owners.own(&alloc, pfn, Order::ZERO, movable).unwrap();
    alloc.free_pages(pfn, Order::ZERO).unwrap();
    let mut list = vec![pfn];
    let mut counts = MigrateCounts::default();
    let mut asked = 0;
    let r = migrate_pages(
        &alloc,
        &mut owners,
        &mut list,
        |_, _| {
            asked += 1;
            None
        },
        |_| {},
        &mut counts,
    );
    assert_eq!(r.unwrap(), 1);
    assert_eq!(asked, 0, "no target is asked for a stale owner");
    assert_eq!(list, vec![pfn]);
    assert_eq!((counts.pgmigrate_success, counts.stale), (0, 1));
    assert_eq!(owners.disown(id).unwrap(), (pfn, Order::ZERO));
    check(&alloc, &layout, &owners, &[]);
}

/// A target that is the source, a block another owner holds, or a block
/// of another order than the source is refused: given back through
/// `put_new`, counted as a bad target, and the owners stay as they were.
#[test]
fn refused_targets_are_given_back_and_counted() {
    let layout = layout();
    let alloc = allocator(&layout, true);
    let mut owners = Owners::new();
    let movable = Gfp::HIGHUSER_MOVABLE;
    let two = Order::new(2);
    let src = alloc.alloc_pages(two, movable, NodeId::ZERO, None).unwrap();
    let id = owners.own(&alloc, src, two, movable).unwrap();
    fill(&alloc, src, two, 7);
    let other_pfn = alloc.alloc_pages(two, movable, NodeId::ZERO, None).unwrap();
    let other = owners.own(&alloc, other_pfn, two, movable).unwrap();
    let small = alloc0(&alloc, movable).unwrap();
    for dst in [src, other_pfn, small] {
        let mut list = vec![src];
        let mut counts = MigrateCounts::default();
        let mut given_back = Vec::new();
        let r = migrate_pages(
            &alloc,
            &mut owners,
            &mut list,
            |_, _| Some(dst),
            |pfn| given_back.push(pfn),
            &mut counts,
        );
        assert!(
            matches!(r, Err(MigrateError::BadTarget(p)) if p == dst),
            "{r:?}"
        );
        assert_eq!(given_back, vec![dst]);
        assert_eq!(list, vec![src]);
        assert_eq!(
            (
                counts.pgmigrate_success,
                counts.pgmigrate_fail,
                counts.bad_target
            ),
            (0, 4, 4)
        );
        assert_eq!(owners.resolve(id), Some((src, two)));
        assert_eq!(owners.resolve(other), Some((other_pfn, two)));
        assert_eq!(owners.len(), 2);
        assert!(holds(&alloc, src, two, 7));
    }
    check(&alloc, &layout, &owners, &[(small, Order::ZERO)]);
}

#[test]
fn compaction_moves_no_unmovable_pinned_or_highatomic_page() {
    // 5.13's reserve rules: a zone of fewer than 100 pageblocks may
    // reserve one (6.8 on, it may not).
    let layout = layout();
    let alloc = allocator_in(&layout, false, Era::V5_13);
    let mut owners = Owners::new();
    let mut others: Vec<(Pfn, Order)> = fill_zone(&alloc, &mut owners, 41)
        .into_iter()
        .map(|p| (p, Order::ZERO))
        .collect();
    // Room for an order-1 atomic request between min and low: it passes
    // only the slow path, which reserves its pageblock HIGHATOMIC. Its
    // owner claims it movable: compaction must still leave it.
    free_owned(&alloc, &mut owners, |p| p.get() % 1024 < 2);
    let atomic = alloc
        .alloc_pages(Order::new(1), Gfp::ATOMIC, NodeId::ZERO, None)
        .unwrap();
    assert_eq!(
        alloc.model().get_pfnblock_migratetype(atomic),
        Migratetype::HighAtomic
    );
    let reserved = owners
        .own(&alloc, atomic, Order::new(1), Gfp::HIGHUSER_MOVABLE)
        .unwrap();
    // Asked directly, past the scanners, migration still refuses it: the
    // pageblock guard, not the scanner, keeps it.
    let mut list = vec![atomic];
    let mut counts = MigrateCounts::default();
    let target = alloc_migration_target(&alloc, NodeId::ZERO, Gfp::HIGHUSER_MOVABLE);
    let r = migrate_pages(&alloc, &mut owners, &mut list, target, |_| {}, &mut counts);
    assert_eq!(r.unwrap(), 1);
    // The order-1 block is refused whole, and not counted as failed.
    assert_eq!(
        (
            counts.pgmigrate_success,
            counts.not_movable,
            counts.pgmigrate_fail
        ),
        (0, 2, 0)
    );
    assert_eq!(owners.resolve(reserved), Some((atomic, Order::new(1))));
    let pinned: Vec<(OwnerId, Pfn)> = owners
        .iter()
        .filter(|&(_, p, _)| p.get() % 97 == 0)
        .map(|(id, p, _)| (id, p))
        .collect();
    for &(id, _) in &pinned {
        owners.pin(id).unwrap();
    }
    free_owned(&alloc, &mut owners, |p| p.get() % 2 == 1);
    check(&alloc, &layout, &owners, &others);
    let zid = alloc.zones()[0].id;
    let mut state = CompactState::new(&alloc.zones()[0], PAGEBLOCK);
    let run = compact_zone(&alloc, zid, &mut state, &mut owners, CompactControl::PROC).unwrap();
    assert_eq!(run.result, CompactResult::Complete, "{run:?}");
    assert!(run.migrate.pgmigrate_success > 0, "{run:?}");
    // Pinned pages are left at isolation, as the kernel's reference check
    // leaves a pinned anonymous page: scanned, never tried.
    assert_eq!(run.migrate.pinned, 0, "{run:?}");
    for &(id, pfn) in &pinned {
        assert_eq!(owners.resolve(id).unwrap().0, pfn, "a pinned page moved");
    }
    assert_eq!(owners.resolve(reserved).unwrap().0, atomic);
    others.push((atomic, Order::new(1)));
    owners.disown(reserved).unwrap();
    for &(pfn, _) in &others {
        assert!(alloc.model().pfn_to_page(pfn).unwrap().refcount() > 0);
    }
    check(&alloc, &layout, &owners, &others);
}

/// What the reference knows of one pageblock.
#[derive(Clone, Copy, Debug, Default)]
struct Block {
    free: u64,
    movable: u64,
    pinned: bool,
}

/// What the reference expects of an order-9 allocation after compaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    Success,
    Failure,
    /// The scanners may meet in the pageblock above the one being
    /// emptied, leaving that pageblock's free pages unused.
    Either,
}

/// The plain reference: the zone's pageblocks from its own records. An
/// order-9 block can be made iff one is free already, or compaction may
/// run (order-0 free pages at least min + `compact_gap(9)` + low - min,
/// so low + `compact_gap(9)`, order 9 being costly; fragmentation
/// index above 500) and the first pageblock `i` with no pin (short of the
/// last, where the free scanner starts) can be emptied: its movable pages,
/// and those of every pageblock below it (moved first), fit in the free
/// pages above it. Certainly when they fit above `i + 1`; certainly not
/// when they do not fit above `i`; in between it depends on where in
/// pageblock `i + 1` the scanners meet (`compact_scanners_met` compares
/// pageblocks, and the free pages left in that one are not used).
fn reference(blocks: &[Block], low: u64, nr_free: &[u64; NR_PAGE_ORDERS]) -> Expect {
    if blocks.iter().any(|b| b.free == PAGEBLOCK) {
        return Expect::Success;
    }
    let free: u64 = blocks.iter().map(|b| b.free).sum();
    if free < low + (2 << 9) || fragmentation_index(nr_free, Order::new(9)) <= 500 {
        return Expect::Failure;
    }
    let last = blocks.len() - 1;
    let Some(i) = blocks[..last].iter().position(|b| !b.pinned) else {
        return Expect::Failure;
    };
    let moved: u64 = blocks[..=i].iter().map(|b| b.movable).sum();
    let room = |from: usize| -> u64 {
        blocks[from.min(blocks.len())..]
            .iter()
            .map(|b| b.free)
            .sum()
    };
    if moved <= room(i + 2) {
        Expect::Success
    } else if moved > room(i + 1) {
        Expect::Failure
    } else {
        Expect::Either
    }
}

fn blocks_of(alloc: &Alloc, owners: &Owners, start: u64) -> Vec<Block> {
    let mut blocks = vec![Block::default(); 8];
    for (pfn, order) in alloc.free_blocks(alloc.zones()[0].id) {
        blocks[((pfn.get() - start) / PAGEBLOCK) as usize].free += order.nr_pages();
    }
    for (id, pfn, _) in owners.iter() {
        let b = &mut blocks[((pfn.get() - start) / PAGEBLOCK) as usize];
        b.movable += u64::from(!owners.is_pinned(id));
        b.pinned |= owners.is_pinned(id);
    }
    blocks
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// A zone filled with owned order-0 pages, then in each pageblock
    /// `nfree` pages freed, spread evenly, and, where asked, its first page
    /// pinned, is
    /// compacted for order 9 (sync, whole zone) and an order-9
    /// allocation then succeeds exactly when the reference says it can.
    #[test]
    fn a_fragmented_zone_compacts_exactly_when_the_reference_says(
        nfree in prop::collection::vec(0u64..400, 8),
        pins in prop::collection::vec(prop::bool::weighted(0.6), 8),
    ) {
        let layout = layout();
        let alloc = allocator(&layout, false);
        let mut owners = Owners::new();
        fill_zone(&alloc, &mut owners, 0);
        let start = alloc.zones()[0].start_pfn().get();
        let block = |p: Pfn| ((p.get() - start) / PAGEBLOCK) as usize;
        let mut first_in: Vec<Option<OwnerId>> = vec![None; 8];
        let mut ids: Vec<(OwnerId, Pfn)> = owners.iter().map(|(id, p, _)| (id, p)).collect();
        ids.sort_by_key(|&(_, p)| p);
        for &(id, p) in &ids {
            first_in[block(p)].get_or_insert(id);
        }
        for (b, id) in first_in.iter().enumerate() {
            if let (true, Some(id)) = (pins[b], id) {
                owners.pin(*id).unwrap();
            }
        }
        free_owned(&alloc, &mut owners, |p| {
            let i = (p.get() - start) % PAGEBLOCK;
            (i * nfree[block(p)]) % PAGEBLOCK < nfree[block(p)]
        });
        let zone = &alloc.zones()[0];
        let blocks = blocks_of(&alloc, &owners, start);
        let expect = reference(&blocks, zone.watermarks().low, &zone.nr_free());
        let pinned: Vec<(OwnerId, Pfn)> = ids
            .iter()
            .copied()
            .filter(|&(id, _)| owners.is_pinned(id))
            .collect();
        let mut state = CompactState::new(zone, PAGEBLOCK);
        let cc = CompactControl::direct_sync(Order::new(9), Migratetype::Movable);
        let run = compact_zone(&alloc, zone.id, &mut state, &mut owners, cc).unwrap();
        check(&alloc, &layout, &owners, &[]);
        for &(id, pfn) in &pinned {
            prop_assert_eq!(owners.resolve(id).unwrap().0, pfn);
        }
        let got = alloc.alloc_pages(Order::new(9), Gfp::HIGHUSER_MOVABLE, NodeId::ZERO, None);
        if expect != Expect::Either {
            prop_assert_eq!(got.is_ok(), expect == Expect::Success, "{:?} {:?}", blocks, run);
        }
        // The scanners may meet in the pass that empties the pageblock:
        // the run is then `COMPACT_COMPLETE`, and the allocation after it
        // still succeeds, as after the kernel's.
        if run.result == CompactResult::Success {
            prop_assert!(got.is_ok());
        }
    }
}

#[test]
fn deferral_skips_two_to_the_n_minus_one_attempts() {
    let alloc = allocator(&layout(), false);
    let mut state = CompactState::new(&alloc.zones()[0], PAGEBLOCK);
    let order = Order::new(9);
    assert!(!state.compaction_deferred(order), "a fresh zone compacts");
    // A success at order 8 raises `compact_order_failed` to 9: a later
    // failure at 9 defers 9 and above, never 8.
    state.compaction_defer_reset(Order::new(8), false);
    for n in 1..=8u32 {
        state.defer_compaction(order);
        let skipped = (0..)
            .take_while(|_| state.compaction_deferred(order))
            .count() as u64;
        assert_eq!(
            skipped,
            (1 << n.min(COMPACT_MAX_DEFER_SHIFT)) - 1,
            "after {n}"
        );
        assert!(
            !state.compaction_deferred(Order::new(8)),
            "a lower order than the failed one is never deferred"
        );
    }
    assert!(state.compaction_restarting(order));
    state.compaction_defer_reset(order, true);
    assert_eq!(state.defer_shift(), 0);
    assert!(!state.compaction_deferred(order));
    assert!(!state.compaction_restarting(order));
}

#[test]
fn fragmentation_index_numbers() {
    let mut nr_free = [0u64; NR_PAGE_ORDERS];
    assert_eq!(fragmentation_index(&nr_free, Order::new(9)), 0);
    nr_free[0] = 1000;
    // 1000 - (1000 + 1000 * 1000 / 512) / 1000 = 1000 - 2.
    assert_eq!(fragmentation_index(&nr_free, Order::new(9)), 998);
    nr_free[9] = 1;
    assert_eq!(fragmentation_index(&nr_free, Order::new(9)), -1000);
}

/// `__alloc_pages_direct_compact` for an order-9 request on a zone with
/// every other page free: it fails without compaction, succeeds after a
/// sync-full one (a stall and a success); with every page's pageblock
/// pinned it fails (a stall and a failure) and defers the zone, so the
/// next async attempt is deferred (a stall, no run). A non-costly order
/// never compacts.
#[test]
fn direct_compaction_counts_stall_success_and_fail() {
    use buddy::{CompactPriority, CompactVmstat, alloc_pages_direct_compact};
    let layout = layout();
    let nine = Order::new(9);
    let movable = Gfp::HIGHUSER_MOVABLE;
    for pinned in [false, true] {
        let alloc = allocator(&layout, false);
        let mut owners = Owners::new();
        fill_zone(&alloc, &mut owners, 0);
        if pinned {
            let start = alloc.zones()[0].start_pfn().get();
            let mut firsts: Vec<(OwnerId, Pfn)> = owners.iter().map(|(id, p, _)| (id, p)).collect();
            firsts.sort_by_key(|&(_, p)| p);
            firsts.dedup_by_key(|&mut (_, p)| (p.get() - start) / PAGEBLOCK);
            for (id, _) in firsts {
                owners.pin(id).unwrap();
            }
        }
        free_owned(&alloc, &mut owners, |p| p.get() % 2 == 1);
        assert!(
            alloc
                .alloc_pages(nine, movable, NodeId::ZERO, None)
                .is_err()
        );
        let mut states = CompactState::for_zones(&alloc);
        let mut vmstat = CompactVmstat::default();
        let mut direct = |prio, vmstat: &mut CompactVmstat| {
            alloc_pages_direct_compact(
                &alloc,
                nine,
                movable,
                NodeId::ZERO,
                &mut owners,
                &mut states,
                prio,
                vmstat,
            )
        };
        let got = direct(CompactPriority::SyncFull, &mut vmstat);
        assert_eq!(got.is_ok(), !pinned, "{vmstat:?}");
        assert_eq!(vmstat.compact_stall, 1);
        assert_eq!(
            (vmstat.compact_success, vmstat.compact_fail),
            if pinned { (0, 1) } else { (1, 0) }
        );
        assert!(vmstat.pgmigrate_success > 0 && vmstat.compact_isolated > 0);
        if pinned {
            let before = vmstat;
            assert!(direct(CompactPriority::Async, &mut vmstat).is_err());
            assert_eq!(vmstat.compact_stall, 2, "a deferred zone still stalls");
            assert_eq!(
                vmstat.compact_migrate_scanned,
                before.compact_migrate_scanned
            );
            assert_eq!(states[0].defer_shift(), 1);
        }
    }
}

/// An async direct run whose budget of pageblocks runs out ends
/// `COMPACT_CONTENDED`, keeps its cached pfns for the next, and loses
/// nothing; the next run goes on from there, and a sync-full one after
/// it makes the order-9 block.
#[test]
fn an_async_run_out_of_budget_is_contended_and_resumes() {
    let layout = layout();
    let alloc = allocator(&layout, false);
    let mut owners = Owners::new();
    fill_zone(&alloc, &mut owners, 0);
    free_owned(&alloc, &mut owners, |p| p.get() % 2 == 1);
    let zone = &alloc.zones()[0];
    let mut state = CompactState::new(zone, PAGEBLOCK);
    let cc = CompactControl::direct_async(Order::new(9), Migratetype::Movable, Some(3));
    let run = compact_zone(&alloc, zone.id, &mut state, &mut owners, cc).unwrap();
    assert_eq!(run.result, CompactResult::Contended, "{run:?}");
    assert!(state.cached_migrate_pfn() > zone.start_pfn(), "{run:?}");
    check(&alloc, &layout, &owners, &[]);
    let resumed = CompactControl {
        budget_pageblocks: None,
        ..cc
    };
    let run = compact_zone(&alloc, zone.id, &mut state, &mut owners, resumed).unwrap();
    // The first run's skip hints stand (the free scanner's pageblocks
    // among them), so this one may end with the scanners met short of a
    // free pageblock: `COMPACT_PARTIAL_SKIPPED`, never `COMPLETE`.
    assert!(
        matches!(
            run.result,
            CompactResult::Success | CompactResult::PartialSkipped
        ),
        "{run:?}"
    );
    check(&alloc, &layout, &owners, &[]);
    let sync = CompactControl::direct_sync(Order::new(9), Migratetype::Movable);
    compact_zone(&alloc, zone.id, &mut state, &mut owners, sync).unwrap();
    let nine = alloc.alloc_pages(Order::new(9), Gfp::HIGHUSER_MOVABLE, NodeId::ZERO, None);
    check(&alloc, &layout, &owners, &[(nine.unwrap(), Order::new(9))]);
}

/// Compaction on real frames: every owned page's bytes follow it to
/// wherever the run moved it.
#[test]
fn compaction_moves_each_frame_with_its_owner() {
    let layout = layout();
    let alloc = allocator(&layout, true);
    let mut owners = Owners::new();
    let kernel: Vec<(Pfn, Order)> = fill_zone(&alloc, &mut owners, 0)
        .into_iter()
        .map(|p| (p, Order::ZERO))
        .collect();
    // Every other page freed, then a pattern per owner in what is left.
    free_owned(&alloc, &mut owners, |p| p.get() % 2 == 0);
    let before: Vec<(OwnerId, Pfn, u8)> = owners
        .iter()
        .map(|(id, pfn, order)| {
            // Seeded by where the page started, so a page that moved
            // shows its old pfn's pattern at its new one.
            let s = (pfn.get() as u8) ^ 0x5a;
            fill(&alloc, pfn, order, s);
            (id, pfn, s)
        })
        .collect();
    let zid = alloc.zones()[0].id;
    let mut state = CompactState::new(&alloc.zones()[0], PAGEBLOCK);
    let run = compact_zone(&alloc, zid, &mut state, &mut owners, CompactControl::PROC).unwrap();
    assert!(run.migrate.pgmigrate_success > 0, "{run:?}");
    let mut moved = 0;
    for (id, old, s) in before {
        let (now, order) = owners.resolve(id).unwrap();
        moved += u64::from(now != old);
        assert!(holds(&alloc, now, order, s), "owner {id:?}: {old} -> {now}");
    }
    assert_eq!(moved, run.migrate.pgmigrate_success);
    check(&alloc, &layout, &owners, &kernel);
}

/// The slow path's first direct compaction is for a costly order or for a
/// non-movable order above 0 (whose fallback would mix a pageblock), and
/// only with `__GFP_IO`: an order-3 movable request that fails is not
/// compacted for, an order-3 unmovable one is.
#[test]
fn direct_compaction_is_for_costly_or_unmovable_requests() {
    use buddy::{CompactPriority, CompactVmstat, alloc_pages_direct_compact};
    let layout = layout();
    let alloc = allocator(&layout, false);
    let mut owners = Owners::new();
    fill_zone(&alloc, &mut owners, 0);
    free_owned(&alloc, &mut owners, |p| p.get() % 2 == 1);
    // Every free block above order 0 taken, so an order-3 request fails
    // on the free lists alone.
    let one = Order::new(1);
    let mut held = Vec::new();
    while let Ok(pfn) = alloc.alloc_pages(one, Gfp::HIGHUSER_MOVABLE, NodeId::ZERO, None) {
        held.push((pfn, one));
    }
    let three = Order::new(3);
    assert!(
        alloc
            .alloc_pages(three, Gfp::KERNEL, NodeId::ZERO, None)
            .is_err()
    );
    let mut states = CompactState::for_zones(&alloc);
    let mut vmstat = CompactVmstat::default();
    let mut direct = |gfp, vmstat: &mut CompactVmstat| {
        alloc_pages_direct_compact(
            &alloc,
            three,
            gfp,
            NodeId::ZERO,
            &mut owners,
            &mut states,
            CompactPriority::SyncFull,
            vmstat,
        )
    };
    assert!(direct(Gfp::HIGHUSER_MOVABLE, &mut vmstat).is_err());
    assert_eq!(
        vmstat,
        CompactVmstat::default(),
        "order 3 movable is not compacted for"
    );
    assert!(direct(Gfp::KERNEL.without(Gfp::IO), &mut vmstat).is_err());
    assert_eq!(
        vmstat,
        CompactVmstat::default(),
        "no compaction without __GFP_IO"
    );
    let got = direct(Gfp::KERNEL, &mut vmstat).expect("compaction makes an order-3 block");
    assert_eq!((vmstat.compact_stall, vmstat.compact_success), (1, 1));
    assert!(vmstat.pgmigrate_success > 0, "{vmstat:?}");
    held.push((got, three));
    check(&alloc, &layout, &owners, &held);
}
