//! Memory hotplug through the allocator.

use buddy::{AllocError, Allocator, Gfp, KernelHoleCheck, Options, ZoneType};
use sparsemem::{Layout, MemoryModel, NodeId, Order, Pfn};
use vmemmap::VmemmapProbe;

#[test]
fn add_online_allocate_offline_remove() {
    let layout = Layout::preset("zone-device").unwrap();
    let mut alloc = Allocator::<_, KernelHoleCheck>::new(
        VmemmapProbe::new(&layout).unwrap(),
        &layout,
        Options::default(),
    )
    .unwrap();
    let start = Pfn::new((16u64 << 30) >> 12);
    let nr = 32768;
    let resident = alloc.model().memmap_bytes().resident;
    alloc.hot_add(start, nr).unwrap();
    assert!(alloc.model().pfn_valid(start));
    alloc.online_pages(start, nr, NodeId::new(1)).unwrap();
    let zid = alloc
        .zones()
        .iter()
        .position(|z| z.kind == ZoneType::Movable && z.node == NodeId::new(1))
        .unwrap();
    assert!(alloc.zones()[zid].managed_pages() >= nr);

    let mut cpu = alloc.cpu_on(NodeId::new(1)).unwrap();
    let mut taken = Vec::new();
    while let Ok(p) = cpu.alloc_pages(Order::new(9), Gfp::MOVABLE.thisnode()) {
        taken.push(p);
    }
    assert!(
        taken.iter().any(|p| *p >= start),
        "hot-added memory is handed out"
    );
    drop(cpu);
    let free_before = alloc.zones()[zid].free_pages();
    let e = alloc.offline_pages(start, nr).unwrap_err();
    assert!(matches!(e, AllocError::InUse { .. }), "{e}");
    assert!(e.to_string().starts_with("cannot offline:"));
    assert_eq!(
        alloc.zones()[zid].free_pages(),
        free_before,
        "a refused offline changes nothing"
    );
    assert!(
        matches!(alloc.hot_remove(start, nr), Err(AllocError::InUse { .. })),
        "online memory cannot be removed"
    );

    for p in taken {
        alloc.free_pages(p, Order::new(9)).unwrap();
    }
    let managed = alloc.zones()[zid].managed_pages();
    alloc.offline_pages(start, nr).unwrap();
    assert_eq!(alloc.zones()[zid].managed_pages(), managed - nr);
    assert!(alloc.model().pfn_to_online_page(start).is_none());
    alloc.hot_remove(start, nr).unwrap();
    assert!(!alloc.model().pfn_valid(start));
    assert!(alloc.model().memmap_bytes().resident <= resident + (64 << 10));
    let mut cpu = alloc.cpu_on(NodeId::new(1)).unwrap();
    while let Ok(p) = cpu.alloc(Gfp::MOVABLE) {
        assert!(
            p < start || p.get() >= start.get() + nr,
            "offlined memory is never handed out"
        );
        if cpu
            .allocator()
            .zones()
            .iter()
            .map(|z| z.free_pages())
            .sum::<u64>()
            == 0
        {
            break;
        }
    }
}

