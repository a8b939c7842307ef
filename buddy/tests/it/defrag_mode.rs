//! `vm.defrag_mode` (Linux 6.15): no fallback into another migratetype's
//! pageblock while only a whole free pageblock would do; direct compaction
//! before the fallback; the fallback itself only at the end of the slow
//! path, for a request that would retry; refused before 6.15.
//!
//! The zone is 16 MiB (4,096 pages, eight pageblocks of 512) from 16 MiB:
//! its first two pageblocks are Unmovable, full of kernel pages with every
//! other aligned order-2 block free; the other six Movable, full of owned
//! movable pages with every odd pfn free. So a Movable request above order
//! 0 finds nothing on its own lists, and only fragments (order 2) of an
//! Unmovable pageblock elsewhere: the "movable from unmovable" fallback
//! the kernel commit counts.

use buddy::testing::{Reference, check_conservation};
use buddy::{
    CompactPriority, CompactState, CompactVmstat, Era, Gfp, InitError, NotInEra, Options, Owners,
    RequestError, alloc_pages_direct_compact,
};
use sparsemem::{Layout, MemoryModel, Migratetype, NodeId, Order, Pfn, SparseExtreme};

use crate::common::{PAGEBLOCK, SmallAlloc as Alloc, zone_16m as layout};

fn options(defrag_mode: bool) -> Options {
    Options {
        defrag_mode,
        ..Options::for_era(Era::V6_18)
    }
}

/// The zone the module documentation describes, with the kernel pages
/// still held.
struct Mixed {
    alloc: Alloc,
    layout: Layout,
    owners: Owners,
    kernel: Vec<Pfn>,
}

/// `stolen[Movable][Unmovable]`: "movable from unmovable" fallbacks.
fn movable_from_unmovable(alloc: &Alloc) -> u64 {
    alloc.stats_total().stolen[Migratetype::Movable.index()][Migratetype::Unmovable.index()]
}

/// The zone of the module documentation; with `fragments` false no
/// kernel page is freed, so no free block above order 0 is left anywhere.
fn mixed_with(defrag_mode: bool, fragments: bool) -> Mixed {
    let layout = layout();
    let model = SparseExtreme::new(&layout).unwrap();
    let alloc = Alloc::new(model, &layout, options(defrag_mode)).unwrap();
    let at = |gfp| alloc.alloc_pages(Order::ZERO, gfp, NodeId::ZERO, None);
    // The first kernel page claims a whole max-order block (two
    // pageblocks), which the next 1,023 fill.
    let kernel: Vec<Pfn> = (0..2 * PAGEBLOCK)
        .map(|_| at(Gfp::KERNEL).unwrap())
        .collect();
    let first = kernel[0].get() & !(2 * PAGEBLOCK - 1);
    assert!(
        kernel
            .iter()
            .all(|p| p.get() & !(2 * PAGEBLOCK - 1) == first)
    );
    // Past the watermarks to the last page, so no Movable block is left.
    let mut owners = Owners::new();
    while let Ok(pfn) = at(Gfp::HIGHUSER_MOVABLE | Gfp::MEMALLOC) {
        owners
            .own(&alloc, pfn, Order::ZERO, Gfp::HIGHUSER_MOVABLE)
            .unwrap();
    }
    let mut held = Vec::new();
    for p in kernel {
        if fragments && (p.get() / 4) % 2 == 1 {
            alloc.free_pages(p, Order::ZERO).unwrap();
        } else {
            held.push(p);
        }
    }
    let odd: Vec<_> = owners
        .iter()
        .filter(|(_, p, _)| p.get() % 2 == 1)
        .map(|(id, _, _)| id)
        .collect();
    for id in odd {
        let (pfn, order) = owners.disown(id).unwrap();
        alloc.free_pages(pfn, order).unwrap();
    }
    assert_eq!(alloc.stats_total().stolen, [[0; 3]; 3]);
    Mixed {
        alloc,
        layout,
        owners,
        kernel: held,
    }
}

fn mixed(defrag_mode: bool) -> Mixed {
    mixed_with(defrag_mode, true)
}

impl Mixed {
    /// Conservation and structure, with the owners' pages, the kernel
    /// pages and `others` allocated.
    fn check(&self, others: &[(Pfn, Order)]) {
        let mut reference = Reference::default();
        let owned = self.owners.iter().map(|(_, p, o)| (p, o));
        let kernel = self.kernel.iter().map(|&p| (p, Order::ZERO));
        for (pfn, order) in owned.chain(kernel).chain(others.iter().copied()) {
            reference.record(&self.layout, pfn, order).unwrap();
        }
        check_conservation(&self.alloc, 0, &reference).unwrap();
    }

