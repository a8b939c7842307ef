//! memmap_on_memory through the allocator: the 2019 figure (a 2 GiB
//! hot-add is 16 blocks, 8192 of its 524,288 pages hold the memmap), the
//! self-hosted pfns reserved in the zone and never in the buddy, the
//! first max-order block of each block left as an order-9 block,
//! `zone->contiguous` kept, the gate's refusals by rule, era and model,
//! and generated hot-add/online/offline/remove sequences that conserve
//! memory and leave nothing behind.

use std::collections::BTreeSet;

use buddy::{
    Allocator, BuddyModel, Era, Kernel, MemHotplugError, MemmapOnMemory, MemmapOnMemoryError,
    OnlineType, Options,
};
use proptest::prelude::*;
use sparsemem::{
    Geometry, Layout, MemRange, MemoryModel, NodeId, Order, PageFlag, Pfn, RangeKind, SparseExtreme,
};
use vmemmap::VmemmapTable;

const BLOCK: u64 = 1 << 15; // 128 MiB of 4 KiB pages
const GIB: u64 = 1 << 30;

/// 1 GiB of RAM on node 0 and room for 4 GiB of hot-added memory from
/// 4 GiB, for node 1.
fn layout() -> Layout {
    Layout::new(
        Geometry::X86_64,
        vec![
            MemRange::new(0, GIB, RangeKind::Ram, 0),
            MemRange::new(4 * GIB, 8 * GIB, RangeKind::Hotplug, 1),
        ],
        "memmap_on_memory test",
    )
    .unwrap()
}

fn hot_start() -> Pfn {
    Pfn::new((4 * GIB) >> 12)
}

/// Builds the allocator and removes the layout's offline hot-plug blocks,
/// so the tests add them themselves.
fn allocator<M: BuddyModel>(model: M, era: Era) -> Allocator<M, Kernel> {
    let layout = layout();
    let mut alloc = Allocator::new(model, &layout, Options::for_era(era)).unwrap();
    alloc.hot_remove(hot_start(), 32 * BLOCK).unwrap();
    alloc
}

fn free_set<M: BuddyModel>(alloc: &Allocator<M, Kernel>) -> BTreeSet<(u64, u8)> {
    alloc
        .zones()
        .iter()
        .flat_map(|z| alloc.free_blocks(z.id))
        .map(|(p, o)| (p.get(), o.get()))
        .collect()
}

#[test]
fn a_2_gib_hot_add_reproduces_the_2019_figure() {
    let mut alloc = allocator(VmemmapTable::new(&layout()).unwrap(), Era::V6_18);
    let start = hot_start();
    let nr = (2 * GIB) >> 12;
    assert_eq!(nr, 524_288);
    let per_block = alloc
        .hot_add_memmap_on_memory(start, nr, NodeId::new(1), MemmapOnMemory::On)
        .unwrap();
    let hosted = alloc.self_hosted_pfns(start, start + nr);
    assert_eq!(hosted.len(), 16, "16 blocks, each its own altmap");
    let lost: u64 = hosted.iter().map(|(s, e)| e.get() - s.get()).sum();
    assert_eq!((per_block, lost), (512, 8192));
    let zid = alloc
        .online_pages(start, nr, OnlineType::OnlineMovable)
        .unwrap();
    let zone = alloc.zone(zid).unwrap();
    assert_eq!(zone.managed_pages(), nr - 8192);
    // Per block: the first max-order block survives only as order 9.
    let mut nr_free = [0u64; sparsemem::NR_PAGE_ORDERS];
    nr_free[9] = 16;
    nr_free[10] = 16 * 31;
    assert_eq!(zone.nr_free(), nr_free);
    for &(s, e) in &hosted {
        for pfn in [s, e - 1] {
            let page = alloc.model().pfn_to_page(pfn).unwrap();
            assert!(page.test(PageFlag::Reserved) && page.zone_id() == zid.get());
        }
    }
    // Offlining the last block recomputes `zone->contiguous` over the
    // other fifteen (an online never sets it: the range being onlined
    // reads as not yet online): their self-hosted pageblocks are the
    // zone's, so it holds.
    alloc.offline_pages(start + 15 * BLOCK, BLOCK).unwrap();
    assert!(alloc.zone(zid).unwrap().contiguous());
    // Everything the zone hands out is outside the self-hosted pfns.
    let mut cpu = alloc.cpu_on(NodeId::new(1)).unwrap();
    let gfp = buddy::Gfp::HIGHUSER_MOVABLE | buddy::Gfp::THISNODE;
    while let Ok(pfn) = cpu.alloc_pages(Order::new(9), gfp) {
        assert!(!hosted.iter().any(|&(s, e)| s <= pfn && pfn < e), "{pfn}");
    }
}

