//! Memory hotplug through the allocator: whole memory blocks, the online
//! types, memmap initialised at online and pages freed to the tail, device
//! memory that never enters the buddy, and the refusals of the models that
//! cannot.

use buddy::testing::{Reference, check_structure};
use buddy::{
    Allocator, BuddyModel, FreeError, Gfp, Kernel, MemHotplugError, OnlineType, Options,
    RangeError, ZoneType,
};
use sparsemem::{
    BuddyPage, Geometry, HotplugError, Layout, MemRange, MemoryModel, NodeId, Order, PageFlag,
    PageLayout, Pfn, RangeKind,
};

const SECTION: u64 = 1 << 15; // pages per 128 MiB section: one memory block
const MIB: u64 = 1 << 20;

/// 256 MiB of RAM on node 0, one hot-added block (offline) for node 1 at
/// 512 MiB, and 6 MiB of device memory at 1 GiB.
fn layout() -> Layout {
    Layout::new(
        Geometry::X86_64,
        vec![
            MemRange::new(0, 256 * MIB, RangeKind::Ram, 0),
            MemRange::new(512 * MIB, 640 * MIB, RangeKind::Hotplug, 1),
            MemRange::new(1024 * MIB, 1030 * MIB, RangeKind::Device, 1),
        ],
        "hotplug test",
    )
    .unwrap()
}

fn pfn_at(mib: u64) -> Pfn {
    Pfn::new((mib * MIB) >> 12)
}

/// add → online with `online_type` → allocate → offline refused while in
/// use → free → offline → remove, on one model.
fn lifecycle<M: BuddyModel>(model: M, online_type: OnlineType) {
    let layout = layout();
    let mut alloc = Allocator::<_, Kernel>::new(model, &layout, Options::default()).unwrap();
    let name = alloc.model().name();
    let start = pfn_at(512);
    // The layout's hot-added block is present, offline and untouched.
    assert_eq!(
        alloc.offline_blocks(),
        vec![(start, NodeId::new(1))],
        "{name}"
    );
    let page = alloc.model().pfn_to_page(start).unwrap();
    assert!(
        page.test(PageFlag::Reserved) && page.zone_id() == 0,
        "{name}"
    );
    assert!(alloc.model().pfn_to_online_page(start).is_none(), "{name}");
    assert!(
        alloc.cpu_on(NodeId::new(1)).is_err(),
        "no zone on node 1 yet"
    );

    let zid = alloc.online_pages(start, SECTION, online_type).unwrap();
    let zone = alloc.zone(zid).unwrap();
    let expect = match online_type {
        OnlineType::OnlineMovable => ZoneType::Movable,
        _ => ZoneType::Normal,
    };
    assert_eq!(
        (zone.kind, zone.node),
        (expect, NodeId::new(1)),
        "{name} {online_type}"
    );
    assert_eq!(zone.managed_pages(), SECTION);
    // memmap_init_range at online: the pages now carry the zone's ids.
    let page = alloc.model().pfn_to_online_page(start).unwrap();
    assert_eq!((page.zone_id(), page.node_id()), (zid.get(), 1), "{name}");
    assert!(alloc.offline_blocks().is_empty());

    // __GFP_MEMALLOC: past the watermarks, so the whole block is handed out.
    let gfp = Gfp::HIGHUSER_MOVABLE.thisnode() | Gfp::MEMALLOC;
    let mut cpu = alloc.cpu_on(NodeId::new(1)).unwrap();
    let mut taken = Vec::new();
    while let Ok(p) = cpu.alloc_pages(Order::new(9), gfp) {
        assert!(start <= p && p.get() < start.get() + SECTION, "{name}: {p}");
        taken.push(p);
    }
    assert_eq!(
        taken.len() as u64,
        SECTION / 512,
        "{name}: all of it handed out"
    );
    drop(cpu);
    let e = alloc.offline_pages(start, SECTION).unwrap_err();
    assert!(
        matches!(e, MemHotplugError::InUse { nr_pages } if nr_pages == SECTION),
        "{e}"
    );
    assert!(e.to_string().starts_with("cannot offline:"));
    assert!(
        matches!(
            alloc.hot_remove(start, SECTION),
            Err(MemHotplugError::InUse { .. })
        ),
        "online memory cannot be removed"
    );
    for p in taken {
        alloc.free_pages(p, Order::new(9)).unwrap();
    }
    alloc.offline_pages(start, SECTION).unwrap();
    assert_eq!(alloc.zone(zid).unwrap().managed_pages(), 0);
    assert!(alloc.model().pfn_to_online_page(start).is_none());
    assert_eq!(alloc.offline_blocks(), vec![(start, NodeId::new(1))]);
    alloc.hot_remove(start, SECTION).unwrap();
    assert!(!alloc.model().pfn_valid(start), "{name}");
    check_structure(&alloc, &Reference::default()).unwrap();
}

