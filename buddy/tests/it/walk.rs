//! The pageblock walkers on the allocator's real state: `zone->contiguous`
//! against a brute-force check after boot and after every generated
//! hotplug step, and `__pageblock_pfn_to_page` per pageblock.

use std::collections::BTreeSet;

use buddy::{__pageblock_pfn_to_page, Allocator, BuddyModel, Kernel, OnlineType, Options, ZoneId};
use proptest::prelude::*;
use sparsemem::testing::{SMALL_GEOMETRIES, WINDOW_SECTIONS, arb_layout, window_start};
use sparsemem::{Flat, Layout, PageLayout, Pfn, SparseClassic, SparseExtreme};
use vmemmap::{VmemmapProbe, VmemmapTable};

/// The definition, pfn by pfn: every pfn that begins a pageblock of the
/// span (or the span) is an online page of the zone, and every pfn that
/// ends one is valid with the same zone.
fn brute_contiguous<M: BuddyModel>(alloc: &Allocator<M, Kernel>, zid: ZoneId) -> bool {
    let zone = alloc.zone(zid).unwrap();
    let model = alloc.model();
    let block = model.geometry().pageblock_nr_pages();
    let (s, e) = (zone.start_pfn().get(), zone.end_pfn().get());
    let ours = |p: &M::Page| p.zone_id() == zid.get() && p.node_id() == zone.node.get();
    (s..e).all(|p| {
        let begins = p == s || p % block == 0;
        let ends = p + 1 == e || (p + 1) % block == 0;
        (!begins || model.pfn_to_online_page(Pfn::new(p)).is_some_and(ours))
            && (!ends || model.pfn_to_page(Pfn::new(p)).is_some_and(ours))
    })
}

/// Each zone's flag against the brute force (zones in `after_online` were
/// last recomputed while their new range was not yet online, so read
/// false), and `__pageblock_pfn_to_page` of each pageblock.
fn check_zones<M: BuddyModel>(
    alloc: &Allocator<M, Kernel>,
    after_online: &BTreeSet<ZoneId>,
) -> Result<(), String> {
    let block = alloc.model().geometry().pageblock_nr_pages();
    for zone in alloc.zones() {
        let want = !after_online.contains(&zone.id) && brute_contiguous(alloc, zone.id);
        if zone.contiguous() != want {
            return Err(format!(
                "{}: zone {} ({}..{}) contiguous = {}, brute force {want}",
                alloc.model().name(),
                zone.id,
                zone.start_pfn(),
                zone.end_pfn(),
                zone.contiguous()
            ));
        }
        let mut start = zone.start_pfn();
        while start < zone.end_pfn() {
            let end = Pfn::new((start.get() | (block - 1)) + 1).min(zone.end_pfn());
            let got = __pageblock_pfn_to_page(alloc.model(), zone, start, end).is_some();
            let online = alloc.model().pfn_to_online_page(start);
            let last = alloc.model().pfn_to_page(end - 1);
            let want = online.zip(last).is_some_and(|(a, b)| {
                a.zone_id() == zone.id.get()
                    && b.zone_id() == zone.id.get()
                    && a.node_id() == zone.node.get()
                    && b.node_id() == zone.node.get()
            });
            if got != want {
                return Err(format!("__pageblock_pfn_to_page({start}, {end}) = {got}"));
            }
            start = end;
        }
    }
    Ok(())
}

/// A hotplug request on whole memory blocks of the window.
#[derive(Clone, Copy, Debug)]
enum Step {
    Online(usize, OnlineType),
    Offline(usize),
    Add(usize),
    Remove(usize),
    /// `Add` then `Online`: most onlines need a block added first.
    AddOnline(usize, OnlineType),
}

