//! Where the FLATMEM and SPARSEMEM memmaps live: in huge pages, as the
//! kernel's direct map holds them, or in 4 KiB pages (`debug_pagealloc`).

use sparsemem::memmap::thp_advice_honoured;
use sparsemem::table::Classic;
use sparsemem::{
    DirectMap, Flat, Geometry, Layout, MemRange, MemoryModel, Page8, Page64, Pfn, RangeKind,
    Sparse, SparseClassic, SparseExtreme,
};

/// 1 GiB of boot memory at 0: a 16 MiB flat memmap, eight 2 MiB section
/// memmaps.
fn layout() -> Layout {
    Layout::new(
        Geometry::X86_64,
        vec![MemRange::new(0, 1 << 30, RangeKind::Ram, 0)],
        "one GiB",
    )
    .unwrap()
}

/// Skips (with the reason printed) unless THP is `always` or `madvise` and
/// `MADV_HUGEPAGE` reaches the kernel (user-mode QEMU drops it).
fn thp_or_skip() -> bool {
    let ok = thp_advice_honoured();
    if !ok {
        println!("skipped: THP is [never], or MADV_HUGEPAGE does not reach the kernel");
    }
    ok
}

/// Every 2 MiB of a touched memmap is THP-backed unless the kernel had no
/// free huge page at that moment, so at least one is, and the huge bytes
/// are whole PMDs within the resident ones.
fn assert_mostly_huge(name: &str, b: sparsemem::MemmapBytes) {
    println!(
        "{name}: reserved {} resident {} in THP {}",
        b.reserved, b.resident, b.huge
    );
    assert_eq!(
        b.resident, b.reserved,
        "{name}: every descriptor initialised"
    );
    assert!(b.huge > 0 && b.huge <= b.resident, "{name}: {b:?}");
    assert_eq!(b.huge % (2 << 20), 0, "{name}: whole PMDs");
}

#[test]
fn a_touched_flat_memmap_is_in_huge_pages_when_thp_is_available() {
    if !thp_or_skip() {
        return;
    }
    let flat = Flat::new(&layout()).unwrap();
    assert_eq!(flat.memmap_bytes().reserved, 16 << 20);
    assert_mostly_huge("flat", flat.memmap_bytes());
}

#[test]
fn section_memmaps_of_two_mib_are_in_huge_pages_when_thp_is_available() {
    if !thp_or_skip() {
        return;
    }
    assert_mostly_huge(
        "sparse",
        SparseClassic::new(&layout()).unwrap().memmap_bytes(),
    );
    let mut extreme = SparseExtreme::new(&layout()).unwrap();
    // A hot-added section's memmap is mapped as boot's.
    extreme
        .hot_add(Pfn::new((4u64 << 30) >> 12), 1 << 15)
        .unwrap();
    let b = extreme.memmap_bytes();
    assert_eq!(b.reserved, 9 * (2 << 20));
    assert_mostly_huge("sparse-extreme + one hot-added section", b);
}

#[test]
fn base_pages_model_a_debug_pagealloc_direct_map() {
    let flat = Flat::<Page64>::build_mapped(&layout(), DirectMap::BasePages).unwrap();
    let b = flat.memmap_bytes();
    assert_eq!((b.reserved, b.resident, b.huge), (16 << 20, 16 << 20, 0));
    let sparse = SparseClassic::build_mapped(&layout(), DirectMap::BasePages).unwrap();
    let b = sparse.memmap_bytes();
    assert_eq!((b.resident, b.huge), (8 * (2 << 20), 0));
}

#[test]
fn boot_section_memmaps_below_64_bytes_share_the_nodes_buffer() {
    // At 8 bytes a section's memmap is 256 KiB; the node's eight boot
    // sections are carved from one 2 MiB buffer (sparse_buffer_init), as
    // the kernel's are, so they fill one huge page between them.
    let mut sparse = Sparse::<Classic, Page8>::build(&layout()).unwrap();
    let b = sparse.memmap_bytes();
    assert_eq!((b.reserved, b.resident), (2 << 20, 2 << 20));
    if thp_or_skip() {
        assert_eq!(b.huge, 2 << 20, "one PMD for eight sections: {b:?}");
    }
    // Consecutive sections' memmaps are consecutive in the buffer.
    let a = sparse.pfn_to_page(Pfn::new(0)).unwrap() as *const Page8;
    let next = sparse.pfn_to_page(Pfn::new(1 << 15)).unwrap() as *const Page8;
    assert_eq!(next as usize - a as usize, 256 << 10);
    // A removed boot section gives its part back (free_map_bootmem); added
    // again, it gets a memmap of its own, outside the buffer.
    let last = Pfn::new(7 << 15);
    sparse.set_online(last, 1 << 15, false).unwrap();
    sparse.hot_remove(last, 1 << 15).unwrap();
    let b = sparse.memmap_bytes();
    assert_eq!((b.reserved, b.resident), (7 * (256 << 10), 7 * (256 << 10)));
    assert!(!sparse.pfn_valid(last));
    sparse.hot_add(last, 1 << 15).unwrap();
    let b = sparse.memmap_bytes();
    assert_eq!((b.reserved, b.resident), (2 << 20, 2 << 20));
    let own = sparse.pfn_to_page(last).unwrap() as *const Page8;
    assert!(
        own < a || own as usize >= a as usize + (2 << 20),
        "not in the buffer"
    );
}
