//! Every misuse returns an error and leaves the allocator unchanged.

use buddy::testing::{Reference, check_conservation, snapshot};
use buddy::{
    Allocator, FreeError, Gfp, InitError, Kernel, MAX_BULK, ModelMismatch, Options, RequestError,
};
use sparsemem::table::Extreme;
use sparsemem::{
    BuddyPage, Layout, MemRange, MemoryModel, NodeId, Order, Pfn, RangeKind, Sparse, SparseExtreme,
};

fn small_layout() -> Layout {
    Layout::new(
        sparsemem::Geometry::X86_64,
        vec![
            MemRange::new(0, 64 << 20, RangeKind::Ram, 0),
            MemRange::new(64 << 20, 128 << 20, RangeKind::Reserved, 0),
        ],
        "small",
    )
    .unwrap()
}

fn allocator(layout: &Layout) -> Allocator<SparseExtreme, Kernel> {
    Allocator::new(
        SparseExtreme::new(layout).unwrap(),
        layout,
        Options::default(),
    )
    .unwrap()
}

/// At every size the allocator runs at: at 32 bytes a listed page's
/// count word is a link, and the claim must still refuse it.
#[test]
fn misuse_is_refused_and_changes_nothing() {
    let layout = small_layout();
    buddy::for_each_buddy_layout!(misuse_at(&layout)).unwrap();
}

fn misuse_at<P: BuddyPage>(layout: &Layout) -> Result<(), String> {
    let model = Sparse::<Extreme, P>::build(layout).map_err(|e| e.to_string())?;
    let alloc = Allocator::<_, Kernel>::new(model, layout, Options::default()).unwrap();
    let mut cpu = alloc.cpu_on(NodeId::new(0)).unwrap();
    let whole = snapshot(&alloc);
    let single = cpu.alloc(Gfp::KERNEL).unwrap();
    let block = cpu.alloc_pages(Order::new(4), Gfp::KERNEL).unwrap();
    cpu.drain();
    let before = snapshot(&alloc);

    let double = cpu.alloc(Gfp::KERNEL).unwrap();
    cpu.free(double).unwrap();
    assert!(
        matches!(cpu.free(double), Err(FreeError::DoubleFree { .. })),
        "double free on the pcp list"
    );
    cpu.drain();
    assert!(
        matches!(cpu.free(double), Err(FreeError::DoubleFree { .. })),
        "double free after merging"
    );
    assert_eq!(snapshot(&alloc), before);

    let never = Pfn::new(block.get() + 32);
    let e = cpu.free(never).unwrap_err();
    assert!(
        matches!(
            e,
            FreeError::NotAllocated { .. } | FreeError::DoubleFree { .. }
        ),
        "{e}"
    );
    let tail = Pfn::new(block.get() + 1);
    assert!(
        matches!(cpu.free(tail), Err(FreeError::NotAllocated { .. })),
        "a tail of an allocated block"
    );
    let e = cpu.free_pages(block, Order::new(2)).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("pfn {block} freed with order 2 but allocated with order 4")
    );
    let reserved = Pfn::new((64 << 20) >> 12);
    assert!(
        matches!(cpu.free(reserved), Err(FreeError::OutsideZone { .. })),
        "reserved page"
    );
    let hole = Pfn::new(1 << 30);
    assert_eq!(
        cpu.free(hole).unwrap_err().to_string(),
        "pfn 0x40000000 is outside every zone"
    );
    assert!(matches!(
        cpu.free(Pfn::new(u64::MAX)),
        Err(FreeError::OutsideZone { .. })
    ));
    let mut slots = vec![None; MAX_BULK + 1];
    assert!(matches!(
        cpu.alloc_bulk_array(Gfp::KERNEL, &mut slots),
        Err(RequestError::BulkTooLarge { .. })
    ));
    let mut list = Vec::new();
    assert!(matches!(
        cpu.alloc_bulk_vec(usize::MAX, Gfp::KERNEL, &mut list),
        Err(RequestError::BulkTooLarge { .. })
    ));
    assert!(list.is_empty() && slots.iter().all(Option::is_none));
    let order = cpu.alloc_pages(Order::new(11), Gfp::KERNEL).unwrap_err();
    assert_eq!(order.to_string(), "order 11 is above MAX_PAGE_ORDER (10)");
    let order = cpu.free_pages(single, Order::new(11)).unwrap_err();
    assert_eq!(order.to_string(), "order 11 is above MAX_PAGE_ORDER (10)");
    let order = Order::try_new(17).map_err(RequestError::from).unwrap_err();
    assert_eq!(order.to_string(), "order 17 is above MAX_PAGE_ORDER (16)");
    assert_eq!(
        snapshot(&alloc),
        before,
        "no refused call changed the free lists"
    );

    // The allocator still works: free the real blocks and everything merges back.
    cpu.free(single).unwrap();
    cpu.free_pages(block, Order::new(4)).unwrap();
    cpu.drain();
    check_conservation(&alloc, 0, &Reference::default())?;
    assert_eq!(snapshot(&alloc), whole, "everything merged back");
    let page = alloc.model().pfn_to_page(block).unwrap();
    let zone = alloc.zones().iter().find(|z| z.spans(block)).unwrap();
    assert_eq!(
        (page.zone_id(), page.node_id(), page.section()),
        (zone.id.get(), 0, 0),
        "the frees kept the zone, node and section bits"
    );
    Ok(())
}

