//! Page preparation and the checks on free: `post_alloc_hook`,
//! `prep_compound_page` for `__GFP_COMP`, `free_pages_prepare`'s bad-page
//! checks (a refused free changes nothing), and `buddy_merge_likely`.

use buddy::testing::{Reference, check_structure};
use buddy::{Allocator, Era, FreeError, Gfp, Kernel, Options};
use sparsemem::table::Extreme;
use sparsemem::{
    BuddyPage, MemdescType, MemoryModel, NodeId, Order, Page8, Page16, Page32, PageFlag, Pfn,
    Sparse, SparseExtreme, TAIL_MAPPING, UserFlag,
};

/// 64 MiB of DMA32 RAM.
fn allocator(era: Era) -> Allocator<SparseExtreme, Kernel> {
    buddy::testing::ram_allocator(16 << 20, 80 << 20, era)
}

/// A compound allocation writes the head and every tail; freeing it checks
/// and clears them, and every page is plain again.
#[test]
fn compound_pages_are_prepared_and_unwound() {
    let alloc = allocator(Era::V6_18);
    let model = alloc.model();
    let order = Order::new(4);
    let p = alloc
        .alloc_pages(order, Gfp::KERNEL | Gfp::COMP, NodeId::ZERO, None)
        .unwrap();
    let head = model.pfn_to_page(p).unwrap();
    assert!(head.test(PageFlag::Head));
    assert_eq!((head.refcount(), head.private()), (1, 4));
    for i in 1..16 {
        let tail = model.pfn_to_page(Pfn::new(p.get() + i)).unwrap();
        assert_eq!(tail.compound_head(), Some(head as *const _), "tail {i}");
        assert_eq!(tail.mapping(), TAIL_MAPPING);
        assert_eq!(tail.private(), if i == 1 { 4 } else { 0 }, "folio order");
    }
    alloc.free_pages(p, order).unwrap();
    for i in 0..16 {
        let page = model.pfn_to_page(Pfn::new(p.get() + i)).unwrap();
        assert_eq!(page.compound_head(), None);
        assert!(!page.test(PageFlag::Head));
        if i > 0 {
            assert_eq!(page.mapping(), 0);
        }
    }
    check_structure(&alloc, &Reference::default()).unwrap();
    // Without __GFP_COMP the tails are left alone.
    let q = alloc
        .alloc_pages(order, Gfp::KERNEL, NodeId::ZERO, None)
        .unwrap();
    assert!(!model.pfn_to_page(q).unwrap().test(PageFlag::Head));
    let tail = model.pfn_to_page(Pfn::new(q.get() + 3)).unwrap();
    assert_eq!((tail.compound_head(), tail.mapping()), (None, 0));
    alloc.free_pages(q, order).unwrap();
}

/// At 32 bytes a tail keeps its head in the memdesc half of the union (no
/// `mapping`, no `TAIL_MAPPING`), the folio order in the first tail's
/// `private`; freeing unwinds both, and a locked head is refused.
#[test]
fn compound_pages_at_32_bytes() {
    // A tail's memdesc half names its head, bit 0 set.
    compound_pages_at::<Page32>(|tail, head| {
        tail.memdesc() & !1 == std::ptr::from_ref(head).addr()
    });
}

/// At 16 bytes a tail's memdesc word is type `Tail`, the head's address
/// and the tail's `private` above it; the head is a bare `Misc` page.
#[test]
fn compound_pages_at_16_bytes() {
    compound_pages_at::<Page16>(|tail, head| {
        tail.memdesc_type() == MemdescType::Tail
            && head.memdesc_type() == MemdescType::Misc
            && tail.memdesc() & 0xffff_ffff_fff0 == std::ptr::from_ref(head).addr() as u64
    });
}

