//! The per-CPU lists, checked by size and by lock count rather than by
//! "nothing went wrong": refill and drain sizes under both lock policies,
//! the `high`/`batch` thresholds, bulk limits, the preferred zone, draining
//! on drop, and the statistics the lab reports.

use buddy::testing::{Reference, check_conservation};
use buddy::{
    Allocator, FreeError, Gfp, InitError, Kernel, LockPolicy, MAX_BULK, NodeMask, Options,
    RequestError, ZoneId,
};
use sparsemem::{Layout, MemRange, NodeId, Order, Pfn, RangeKind, SparseExtreme};

const BATCH: u32 = 8;

/// 0–16 MiB (DMA, zone 0) and 16–64 MiB (DMA32, zone 1) on node 0.
fn layout() -> Layout {
    Layout::new(
        sparsemem::Geometry::X86_64,
        vec![MemRange::new(0, 64 << 20, RangeKind::Ram, 0)],
        "two zones",
    )
    .unwrap()
}

fn allocator(policy: LockPolicy) -> Allocator<SparseExtreme, Kernel> {
    let layout = layout();
    let options = Options {
        lock_policy: policy,
        pcp_batch: Some(BATCH),
        // high = 6 × batch, the rule these tests check.
        era: buddy::Era::V2_6_23,
        ..Options::default()
    };
    Allocator::new(SparseExtreme::new(&layout).unwrap(), &layout, options).unwrap()
}

const DMA32: ZoneId = ZoneId::new(1);
const DMA32_FIRST_PFN: u64 = (16 << 20) >> 12;

#[test]
fn refill_moves_one_batch_under_one_lock_or_one_lock_per_page() {
    for (policy, locks_per_refill) in [(LockPolicy::PerBatch, 1), (LockPolicy::PerPage, BATCH)] {
        let alloc = allocator(policy);
        let zone = alloc.zone(DMA32).unwrap();
        assert_eq!((zone.batch(), zone.high()), (BATCH, 6 * BATCH));
        let free_before = zone.nr_free_pages();
        let locks_before = zone.lock_acquisitions();
        let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
        let pfn = cpu.alloc(Gfp::DMA32).unwrap();
        // Read before anything else takes the lock (free_pages does).
        let locks = zone.lock_acquisitions() - locks_before;
        assert!(
            pfn.get() >= DMA32_FIRST_PFN,
            "{policy:?}: from the preferred zone"
        );
        assert_eq!(
            cpu.count(DMA32),
            u64::from(BATCH) - 1,
            "{policy:?}: one batch, one handed out"
        );
        assert_eq!(
            zone.nr_free_pages(),
            free_before - u64::from(BATCH),
            "{policy:?}"
        );
        assert_eq!(
            locks,
            u64::from(locks_per_refill),
            "{policy:?}: zone-lock acquisitions for one refill"
        );
        assert_eq!(zone.stats().pcp_refills, 1);
        for _ in 1..BATCH {
            cpu.alloc(Gfp::DMA32).unwrap();
        }
        assert_eq!(
            cpu.count(DMA32),
            0,
            "{policy:?}: the batch is used up without a refill"
        );
        assert_eq!(zone.stats().pcp_refills, 1);
        cpu.alloc(Gfp::DMA32).unwrap();
        assert_eq!(
            zone.stats().pcp_refills,
            2,
            "{policy:?}: an empty list refills"
        );
    }
}

#[test]
fn a_list_reaching_high_drains_one_batch_of_its_coldest_pages() {
    for (policy, locks_per_drain) in [(LockPolicy::PerBatch, 1), (LockPolicy::PerPage, BATCH)] {
        let alloc = allocator(policy);
        let zone = alloc.zone(DMA32).unwrap();
        let high = u64::from(zone.high());
        let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
        let held: Vec<Pfn> = (0..high + 4)
            .map(|_| cpu.alloc(Gfp::DMA32).unwrap())
            .collect();
        let start = cpu.count(DMA32);
        let mut drained_at = None;
        for (i, &pfn) in held.iter().enumerate() {
            let before = cpu.count(DMA32);
            let locks = zone.lock_acquisitions();
            cpu.free(pfn).unwrap();
            let after = cpu.count(DMA32);
            assert!(after < high, "{policy:?}: the list never stays at high");
            if before + 1 == high {
                assert_eq!(
                    after,
                    high - u64::from(BATCH),
                    "{policy:?}: one batch drained"
                );
                assert_eq!(
                    zone.lock_acquisitions() - locks,
                    u64::from(locks_per_drain),
                    "{policy:?}"
                );
                drained_at.get_or_insert(i);
            } else {
                assert_eq!(
                    after,
                    before + 1,
                    "{policy:?}: below high a free only lists the page"
                );
                assert_eq!(
                    zone.lock_acquisitions(),
                    locks,
                    "{policy:?}: and takes no lock"
                );
            }
        }
        assert_eq!(drained_at, Some((high - 1 - start) as usize), "{policy:?}");
        assert!(zone.stats().pcp_drains >= 1);
        let on_list = cpu.total_count();
        let reference = Reference::default();
        check_conservation(&alloc, on_list, &reference).unwrap();
    }
}

