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
/// at 8 bytes.
fn one_subsection_populates_its_memmap<D: Detector, P: PageLayout>() {
    let options = VmemmapOptions {
        thp: false,
        memfd: false,
    };
    let mut model = Vmemmap::<D, P>::build(&layout(), options).unwrap();
    assert_eq!(model.subsection_memmap_bytes(), 512 * P::SIZE);
    let before = model.memmap_bytes().resident;
    let first = Pfn::new((1 << 30) >> 12);
    assert!(!model.pfn_valid(first));
    model.add_device(first, 512, NodeId::new(0)).unwrap();
    let added = model.memmap_bytes().resident - before;
    let host = sparsemem::memmap::host_page_size() as u64;
    assert_eq!(added, (512 * P::SIZE).next_multiple_of(host), "{}", P::SIZE);
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
