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
