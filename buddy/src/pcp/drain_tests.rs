//! `free_pcppages_bulk`'s order of lists, era by era, checked on lists
//! filled by hand: which lists a drain empties, and that each drain starts
//! afresh (the kernel keeps no position between calls).

use super::*;
use crate::{Era, Kernel, Options};
use sparsemem::{Geometry, Layout, MemRange, MemoryModel, Page, RangeKind, SparseExtreme};

fn allocator(era: Era) -> Allocator<SparseExtreme, Kernel> {
    let layout = Layout::new(
        Geometry::X86_64,
        vec![MemRange::new(
            4 << 30,
            (4 << 30) + (64 << 20),
            RangeKind::Ram,
            0,
        )],
        "64 MiB",
    )
    .unwrap();
    let model = SparseExtreme::new(&layout).unwrap();
    Allocator::new(model, &layout, Options::for_era(era)).unwrap()
}

const ZID: ZoneId = ZoneId::new(0);

/// Puts `n` blocks of list `k`'s order on list `k`, taken from the zone.
fn fill(pcp: &mut Pcp<Page>, alloc: &Allocator<SparseExtreme, Kernel>, k: usize, n: u32) {
    let order = pindex_to_order(k, alloc.model.geometry().pageblock_order());
    assert_eq!(
        pcp.rmqueue_bulk(
            alloc,
            ZID,
            order,
            n,
            (Migratetype::Movable, false),
            k,
            false
        ),
        n
    );
}

/// Blocks on lists `0..n`.
fn lens(pcp: &Pcp<Page>, n: usize) -> Vec<u64> {
    pcp.lists[..n].iter().map(PcpList::len).collect()
}

/// 6.x: from the freed page's list, each list emptied before the next,
/// wrapping past the last; the next drain starts at its own `pindex`.
#[test]
fn a_6x_drain_empties_each_list_in_turn_from_pindex() {
    let alloc = allocator(Era::V6_18);
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let pcp = &mut cpu.pcp[0];
    // Lists 0 (order 0), 4 (order 1), 7 (order 2) and 10 (order 3).
    fill(pcp, &alloc, 0, 3);
    fill(pcp, &alloc, 4, 2);
    fill(pcp, &alloc, 7, 2);
    fill(pcp, &alloc, 10, 1);
    assert_eq!(pcp.count, 3 + 2 * 2 + 2 * 4 + 8);
    // Five pages from list 4: its two order-1 blocks, then one order-2
    // block of the next non-empty list; list 0 is not touched.
    pcp.free_pcppages_bulk(&alloc, ZID, 5, 4);
    let after = lens(pcp, NR_PCP_LISTS);
    assert_eq!((after[0], after[4], after[7], after[10]), (3, 0, 1, 1));
    // Nine pages from list 10: its block (8 pages), then past the last
    // list round to list 0 for one page. A drain that went on from where
    // the last one stopped (list 7) would take list 7's block first.
    pcp.free_pcppages_bulk(&alloc, ZID, 9, 10);
    let after = lens(pcp, NR_PCP_LISTS);
    assert_eq!((after[0], after[4], after[7], after[10]), (2, 0, 1, 0));
    assert_eq!(pcp.count, 2 + 4);
    // A count beyond what is listed frees what is listed.
    pcp.free_pcppages_bulk(&alloc, ZID, 1000, 13);
    assert_eq!(pcp.count, 0);
    assert!(pcp.lists.iter().all(PcpList::is_empty));
}

/// 5.13: every drain starts at list 1 and goes round-robin, each list
/// visited adding one to `batch_free`, so after an empty list the next
/// gives two pages; `pindex` plays no part. (The kernel's short cut when
/// only one list has pages — `batch_free = count` — takes the same pages
/// the round-robin would, so no list count shows it.)
#[test]
fn a_513_drain_goes_round_robin_with_batch_free_from_list_1() {
    let alloc = allocator(Era::V5_13);
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let pcp = &mut cpu.pcp[0];
    fill(pcp, &alloc, 0, 5);
    fill(pcp, &alloc, 1, 5);
    // List 1 (batch_free 1), list 2 empty then list 0 (batch_free 2: two
    // pages), list 1 again: four pages, ending on list 1.
    pcp.free_pcppages_bulk(&alloc, ZID, 4, 2);
    assert_eq!(lens(pcp, 3), [3, 3, 0]);
    // The next drain starts at list 1 again, not at list 2 after it.
    fill(pcp, &alloc, 2, 4);
    pcp.free_pcppages_bulk(&alloc, ZID, 1, 0);
    assert_eq!(lens(pcp, 3), [3, 2, 4]);
    // All lists full: one page each, lists 1, 2, 0 and 1 again.
    pcp.free_pcppages_bulk(&alloc, ZID, 4, 1);
    assert_eq!(lens(pcp, 3), [2, 0, 3]);
    // List 1 is empty, so list 2 gives two (batch_free 2), then list 0.
    pcp.free_pcppages_bulk(&alloc, ZID, 3, 1);
    assert_eq!(lens(pcp, 3), [1, 0, 1]);
    pcp.free_pcppages_bulk(&alloc, ZID, 1, 1);
    assert_eq!(lens(pcp, 3), [1, 0, 0]);
    fill(pcp, &alloc, 2, 3);
    pcp.free_pcppages_bulk(&alloc, ZID, 3, 1);
    assert_eq!(lens(pcp, 3), [0, 0, 1], "two from list 2, then list 0");
}

