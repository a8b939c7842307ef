//! The hugetlb pool over the allocator: hugetlb folios interleaved with
//! ordinary allocations conserve memory and keep the free lists sound on
//! every vmemmap model (HVO off, fake-head and shared-tail layouts,
//! unbatched and batched); a failed restore leaves a surplus folio and a
//! consistent buddy; bad requests give one clear error each.

use buddy::testing::{Reference, check_conservation};
use buddy::{Allocator, BuddyModel, Era, Gfp, HugetlbError, HugetlbPool, HvoMode, Kernel, Options};
use sparsemem::hvo::HvoLayout;
use sparsemem::{Geometry, Layout, MemRange, MemoryModel, NodeId, Order, Pfn, RangeKind};
use vmemmap::{Vmemmap, VmemmapOptions, VmemmapProbe, VmemmapTable};

const GIB: u64 = 1 << 30;
const PMD: u32 = 9;
const PUD: u32 = 18;

fn layout(bytes: u64) -> Layout {
    Layout::new(
        Geometry::X86_64,
        vec![MemRange::new(0, bytes, RangeKind::Ram, 0)],
        "hugetlb test",
    )
    .unwrap()
}

fn shared() -> VmemmapOptions {
    VmemmapOptions {
        thp: false,
        memfd: true,
    }
}

/// Checks conservation with the ordinary blocks and the pool's.
fn check<M: BuddyModel>(
    alloc: &Allocator<M, Kernel>,
    ordinary: &[(Pfn, Order)],
    pools: &[&HugetlbPool],
) {
    let mut reference = Reference::default();
    let pool_blocks = pools.iter().flat_map(|p| p.blocks(alloc));
    for (pfn, order) in ordinary.iter().copied().chain(pool_blocks) {
        reference.record_model(alloc.model(), pfn, order).unwrap();
    }
    check_conservation(alloc, 0, &reference).unwrap();
}

fn interleave<M: BuddyModel>(model: M, hvo: Option<HvoMode>, era: Era) {
    let l = layout(2 * GIB);
    let alloc = Allocator::<_, Kernel>::new(model, &l, Options::for_era(era)).unwrap();
    let mut giant = HugetlbPool::new(&alloc, PUD, NodeId::ZERO, hvo).unwrap();
    let mut huge = HugetlbPool::new(&alloc, PMD, NodeId::ZERO, hvo).unwrap();
    assert_eq!(giant.grow(&alloc, 1).unwrap(), 1, "the top 1 GiB is free");
    let mut ordinary = Vec::new();
    for round in 0..6u8 {
        let order = Order::new(round % 4);
        for _ in 0..64 {
            ordinary.push((
                alloc
                    .alloc_pages(order, Gfp::KERNEL, NodeId::ZERO, None)
                    .unwrap(),
                order,
            ));
        }
        assert_eq!(huge.grow(&alloc, 3).unwrap(), 3);
        let folio = huge.alloc_folio().unwrap();
        check(&alloc, &ordinary, &[&giant, &huge]);
        if round % 2 == 1 {
            huge.free_folio(folio).unwrap();
            assert_eq!(huge.shrink(&alloc, 2).unwrap(), 2);
            for (pfn, order) in ordinary.drain(..32) {
                alloc.free_pages(pfn, order).unwrap();
            }
        }
        check(&alloc, &ordinary, &[&giant, &huge]);
    }
    let c = huge.counts();
    assert_eq!(c.nr_hugepages, 18 - 6);
    assert_eq!(
        c.free_hugepages,
        c.nr_hugepages - 3,
        "three still handed out"
    );
    if let Some(m) = hvo {
        assert_eq!(
            alloc
                .model()
                .hugetlb_vmemmap()
                .unwrap()
                .optimized(giant_head(&giant, &alloc)),
            Some(m.layout)
        );
        assert_eq!(c.optimized, 18);
        assert_eq!(
            c.vmemmap_pages_allocated,
            6 * 7,
            "each shrink restored 7 pages"
        );
    }
    assert_eq!(giant.shrink(&alloc, 1).unwrap(), 1);
    check(&alloc, &ordinary, &[&giant, &huge]);
}

fn giant_head<M: BuddyModel>(pool: &HugetlbPool, alloc: &Allocator<M, Kernel>) -> Pfn {
    pool.blocks(alloc)[0].0
}

/// HVO off in each seed's era; each HVO form in 6.18, the only one of
/// them with HVO.
fn modes() -> Vec<(Option<HvoMode>, Era)> {
    let mut m: Vec<_> = Era::SEEDS.iter().map(|&era| (None, era)).collect();
    for layout in [HvoLayout::FakeHead, HvoLayout::SharedTail] {
        for batched in [false, true] {
            m.push((Some(HvoMode { layout, batched }), Era::V6_18));
        }
    }
    m
}

