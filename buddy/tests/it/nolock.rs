//! `alloc_pages_nolock` and `free_pages_nolock` (Linux 6.15 on): each way
//! the kernel's returns nothing (the pcp lock and the zone lock held
//! together, the zone lock held over an empty list, the zone at its min
//! watermark), the calls the kernel refuses at once (an era without them,
//! an order the per-CPU lists do not hold, deferred pages), and the free
//! that finds the zone lock held waiting on `zone->trylock_free_pages`
//! until the next locked free drains it, with no page lost.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use buddy::testing::{
    GFP, Reference, check_conservation, free_all_and_check, hold_zone_lock, snapshot,
};
use buddy::{
    Allocator, BuddyModel, Era, FreeError, Gfp, Kernel, NotInEra, Options, RequestError, ZoneId,
    ZoneLockKind, ZoneType,
};
use sparsemem::table::Extreme;
use sparsemem::{
    BuddyPage, Geometry, Layout, MemRange, MemoryModel, NodeId, Order, PageFlag, Pfn, RangeKind,
    Sparse, SparseExtreme,
};

const GIB: u64 = 1 << 30;
const ZID: ZoneId = ZoneId::new(0);

/// One ZONE_NORMAL of 512 MiB in `era`, its zone lock of `kind`.
fn allocator(era: Era, kind: ZoneLockKind) -> Allocator<SparseExtreme, Kernel> {
    let layout = Layout::new(
        Geometry::X86_64,
        vec![MemRange::new(4 * GIB, 4 * GIB + GIB / 2, RangeKind::Ram, 0)],
        "one normal zone",
    )
    .unwrap();
    let options = Options {
        cpus: Some(2),
        zone_lock: kind,
        ..Options::for_era(era)
    };
    let alloc = Allocator::new(SparseExtreme::new(&layout).unwrap(), &layout, options).unwrap();
    assert_eq!(alloc.zones().len(), 1);
    assert_eq!(alloc.zones()[0].kind, ZoneType::Normal);
    alloc
}

/// One ZONE_NORMAL of 64 MiB above 4 GiB.
fn normal_64mib() -> Layout {
    Layout::new(
        Geometry::X86_64,
        vec![MemRange::new(
            4 * GIB,
            4 * GIB + (64 << 20),
            RangeKind::Ram,
            0,
        )],
        "64 MiB normal",
    )
    .expect("a valid layout")
}

/// Runs `body` while another thread holds zone `ZID`'s lock.
fn with_zone_locked_elsewhere<M: BuddyModel, R>(
    alloc: &Allocator<M, Kernel>,
    body: impl FnOnce() -> R,
) -> R {
    let (held_tx, held_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        s.spawn(move || {
            let guard = hold_zone_lock(alloc, ZID).expect("the zone exists");
            held_tx.send(()).unwrap();
            done_rx.recv().unwrap();
            drop(guard);
        });
        held_rx.recv().unwrap();
        let r = body();
        done_tx.send(()).unwrap();
        r
    })
}

/// Nolock allocations of every order the lists hold (0 to 3 and a THP's),
/// checked against a reference and conservation, then nolock frees of
/// them all: everything coalesces back.
#[test]
fn nolock_allocations_and_frees_keep_the_invariants() {
    let alloc = allocator(Era::V6_18, ZoneLockKind::Unfair);
    let initial = snapshot(&alloc);
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let thp = alloc.model().geometry().pageblock_order();
    let mut reference = Reference::default();
    for order in [0, 1, 2, 3, 0, 3, thp.get(), 0] {
        let order = Order::new(order);
        let pfn = cpu
            .alloc_pages_nolock(order)
            .unwrap()
            .expect("memory is plentiful");
        reference.record_model(alloc.model(), pfn, order).unwrap();
        let head = alloc.model().pfn_to_page(pfn).unwrap();
        assert_eq!(
            head.test(PageFlag::Head),
            order > Order::ZERO,
            "__GFP_COMP: a block above order 0 is compound"
        );
        check_conservation(&alloc, cpu.total_count(), &reference).unwrap();
    }
    while let Some((pfn, order)) = reference.take(0) {
        cpu.free_pages_nolock(pfn, order).unwrap();
        check_conservation(&alloc, cpu.total_count(), &reference).unwrap();
    }
    assert_eq!(
        alloc.zones()[0].nr_trylock_free_pages(),
        0,
        "no lock was held"
    );
    free_all_and_check(cpu, &mut reference, &initial).unwrap();
}

