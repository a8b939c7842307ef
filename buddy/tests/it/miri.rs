//! Small enough for Miri (`cargo +nightly miri test -p pfnlab-buddy --test it miri::`):
//! the allocator's unsafe code — intrusive free lists, the spin lock, pcp
//! lists on two threads, the section table's encoded pointers — over
//! SPARSEMEM_EXTREME and FLATMEM on a layout with a hole, at 64 and 32
//! bytes per `struct page`, plus hot add and remove. Also runs as an ordinary test.

use std::sync::mpsc;

use buddy::testing::{Reference, check_conservation, free_all_and_check, hold_zone_lock, snapshot};
use buddy::{
    Allocator, BuddyModel, Era, FreeError, Gfp, KernelHoleCheck, MemHotplugError, Options, Variant,
    ZoneId,
};
use sparsemem::table::Extreme;
use sparsemem::{
    Flat, Geometry, Layout, MemRange, MemoryModel, NodeId, Order, Page8, Page16, Page32, Pfn,
    RangeKind, Sparse, SparseExtreme,
};

fn layout() -> Layout {
    Layout::new(
        Geometry::X86_64,
        vec![
            MemRange::new(0, 4 << 20, RangeKind::Ram, 0),
            MemRange::new(8 << 20, 10 << 20, RangeKind::Ram, 0),
        ],
        "miri",
    )
    .unwrap()
}

fn exercise<M: BuddyModel, V: Variant>(model: M, layout: &Layout, era: Era) {
    let alloc = Allocator::<M, V>::new(
        model,
        layout,
        Options {
            pcp_batch: Some(7),
            ..Options::for_era(era)
        },
    )
    .unwrap();
    let initial = snapshot(&alloc);
    let mut reference = Reference::default();
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let alloc = &alloc;
            s.spawn(move || {
                let mut cpu = alloc.cpu_on(NodeId::new(0)).unwrap();
                let mut held = Vec::new();
                for i in 0..40u64 {
                    if (i + t) % 3 == 2 {
                        if let Some(p) = held.pop() {
                            cpu.free(p).unwrap();
                        }
                    } else if let Ok(p) = cpu.alloc(Gfp::HIGHUSER_MOVABLE) {
                        held.push(p);
                    }
                }
                for p in held {
                    cpu.free(p).unwrap();
                }
            });
        }
    });
    let mut cpu = alloc.cpu_on(NodeId::new(0)).unwrap();
    for order in [0u8, 3, 9] {
        let pfn = cpu
            .alloc_pages(Order::new(order), Gfp::HIGHUSER_MOVABLE)
            .unwrap();
        reference.record(layout, pfn, Order::new(order)).unwrap();
    }
    let mut slots = [None; 9];
    assert_eq!(
        cpu.alloc_bulk_array(Gfp::HIGHUSER_MOVABLE, &mut slots)
            .unwrap(),
        9
    );
    for p in slots.into_iter().flatten() {
        reference.record(layout, p, Order::ZERO).unwrap();
    }
    let (p, o) = reference.take(0).unwrap();
    cpu.free_pages(p, o).unwrap();
    assert!(matches!(
        cpu.free_pages(p, o),
        Err(FreeError::DoubleFree { .. })
    ));
    check_conservation(&alloc, cpu.total_count(), &reference).unwrap();
    free_all_and_check(cpu, &mut reference, &initial).unwrap();
}

#[test]
fn allocator_over_extreme_and_flat() {
    let layout = layout();
    let extreme = SparseExtreme::new(&layout).unwrap();
    exercise::<_, KernelHoleCheck>(extreme, &layout, Era::V5_13);
    let flat = Flat::new(&layout).unwrap();
    exercise::<_, buddy::Config<true, true, true>>(flat, &layout, Era::V2_6_9);
}

/// The 32-byte `struct page`: the links live in the unions they share with
/// the memdesc and the count, and the tagged compound head in the memdesc
/// half, so Miri checks their provenance through the lists and the pcp
/// threads.
#[test]
fn allocator_at_32_bytes() {
    let layout = layout();
    let extreme = Sparse::<Extreme, Page32>::build(&layout).unwrap();
    exercise::<_, KernelHoleCheck>(extreme, &layout, Era::V5_13);
    let flat = Flat::<Page32>::build(&layout).unwrap();
    exercise::<_, buddy::Config<true, true, true>>(flat, &layout, Era::V2_6_9);
}

/// The 16-byte `struct page`: a listed page's links and order are in a
/// `struct buddy` from the slab cache, reached through the memdesc word's
/// tagged pointer, so Miri checks the cache's objects, their provenance
/// through the tag, and their reuse after free.
#[test]
fn allocator_at_16_bytes() {
    let layout = layout();
    let extreme = Sparse::<Extreme, Page16>::build(&layout).unwrap();
    exercise::<_, KernelHoleCheck>(extreme, &layout, Era::V5_13);
    let flat = Flat::<Page16>::build(&layout).unwrap();
    exercise::<_, buddy::Config<true, true, true>>(flat, &layout, Era::V2_6_9);
}

