//! Deferred struct page init: a deferred build, whatever its thread count
//! and the allocations made while it initialises, ends with the memmap and
//! the free blocks of a build without it; the allocator never reads a
//! poisoned `struct page` (its reads assert it); the models and the
//! vmemmap detectors answer in the window as the kernel's do.

use std::collections::BTreeSet;

use buddy::testing::GFP;
use buddy::{
    Allocator, BuddyModel, Era, Gfp, InitError, Kernel, KernelHoleCheck, Options, RequestError,
    Variant,
};
use proptest::prelude::*;
use sparsemem::testing::{SMALL_GEOMETRIES, arb_layout};
use sparsemem::{
    BuddyPage, Flat, Geometry, Layout, MemRange, MemoryModel, NodeId, Order, Pfn, RangeKind,
    SparseClassic, SparseExtreme,
};
use vmemmap::{VmemmapProbe, VmemmapTable};

use crate::common::two_zone_layout;

/// The allocator of the fixed-layout tests (no holes, 6.18's variant).
pub(crate) type Alloc<M> = Allocator<M, Kernel>;

/// What a `struct page` says about its state: flags, zone, node, section,
/// counts, mapping, and the order of a free head (a stale `private` on
/// other pages is no state).
type PageState = (u64, u8, u16, u64, i32, i32, u64, Option<u64>);

fn memmap<M: BuddyModel<Page = sparsemem::Page>, V: Variant>(
    alloc: &Allocator<M, V>,
    layout: &Layout,
) -> Vec<Option<PageState>> {
    let (first, last) = span(layout);
    (first..last)
        .map(|p| {
            alloc.model().pfn_to_page(Pfn::new(p)).map(|page| {
                let head = page
                    .test(sparsemem::PageFlag::Buddy)
                    .then(|| page.private());
                (
                    page.flags(),
                    page.zone_id(),
                    page.node_id(),
                    page.section(),
                    page.refcount(),
                    page.mapcount(),
                    page.mapping(),
                    head,
                )
            })
        })
        .collect()
}

fn span(layout: &Layout) -> (u64, u64) {
    let g = layout.geometry();
    let r = layout.ranges();
    let first = g.phys_to_pfn(r[0].start).get();
    let last = r
        .iter()
        .map(|r| g.phys_to_pfn(r.end).get())
        .max()
        .unwrap_or(first);
    (first, last)
}

fn free_blocks<M: BuddyModel, V: Variant>(alloc: &Allocator<M, V>) -> BTreeSet<(u8, u64, u8)> {
    alloc
        .zones()
        .iter()
        .flat_map(|z| {
            alloc
                .free_blocks(z.id)
                .into_iter()
                .map(move |(p, o)| (z.id.get(), p.get(), o.get()))
        })
        .collect()
}

/// Options for `era` with deferred struct page init.
pub(crate) fn deferred(era: Era) -> Options {
    Options {
        deferred_init: true,
        ..Options::for_era(era)
    }
}

/// One request of `order`, held in `held`; its page must not be poison.
fn alloc_one<M: BuddyModel, V: Variant>(
    cpu: &mut buddy::PerCpu<'_, M, V>,
    order: u8,
    held: &mut Vec<(Pfn, Order)>,
) -> Result<(), String> {
    let order = Order::new(order);
    match cpu.alloc_pages(order, GFP) {
        Ok(pfn) => {
            let page = cpu.allocator().model().pfn_to_page(pfn);
            if page.is_none_or(|p| p.is_poisoned()) {
                return Err(format!("handed out {pfn}, poisoned or without a memmap"));
            }
            held.push((pfn, order));
            Ok(())
        }
        Err(RequestError::NoMemory { .. }) => Ok(()),
        Err(e) => Err(format!("alloc: {e}")),
    }
}

