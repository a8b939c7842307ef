//! Differential tests: every table model against the reference, on
//! generated layouts and hotplug sequences.

use proptest::prelude::*;
use sparsemem::reference::{Reference, Semantics};
use sparsemem::table::{Classic, Extreme};
use sparsemem::testing::{
    SMALL_GEOMETRIES, apply_step, arb_hotplug_steps, arb_layout, cases, check_model,
    check_pageblocks, expect_build, pfns_at, window_pfns,
};
use sparsemem::{
    BuildError, Flat, Geometry, HotplugError, Layout, MemoryModel, NodeId, Page8, Page16, Page32,
    Page64, PageLayout, Pfn, Sparse, SparseClassic, SparseExtreme, for_each_page_layout,
};

/// Builds `model` (or checks it was rightly refused) and compares it with
/// the reference of its semantics.
fn check_one<M: MemoryModel>(
    built: Result<M, BuildError>,
    layout: &Layout,
    semantics: Semantics,
    pfns: &[Pfn],
) -> Result<(), String> {
    match expect_build(built, layout, semantics)? {
        Some(model) => {
            check_model(&model, &Reference::new(layout, semantics), pfns)?;
            check_pageblocks(&model, layout)
        }
        None => Ok(()),
    }
}

/// Every table model at `struct page` layout `P`.
fn check_all_at<P: PageLayout>(layout: &Layout) -> Result<(), String> {
    let pfns = pfns_at::<P>(layout);
    check_one(Flat::<P>::build(layout), layout, Semantics::Flat, &pfns)?;
    check_one(
        Sparse::<Classic, P>::build(layout),
        layout,
        Semantics::Section,
        &pfns,
    )?;
    check_one(
        Sparse::<Extreme, P>::build(layout),
        layout,
        Semantics::Section,
        &pfns,
    )
}

fn check_all(layout: &Layout) -> Result<(), String> {
    for_each_page_layout!(check_all_at(layout))
}

/// A hotplug sequence on both SPARSEMEM tables at layout `P`.
fn hotplug_at<P: PageLayout>(
    layout: &Layout,
    steps: &[sparsemem::testing::HotplugStep],
) -> Result<(), String> {
    let pfns = pfns_at::<P>(layout);
    let Some(mut classic) = expect_build(
        Sparse::<Classic, P>::build(layout),
        layout,
        Semantics::Section,
    )?
    else {
        return Ok(());
    };
    let mut extreme = Sparse::<Extreme, P>::build(layout).unwrap();
    let mut r1 = Reference::new(layout, Semantics::Section);
    let mut r2 = r1.clone();
    for &step in steps {
        apply_step(&mut classic, &mut r1, layout, step)?;
        apply_step(&mut extreme, &mut r2, layout, step)?;
        check_model(&classic, &r1, &pfns)?;
        check_model(&extreme, &r2, &pfns)?;
    }
    // Below 64 bytes each step read a sample; the end state is swept whole.
    let window = window_pfns(layout);
    check_model(&classic, &r1, &window)?;
    check_model(&extreme, &r2, &window)
}