#[test]
fn without_it_the_same_add_keeps_every_pfn() {
    let mut alloc = allocator(VmemmapTable::new(&layout()).unwrap(), Era::V6_18);
    let (start, nr) = (hot_start(), (2 * GIB) >> 12);
    alloc.hot_add(start, nr, NodeId::new(1)).unwrap();
    let zid = alloc
        .online_pages(start, nr, OnlineType::OnlineMovable)
        .unwrap();
    let zone = alloc.zone(zid).unwrap();
    assert_eq!(zone.managed_pages(), nr);
    assert_eq!(zone.nr_free()[10], 16 * 32);
}

#[test]
fn the_gate_refuses_by_rule_era_and_model() {
    let (start, one, two) = (hot_start(), BLOCK, 2 * BLOCK);
    let node = NodeId::new(1);
    let on = MemmapOnMemory::On;
    let mut old = allocator(VmemmapTable::new(&layout()).unwrap(), Era::V5_13);
    let err = old
        .hot_add_memmap_on_memory(start, two, node, on)
        .unwrap_err();
    assert!(matches!(
        err,
        MemHotplugError::MemmapOnMemory(MemmapOnMemoryError::NotOneBlock { .. })
    ));
    assert!(err.to_string().contains("5.13"), "{err}");
    let force = old.hot_add_memmap_on_memory(start, one, node, MemmapOnMemory::Force);
    assert!(matches!(
        force,
        Err(MemHotplugError::MemmapOnMemory(
            MemmapOnMemoryError::ForceEra(_)
        ))
    ));
    assert_eq!(
        old.hot_add_memmap_on_memory(start, one, node, on).unwrap(),
        512
    );

    let mut sparse = allocator(SparseExtreme::new(&layout()).unwrap(), Era::V6_18);
    let err = sparse
        .hot_add_memmap_on_memory(start, one, node, on)
        .unwrap_err();
    assert!(matches!(
        err,
        MemHotplugError::MemmapOnMemory(MemmapOnMemoryError::NeedsVmemmap { .. })
    ));
    // Nothing was added by a refused request.
    assert!(sparse.offline_blocks().is_empty());
    assert!(!sparse.model().pfn_valid(start));
}

#[test]
fn force_pads_to_whole_pageblocks() {
    // A geometry whose 128 MiB block's memmap (2 MiB, 512 pfns) is not a
    // whole pageblock: 1024-pfn pageblocks (order 10).
    let g = Geometry::X86_64.with_orders(10, 10).unwrap();
    let on = buddy::memmap_on_memory_pages(&g, Era::V6_18, MemmapOnMemory::On, BLOCK);
    assert!(matches!(
        on,
        Err(MemmapOnMemoryError::NotPageblockAligned {
            memmap_pages: 512,
            pageblock_pages: 1024
        })
    ));
    let forced = buddy::memmap_on_memory_pages(&g, Era::V6_18, MemmapOnMemory::Force, BLOCK);
    assert_eq!(forced, Ok(1024));
}

#[derive(Clone, Copy, Debug)]
enum Step {
    Add { block: u64, on_memory: bool },
    Online { block: u64 },
    Offline { block: u64 },
    Remove { block: u64 },
}

fn arb_steps() -> impl Strategy<Value = Vec<Step>> {
    let block = 0u64..8;
    prop::collection::vec(
        prop_oneof![
            (block.clone(), any::<bool>())
                .prop_map(|(block, on_memory)| Step::Add { block, on_memory }),
            block.clone().prop_map(|block| Step::Online { block }),
            block.clone().prop_map(|block| Step::Offline { block }),
            block.prop_map(|block| Step::Remove { block }),
        ],
        1..40,
    )
}

