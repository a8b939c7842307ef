//! The compaction scanners on generated allocator states, against a plain
//! reference walk over a classification the test builds from its own
//! records (live allocations) and the free lists — not from page flags.

use std::collections::BTreeMap;

use buddy::{
    Allocator, BuddyModel, COMPACT_CLUSTER_MAX, CompactControl, CompactState, Era, Gfp, Kernel,
    Options, ZoneId, compact_zone_scan,
};
use proptest::prelude::*;
use sparsemem::testing::{SMALL_GEOMETRIES, arb_layout};
use sparsemem::{Layout, MemoryModel, Migratetype, NodeId, Order, PageLayout, Pfn, SparseExtreme};
use vmemmap::VmemmapTable;

/// What the reference knows of one pfn.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Cls {
    /// A free block's head, with its order.
    Free(u64),
    /// A compound allocation's head, with its order.
    Compound(u64),
    /// A non-compound allocation's head in a movable pageblock.
    Movable,
    /// Anything else.
    Other,
}

struct Reference {
    start: u64,
    end: u64,
    block: u64,
    cls: Vec<Cls>,
    block_ok: BTreeMap<u64, bool>,
    target_ok: BTreeMap<u64, bool>,
}

#[derive(Default, Debug, PartialEq, Eq)]
struct Counts {
    migrate_scanned: u64,
    free_scanned: u64,
    isolated: u64,
}

impl Reference {
    fn new<M: BuddyModel>(
        alloc: &Allocator<M, Kernel>,
        zid: ZoneId,
        live: &BTreeMap<Pfn, (Order, bool)>,
    ) -> Reference {
        let zone = alloc.zone(zid).unwrap();
        let model = alloc.model();
        let (start, end) = (zone.start_pfn().get(), zone.end_pfn().get());
        let block = model.geometry().pageblock_nr_pages();
        let pb_order = u64::from(model.geometry().pageblock_order().get());
        let mut cls = vec![Cls::Other; (end - start) as usize];
        let free: BTreeMap<Pfn, Order> = alloc.free_blocks(zid).into_iter().collect();
        for (&pfn, &order) in &free {
            cls[(pfn.get() - start) as usize] = Cls::Free(u64::from(order.get()));
        }
        for (&pfn, &(order, compound)) in live {
            if pfn.get() < start || pfn.get() >= end {
                continue;
            }
            let i = (pfn.get() - start) as usize;
            if compound && order.get() > 0 {
                cls[i] = Cls::Compound(u64::from(order.get()));
            } else if model.get_pfnblock_migratetype(pfn) == Migratetype::Movable {
                cls[i] = Cls::Movable;
            }
        }
        let ours = |p: &M::Page| p.zone_id() == zid.get() && p.node_id() == zone.node.get();
        let mut block_ok = BTreeMap::new();
        let mut target_ok = BTreeMap::new();
        let mut b = start;
        while b < end {
            let e = ((b | (block - 1)) + 1).min(end);
            let ok = model.pfn_to_online_page(Pfn::new(b)).is_some_and(ours)
                && model.pfn_to_page(Pfn::new(e - 1)).is_some_and(ours);
            block_ok.insert(b, ok);
            let big_free = free
                .get(&Pfn::new(b))
                .is_some_and(|o| u64::from(o.get()) >= pb_order);
            let movable = model.get_pfnblock_migratetype(Pfn::new(b)) == Migratetype::Movable;
            target_ok.insert(b, !big_free && movable);
            b = e;
        }
        Reference {
            start,
            end,
            block,
            cls,
            block_ok,
            target_ok,
        }
    }

    fn at(&self, p: u64) -> Cls {
        self.cls[(p - self.start) as usize]
    }