    fn alloc(&self, order: u8, gfp: Gfp) -> Result<Pfn, RequestError> {
        self.alloc
            .alloc_pages(Order::new(order), gfp, NodeId::ZERO, None)
    }
}

/// Every era before 6.15 refuses the sysctl with an error that names the
/// release it arrived in; 6.18 takes it.
#[test]
fn defrag_mode_is_refused_before_6_15() {
    let layout = layout();
    for era in Era::ALL {
        let options = Options {
            defrag_mode: true,
            ..Options::for_era(era)
        };
        let built = Alloc::new(SparseExtreme::new(&layout).unwrap(), &layout, options);
        if era.has_defrag_mode() {
            assert!(built.is_ok(), "{era}");
            continue;
        }
        match built {
            Err(e @ InitError::EraMismatch(NotInEra::DefragMode { era: refused })) => {
                assert_eq!(refused, era);
                assert!(e.to_string().contains("6.15"), "{e}");
            }
            Err(e) => panic!("{era}: {e}"),
            Ok(_) => panic!("{era} took defrag_mode"),
        }
    }
    assert!(Era::V6_18.has_defrag_mode() && !Era::V6_12.has_defrag_mode());
}

/// Without the sysctl an order-1 Movable request steals an order-2
/// fragment of an Unmovable pageblock at once, whatever its flags. With
/// it, a request that cannot retry (`__GFP_NORETRY`, or no direct
/// reclaim) fails instead, and one that would retry steals only at the
/// slow path's end; once a whole pageblock is free, that is claimed and
/// nothing is stolen.
#[test]
fn defrag_mode_fails_rather_than_fragment_unless_the_request_would_retry() {
    let noretry = Gfp::HIGHUSER_MOVABLE | Gfp::NORETRY;
    let nowait = Gfp::NOWAIT | Gfp::MOVABLE;
    let off = mixed(false);
    let p = off.alloc(1, noretry).unwrap();
    assert_eq!(movable_from_unmovable(&off.alloc), 1);
    off.check(&[(p, Order::new(1))]);

    let mut on = mixed(true);
    let before = on.alloc.stats_total();
    for gfp in [noretry, nowait] {
        assert!(
            matches!(on.alloc(1, gfp), Err(RequestError::NoMemory { .. })),
            "{gfp}"
        );
    }
    assert_eq!(on.alloc.stats_total().fallbacks, before.fallbacks);
    let stolen = on.alloc(1, Gfp::HIGHUSER_MOVABLE).unwrap();
    assert_eq!(movable_from_unmovable(&on.alloc), 1);
    on.check(&[(stolen, Order::new(1))]);

    // Free the kernel pages of the Unmovable pageblock the stolen block is
    // not in: it merges into one free Unmovable block of pageblock_order.
    let last = on
        .kernel
        .iter()
        .map(|p| p.get() & !(PAGEBLOCK - 1))
        .find(|&pb| pb != stolen.get() & !(PAGEBLOCK - 1))
        .unwrap();
    on.kernel.retain(|p| {
        let inside = p.get() & !(PAGEBLOCK - 1) == last;
        if inside {
            on.alloc.free_pages(*p, Order::ZERO).unwrap();
        }
        !inside
    });
    let claims = on.alloc.stats_total().whole_block_claims;
    let whole = on.alloc(1, noretry).unwrap();
    assert_eq!(whole.get() & !(PAGEBLOCK - 1), last);
    assert_eq!(on.alloc.stats_total().whole_block_claims, claims + 1);
    assert_eq!(movable_from_unmovable(&on.alloc), 1, "nothing more stolen");
    on.check(&[(stolen, Order::new(1)), (whole, Order::new(1))]);
}