#[test]
fn exhaustion_is_no_memory_not_a_panic() {
    let layout = small_layout();
    let alloc = allocator(&layout);
    let mut cpu = alloc.cpu_on(NodeId::new(0)).unwrap();
    let mut got = Vec::new();
    loop {
        match cpu.alloc_pages(Order::new(3), Gfp::KERNEL) {
            Ok(p) => got.push(p),
            Err(e) => {
                assert!(matches!(e, RequestError::NoMemory { .. }), "{e}");
                break;
            }
        }
    }
    assert_eq!(
        got.len() as u64 * 8 + cpu.total_count(),
        16384 - alloc.zones().iter().map(|z| z.nr_free_pages()).sum::<u64>()
    );
    assert!(cpu.alloc_pages(Order::new(10), Gfp::KERNEL).is_err());
    for p in got {
        cpu.free_pages(p, Order::new(3)).unwrap();
    }
}

#[test]
fn dma32_request_never_gets_normal_memory_and_thisnode_stays_home() {
    let layout = Layout::preset("numa-fake-64").unwrap();
    let alloc = Allocator::<_, Kernel>::new(
        SparseExtreme::new(&layout).unwrap(),
        &layout,
        Options::default(),
    )
    .unwrap();
    let mut cpu = alloc.cpu_on(NodeId::new(5)).unwrap();
    assert_eq!(cpu.node(), NodeId::new(5));
    let pfn = cpu.alloc(Gfp::KERNEL.thisnode()).unwrap();
    assert_eq!(layout.node_of(pfn), NodeId::new(5));
    let mut cpu = alloc.cpu_on(NodeId::new(63)).unwrap();
    cpu.set_cpuset(Some(buddy::NodeMask::of([NodeId::new(2)])));
    let pfn = cpu.alloc(Gfp::KERNEL).unwrap();
    assert_eq!(
        layout.node_of(pfn),
        NodeId::new(2),
        "the cpuset filter skipped every other node"
    );
    cpu.set_cpuset(Some(buddy::NodeMask::empty()));
    assert!(matches!(
        cpu.alloc(Gfp::KERNEL),
        Err(RequestError::NoMemory { .. })
    ));
}

/// A model built from another layout or geometry is refused with an error
/// by every variant, never a panic (it used to panic in the hole-check
/// variant's range freeing).
#[test]
fn a_model_from_another_layout_is_refused_by_every_variant() {
    use buddy::{Bitmap, KernelHoleCheck, NoBitmapAtomic, Variant};
    fn refused<V: Variant>(model: SparseExtreme, layout: &Layout) -> InitError {
        // 2.6.9: the era in which every variant existed.
        match Allocator::<_, V>::new(model, layout, Options::for_era(buddy::Era::V2_6_9)) {
            Ok(_) => panic!("{}: a mismatched model was accepted", V::name()),
            Err(e) => e,
        }
    }
    fn all_variants(make: impl Fn() -> SparseExtreme, layout: &Layout) -> Vec<InitError> {
        vec![
            refused::<Kernel>(make(), layout),
            refused::<KernelHoleCheck>(make(), layout),
            refused::<NoBitmapAtomic>(make(), layout),
            refused::<Bitmap>(make(), layout),
        ]
    }
    let small = small_layout();
    let big = Layout::preset("x86-pci-hole").unwrap();
    for e in all_variants(|| SparseExtreme::new(&small).unwrap(), &big) {
        let InitError::ModelMismatch(ModelMismatch::NotValid { pfn, .. }) = &e else {
            panic!("expected a pfn mismatch, got {e}");
        };
        assert!(
            pfn.get() >= (128 << 20) >> 12,
            "{e}: the first pfn the small model lacks"
        );
        assert!(
            e.to_string()
                .contains("not valid in the sparse-extreme model"),
            "{e}"
        );
    }
    let arm = Layout::new(
        sparsemem::Geometry::ARM64_64K,
        vec![MemRange::new(0, 1 << 30, RangeKind::Ram, 0)],
        "arm",
    )
    .unwrap();
    for e in all_variants(|| SparseExtreme::new(&arm).unwrap(), &small) {
        assert!(
            matches!(e, InitError::ModelMismatch(ModelMismatch::Geometry { .. })),
            "geometry mismatch: {e}"
        );
        assert!(e.to_string().contains("geometry"), "{e}");
    }
}