#[test]
fn the_lifecycle_on_every_model_with_hotplug_and_every_online_type() {
    let layout = layout();
    for t in OnlineType::ALL {
        lifecycle(vmemmap::VmemmapTable::new(&layout).unwrap(), t);
        lifecycle(vmemmap::VmemmapProbe::new(&layout).unwrap(), t);
    }
    let no_device = Layout::new(
        *layout.geometry(),
        layout
            .ranges()
            .iter()
            .filter(|r| r.kind != RangeKind::Device)
            .copied()
            .collect(),
        "no device",
    )
    .unwrap();
    for t in OnlineType::ALL {
        lifecycle_on(
            sparsemem::SparseClassic::new(&no_device).unwrap(),
            &no_device,
            t,
        );
        lifecycle_on(
            sparsemem::SparseExtreme::new(&no_device).unwrap(),
            &no_device,
            t,
        );
    }
}

/// [`lifecycle`]'s online and allocation steps for models built from a
/// layout without device memory.
fn lifecycle_on<M: BuddyModel>(model: M, layout: &Layout, online_type: OnlineType) {
    let mut alloc = Allocator::<_, Kernel>::new(model, layout, Options::default()).unwrap();
    let start = pfn_at(512);
    let zid = alloc.online_pages(start, SECTION, online_type).unwrap();
    let p = alloc
        .alloc_pages(
            Order::new(10),
            Gfp::HIGHUSER_MOVABLE.thisnode(),
            NodeId::new(1),
            None,
        )
        .unwrap();
    assert_eq!(alloc.zone(zid).unwrap().node, NodeId::new(1));
    assert!(matches!(
        alloc.offline_pages(start, SECTION),
        Err(MemHotplugError::InUse { .. })
    ));
    alloc.free_pages(p, Order::new(10)).unwrap();
    alloc.offline_pages(start, SECTION).unwrap();
    alloc.hot_remove(start, SECTION).unwrap();
    assert!(!alloc.model().pfn_valid(start));
}

/// `online` picks the kernel zone a range already lies in, and ZONE_MOVABLE
/// only when the range lies in Movable's span alone; offlining at a span's
/// edge shrinks it; onlined memory goes to the tail of the free lists,
/// behind what was there.
#[test]
fn online_picks_the_zone_like_the_kernel_and_frees_to_the_tail() {
    let layout = layout();
    let mut alloc = Allocator::<_, Kernel>::new(
        vmemmap::VmemmapTable::new(&layout).unwrap(),
        &layout,
        Options::default(),
    )
    .unwrap();
    let node = NodeId::ZERO;
    let [a, b, c1, c2, c3] = [1536, 1664, 1792, 1920, 2048].map(pfn_at);
    alloc.hot_add(a, 5 * SECTION, node).unwrap();
    let normal = alloc.online_pages(a, SECTION, OnlineType::Online).unwrap();
    assert_eq!(alloc.zone(normal).unwrap().kind, ZoneType::Normal);
    let again = alloc.online_pages(b, SECTION, OnlineType::Online).unwrap();
    assert_eq!(again, normal, "the node's kernel zone grows");
    // FPI_TO_TAIL: the block onlined second sits behind the first.
    let order10: Vec<Pfn> = alloc
        .free_blocks(normal)
        .into_iter()
        .filter(|&(_, o)| o == Order::new(10))
        .map(|(p, _)| p)
        .collect();
    assert_eq!(order10.len() as u64, 2 * SECTION / 1024);
    assert!(order10[..32].iter().all(|&p| p < b), "{order10:?}");
    assert!(order10[32..].iter().all(|&p| p >= b), "{order10:?}");
    let first = alloc
        .alloc_pages(Order::new(10), Gfp::KERNEL.thisnode(), node, None)
        .unwrap();
    assert!(first < b, "freshly onlined memory is used last");
    alloc.free_pages(first, Order::new(10)).unwrap();
    // Three blocks into Movable; the middle one offline and back with
    // `online` stays movable (only Movable's span covers it); the top one
    // shrinks Movable's span and goes back to the kernel zone.
    let movable = alloc
        .online_pages(c1, 3 * SECTION, OnlineType::OnlineMovable)
        .unwrap();
    assert_eq!(alloc.zone(movable).unwrap().kind, ZoneType::Movable);
    alloc.offline_pages(c2, SECTION).unwrap();
    assert_eq!(alloc.zone(movable).unwrap().end_pfn(), c3 + SECTION);
    assert_eq!(
        alloc.online_pages(c2, SECTION, OnlineType::Online).unwrap(),
        movable,
        "a range only Movable's span covers stays movable"
    );
    alloc.offline_pages(c3, SECTION).unwrap();
    assert_eq!(
        alloc.zone(movable).unwrap().end_pfn(),
        c3,
        "shrink_zone_span"
    );
    assert_eq!(
        alloc.online_pages(c3, SECTION, OnlineType::Online).unwrap(),
        normal
    );
    alloc.offline_pages(c3, SECTION).unwrap();
    assert_eq!(
        alloc
            .online_pages(c3, SECTION, OnlineType::OnlineKernel)
            .unwrap(),
        normal
    );
    assert_eq!(
        OnlineType::parse("online_movable"),
        Ok(OnlineType::OnlineMovable)
    );
    assert_eq!(
        OnlineType::parse("online_fast").unwrap_err().to_string(),
        "unknown online type `online_fast` (known: online, online_kernel, online_movable)"
    );
}

