//! The bulk allocator on a zone still in deferred struct page init, step
//! by step as `mm/page_alloc.c: alloc_pages_bulk_noprof` and
//! `mm/mm_init.c: deferred_grow_zone` (6.18) take it: the watermark check
//! that sends a zone to the grow has `nr_pages` on top, an array's filled
//! slots counted; the grow adds one section and the loop checks the same
//! zone again, which then fills the request (6.12 on); before 6.12 the
//! loop passes the zone over; and a call that wants one page takes the
//! ordinary one-page allocation, not the loop.
//!
//! Each test starts from Normal, the deferred zone of the two-zone layout,
//! brought down by order-4 blocks from its buddy lists (no pcp list holds
//! that order, so the zone's free count moves 16 pages at a time and no
//! miss grows it) until its low watermark fails with [`SLOTS`] pages on
//! top but holds with 2.

use buddy::{Era, Gfp, Kernel, Zone, ZoneType};
use sparsemem::{NodeId, Order, Pfn, SparseExtreme};

use crate::common::two_zone_layout;
use crate::deferred::{Alloc, deferred, normal_pages};

/// The bulk array's length.
const SLOTS: usize = 64;

/// A deferred build of `era` with Normal short of a `SLOTS`-page bulk
/// call's watermark but above a 2-page one's; the pfns of the blocks it
/// took to get there, to fill array slots with.
fn normal_short_of_a_bulk(era: Era) -> (Alloc<SparseExtreme>, Vec<Pfn>) {
    let layout = two_zone_layout();
    let alloc = Alloc::new(SparseExtreme::new(&layout).unwrap(), &layout, deferred(era)).unwrap();
    let pending = alloc.deferred_pages_pending();
    let normal = normal(&alloc);
    let low = normal.watermarks().low;
    let above =
        |extra: usize| normal.zone_watermark_ok(Order::ZERO, low + extra as u64, ZoneType::Normal);
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let mut held = Vec::new();
    while above(SLOTS) {
        let pfn = cpu
            .alloc_pages(Order::new(4), Gfp::HIGHUSER_MOVABLE)
            .unwrap();
        assert!(normal.spans(pfn), "{era}: an order-4 block from {pfn}");
        held.push(pfn);
    }
    drop(cpu);
    assert!(above(2), "{era}: Normal fell below the 2-page mark");
    assert_eq!(
        alloc.deferred_pages_pending(),
        pending,
        "{era}: a block grew Normal"
    );
    (alloc, held)
}

/// Normal, the zone deferred init left short.
fn normal(alloc: &Alloc<SparseExtreme>) -> &Zone<Kernel> {
    alloc
        .zones()
        .iter()
        .find(|z| z.kind == ZoneType::Normal)
        .unwrap()
}

/// An array of `SLOTS` whose slots at `empty` are empty and the rest
/// filled with `held`'s pfns.
fn array(held: &[Pfn], empty: &[usize]) -> Vec<Option<Pfn>> {
    (0..SLOTS)
        .map(|i| (!empty.contains(&i)).then(|| held[i]))
        .collect()
}

/// `alloc_bulk_array` on `slots`: the pages it added, and how many
/// deferred pages it initialised.
fn bulk(alloc: &Alloc<SparseExtreme>, slots: &mut [Option<Pfn>]) -> (Vec<Pfn>, u64) {
    let before: Vec<_> = slots.to_vec();
    let pending = alloc.deferred_pages_pending();
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let populated = cpu.alloc_bulk_array(Gfp::HIGHUSER_MOVABLE, slots).unwrap();
    assert_eq!(populated, SLOTS, "every empty slot filled");
    let added = slots
        .iter()
        .zip(&before)
        .filter(|(_, b)| b.is_none())
        .map(|(s, _)| s.unwrap())
        .collect();
    (added, pending - alloc.deferred_pages_pending())
}

#[test]
fn bulk_short_of_its_mark_grows_the_zone_a_section_and_fills_there_from_6_12() {
    let per_section = two_zone_layout().geometry().pages_per_section();
    for era in [Era::V6_12, Era::V6_18] {
        let (alloc, held) = normal_short_of_a_bulk(era);
        // Two pages wanted, but the mark counts the 62 filled slots too:
        // Normal fails it, grows by one section (order 0 rounds up to
        // one) and passes on the retry, so both pages come from Normal.
        let mut slots = array(&held, &[SLOTS - 2, SLOTS - 1]);
        let (added, grown) = bulk(&alloc, &mut slots);
        assert_eq!(grown, per_section, "{era}");
        assert_eq!(normal_pages(&alloc, &added), 2, "{era}: {added:?}");
    }
}

#[test]
fn bulk_short_of_its_mark_passes_the_zone_over_before_6_12() {
    for era in [Era::V5_13, Era::V6_8] {
        let (alloc, held) = normal_short_of_a_bulk(era);
        let mut slots = array(&held, &[SLOTS - 2, SLOTS - 1]);
        let (added, grown) = bulk(&alloc, &mut slots);
        assert_eq!(grown, 0, "{era}");
        assert_eq!(normal_pages(&alloc, &added), 0, "{era}: DMA32's pages");
    }
}

#[test]
fn one_page_bulk_takes_the_one_page_allocation() {
    for era in [Era::V5_13, Era::V6_18] {
        // The last slot empty: `nr_pages - nr_populated` is 1, so the call
        // is `__alloc_pages`', whose low watermark Normal still passes.
        let (alloc, held) = normal_short_of_a_bulk(era);
        let mut slots = array(&held, &[SLOTS - 1]);
        let (added, grown) = bulk(&alloc, &mut slots);
        assert_eq!((normal_pages(&alloc, &added), grown), (1, 0), "{era}");
        // A list of one likewise.
        let (alloc, _) = normal_short_of_a_bulk(era);
        let mut out = Vec::new();
        let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
        let pending = alloc.deferred_pages_pending();
        assert_eq!(
            cpu.alloc_bulk_vec(1, Gfp::HIGHUSER_MOVABLE, &mut out)
                .unwrap(),
            1
        );
        drop(cpu);
        assert_eq!(normal_pages(&alloc, &out), 1, "{era}");
        assert_eq!(alloc.deferred_pages_pending(), pending, "{era}");
        // The first slot empty: the kernel counts only leading filled
        // slots as populated, so this is a bulk call with the full mark.
        let (alloc, held) = normal_short_of_a_bulk(era);
        let mut slots = array(&held, &[0]);
        let (added, grown) = bulk(&alloc, &mut slots);
        let grows = era.bulk_grows_deferred_zone();
        assert_eq!(grown > 0, grows, "{era}");
        assert_eq!(normal_pages(&alloc, &added), usize::from(grows), "{era}");
    }
}