    /// The two scanners, pfn by pfn, until they meet.
    fn run(&self) -> Counts {
        let b = self.block;
        let block_start = |p: u64| (p & !(b - 1)).max(self.start);
        let block_end = |s: u64| ((s | (b - 1)) + 1).min(self.end);
        let mut n = Counts::default();
        let mut mig = self.start;
        let mut fre = (self.end - 1) & !(b - 1);
        while fre / b > mig / b {
            let mut iso = 0;
            loop {
                let s = block_start(mig);
                let e = block_end(s);
                if e > fre {
                    mig = s;
                    break;
                }
                if self.block_ok[&s] {
                    let mut p = mig.max(s);
                    while p < e {
                        match self.at(p) {
                            Cls::Free(k) | Cls::Compound(k) if k > 0 => {
                                n.migrate_scanned += 1 << k;
                                p += 1 << k;
                            }
                            Cls::Movable => {
                                n.migrate_scanned += 1;
                                iso += 1;
                                p += 1;
                                if iso == COMPACT_CLUSTER_MAX {
                                    break;
                                }
                            }
                            _ => {
                                n.migrate_scanned += 1;
                                p += 1;
                            }
                        }
                    }
                    mig = p.min(e);
                    if iso > 0 {
                        break;
                    }
                } else {
                    mig = e;
                }
            }
            n.isolated += iso;
            if iso > 0 {
                fre = self.free_scan(&mut n, mig, fre, iso);
            }
        }
        n
    }

    /// The free scanner from `fre` down to above `mig`, for `wanted`
    /// pages; returns where it stopped.
    fn free_scan(&self, n: &mut Counts, mig: u64, fre: u64, wanted: u64) -> u64 {
        let b = self.block;
        let low = (((mig & !(b - 1)).max(self.start) | (b - 1)) + 1).min(self.end);
        let mut isolate_start = fre;
        let mut s = fre & !(b - 1);
        let mut have = 0;
        while s >= low {
            let e = ((s | (b - 1)) + 1).min(self.end);
            if self.block_ok[&s] && self.target_ok[&s] {
                let mut p = isolate_start.max(s);
                let mut done = false;
                while p < e {
                    match self.at(p) {
                        Cls::Compound(k) if k > 0 && p + (1 << k) <= e => {
                            n.free_scanned += 1 << k;
                            p += 1 << k;
                        }
                        Cls::Free(k) => {
                            n.free_scanned += 1 << k;
                            have += 1 << k;
                            n.isolated += 1 << k;
                            p += 1 << k;
                            if have >= wanted {
                                done = true;
                                break;
                            }
                        }
                        _ => {
                            n.free_scanned += 1;
                            p += 1;
                        }
                    }
                }
                isolate_start = p.min(e);
                if done {
                    if isolate_start >= e {
                        isolate_start = s.saturating_sub(b);
                    }
                    break;
                }
            }
            if s < b {
                break;
            }
            s -= b;
            isolate_start = s;
        }
        isolate_start.min(fre)
    }
}

/// One request of a generated allocation history.
#[derive(Clone, Copy, Debug)]
struct Request {
    order: u8,
    movable: bool,
    compound: bool,
    keep: bool,
}

fn arb_requests() -> impl Strategy<Value = Vec<Request>> {
    let order = prop_oneof![4 => 0u8..3, 1 => 3u8..10];
    let r = (
        order,
        any::<bool>(),
        prop::bool::weighted(0.2),
        any::<bool>(),
    )
        .prop_map(|(order, movable, compound, keep)| Request {
            order,
            movable,
            compound,
            keep,
        });
    prop::collection::vec(r, 0..400)
}

/// Takes every pageblock-sized movable block there is and gives back
/// those `punch` picks (cycling), so free and busy pageblocks alternate
/// over the whole zone rather than only at the end allocations start from.
fn punch<M: BuddyModel>(
    alloc: &Allocator<M, Kernel>,
    punch: &[bool],
    live: &mut BTreeMap<Pfn, (Order, bool)>,
) {
    let order = alloc.model().geometry().pageblock_order();
    let mut taken = Vec::new();
    while let Ok(pfn) = alloc.alloc_pages(order, Gfp::HIGHUSER_MOVABLE, NodeId::ZERO, None) {
        taken.push(pfn);
    }
    for (i, pfn) in taken.into_iter().enumerate() {
        if punch.is_empty() || punch[i % punch.len()] {
            alloc.free_pages(pfn, order).unwrap();
        } else {
            live.insert(pfn, (order, false));
        }
    }
}

