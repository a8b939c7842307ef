//! Checks every layout passes, written once and run at each size.

use super::*;

/// The first byte of a descriptor, as the fault probe loads it.
fn byte0<P: PageLayout>(page: &P) -> u8 {
    // SAFETY: `page` is a live descriptor of at least 8 bytes (the layout
    // contract's point 3); reading its first byte as `u8` is in bounds and
    // every bit pattern is a valid `u8`.
    unsafe { *std::ptr::from_ref(page).cast::<u8>() }
}

fn layout_contract<P: PageLayout + std::fmt::Debug>() {
    assert!(P::SIZE.is_power_of_two() && P::SIZE >= 8);
    assert_eq!(std::mem::align_of::<P>() as u64, P::SIZE);
    assert_eq!(PageSize::try_from(P::SIZE).unwrap().bytes(), P::SIZE);
    let p = P::default();
    assert!(!p.is_present(), "all zero is a hole");
    assert_eq!(byte0(&p) & P::PRESENT_BYTE_MASK, 0);
    // SAFETY: a local descriptor no one else sees; this test owns it.
    unsafe { p.init_reserved(0x1ff_ffff) };
    assert!(p.is_present() && !p.is_zone_device());
    assert_ne!(byte0(&p) & P::PRESENT_BYTE_MASK, 0, "the probe sees it");
    assert_eq!((p.section(), p.zone_id(), p.node_id()), (0x1ff_ffff, 0, 0));
    // SAFETY: as above.
    unsafe { p.init_device(42, crate::MAX_NUMNODES - 1) };
    assert!(p.is_zone_device());
    assert_eq!((p.section(), p.node_id()), (42, crate::MAX_NUMNODES - 1));
    // SAFETY: as above.
    unsafe { p.clear_to_hole() };
    assert!(!p.is_present());
    assert_eq!(byte0(&p), 0);
    assert!(format!("{p:?}").starts_with("Page"));
}

#[test]
fn every_layout_keeps_the_contract() {
    layout_contract::<Page64>();
    layout_contract::<Page32>();
    layout_contract::<Page16>();
    layout_contract::<Page8>();
}

#[test]
fn sizes_parse_and_refuse() {
    let sizes: Vec<u64> = PageSize::ALL.iter().map(|s| s.bytes()).collect();
    assert_eq!(sizes, [64, 32, 16, 8]);
    assert_eq!(PageSize::try_from(48), Err(PageSizeError(48)));
    assert!(PageSizeError(48).to_string().contains("48"));
    assert_eq!(PageSize::B16.to_string(), "16");
}

#[test]
fn page32_union_holds_the_count_where_the_links_go() {
    let p = Page32::default();
    // SAFETY: a local descriptor no one else sees; this test owns it.
    unsafe { p.init_device(3, 1) };
    assert_eq!(p.refcount(), 1, "the pgmap's reference, in _refcount");
    assert_eq!((p.memdesc(), p.private()), (0, 0));
    assert!(p.test(PageFlag::Reserved));
}

#[test]
fn page8_types_are_in_the_low_nibble() {
    let p = Page8::default();
    assert_eq!(p.memdesc_type(), MemdescType::None);
    // SAFETY: a local descriptor no one else sees; this test owns it.
    unsafe { p.init_reserved(5) };
    assert_eq!(p.memdesc_type(), MemdescType::Reserved);
    assert_eq!(p.memdesc() & 0xf, MemdescType::Reserved as u64);
    // SAFETY: as above.
    unsafe { p.init_device(5, 2) };
    assert_eq!(p.memdesc_type(), MemdescType::Device);
    let p16 = Page16::default();
    // SAFETY: as above, for this descriptor.
    unsafe { p16.init_reserved(5) };
    assert_eq!((p16.memdesc(), p16.section()), (0, 5));
}