/// Builds both allocators, allocates half of `orders` (growing the zone
/// on misses), runs the deferred init on `threads` threads while the
/// caller's thread allocates the rest (holding every block),
/// frees everything, completes the init, and compares. `Ok(false)` when
/// the layout builds no allocator or defers nothing.
fn run<M: BuddyModel<Page = sparsemem::Page> + Sync, V: Variant>(
    build: impl Fn() -> Option<M>,
    layout: &Layout,
    era: Era,
    threads: usize,
    orders: &[u8],
) -> Result<bool, String> {
    let (Some(plain_model), Some(model)) = (build(), build()) else {
        return Ok(false);
    };
    let name = model.name();
    let Ok(plain) = Allocator::<M, V>::new(plain_model, layout, Options::for_era(era)) else {
        return Ok(false);
    };
    let mut alloc =
        Allocator::<M, V>::new(model, layout, deferred(era)).map_err(|e| e.to_string())?;
    if alloc.deferred_pages_pending() == 0 {
        return Ok(false);
    }
    // The first half of the requests runs before the init threads (each
    // miss grows the zone), the rest while they run.
    let (early, during) = orders.split_at(orders.len() / 2);
    let held = std::thread::scope(|s| -> Result<Vec<(Pfn, Order)>, String> {
        let mut cpu = alloc
            .cpu_on(layout.first_node())
            .map_err(|e| e.to_string())?;
        let mut held = Vec::new();
        for &order in early {
            alloc_one(&mut cpu, order, &mut held).map_err(|e| format!("{name}: {e}"))?;
        }
        let init = s.spawn(|| alloc.deferred_init_memmap(threads));
        for &order in during {
            alloc_one(&mut cpu, order, &mut held).map_err(|e| format!("{name}: {e}"))?;
        }
        for &(pfn, order) in &held {
            cpu.free_pages(pfn, order)
                .map_err(|e| format!("{name}: free {pfn}: {e}"))?;
        }
        drop(cpu);
        init.join().expect("the init thread");
        Ok(held)
    })?;
    alloc.page_alloc_init_late(threads);
    if alloc.deferred_pages_enabled() || alloc.deferred_pages_pending() != 0 {
        return Err(format!("{name}: init did not complete"));
    }
    if free_blocks(&alloc) != free_blocks(&plain) {
        return Err(format!(
            "{name}: free blocks differ after {} allocations on {threads} threads",
            held.len()
        ));
    }
    for (z, p) in alloc.zones().iter().zip(plain.zones()) {
        if (z.managed_pages(), z.nr_free(), z.contiguous())
            != (p.managed_pages(), p.nr_free(), p.contiguous())
        {
            return Err(format!("{name}: zone {} differs", z.id));
        }
    }
    let (a, b) = (memmap(&alloc, layout), memmap(&plain, layout));
    if let Some(i) = (0..a.len()).find(|&i| a[i] != b[i]) {
        let pfn = span(layout).0 + i as u64;
        return Err(format!(
            "{name}: pfn {pfn:#x}: {:?} against {:?}",
            a[i], b[i]
        ));
    }
    Ok(true)
}

/// [`run`] on every model, in 6.18 (no hole check: layouts with holes in
/// a `MAX_PAGE_ORDER` block build no allocator) or 5.13 with the hole
/// check; how many models deferred something.
fn run_models(layout: &Layout, late: bool, threads: usize, orders: &[u8]) -> Result<u32, String> {
    fn each<V: Variant>(layout: &Layout, era: Era, t: usize, o: &[u8]) -> Result<u32, String> {
        Ok(u32::from(run::<_, V>(
            || SparseExtreme::new(layout).ok(),
            layout,
            era,
            t,
            o,
        )?) + u32::from(run::<_, V>(
            || VmemmapTable::new(layout).ok(),
            layout,
            era,
            t,
            o,
        )?) + u32::from(run::<_, V>(|| Flat::new(layout).ok(), layout, era, t, o)?))
    }
    if late {
        each::<Kernel>(layout, Era::V6_18, threads, orders)
    } else {
        each::<KernelHoleCheck>(layout, Era::V5_13, threads, orders)
    }
}