/// The pcp lock held (an interrupt inside this CPU's list code) does not
/// fail the request: `rmqueue` goes on to `rmqueue_buddy`, which tries the
/// zone lock and takes the block from the buddy, leaving the list alone.
#[test]
fn a_held_pcp_lock_sends_the_request_to_the_buddy() {
    let alloc = allocator(Era::V6_18, ZoneLockKind::Unfair);
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let warm = cpu.alloc(Gfp::KERNEL).unwrap();
    cpu.free(warm).unwrap();
    let listed = cpu.count(ZID);
    assert!(listed > 0);
    let free = alloc.free_pages_total();
    let pfn = cpu
        .with_pcp_locked(ZID, |cpu| cpu.alloc_pages_nolock(Order::ZERO))
        .unwrap()
        .unwrap()
        .expect("served by the buddy");
    assert_eq!(cpu.count(ZID), listed, "the list was not touched");
    assert_eq!(alloc.free_pages_total(), free - 1, "taken from the buddy");
    cpu.free(pfn).unwrap();
}

/// The pcp lock and the zone lock held together (by this thread's guard,
/// or by another thread): nothing can be had without waiting, so the call
/// returns nothing at once, changing nothing; with the locks free the same
/// call succeeds.
#[test]
fn a_held_pcp_lock_and_zone_lock_return_nothing() {
    for kind in ZoneLockKind::ALL {
        let alloc = allocator(Era::V6_18, kind);
        let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
        let warm = cpu.alloc(Gfp::KERNEL).unwrap();
        let (listed, free) = (cpu.count(ZID), alloc.free_pages_total());
        let got = cpu.with_pcp_locked(ZID, |cpu| {
            let guard = hold_zone_lock(&alloc, ZID).unwrap();
            let here = cpu.alloc_pages_nolock(Order::ZERO).unwrap();
            drop(guard);
            let elsewhere =
                with_zone_locked_elsewhere(&alloc, || cpu.alloc_pages_nolock(Order::ZERO));
            (here, elsewhere.unwrap())
        });
        assert_eq!(got, Some((None, None)), "{kind:?}");
        assert_eq!((cpu.count(ZID), alloc.free_pages_total()), (listed, free));
        let pfn = cpu
            .alloc_pages_nolock(Order::ZERO)
            .unwrap()
            .expect("free locks");
        cpu.free(pfn).unwrap();
        cpu.free(warm).unwrap();
    }
}

/// The zone lock held by another thread: an empty list cannot be refilled
/// (`rmqueue_bulk` only tries the lock) and the buddy cannot be reached,
/// so nothing comes back and no refill is counted; a list that has blocks
/// still serves, as it needs no zone lock.
#[test]
fn a_held_zone_lock_returns_nothing_over_an_empty_list() {
    let alloc = allocator(Era::V6_18, ZoneLockKind::Ticket);
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let refills = alloc.stats_total().pcp_refills;
    let got = with_zone_locked_elsewhere(&alloc, || cpu.alloc_pages_nolock(Order::ZERO));
    assert_eq!(got.unwrap(), None);
    assert_eq!(cpu.count(ZID), 0);
    assert_eq!(alloc.stats_total().pcp_refills, refills, "no refill");

    let warm = cpu.alloc(Gfp::KERNEL).unwrap();
    let listed = cpu.count(ZID);
    assert!(listed > 0);
    let from_list = with_zone_locked_elsewhere(&alloc, || cpu.alloc_pages_nolock(Order::ZERO));
    let pfn = from_list
        .unwrap()
        .expect("the list serves without the zone lock");
    assert_eq!(cpu.count(ZID), listed - 1);
    cpu.free(pfn).unwrap();
    cpu.free(warm).unwrap();
}

/// The watermark is `min` (`ALLOC_TRYLOCK` alone, and `ALLOC_WMARK_MIN` is
/// 0): with the zone at `min` a nolock request gets nothing where
/// `GFP_ATOMIC` still digs into the reserve below it; one page above
/// `min` (still below `low`) it succeeds.
#[test]
fn the_zone_at_its_min_watermark_returns_nothing() {
    let alloc = allocator(Era::V6_18, ZoneLockKind::Unfair);
    let zone = &alloc.zones()[0];
    let marks = zone.watermarks();
    let mut held = Vec::new();
    while let Ok(pfn) = alloc.alloc_pages(Order::ZERO, Gfp::KERNEL, NodeId::ZERO, None) {
        held.push(pfn);
    }
    assert_eq!(zone.nr_free_pages_state(), marks.min);
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    assert_eq!(cpu.alloc_pages_nolock(Order::ZERO).unwrap(), None);
    assert_eq!(cpu.alloc_pages_nolock(Order::new(3)).unwrap(), None);
    assert_eq!(zone.nr_free_pages(), marks.min, "nothing taken");
    let atomic = alloc
        .alloc_pages(Order::ZERO, Gfp::ATOMIC, NodeId::ZERO, None)
        .expect("GFP_ATOMIC may go below min");
    alloc.free_pages(atomic, Order::ZERO).unwrap();
    alloc.free_pages(held.pop().unwrap(), Order::ZERO).unwrap();
    assert!(marks.min + 1 < marks.low);
    let pfn = cpu
        .alloc_pages_nolock(Order::ZERO)
        .unwrap()
        .expect("above min, below low");
    cpu.free(pfn).unwrap();
    drop(cpu);
    for pfn in held {
        alloc.free_pages(pfn, Order::ZERO).unwrap();
    }
    assert_eq!(alloc.free_pages_total(), zone.managed_pages());
}

