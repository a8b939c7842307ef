//! Differential tests: every table model against the reference, on
//! generated layouts and hotplug sequences.

use proptest::prelude::*;
use sparsemem::reference::Reference;
use sparsemem::testing::{
    SMALL_GEOMETRIES, apply_step, arb_hotplug_steps, arb_layout, check_model, window_pfns,
};
use sparsemem::{
    Flat, Geometry, HotplugError, Layout, MemoryModel, Pfn, SparseClassic, SparseExtreme,
};

fn check_all(layout: &Layout) -> Result<(), String> {
    let reference = Reference::new(layout);
    let pfns = window_pfns(layout);
    check_model(
        &Flat::new(layout).map_err(|e| e.to_string())?,
        &reference,
        &pfns,
    )?;
    check_model(
        &SparseClassic::new(layout).map_err(|e| e.to_string())?,
        &reference,
        &pfns,
    )?;
    check_model(
        &SparseExtreme::new(layout).map_err(|e| e.to_string())?,
        &reference,
        &pfns,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_model_matches_the_reference(layout in arb_layout(&SMALL_GEOMETRIES)) {
        check_all(&layout).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn extreme_matches_on_52bit_layouts(layout in arb_layout(&[Geometry::X86_64_LA57])) {
        let reference = Reference::new(&layout);
        let model = SparseExtreme::new(&layout).unwrap();
        check_model(&model, &reference, &window_pfns(&layout)).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn hotplug_sequences_match_the_reference(
        layout in arb_layout(&SMALL_GEOMETRIES),
        steps in arb_hotplug_steps(),
    ) {
        let pfns = window_pfns(&layout);
        let mut classic = SparseClassic::new(&layout).unwrap();
        let mut extreme = SparseExtreme::new(&layout).unwrap();
        let mut r1 = Reference::new(&layout);
        let mut r2 = r1.clone();
        for step in steps {
            apply_step(&mut classic, &mut r1, &layout, step).map_err(TestCaseError::fail)?;
            apply_step(&mut extreme, &mut r2, &layout, step).map_err(TestCaseError::fail)?;
            check_model(&classic, &r1, &pfns).map_err(TestCaseError::fail)?;
            check_model(&extreme, &r2, &pfns).map_err(TestCaseError::fail)?;
        }
    }
}

#[test]
fn presets_match_the_reference() {
    for name in ["x86-pci-hole", "zone-device", "numa-fake-64", "ia64-holes"] {
        let layout = Layout::preset(name).unwrap();
        let mut pfns = sparsemem::testing::interesting_pfns(&layout);
        pfns.extend(
            (0..200_000u64)
                .map(|i| Pfn::new(i.wrapping_mul(0x9e37_79b9) % layout.pfn_span().1.get())),
        );
        let reference = Reference::new(&layout);
        check_model(&SparseExtreme::new(&layout).unwrap(), &reference, &pfns).unwrap();
        check_model(&SparseClassic::new(&layout).unwrap(), &reference, &pfns).unwrap();
    }
}

#[test]
fn sparse_52bit_builds_in_extreme_and_is_refused_by_classic_and_flat() {
    let layout = Layout::preset("sparse-52bit").unwrap();
    let model = SparseExtreme::new(&layout).unwrap();
    let top = Geometry::X86_64_LA57.max_pfn().get();
    assert!(model.pfn_valid(Pfn::new(top - 1)));
    assert!(!model.pfn_valid(Pfn::new(top)));
    let bytes = model.memmap_bytes();
    assert_eq!(
        bytes.reserved,
        4 * (16 << 20),
        "8 sections of 2 MiB per GiB bank"
    );
    assert!(
        bytes.tables < 2 << 20,
        "EXTREME root stays small: {}",
        bytes.tables
    );
    let e = SparseClassic::new(&layout).err().unwrap().to_string();
    assert!(e.contains("use `sparse-extreme`"), "{e}");
    let e = Flat::new(&layout).err().unwrap().to_string();
    assert!(e.contains("memmap needs"), "{e}");
}

/// Hot add makes exactly the added subsections valid, hot remove takes them
/// away and gives the memmap back, and online/offline never changes
/// `pfn_valid`.
#[test]
fn hotplug_add_remove_online_offline() {
    let layout = Layout::preset("zone-device").unwrap();
    let g = *layout.geometry();
    let mut model = SparseExtreme::new(&layout).unwrap();
    let base = (12u64 << 30) >> 12; // 12 GiB: an absent section
    let sub = g.pages_per_subsection();
    assert!(!model.pfn_valid(Pfn::new(base)));
    let before = model.memmap_bytes();
    model.hot_add(Pfn::new(base + 2 * sub), 3 * sub).unwrap();
    assert!(!model.pfn_valid(Pfn::new(base + 2 * sub - 1)));
    assert!(model.pfn_valid(Pfn::new(base + 2 * sub)));
    assert!(model.pfn_valid(Pfn::new(base + 5 * sub - 1)));
    assert!(!model.pfn_valid(Pfn::new(base + 5 * sub)));
    assert!(model.memmap_bytes().resident > before.resident);
    // Hot-added memory is offline until onlined; online state is separate.
    assert!(model.pfn_to_online_page(Pfn::new(base + 2 * sub)).is_none());
    model
        .set_online(Pfn::new(base + 2 * sub), 3 * sub, true)
        .unwrap();
    assert!(model.pfn_to_online_page(Pfn::new(base + 2 * sub)).is_some());
    model
        .set_online(Pfn::new(base + 2 * sub), sub, false)
        .unwrap();
    assert!(model.pfn_to_online_page(Pfn::new(base + 2 * sub)).is_none());
    assert!(
        model.pfn_valid(Pfn::new(base + 2 * sub)),
        "offline never changes pfn_valid"
    );
    // Overlapping add, removal of absent memory and onlining a hole are refused.
    assert!(matches!(
        model.hot_add(Pfn::new(base + 4 * sub), 2 * sub),
        Err(HotplugError::AlreadyPresent { .. })
    ));
    assert!(matches!(
        model.hot_remove(Pfn::new(base), 3 * sub),
        Err(HotplugError::NotPresent { .. })
    ));
    assert!(matches!(
        model.set_online(Pfn::new(base), sub, true),
        Err(HotplugError::NotPresent { .. })
    ));
    assert!(
        model.pfn_valid(Pfn::new(base + 4 * sub)),
        "refused requests change nothing"
    );
    // Partial then full removal.
    model.hot_remove(Pfn::new(base + 3 * sub), sub).unwrap();
    assert!(!model.pfn_valid(Pfn::new(base + 3 * sub)));
    assert!(model.pfn_valid(Pfn::new(base + 2 * sub)));
    model.hot_remove(Pfn::new(base + 2 * sub), sub).unwrap();
    model.hot_remove(Pfn::new(base + 4 * sub), sub).unwrap();
    assert!(!model.pfn_valid(Pfn::new(base + 4 * sub)));
    assert_eq!(
        model.memmap_bytes().resident,
        before.resident,
        "memmap went back to the kernel"
    );
    let mut flat = Flat::new(&layout).unwrap();
    assert!(matches!(
        flat.hot_add(Pfn::new(base), sub),
        Err(HotplugError::Unsupported(_))
    ));
}

#[test]
fn model_constructors_report_memmap_bytes() {
    let layout = Layout::preset("x86-pci-hole").unwrap();
    let flat = Flat::new(&layout).unwrap().memmap_bytes();
    let sparse = SparseClassic::new(&layout).unwrap().memmap_bytes();
    let extreme = SparseExtreme::new(&layout).unwrap().memmap_bytes();
    assert_eq!(flat.reserved, 32 << 24, "32 GiB span, 64 B per 4 KiB page");
    assert_eq!(sparse.reserved, 31 * (2 << 20) * 8, "31 GiB of sections");
    assert_eq!(flat.resident, flat.reserved);
    assert_eq!(extreme.resident, extreme.reserved);
    assert_eq!(sparse.tables, (1 << 19) * 16 + 248 * 64);
    assert!(extreme.tables < sparse.tables);
}

/// Regression (found by fuzzing): a layout with petabytes of RAM is refused
/// from its page count, before it is planned section by section.
#[test]
fn absurd_layouts_are_refused_quickly() {
    let layout = Layout::new(
        Geometry::X86_64_LA57,
        vec![sparsemem::MemRange::new(
            0,
            1 << 52,
            sparsemem::RangeKind::Ram,
            0,
        )],
        "4 PiB of RAM",
    )
    .unwrap();
    let t = std::time::Instant::now();
    let e = SparseExtreme::new(&layout).err().unwrap().to_string();
    assert!(e.starts_with("memmap needs"), "{e}");
    assert!(Flat::new(&layout).is_err());
    assert!(t.elapsed().as_secs() < 2, "{:?}", t.elapsed());
}