/// Conservation, and no self-hosted pfn on a free list or managed.
fn check<M: BuddyModel>(alloc: &Allocator<M, Kernel>) -> Result<(), String> {
    let managed: u64 = alloc.zones().iter().map(|z| z.managed_pages()).sum();
    let free: u64 = alloc.zones().iter().map(|z| z.nr_free_pages()).sum();
    if managed != free {
        return Err(format!("managed {managed} != free {free}"));
    }
    let hosted = alloc.self_hosted_pfns(Pfn::new(0), Pfn::new(u64::MAX >> 12));
    for (p, o) in free_set(alloc) {
        let (a, b) = (p, p + (1 << o));
        if let Some(&(s, e)) = hosted.iter().find(|&&(s, e)| s.get() < b && a < e.get()) {
            return Err(format!("free block {p:#x}/{o} holds self-hosted {s}..{e}"));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: sparsemem::testing::cases(32), ..ProptestConfig::default() })]

    #[test]
    fn hotplug_sequences_conserve_and_release(steps in arb_steps()) {
        let mut alloc = allocator(VmemmapTable::new(&layout()).unwrap(), Era::V6_18);
        let pfn = |b: u64| hot_start() + b * BLOCK;
        let node = NodeId::new(1);
        for step in steps {
            // Refusals are part of the sequence (a block already added,
            // not offline, ...); what matters is the state after each.
            let _ = match step {
                Step::Add { block, on_memory: true } => alloc
                    .hot_add_memmap_on_memory(pfn(block), BLOCK, node, MemmapOnMemory::On)
                    .map(|_| ()),
                Step::Add { block, on_memory: false } => alloc.hot_add(pfn(block), BLOCK, node),
                Step::Online { block } => alloc
                    .online_pages(pfn(block), BLOCK, OnlineType::OnlineMovable)
                    .map(|_| ()),
                Step::Offline { block } => alloc.offline_pages(pfn(block), BLOCK),
                Step::Remove { block } => alloc.hot_remove(pfn(block), BLOCK),
            };
            check(&alloc).map_err(TestCaseError::fail)?;
        }
        // Take everything back out: nothing self-hosted or present is left.
        for b in 0..8 {
            let _ = alloc.offline_pages(pfn(b), BLOCK);
            let _ = alloc.hot_remove(pfn(b), BLOCK);
        }
        check(&alloc).map_err(TestCaseError::fail)?;
        prop_assert!(alloc.self_hosted_pfns(pfn(0), pfn(8)).is_empty());
        prop_assert!((0..8).all(|b| !alloc.model().pfn_valid(pfn(b))));
        let zones_managed: u64 = alloc
            .zones()
            .iter()
            .filter(|z| z.node == node)
            .map(|z| z.managed_pages())
            .sum();
        prop_assert_eq!(zones_managed, 0);
    }
}

const TOML: &str = "[[range]]\nstart = 0\nend = 0x40000000\nkind = \"ram\"\n\
    [[range]]\nstart = 0x100000000\nend = 0x180000000\nkind = \"hotplug\"\nnode = 1\n\
    memmap_on_memory = true\n";

#[test]
fn a_layout_file_marks_hotplug_ranges() {
    let layout = Layout::from_toml(TOML).unwrap();
    let alloc = Allocator::<_, Kernel>::new(
        VmemmapTable::new(&layout).unwrap(),
        &layout,
        Options::default(),
    )
    .unwrap();
    let start = hot_start();
    let hosted = alloc.self_hosted_pfns(start, start + 16 * BLOCK);
    assert_eq!(hosted.len(), 16);
    assert!(hosted.iter().all(|(s, e)| e.get() - s.get() == 512));
    // Only hot-added memory can carry its memmap.
    let ram = TOML.replace("kind = \"hotplug\"", "kind = \"ram\"");
    let err = Layout::from_toml(&ram).unwrap_err();
    assert!(err.to_string().contains("memmap_on_memory"), "{err}");
    // Only a vmemmap model can.
    let err = Allocator::<_, Kernel>::new(
        SparseExtreme::new(&layout).unwrap(),
        &layout,
        Options::default(),
    )
    .err()
    .expect("refused");
    assert!(
        matches!(
            err,
            buddy::InitError::Hotplug(MemHotplugError::MemmapOnMemory(
                MemmapOnMemoryError::NeedsVmemmap { .. }
            ))
        ),
        "{err}"
    );
    // 5.13 took one block per add; this range is sixteen.
    let err = Allocator::<_, Kernel>::new(
        VmemmapTable::new(&layout).unwrap(),
        &layout,
        Options::for_era(Era::V5_13),
    )
    .err()
    .expect("refused");
    assert!(err.to_string().contains("one memory block"), "{err}");
}