/// Device memory has a memmap and valid pfns, is never online, and the
/// allocator refuses to free, online or offline it; nothing changes.
#[test]
fn device_memory_never_enters_the_buddy() {
    let layout = layout();
    let mut alloc = Allocator::<_, Kernel>::new(
        vmemmap::VmemmapProbe::new(&layout).unwrap(),
        &layout,
        Options::default(),
    )
    .unwrap();
    let dev = pfn_at(1024);
    assert!(alloc.model().pfn_valid(dev));
    assert!(alloc.model().pfn_to_page(dev).unwrap().is_zone_device());
    assert!(alloc.model().pfn_to_online_page(dev).is_none());
    let free = alloc.free_pages_total();
    let e = alloc.free_pages(dev, Order::ZERO).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("pfn {dev} is device memory (ZONE_DEVICE): it never enters the buddy allocator")
    );
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    assert!(matches!(cpu.free(dev), Err(FreeError::DeviceMemory { .. })));
    drop(cpu);
    let block = pfn_at(1024);
    assert!(matches!(
        alloc.online_pages(block, SECTION, OnlineType::Online),
        Err(MemHotplugError::Range(RangeError::DeviceMemory { .. }))
    ));
    assert!(matches!(
        alloc.offline_pages(block, SECTION),
        Err(MemHotplugError::Range(RangeError::DeviceMemory { .. }))
    ));
    assert!(matches!(
        alloc.hot_remove(block, SECTION),
        Err(MemHotplugError::Range(RangeError::DeviceMemory { .. }))
    ));
    assert_eq!(alloc.free_pages_total(), free, "nothing changed");
    // Device memory comes and goes per subsection, through the allocator.
    let more = pfn_at(1030);
    alloc.add_device(more, 512, NodeId::new(1)).unwrap();
    assert_eq!(alloc.model().pfn_to_page(more).unwrap().node_id(), 1);
    alloc.remove_device(dev, 3 * 512).unwrap();
    assert!(!alloc.model().pfn_valid(dev) && alloc.model().pfn_valid(more));
    assert!(matches!(
        alloc.remove_device(pfn_at(0), 512),
        Err(MemHotplugError::Model(HotplugError::Device {
            is_device: false,
            ..
        }))
    ));
}

