//! The vmemmap at every `struct page` size: population granularity and the
//! probe's one-byte rule.

use sparsemem::{
    Geometry, Layout, MemRange, MemoryModel, NodeId, Page8, Page16, Page32, Page64, PageLayout,
    Pfn, RangeKind,
};
use vmemmap::{Detector, Probe, Table, Vmemmap, VmemmapOptions};

/// 128 MiB of boot memory at 0; the section at 1 GiB is empty.
fn layout() -> Layout {
    Layout::new(
        Geometry::X86_64,
        vec![MemRange::new(0, 128 << 20, RangeKind::Ram, 0)],
        "one section",
    )
    .unwrap()
}

/// Adding one 2 MiB subsection of device memory populates exactly its
/// memmap, rounded up to host pages: 32 KiB at 64 bytes, one 4 KiB page
/// at 8 bytes. With THP requested too: a subsection's memmap is smaller
/// than a section's, so it is mapped in base pages
/// (`vmemmap_populate_basepages`), not a PMD.
fn one_subsection_populates_its_memmap<D: Detector, P: PageLayout>() {
    for thp in [false, true] {
        one_subsection_populates_its_memmap_with::<D, P>(thp);
    }
}

fn one_subsection_populates_its_memmap_with<D: Detector, P: PageLayout>(thp: bool) {
    let options = VmemmapOptions { thp, memfd: false };
    let mut model = Vmemmap::<D, P>::build(&layout(), options).unwrap();
    assert_eq!(model.subsection_memmap_bytes(), 512 * P::SIZE);
    let before = model.memmap_bytes().resident;
    let first = Pfn::new((1 << 30) >> 12);
    assert!(!model.pfn_valid(first));
    model.add_device(first, 512, NodeId::new(0)).unwrap();
    let added = model.memmap_bytes().resident - before;
    let host = sparsemem::memmap::host_page_size() as u64;
    assert_eq!(
        added,
        (512 * P::SIZE).next_multiple_of(host),
        "{} thp={thp}",
        P::SIZE
    );
    assert!(model.pfn_valid(first) && model.pfn_valid(first + 511));
    assert!(
        !model.pfn_valid(first + 512),
        "the next subsection is a hole"
    );
    let page = model.pfn_to_page(first + 7).unwrap();
    assert!(page.is_zone_device());
    assert_eq!(model.page_to_pfn(page), first + 7);
    model.remove_device(first, 512).unwrap();
    assert!(!model.pfn_valid(first));
    assert_eq!(model.memmap_bytes().resident, before);
}

#[test]
fn population_granularity_follows_the_page_size() {
    one_subsection_populates_its_memmap::<Table, Page64>();
    one_subsection_populates_its_memmap::<Table, Page32>();
    one_subsection_populates_its_memmap::<Table, Page16>();
    one_subsection_populates_its_memmap::<Table, Page8>();
}

#[test]
fn the_probe_answers_with_one_byte_at_every_size() {
    one_subsection_populates_its_memmap::<Probe, Page64>();
    one_subsection_populates_its_memmap::<Probe, Page32>();
    one_subsection_populates_its_memmap::<Probe, Page16>();
    one_subsection_populates_its_memmap::<Probe, Page8>();
}

const PMD: u64 = 2 << 20;

/// The resident and huge bytes of a PMD-populated memmap whose `touched`
/// bytes were written: one whole THP, or, if the kernel had no free huge
/// page at that fault, the touched 4 KiB pages (THP's own fallback).
fn assert_one_pmd_or_fallback(resident: u64, huge: u64, touched: u64, what: &str) {
    assert!(
        (resident, huge) == (PMD, PMD) || (resident, huge) == (touched, 0),
        "{what}: resident {resident}, in THP {huge}, touched {touched}"
    );
}

/// With THP, a section's memmap is populated in whole PMDs
/// (`vmemmap_populate_hugepages`): at every size the one boot section's
/// memmap (2 MiB at 64 B, 256 KiB at 8 B) occupies one 2 MiB PMD, whose
/// rest holds the zeroed descriptors of the next sections (at 8 bytes one
/// PMD covers eight sections, 1 GiB of RAM). Without THP exactly the
/// memmap is populated.
fn a_section_populates_whole_pmds<P: PageLayout>() {
    let section = (1u64 << 15) * P::SIZE;
    for thp in [false, true] {
        let options = VmemmapOptions { thp, memfd: false };
        let model = Vmemmap::<Table, P>::build(&layout(), options).unwrap();
        let b = model.memmap_bytes();
        if !thp || !vmemmap::reserve::thp_available() {
            assert_eq!((b.resident, b.huge), (section, 0), "{} thp={thp}", P::SIZE);
            continue;
        }
        assert_one_pmd_or_fallback(b.resident, b.huge, section, &format!("{} B", P::SIZE));
        if b.huge == 0 {
            continue;
        }
        // The next section's descriptors are in that PMD, and zero.
        let next = Pfn::new(1 << 15);
        assert!(!model.pfn_valid(next));
    }
}

#[test]
fn with_thp_a_section_populates_whole_pmds_at_every_size() {
    if !vmemmap::reserve::thp_available() {
        println!("THP is [never]: only the base-page figures are checked");
    }
    a_section_populates_whole_pmds::<Page64>();
    a_section_populates_whole_pmds::<Page32>();
    a_section_populates_whole_pmds::<Page16>();
    a_section_populates_whole_pmds::<Page8>();
}

/// At 8 bytes a hot-added section whose memmap shares the boot section's
/// PMD moves no residency (the PMD is mapped already), and removing it
/// frees nothing while the boot section's descriptors remain in the PMD
/// (`vmemmap_pmd_is_unused`); a section in a PMD of its own populates and
/// frees that whole PMD.
#[test]
fn at_8_bytes_hotplug_populates_and_frees_whole_pmds() {
    if !vmemmap::reserve::thp_available() {
        println!("skipped: transparent_hugepage/enabled is [never]");
        return;
    }
    let options = VmemmapOptions {
        thp: true,
        memfd: false,
    };
    let mut model = Vmemmap::<Probe, Page8>::build(&layout(), options).unwrap();
    let boot = model.memmap_bytes();
    if boot.huge == 0 {
        println!("skipped: the kernel had no free huge page for the boot PMD");
        return;
    }
    let same_pmd = Pfn::new(1 << 15);
    model.hot_add(same_pmd, 1 << 15).unwrap();
    assert!(model.pfn_valid(same_pmd));
    assert_eq!(model.memmap_bytes().resident, boot.resident, "same PMD");
    model.hot_remove(same_pmd, 1 << 15).unwrap();
    assert!(!model.pfn_valid(same_pmd) && model.pfn_valid(Pfn::new(0)));
    assert_eq!(
        model.memmap_bytes().resident,
        boot.resident,
        "PMD still used"
    );
    let own_pmd = Pfn::new((1u64 << 30) >> 12);
    model.hot_add(own_pmd, 1 << 15).unwrap();
    let b = model.memmap_bytes();
    assert_one_pmd_or_fallback(
        b.resident - boot.resident,
        b.huge - boot.huge,
        256 << 10,
        "a section at 1 GiB",
    );
    model.hot_remove(own_pmd, 1 << 15).unwrap();
    assert!(!model.pfn_valid(own_pmd));
    assert_eq!(
        model.memmap_bytes().resident,
        boot.resident,
        "its PMD freed"
    );
}