#[test]
fn the_per_page_policy_allocates_every_page_it_is_asked_for() {
    let alloc = allocator(LockPolicy::PerPage);
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let mut reference = Reference::default();
    let layout = layout();
    for _ in 0..1000 {
        let pfn = cpu.alloc(Gfp::DMA32).unwrap();
        reference.record(&layout, pfn, Order::ZERO).unwrap();
    }
    check_conservation(&alloc, cpu.total_count(), &reference).unwrap();
}

#[test]
fn bulk_takes_max_bulk_exactly_and_refuses_one_more_unchanged() {
    let alloc = allocator(LockPolicy::PerBatch);
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let mut out = Vec::new();
    assert_eq!(
        cpu.alloc_bulk_vec(MAX_BULK, Gfp::DMA32, &mut out).unwrap(),
        MAX_BULK
    );
    assert_eq!(out.len(), MAX_BULK);
    let (free, on_list) = (alloc.free_pages_total(), cpu.total_count());
    assert!(matches!(
        cpu.alloc_bulk_vec(MAX_BULK + 1, Gfp::DMA32, &mut out),
        Err(RequestError::BulkTooLarge { requested }) if requested == MAX_BULK + 1
    ));
    let mut slots = vec![None; MAX_BULK + 1];
    assert!(matches!(
        cpu.alloc_bulk_array(Gfp::DMA32, &mut slots),
        Err(RequestError::BulkTooLarge { .. })
    ));
    assert!(
        slots.iter().all(Option::is_none),
        "a refused array is left empty"
    );
    assert_eq!(
        (alloc.free_pages_total(), cpu.total_count(), out.len()),
        (free, on_list, MAX_BULK)
    );
    let mut slots = vec![None; MAX_BULK];
    assert_eq!(
        cpu.alloc_bulk_array(Gfp::DMA32, &mut slots).unwrap(),
        MAX_BULK
    );
    let mut reference = Reference::default();
    for pfn in out.iter().chain(slots.iter().flatten()) {
        reference.record(&layout(), *pfn, Order::ZERO).unwrap();
    }
    check_conservation(&alloc, cpu.total_count(), &reference).unwrap();
}

#[test]
fn bulk_serves_the_preferred_zone_then_falls_back() {
    let alloc = allocator(LockPolicy::PerBatch);
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let dma32_pages = alloc.zone(DMA32).unwrap().managed_pages() as usize;
    let mut out = Vec::new();
    cpu.alloc_bulk_vec(1000, Gfp::DMA32, &mut out).unwrap();
    assert!(
        out.iter().all(|p| p.get() >= DMA32_FIRST_PFN),
        "the preferred zone (the highest the GFP allows) serves the bulk"
    );
    let mut rest = Vec::new();
    while cpu.alloc_bulk_vec(MAX_BULK, Gfp::DMA32, &mut rest).unwrap() > 0 {}
    let total = out.len() + rest.len();
    assert!(
        (total as u64) < alloc.managed_pages_total(),
        "the watermarks keep a reserve"
    );
    // Below every zone's watermark a bulk request serves one page the
    // ordinary way per call (`__alloc_pages`'s slow path): with
    // __GFP_MEMALLOC that reaches the reserve.
    let past = Gfp::DMA32 | Gfp::MEMALLOC;
    assert_eq!(cpu.alloc_bulk_vec(MAX_BULK, past, &mut rest).unwrap(), 1);
    while cpu.alloc_bulk_vec(MAX_BULK, past, &mut rest).unwrap() > 0 {}
    let total = out.len() + rest.len();
    assert_eq!(
        total as u64,
        alloc.managed_pages_total(),
        "then every other zone"
    );
    assert!(total > dma32_pages, "the fallback reached DMA");
    cpu.set_cpuset(Some(NodeMask::empty()));
    let mut none = Vec::new();
    assert_eq!(
        cpu.alloc_bulk_vec(4, Gfp::DMA32, &mut none).unwrap(),
        0,
        "no allowed zone"
    );
}

