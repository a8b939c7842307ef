//! Each workload on small instances of every allocator: it runs, and
//! every page is free again at the end.

use super::*;
use crate::models::build_allocator;
use buddy::Options;
use sparsemem::{Flat, Geometry, Layout, MemRange, RangeKind};
use vmemmap::VmemmapOptions;

/// Two sections (256 MiB) of RAM from pfn 0.
fn layout() -> Layout {
    let g = Geometry::X86_64;
    let bytes = 2 * (g.pages_per_section() << g.page_shift());
    Layout::new(g, vec![MemRange::new(0, bytes, RangeKind::Ram, 0)], "test").unwrap()
}

/// Two threads on this process's first CPU (twice, if it has one).
fn cpus() -> Vec<usize> {
    let online = crate::threads::online_cpus();
    vec![online[0], *online.get(1).unwrap_or(&online[0])]
}

/// Runs `bulk`, `repeat` and `rand` at orders 0 and 9 on `alloc` and
/// checks each leaves as many free pages as it found.
fn every_workload_gives_every_page_back<A: ScaleAllocator>(alloc: &A) {
    let cpus = cpus();
    for order in [Order::ZERO, Order::new(9)] {
        let blocks = 8;
        let before = alloc.nr_free_pages().unwrap();
        let run = bulk(alloc, &cpus, order, blocks).unwrap();
        assert!(run.ns_per_op > 0.0 && run.free_ns_per_op.unwrap() > 0.0);
        assert_eq!(alloc.nr_free_pages().unwrap(), before, "bulk, {order:?}");
        let run = repeat(alloc, &cpus, order, 100).unwrap();
        assert!(run.ns_per_op > 0.0 && run.free_ns_per_op.is_none());
        assert_eq!(alloc.nr_free_pages().unwrap(), before, "repeat, {order:?}");
        let shape = RandShape {
            blocks_each: blocks,
            ops_each: 100,
            seed: 7,
        };
        assert!(rand(alloc, &cpus, order, shape).unwrap().ns_per_op > 0.0);
        assert_eq!(alloc.nr_free_pages().unwrap(), before, "rand, {order:?}");
    }
}

#[test]
fn the_buddys_per_cpu_path_ends_with_every_page_free() {
    let l = layout();
    let alloc =
        build_allocator::<Flat, Kernel>(&l, VmemmapOptions::default(), Options::default()).unwrap();
    every_workload_gives_every_page_back(&PcpPath {
        alloc: &alloc,
        node: l.first_node(),
    });
}

#[test]
fn the_buddys_zone_path_ends_with_every_page_free() {
    let l = layout();
    let alloc =
        build_allocator::<Flat, Kernel>(&l, VmemmapOptions::default(), Options::default()).unwrap();
    every_workload_gives_every_page_back(&ZonePath {
        alloc: &alloc,
        node: l.first_node(),
    });
}

#[test]
fn llfree_ends_with_every_page_free() {
    let llfree = LLFree::new(l_pages(), 2).unwrap();
    every_workload_gives_every_page_back(&llfree);
    assert_eq!(llfree.free_frames(), l_pages());
}

fn l_pages() -> u64 {
    layout().present_pages()
}

#[cfg(feature = "peers")]
#[test]
fn frame_alloc_refuses_a_block_it_did_not_hand_out() {
    let peer = CheckedSummaryBuddy::new(&layout()).unwrap();
    let cpus = cpus();
    assert!(bulk(&peer, &cpus, Order::new(9), 4).is_ok());
    let mut cpu = peer.cpu(0).unwrap();
    let frame = cpu.get(Order::ZERO).unwrap();
    assert!(cpu.put(frame, Order::new(1)).is_err(), "wrong order");
    cpu.put(frame, Order::ZERO).unwrap();
    assert!(cpu.put(frame, Order::ZERO).is_err(), "double free");
}

#[test]
fn an_allocator_out_of_memory_fails_the_run_and_keeps_its_pages() {
    // 512 pages: two threads cannot hold three huge pages each.
    let llfree = LLFree::new(1024, 2).unwrap();
    let e = bulk(&llfree, &cpus(), Order::new(9), 3).unwrap_err();
    assert!(matches!(e, ScaleError::NoMemory { order: 9, .. }), "{e}");
    assert_eq!(llfree.free_frames(), 1024, "what was got is given back");
}

#[test]
fn the_shuffle_keeps_every_block_and_every_share_size() {
    let shares = vec![(0..50).collect::<Vec<u64>>(), (50..80).collect()];
    let out = shuffle(shares, 3);
    assert_eq!((out[0].len(), out[1].len()), (50, 30));
    let mut all: Vec<u64> = out.concat();
    assert!(
        out[0].iter().any(|&b| b >= 50),
        "blocks move between threads"
    );
    all.sort_unstable();
    assert_eq!(all, (0..80).collect::<Vec<_>>());
}