#[test]
fn interleaved_hugetlb_and_ordinary_allocations_conserve_memory_on_vmemmap_table() {
    for (hvo, era) in modes() {
        interleave(
            VmemmapTable::with_options(&layout(2 * GIB), shared()).unwrap(),
            hvo,
            era,
        );
    }
}

#[test]
fn interleaved_hugetlb_and_ordinary_allocations_conserve_memory_on_vmemmap_probe() {
    for (hvo, era) in modes() {
        interleave(
            VmemmapProbe::with_options(&layout(2 * GIB), shared()).unwrap(),
            hvo,
            era,
        );
    }
}

#[test]
fn without_hvo_the_pool_works_on_every_model() {
    interleave(
        sparsemem::SparseExtreme::new(&layout(2 * GIB)).unwrap(),
        None,
        Era::V6_18,
    );
    interleave(
        sparsemem::Flat::new(&layout(2 * GIB)).unwrap(),
        None,
        Era::V6_18,
    );
}

fn filled<D: vmemmap::Detector>(alloc: &Allocator<Vmemmap<D>, Kernel>) -> Vec<(Pfn, Order)> {
    let mut got = Vec::new();
    while let Ok(p) = alloc.alloc_pages(Order::ZERO, Gfp::KERNEL, NodeId::ZERO, None) {
        got.push((p, Order::ZERO));
    }
    got
}

#[test]
fn a_failed_restore_leaves_a_surplus_folio_and_a_consistent_buddy() {
    for batched in [false, true] {
        let l = layout(GIB / 4);
        let model = VmemmapTable::with_options(&l, shared()).unwrap();
        let alloc = Allocator::<_, Kernel>::new(model, &l, Options::default()).unwrap();
        let hvo = Some(HvoMode {
            layout: HvoLayout::FakeHead,
            batched,
        });
        let mut pool = HugetlbPool::new(&alloc, PMD, NodeId::ZERO, hvo).unwrap();
        assert_eq!(pool.grow(&alloc, 4).unwrap(), 4);
        let mut ordinary = filled(&alloc);
        check(&alloc, &ordinary, &[&pool]);
        assert_eq!(
            pool.shrink(&alloc, 2).unwrap(),
            0,
            "no error, nothing freed"
        );
        let c = pool.counts();
        assert_eq!(
            (c.nr_hugepages, c.surplus_hugepages, c.restore_failures),
            (4, 2, 2)
        );
        check(&alloc, &ordinary, &[&pool]);
        let victim = pool.blocks(&alloc)[0].0;
        let err = pool.dissolve_free_folio(&alloc, victim).unwrap_err();
        assert!(matches!(err, HugetlbError::RestoreNoMemory(_)), "{err}");
        check(&alloc, &ordinary, &[&pool]);
        // Memory back: the surplus folios go first, and the pool empties.
        for (pfn, order) in ordinary.drain(..4096) {
            alloc.free_pages(pfn, order).unwrap();
        }
        assert_eq!(pool.shrink(&alloc, 4).unwrap(), 4);
        let c = pool.counts();
        assert_eq!((c.nr_hugepages, c.surplus_hugepages), (0, 0));
        check(&alloc, &ordinary, &[&pool]);
    }
}

#[test]
fn bad_requests_give_one_clear_error_each() {
    let l = layout(GIB);
    let sparse = Allocator::<_, Kernel>::new(
        sparsemem::SparseExtreme::new(&l).unwrap(),
        &l,
        Options::default(),
    )
    .unwrap();
    let hvo = Some(HvoMode {
        layout: HvoLayout::FakeHead,
        batched: false,
    });
    let err = HugetlbPool::new(&sparse, PMD, NodeId::ZERO, hvo)
        .err()
        .unwrap();
    assert!(err.to_string().contains("needs SPARSEMEM_VMEMMAP"), "{err}");
    let old = Allocator::<_, Kernel>::new(
        VmemmapTable::with_options(&l, shared()).unwrap(),
        &l,
        Options::for_era(Era::V5_13),
    )
    .unwrap();
    let err = HugetlbPool::new(&old, PMD, NodeId::ZERO, hvo)
        .err()
        .unwrap();
    assert!(matches!(err, HugetlbError::NoHvoInEra(Era::V5_13)), "{err}");
    let err = HugetlbPool::new(&sparse, 10, NodeId::ZERO, None)
        .err()
        .unwrap();
    assert!(
        matches!(
            err,
            HugetlbError::NoHstate {
                order: 10,
                orders: [9, 18]
            }
        ),
        "{err}"
    );
    // 1 GiB of RAM: ZONE_DMA and ZONE_DMA32 split it, so no zone holds an
    // aligned 1 GiB run.
    let mut giant = HugetlbPool::new(&sparse, PUD, NodeId::ZERO, None).unwrap();
    let err = giant.grow(&sparse, 1).unwrap_err();
    assert!(
        matches!(err, HugetlbError::NoContiguousRange { order: PUD }),
        "{err}"
    );
    assert!(err.to_string().contains("simplification") || err.to_string().contains("not modelled"));
    check(&sparse, &[], &[&giant]);
}