#[test]
fn dropping_a_handle_drains_it_and_folds_its_counts() {
    let alloc = allocator(LockPolicy::PerBatch);
    let managed = alloc.managed_pages_total();
    {
        let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
        let pages: Vec<Pfn> = (0..5).map(|_| cpu.alloc(Gfp::DMA32).unwrap()).collect();
        for p in pages {
            cpu.free(p).unwrap();
        }
        assert!(cpu.total_count() > 0);
        assert!(alloc.free_pages_total() < managed);
    }
    assert_eq!(alloc.free_pages_total(), managed, "every pcp page is back");
    let stats = alloc.stats_total();
    assert_eq!(
        (stats.allocs[0], stats.frees[0]),
        (5, 5),
        "pending per-CPU counts folded in"
    );
    assert_eq!(
        alloc.zone(DMA32).unwrap().nr_free(),
        allocator(LockPolicy::PerBatch)
            .zone(DMA32)
            .unwrap()
            .nr_free()
    );
}

/// Splits and merges counted exactly: one order-0 page from a zone of
/// whole MAX_PAGE_ORDER blocks splits one block ten times; freeing it merges
/// ten times; an order-3 block splits seven times.
#[test]
fn statistics_count_what_the_operations_did() {
    let alloc = allocator(LockPolicy::PerBatch);
    let zone = alloc.zone(DMA32).unwrap();
    let pfn = alloc
        .alloc_pages(Order::ZERO, Gfp::DMA32, NodeId::ZERO, None)
        .unwrap();
    let s = zone.stats();
    assert_eq!((s.splits, s.merges, s.allocs[0]), (10, 0, 1));
    alloc.free_pages(pfn, Order::ZERO).unwrap();
    let s = zone.stats();
    assert_eq!((s.merges, s.frees[0]), (10, 1));
    let block = alloc
        .alloc_pages(Order::new(3), Gfp::DMA32, NodeId::ZERO, None)
        .unwrap();
    assert_eq!(zone.stats().splits, 17);
    alloc.free_pages(block, Order::new(3)).unwrap();
    let s = zone.stats();
    assert_eq!((s.merges, s.frees[3], s.allocs[3]), (17, 1, 1));
    assert_eq!(
        (s.hole_checks, s.hole_hits),
        (0, 0),
        "no hole check in this variant"
    );
}

/// A handle knows its node; draining empty lists takes no lock and counts
/// no drain; dropping a handle whose lists are empty still folds its
/// pending allocation counts.
#[test]
fn empty_drains_cost_nothing_and_drop_folds_pending_counts() {
    let alloc = allocator(LockPolicy::PerBatch);
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    assert_eq!(cpu.node(), NodeId::ZERO);
    let zone = alloc.zone(DMA32).unwrap();
    let locks = zone.lock_acquisitions();
    cpu.drain();
    assert_eq!(zone.lock_acquisitions(), locks, "nothing to drain, no lock");
    assert_eq!(alloc.stats_total().pcp_drains, 0);
    let taken: Vec<Pfn> = (0..BATCH).map(|_| cpu.alloc(Gfp::DMA32).unwrap()).collect();
    assert_eq!(cpu.count(DMA32), 0, "one refill, all handed out");
    drop(cpu);
    assert_eq!(
        alloc.stats_total().allocs[0],
        u64::from(BATCH),
        "counted at drop although nothing was left to drain"
    );
    for p in taken {
        alloc.free_pages(p, Order::ZERO).unwrap();
    }
}

/// An allocator over `preset:x86-pci-hole` for `cpus` CPUs in `era`, with
/// `percpu_pagelist_high_fraction` set to `fraction`.
fn x86_allocator(
    era: buddy::Era,
    cpus: u32,
    fraction: u32,
) -> Result<Allocator<SparseExtreme, Kernel>, InitError> {
    // 4 GiB above the hole: a Normal zone still large enough for the
    // largest zone_batchsize, at a quarter of the preset's struct pages.
    let layout = sparsemem::testing::pci_hole_layout(4);
    let options = Options {
        era,
        cpus: Some(cpus),
        percpu_pagelist_high_fraction: fraction,
        ..Options::default()
    };
    Allocator::new(SparseExtreme::new(&layout).unwrap(), &layout, options)
}

