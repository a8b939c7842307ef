//! `Allocator::set_start_state` on a small zone, worked by hand: 64 MiB at 4 GiB is one
//! Normal zone of 16,384 pages, 32 pageblocks of 512 pages, 16 aligned
//! pairs of them for the order-10 blocks.

use buddy::testing::{Reference, check_conservation, ram_allocator};
use buddy::views::{FREECOUNT_CAP, PageTypeInfo};
use buddy::{Allocator, Era, Gfp, Kernel, StartStateError, ZoneId};
use sparsemem::{MIGRATE_TYPES, MemoryModel, Migratetype, NodeId, Order, SparseExtreme};

fn allocator(era: Era) -> Allocator<SparseExtreme, Kernel> {
    ram_allocator(4 << 30, (4 << 30) + (64 << 20), era)
}

/// The fresh zone's pagetypeinfo with `blocks` pageblocks per
/// migratetype and the free blocks `(mt, order, count)`.
fn target(
    alloc: &Allocator<SparseExtreme, Kernel>,
    blocks: [u64; MIGRATE_TYPES],
    free: &[(Migratetype, usize, u64)],
) -> PageTypeInfo {
    let mut t = alloc.pagetypeinfo();
    let z = &mut t.zones[0];
    z.blocks = blocks;
    z.free.iter_mut().for_each(|l| l.fill(0));
    for &(mt, order, n) in free {
        z.free[mt.index()][order] = n;
    }
    t
}

const FRAGMENTED: [(Migratetype, usize, u64); 6] = [
    (Migratetype::Movable, 10, 5),
    (Migratetype::Movable, 3, 7),
    (Migratetype::Movable, 0, 40),
    (Migratetype::Unmovable, 8, 2),
    (Migratetype::Unmovable, 0, 9),
    (Migratetype::Reclaimable, 9, 1),
];

#[test]
fn the_free_lists_hold_exactly_the_target_and_the_rest_is_allocated() {
    let mut alloc = allocator(Era::V6_18);
    assert_eq!(alloc.pagetypeinfo().zones[0].blocks, [0, 32, 0, 0, 0]);
    let want = target(&alloc, [4, 26, 2, 0, 0], &FRAGMENTED);
    let allocated = alloc.set_start_state(&want, 7).unwrap();
    assert_eq!(alloc.pagetypeinfo(), want);
    let free_pages = 5 * 1024 + 7 * 8 + 40 + 2 * 256 + 9 + 512;
    assert_eq!(alloc.free_pages_total(), free_pages);
    assert_eq!(alloc.zones()[0].nr_free_pages_state(), free_pages);
    let mut reference = Reference::default();
    for &(pfn, order) in &allocated {
        reference.blocks.insert(pfn.get(), order);
    }
    assert_eq!(reference.pages() + free_pages, 16384);
    check_conservation(&alloc, 0, &reference).unwrap();
    // Every allocated block frees, and the zone coalesces back whole.
    for (pfn, order) in allocated {
        alloc.free_pages(pfn, order).unwrap();
    }
    assert_eq!(alloc.zones()[0].nr_free()[10], 16);
}

#[test]
fn the_seed_decides_where_and_only_where() {
    let place = |seed| {
        let mut alloc = allocator(Era::V6_18);
        let want = target(&alloc, [4, 26, 2, 0, 0], &FRAGMENTED);
        alloc.set_start_state(&want, seed).unwrap();
        let mut blocks = alloc.free_blocks(ZoneId::new(0));
        blocks.sort_unstable();
        (blocks, alloc.pagetypeinfo())
    };
    let (a, info_a) = place(1);
    assert_eq!(place(1).0, a, "the same seed, the same pfns");
    let (b, info_b) = place(2);
    assert_ne!(b, a, "another seed, other pfns");
    assert_eq!(info_a, info_b, "the same counts");
}

