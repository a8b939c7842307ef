//! `for_each_valid_pfn` on every table model: the kernel's walk, the
//! per-pfn loop and the bulk variant yield exactly the valid pfns, in
//! order, on generated layouts of every geometry and after every
//! generated hotplug step.

use proptest::prelude::*;
use sparsemem::reference::{Reference, Semantics};
use sparsemem::table::{Classic, Extreme};
use sparsemem::testing::{
    SMALL_GEOMETRIES, WalkReach, apply_step, arb_hotplug_steps, arb_layout, cases, check_walks,
    expect_build, reach_at,
};
use sparsemem::walk::{PerPfnWalk, walk};
use sparsemem::{
    BuildError, Flat, Geometry, Layout, MemoryModel, PageLayout, Pfn, PfnWalker, Sparse,
    SparseClassic, SparseExtreme, for_each_page_layout, for_each_valid_pfn,
};

fn check_one<M: MemoryModel>(
    built: Result<M, BuildError>,
    layout: &Layout,
    semantics: Semantics,
    reach: WalkReach,
) -> Result<(), String> {
    match expect_build(built, layout, semantics)? {
        Some(model) => check_walks(&model, &Reference::new(layout, semantics), layout, reach),
        None => Ok(()),
    }
}

/// Every table model's walks at `struct page` layout `P`.
fn check_all_at<P: PageLayout>(layout: &Layout) -> Result<(), String> {
    let reach = reach_at::<P>(WalkReach::Whole);
    check_one(Flat::<P>::build(layout), layout, Semantics::Flat, reach)?;
    check_one(
        Sparse::<Classic, P>::build(layout),
        layout,
        Semantics::Section,
        reach,
    )?;
    check_one(
        Sparse::<Extreme, P>::build(layout),
        layout,
        Semantics::Section,
        reach,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(32), ..ProptestConfig::default() })]

    #[test]
    fn every_walk_yields_exactly_the_valid_pfns(layout in arb_layout(&SMALL_GEOMETRIES)) {
        for_each_page_layout!(check_all_at(&layout)).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn extreme_walks_52bit_layouts(layout in arb_layout(&[Geometry::X86_64_LA57])) {
        check_one(SparseExtreme::new(&layout), &layout, Semantics::Section, WalkReach::Whole)
            .map_err(TestCaseError::fail)?;
    }

    #[test]
    fn walks_follow_hotplug(
        layout in arb_layout(&SMALL_GEOMETRIES),
        steps in arb_hotplug_steps(),
    ) {
        let Some(mut classic) = expect_build(SparseClassic::new(&layout), &layout, Semantics::Section)
            .map_err(TestCaseError::fail)? else { return Ok(()) };
        let mut extreme = SparseExtreme::new(&layout).unwrap();
        let mut r1 = Reference::new(&layout, Semantics::Section);
        let mut r2 = r1.clone();
        for step in steps {
            apply_step(&mut classic, &mut r1, &layout, step).map_err(TestCaseError::fail)?;
            apply_step(&mut extreme, &mut r2, &layout, step).map_err(TestCaseError::fail)?;
            check_walks(&classic, &r1, &layout, WalkReach::Whole).map_err(TestCaseError::fail)?;
            check_walks(&extreme, &r2, &layout, WalkReach::Whole).map_err(TestCaseError::fail)?;
        }
    }
}

/// The presets: each model names the walker the kernel builds for it, and
/// on `sparse-52bit` the section walk reaches all four banks of the 4 PiB
/// span without asking `pfn_valid` of the holes.
#[test]
fn presets_walk_every_bank() {
    let layout = Layout::preset("sparse-52bit").unwrap();
    let model = SparseExtreme::new(&layout).unwrap();
    assert_eq!(model.pfn_walker(), PfnWalker::Sections);
    let whole = sparsemem::walk::PfnRange::whole(layout.geometry());
    let n = for_each_valid_pfn(&model, whole.start(), whole.end())
        .unwrap()
        .count() as u64;
    assert_eq!(n, 4 * (1 << 18), "four 1 GiB banks of 4 KiB pages");
    let layout = Layout::preset("x86-pci-hole").unwrap();
    let flat = Flat::new(&layout).unwrap();
    assert_eq!(flat.pfn_walker(), PfnWalker::FlatClamp);
    let classic = SparseClassic::new(&layout).unwrap();
    let (s, e) = (Pfn::new(0xb_0000), Pfn::new(0x11_0000));
    let kernel: Vec<Pfn> = for_each_valid_pfn(&classic, s, e).unwrap().collect();
    let per_pfn: Vec<Pfn> = walk::<_, PerPfnWalk>(&classic, s, e).unwrap().collect();
    assert_eq!(kernel, per_pfn);
    assert_eq!(
        kernel.len() as u64,
        (e - s) - (1 << 18),
        "the 1 GiB PCI hole is absent"
    );
}