/// The models without hotplug or VMEMMAP refuse with one line that names
/// the models that can, and change nothing.
#[test]
fn models_that_cannot_refuse_clearly() {
    let ram = Layout::new(
        Geometry::X86_64,
        vec![MemRange::new(0, 256 * MIB, RangeKind::Ram, 0)],
        "ram",
    )
    .unwrap();
    let mut flat = Allocator::<_, Kernel>::new(
        sparsemem::Flat::new(&ram).unwrap(),
        &ram,
        Options::default(),
    )
    .unwrap();
    let e = flat
        .hot_add(pfn_at(512), SECTION, NodeId::ZERO)
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("FLATMEM has no memory hotplug; models that can: sparse, sparse-extreme"),
        "{e}"
    );
    assert!(flat.offline_blocks().is_empty() && !flat.model().pfn_valid(pfn_at(512)));
    let e = flat.add_device(pfn_at(512), 512, NodeId::ZERO).unwrap_err();
    assert!(
        e.to_string()
            .contains("needs SPARSEMEM_VMEMMAP, which `flat` is not"),
        "{e}"
    );
    let mut sparse = Allocator::<_, Kernel>::new(
        sparsemem::SparseExtreme::new(&ram).unwrap(),
        &ram,
        Options::default(),
    )
    .unwrap();
    let e = sparse
        .add_device(pfn_at(512), 512, NodeId::ZERO)
        .unwrap_err();
    assert!(
        e.to_string().ends_with("models that can hold it: vmemmap-table, vmemmap-probe, vmemmap-uffd, vmemmap-uffd-sigbus"),
        "{e}"
    );
    let e = sparse.hot_add(pfn_at(512), 512, NodeId::ZERO).unwrap_err();
    assert!(
        matches!(e, MemHotplugError::Model(HotplugError::Misaligned { .. })),
        "memory comes in whole blocks: {e}"
    );
    assert!(!sparse.model().pfn_valid(pfn_at(512)));
}

/// Regression (found by fuzzing): the reserved hole of an early section
/// has `struct page`s but is not memory; it must never be onlined (it was,
/// and later handed out). Only offline memory blocks can be onlined or
/// removed; a block with holes cannot be offlined (Linux 5.10 on); boot
/// memory goes offline and online per block.
#[test]
fn only_offline_memory_can_be_onlined_or_removed() {
    let layout = Layout::new(
        Geometry::X86_64,
        vec![MemRange::new(0, 320 * MIB, RangeKind::Ram, 0)],
        "two sections and a half",
    )
    .unwrap();
    let mut alloc = Allocator::<_, Kernel>::new(
        vmemmap::VmemmapProbe::new(&layout).unwrap(),
        &layout,
        Options::default(),
    )
    .unwrap();
    let (second, third) = (pfn_at(128), pfn_at(256));
    assert!(
        alloc.model().pfn_valid(pfn_at(352)),
        "early section: the hole has struct pages"
    );
    let e = alloc
        .online_pages(third, SECTION, OnlineType::Online)
        .unwrap_err();
    assert!(matches!(e, MemHotplugError::NotOffline { .. }), "{e}");
    let free = alloc.free_pages_total();
    let e = alloc.offline_pages(third, SECTION).unwrap_err();
    assert!(
        matches!(e, MemHotplugError::Range(RangeError::OutsideZone { pfn }) if pfn == pfn_at(320)),
        "a block with a hole: {e}"
    );
    assert_eq!(alloc.free_pages_total(), free, "nothing changed");
    assert!(matches!(
        alloc.hot_remove(second, SECTION),
        Err(MemHotplugError::InUse { .. })
    ));
    assert!(
        matches!(
            alloc.offline_pages(Pfn::new(1), SECTION),
            Err(MemHotplugError::Model(HotplugError::Misaligned { .. }))
        ),
        "misaligned"
    );
    alloc.offline_pages(second, SECTION).unwrap();
    assert!(
        matches!(
            alloc.online_pages(second, 2 * SECTION, OnlineType::Online),
            Err(MemHotplugError::NotOffline { .. })
        ),
        "half of it is online"
    );
    let zid = alloc
        .online_pages(second, SECTION, OnlineType::OnlineMovable)
        .unwrap();
    assert_eq!(alloc.zone(zid).unwrap().kind, ZoneType::Movable);
    alloc.offline_pages(second, SECTION).unwrap();
    alloc.hot_remove(second, SECTION).unwrap();
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    while let Ok(p) = cpu.alloc(Gfp::KERNEL) {
        assert!(p < second || p >= third, "{p:?}");
    }
}