/// Regression (found by fuzzing): the reserved hole of an early section
/// has `struct page`s but is not memory; it must never be onlined (it was,
/// and later handed out). Only hot-added or offlined memory can be onlined
/// or removed.
#[test]
fn only_offline_memory_can_be_onlined_or_removed() {
    let layout = Layout::new(
        sparsemem::Geometry::X86_64,
        vec![sparsemem::MemRange::new(
            0,
            64 << 20,
            sparsemem::RangeKind::Ram,
            0,
        )],
        "half a section",
    )
    .unwrap();
    let mut alloc = Allocator::<_, KernelHoleCheck>::new(
        VmemmapProbe::new(&layout).unwrap(),
        &layout,
        Options::default(),
    )
    .unwrap();
    let hole = Pfn::new((96 << 20) >> 12);
    assert!(
        alloc.model().pfn_valid(hole),
        "early section: the hole has struct pages"
    );
    let e = alloc.online_pages(hole, 512, NodeId::new(0)).unwrap_err();
    assert!(matches!(e, AllocError::NotOffline { .. }), "{e}");
    assert!(matches!(
        alloc.hot_remove(hole, 512),
        Err(AllocError::NotOffline { .. })
    ));
    assert!(
        matches!(
            alloc.offline_pages(Pfn::new(1), 512),
            Err(AllocError::Hotplug(_))
        ),
        "misaligned"
    );
    // Boot memory can be offlined, onlined again (into Movable) and removed.
    let boot = Pfn::new((32 << 20) >> 12);
    alloc.offline_pages(boot, 512).unwrap();
    assert!(
        matches!(
            alloc.online_pages(boot, 1024, NodeId::new(0)),
            Err(AllocError::NotOffline { .. })
        ),
        "half of it is online"
    );
    alloc.online_pages(boot, 512, NodeId::new(0)).unwrap();
    assert!(
        alloc
            .zones()
            .iter()
            .any(|z| z.kind == ZoneType::Movable && z.managed_pages() == 512)
    );
    alloc.offline_pages(boot, 512).unwrap();
    alloc.hot_remove(boot, 512).unwrap();
    let mut cpu = alloc.cpu_on(NodeId::new(0)).unwrap();
    while let Ok(p) = cpu.alloc(Gfp::KERNEL) {
        assert!(
            p.get() < (64 << 20) >> 12 && (p < boot || p.get() >= boot.get() + 512),
            "{p:?}"
        );
    }
}

/// The 2.6.9 bitmap buddy decides merges from its pair bits, which must
/// survive the zone growing in either direction (`FreeArea::resize`), and
/// offlining a piece out of a free block. Run against the no-bitmap buddy
/// as the reference: both must end with the same free lists.
#[test]
fn the_bitmap_buddy_follows_hot_add_online_offline_and_remove() {
    fn run<V: buddy::Variant>() -> Vec<(Pfn, Order)> {
        use buddy::testing::{Reference, check_structure};
        const SECTION: u64 = 1 << 15;
        let layout = Layout::new(
            sparsemem::Geometry::X86_64,
            vec![sparsemem::MemRange::new(
                0,
                128 << 20,
                sparsemem::RangeKind::Ram,
                0,
            )],
            "one section",
        )
        .unwrap();
        let model = sparsemem::SparseExtreme::new(&layout).unwrap();
        let mut alloc = Allocator::<_, V>::new(model, &layout, Options::default()).unwrap();
        let node = NodeId::ZERO;
        let none = Reference::default();
        // Section 3 first, then section 2 below it: the Movable zone's span
        // (and the bitmap's base) grows downwards with memory allocated.
        alloc.hot_add(Pfn::new(3 * SECTION), SECTION).unwrap();
        alloc
            .online_pages(Pfn::new(3 * SECTION), SECTION, node)
            .unwrap();
        let movable = alloc
            .zones()
            .iter()
            .find(|z| z.kind == ZoneType::Movable)
            .unwrap()
            .id;
        let held: Vec<Pfn> = (0..7)
            .map(|_| {
                alloc
                    .alloc_pages(Order::new(3), Gfp::MOVABLE, node, None)
                    .unwrap()
            })
            .collect();
        alloc.hot_add(Pfn::new(2 * SECTION), SECTION).unwrap();
        alloc
            .online_pages(Pfn::new(2 * SECTION), SECTION, node)
            .unwrap();
        let zone = alloc.zone(movable).unwrap();
        assert_eq!(
            (zone.start_pfn().get(), zone.end_pfn().get()),
            (2 * SECTION, 4 * SECTION)
        );
        for p in held {
            alloc.free_pages(p, Order::new(3)).unwrap();
        }
        check_structure(&alloc, &none).unwrap();
        assert_eq!(
            alloc.zone(movable).unwrap().nr_free()[10],
            2 * SECTION / 1024,
            "{}: everything merged back to max-order blocks",
            V::name()
        );
        // Offline 2 MiB out of the middle of a free max-order block, then
        // bring it back: the straddling block is split and re-merged.
        let piece = Pfn::new(2 * SECTION + 1024 + 512);
        alloc.offline_pages(piece, 512).unwrap();
        check_structure(&alloc, &none).unwrap();
        let mut cpu = alloc.cpu_on(node).unwrap();
        let mut taken = Vec::new();
        while let Ok(p) = cpu.alloc_pages(Order::ZERO, Gfp::MOVABLE.thisnode()) {
            assert!(
                !(piece.get()..piece.get() + 512).contains(&p.get()),
                "offline memory handed out"
            );
            taken.push(p);
            if taken.len() == 5000 {
                break;
            }
        }
        for p in taken {
            cpu.free(p).unwrap();
        }
        drop(cpu);
        alloc.online_pages(piece, 512, node).unwrap();
        check_structure(&alloc, &none).unwrap();
        // The first half of a max-order block: the free tail goes back.
        let head_half = Pfn::new(2 * SECTION + 4096);
        alloc.offline_pages(head_half, 512).unwrap();
        check_structure(&alloc, &none).unwrap();
        alloc.online_pages(head_half, 512, node).unwrap();
        // A piece of an order-9 free block: one page of the max-order block
        // around it stays allocated, so the pair bit of order 9 is live.
        let pinned = alloc
            .alloc_pages(Order::ZERO, Gfp::MOVABLE.thisnode(), node, None)
            .unwrap();
        let block = Pfn::new(pinned.get() & !1023);
        let other_half = Pfn::new(
            block.get()
                + if pinned.get() - block.get() < 512 {
                    512
                } else {
                    0
                },
        );
        alloc.offline_pages(other_half, 512).unwrap();
        check_structure(&alloc, &none).unwrap();
        alloc.online_pages(other_half, 512, node).unwrap();
        alloc.free_pages(pinned, Order::ZERO).unwrap();
        check_structure(&alloc, &none).unwrap();
        let blocks = alloc.free_blocks(movable);
        alloc.offline_pages(Pfn::new(3 * SECTION), SECTION).unwrap();
        alloc.hot_remove(Pfn::new(3 * SECTION), SECTION).unwrap();
        check_structure(&alloc, &none).unwrap();
        assert_eq!(
            alloc.zone(movable).unwrap().free_pages(),
            SECTION,
            "{}",
            V::name()
        );
        blocks
    }
    let mut bitmap = run::<buddy::Bitmap>();
    let mut reference = run::<buddy::Kernel>();
    bitmap.sort_unstable();
    reference.sort_unstable();
    assert_eq!(
        bitmap, reference,
        "the bitmap buddy ends where the no-bitmap buddy does"
    );
    assert_eq!(
        bitmap.len() as u64,
        2 * (1 << 15) / 1024,
        "fully merged after re-onlining"
    );
}