/// Punches the zone (see [`punch`]), allocates `requests` in order, frees
/// those not kept, and returns the live allocations.
fn fragment<M: BuddyModel>(
    alloc: &Allocator<M, Kernel>,
    holes: &[bool],
    requests: &[Request],
) -> BTreeMap<Pfn, (Order, bool)> {
    let mut live = BTreeMap::new();
    punch(alloc, holes, &mut live);
    let mut drop = Vec::new();
    for r in requests {
        let mut gfp = if r.movable {
            Gfp::HIGHUSER_MOVABLE
        } else {
            Gfp::KERNEL
        };
        if r.compound {
            gfp = gfp | Gfp::COMP;
        }
        let order = Order::new(r.order.min(alloc.model().geometry().max_order().get()));
        if let Ok(pfn) = alloc.alloc_pages(order, gfp, NodeId::ZERO, None) {
            if r.keep {
                live.insert(pfn, (order, r.compound));
            } else {
                drop.push((pfn, order));
            }
        }
    }
    for (pfn, order) in drop {
        alloc.free_pages(pfn, order).unwrap();
    }
    live
}

fn check<M: BuddyModel>(
    model: M,
    layout: &Layout,
    holes: &[bool],
    requests: &[Request],
) -> Result<(), String> {
    let Ok(alloc) = Allocator::<_, Kernel>::new(model, layout, Options::for_era(Era::V6_18)) else {
        return Ok(());
    };
    let live = fragment(&alloc, holes, requests);
    let block = alloc.model().geometry().pageblock_nr_pages();
    for zone in alloc.zones() {
        let want = Reference::new(&alloc, zone.id, &live).run();
        let mut state = CompactState::new(zone, block);
        for use_contiguous in [true, false] {
            let cc = CompactControl {
                use_contiguous,
                ..CompactControl::PROC
            };
            let got =
                compact_zone_scan(&alloc, zone.id, &mut state, cc).map_err(|e| e.to_string())?;
            let got_counts = Counts {
                migrate_scanned: got.migrate_scanned,
                free_scanned: got.free_scanned,
                isolated: got.compact_isolated(),
            };
            if got_counts != want || !got.complete {
                return Err(format!(
                    "{}: zone {} ({}..{}) contiguous {use_contiguous}: {got:?}, reference {want:?}",
                    alloc.model().name(),
                    zone.id,
                    zone.start_pfn(),
                    zone.end_pfn()
                ));
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: sparsemem::testing::cases(32), ..ProptestConfig::default() })]

    #[test]
    fn scanners_match_the_reference_walk(
        layout in arb_layout(&SMALL_GEOMETRIES),
        holes in prop::collection::vec(any::<bool>(), 0..8),
        requests in arb_requests(),
    ) {
        if let Ok(m) = SparseExtreme::new(&layout) {
            check(m, &layout, &holes, &requests).map_err(TestCaseError::fail)?;
        }
        check(VmemmapTable::new(&layout).unwrap(), &layout, &holes, &requests)
            .map_err(TestCaseError::fail)?;
    }
}