/// 6.18 sizes `pcp->high` from the zone's low watermark split over the
/// node's CPUs (`zone_highsize`), at least four batches; 5.13 and older use
/// six batches. The watermarks follow `__setup_per_zone_wmarks`.
#[test]
fn high_follows_the_era() {
    let build = |era, cpus| x86_allocator(era, cpus, 0).unwrap();
    let old = build(buddy::Era::V5_13, 2);
    let new = build(buddy::Era::V6_18, 2);
    let normal = |a: &Allocator<SparseExtreme, Kernel>| {
        a.zones()
            .iter()
            .find(|z| z.kind == buddy::ZoneType::Normal)
            .map(|z| (z.batch(), z.high(), z.watermarks(), z.managed_pages()))
            .unwrap()
    };
    let (batch, high_old, _, _) = normal(&old);
    assert_eq!(high_old, 6 * batch);
    let (batch, high_new, marks, managed) = normal(&new);
    assert_eq!(batch, 63, "zone_batchsize of a large zone");
    assert!(marks.min < marks.low && marks.low < marks.high, "{marks:?}");
    assert!(marks.low - marks.min >= managed * 10 / 10_000);
    assert_eq!(u64::from(high_new), (marks.low / 2).max(4 * 63));
    assert!(
        high_new > high_old,
        "6.x keeps far more pages per CPU: {high_new} vs {high_old}"
    );
    let one_cpu = build(buddy::Era::V6_18, 1);
    assert_eq!(u64::from(normal(&one_cpu).1), marks.low.max(4 * 63));
}

/// `percpu_pagelist_high_fraction` sizes `high` from the zone's managed
/// pages instead of its low watermark, and a free drains at that `high`;
/// the kernel refuses a fraction below 8, and an era before 5.14 has no
/// such sysctl. Neither refusal builds anything.
#[test]
fn a_high_fraction_sizes_high_from_the_managed_pages() {
    let build = |era, fraction| x86_allocator(era, 2, fraction);
    let alloc = build(buddy::Era::V6_18, 8).unwrap();
    let dma32 = alloc.zone(DMA32).unwrap();
    let expected = (dma32.managed_pages() / 8 / 2).max(4 * u64::from(dma32.batch()));
    assert_eq!(u64::from(dma32.high()), expected);
    let default = build(buddy::Era::V6_18, 0).unwrap();
    let marks = default.zone(DMA32).unwrap().watermarks();
    assert_eq!(
        u64::from(default.zone(DMA32).unwrap().high()),
        (marks.low / 2).max(4 * u64::from(dma32.batch())),
        "0 keeps the low watermark"
    );
    assert_ne!(dma32.high(), default.zone(DMA32).unwrap().high());

    // A free that brings the list to `high` drains a batch.
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let held: Vec<Pfn> = (0..expected)
        .map(|_| cpu.alloc(Gfp::DMA32).unwrap())
        .collect();
    let mut peak = 0;
    for pfn in held {
        cpu.free(pfn).unwrap();
        peak = peak.max(cpu.count(DMA32));
    }
    assert_eq!(peak, expected - 1, "the list never stays at high");

    let e = build(buddy::Era::V6_18, 7).err().unwrap();
    assert!(
        matches!(e, InitError::HighFraction { fraction: 7 }),
        "{e:?}"
    );
    assert!(e.to_string().contains("below 8"), "{e}");
    let e = build(buddy::Era::V2_6_23, 8).err().unwrap();
    assert!(e.to_string().contains("arrived in Linux 5.14"), "{e}");
}

