//! The differential tests of the sparsemem crate (the same generic checker)
//! run over every vmemmap detector.

use crate::common::ALL_GEOMETRIES;
use crate::common::build;
use proptest::prelude::*;
use sparsemem::reference::{Reference, Semantics};
use sparsemem::testing::{
    SMALL_GEOMETRIES, apply_step, arb_hotplug_steps, arb_layout, check_model, sampled_pfns,
};
use sparsemem::{Layout, PageLayout, Pfn};
use vmemmap::{Detector, VmemmapProbe, VmemmapTable};

/// Detector `D` at every `struct page` size, stopping at the first error.
fn check<D: Detector>(layout: &Layout) -> Result<(), String> {
    at_every_page_size!(check_at, D, layout)
}

fn check_at<D: Detector, P: PageLayout>(layout: &Layout) -> Result<(), String> {
    let model = build::<D, P>(layout)?;
    check_model(
        &model,
        &Reference::new(layout, Semantics::Vmemmap),
        &sampled_pfns(layout, 4096),
    )?;
    sparsemem::testing::check_pageblocks(&model, layout)
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
    let pfns = sampled_pfns(layout, 1024);
    for &step in steps {
        apply_step(&mut model, &mut reference, layout, step)?;
        check_model(&model, &reference, &pfns)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: sparsemem::testing::cases(24), ..ProptestConfig::default() })]

    #[test]
    fn every_detector_matches_the_reference(layout in arb_layout(&ALL_GEOMETRIES)) {
        for_each_detector!(check, &layout).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn hotplug_sequences_match_the_reference(
        layout in arb_layout(&SMALL_GEOMETRIES),
        steps in arb_hotplug_steps(),
    ) {
        for_each_detector!(check_hotplug, &layout, &steps).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn presets_match_the_reference() -> Result<(), String> {
    for name in ["x86-pci-hole", "zone-device", "ia64-holes", "numa-fake-64"] {
        let layout = Layout::preset(name).unwrap();
        let mut pfns = sparsemem::testing::interesting_pfns(&layout);
        let span = layout.memory_span().1.get() + 4096;
        pfns.extend((0..100_000u64).map(|i| Pfn::new(i.wrapping_mul(0x9e37_79b9) % span)));
        let reference = Reference::new(&layout, Semantics::Vmemmap);
        check_model(&VmemmapTable::new(&layout).unwrap(), &reference, &pfns)?;
        check_model(&VmemmapProbe::new(&layout).unwrap(), &reference, &pfns)?;
    }
    Ok(())
}
