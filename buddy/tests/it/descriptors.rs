//! The 16-byte layout's `struct buddy` cache, exactly: the test runs in a
//! process of its own, so the global cache (shared by every allocator of
//! the size) counts only this test's descriptors.

use buddy::testing::{
    Reference, check_conservation, check_descriptors_all_free, descriptor_holders, snapshot,
};
use buddy::{Allocator, Gfp, Kernel, Options};
use sparsemem::table::Extreme;
use sparsemem::{
    BuddyPage, Layout, MemRange, MemoryModel, NodeId, Order, Page16, RangeKind, SLAB_BYTES, Sparse,
};

/// One descriptor per listed page, none on an allocated page, each back in
/// the cache when its page leaves the lists; a descriptor leaked onto an
/// allocated page is caught by the checker.
#[test]
fn one_struct_buddy_per_listed_page_and_none_leaked() -> Result<(), String> {
    if let Some(outcome) = sparsemem::testing::run_alone(
        "descriptors::one_struct_buddy_per_listed_page_and_none_leaked",
    ) {
        return outcome;
    }
    let cache = || <Page16 as BuddyPage>::buddy_cache_info().unwrap();
    assert_eq!(cache().active_objs, 0);
    let layout = Layout::new(
        sparsemem::Geometry::X86_64,
        vec![MemRange::new(0, 64 << 20, RangeKind::Ram, 0)],
        "64 MiB",
    )
    .unwrap();
    let model = Sparse::<Extreme, Page16>::build(&layout).unwrap();
    let alloc = Allocator::<_, Kernel>::new(model, &layout, Options::default()).unwrap();
    let blocks =
        |a: &Allocator<_, Kernel>| -> u64 { snapshot(a).iter().flat_map(|z| z.iter()).sum() };
    let at_boot = blocks(&alloc);
    assert_eq!(descriptor_holders(&alloc).unwrap(), at_boot);
    assert_eq!(
        cache().active_objs,
        at_boot,
        "one struct buddy per free block"
    );
    assert!(cache().bytes() >= at_boot * 32);

    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let mut reference = Reference::default();
    let pages: Vec<_> = (0..200).map(|_| cpu.alloc(Gfp::KERNEL).unwrap()).collect();
    for &p in &pages {
        reference.record(&layout, p, Order::ZERO).unwrap();
    }
    let pcp = cpu.total_count();
    check_conservation(&alloc, pcp, &reference).unwrap();
    assert_eq!(
        cache().active_objs,
        blocks(&alloc) + pcp,
        "split halves and pcp pages"
    );

    // A descriptor attached to an allocated page is a leak.
    let leaked = alloc.model().pfn_to_page(pages[0]).unwrap();
    // SAFETY: the page is this test's allocated page, on no list (a
    // listed page has no count, so the count goes first).
    unsafe {
        leaked.set_refcount(0);
        leaked.list_attach();
    }
    let err = check_conservation(&alloc, pcp, &reference).unwrap_err();
    assert!(err.contains("descriptors"), "{err}");
    // SAFETY: attached just above, links null; the count given back.
    unsafe {
        leaked.list_detach();
        leaked.set_refcount(1);
    }
    check_conservation(&alloc, pcp, &reference).unwrap();

    while let Some((pfn, _)) = reference.take(0) {
        cpu.free(pfn).unwrap();
    }
    cpu.drain();
    drop(cpu);
    check_descriptors_all_free(&alloc).unwrap();
    assert_eq!(blocks(&alloc), at_boot, "merged back");
    assert_eq!(cache().active_objs, at_boot, "every descriptor given back");
    assert_eq!(cache().bytes() % SLAB_BYTES, 0);
    drop(alloc);
    Ok(())
}
