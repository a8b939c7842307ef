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
