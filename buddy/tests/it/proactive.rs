//! Proactive compaction: kcompactd's check of a node's fragmentation
//! score against `vm.compaction_proactiveness`' marks, its pass that stops
//! each zone at the low mark, and its longer sleep after a pass that did
//! not lower the score. Nothing is lost, and every owner follows its page.
//!
//! The zone is 16 MiB (4,096 pages, eight pageblocks) from 16 MiB: one
//! ZONE_DMA32 whose min watermark is 128 pages.

use buddy::{
    Allocator, CompactControl, CompactState, CompactVmstat, Era, Gfp,
    HPAGE_FRAG_CHECK_INTERVAL_MSEC, Kcompactd, Options, Owners, ProactiveError, compact_zone,
    fragmentation_score_node, fragmentation_score_wmark, proactive_compact_node,
};
use sparsemem::{NodeId, Order, Pfn, SparseExtreme};

use crate::common::{SmallAlloc as Alloc, check, fill_zone, free_owned, zone_16m as layout};

fn allocator(era: Era) -> Alloc {
    let layout = layout();
    Allocator::new(
        SparseExtreme::new(&layout).unwrap(),
        &layout,
        Options::for_era(era),
    )
    .unwrap()
}

/// The zone filled (every `kernel_every`-th page a GFP_KERNEL one, the
/// rest owned and movable), then every owned page at an even pfn freed:
/// the free memory is all single pages, the node's score 99 (100 weighted
/// by the zone's pages over the node's plus one).
fn fragmented(alloc: &Alloc, owners: &mut Owners, kernel_every: usize) -> Vec<(Pfn, Order)> {
    let kernel = fill_zone(alloc, owners, kernel_every);
    free_owned(alloc, owners, |p| p.get() % 2 == 0);
    let mut kept = Vec::new();
    for pfn in kernel {
        if pfn.get() % 2 == 0 {
            alloc.free_pages(pfn, Order::ZERO).unwrap();
        } else {
            kept.push((pfn, Order::ZERO));
        }
    }
    kept
}

#[test]
fn a_pass_stops_each_zone_at_the_low_mark() {
    let alloc = allocator(Era::V6_18);
    let mut owners = Owners::new();
    let kernel = fragmented(&alloc, &mut owners, 0);
    assert_eq!(fragmentation_score_node(&alloc, NodeId::ZERO), 99);
    let mut states = CompactState::for_zones(&alloc);
    let mut vmstat = CompactVmstat::default();
    let pass = proactive_compact_node(
        &alloc,
        NodeId::ZERO,
        &mut owners,
        &mut states,
        20,
        &mut vmstat,
    )
    .unwrap()
    .expect("99 is above the high mark, 90");
    assert_eq!(pass.score_before, 99);
    // Stopped at the low mark, 80: not before it, and not much past it
    // (one more free huge frame is a quarter of this zone's free memory).
    assert!(
        pass.score_after <= fragmentation_score_wmark(20, true),
        "{pass:?}"
    );
    assert!(pass.score_after > 50, "{pass:?}");
    assert!(vmstat.pgmigrate_success > 0);
    assert_eq!(
        vmstat.kcompactd_migrate_scanned,
        vmstat.compact_migrate_scanned
    );
    assert_eq!(vmstat.kcompactd_free_scanned, vmstat.compact_free_scanned);
    check(&alloc, &layout(), &owners, &kernel);
    // A whole-zone compaction from there goes further: the pass had
    // stopped early, not run out of pages to move.
    let zid = alloc.zones()[0].id;
    compact_zone(
        &alloc,
        zid,
        &mut states[0],
        &mut owners,
        CompactControl::PROC,
    )
    .unwrap();
    assert!(fragmentation_score_node(&alloc, NodeId::ZERO) < pass.score_after);
    check(&alloc, &layout(), &owners, &kernel);
}