/// The allocator's accessors at both sizes that hold its state in the page:
/// links, order, count, zone and node, the compound head, the flags the
/// free path clears, and poison.
fn buddy_page_contract<P: BuddyPage>() {
    let pages: Vec<P> = (0..2).map(|_| P::default()).collect();
    let (p, q) = (&pages[0], &pages[1]);
    let q_ptr = std::ptr::from_ref(q).cast_mut();
    // SAFETY: local descriptors no one else sees; this test owns them.
    unsafe {
        p.init_reserved(0x1234);
        p.set_zone_node(3, 513);
        p.set_private(7);
        p.list_attach();
        p.set_lru_next(q_ptr);
        p.set_lru_prev(std::ptr::null_mut());
        p.set_nonatomic(PageFlag::Buddy);
        p.set_unlocked(PageFlag::Pcp);
    }
    assert_eq!((p.lru_next(), p.lru_prev()), (q_ptr, std::ptr::null_mut()));
    assert_eq!((p.private(), p.zone_id(), p.node_id()), (7, 3, 513));
    assert!(p.test(PageFlag::Buddy) && p.test(PageFlag::Pcp) && p.test(PageFlag::Reserved));
    assert!(matches!(
        p.list_state(),
        ListState::InPage
            | ListState::Descriptor {
                live: true,
                names_page: true
            }
    ));
    // SAFETY: as above.
    unsafe {
        p.set_lru_next(std::ptr::null_mut());
        p.list_detach();
        p.clear_unlocked(PageFlag::Pcp);
        p.set_refcount(1);
    }
    assert_eq!(p.private(), 7, "the order comes back from the descriptor");
    let unlisted = if P::LINKS_IN_PAGE {
        ListState::InPage
    } else {
        ListState::Detached
    };
    assert_eq!(p.list_state(), unlisted);
    assert!(!p.test(PageFlag::Pcp));
    // SAFETY: as above.
    assert!(!unsafe { p.ref_freeze(2) } && unsafe { p.ref_freeze(1) });
    assert_eq!(p.refcount(), 0);
    p.set_user(UserFlag::Locked);
    assert_eq!(
        p.free_bad_reason(),
        Some("PAGE_FLAGS_CHECK_AT_FREE flag(s) set")
    );
    // SAFETY: as above.
    unsafe { p.clear_flags_at_free() };
    assert_eq!(p.free_bad_reason(), None);
    assert!(p.is_present() && !p.test(PageFlag::Buddy) && !p.test(PageFlag::Reserved));
    assert_eq!(
        (p.section(), p.zone_id(), p.node_id()),
        (0x1234, 3, 513),
        "kept"
    );
    // SAFETY: as above; `q` is on no list.
    unsafe {
        q.init_reserved(0x1234);
        q.set_private(5);
        q.prep_compound_tail(p);
    }
    assert_eq!(q.compound_head(), Some(std::ptr::from_ref(p)));
    assert_eq!(q.private(), 5, "a tail keeps private beside its head");
    assert_eq!(q.compound_tail_bad_reason(p), None);
    assert!(q.compound_tail_bad_reason(q).is_some());
    // SAFETY: as above.
    unsafe { q.clear_compound_tail() };
    assert_eq!(q.compound_head(), None);
    // SAFETY: as above.
    unsafe { q.poison() };
    assert!(q.is_poisoned() && q.zone_id() == ZONE_DEVICE_ID);
}

#[test]
fn buddy_pages_hold_the_allocators_state() {
    buddy_page_contract::<Page64>();
    buddy_page_contract::<Page32>();
    buddy_page_contract::<Page16>();
    buddy_page_contract::<Page8>();
}