/// `drain_pages_zone` (6.x) frees in chunks of `batch << 5` pages, each
/// a `free_pcppages_bulk` of its own, until nothing is listed.
#[test]
fn a_6x_full_drain_goes_in_chunks_of_batch_times_32() {
    let alloc = allocator(Era::V6_18);
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let batch = u64::from(cpu.pcp[0].batch);
    let chunk = batch << PCP_BATCH_SCALE_MAX;
    let blocks = (2 * chunk + 1) as u32;
    fill(&mut cpu.pcp[0], &alloc, 1, blocks);
    let drains = alloc.stats_total().pcp_drains;
    cpu.drain();
    assert_eq!(cpu.pcp[0].count, 0);
    assert_eq!(
        alloc.stats_total().pcp_drains - drains,
        3,
        "two full chunks and one page"
    );
}

/// 5.14 to 5.17: the round-robin of 5.13 over all fifteen lists, the THP
/// ones included: a drain starts at list 1, so an order-1 list (4) is
/// reached before list 0, and a list emptied mid-drain sends the rest on
/// round past lists 5 to 14 to list 0.
#[test]
fn a_514_drain_goes_round_robin_over_every_list() {
    let alloc = allocator(Era::V5_14);
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let pcp = &mut cpu.pcp[0];
    fill(pcp, &alloc, 0, 5);
    fill(pcp, &alloc, 4, 3);
    // Lists 1 to 4 visited (batch_free 4): two order-1 blocks, 4 pages.
    pcp.free_pcppages_bulk(&alloc, ZID, 4, 0);
    assert_eq!(
        (lens(pcp, NR_PCP_LISTS)[0], lens(pcp, NR_PCP_LISTS)[4]),
        (5, 1)
    );
    // List 4's last block, then round through the empty lists to list 0.
    pcp.free_pcppages_bulk(&alloc, ZID, 4, 0);
    assert_eq!(
        (lens(pcp, NR_PCP_LISTS)[0], lens(pcp, NR_PCP_LISTS)[4]),
        (3, 0)
    );
}

/// The THP lists by era: one per migratetype (5.14), one for all (6.0),
/// movable and the rest (6.10); the low-order lists are the same in each.
#[test]
fn the_thp_lists_follow_the_era() {
    let thp = Order::new(9);
    for (era, lists) in [
        (Era::V5_15, [12, 13, 14]),
        (Era::V6_1, [12, 12, 12]),
        (Era::V6_8, [12, 12, 12]),
        (Era::V6_12, [12, 13, 12]),
        (Era::V6_18, [12, 13, 12]),
    ] {
        let alloc = allocator(era);
        let cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
        let mts = [
            Migratetype::Unmovable,
            Migratetype::Movable,
            Migratetype::Reclaimable,
        ];
        assert_eq!(mts.map(|mt| cpu.order_to_pindex(mt, thp)), lists, "{era}");
        assert_eq!(cpu.order_to_pindex(Migratetype::Movable, Order::new(3)), 10);
    }
}

/// `drain_pages_zone` before 6.10 frees everything in one
/// `free_pcppages_bulk`.
#[test]
fn a_full_drain_before_6_10_is_one_bulk_free() {
    let alloc = allocator(Era::V6_8);
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let chunk = u64::from(cpu.pcp[0].batch) << PCP_BATCH_SCALE_MAX;
    fill(&mut cpu.pcp[0], &alloc, 1, (2 * chunk + 1) as u32);
    let drains = alloc.stats_total().pcp_drains;
    cpu.drain();
    assert_eq!(cpu.pcp[0].count, 0);
    assert_eq!(alloc.stats_total().pcp_drains - drains, 1);
}

/// `free_high` waits for `free_count >= batch` from 6.7 (6.8 and 6.12
/// here), for `batch + high_min / 2` from 6.16.
#[test]
fn the_free_high_threshold_follows_the_era() {
    for (era, half_high_min) in [(Era::V6_8, false), (Era::V6_12, false), (Era::V6_18, true)] {
        let alloc = allocator(era);
        let cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
        let pcp = &cpu.pcp[0];
        let batch = u64::from(pcp.batch);
        let want = batch + if half_high_min { pcp.high_min / 2 } else { 0 };
        assert!(pcp.high_min > 0, "{era}");
        assert_eq!(pcp.free_high_count, want, "{era}");
    }
}