/// Before 6.15 neither call exists: each is refused with the era's typed
/// error, and the page given to the refused free stays allocated.
#[test]
fn an_era_without_it_refuses_both_calls() {
    for era in [Era::V2_6_9, Era::V2_6_23, Era::V5_13] {
        let alloc = allocator(era, ZoneLockKind::Unfair);
        let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
        let want = NotInEra::AllocNolock { era };
        match cpu.alloc_pages_nolock(Order::ZERO) {
            Err(RequestError::NotInEra(e)) => assert_eq!(e, want),
            other => panic!("{era}: {other:?}"),
        }
        let pfn = cpu.alloc(GFP).unwrap();
        match cpu.free_pages_nolock(pfn, Order::ZERO) {
            Err(FreeError::NotInEra(e)) => assert_eq!(e, want),
            other => panic!("{era}: {other:?}"),
        }
        let message = RequestError::NotInEra(want).to_string();
        assert!(
            message.contains("6.15") && message.contains(era.name()),
            "{message}"
        );
        cpu.free(pfn).expect("still allocated");
    }
}

/// `!pcp_allowed_order`: orders above `PAGE_ALLOC_COSTLY_ORDER` other than
/// a THP's are refused before any zone is looked at; the THP order and
/// orders up to 3 are served.
#[test]
fn orders_the_lists_do_not_hold_are_refused() {
    let alloc = allocator(Era::V6_18, ZoneLockKind::Unfair);
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let thp = alloc.model().geometry().pageblock_order();
    let free = alloc.free_pages_total();
    for o in 0..=12 {
        let order = Order::new(o);
        let got = cpu.alloc_pages_nolock(order);
        if o <= 3 || order == thp {
            let pfn = got.unwrap().expect("served");
            cpu.free_pages_nolock(pfn, order).unwrap();
        } else {
            match got {
                Err(RequestError::NolockOrder { order: refused }) => assert_eq!(refused, order),
                other => panic!("order {o}: {other:?}"),
            }
        }
    }
    cpu.drain();
    assert_eq!(alloc.free_pages_total(), free);
}

/// While deferred struct page init may still grow a zone the call is
/// refused (growing takes the zone lock); after `page_alloc_init_late` it
/// is served.
#[test]
fn deferred_pages_refuse_until_init_is_done() {
    let layout = crate::common::two_zone_layout();
    let options = Options {
        deferred_init: true,
        ..Options::for_era(Era::V6_18)
    };
    let mut alloc =
        Allocator::<_, Kernel>::new(SparseExtreme::new(&layout).unwrap(), &layout, options)
            .unwrap();
    assert!(alloc.deferred_pages_enabled());
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    assert!(matches!(
        cpu.alloc_pages_nolock(Order::ZERO),
        Err(RequestError::DeferredPages)
    ));
    drop(cpu);
    alloc.page_alloc_init_late(1);
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let pfn = cpu
        .alloc_pages_nolock(Order::ZERO)
        .unwrap()
        .expect("served");
    cpu.free_pages_nolock(pfn, Order::ZERO).unwrap();
}

/// A nolock free never drains the list past `high`
/// (`free_frozen_page_commit` returns first under `FPI_TRYLOCK`); the
/// next ordinary free does.
#[test]
fn a_nolock_free_lets_the_list_pass_high() {
    let alloc = allocator(Era::V6_18, ZoneLockKind::Unfair);
    let high_max = u64::from(alloc.zones()[0].high_max());
    let pages: Vec<Pfn> = (0..high_max + 10)
        .map(|_| {
            alloc
                .alloc_pages(Order::ZERO, GFP, NodeId::ZERO, None)
                .unwrap()
        })
        .collect();
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let (last, rest) = pages.split_last().unwrap();
    for &pfn in rest {
        cpu.free_pages_nolock(pfn, Order::ZERO).unwrap();
    }
    assert_eq!(cpu.count(ZID), high_max + 9, "no drain at high");
    cpu.free(*last).unwrap();
    assert!(cpu.count(ZID) < high_max + 10, "the ordinary free drains");
}