/// A node without memory is an error, never silently served from node 0.
#[test]
fn an_unknown_node_is_an_error() {
    let layout = small_layout();
    let alloc = allocator(&layout);
    let node = NodeId::new(7);
    let before = snapshot(&alloc);
    assert!(matches!(alloc.cpu_on(node), Err(RequestError::UnknownNode { node: n }) if n == node));
    assert!(matches!(
        alloc.alloc_pages(Order::new(2), Gfp::KERNEL, node, None),
        Err(RequestError::UnknownNode { .. })
    ));
    assert!(matches!(
        alloc.zonelist(node, Gfp::KERNEL),
        Err(RequestError::UnknownNode { .. })
    ));
    assert_eq!(
        alloc.cpu_on(node).err().unwrap().to_string(),
        "node 7 has no memory in this allocator"
    );
    assert!(alloc.zone(buddy::ZoneId::new(200)).is_none());
    assert!(alloc.free_blocks(buddy::ZoneId::new(200)).is_empty());
    assert_eq!(snapshot(&alloc), before, "nothing changed");
}

/// The allocator-wide totals are the sums of the zones'.
#[test]
fn totals_sum_the_zones() {
    // x86-pci-hole's three zones with 1 GiB above 4 GiB instead of 28.
    let layout = sparsemem::testing::pci_hole_layout(1);
    let alloc = allocator(&layout);
    let zones = alloc.zones();
    assert!(zones.len() >= 3, "DMA, DMA32 and Normal");
    assert_eq!(
        alloc.free_pages_total(),
        zones.iter().map(|z| z.nr_free_pages()).sum::<u64>()
    );
    assert_eq!(
        alloc.managed_pages_total(),
        alloc.free_pages_total(),
        "nothing allocated yet"
    );
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let a = cpu.alloc(Gfp::KERNEL).unwrap();
    let b = cpu.alloc_pages(Order::new(3), Gfp::KERNEL).unwrap();
    let on_pcp = cpu.total_count();
    assert_eq!(
        alloc.free_pages_total() + on_pcp + 1 + 8,
        alloc.managed_pages_total(),
        "free + per-CPU + allocated = managed"
    );
    cpu.free(a).unwrap();
    cpu.free_pages(b, Order::new(3)).unwrap();
    drop(cpu);
    let stats = alloc.stats_total();
    assert_eq!(stats.allocs[3], 1);
    assert_eq!(stats.frees[3], 1);
    assert_eq!(stats.allocs[0], 1, "the pcp allocation, folded in at drain");
    assert_eq!(stats.frees[0], 1);
    assert_eq!(
        stats.pcp_refills, 2,
        "one refill per list: order 0, and order 3 (per-CPU since 5.14)"
    );
    assert_eq!(alloc.free_pages_total(), alloc.managed_pages_total());
}

/// The structural checker reads the lists: a block the reference believes
/// allocated but which is free is caught, and so is the right answer.
#[test]
fn the_structure_checker_reads_the_free_lists() {
    use buddy::testing::check_structure;
    let layout = small_layout();
    let alloc = allocator(&layout);
    let mut reference = Reference::default();
    check_structure(&alloc, &reference).unwrap();
    let zid = alloc.zones()[0].id;
    let (free_pfn, order) = alloc.free_blocks(zid)[0];
    reference.record(&layout, free_pfn, order).unwrap();
    let e = check_structure(&alloc, &reference).unwrap_err();
    assert!(e.contains("overlaps allocated"), "{e}");
}

