//! The 8-byte layout's two caches, exactly: `struct buddy` (one per listed
//! page) and the allocated pages' memdescs (one per allocated head). The test
//! runs in a process of its own, so the global caches (shared by every
//! allocator of the size) count only this test's objects.

use buddy::testing::{
    Reference, check_conservation, check_descriptors_all_free, descriptor_holders, memdesc_holders,
    snapshot,
};
use buddy::{Allocator, Gfp, Kernel, Options};
use sparsemem::table::Extreme;
use sparsemem::{
    BuddyPage, Layout, MemRange, MemoryModel, NodeId, Order, Page8, RangeKind, SLAB_BYTES, Sparse,
};

/// One `struct buddy` per listed page and one memdesc per allocated head,
/// each back in its cache when its page leaves the lists or is freed; a
/// memdesc leaked onto a page that is not an allocated head, or missing
/// from one, is caught by the checker.
#[test]
fn one_struct_buddy_per_listed_page_one_memdesc_per_allocation() -> Result<(), String> {
    if let Some(outcome) = sparsemem::testing::run_alone(
        "descriptors8::one_struct_buddy_per_listed_page_one_memdesc_per_allocation",
    ) {
        return outcome;
    }
    let buddies = || <Page8 as BuddyPage>::buddy_cache_info().unwrap();
    let memdescs = || <Page8 as BuddyPage>::memdesc_cache_info().unwrap();
    assert_eq!((buddies().active_objs, memdescs().active_objs), (0, 0));
    let layout = Layout::new(
        sparsemem::Geometry::X86_64,
        vec![MemRange::new(0, 64 << 20, RangeKind::Ram, 0)],
        "64 MiB",
    )
    .unwrap();
    let model = Sparse::<Extreme, Page8>::build(&layout).unwrap();
    let alloc = Allocator::<_, Kernel>::new(model, &layout, Options::default()).unwrap();
    let blocks =
        |a: &Allocator<_, Kernel>| -> u64 { snapshot(a).iter().flat_map(|z| z.iter()).sum() };
    let at_boot = blocks(&alloc);
    assert_eq!(descriptor_holders(&alloc).unwrap(), at_boot);
    assert_eq!(
        buddies().active_objs,
        at_boot,
        "one struct buddy per free block"
    );
    assert_eq!(
        memdescs().active_objs,
        0,
        "memmap init allocates no memdesc"
    );
    assert!(buddies().bytes() >= at_boot * 48);

    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let mut reference = Reference::default();
    let pages: Vec<_> = (0..200).map(|_| cpu.alloc(Gfp::KERNEL).unwrap()).collect();
    // On the zone path, so the per-CPU lists hold only order-0 pages.
    let big = alloc
        .alloc_pages(Order::new(3), Gfp::KERNEL, NodeId::ZERO, None)
        .unwrap();
    for &p in &pages {
        reference.record(&layout, p, Order::ZERO).unwrap();
    }
    reference.record(&layout, big, Order::new(3)).unwrap();
    let pcp = cpu.total_count();
    check_conservation(&alloc, pcp, &reference).unwrap();
    assert_eq!(
        buddies().active_objs,
        blocks(&alloc) + pcp,
        "split halves and pcp pages"
    );
    assert_eq!(
        memdescs().active_objs,
        201,
        "one per allocated head, none per tail"
    );
    assert_eq!(memdesc_holders(&alloc), 201);

    // A memdesc on a page of an allocated block that is not its head is a
    // leak; one missing from a head is caught too.
    let tail = alloc.model().pfn_to_page(big + 1).unwrap();
    // SAFETY: the page is this test's (a page of its order-3 block), on no
    // list; the count makes it a memdesc holder, then is taken back.
    unsafe { tail.set_refcount(1) };
    let err = check_conservation(&alloc, pcp, &reference).unwrap_err();
    assert!(err.contains("memdescs"), "{err}");
    // SAFETY: as above.
    unsafe { tail.set_refcount(0) };
    let head = alloc.model().pfn_to_page(pages[0]).unwrap();
    // SAFETY: this test's allocated page, on no list: the freeze drops its
    // memdesc as a free would, and the count given back restores one.
    unsafe { assert!(head.ref_freeze(1)) };
    let err = check_conservation(&alloc, pcp, &reference).unwrap_err();
    assert!(err.contains("memdescs"), "{err}");
    // SAFETY: as above.
    unsafe { head.set_refcount(1) };
    check_conservation(&alloc, pcp, &reference).unwrap();

    reference.blocks.remove(&big.get());
    alloc.free_pages(big, Order::new(3)).unwrap();
    while let Some((pfn, _)) = reference.take(0) {
        cpu.free(pfn).unwrap();
    }
    cpu.drain();
    drop(cpu);
    check_descriptors_all_free(&alloc).unwrap();
    assert_eq!(blocks(&alloc), at_boot, "merged back");
    assert_eq!(
        buddies().active_objs,
        at_boot,
        "every struct buddy given back"
    );
    assert_eq!(memdescs().active_objs, 0, "every memdesc given back");
    assert_eq!(memdescs().bytes() % SLAB_BYTES, 0);
    drop(alloc);
    assert_eq!(
        buddies().active_objs,
        0,
        "the dropped lists gave theirs back"
    );
    Ok(())
}