/// The skip hints and the cached restart pfns: a second run that honours
/// the hints passes over the blocks the first run found nothing in; an
/// aborted run keeps where it stopped and the next resumes there.
#[test]
fn hints_and_cached_pfns() {
    let alloc = buddy::testing::ram_allocator(0, 256 << 20, Era::V6_18);
    let requests: Vec<Request> = (0..3000)
        .map(|i| Request {
            order: 0,
            movable: i % 7 != 0,
            compound: false,
            keep: i % 3 == 0,
        })
        .collect();
    let _live = fragment(&alloc, &[], &requests);
    let zone = alloc.zones().last().unwrap();
    let block = alloc.model().geometry().pageblock_nr_pages();
    let mut state = CompactState::new(zone, block);
    let first = compact_zone_scan(&alloc, zone.id, &mut state, CompactControl::PROC).unwrap();
    assert!(first.complete && first.migrate_isolated > 0, "{first:?}");
    let honour = CompactControl {
        ignore_skip_hint: false,
        ..CompactControl::PROC
    };
    let second = compact_zone_scan(&alloc, zone.id, &mut state, honour).unwrap();
    assert!(second.skipped_by_hint > 0, "{second:?}");
    assert!(second.migrate_scanned < first.migrate_scanned);
    assert_eq!(
        second.migrate_isolated, first.migrate_isolated,
        "hinted blocks had nothing"
    );
    state.reset_isolation_suitable();
    let aborted = CompactControl {
        whole_zone: false,
        budget_pageblocks: Some(4),
        ..CompactControl::PROC
    };
    let part = compact_zone_scan(&alloc, zone.id, &mut state, aborted).unwrap();
    assert!(!part.complete);
    assert!(state.cached_migrate_pfn() > zone.start_pfn());
    let resume = CompactControl {
        whole_zone: false,
        ..CompactControl::PROC
    };
    let rest = compact_zone_scan(&alloc, zone.id, &mut state, resume).unwrap();
    assert!(rest.complete && rest.migrate_scanned < first.migrate_scanned);
    assert_eq!(
        state.cached_migrate_pfn(),
        zone.start_pfn(),
        "reset when the scanners met"
    );
    let old = buddy::testing::ram_allocator(0, 64 << 20, Era::V2_6_23);
    let z = old.zones()[0].id;
    let mut s = CompactState::new(&old.zones()[0], block);
    assert!(compact_zone_scan(&old, z, &mut s, CompactControl::PROC).is_err());
}

/// An async run for a movable request (a THP fault's direct compaction)
/// checks every pageblock as a sync run does, then passes over each one
/// that is not `MIGRATE_MOVABLE` without scanning it
/// (`suitable_migration_source`). With only kernel allocations nothing is
/// isolated, so the migrate scanner crosses the whole zone in both runs.
#[test]
fn an_async_run_for_a_movable_request_passes_over_unmovable_pageblocks() {
    let alloc = buddy::testing::ram_allocator(0, 64 << 20, Era::V6_18);
    let mut taken = Vec::new();
    while let Ok(p) = alloc.alloc_pages(Order::ZERO, Gfp::KERNEL, NodeId::ZERO, None) {
        taken.push(p);
    }
    for (i, p) in taken.iter().enumerate() {
        if i % 3 != 0 {
            alloc.free_pages(*p, Order::ZERO).unwrap();
        }
    }
    let zone = alloc
        .zones()
        .iter()
        .max_by_key(|z| z.managed_pages())
        .unwrap();
    let block = alloc.model().geometry().pageblock_nr_pages();
    let is_movable =
        |pfn: u64| alloc.model().get_pfnblock_migratetype(Pfn::new(pfn)) == Migratetype::Movable;
    // The migrate scanner's pageblocks: every one below the free
    // scanner's start, the zone's last pageblock.
    let last = (zone.end_pfn().get() - 1) & !(block - 1);
    let blocks: Vec<u64> = (zone.start_pfn().get()..last)
        .step_by(block as usize)
        .collect();
    let unmovable = blocks.iter().filter(|&&pfn| !is_movable(pfn)).count() as u64;
    assert!(unmovable > 0, "the kernel allocations took pageblocks");
    let sync = compact_zone_scan(
        &alloc,
        zone.id,
        &mut CompactState::new(zone, block),
        CompactControl::PROC,
    )
    .unwrap();
    let cc = CompactControl {
        async_movable: true,
        ..CompactControl::PROC
    };
    let run = compact_zone_scan(&alloc, zone.id, &mut CompactState::new(zone, block), cc).unwrap();
    assert!(run.complete && sync.complete);
    assert_eq!((sync.migrate_isolated, run.migrate_isolated), (0, 0));
    assert_eq!(sync.skipped_unsuitable, 0, "a sync run takes every source");
    assert_eq!(run.skipped_unsuitable, unmovable, "{run:?}");
    assert_eq!(
        run.pageblock_checks, sync.pageblock_checks,
        "each block is checked first"
    );
    let movable_blocks = blocks.len() as u64 - unmovable;
    assert!(run.migrate_scanned <= movable_blocks * block, "{run:?}");
    assert!(
        run.migrate_scanned < sync.migrate_scanned,
        "{run:?} {sync:?}"
    );
}