fn arb_steps() -> impl Strategy<Value = Vec<Step>> {
    // Half the requests go to the two blocks past the window, absent at
    // boot, so that add → online → offline sequences are common.
    let w = WINDOW_SECTIONS as usize;
    let block = prop_oneof![0..w + 2, w..w + 2];
    let t = prop::sample::select(OnlineType::ALL.to_vec());
    let step = prop_oneof![
        (block.clone(), t.clone()).prop_map(|(b, t)| Step::Online(b, t)),
        (block.clone(), t).prop_map(|(b, t)| Step::AddOnline(b, t)),
        block.clone().prop_map(Step::Offline),
        block.clone().prop_map(Step::Add),
        block.prop_map(Step::Remove),
    ];
    prop::collection::vec(step, 1..10)
}

fn run<M: BuddyModel>(model: M, layout: &Layout, steps: &[Step]) -> Result<(), String> {
    let Ok(mut alloc) = Allocator::<_, Kernel>::new(model, layout, Options::default()) else {
        return Ok(());
    };
    let mut after_online = BTreeSet::new();
    check_zones(&alloc, &after_online)?;
    let g = *layout.geometry();
    let per = g.memory_block_pages();
    let base = window_start(layout).get() / per;
    let at = |b: usize| Pfn::new((base + b as u64) * per);
    for &step in steps {
        match step {
            Step::Online(b, t) => {
                if let Ok(zid) = alloc.online_pages(at(b), per, t) {
                    after_online.insert(zid);
                }
            }
            Step::Offline(b) => {
                let zid = alloc
                    .model()
                    .pfn_to_page(at(b))
                    .map(|p| ZoneId::new(p.zone_id()));
                if alloc.offline_pages(at(b), per).is_ok() {
                    after_online.remove(&zid.unwrap());
                }
            }
            Step::Add(b) => {
                let _ = alloc.hot_add(at(b), per, sparsemem::NodeId::ZERO);
            }
            Step::Remove(b) => {
                let _ = alloc.hot_remove(at(b), per);
            }
            Step::AddOnline(b, t) => {
                let _ = alloc.hot_add(at(b), per, sparsemem::NodeId::ZERO);
                if let Ok(zid) = alloc.online_pages(at(b), per, t) {
                    after_online.insert(zid);
                }
            }
        }
        check_zones(&alloc, &after_online).map_err(|e| format!("after {step:?}: {e}"))?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: sparsemem::testing::cases(48), ..ProptestConfig::default() })]

    #[test]
    fn zone_contiguous_matches_brute_force_through_hotplug(
        layout in arb_layout(&SMALL_GEOMETRIES),
        steps in arb_steps(),
    ) {
        if let Ok(m) = Flat::new(&layout) {
            run(m, &layout, &steps).map_err(TestCaseError::fail)?;
        }
        if let Ok(m) = SparseClassic::new(&layout) {
            run(m, &layout, &steps).map_err(TestCaseError::fail)?;
        }
        if let Ok(m) = SparseExtreme::new(&layout) {
            run(m, &layout, &steps).map_err(TestCaseError::fail)?;
        }
        run(VmemmapTable::new(&layout).unwrap(), &layout, &steps).map_err(TestCaseError::fail)?;
        run(VmemmapProbe::new(&layout).unwrap(), &layout, &steps).map_err(TestCaseError::fail)?;
    }
}

/// The presets: a zone over one bank is contiguous; ia64's zones span
/// holes of more than a section and are not.
#[test]
fn presets_contiguous_where_no_hole() {
    let layout = Layout::preset("x86-pci-hole").unwrap();
    let alloc = Allocator::<_, Kernel>::new(
        SparseExtreme::new(&layout).unwrap(),
        &layout,
        Options::default(),
    )
    .unwrap();
    assert!(alloc.zones().iter().all(|z| z.contiguous()));
    let layout = Layout::preset("ia64-holes").unwrap();
    let alloc = Allocator::<_, Kernel>::new(
        SparseExtreme::new(&layout).unwrap(),
        &layout,
        Options::default(),
    )
    .unwrap();
    assert!(alloc.zones().iter().any(|z| !z.contiguous()));
    check_zones(&alloc, &BTreeSet::new()).unwrap();
}
