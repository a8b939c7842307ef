//! Grouping by mobility (2.6.24 on): free lists per migratetype, the
//! pageblock lookup on free, and stealing from the fallback lists.

use buddy::testing::{Reference, check_structure};
use buddy::{Allocator, Era, Gfp, Kernel};
use sparsemem::{MemoryModel, Migratetype, NodeId, Order, Pfn, SparseExtreme};

/// 64 MiB of DMA32 RAM.
fn allocator(era: Era) -> Allocator<SparseExtreme, Kernel> {
    buddy::testing::ram_allocator(16 << 20, 80 << 20, era)
}

/// An Unmovable request on memory that is all Movable claims a whole
/// max-order block: every pageblock it covers becomes Unmovable, and the
/// lists stay consistent with the pageblocks.
#[test]
fn an_unmovable_request_claims_a_whole_block() {
    let alloc = allocator(Era::V6_18);
    let none = Reference::default();
    let p = alloc
        .alloc_pages(Order::ZERO, Gfp::KERNEL, NodeId::ZERO, None)
        .unwrap();
    let model = alloc.model();
    assert_eq!(model.get_pfnblock_migratetype(p), Migratetype::Unmovable);
    let block = Pfn::new(p.get() & !1023);
    for pb in 0..2 {
        assert_eq!(
            model.get_pfnblock_migratetype(Pfn::new(block.get() + pb * 512)),
            Migratetype::Unmovable,
            "both pageblocks of the claimed max-order block"
        );
    }
    assert!(alloc.stats_total().fallbacks >= 1);
    check_structure(&alloc, &none).unwrap();
    // A second Unmovable request is served from the claimed block.
    let q = alloc
        .alloc_pages(Order::ZERO, Gfp::KERNEL, NodeId::ZERO, None)
        .unwrap();
    assert_eq!(q.get() & !1023, block.get());
    let movable = alloc
        .alloc_pages(Order::ZERO, Gfp::HIGHUSER_MOVABLE, NodeId::ZERO, None)
        .unwrap();
    assert_eq!(
        model.get_pfnblock_migratetype(movable),
        Migratetype::Movable
    );
    for x in [p, q, movable] {
        alloc.free_pages(x, Order::ZERO).unwrap();
    }
    check_structure(&alloc, &none).unwrap();
}

/// When only fragments of Movable pageblocks are free, an Unmovable request
/// claims a pageblock at least half free: its free blocks move to the
/// Unmovable lists with it.
#[test]
fn a_half_free_pageblock_is_stolen_whole() {
    let alloc = allocator(Era::V6_18);
    let mut held = Vec::new();
    // __GFP_MEMALLOC throughout: past the watermarks, to the last page.
    let movable = Gfp::HIGHUSER_MOVABLE | Gfp::MEMALLOC;
    while let Ok(p) = alloc.alloc_pages(Order::ZERO, movable, NodeId::ZERO, None) {
        held.push(p);
    }
    // Free every other page of one pageblock: 256 free order-0 blocks that
    // cannot merge.
    held.sort_unstable();
    let pageblock = Pfn::new(held[0].get().next_multiple_of(512));
    let mut reference = Reference::default();
    for &p in &held {
        let inside = p >= pageblock && p.get() < pageblock.get() + 512;
        if inside && p.get() % 2 == 0 {
            alloc.free_pages(p, Order::ZERO).unwrap();
        } else {
            reference.blocks.insert(p.get(), Order::ZERO);
        }
    }
    let model = alloc.model();
    assert_eq!(
        model.get_pfnblock_migratetype(pageblock),
        Migratetype::Movable
    );
    let before = alloc.stats_total().steals;
    let p = alloc
        .alloc_pages(Order::ZERO, Gfp::KERNEL | Gfp::MEMALLOC, NodeId::ZERO, None)
        .unwrap();
    assert!(p >= pageblock && p.get() < pageblock.get() + 512);
    assert_eq!(
        model.get_pfnblock_migratetype(pageblock),
        Migratetype::Unmovable
    );
    assert_eq!(alloc.stats_total().steals, before + 1);
    reference.blocks.insert(p.get(), Order::ZERO);
    check_structure(&alloc, &reference).unwrap();
}

/// Before 2.6.24 there is one list per order and no pageblock lookup: an
/// Unmovable request takes memory as it is, nothing falls back, the
/// pageblocks stay as memmap init left them.
#[test]
fn older_eras_have_one_list_per_order() {
    let alloc = allocator(Era::V2_6_23);
    let p = alloc
        .alloc_pages(Order::ZERO, Gfp::KERNEL, NodeId::ZERO, None)
        .unwrap();
    assert_eq!(
        alloc.model().get_pfnblock_migratetype(p),
        Migratetype::Movable
    );
    assert_eq!(alloc.stats_total().fallbacks, 0);
    alloc.free_pages(p, Order::ZERO).unwrap();
    check_structure(&alloc, &Reference::default()).unwrap();
}

/// With migratetypes, each CPU keeps an order-0 list per migratetype: a
/// freed page goes on its pageblock's list, and a request takes from its
/// own (2.6.25 to 5.14 shape).
#[test]
fn per_cpu_lists_keep_migratetypes_apart() {
    let alloc = allocator(Era::V6_18);
    let model = alloc.model();
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let unmovable: Vec<Pfn> = (0..100).map(|_| cpu.alloc(Gfp::KERNEL).unwrap()).collect();
    let movable: Vec<Pfn> = (0..100)
        .map(|_| cpu.alloc(Gfp::HIGHUSER_MOVABLE).unwrap())
        .collect();
    let kind = |p: &Pfn| model.get_pfnblock_migratetype(*p);
    assert!(unmovable.iter().all(|p| kind(p) == Migratetype::Unmovable));
    assert!(movable.iter().all(|p| kind(p) == Migratetype::Movable));
    for &p in unmovable.iter().chain(&movable) {
        cpu.free(p).unwrap();
    }
    let again = cpu.alloc(Gfp::KERNEL).unwrap();
    assert!(
        unmovable.contains(&again),
        "the hottest page of its own list"
    );
    let again_movable = cpu.alloc(Gfp::HIGHUSER_MOVABLE).unwrap();
    assert!(movable.contains(&again_movable));
    cpu.free(again).unwrap();
    cpu.free(again_movable).unwrap();
    drop(cpu);
    check_structure(&alloc, &Reference::default()).unwrap();
}

/// With less memory than a pageblock per migratetype
/// (`page_group_by_mobility_disabled`), an unmovable request takes memory
/// as it is: nothing falls back or is claimed.
#[test]
fn small_memory_disables_grouping_by_mobility() {
    // 8 MiB: under 5 pageblocks of 2 MiB.
    let alloc = buddy::testing::ram_allocator(16 << 20, 24 << 20, Era::default());
    let p = alloc
        .alloc_pages(Order::ZERO, Gfp::KERNEL, NodeId::ZERO, None)
        .unwrap();
    assert_eq!(
        alloc.model().get_pfnblock_migratetype(p),
        Migratetype::Movable
    );
    let stats = alloc.stats_total();
    assert_eq!((stats.fallbacks, stats.steals), (0, 0));
    alloc.free_pages(p, Order::ZERO).unwrap();
}