#[test]
fn a_target_that_cannot_fit_leaves_the_allocator_as_it_was() {
    let mut alloc = allocator(Era::V6_18);
    let fresh = alloc.pagetypeinfo();
    // 17 order-10 blocks: the zone has 16 pairs of pageblocks.
    let too_many = target(&alloc, [0, 32, 0, 0, 0], &[(Migratetype::Movable, 10, 17)]);
    let e = alloc.set_start_state(&too_many, 1).unwrap_err();
    assert_eq!(
        e.to_string(),
        "node 0 zone Normal: only 16 of 17 free Movable blocks of order 10 fit the layout"
    );
    // Two order-9 blocks in one Reclaimable pageblock: the zone holds
    // them, Reclaimable's own pageblocks do not.
    let one_block = target(
        &alloc,
        [0, 31, 1, 0, 0],
        &[(Migratetype::Reclaimable, 9, 2)],
    );
    assert_eq!(
        alloc.set_start_state(&one_block, 1),
        Err(StartStateError::ForeignFreeBlocks {
            node: 0,
            zone: "Normal".into(),
            mt: Migratetype::Reclaimable,
            free_pages: 1024,
            pageblocks: 1,
            room: 512,
        })
    );
    // An Unmovable order-7 block and no Unmovable pageblock, as a kernel
    // before 6.10 leaves one after a steal too small to claim the
    // pageblock.
    let none = target(&alloc, [0, 32, 0, 0, 0], &[(Migratetype::Unmovable, 7, 1)]);
    let e = alloc.set_start_state(&none, 1).unwrap_err();
    assert!(
        e.to_string().starts_with(
            "node 0 zone Normal: 128 pages free on the Unmovable lists, more than its 0 \
             Unmovable pageblocks hold (0): some lie in pageblocks of another migratetype"
        ),
        "{e}"
    );
    // Order-0 blocks: at most every other page of a pageblock (two free
    // buddies would merge), so 257 do not fit in one.
    let dense = target(
        &alloc,
        [1, 31, 0, 0, 0],
        &[(Migratetype::Unmovable, 0, 257)],
    );
    assert!(matches!(
        alloc.set_start_state(&dense, 1),
        Err(StartStateError::CannotFit { placed: 256, .. })
    ));
    let short = target(&alloc, [0, 31, 0, 0, 0], &[]);
    assert!(matches!(
        alloc.set_start_state(&short, 1),
        Err(StartStateError::Shape { .. })
    ));
    let mut capped = target(&alloc, [0, 32, 0, 0, 0], &[]);
    capped.zones[0].free[1][0] = FREECOUNT_CAP;
    assert!(matches!(
        alloc.set_start_state(&capped, 1),
        Err(StartStateError::Capped { .. })
    ));
    let mut other = target(&alloc, [0, 32, 0, 0, 0], &[]);
    other.zones[0].zone = "DMA32".into();
    assert_eq!(
        alloc.set_start_state(&other, 1).unwrap_err().to_string(),
        "node 0 zone Normal is missing in the target"
    );
    assert_eq!(alloc.pagetypeinfo(), fresh);
    assert_eq!(alloc.free_pages_total(), 16384);
}

#[test]
fn only_a_fresh_allocator_of_an_era_with_migratetypes() {
    let mut old = allocator(Era::V2_6_9);
    let want = target(&old, [0, 32, 0, 0, 0], &[]);
    assert_eq!(
        old.set_start_state(&want, 0),
        Err(StartStateError::NoMigratetypes)
    );
    let mut alloc = allocator(Era::V6_18);
    let want = target(&alloc, [0, 32, 0, 0, 0], &[]);
    let pfn = alloc
        .alloc_pages(Order::ZERO, Gfp::KERNEL, NodeId::ZERO, None)
        .unwrap();
    assert_eq!(
        alloc.set_start_state(&want, 0),
        Err(StartStateError::NotFresh)
    );
    alloc.free_pages(pfn, Order::ZERO).unwrap();
}

/// The host's pagetypeinfo on the host's layout: the free lists are the
/// machine's, conservation and the structure checker hold, and every
/// allocated block frees back into a fully coalesced zone.
#[test]
fn the_host_pagetypeinfo_starts_a_checked_allocator() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");
    let layout =
        sparsemem::Layout::from_toml_file(format!("{dir}/layout/host-6.18-2cpu.toml").as_ref())
            .unwrap();
    let text = std::fs::read_to_string(format!("{dir}/pagetypeinfo/host-6.18-2cpu")).unwrap();
    let want = buddy::views::parse_pagetypeinfo(&text).unwrap();
    let model = SparseExtreme::new(&layout).unwrap();
    let mut alloc =
        Allocator::<_, Kernel>::new(model, &layout, buddy::Options::for_era(Era::V6_18)).unwrap();
    let fresh = buddy::testing::snapshot(&alloc);
    let allocated = alloc.set_start_state(&want, 0).unwrap();
    assert_eq!(alloc.pagetypeinfo(), want);
    assert_eq!(alloc.pagetypeinfo().to_string(), text);
    let mut reference = Reference::default();
    for &(pfn, order) in &allocated {
        reference.blocks.insert(pfn.get(), order);
    }
    check_conservation(&alloc, 0, &reference).unwrap();
    for (pfn, order) in allocated {
        alloc.free_pages(pfn, order).unwrap();
    }
    assert_eq!(buddy::testing::snapshot(&alloc), fresh);
}