/// A nolock free that finds the zone lock held (with the pcp lock held,
/// or for an order the lists do not hold) waits on the zone's
/// `trylock_free_pages`, counted neither free nor allocated, and a second
/// free of it is a double free. A nolock free that gets the lock leaves
/// the waiting blocks; the next free that takes the lock outright frees
/// them first, on the per-CPU handle's `free_one_page` and on the zone
/// path alike. Nothing is lost.
#[test]
fn the_waiting_blocks_are_drained_by_the_next_locked_free() {
    let alloc = allocator(Era::V6_18, ZoneLockKind::Queued);
    let initial = snapshot(&alloc);
    let zone = &alloc.zones()[0];
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let big = Order::new(4);
    let mut reference = Reference::default();
    let mut take = |order: Order| {
        let pfn = alloc.alloc_pages(order, GFP, NodeId::ZERO, None).unwrap();
        reference.record_model(alloc.model(), pfn, order).unwrap();
        pfn
    };
    let (a, b, c, d, e) = (
        take(Order::ZERO),
        take(Order::ZERO),
        take(big),
        take(big),
        take(big),
    );
    let free_before = alloc.free_pages_total();
    with_zone_locked_elsewhere(&alloc, || {
        cpu.with_pcp_locked(ZID, |cpu| cpu.free_pages_nolock(a, Order::ZERO))
            .unwrap()
            .unwrap();
        cpu.free_pages_nolock(c, big).unwrap();
        assert_eq!(zone.nr_trylock_free_pages(), 1 + 16);
        assert!(matches!(cpu.free(a), Err(FreeError::DoubleFree { .. })));
        assert!(matches!(
            cpu.free_pages(c, big),
            Err(FreeError::DoubleFree { .. })
        ));
    });
    for pfn in [a, c] {
        reference.blocks.remove(&pfn.get());
    }
    assert_eq!(alloc.free_pages_total(), free_before, "not free yet");
    check_conservation(&alloc, cpu.total_count(), &reference).unwrap();

    cpu.with_pcp_locked(ZID, |cpu| cpu.free_pages_nolock(b, Order::ZERO))
        .unwrap()
        .unwrap();
    assert_eq!(
        zone.nr_trylock_free_pages(),
        17,
        "a trylock free leaves them"
    );
    assert_eq!(alloc.free_pages_total(), free_before + 1);
    reference.blocks.remove(&b.get());

    cpu.free_pages(d, big).unwrap();
    assert_eq!(zone.nr_trylock_free_pages(), 0, "drained by free_one_page");
    assert_eq!(alloc.free_pages_total(), free_before + 1 + 17 + 16);
    reference.blocks.remove(&d.get());
    check_conservation(&alloc, cpu.total_count(), &reference).unwrap();

    with_zone_locked_elsewhere(&alloc, || cpu.free_pages_nolock(e, big).unwrap());
    assert_eq!(zone.nr_trylock_free_pages(), 16);
    reference.blocks.remove(&e.get());
    let f = alloc
        .alloc_pages(Order::ZERO, GFP, NodeId::ZERO, None)
        .unwrap();
    alloc.free_pages(f, Order::ZERO).unwrap();
    assert_eq!(zone.nr_trylock_free_pages(), 0, "drained by the zone path");
    free_all_and_check(cpu, &mut reference, &initial).unwrap();
}

/// Threads allocating and freeing with both calls, against a thread that
/// keeps taking and dropping the zone lock: every block either comes back
/// or waits, and once the threads are done a locked free drains the rest
/// and the zone coalesces fully.
#[test]
fn nolock_calls_on_many_threads_lose_nothing() {
    let alloc = allocator(Era::V6_18, ZoneLockKind::Unfair);
    let initial = snapshot(&alloc);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 4));
    let rounds = if cfg!(miri) { 20 } else { 3_000 };
    let finished = AtomicUsize::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            while finished.load(Ordering::Relaxed) < threads {
                let guard = hold_zone_lock(&alloc, ZID).unwrap();
                std::hint::spin_loop();
                drop(guard);
                std::thread::yield_now();
            }
        });
        for t in 0..threads {
            let (alloc, finished) = (&alloc, &finished);
            s.spawn(move || {
                let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
                let mut held: Vec<(Pfn, Order)> = Vec::new();
                for i in 0..rounds {
                    let order = Order::new(((i + t) % 4) as u8);
                    if let Ok(Some(pfn)) = cpu.alloc_pages_nolock(order) {
                        held.push((pfn, order));
                    }
                    if i % 3 == 0
                        && let Some((pfn, order)) = held.pop()
                    {
                        cpu.free_pages_nolock(pfn, order).unwrap();
                    }
                }
                for (pfn, order) in held {
                    cpu.free_pages_nolock(pfn, order).unwrap();
                }
                finished.fetch_add(1, Ordering::Relaxed);
            });
        }
    });
    let pfn = alloc
        .alloc_pages(Order::ZERO, GFP, NodeId::ZERO, None)
        .unwrap();
    alloc.free_pages(pfn, Order::ZERO).unwrap();
    assert_eq!(alloc.zones()[0].nr_trylock_free_pages(), 0);
    let cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    free_all_and_check(cpu, &mut Reference::default(), &initial).unwrap();
}