/// The 8-byte `struct page`: the memdesc word alone. A listed page's
/// `struct buddy` and an allocated page's memdesc come from two caches,
/// reached through the tagged word, and the word is rewritten between
/// packed and tagged forms on every list and count change, so Miri checks
/// both caches' objects, their provenance through the tag, and their reuse.
#[test]
fn allocator_at_8_bytes() {
    let layout = layout();
    let extreme = Sparse::<Extreme, Page8>::build(&layout).unwrap();
    exercise::<_, KernelHoleCheck>(extreme, &layout, Era::V5_13);
    let flat = Flat::<Page8>::build(&layout).unwrap();
    exercise::<_, buddy::Config<true, true, true>>(flat, &layout, Era::V2_6_9);
}

/// `free_pages_nolock` on two threads at once while a third holds the
/// zone lock: both add to the zone's waiting `llist` concurrently (its
/// compare-exchange loop and the pages' links), then a locked free takes
/// the whole list (its swap) and frees every block; at 64 and 16 bytes,
/// where a waiting head holds a `struct buddy`.
#[test]
fn nolock_frees_wait_and_drain() {
    let layout = layout();
    nolock_exercise(SparseExtreme::new(&layout).unwrap());
    nolock_exercise(Sparse::<Extreme, Page16>::build(&layout).unwrap());
}

fn nolock_exercise<M: BuddyModel>(model: M) {
    let layout = layout();
    let options = Options {
        pcp_batch: Some(7),
        ..Options::for_era(Era::V6_18)
    };
    let alloc = Allocator::<M, buddy::Kernel>::new(model, &layout, options).unwrap();
    let initial = snapshot(&alloc);
    let zid = ZoneId::new(0);
    let blocks: Vec<(Pfn, Order)> = (0..8u8)
        .map(|i| {
            let order = Order::new(i % 2 * 4);
            let pfn = alloc
                .alloc_pages(order, Gfp::KERNEL, NodeId::new(0), None)
                .unwrap();
            (pfn, order)
        })
        .collect();
    let waiting: u64 = blocks.iter().map(|&(_, o)| o.nr_pages()).sum();
    let (held_tx, held_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        let alloc = &alloc;
        s.spawn(move || {
            let guard = hold_zone_lock(alloc, zid).unwrap();
            held_tx.send(()).unwrap();
            done_rx.recv().unwrap();
            drop(guard);
        });
        held_rx.recv().unwrap();
        let workers: Vec<_> = blocks
            .chunks(4)
            .map(|part| {
                s.spawn(move || {
                    let mut cpu = alloc.cpu_on(NodeId::new(0)).unwrap();
                    cpu.with_pcp_locked(zid, |cpu| {
                        for &(pfn, order) in part {
                            cpu.free_pages_nolock(pfn, order).unwrap();
                        }
                    })
                    .unwrap();
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(alloc.zones()[0].nr_trylock_free_pages(), waiting);
        done_tx.send(()).unwrap();
    });
    check_conservation(&alloc, 0, &Reference::default()).unwrap();
    let pfn = alloc
        .alloc_pages(Order::ZERO, Gfp::KERNEL, NodeId::new(0), None)
        .unwrap();
    alloc.free_pages(pfn, Order::ZERO).unwrap();
    assert_eq!(alloc.zones()[0].nr_trylock_free_pages(), 0);
    let cpu = alloc.cpu_on(NodeId::new(0)).unwrap();
    free_all_and_check(cpu, &mut Reference::default(), &initial).unwrap();
}

#[test]
fn hotplug_through_the_allocator() {
    // 4 MiB sections (the smallest that hold a MAX_PAGE_ORDER block), so
    // the memory block Miri walks is 1,024 pages rather than x86_64's
    // 32,768: the same code paths at a size Miri finishes.
    let geometry = Geometry::new(12, 22, 46).unwrap();
    let layout = Layout::new(
        geometry,
        vec![MemRange::new(0, 8 << 20, RangeKind::Ram, 0)],
        "miri-hotplug",
    )
    .unwrap();
    let mut alloc = Allocator::<_, buddy::Kernel>::new(
        SparseExtreme::new(&layout).unwrap(),
        &layout,
        Options::default(),
    )
    .unwrap();
    // One memory block (a 4 MiB section).
    let (start, block) = (Pfn::new((16 << 20) >> 12), 1024);
    alloc.hot_add(start, block, NodeId::ZERO).unwrap();
    alloc
        .online_pages(start, block, buddy::OnlineType::OnlineMovable)
        .unwrap();
    let p = alloc
        .alloc_pages(Order::new(9), Gfp::HIGHUSER_MOVABLE, NodeId::ZERO, None)
        .unwrap();
    assert!(
        matches!(
            alloc.offline_pages(start, block),
            Err(MemHotplugError::InUse { .. })
        ) || p.get() < start.get()
    );
    alloc.free_pages(p, Order::new(9)).unwrap();
    alloc.offline_pages(start, block).unwrap();
    alloc.hot_remove(start, block).unwrap();
    assert!(!alloc.model().pfn_valid(start));
}