/// From 5.14 (the 6.18 era here) orders up to `PAGE_ALLOC_COSTLY_ORDER` and
/// `pageblock_order` have per-CPU lists of their own, refilled with
/// `batch >> order` blocks (at least 2) and counted in pages; before, only
/// order 0 does and the rest goes to the zone.
#[test]
fn high_orders_have_their_own_lists_from_5_14() {
    let layout = layout();
    for era in [buddy::Era::V5_13, buddy::Era::V6_18] {
        let options = Options {
            pcp_batch: Some(BATCH),
            ..Options::for_era(era)
        };
        let alloc =
            Allocator::<_, Kernel>::new(SparseExtreme::new(&layout).unwrap(), &layout, options)
                .unwrap();
        let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
        assert_eq!(
            cpu.pcp_allowed_order(Order::new(3)),
            era == buddy::Era::V6_18
        );
        assert!(!cpu.pcp_allowed_order(Order::new(4)));
        assert_eq!(
            cpu.pcp_allowed_order(Order::new(9)),
            era == buddy::Era::V6_18
        );
        let free = alloc.free_pages_total();
        let p = cpu.alloc_pages(Order::new(2), Gfp::KERNEL).unwrap();
        let thp = cpu
            .alloc_pages(Order::new(9), Gfp::TRANSHUGE_LIGHT)
            .unwrap();
        let held = 4 + 512;
        if era == buddy::Era::V6_18 {
            // Order 2: batch >> 2 = 2 blocks, one handed out; order 9: 2.
            assert_eq!(cpu.total_count(), 4 + 512);
            assert_eq!(alloc.free_pages_total(), free - held - 4 - 512);
        } else {
            assert_eq!(cpu.total_count(), 0, "the zone served both");
            assert_eq!(alloc.free_pages_total(), free - held);
        }
        let before = cpu.total_count();
        cpu.free_pages(p, Order::new(2)).unwrap();
        cpu.free_pages(thp, Order::new(9)).unwrap();
        if era == buddy::Era::V6_18 {
            // Each free reaches `high` (a few batches on this small zone),
            // and `free_pcppages_bulk` starts at the freed block's list:
            // the two order-2 blocks go, then the THP freed last.
            assert!(u64::from(alloc.zone(DMA32).unwrap().high()) < before);
            assert_eq!(cpu.total_count(), 512, "one THP left on its list");
        } else {
            assert_eq!(cpu.total_count(), before);
        }
        drop(cpu);
        assert_eq!(alloc.free_pages_total(), free);
        assert_eq!(alloc.stats_total().allocs[9], 1);
        assert_eq!(alloc.stats_total().frees[2], 1);
    }
}

/// `alloc_pages_bulk_list` threads the pages through their `lru` links;
/// walking the chain frees them. While listed, a page is the chain's: a
/// stray free of its pfn is refused and changes nothing; a chain of another
/// allocator is refused; a page taken off is an ordinary allocated page;
/// dropping a chain gives back what is left on it.
#[test]
fn a_bulk_list_owns_its_pages_until_they_are_taken_off_or_freed() {
    use buddy::PageChain;
    let other = allocator(LockPolicy::PerBatch);
    let alloc = allocator(LockPolicy::PerBatch);
    let managed = alloc.free_pages_total();
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let mut list = PageChain::new(&alloc);
    assert_eq!(cpu.alloc_bulk_list(40, Gfp::DMA32, &mut list).unwrap(), 40);
    let pfns: Vec<Pfn> = list.iter().collect();
    assert_eq!((pfns.len(), list.len()), (40, 40));
    let distinct: std::collections::BTreeSet<_> = pfns.iter().collect();
    assert_eq!(distinct.len(), 40, "no page listed twice");

    let stray = pfns[7];
    assert!(
        matches!(cpu.free(stray), Err(FreeError::NotAllocated { pfn }) if pfn == stray),
        "a listed page is the chain's"
    );
    assert!(matches!(
        alloc.free_pages(stray, Order::ZERO),
        Err(FreeError::NotAllocated { pfn }) if pfn == stray
    ));
    assert_eq!(list.iter().collect::<Vec<_>>(), pfns, "the chain is intact");

    let mut foreign = PageChain::new(&other);
    assert!(matches!(
        cpu.alloc_bulk_list(4, Gfp::DMA32, &mut foreign),
        Err(RequestError::ForeignChain)
    ));
    assert!(matches!(
        cpu.free_bulk_list(&mut foreign),
        Err(FreeError::ForeignChain)
    ));

    let first = list.pop_front().unwrap();
    assert_eq!(first, pfns[0]);
    cpu.free(first).expect("taken off, it is an ordinary page");
    assert_eq!(cpu.free_bulk_list(&mut list).unwrap(), 39);
    assert!(list.is_empty());

    assert_eq!(cpu.alloc_bulk_list(16, Gfp::DMA32, &mut list).unwrap(), 16);
    drop(list);
    drop(cpu);
    assert_eq!(alloc.free_pages_total(), managed, "nothing is lost");
}