/// The 2.6.9 bitmap buddy decides merges from its pair bits, which must
/// survive the zone growing in either direction (`FreeArea::resize`) and
/// blocks going offline and online. Run against the no-bitmap buddy as the
/// reference: both must end with the same free lists.
#[test]
fn the_bitmap_buddy_follows_hot_add_online_offline_and_remove() {
    fn run<V: buddy::Variant>() -> Vec<(Pfn, Order)> {
        let layout = Layout::new(
            Geometry::X86_64,
            vec![MemRange::new(0, 128 * MIB, RangeKind::Ram, 0)],
            "one section",
        )
        .unwrap();
        let model = sparsemem::SparseExtreme::new(&layout).unwrap();
        // Both variants in the bitmap's era, so only the tracking differs.
        let options = Options::for_era(buddy::Era::V2_6_9);
        let mut alloc = Allocator::<_, V>::new(model, &layout, options).unwrap();
        let node = NodeId::ZERO;
        let none = Reference::default();
        let movable = OnlineType::OnlineMovable;
        // Section 3 first, then section 2 below it: the Movable zone's span
        // (and the bitmap's base) grows downwards with memory allocated.
        alloc.hot_add(Pfn::new(3 * SECTION), SECTION, node).unwrap();
        let zid = alloc
            .online_pages(Pfn::new(3 * SECTION), SECTION, movable)
            .unwrap();
        let held: Vec<Pfn> = (0..7)
            .map(|_| {
                alloc
                    .alloc_pages(Order::new(3), Gfp::HIGHUSER_MOVABLE, node, None)
                    .unwrap()
            })
            .collect();
        alloc.hot_add(Pfn::new(2 * SECTION), SECTION, node).unwrap();
        alloc
            .online_pages(Pfn::new(2 * SECTION), SECTION, movable)
            .unwrap();
        let zone = alloc.zone(zid).unwrap();
        assert_eq!(
            (zone.start_pfn().get(), zone.end_pfn().get()),
            (2 * SECTION, 4 * SECTION)
        );
        for p in held {
            alloc.free_pages(p, Order::new(3)).unwrap();
        }
        check_structure(&alloc, &none).unwrap();
        assert_eq!(
            alloc.zone(zid).unwrap().nr_free()[10],
            2 * SECTION / 1024,
            "{}: everything merged back to max-order blocks",
            V::name()
        );
        // A block offline while the other holds pages, then back.
        let pinned = alloc
            .alloc_pages(Order::ZERO, Gfp::HIGHUSER_MOVABLE, node, None)
            .unwrap();
        let other = Pfn::new(if pinned.get() < 3 * SECTION { 3 } else { 2 } * SECTION);
        alloc.offline_pages(other, SECTION).unwrap();
        check_structure(&alloc, &none).unwrap();
        alloc.online_pages(other, SECTION, movable).unwrap();
        alloc.free_pages(pinned, Order::ZERO).unwrap();
        check_structure(&alloc, &none).unwrap();
        let blocks = alloc.free_blocks(zid);
        alloc.offline_pages(Pfn::new(3 * SECTION), SECTION).unwrap();
        alloc.hot_remove(Pfn::new(3 * SECTION), SECTION).unwrap();
        check_structure(&alloc, &none).unwrap();
        assert_eq!(
            alloc.zone(zid).unwrap().nr_free_pages(),
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
        2 * SECTION / 1024,
        "fully merged after re-onlining"
    );
}

/// A hot-add whose memmap would not fit this machine is refused before
/// anything is mapped, on section-table and vmemmap models alike; and a
/// hostile hot-remove over the whole physical space answers at once.
#[test]
fn an_absurd_hot_add_is_refused_and_a_huge_remove_answers_quickly() {
    fn check<M: BuddyModel>(model: M, layout: &Layout) {
        let mut alloc = Allocator::<_, Kernel>::new(model, layout, Options::default()).unwrap();
        let g = *layout.geometry();
        let start = Pfn::new((32u64 << 30) >> g.page_shift()); // far past the RAM
        let nr = g.max_pfn().get() - start.get();
        let e = alloc.hot_add(start, nr, NodeId::ZERO).unwrap_err();
        assert!(
            matches!(e, MemHotplugError::Model(HotplugError::TooLarge(_))),
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
    let layout = Layout::new(
        Geometry::X86_64,
        vec![MemRange::new(1 << 20, 1 << 30, RangeKind::Ram, 0)],
        "1 GiB",
    )
    .unwrap();
    check(sparsemem::SparseExtreme::new(&layout).unwrap(), &layout);
    check(vmemmap::VmemmapTable::new(&layout).unwrap(), &layout);
}