/// [`hotplug_at`], its failure naming the struct page size.
fn hotplug_sized<P: PageLayout>(
    layout: &Layout,
    steps: &[sparsemem::testing::HotplugStep],
) -> Result<(), String> {
    hotplug_at::<P>(layout, steps).map_err(|e| format!("{e} at {}-byte struct page", P::SIZE))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(48), ..ProptestConfig::default() })]

    #[test]
    fn every_model_matches_the_reference(layout in arb_layout(&SMALL_GEOMETRIES)) {
        check_all(&layout).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn extreme_matches_on_52bit_layouts(layout in arb_layout(&[Geometry::X86_64_LA57])) {
        let pfns = window_pfns(&layout);
        check_one(SparseExtreme::new(&layout), &layout, Semantics::Section, &pfns)
            .map_err(TestCaseError::fail)?;
    }

    // The four struct page sizes in two properties, so that the test
    // threads share them: 64 bytes, where every step is swept whole, and
    // the three sizes that read a sample each step.
    #[test]
    fn hotplug_sequences_match_the_reference(
        layout in arb_layout(&SMALL_GEOMETRIES),
        steps in arb_hotplug_steps(),
    ) {
        hotplug_sized::<Page64>(&layout, &steps).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn hotplug_sequences_match_the_reference_below_64_bytes(
        layout in arb_layout(&SMALL_GEOMETRIES),
        steps in arb_hotplug_steps(),
    ) {
        hotplug_sized::<Page32>(&layout, &steps)
            .and_then(|()| hotplug_sized::<Page16>(&layout, &steps))
            .and_then(|()| hotplug_sized::<Page8>(&layout, &steps))
            .map_err(TestCaseError::fail)?;
    }
}

#[test]
fn presets_match_the_reference() {
    for name in ["x86-pci-hole", "numa-fake-64", "ia64-holes"] {
        let layout = Layout::preset(name).unwrap();
        let mut pfns = sparsemem::testing::interesting_pfns(&layout);
        pfns.extend(
            (0..200_000u64)
                .map(|i| Pfn::new(i.wrapping_mul(0x9e37_79b9) % layout.memory_span().1.get())),
        );
        let reference = Reference::new(&layout, Semantics::Section);
        check_model(&SparseExtreme::new(&layout).unwrap(), &reference, &pfns).unwrap();
        check_model(&SparseClassic::new(&layout).unwrap(), &reference, &pfns).unwrap();
        let flat = Flat::new(&layout).unwrap();
        check_model(&flat, &Reference::new(&layout, Semantics::Flat), &pfns).unwrap();
    }
}

/// Without VMEMMAP there is no subsection map: a section with any memory is
/// valid over its whole span (`pfn_section_valid` is 1), where the vmemmap
/// models answer per 2 MiB.
#[test]
fn sparse_sections_are_valid_whole() {
    let layout = Layout::new(
        Geometry::X86_64,
        vec![sparsemem::MemRange::new(
            0,
            6 << 20,
            sparsemem::RangeKind::Ram,
            0,
        )],
        "6 MiB",
    )
    .unwrap();
    for model in [
        &SparseClassic::new(&layout).unwrap() as &dyn MemoryModel<Page = sparsemem::Page>,
        &SparseExtreme::new(&layout).unwrap(),
    ] {
        assert!(model.pfn_valid(Pfn::new(32767)), "{}", model.name());
        assert!(model.pfn_to_page(Pfn::new(32767)).unwrap().is_present());
    }
}

/// The refusals of the models without VMEMMAP, one clear line each, naming
/// the models that can.
#[test]
fn device_memory_and_flat_hotplug_are_refused_with_the_models_that_can() {
    let layout = Layout::preset("zone-device").unwrap();
    let e = SparseExtreme::new(&layout).err().unwrap().to_string();
    assert_eq!(
        e,
        "`sparse-extreme` cannot hold the range 0x200000000..0x200600000: device memory (ZONE_DEVICE) needs SPARSEMEM_VMEMMAP; models that can: vmemmap-table, vmemmap-probe, vmemmap-uffd, vmemmap-uffd-sigbus"
    );
    let e = Flat::new(&layout).err().unwrap().to_string();
    assert!(
        e.starts_with("`flat` cannot hold the range 0x180000000..0x188000000: FLATMEM has no memory hotplug; models that can: sparse, sparse-extreme, vmemmap-table"),
        "{e}"
    );
    let boot = Layout::preset("x86-pci-hole").unwrap();
    let mut sparse = SparseClassic::new(&boot).unwrap();
    let far = Pfn::new((40u64 << 30) >> 12);
    let e = sparse.add_device(far, 512, NodeId::ZERO).unwrap_err();
    assert!(matches!(e, HotplugError::NeedsVmemmap { model: "sparse" }));
    assert!(
        e.to_string()
            .contains("models that can hold it: vmemmap-table"),
        "{e}"
    );
    let e = sparse.hot_add(far, 512).unwrap_err();
    assert!(
        e.to_string().contains("not aligned to a memory block (one section) (32768 pages); only device memory (ZONE_DEVICE, models vmemmap-table"),
        "{e}"
    );
    assert!(!sparse.pfn_valid(far), "refusals change nothing");
    let mut flat = Flat::new(&boot).unwrap();
    let e = flat.hot_add(far, 32768).unwrap_err().to_string();
    assert!(
        e.starts_with("FLATMEM has no memory hotplug; models that can: sparse"),
        "{e}"
    );
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

/// Hot add of a memory block makes the whole block valid and offline, hot
/// remove takes it away and gives the memmap back, and online/offline never
/// changes `pfn_valid`.
#[test]
fn hotplug_add_remove_online_offline() {
    let layout = Layout::preset("x86-pci-hole").unwrap();
    let g = *layout.geometry();
    let mut model = SparseExtreme::new(&layout).unwrap();
    let base = (40u64 << 30) >> 12; // 40 GiB: an absent section
    let block = g.memory_block_pages();
    assert!(!model.pfn_valid(Pfn::new(base)));
    let before = model.memmap_bytes();
    model.hot_add(Pfn::new(base), 2 * block).unwrap();
    assert!(!model.pfn_valid(Pfn::new(base - 1)));
    assert!(model.pfn_valid(Pfn::new(base)));
    assert!(model.pfn_valid(Pfn::new(base + 2 * block - 1)));
    assert!(!model.pfn_valid(Pfn::new(base + 2 * block)));
    assert!(model.memmap_bytes().resident > before.resident);
    // Hot-added memory is offline until onlined; online state is separate.
    assert!(model.pfn_to_online_page(Pfn::new(base)).is_none());
    model.set_online(Pfn::new(base), 2 * block, true).unwrap();
    assert!(model.pfn_to_online_page(Pfn::new(base + block)).is_some());
    model.set_online(Pfn::new(base), block, false).unwrap();
    assert!(model.pfn_to_online_page(Pfn::new(base)).is_none());
    assert!(
        model.pfn_valid(Pfn::new(base)),
        "offline never changes pfn_valid"
    );
    // Overlapping add, removal of absent memory, onlining a hole and a
    // piece of a block are refused.
    assert!(matches!(
        model.hot_add(Pfn::new(base + block), 2 * block),
        Err(HotplugError::AlreadyPresent { .. })
    ));
    assert!(matches!(
        model.hot_remove(Pfn::new(base + 2 * block), block),
        Err(HotplugError::NotPresent { .. })
    ));
    assert!(matches!(
        model.set_online(Pfn::new(base + 2 * block), block, true),
        Err(HotplugError::NotPresent { .. })
    ));
    assert!(matches!(
        model.set_online(Pfn::new(base), 512, true),
        Err(HotplugError::Misaligned { .. })
    ));
    assert!(
        model.pfn_valid(Pfn::new(base + block)),
        "refused requests change nothing"
    );
    model.hot_remove(Pfn::new(base + block), block).unwrap();
    assert!(!model.pfn_valid(Pfn::new(base + block)));
    assert!(model.pfn_valid(Pfn::new(base)));
    model.hot_remove(Pfn::new(base), block).unwrap();
    assert_eq!(
        model.memmap_bytes().resident,
        before.resident,
        "memmap went back to the kernel"
    );
}

#[test]
fn model_constructors_report_memmap_bytes() {
    let layout = Layout::preset("x86-pci-hole").unwrap();
    let flat = Flat::new(&layout).unwrap().memmap_bytes();
    let sparse = SparseClassic::new(&layout).unwrap().memmap_bytes();
    // 32 GiB is a whole number of max-order blocks: no rounding.
    let extreme = SparseExtreme::new(&layout).unwrap().memmap_bytes();
    assert_eq!(flat.reserved, 32 << 24, "32 GiB span, 64 B per 4 KiB page");
    assert_eq!(sparse.reserved, 31 * (2 << 20) * 8, "31 GiB of sections");
    assert_eq!(flat.resident, flat.reserved);
    assert_eq!(extreme.resident, extreme.reserved);
    // 16 B per section entry; per present section a usage of a 64 B
    // subsection map and 256 B of pageblock flags.
    assert_eq!(sparse.tables, (1 << 19) * 16 + 248 * 320);
    assert_eq!(
        flat.tables,
        (32u64 << 30 >> 21) * 4 / 8,
        "4 bits per 2 MiB pageblock"
    );
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

/// FLATMEM's mem_map is rounded out to max-order blocks as
/// `alloc_node_mem_map` does: every block holding memory has all its
/// descriptors, and the array starts at `ARCH_PFN_OFFSET`.
#[test]
fn flat_rounds_its_mem_map_to_max_order_blocks() {
    for g in [Geometry::X86_64, Geometry::ARM64_64K] {
        let page = g.page_size();
        let block = g.max_order_nr_pages();
        let layout = Layout::new(
            g,
            vec![sparsemem::MemRange::new(
                (block + 3) * page,
                (5 * block - 7) * page,
                sparsemem::RangeKind::Ram,
                0,
            )],
            "unaligned",
        )
        .unwrap();
        let flat = Flat::new(&layout).unwrap();
        assert_eq!(flat.pfn_offset(), Pfn::new(block), "{}", g.name());
        assert_eq!(flat.max_mapnr(), 4 * block);
        assert!(flat.pfn_valid(Pfn::new(block)) && flat.pfn_valid(Pfn::new(5 * block - 1)));
        assert!(!flat.pfn_valid(Pfn::new(block - 1)) && !flat.pfn_valid(Pfn::new(5 * block)));
        assert!(
            flat.pfn_to_page(Pfn::new(block))
                .unwrap()
                .test(sparsemem::PageFlag::Reserved)
        );
    }
}