/// A target's HighAtomic pageblocks are the zone's reserve: counted in
/// `nr_reserved_highatomic`, their free pages in `nr_free_highatomic`,
/// passed over by a request without the reserve's rights, and given back
/// under pressure like pageblocks the allocator reserved itself.
#[test]
fn a_targets_highatomic_pageblocks_are_the_zones_reserve() {
    let mut alloc = allocator(Era::V6_18);
    let mut free = FRAGMENTED.to_vec();
    free.extend([
        (Migratetype::HighAtomic, 6, 3),
        (Migratetype::HighAtomic, 2, 5),
    ]);
    let want = target(&alloc, [4, 24, 2, 2, 0], &free);
    let allocated = alloc.set_start_state(&want, 3).unwrap();
    assert_eq!(alloc.pagetypeinfo(), want);
    let zone = &alloc.zones()[0];
    assert_eq!(zone.nr_reserved_highatomic(), 2 * 512);
    assert_eq!(zone.nr_free_highatomic(), 3 * 64 + 5 * 4);
    let mut reference = Reference::default();
    for &(pfn, order) in &allocated {
        reference.blocks.insert(pfn.get(), order);
    }
    // GFP_KERNEL to the end: the watermark hides the reserve's 212 free
    // pages until the request, failing, gives back each reserved
    // pageblock that holds a free block (the last one forced) and takes
    // their pages too; a reserved pageblock with nothing free stays.
    while let Ok(pfn) = alloc.alloc_pages(Order::ZERO, Gfp::KERNEL, NodeId::ZERO, None) {
        let mt = alloc.model().get_pfnblock_migratetype(pfn);
        assert_ne!(mt, Migratetype::HighAtomic, "{pfn}");
        reference.blocks.insert(pfn.get(), Order::ZERO);
    }
    let zone = &alloc.zones()[0];
    let left = alloc.pagetypeinfo().zones[0].blocks[Migratetype::HighAtomic.index()];
    assert!(
        left < 2,
        "at least the pageblock of the first free block went back"
    );
    assert_eq!(
        (zone.nr_reserved_highatomic(), zone.nr_free_highatomic()),
        (left * 512, 0)
    );
    assert_eq!(zone.nr_free_pages(), zone.watermarks().min);
    check_conservation(&alloc, 0, &reference).unwrap();
}

/// A count the kernel capped (`>100000`) is worked out from a buddyinfo
/// of the same moment: 1 GiB at 4 GiB (512 pageblocks) with 110,000 free
/// Movable pages, every other page of 430 pageblocks.
#[test]
fn a_capped_count_is_worked_out_from_buddyinfo() {
    let mut alloc = ram_allocator(4 << 30, 5 << 30, Era::V6_18);
    let mut want = target(
        &alloc,
        [2, 510, 0, 0, 0],
        &[
            (Migratetype::Movable, 0, 110_000),
            (Migratetype::Unmovable, 0, 7),
        ],
    );
    let mut buddy = alloc.buddyinfo();
    buddy.zones[0].nr_free.fill(0);
    buddy.zones[0].nr_free[0] = 110_007;
    // pagetypeinfo as the kernel prints it: the Movable count capped.
    want.zones[0].free[Migratetype::Movable.index()][0] = FREECOUNT_CAP;

    let no_buddyinfo = alloc.set_start_state(&want, 1).unwrap_err();
    assert!(
        matches!(no_buddyinfo, StartStateError::Capped { order: 0, .. }),
        "{no_buddyinfo}"
    );
    let mut stale = buddy.clone();
    stale.zones[0].nr_free[0] = 99_999 + 7;
    assert!(matches!(
        alloc.set_start_state_with(&want, Some(&stale), 1),
        Err(StartStateError::Capped { order: 0, .. })
    ));
    let mut two = want.clone();
    two.zones[0].free[Migratetype::Unmovable.index()][0] = FREECOUNT_CAP;
    assert!(matches!(
        alloc.set_start_state_with(&two, Some(&buddy), 1),
        Err(StartStateError::Capped { order: 0, .. })
    ));
    assert_eq!(alloc.free_pages_total(), 1 << 18, "refusals change nothing");

    let allocated = alloc.set_start_state_with(&want, Some(&buddy), 1).unwrap();
    assert_eq!(
        alloc.buddyinfo(),
        buddy,
        "110,000 + 7 free pages, none merged"
    );
    assert_eq!(alloc.pagetypeinfo(), want, "printed capped again");
    let mut reference = Reference::default();
    for &(pfn, order) in &allocated {
        reference.blocks.insert(pfn.get(), order);
    }
    check_conservation(&alloc, 0, &reference).unwrap();
}

