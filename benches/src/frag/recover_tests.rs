use super::*;
use buddy::testing::{Reference, check_conservation};
use buddy::{Era, Kernel, Options};
use sparsemem::{Flat, Layout, Order, Pfn};

/// 32 MiB in one zone: 16 huge frames.
const LAYOUT: &str = "[[range]]\nstart = 0x100000000\nend = 0x102000000\nkind = \"ram\"\n";

fn live(pfn: u64, migratetype: Migratetype) -> Live {
    Live {
        pfn: Pfn::new(pfn),
        order: Order::ZERO,
        migratetype,
    }
}

#[test]
fn the_measure_empties_the_least_occupied_huge_frames_it_can() {
    use Migratetype::{Movable, Unmovable};
    // 16 frames in huge frames of 4: the first holds one movable frame,
    // the second three, the third two and an immovable one, the last none.
    let held = [
        live(0, Movable),
        live(4, Movable),
        live(5, Movable),
        live(6, Movable),
        live(8, Movable),
        live(9, Movable),
        live(10, Unmovable),
    ];
    let occ = Occupancy::of(&held, 16, 2);
    assert_eq!(
        (occ.free_frames, occ.free_huge(), occ.possible()),
        (9, 1, 2)
    );
    assert_eq!(frames_to_move(&occ, 0), Some(0));
    assert_eq!(frames_to_move(&occ, 1), Some(0), "one is free already");
    assert_eq!(frames_to_move(&occ, 2), Some(1), "then the one holding one");
    // Nine free frames make two huge frames, not three.
    assert_eq!(frames_to_move(&occ, 3), None);
    let r = Recovery::measure(&occ, 2);
    assert_eq!((r.frames_to_move, r.frames_to_move_all), (Some(1), 1));
}

fn allocator(layout: &Layout) -> Allocator<Flat, Kernel> {
    Allocator::new(
        Flat::new(layout).unwrap(),
        layout,
        Options::for_era(Era::V6_18),
    )
    .unwrap()
}

/// Fills `alloc` with movable base pages on the zone path until it
/// refuses, then frees three of every four: each huge frame keeps a
/// quarter of its frames, none is free.
fn quarter_held(alloc: &Allocator<Flat, Kernel>) -> Vec<Live> {
    let mut held = Vec::new();
    while let Ok(pfn) = alloc.alloc_pages(Order::ZERO, Gfp::HIGHUSER_MOVABLE, NodeId::new(0), None)
    {
        held.push(live(pfn.get(), Migratetype::Movable));
    }
    held.retain(|l| l.pfn.get() % 4 == 0 || alloc.free_pages(l.pfn, Order::ZERO).is_err());
    held
}

/// The allocator is sound after a recovery: every owner holds a block of
/// the live set, and the free lists, the live set and conservation agree.
fn check_sound(alloc: &Allocator<Flat, Kernel>, layout: &Layout, held: &[Live], owners: &Owners) {
    let mut reference = Reference::default();
    for l in held {
        reference.record(layout, l.pfn, l.order).unwrap();
    }
    for (_, pfn, order) in owners.iter() {
        assert_eq!(reference.blocks.get(&pfn.get()), Some(&order), "{pfn}");
    }
    check_conservation(alloc, 0, &reference).unwrap();
}

#[test]
fn compaction_recovers_k_huge_frames_when_the_movable_memory_allows() {
    let layout = Layout::from_toml(LAYOUT).unwrap();
    let alloc = allocator(&layout);
    let mut held = quarter_held(&alloc);
    let occ = Occupancy::of(&held, alloc.managed_pages_total(), 9);
    assert_eq!(occ.free_huge(), 0);
    let k = 3;
    let least = frames_to_move(&occ, k).expect("three quarters are free");
    assert!(least <= 3 * 128, "{least}");
    let (cost, owners) = compact_buddy(&alloc, &mut held, k).unwrap();
    assert_eq!(cost.recovered, k, "{cost:?}");
    assert_eq!(cost.free_huge_before, 0);
    assert!(cost.free_huge_after >= k, "{cost:?}");
    // No compaction moves less than the measure says it must.
    assert!(cost.pgmigrate_success >= least, "{cost:?} {least}");
    assert!(cost.compact_migrate_scanned > 0 && cost.compact_free_scanned > 0);
    assert_eq!(owners.len(), held.len());
    check_sound(&alloc, &layout, &held, &owners);
}

#[test]
fn an_immovable_frame_in_every_huge_frame_leaves_none_to_recover() {
    let layout = Layout::from_toml(LAYOUT).unwrap();
    let alloc = allocator(&layout);
    let mut held = quarter_held(&alloc);
    // The first frame each huge frame holds has no owner: nothing can
    // move it, as nothing can move a kernel allocation.
    let mut seen = std::collections::HashSet::new();
    for l in &mut held {
        if seen.insert(l.pfn.get() >> 9) {
            l.migratetype = Migratetype::Unmovable;
        }
    }
    let occ = Occupancy::of(&held, alloc.managed_pages_total(), 9);
    assert_eq!((occ.possible(), frames_to_move(&occ, 1)), (0, None));
    let (cost, owners) = compact_buddy(&alloc, &mut held, 2).unwrap();
    assert_eq!((cost.recovered, cost.free_huge_after), (0, 0), "{cost:?}");
    assert_eq!(owners.len(), held.len() - seen.len());
    check_sound(&alloc, &layout, &held, &owners);
}

#[test]
fn the_default_is_one_per_cent_and_zero_turns_recovery_off() {
    assert_eq!(wanted(None, 2048), 20);
    assert_eq!(wanted(None, 16), 1);
    assert_eq!(wanted(Some(0), 2048), 0);
    assert_eq!(wanted(Some(7), 2048), 7);
}