/// At 8 bytes a tail's word is the same `Tail`, and the head's word points
/// to its memdesc (`Misc`), which holds the `PG_head` the tails read
/// through it.
#[test]
fn compound_pages_at_8_bytes() {
    compound_pages_at::<Page8>(|tail, head| {
        tail.memdesc_type() == MemdescType::Tail
            && head.memdesc_type() == MemdescType::Misc
            && head.test(PageFlag::Head)
            && tail.memdesc() & 0xffff_ffff_fff0 == std::ptr::from_ref(head).addr() as u64
    });
}

fn compound_pages_at<P: BuddyPage>(tail_names_head: impl Fn(&P, &P) -> bool) {
    let layout = sparsemem::Layout::new(
        sparsemem::Geometry::X86_64,
        vec![sparsemem::MemRange::new(
            16 << 20,
            80 << 20,
            sparsemem::RangeKind::Ram,
            0,
        )],
        "dma32",
    )
    .unwrap();
    let model = Sparse::<Extreme, P>::build(&layout).unwrap();
    let alloc = Allocator::<_, Kernel>::new(model, &layout, Options::for_era(Era::V6_18)).unwrap();
    let model = alloc.model();
    let order = Order::new(4);
    let p = alloc
        .alloc_pages(order, Gfp::KERNEL | Gfp::COMP, NodeId::ZERO, None)
        .unwrap();
    let head = model.pfn_to_page(p).unwrap();
    assert!(head.test(PageFlag::Head));
    assert_eq!((head.refcount(), head.private()), (1, 4));
    for i in 1..16 {
        let tail = model.pfn_to_page(Pfn::new(p.get() + i)).unwrap();
        assert_eq!(tail.compound_head(), Some(head as *const _), "tail {i}");
        assert!(tail_names_head(tail, head), "tail {i}: {tail:?}");
        assert_eq!(tail.private(), if i == 1 { 4 } else { 0 }, "folio order");
    }
    head.set_user(UserFlag::Locked);
    assert!(matches!(
        alloc.free_pages(p, order),
        Err(FreeError::BadPage { .. })
    ));
    head.clear_user(UserFlag::Locked);
    alloc.free_pages(p, order).unwrap();
    for i in 0..16 {
        let page = model.pfn_to_page(Pfn::new(p.get() + i)).unwrap();
        assert_eq!(page.compound_head(), None);
        assert!(!page.test(PageFlag::Head));
    }
    check_structure(&alloc, &Reference::default()).unwrap();
}

