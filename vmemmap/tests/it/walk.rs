//! `for_each_valid_pfn` on every vmemmap detector, device memory and
//! hotplug included: the stock table walks subsections, the probe and
//! userfaultfd detectors keep the kernel's per-pfn fallback, and every walk
//! yields exactly the valid pfns, in order.

use crate::common::ALL_GEOMETRIES;
use crate::common::build;
use proptest::prelude::*;
use sparsemem::reference::{Reference, Semantics};
use sparsemem::testing::{
    SMALL_GEOMETRIES, WalkReach, apply_step, arb_hotplug_steps, arb_layout, cases, check_walks,
    reach_at,
};
use sparsemem::{Layout, MemoryModel, PageLayout, Pfn, PfnWalker, for_each_valid_pfn};
use vmemmap::{Detector, VmemmapProbe, VmemmapTable};

/// The table walks everything; a detector whose hole pfns fault walks
/// the edges only (each hole pfn is a caught fault).
fn reach<D: Detector>() -> WalkReach {
    if D::WALKER == PfnWalker::Subsections {
        WalkReach::Whole
    } else {
        WalkReach::Edges
    }
}

/// Detector `D`'s walks at every `struct page` size.
fn check<D: Detector>(layout: &Layout) -> Result<(), String> {
    at_every_page_size!(check_at, D, layout)
}

fn check_at<D: Detector, P: PageLayout>(layout: &Layout) -> Result<(), String> {
    let model = build::<D, P>(layout)?;
    let reference = Reference::new(layout, Semantics::Vmemmap);
    check_walks(&model, &reference, layout, reach_at::<P>(reach::<D>()))
}

fn check_hotplug<D: Detector>(
    layout: &Layout,
    steps: &[sparsemem::testing::HotplugStep],
) -> Result<(), String> {
    at_every_page_size!(check_hotplug_at, D, layout, steps)
}

fn check_hotplug_at<D: Detector, P: PageLayout>(
    layout: &Layout,
    steps: &[sparsemem::testing::HotplugStep],
) -> Result<(), String> {
    let mut model = build::<D, P>(layout)?;
    let mut reference = Reference::new(layout, Semantics::Vmemmap);
    for &step in steps {
        apply_step(&mut model, &mut reference, layout, step)?;
        check_walks(&model, &reference, layout, reach_at::<P>(reach::<D>()))?;
    }
    // Below 64 bytes each step walked the edges; the end state is walked whole.
    check_walks(&model, &reference, layout, reach::<D>())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(24), ..ProptestConfig::default() })]

    #[test]
    fn every_detector_walks_exactly_the_valid_pfns(layout in arb_layout(&ALL_GEOMETRIES)) {
        for_each_detector!(check, &layout).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn walks_follow_hotplug_and_device_memory(
        layout in arb_layout(&SMALL_GEOMETRIES),
        steps in arb_hotplug_steps(),
    ) {
        for_each_detector!(check_hotplug, &layout, &steps).map_err(TestCaseError::fail)?;
    }
}

/// On the ZONE_DEVICE preset the table walk skips the sub-section holes
/// between device ranges, and the probe model names the per-pfn fallback.
#[test]
fn zone_device_preset_walks_subsections() {
    let layout = Layout::preset("zone-device").unwrap();
    let table = VmemmapTable::new(&layout).unwrap();
    let probe = VmemmapProbe::new(&layout).unwrap();
    assert_eq!(table.pfn_walker(), PfnWalker::Subsections);
    assert_eq!(probe.pfn_walker(), PfnWalker::PerPfn);
    // 8 GiB .. 8 GiB + 256 MiB: device 0-6 MiB, 10-64 MiB, 160-224 MiB.
    let (s, e) = (Pfn::new(0x20_0000), Pfn::new(0x21_0000));
    let walked: Vec<Pfn> = for_each_valid_pfn(&table, s, e).unwrap().collect();
    assert_eq!(walked.len() as u64, (6 + 54 + 64) * 256);
    assert_eq!(walked[6 * 256], Pfn::new(0x20_0000 + 10 * 256));
    assert!(walked.iter().all(|&p| probe.pfn_valid(p)));
}