/// A hot-add whose memmap would not fit this machine is refused before
/// anything is mapped, on section-table and vmemmap models alike; and a
/// hostile hot-remove over the whole physical space answers at once.
#[test]
fn an_absurd_hot_add_is_refused_and_a_huge_remove_answers_quickly() {
    fn check<M: sparsemem::MemoryModel>(model: M, layout: &Layout) {
        let mut alloc =
            Allocator::<_, KernelHoleCheck>::new(model, layout, Options::default()).unwrap();
        let g = *layout.geometry();
        let start = Pfn::new((32u64 << 30) >> g.page_shift()); // past the 32 GiB of RAM
        let nr = g.max_pfn().get() - start.get();
        let e = alloc.hot_add(start, nr).unwrap_err();
        assert!(
            matches!(e, AllocError::Hotplug(sparsemem::HotplugError::TooLarge(_))),
            "{e}"
        );
        assert!(!alloc.model().pfn_valid(start), "nothing was added");
        let t = std::time::Instant::now();
        assert!(alloc.hot_remove(Pfn::new(0), g.max_pfn().get()).is_err());
        assert!(
            t.elapsed().as_secs() < 10,
            "bounded by the zones, not the range"
        );
    }
    let layout = Layout::preset("x86-pci-hole").unwrap();
    check(sparsemem::SparseExtreme::new(&layout).unwrap(), &layout);
    check(vmemmap::VmemmapTable::new(&layout).unwrap(), &layout);
}