/// Each of `free_page_is_bad`'s reasons refuses the free with the kernel's
/// words; the block stays allocated, and once the caller fixes the page the
/// same free succeeds. User flags that are not checked are cleared.
#[test]
fn a_bad_page_is_refused_and_nothing_changes() {
    let alloc = allocator(Era::V6_18);
    let model = alloc.model();
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let p = cpu.alloc(Gfp::KERNEL).unwrap();
    let page = model.pfn_to_page(p).unwrap();
    let free_before = alloc.free_pages_total() + cpu.total_count();
    type Case = (&'static str, fn(&sparsemem::Page), fn(&sparsemem::Page));
    let cases: [Case; 3] = [
        (
            "nonzero mapcount",
            |p| p.inc_mapcount(),
            |p| p.dec_mapcount(),
        ),
        (
            "non-NULL mapping",
            |p| p.set_mapping(0xdead_0000),
            |p| p.set_mapping(0),
        ),
        (
            "PAGE_FLAGS_CHECK_AT_FREE flag(s) set",
            |p| p.set_user(UserFlag::Locked),
            |p| p.clear_user(UserFlag::Locked),
        ),
    ];
    for (reason, spoil, fix) in cases {
        spoil(page);
        match cpu.free(p) {
            Err(FreeError::BadPage { pfn, reason: r }) => assert_eq!((pfn, r), (p, reason)),
            other => panic!("{reason}: {other:?}"),
        }
        assert_eq!(page.refcount(), 1, "{reason}: still allocated");
        assert_eq!(alloc.free_pages_total() + cpu.total_count(), free_before);
        fix(page);
    }
    page.set_user(UserFlag::Dirty);
    page.set_user(UserFlag::Referenced);
    cpu.free(p).unwrap();
    assert!(!page.test(PageFlag::Dirty) && !page.test(PageFlag::Referenced));
    assert!(matches!(cpu.free(p), Err(FreeError::DoubleFree { .. })));
}

/// A compound page whose tail lost its `TAIL_MAPPING`, or a plain block
/// with a mapped tail, is refused at the tail's pfn, with nothing cleared.
#[test]
fn a_bad_tail_is_refused_at_its_pfn() {
    let alloc = allocator(Era::V6_18);
    let model = alloc.model();
    let order = Order::new(3);
    let p = alloc
        .alloc_pages(order, Gfp::KERNEL | Gfp::COMP, NodeId::ZERO, None)
        .unwrap();
    let tail = model.pfn_to_page(Pfn::new(p.get() + 5)).unwrap();
    tail.set_mapping(0x1234);
    let e = alloc.free_pages(p, order).unwrap_err();
    assert!(
        matches!(e, FreeError::BadPage { pfn, reason: "corrupted mapping in tail page" } if pfn.get() == p.get() + 5),
        "{e}"
    );
    assert!(e.to_string().contains("stays allocated"));
    let other = model.pfn_to_page(Pfn::new(p.get() + 2)).unwrap();
    assert_eq!(other.mapping(), TAIL_MAPPING, "no tail was cleared");
    assert!(model.pfn_to_page(p).unwrap().test(PageFlag::Head));
    tail.set_mapping(TAIL_MAPPING);
    alloc.free_pages(p, order).unwrap();

    let q = alloc
        .alloc_pages(order, Gfp::KERNEL, NodeId::ZERO, None)
        .unwrap();
    let tail = model.pfn_to_page(Pfn::new(q.get() + 7)).unwrap();
    tail.inc_mapcount();
    assert!(matches!(
        alloc.free_pages(q, order),
        Err(FreeError::BadPage {
            reason: "nonzero mapcount",
            ..
        })
    ));
    tail.dec_mapcount();
    alloc.free_pages(q, order).unwrap();
    check_structure(&alloc, &Reference::default()).unwrap();
}

/// From 2.6.35 a freed block whose buddy one order up is free goes to the
/// tail of its list; before, to the head.
#[test]
fn buddy_merge_likely_puts_the_block_at_the_tail() {
    for (era, tail) in [
        (Era::V2_6_23, false),
        (Era::V5_13, true),
        (Era::V6_18, true),
    ] {
        let alloc = allocator(era);
        let gfp = Gfp::HIGHUSER_MOVABLE;
        // An order-2 block [b, b+4): split from an order-3 block whose other
        // half [b+4, b+8) stays free; take b and b+1, free b+1 only.
        let a = alloc
            .alloc_pages(Order::new(1), gfp, NodeId::ZERO, None)
            .unwrap();
        let b = alloc
            .alloc_pages(Order::new(1), gfp, NodeId::ZERO, None)
            .unwrap();
        assert_eq!(b.get(), a.get() + 2, "{era}: the split's other half");
        let before = alloc.stats_total().merge_likely_tails;
        // Freeing `a`'s block cannot merge (b is held), but the order-2
        // buddy of the pair (a, b) is free: merge likely.
        alloc.free_pages(a, Order::new(1)).unwrap();
        let after = alloc.stats_total().merge_likely_tails;
        assert_eq!(after - before, u64::from(tail), "{era}");
        let zid = buddy::ZoneId::new(0);
        let order1: Vec<Pfn> = alloc
            .free_blocks(zid)
            .into_iter()
            .filter(|&(_, o)| o == Order::new(1))
            .map(|(p, _)| p)
            .collect();
        let at = order1.iter().position(|&p| p == a).unwrap();
        assert_eq!(
            at == order1.len() - 1,
            tail || order1.len() == 1,
            "{era}: {order1:?}"
        );
        alloc.free_pages(b, Order::new(1)).unwrap();
        check_structure(&alloc, &Reference::default()).unwrap();
    }
}