/// Direct compaction before the fallback, as 6.15 has it. Where no free
/// block of order 2 is left, only defrag_mode compacts for the order-2
/// Movable request (it is not costly) and gets a Movable block; without
/// the sysctl it fails. Where an Unmovable pageblock has one, compaction
/// stops at once (`compaction_suit_allocation_order`'s watermark check
/// counts every migratetype's blocks), the retry with `ALLOC_NOFRAGMENT`
/// still fails, and the request steals at the end: direct compaction
/// alone does not prevent that fallback.
#[test]
fn defrag_mode_compacts_before_it_falls_back() {
    let direct = |mixed: &mut Mixed| {
        let mut states = CompactState::for_zones(&mixed.alloc);
        let mut vmstat = CompactVmstat::default();
        let got = alloc_pages_direct_compact(
            &mixed.alloc,
            Order::new(2),
            Gfp::HIGHUSER_MOVABLE,
            NodeId::ZERO,
            &mut mixed.owners,
            &mut states,
            CompactPriority::SyncFull,
            &mut vmstat,
        );
        (got, vmstat)
    };
    let mut off = mixed_with(false, false);
    let (got, vmstat) = direct(&mut off);
    assert!(matches!(got, Err(RequestError::NoMemory { .. })), "{got:?}");
    assert_eq!(vmstat, CompactVmstat::default());
    off.check(&[]);

    let mut on = mixed_with(true, false);
    let fallbacks = on.alloc.stats_total().fallbacks;
    let (got, vmstat) = direct(&mut on);
    let got = got.unwrap();
    let model = on.alloc.model();
    assert_eq!(model.get_pfnblock_migratetype(got), Migratetype::Movable);
    assert_eq!((vmstat.compact_stall, vmstat.compact_success), (1, 1));
    assert!(vmstat.pgmigrate_success > 0, "{vmstat:?}");
    assert_eq!(on.alloc.stats_total().fallbacks, fallbacks);
    on.check(&[(got, Order::new(2))]);

    let mut on = mixed(true);
    let (got, vmstat) = direct(&mut on);
    let got = got.unwrap();
    let model = on.alloc.model();
    assert_eq!(model.get_pfnblock_migratetype(got), Migratetype::Unmovable);
    assert_eq!((vmstat.compact_stall, vmstat.compact_fail), (1, 1));
    assert_eq!(vmstat.compact_migrate_scanned, 0, "{vmstat:?}");
    assert_eq!(movable_from_unmovable(&on.alloc), 1);
    on.check(&[(got, Order::new(2))]);
}

/// The slow path's loop where compaction reports success each time and
/// the allocation never profits: an Unmovable pageblock's free order-2
/// block makes every compaction stop at once with `COMPACT_SUCCESS`, and
/// the try with `ALLOC_NOFRAGMENT` will not take it. The order-2 Movable
/// request (not costly, so no first compaction) tries at
/// `DEF_COMPACT_PRIORITY` until `MAX_COMPACT_RETRIES` retries are spent,
/// again at `SYNC_FULL`, then stops, and steals only then. (The kernel's
/// `should_reclaim_retry` would see the free block and send it round
/// without counting a retry for as long as reclaim made progress; pfnlab
/// has no reclaim, see `alloc_pages_direct_compact_retry`.)
#[test]
fn progress_never_enough_stops_after_max_compact_retries() {
    use buddy::{CompactResult, MAX_COMPACT_RETRIES, alloc_pages_direct_compact_retry};
    let mut on = mixed(true);
    let mut states = CompactState::for_zones(&on.alloc);
    let (mut vmstat, mut tries) = (CompactVmstat::default(), Vec::new());
    let got = alloc_pages_direct_compact_retry(
        &on.alloc,
        Order::new(2),
        Gfp::HIGHUSER_MOVABLE,
        NodeId::ZERO,
        &mut on.owners,
        &mut states,
        &mut vmstat,
        &mut tries,
    )
    .unwrap();
    let per_priority = MAX_COMPACT_RETRIES as usize + 1;
    assert_eq!(tries.len(), 2 * per_priority, "{tries:?}");
    assert!(tries.iter().all(|t| t.result == CompactResult::Success));
    let (light, full) = tries.split_at(per_priority);
    assert!(
        light
            .iter()
            .all(|t| t.priority == CompactPriority::SyncLight)
    );
    assert!(full.iter().all(|t| t.priority == CompactPriority::SyncFull));
    let n = tries.len() as u64;
    assert_eq!((vmstat.compact_stall, vmstat.compact_fail), (n, n));
    assert_eq!(vmstat.compact_migrate_scanned, 0, "{vmstat:?}");
    let model = on.alloc.model();
    assert_eq!(model.get_pfnblock_migratetype(got), Migratetype::Unmovable);
    assert_eq!(movable_from_unmovable(&on.alloc), 1);
    on.check(&[(got, Order::new(2))]);
}