#[test]
fn folios_whose_memmap_is_self_hosted_are_left_plain() {
    // 1 GiB of boot RAM and one hot-added 128 MiB block at 4 GiB that
    // carries its own memmap (its first 512 pfns), onlined to ZONE_NORMAL,
    // which HIGHUSER tries first: the block's free 2 MiB folios come
    // first, then boot memory's.
    let block = MemRange::new(4 * GIB, 4 * GIB + (128 << 20), RangeKind::Hotplug, 0)
        .with_memmap_on_memory();
    let l = Layout::new(
        Geometry::X86_64,
        vec![MemRange::new(0, GIB, RangeKind::Ram, 0), block],
        "self-hosted hugetlb test",
    )
    .unwrap();
    let start = Pfn::new((4 * GIB) >> 12);
    for batched in [false, true] {
        let model = VmemmapTable::with_options(&l, shared()).unwrap();
        let mut alloc = Allocator::<_, Kernel>::new(model, &l, Options::default()).unwrap();
        alloc
            .online_pages(start, 1 << 15, buddy::OnlineType::OnlineKernel)
            .unwrap();
        let hvo = Some(HvoMode {
            layout: HvoLayout::FakeHead,
            batched,
        });
        let mut pool = HugetlbPool::new(&alloc, PMD, NodeId::ZERO, hvo).unwrap();
        assert_eq!(pool.grow(&alloc, 70).unwrap(), 70);
        let hvo = alloc.model().hugetlb_vmemmap().unwrap();
        let heads: Vec<Pfn> = pool.blocks(&alloc).into_iter().map(|(p, _)| p).collect();
        let (hosted, boot): (Vec<Pfn>, Vec<Pfn>) = heads.iter().partition(|&&h| h >= start);
        // At most the block's 63 free folios (the zone's reserves may
        // keep one), and the rest from boot memory.
        assert!((60..=63).contains(&hosted.len()), "{}", hosted.len());
        assert!(hosted.iter().all(|&h| hvo.optimized(h).is_none()));
        assert!(boot.iter().all(|&h| hvo.optimized(h).is_some()));
        let c = pool.counts();
        let split = (boot.len() as u64, hosted.len() as u64);
        assert_eq!((c.optimized, c.skipped_self_hosted), split);
        check(&alloc, &[], &[&pool]);
        assert_eq!(pool.shrink(&alloc, 70).unwrap(), 70);
        check(&alloc, &[], &[&pool]);
    }
}

/// At 8 bytes a PMD folio (within one section) goes through the pool and
/// back to the buddy whole; a gigantic one is refused by name, since its
/// tails span sections and an 8-byte tail's word is only its head's
/// address.
#[test]
fn at_8_bytes_pmd_folios_run_and_gigantic_ones_are_refused() {
    let l = layout(GIB);
    let model =
        sparsemem::Sparse::<sparsemem::table::Extreme, sparsemem::Page8>::build(&l).unwrap();
    let alloc = Allocator::<_, Kernel>::new(model, &l, Options::for_era(Era::V6_18)).unwrap();
    assert!(matches!(
        HugetlbPool::new(&alloc, PUD, NodeId::ZERO, None),
        Err(HugetlbError::GiganticTails {
            order: PUD,
            page_size: 8
        })
    ));
    let mut huge = HugetlbPool::new(&alloc, PMD, NodeId::ZERO, None).unwrap();
    assert_eq!(huge.grow(&alloc, 3).unwrap(), 3);
    let p = alloc
        .alloc_pages(Order::ZERO, Gfp::KERNEL, NodeId::ZERO, None)
        .unwrap();
    check(&alloc, &[(p, Order::ZERO)], &[&huge]);
    assert_eq!(huge.shrink(&alloc, 3).unwrap(), 3);
    alloc.free_pages(p, Order::ZERO).unwrap();
    check(&alloc, &[], &[&huge]);
}