#[test]
fn deferred_init_ends_as_a_plain_build() {
    let strategy = (
        arb_layout(&SMALL_GEOMETRIES),
        any::<bool>(),
        1usize..=3,
        prop::collection::vec(0u8..=10, 0..40),
    );
    let compared = std::sync::atomic::AtomicU32::new(0);
    let cases = sparsemem::testing::cases(32);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases,
        ..ProptestConfig::default()
    });
    runner
        .run(&strategy, |(layout, late, threads, orders)| {
            let n = run_models(&layout, late, threads, &orders).map_err(TestCaseError::fail)?;
            if n == 0 {
                // A layout that fits the first window whole defers
                // nothing: another is drawn, so every case counted
                // compares at least one deferred build.
                return Err(TestCaseError::reject("nothing deferred"));
            }
            compared.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
    let compared = compared.into_inner();
    assert!(
        compared >= cases,
        "only {compared} deferred builds were compared in {cases} cases"
    );
}

/// x86_64, one node: DMA32 below 4 GiB, then 2 GiB of Normal.
/// A 6.18 allocator over `layout` with deferred init, still in its window.
fn deferred_6_18(layout: &Layout) -> Alloc<SparseExtreme> {
    Alloc::new(
        SparseExtreme::new(layout).unwrap(),
        layout,
        deferred(Era::V6_18),
    )
    .unwrap()
}

#[test]
fn first_deferred_pfn_is_one_section_into_the_highest_zone() {
    let layout = two_zone_layout();
    let alloc = deferred_6_18(&layout);
    let per_section = layout.geometry().pages_per_section();
    let normal = (4u64 << 30) >> 12;
    assert_eq!(
        alloc.first_deferred_pfns(),
        vec![(layout.first_node(), Pfn::new(normal + per_section))]
    );
    // The Normal zone's memory past its first section waits.
    assert_eq!(
        alloc.deferred_pages_pending(),
        ((2u64 << 30) >> 12) - per_section
    );
    assert!(alloc.deferred_pages_enabled());
    assert!(
        alloc.zones().iter().all(|z| !z.contiguous()),
        "set only by page_alloc_init_late"
    );
}

/// Every model and detector answers in the window as the kernel's does:
/// valid, with a descriptor, online — and the descriptor is poison.
fn window_answers<M: BuddyModel>(model: M, layout: &Layout) {
    let name = model.name().to_string();
    let alloc = Alloc::new(model, layout, deferred(Era::V6_18)).unwrap();
    let (_, first) = alloc.first_deferred_pfns()[0];
    for pfn in [first, first + 1, first + 4095] {
        let m = alloc.model();
        assert!(m.pfn_valid(pfn), "{name}: pfn_valid in the window");
        assert!(
            m.pfn_to_page(pfn).unwrap().is_poisoned(),
            "{name}: pfn_to_page reads poison"
        );
        assert!(
            m.pfn_to_online_page(pfn).unwrap().is_poisoned(),
            "{name}: pfn_to_online_page reads poison"
        );
    }
    let before = first - 1;
    assert!(
        !alloc.model().pfn_to_page(before).unwrap().is_poisoned(),
        "{name}"
    );
    // Freeing a pfn of the window is refused without trusting its fields.
    let mut cpu = alloc.cpu_on(layout.first_node()).unwrap();
    assert!(cpu.free(first).is_err(), "{name}");
}

#[test]
fn models_and_detectors_answer_in_the_window() {
    let layout = two_zone_layout();
    window_answers(SparseExtreme::new(&layout).unwrap(), &layout);
    window_answers(SparseClassic::new(&layout).unwrap(), &layout);
    window_answers(VmemmapTable::new(&layout).unwrap(), &layout);
    // The probe loads byte 0 of the descriptor: 0xff has the present bit,
    // so it says valid, as the table does.
    window_answers(VmemmapProbe::new(&layout).unwrap(), &layout);
}

#[test]
fn a_miss_grows_the_zone_a_section_at_a_time() {
    let layout = two_zone_layout();
    let alloc = deferred_6_18(&layout);
    let per_section = layout.geometry().pages_per_section();
    let pending = alloc.deferred_pages_pending();
    let normal = alloc
        .zones()
        .iter()
        .find(|z| z.kind == buddy::ZoneType::Normal)
        .unwrap();
    let mut cpu = alloc.cpu_on(layout.first_node()).unwrap();
    // Normal-only requests: more than the boot section forces one grow.
    let gfp = Gfp::HIGHUSER_MOVABLE;
    let n = per_section + 10;
    let mut got = Vec::new();
    for _ in 0..n {
        let pfn = cpu.alloc(gfp).unwrap();
        if normal.spans(pfn) {
            got.push(pfn);
        }
    }
    let grown = pending - alloc.deferred_pages_pending();
    assert!(
        grown > 0 && grown.is_multiple_of(per_section),
        "grew {grown}"
    );
    assert!(
        got.iter()
            .all(|&p| !alloc.model().pfn_to_page(p).unwrap().is_poisoned())
    );
    // A max-order request grows by a whole section too.
    let before = alloc.deferred_pages_pending();
    let max = layout.geometry().max_order();
    for _ in 0..(2 * per_section / max.nr_pages()) {
        cpu.alloc_pages(max, gfp).unwrap();
    }
    assert!(alloc.deferred_pages_pending() < before);
}

/// Normal's pages of the allocation results, checked not poisoned.
pub(crate) fn normal_pages<M: BuddyModel>(alloc: &Alloc<M>, got: &[Pfn]) -> usize {
    let normal = alloc
        .zones()
        .iter()
        .find(|z| z.kind == buddy::ZoneType::Normal)
        .unwrap();
    assert!(
        got.iter()
            .all(|&p| !alloc.model().pfn_to_page(p).unwrap().is_poisoned())
    );
    got.iter().filter(|&&p| normal.spans(p)).count()
}

#[test]
fn the_zone_path_grows_on_a_miss_at_any_order() {
    let layout = two_zone_layout();
    let alloc = deferred_6_18(&layout);
    let per_section = layout.geometry().pages_per_section();
    let node = layout.first_node();
    let gfp = Gfp::HIGHUSER_MOVABLE;
    for order in [Order::ZERO, Order::new(3), layout.geometry().max_order()] {
        // Past what Normal holds now: the zone path must grow it.
        let before = alloc.deferred_pages_pending();
        let room = alloc.free_pages_total() / order.nr_pages() + 1;
        let mut got = Vec::new();
        while alloc.deferred_pages_pending() == before && (got.len() as u64) < room {
            got.push(alloc.alloc_pages(order, gfp, node, None).unwrap());
        }
        let grown = before - alloc.deferred_pages_pending();
        assert!(
            grown > 0 && grown.is_multiple_of(per_section),
            "order {order:?}: grew {grown}"
        );
        // The request that grew the zone was served from the new section.
        let last = *got.last().unwrap();
        assert!(normal_pages(&alloc, &got) > 0 && last.get() >= (4u64 << 30) >> 12);
    }
}

/// Bulk calls of 64 pages on a deferred build until Normal has grown or
/// `limit` calls were made: the pages, and whether it grew.
fn bulk_until_grown<M: BuddyModel>(alloc: &Alloc<M>, limit: usize) -> (Vec<Pfn>, bool) {
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let before = alloc.deferred_pages_pending();
    let mut got = Vec::new();
    for _ in 0..limit {
        let mut slots = [None; 64];
        let n = cpu
            .alloc_bulk_array(Gfp::HIGHUSER_MOVABLE, &mut slots)
            .unwrap();
        assert!(n >= 1, "a bulk call in the window came back empty");
        got.extend(slots.iter().flatten());
        if alloc.deferred_pages_pending() < before {
            return (got, true);
        }
    }
    (got, false)
}

#[test]
fn bulk_grows_the_zone_in_its_loop_in_6_18_and_moves_on_in_5_13() {
    let layout = two_zone_layout();
    let section = layout.geometry().pages_per_section() as usize;
    let build =
        |era| Alloc::new(SparseExtreme::new(&layout).unwrap(), &layout, deferred(era)).unwrap();
    // 6.18: Normal grows before any page comes from DMA32.
    let alloc = build(Era::V6_18);
    let (got, grew) = bulk_until_grown(&alloc, 2 * section / 64);
    assert!(grew);
    assert_eq!(normal_pages(&alloc, &got), got.len());
    // 5.13: Normal short of its watermark is passed over for DMA32, and
    // nothing grows while DMA32 has memory.
    let alloc = build(Era::V5_13);
    let (got, grew) = bulk_until_grown(&alloc, 2 * section / 64);
    assert!(!grew);
    assert!(normal_pages(&alloc, &got) < got.len());
}

#[test]
fn init_late_turns_the_key_off_and_sets_contiguous() {
    let layout = two_zone_layout();
    let mut alloc = Alloc::new(
        SparseExtreme::new(&layout).unwrap(),
        &layout,
        deferred(Era::V5_13),
    )
    .unwrap();
    alloc.page_alloc_init_late(2);
    assert!(!alloc.deferred_pages_enabled());
    assert_eq!(alloc.deferred_pages_pending(), 0);
    let plain = Alloc::new(
        SparseExtreme::new(&layout).unwrap(),
        &layout,
        Options::for_era(Era::V5_13),
    )
    .unwrap();
    for (z, p) in alloc.zones().iter().zip(plain.zones()) {
        assert_eq!(z.managed_pages(), p.managed_pages());
        assert_eq!(z.contiguous(), p.contiguous());
        assert_eq!(z.watermarks(), p.watermarks());
    }
}

#[test]
fn deferred_init_before_4_2_is_refused() {
    let layout = two_zone_layout();
    for era in [Era::V2_6_9, Era::V2_6_23] {
        let err = Alloc::new(SparseExtreme::new(&layout).unwrap(), &layout, deferred(era))
            .err()
            .expect("refused");
        assert!(matches!(err, InitError::EraMismatch(_)), "{era}");
        assert!(err.to_string().contains("4.2"), "{err}");
    }
}

/// Two nodes sharing a `MAX_PAGE_ORDER` block (node 1 ends and node 0
/// starts inside one ia64 section): node 1's only deferred pages lie in
/// that block, where node 0's boot frees look at buddies, so they are
/// initialised at boot and nothing is left to defer (a shrunk case of the
/// property test, which read poison before).
#[test]
fn a_block_shared_by_two_nodes_is_initialised_at_boot() {
    let layout = Layout::new(
        Geometry::IA64,
        vec![
            MemRange::new(0x3fffe00cd8000, 0x3fffe06b13000, RangeKind::Ram, 1),
            MemRange::new(0x3fffe0746f000, 0x3fffe46395c00, RangeKind::Reserved, 2),
            MemRange::new(0x3fffee2004400, 0x3ffff4014ac00, RangeKind::Ram, 1),
            MemRange::new(0x3ffff46ec2400, 0x3ffff905cec00, RangeKind::Ram, 0),
        ],
        "two nodes in one section",
    )
    .unwrap();
    let model = SparseExtreme::new(&layout).unwrap();
    let alloc = Allocator::<_, KernelHoleCheck>::new(model, &layout, deferred(Era::V5_13)).unwrap();
    assert_eq!(alloc.deferred_pages_pending(), 0);
    assert!(!alloc.deferred_pages_enabled());
    let orders = [2, 0, 4, 7, 3, 3, 1, 9, 9, 4, 3, 9, 5, 5, 2, 7, 4, 6];
    let again = run::<_, KernelHoleCheck>(
        || SparseExtreme::new(&layout).ok(),
        &layout,
        Era::V5_13,
        2,
        &orders,
    );
    assert_eq!(again, Ok(false));
}

#[test]
fn hotplug_waits_for_page_alloc_init_late() {
    // 1 GiB of RAM and 1 GiB of hot-pluggable memory from 4 GiB.
    let layout = Layout::new(
        Geometry::X86_64,
        vec![
            MemRange::new(0, 1 << 30, RangeKind::Ram, 0),
            MemRange::new(4 << 30, 5 << 30, RangeKind::Hotplug, 0),
        ],
        "hotplug in the window",
    )
    .unwrap();
    let mut alloc = Alloc::new(
        VmemmapTable::new(&layout).unwrap(),
        &layout,
        deferred(Era::V6_18),
    )
    .unwrap();
    let start = Pfn::new((4u64 << 30) >> 12);
    let block = layout.geometry().memory_block_pages();
    let pending = alloc.deferred_pages_pending();
    assert!(pending > 0);
    let refused = |r: Result<(), buddy::MemHotplugError>| {
        assert!(
            matches!(r, Err(buddy::MemHotplugError::DeferredInitPending)),
            "{r:?}"
        );
    };
    refused(
        alloc
            .online_pages(start, block, buddy::OnlineType::Online)
            .map(|_| ()),
    );
    refused(alloc.hot_remove(start, block));
    refused(alloc.hot_add(Pfn::new((6u64 << 30) >> 12), block, NodeId::ZERO));
    // Nothing changed: the block is still offline, the window still open.
    assert_eq!(alloc.offline_blocks().len(), 8);
    assert_eq!(alloc.deferred_pages_pending(), pending);
    alloc.page_alloc_init_late(2);
    alloc
        .online_pages(start, block, buddy::OnlineType::Online)
        .unwrap();
    alloc.offline_pages(start, block).unwrap();
    alloc.hot_remove(start, block).unwrap();
}