/// A machine still in deferred struct page init counts only the
/// pageblocks it has initialised: a model built with deferred init is
/// grown a section at a time to the target's pageblocks and then given
/// its free lists, and ends with the machine's counts, managed pages and
/// pages still deferred. The "machine" is the same build grown by its own
/// allocations.
#[test]
fn a_zone_in_deferred_init_is_grown_to_the_targets_pageblocks() {
    let layout = sparsemem::Layout::new(
        sparsemem::Geometry::X86_64,
        vec![
            sparsemem::MemRange::new(1 << 20, 256 << 20, sparsemem::RangeKind::Ram, 0),
            sparsemem::MemRange::new(
                4 << 30,
                (4 << 30) + (512 << 20),
                sparsemem::RangeKind::Ram,
                0,
            ),
        ],
        "DMA32 and four sections of Normal",
    )
    .unwrap();
    let build = || {
        let options = buddy::Options {
            deferred_init: true,
            ..buddy::Options::for_era(Era::V6_18)
        };
        Allocator::<SparseExtreme, Kernel>::new(
            SparseExtreme::new(&layout).unwrap(),
            &layout,
            options,
        )
        .unwrap()
    };
    let normal_of = |alloc: &Allocator<SparseExtreme, Kernel>| {
        let z = alloc
            .zones()
            .iter()
            .find(|z| z.kind == buddy::ZoneType::Normal)
            .unwrap();
        let blocks: u64 = alloc
            .pagetypeinfo()
            .zones
            .iter()
            .find(|t| t.zone == "Normal")
            .unwrap()
            .blocks
            .iter()
            .sum();
        (blocks, z.managed_pages())
    };
    let machine = build();
    let section = layout.geometry().pages_per_section();
    let mut cpu = machine.cpu_on(NodeId::new(0)).unwrap();
    let held: Vec<_> = (0..section + 10)
        .map(|_| cpu.alloc(Gfp::HIGHUSER_MOVABLE).unwrap())
        .collect();
    for pfn in held.iter().step_by(2) {
        cpu.free(*pfn).unwrap();
    }
    drop(cpu);
    let (target, buddyinfo) = (machine.pagetypeinfo(), machine.buddyinfo());
    let grown = normal_of(&machine);
    assert!(
        machine.deferred_pages_pending() > 0,
        "the machine finished its init"
    );

    let mut model = build();
    let boot = normal_of(&model);
    assert!(boot.0 < grown.0 && boot.1 < grown.1, "{boot:?} {grown:?}");
    model
        .set_start_state_with(&target, Some(&buddyinfo), 7)
        .unwrap();
    assert_eq!(model.pagetypeinfo(), target);
    assert_eq!(model.buddyinfo(), buddyinfo);
    assert_eq!(normal_of(&model), grown);
    assert_eq!(
        model.deferred_pages_pending(),
        machine.deferred_pages_pending()
    );
    assert_eq!(model.free_pages_total(), machine.free_pages_total());
    assert_eq!(model.managed_pages_total(), machine.managed_pages_total());
    // The zones are sized again from the grown managed pages: as a build
    // whose Normal zone is that size from boot sizes them.
    let sized = sparsemem::Layout::new(
        sparsemem::Geometry::X86_64,
        vec![
            sparsemem::MemRange::new(1 << 20, 256 << 20, sparsemem::RangeKind::Ram, 0),
            sparsemem::MemRange::new(
                4 << 30,
                (4 << 30) + (grown.1 << 12),
                sparsemem::RangeKind::Ram,
                0,
            ),
        ],
        "the grown size from boot",
    )
    .unwrap();
    let plain = Allocator::<SparseExtreme, Kernel>::new(
        SparseExtreme::new(&sized).unwrap(),
        &sized,
        buddy::Options::for_era(Era::V6_18),
    )
    .unwrap();
    for (m, p) in model.zones().iter().zip(plain.zones()) {
        assert_eq!(m.managed_pages(), p.managed_pages(), "{}", m.kind.name());
        let sizes = |z: &buddy::Zone<Kernel>| (z.watermarks(), z.batch(), z.high(), z.high_max());
        assert_eq!(sizes(m), sizes(p), "{}", m.kind.name());
    }
}