/// A reserved page inside a zone's span (a hole within an early section) is
/// outside every zone for a free, not "never allocated".
#[test]
fn a_reserved_page_inside_a_zone_span_is_outside_every_zone() {
    let layout = Layout::new(
        sparsemem::Geometry::X86_64,
        vec![
            MemRange::new(0, 4 << 20, RangeKind::Ram, 0),
            MemRange::new(4 << 20, 8 << 20, RangeKind::Reserved, 0),
            MemRange::new(8 << 20, 16 << 20, RangeKind::Ram, 0),
        ],
        "hole in zone 0",
    )
    .unwrap();
    let alloc = Allocator::<_, buddy::KernelHoleCheck>::new(
        SparseExtreme::new(&layout).unwrap(),
        &layout,
        Options::for_era(buddy::Era::V5_13),
    )
    .unwrap();
    // Reserved pages keep zone id 0 from memmap init: the hole sits inside
    // zone 0 (DMA), so only the reserved flag tells it apart.
    let hole = Pfn::new((6 << 20) >> 12);
    let zone = &alloc.zones()[0];
    assert!(zone.spans(hole), "DMA spans the hole");
    let (start, end) = (zone.start_pfn(), zone.end_pfn());
    assert!(zone.spans(start) && zone.spans(end - 1) && !zone.spans(end));
    assert!(start.get() == 0 || !zone.spans(start - 1));
    let e = alloc.free_pages(hole, Order::ZERO).unwrap_err();
    assert!(
        matches!(e, FreeError::OutsideZone { pfn } if pfn == hole),
        "{e}"
    );
}

/// The names a report prints.
#[test]
fn zone_names_and_ids_print_as_the_kernel_spells_them() {
    use buddy::{ZoneId, ZoneType};
    let names: Vec<&str> = ZoneType::ALL.iter().map(|z| z.name()).collect();
    assert_eq!(names, ["DMA", "DMA32", "Normal", "Movable"]);
    assert_eq!(ZoneId::new(7).to_string(), "7");
    assert_eq!(ZoneId::new(7).index(), 7);
}

/// `stats_total` adds every counter of every zone.
#[test]
fn stats_total_adds_every_counter_of_every_zone() {
    use buddy::{KernelHoleCheck, ZoneStats};
    let layout = sparsemem::testing::pci_hole_layout(1);
    let alloc = Allocator::<_, KernelHoleCheck>::new(
        SparseExtreme::new(&layout).unwrap(),
        &layout,
        Options::for_era(buddy::Era::V5_13),
    )
    .unwrap();
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    for gfp in [Gfp::DMA, Gfp::DMA32, Gfp::HIGHUSER_MOVABLE] {
        for order in [0u8, 2, 5] {
            let p = cpu.alloc_pages(Order::new(order), gfp).unwrap();
            cpu.free_pages(p, Order::new(order)).unwrap();
        }
    }
    drop(cpu);
    let busy = alloc
        .zones()
        .iter()
        .filter(|z| z.stats() != ZoneStats::default())
        .count();
    assert!(busy >= 2, "activity in several zones");
    let mut sum = ZoneStats::default();
    for z in alloc.zones() {
        let s = z.stats();
        for o in 0..sparsemem::NR_PAGE_ORDERS {
            sum.allocs[o] += s.allocs[o];
            sum.frees[o] += s.frees[o];
        }
        sum.merges += s.merges;
        sum.splits += s.splits;
        sum.pcp_refills += s.pcp_refills;
        sum.pcp_drains += s.pcp_drains;
        sum.pcp_refill_blocks += s.pcp_refill_blocks;
        sum.pcp_drain_blocks += s.pcp_drain_blocks;
        sum.hole_checks += s.hole_checks;
        sum.hole_hits += s.hole_hits;
        sum.fallbacks += s.fallbacks;
        sum.steals += s.steals;
        sum.whole_block_claims += s.whole_block_claims;
        sum.merge_likely_tails += s.merge_likely_tails;
        sum.numa += s.numa;
    }
    assert_eq!(alloc.stats_total(), sum);
    assert!(sum.merges > 0 && sum.splits > 0 && sum.hole_checks > 0 && sum.pcp_drains > 0);
    assert!(sum.pcp_refill_blocks >= sum.pcp_refills && sum.pcp_drain_blocks >= sum.pcp_drains);
}