/// At 16 bytes a listed page's links and order are its `struct buddy`'s:
/// attaching takes one object from the cache and points the memdesc word
/// at it; detaching gives it back; a listed page has no count, so a free
/// of it cannot claim it.
#[test]
fn page16_lists_through_a_struct_buddy() {
    let pages: Vec<Page16> = (0..2).map(|_| Page16::default()).collect();
    let p = &pages[0];
    // SAFETY: local descriptors no one else sees; this test owns them.
    unsafe {
        p.init_reserved(9);
        p.set_refcount(0);
        p.set_private(3);
        p.list_attach();
    }
    assert_eq!(p.memdesc_type(), MemdescType::Buddy);
    let ListState::Descriptor { live, names_page } = p.list_state() else {
        panic!("no descriptor: {p:?}");
    };
    assert!(live && names_page);
    assert_eq!((p.private(), p.refcount()), (3, 0));
    // SAFETY: as above.
    assert!(!unsafe { p.ref_freeze(0) }, "a listed page has no count");
    let info = <Page16 as BuddyPage>::buddy_cache_info().expect("a cache at 16 bytes");
    assert!(info.active_objs >= 1 && info.objsize == 32 && info.bytes() >= SLAB_BYTES);
    // SAFETY: as above; the links are null.
    unsafe { p.list_detach() };
    assert_eq!(p.memdesc_type(), MemdescType::Misc);
    assert_eq!((p.private(), p.refcount(), p.section()), (3, 0, 9));
    assert!(<Page64 as BuddyPage>::buddy_cache_info().is_none());
}

/// At 8 bytes a page with no descriptor packs its flags, a one-bit count
/// and a 4-bit `private` with its placement; a listed page's word points
/// to a `struct buddy` holding the header; an allocated page's first
/// reference gives it a memdesc and its last takes it away.
#[test]
fn page8_moves_its_state_between_word_and_descriptors() {
    let p = Page8::default();
    let misc = || <Page8 as BuddyPage>::memdesc_cache_info().expect("a memdesc cache at 8 bytes");
    // SAFETY: a local descriptor no one else sees; this test owns it.
    unsafe {
        p.init_reserved(0x1ff_ffff);
        p.set_zone_node(2, 1000);
        p.set_refcount(1);
    }
    assert_eq!((p.memdesc_type(), p.refcount()), (MemdescType::Reserved, 1));
    assert!(p.test(PageFlag::Reserved) && p.test(PageFlag::Present));
    assert_eq!(
        p.memdesc_state(),
        ListState::Detached,
        "memmap init's count is a bit"
    );
    // SAFETY: as above.
    unsafe {
        p.set_refcount(0);
        p.clear(PageFlag::Reserved);
        p.set_private(4);
        p.set(PageFlag::Buddy);
        p.list_attach();
    }
    assert_eq!(p.memdesc_type(), MemdescType::Buddy);
    assert_eq!(
        (p.private(), p.zone_id(), p.node_id(), p.section()),
        (4, 2, 1000, 0x1ff_ffff)
    );
    assert!(p.test(PageFlag::Buddy) && !p.test(PageFlag::Reserved));
    // SAFETY: as above; the links are null.
    unsafe {
        p.list_detach();
        p.clear(PageFlag::Buddy);
        p.set_private(4);
        p.set_refcount(1);
    }
    assert_eq!(p.memdesc_type(), MemdescType::Misc, "handed out: a memdesc");
    assert_eq!(
        p.memdesc_state(),
        ListState::Descriptor {
            live: true,
            names_page: true
        }
    );
    assert!(misc().active_objs >= 1 && misc().objsize == 32);
    p.set_user(UserFlag::Dirty);
    assert!(p.test(PageFlag::Dirty) && p.flags() & PageFlag::Dirty.mask() != 0);
    assert_eq!(
        (p.private(), p.refcount(), p.zone_id(), p.section()),
        (4, 1, 2, 0x1ff_ffff)
    );
    // SAFETY: as above.
    unsafe {
        assert!(!p.ref_freeze(2));
        assert!(p.ref_freeze(1), "the last reference frees the memdesc");
    }
    assert_eq!(p.memdesc_type(), MemdescType::Reserved);
    assert_eq!((p.private(), p.refcount(), p.node_id()), (4, 0, 1000));
    assert!(p.test(PageFlag::Dirty), "the flags come back into the word");
    assert_eq!(p.memdesc_state(), ListState::Detached);
    assert_ne!(
        p.memdesc() as u8 & Page8::PRESENT_BYTE_MASK,
        0,
        "the probe's byte"
    );
}