#[test]
fn below_the_high_mark_nothing_runs() {
    let alloc = allocator(Era::V6_18);
    let mut owners = Owners::new();
    // A fresh zone: its free memory is all in blocks of order 9 or more.
    assert_eq!(fragmentation_score_node(&alloc, NodeId::ZERO), 0);
    let mut states = CompactState::for_zones(&alloc);
    let mut vmstat = CompactVmstat::default();
    let mut kcompactd = Kcompactd::new(NodeId::ZERO, 20).unwrap();
    let passes = kcompactd
        .advance(
            10 * HPAGE_FRAG_CHECK_INTERVAL_MSEC,
            &alloc,
            &mut owners,
            &mut states,
            &mut vmstat,
        )
        .unwrap();
    assert!(passes.is_empty());
    assert_eq!(vmstat, CompactVmstat::default());
    assert_eq!(
        kcompactd.wakes_at_ms(),
        Some(11 * HPAGE_FRAG_CHECK_INTERVAL_MSEC)
    );
    // Proactiveness 100 puts the high mark at 15; still nothing to do.
    let passes = proactive_compact_node(
        &alloc,
        NodeId::ZERO,
        &mut owners,
        &mut states,
        100,
        &mut vmstat,
    );
    assert_eq!(passes, Ok(None));
}

#[test]
fn a_pass_without_progress_sleeps_sixty_four_intervals() {
    let alloc = allocator(Era::V6_18);
    let mut owners = Owners::new();
    // Every page the kernel's: nothing can move.
    let kernel = fragmented(&alloc, &mut owners, 1);
    assert!(owners.is_empty());
    let mut states = CompactState::for_zones(&alloc);
    let mut vmstat = CompactVmstat::default();
    let mut kcompactd = Kcompactd::new(NodeId::ZERO, 20).unwrap();
    let interval = HPAGE_FRAG_CHECK_INTERVAL_MSEC;
    let first = kcompactd
        .advance(interval, &alloc, &mut owners, &mut states, &mut vmstat)
        .unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].score_after, first[0].score_before);
    assert_eq!(kcompactd.wakes_at_ms(), Some(interval + (interval << 6)));
    // Nothing until that sleep ends; then the next check.
    let none = kcompactd
        .advance(interval << 6, &alloc, &mut owners, &mut states, &mut vmstat)
        .unwrap();
    assert!(none.is_empty());
    let again = kcompactd
        .advance(
            interval + (interval << 6),
            &alloc,
            &mut owners,
            &mut states,
            &mut vmstat,
        )
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(vmstat.pgmigrate_success, 0);
    check(&alloc, &layout(), &owners, &kernel);
}

#[test]
fn a_pass_with_progress_sleeps_one_interval() {
    let alloc = allocator(Era::V6_18);
    let mut owners = Owners::new();
    let kernel = fragmented(&alloc, &mut owners, 0);
    let mut states = CompactState::for_zones(&alloc);
    let mut vmstat = CompactVmstat::default();
    let mut kcompactd = Kcompactd::new(NodeId::ZERO, 20).unwrap();
    let interval = HPAGE_FRAG_CHECK_INTERVAL_MSEC;
    let passes = kcompactd
        .advance(interval, &alloc, &mut owners, &mut states, &mut vmstat)
        .unwrap();
    assert_eq!(passes.len(), 1);
    assert!(passes[0].score_after < passes[0].score_before);
    assert_eq!(kcompactd.wakes_at_ms(), Some(2 * interval));
    check(&alloc, &layout(), &owners, &kernel);
}

#[test]
fn proactive_compaction_is_refused_before_5_9_and_above_100() {
    let mut owners = Owners::new();
    let mut vmstat = CompactVmstat::default();
    let old = allocator(Era::V2_6_23);
    let mut states = CompactState::for_zones(&old);
    let refused = proactive_compact_node(
        &old,
        NodeId::ZERO,
        &mut owners,
        &mut states,
        20,
        &mut vmstat,
    );
    assert_eq!(refused, Err(ProactiveError::NotInEra(Era::V2_6_23)));
    assert!(refused.unwrap_err().to_string().contains("5.9"));
    let new = allocator(Era::V6_18);
    let mut states = CompactState::for_zones(&new);
    let refused = proactive_compact_node(
        &new,
        NodeId::ZERO,
        &mut owners,
        &mut states,
        101,
        &mut vmstat,
    );
    assert_eq!(refused, Err(ProactiveError::Proactiveness(101)));
    assert_eq!(vmstat, CompactVmstat::default());
    // A GFP_KERNEL page still comes from the untouched allocator.
    assert!(crate::common::alloc0(&new, Gfp::KERNEL).is_some());
}