/// The largest block is the geometry's `MAX_PAGE_ORDER`: a whole 512 MiB
/// section on arm64 with 64 KiB pages, a 1 GiB section on ia64; one order
/// more is refused with the geometry's limit in the message.
#[test]
fn max_order_follows_the_geometry() {
    use buddy::KernelHoleCheck;
    use sparsemem::{Geometry, MemRange, RangeKind};
    for (g, max) in [
        (Geometry::X86_64, 10),
        (Geometry::ARM64_64K, 13),
        (Geometry::IA64, 16),
    ] {
        let section = 1u64 << g.section_size_bits();
        let layout = Layout::new(
            g,
            vec![MemRange::new(section, 2 * section, RangeKind::Ram, 0)],
            "one section",
        )
        .unwrap();
        let alloc = Allocator::<_, KernelHoleCheck>::new(
            SparseExtreme::new(&layout).unwrap(),
            &layout,
            Options::for_era(buddy::Era::V5_13),
        )
        .unwrap();
        let zone = &alloc.zones()[0];
        assert_eq!(zone.max_order(), Order::new(max), "{}", g.name());
        assert_eq!(
            zone.nr_free()[usize::from(max)],
            section >> g.page_shift() >> max
        );
        // The whole zone on arm64-64k: only past the watermarks.
        let gfp = Gfp::HIGHUSER_MOVABLE | Gfp::MEMALLOC;
        let p = alloc
            .alloc_pages(Order::new(max), gfp, NodeId::ZERO, None)
            .unwrap();
        assert_eq!(p.get() % (1 << max), 0);
        let e = match Order::try_new(u64::from(max) + 1) {
            Ok(above) => alloc
                .alloc_pages(above, Gfp::HIGHUSER_MOVABLE, NodeId::ZERO, None)
                .unwrap_err(),
            Err(e) => RequestError::from(e),
        };
        assert_eq!(
            e.to_string(),
            format!("order {} is above MAX_PAGE_ORDER ({max})", max + 1)
        );
        alloc.free_pages(p, Order::new(max)).unwrap();
    }
}

/// With FLATMEM's mem_map rounded to max-order blocks, the buddy without
/// the hole check accepts boot memory that does not start or end on a
/// max-order boundary (it reads the rounded edges' reserved descriptors).
#[test]
fn flatmem_needs_no_hole_check_on_unaligned_memory() {
    use sparsemem::{Flat, MemRange, RangeKind};
    let layout = Layout::new(
        sparsemem::Geometry::X86_64,
        vec![
            MemRange::new(0x1000, 0x9fc00, RangeKind::Ram, 0),
            MemRange::new(0x100000, (64 << 20) - 0x3000, RangeKind::Ram, 0),
        ],
        "PC-like",
    )
    .unwrap();
    let alloc = Allocator::<_, buddy::Kernel>::new(
        Flat::new(&layout).unwrap(),
        &layout,
        Options::default(),
    )
    .unwrap();
    let free = alloc.free_pages_total();
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let mut taken = Vec::new();
    while let Ok(p) = cpu.alloc(Gfp::KERNEL) {
        taken.push(p);
    }
    for p in taken {
        cpu.free(p).unwrap();
    }
    drop(cpu);
    assert_eq!(alloc.free_pages_total(), free, "everything merged back");
}

/// A variant the chosen era did not have is refused before anything is
/// built, with a message naming the era that had it.
#[test]
fn a_variant_outside_its_era_is_refused() {
    use buddy::{Bitmap, Era, Gone, KernelHoleCheck, NoBitmapAtomic, NotInEra};
    let layout = small_layout();
    let model = || SparseExtreme::new(&layout).unwrap();
    let refusal = |r: Result<(), InitError>| match r {
        Err(InitError::EraMismatch(why)) => why,
        other => panic!("expected an era refusal, got {other:?}"),
    };
    let why = refusal(
        Allocator::<_, Bitmap>::new(model(), &layout, Options::for_era(Era::V2_6_23)).map(drop),
    );
    assert!(
        matches!(
            why,
            NotInEra::Variant {
                gone: Gone::BuddyBitmap,
                era: Era::V2_6_23,
                ..
            }
        ),
        "{why:?}"
    );
    let text = why.to_string();
    assert!(text.contains("2.6.9") && text.contains("bitmap"), "{text}");
    let why = refusal(
        Allocator::<_, NoBitmapAtomic>::new(model(), &layout, Options::default()).map(drop),
    );
    assert!(matches!(
        why,
        NotInEra::Variant {
            gone: Gone::AtomicBuddyFlags,
            ..
        }
    ));
    assert!(why.to_string().contains("era 6.18"), "{why}");
    let why = refusal(
        Allocator::<_, KernelHoleCheck>::new(model(), &layout, Options::default()).map(drop),
    );
    assert!(matches!(
        why,
        NotInEra::Variant {
            gone: Gone::HolesInZone,
            ..
        }
    ));
    assert!(why.to_string().contains("5.14"), "{why}");
    assert!(
        Allocator::<_, KernelHoleCheck>::new(model(), &layout, Options::for_era(Era::V5_13))
            .is_ok()
    );
}