/// At every `struct page` size: where a listed page keeps its links in a
/// `struct buddy` (16 and 8 bytes) a waiting block holds one, gives it
/// back when drained, and a second free of it is still refused.
#[test]
fn waiting_blocks_at_every_page_size() {
    buddy::for_each_buddy_layout!(waiting_blocks_at()).unwrap();
}

fn waiting_blocks_at<P: BuddyPage>() -> Result<(), String> {
    let layout = normal_64mib();
    let model = Sparse::<Extreme, P>::build(&layout).map_err(|e| e.to_string())?;
    let alloc = Allocator::<_, Kernel>::new(model, &layout, Options::for_era(Era::V6_18))
        .map_err(|e| e.to_string())?;
    let initial = snapshot(&alloc);
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let pfn = cpu
        .alloc_pages_nolock(Order::new(2))
        .unwrap()
        .ok_or("no block")?;
    cpu.free_pages_nolock(pfn, Order::new(2)).unwrap();
    let (a, c) = (
        alloc
            .alloc_pages(Order::ZERO, GFP, NodeId::ZERO, None)
            .unwrap(),
        alloc
            .alloc_pages(Order::new(4), GFP, NodeId::ZERO, None)
            .unwrap(),
    );
    with_zone_locked_elsewhere(&alloc, || {
        cpu.with_pcp_locked(ZID, |cpu| cpu.free_pages_nolock(a, Order::ZERO))
            .unwrap()
            .unwrap();
        cpu.free_pages_nolock(c, Order::new(4)).unwrap();
    });
    let zone = &alloc.zones()[0];
    if zone.nr_trylock_free_pages() != 17 {
        return Err(format!(
            "{} pages waiting, not 17",
            zone.nr_trylock_free_pages()
        ));
    }
    let reference = Reference::default();
    check_conservation(&alloc, cpu.total_count(), &reference)?;
    if !matches!(cpu.free(a), Err(FreeError::DoubleFree { .. })) {
        return Err("a second free of a waiting page was not refused".into());
    }
    let f = alloc
        .alloc_pages(Order::ZERO, GFP, NodeId::ZERO, None)
        .unwrap();
    alloc.free_pages(f, Order::ZERO).unwrap();
    if zone.nr_trylock_free_pages() != 0 {
        return Err("the locked free did not drain".into());
    }
    free_all_and_check(cpu, &mut Reference::default(), &initial)
}

/// `__GFP_ZERO` is forced (6.18): on real frames a nolock allocation
/// comes back cleared though the last holder wrote over it.
#[test]
fn a_nolock_allocation_is_zeroed() {
    let layout = normal_64mib();
    let options = Options {
        frames: true,
        ..Options::for_era(Era::V6_18)
    };
    let alloc = Allocator::<_, Kernel>::new(SparseExtreme::new(&layout).unwrap(), &layout, options)
        .unwrap();
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let order = Order::new(1);
    let bytes = (4096 << order.get()) as usize;
    let pfn = cpu.alloc_pages_nolock(order).unwrap().expect("served");
    let addr = alloc.page_address(pfn).unwrap();
    // SAFETY: the test holds the block; its frames are contiguous in the
    // mapping and 4 KiB each.
    unsafe { std::ptr::write_bytes(addr.as_ptr(), 0xa5, bytes) };
    cpu.free_pages_nolock(pfn, order).unwrap();
    let again = cpu.alloc_pages_nolock(order).unwrap().expect("served");
    assert_eq!(again, pfn, "the list gives back its hottest block");
    // SAFETY: as above, for the block allocated again.
    let frame = unsafe { std::slice::from_raw_parts(addr.as_ptr(), bytes) };
    assert!(frame.iter().all(|&b| b == 0), "__GFP_ZERO");
    cpu.free_pages_nolock(again, order).unwrap();
}
