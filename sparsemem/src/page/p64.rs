//! `Page64`: today's 64-byte `struct page`, one cache line per frame.
//!
//! Every field the allocator's hot path decides by has its own slot, as in
//! the kernel's `struct page` before memdescs: the flags word, the two
//! `lru` links that thread the free lists through the pages, `private`
//! (the buddy order), the section number (`SECTION_IN_PAGE_FLAGS`, used by
//! SPARSEMEM's `page_to_pfn`), the zone/node ids, the reference and map
//! counts and `mapping`. A tail page of a compound page keeps
//! `compound_head` (its head's address, bit 0 set) where a listed page
//! keeps `lru.next`, as the kernel overlays them.

use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicU64, Ordering::Relaxed};

use super::{
    BuddyPage, PageFlag, PageLayout, TAIL_MAPPING, UserFlag, ZONE_DEVICE_ID, buddy_page, sealed,
};

/// The 64-byte `struct page` analogue. See the module documentation.
///
/// Invariants:
/// - exactly 64 bytes and 64-byte aligned (pinned below), so one descriptor is
///   one cache line;
/// - an all-zero `Page64` is a hole: not [`PageFlag::Present`];
/// - `lru_next` / `lru_prev` are only meaningful while the page is on a list
///   owned by the allocator; this type never dereferences them.
///
/// # Safety
/// Every `unsafe fn` that writes a descriptor has the [layout
/// contract](PageLayout#safety), written once for every size.
#[repr(C, align(64))]
#[derive(Default)]
pub struct Page64 {
    flags: AtomicU64,
    lru_next: AtomicPtr<Page64>,
    lru_prev: AtomicPtr<Page64>,
    private: AtomicU64,
    section: AtomicU32,
    zone_node: AtomicU32,
    refcount: AtomicI32,
    mapcount: AtomicI32,
    mapping: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Page64>() == 64);
const _: () = assert!(std::mem::align_of::<Page64>() == 64);
const _: () = assert!(std::mem::offset_of!(Page64, flags) == 0);

impl Page64 {
    /// An all-zero descriptor: a hole.
    pub const fn new_zeroed() -> Page64 {
        Page64 {
            flags: AtomicU64::new(0),
            lru_next: AtomicPtr::new(std::ptr::null_mut()),
            lru_prev: AtomicPtr::new(std::ptr::null_mut()),
            private: AtomicU64::new(0),
            section: AtomicU32::new(0),
            zone_node: AtomicU32::new(0),
            refcount: AtomicI32::new(0),
            mapcount: AtomicI32::new(0),
            mapping: AtomicU64::new(0),
        }
    }

    /// Initialises a descriptor as a memory model does at memmap setup
    /// (`__init_single_page`): present, reserved, in `section`, on no list.
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns this field.
    pub unsafe fn init_reserved(&self, section: u64) {
        self.flags.store(
            PageFlag::Present.mask() | PageFlag::Reserved.mask(),
            Relaxed,
        );
        self.lru_next.store(std::ptr::null_mut(), Relaxed);
        self.lru_prev.store(std::ptr::null_mut(), Relaxed);
        self.private.store(0, Relaxed);
        // Section numbers fit in 32 bits for every geometry (at most 2^31
        // sections with 57 address bits and 2 MiB sections).
        self.section.store(section as u32, Relaxed);
        self.zone_node.store(0, Relaxed);
        self.refcount.store(0, Relaxed);
        self.mapcount.store(0, Relaxed);
        self.mapping.store(0, Relaxed);
    }

    /// Initialises a descriptor of device memory as
    /// `memmap_init_zone_device` does: present, reserved, in the
    /// [`ZONE_DEVICE_ID`] zone of `node`, one reference (the pgmap's).
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns this field.
    pub unsafe fn init_device(&self, section: u64, node: u16) {
        // SAFETY: the caller's contract covers every field.
        unsafe { self.init_reserved(section) };
        self.zone_node
            .store(u32::from(ZONE_DEVICE_ID) | (u32::from(node) << 16), Relaxed);
        self.refcount.store(1, Relaxed);
    }

    /// `is_zone_device_page`: the descriptor is device memory.
    #[inline(always)]
    pub fn is_zone_device(&self) -> bool {
        self.is_present() && self.zone_id() == ZONE_DEVICE_ID
    }

    /// Turns the descriptor back into a hole (all zero).
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns this field.
    pub unsafe fn clear_to_hole(&self) {
        self.flags.store(0, Relaxed);
        self.lru_next.store(std::ptr::null_mut(), Relaxed);
        self.lru_prev.store(std::ptr::null_mut(), Relaxed);
        self.private.store(0, Relaxed);
        self.section.store(0, Relaxed);
        self.zone_node.store(0, Relaxed);
        self.refcount.store(0, Relaxed);
        self.mapcount.store(0, Relaxed);
        self.mapping.store(0, Relaxed);
    }

    /// `page_init_poison`: every byte 0xff, as a `CONFIG_DEBUG_VM` kernel
    /// leaves a memmap entry that no `__init_single_page` has written yet
    /// (deferred struct page init leaves the free pages past
    /// `first_deferred_pfn` so until their thread or `deferred_grow_zone`
    /// reaches them). A poisoned page reads as present (bit 0 of byte 0 is
    /// set), so a one-byte probe cannot tell it from a real one;
    /// [`Page64::is_poisoned`] can.
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns every field, and no list
    /// links the page.
    pub unsafe fn poison(&self) {
        self.flags.store(u64::MAX, Relaxed);
        self.lru_next.store(usize::MAX as *mut Page64, Relaxed);
        self.lru_prev.store(usize::MAX as *mut Page64, Relaxed);
        self.private.store(u64::MAX, Relaxed);
        self.section.store(u32::MAX, Relaxed);
        self.zone_node.store(u32::MAX, Relaxed);
        self.refcount.store(-1, Relaxed);
        self.mapcount.store(-1, Relaxed);
        self.mapping.store(u64::MAX, Relaxed);
    }

    /// `PagePoisoned`: the flags word is all ones (`PAGE_POISON_PATTERN`),
    /// so no `__init_single_page` has written the descriptor.
    #[inline(always)]
    pub fn is_poisoned(&self) -> bool {
        self.flags.load(Relaxed) == u64::MAX
    }

    /// Whether the flag is set (`PageX`).
    #[inline(always)]
    pub fn test(&self, flag: PageFlag) -> bool {
        self.flags.load(Relaxed) & flag.mask() != 0
    }

    /// Atomic set of a user flag (`SetPageReferenced`, a `lock or`): it
    /// changes only that bit, so it cannot disturb the owners' flags.
    #[inline(always)]
    pub fn set_user(&self, flag: UserFlag) {
        self.flags.fetch_or(PageFlag::from(flag).mask(), Relaxed);
    }

    /// Atomic clear of a user flag (`ClearPageReferenced`, a `lock and`).
    #[inline(always)]
    pub fn clear_user(&self, flag: UserFlag) {
        self.flags.fetch_and(!PageFlag::from(flag).mask(), Relaxed);
    }

    /// Atomic set (`SetPageX`, a `lock or`).
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns `flag`.
    #[inline(always)]
    pub unsafe fn set(&self, flag: PageFlag) {
        self.flags.fetch_or(flag.mask(), Relaxed);
    }

    /// Atomic clear (`ClearPageX`, a `lock and`).
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns `flag`.
    #[inline(always)]
    pub unsafe fn clear(&self, flag: PageFlag) {
        self.flags.fetch_and(!flag.mask(), Relaxed);
    }

    /// Non-atomic set (`__SetPageX`): load + store; the caller excludes other
    /// writers of this page's flags (the zone lock).
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety) for the whole flags word: the caller excludes
    /// every other writer of it, or a concurrent write would be lost.
    #[inline(always)]
    pub unsafe fn set_nonatomic(&self, flag: PageFlag) {
        let v = self.flags.load(Relaxed);
        self.flags.store(v | flag.mask(), Relaxed);
    }

    /// Non-atomic clear (`__ClearPageX`); same contract as
    /// [`Page64::set_nonatomic`].
    ///
    /// # Safety
    /// As for [`Page64::set_nonatomic`].
    #[inline(always)]
    pub unsafe fn clear_nonatomic(&self, flag: PageFlag) {
        let v = self.flags.load(Relaxed);
        self.flags.store(v & !flag.mask(), Relaxed);
    }

    /// `set_bit` as a uniprocessor kernel compiles it: one read-modify-write
    /// instruction on the flags word with no `lock` prefix (`orq` on
    /// x86_64; elsewhere, and under Miri, a load and a store). It is atomic
    /// against interrupts on its own CPU, which is all a UP kernel needs,
    /// and not against another CPU. Works for owner and user flags alike.
    ///
    /// # Safety
    /// As for [`Page64::set_nonatomic`]: the caller excludes every other
    /// writer of the flags word, or a concurrent write would be lost.
    #[inline(always)]
    pub unsafe fn set_unlocked(&self, flag: PageFlag) {
        // SAFETY: the caller excludes other writers of the flags word.
        unsafe { buddy_page::or_unlocked(&self.flags, flag.mask()) }
    }

    /// `clear_bit` as a uniprocessor kernel compiles it (`andq`, no
    /// `lock`); see [`Page64::set_unlocked`].
    ///
    /// # Safety
    /// As for [`Page64::set_unlocked`].
    #[inline(always)]
    pub unsafe fn clear_unlocked(&self, flag: PageFlag) {
        // SAFETY: as for `set_unlocked`.
        unsafe { buddy_page::and_unlocked(&self.flags, !flag.mask()) }
    }

    /// The whole flags word.
    #[inline(always)]
    pub fn flags(&self) -> u64 {
        self.flags.load(Relaxed)
    }

    /// Whether a memory model initialised this descriptor.
    #[inline(always)]
    pub fn is_present(&self) -> bool {
        self.test(PageFlag::Present)
    }

    /// `page_private`: the buddy order while [`PageFlag::Buddy`] is set.
    #[inline(always)]
    pub fn private(&self) -> u64 {
        self.private.load(Relaxed)
    }

    /// `set_page_private`.
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns this field.
    #[inline(always)]
    pub unsafe fn set_private(&self, value: u64) {
        self.private.store(value, Relaxed);
    }

    /// `lru.next`.
    #[inline(always)]
    pub fn lru_next(&self) -> *mut Page64 {
        self.lru_next.load(Relaxed)
    }

    /// `lru.prev`.
    #[inline(always)]
    pub fn lru_prev(&self) -> *mut Page64 {
        self.lru_prev.load(Relaxed)
    }

    /// Sets `lru.next`.
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns this field.
    #[inline(always)]
    pub unsafe fn set_lru_next(&self, next: *mut Page64) {
        self.lru_next.store(next, Relaxed);
    }

    /// Sets `lru.prev`.
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns this field.
    #[inline(always)]
    pub unsafe fn set_lru_prev(&self, prev: *mut Page64) {
        self.lru_prev.store(prev, Relaxed);
    }

    /// `page_to_section`: the section number stored at init.
    #[inline(always)]
    pub fn section(&self) -> u64 {
        u64::from(self.section.load(Relaxed))
    }

    /// `page_zonenum`.
    #[inline(always)]
    pub fn zone_id(&self) -> u8 {
        (self.zone_node.load(Relaxed) & 0xff) as u8
    }

    /// `page_to_nid`.
    #[inline(always)]
    pub fn node_id(&self) -> u16 {
        (self.zone_node.load(Relaxed) >> 16) as u16
    }

    /// `set_page_links`: zone and node ids.
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns this field.
    #[inline(always)]
    pub unsafe fn set_zone_node(&self, zone: u8, node: u16) {
        self.zone_node
            .store(u32::from(zone) | (u32::from(node) << 16), Relaxed);
    }

    /// `page_ref_count`.
    #[inline(always)]
    pub fn refcount(&self) -> i32 {
        self.refcount.load(Relaxed)
    }

    /// `page_ref_freeze`: sets the count from `expected` to 0 atomically;
    /// false (and no change) when the count was not `expected`. Used by the
    /// free path so two racing frees cannot both succeed.
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns this field.
    #[inline(always)]
    pub unsafe fn ref_freeze(&self, expected: i32) -> bool {
        // Relaxed: the page's other fields are published by the zone lock
        // or the owning thread, not by the count.
        self.refcount
            .compare_exchange(expected, 0, Relaxed, Relaxed)
            .is_ok()
    }

    /// `set_page_count`.
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns this field.
    #[inline(always)]
    pub unsafe fn set_refcount(&self, count: i32) {
        self.refcount.store(count, Relaxed);
    }

    /// `page_mapcount`: how many page tables map the page (the kernel keeps
    /// `_mapcount` biased by -1; pfnlab keeps the count itself, so a zeroed
    /// descriptor is unmapped).
    #[inline(always)]
    pub fn mapcount(&self) -> i32 {
        self.mapcount.load(Relaxed)
    }

    /// One more mapping of the page (`page_add_*_rmap`).
    pub fn inc_mapcount(&self) {
        self.mapcount.fetch_add(1, Relaxed);
    }

    /// One mapping fewer (`page_remove_rmap`).
    pub fn dec_mapcount(&self) {
        self.mapcount.fetch_sub(1, Relaxed);
    }

    /// `page->mapping`: the address space the page belongs to (0: none).
    #[inline(always)]
    pub fn mapping(&self) -> u64 {
        self.mapping.load(Relaxed)
    }

    /// Sets `page->mapping`. The allocator never follows it; it refuses to
    /// free a page whose mapping is set, and keeps [`TAIL_MAPPING`](super::TAIL_MAPPING) in the
    /// tails of a compound page.
    pub fn set_mapping(&self, mapping: u64) {
        self.mapping.store(mapping, Relaxed);
    }

    /// `compound_head` of a tail page: its head's descriptor, or `None` for
    /// a page that is not a tail (bit 0 of the `lru.next` slot clear).
    #[inline(always)]
    pub fn compound_head(&self) -> Option<*const Page64> {
        let raw = self.lru_next.load(Relaxed) as usize;
        (raw & 1 == 1).then_some((raw & !1) as *const Page64)
    }

    /// `set_compound_head`: makes the page a tail of `head` (`None`: no
    /// longer a tail), in the `lru.next` slot as the kernel overlays them.
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns the list links (the page is on
    /// no list).
    #[inline(always)]
    pub unsafe fn set_compound_head(&self, head: Option<*const Page64>) {
        let raw = head.map_or(0, |h| h as usize | 1);
        self.lru_next.store(raw as *mut Page64, Relaxed);
    }

    /// `page->flags &= ~PAGE_FLAGS_CHECK_AT_PREP` as the free path does:
    /// every flag but the memory model's `Present` cleared, with one plain
    /// store.
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety) for the whole flags word.
    #[inline(always)]
    pub unsafe fn clear_flags_at_free(&self) {
        let v = self.flags.load(Relaxed);
        self.flags.store(v & PageFlag::Present.mask(), Relaxed);
    }
}

// SAFETY: (1) every field is an atomic integer or pointer, so all-zero bytes
// are a valid value and shared references may alias; (2) `flags` is at
// offset 0 and `Present` is its bit 0, so byte 0 carries it; (3) the
// writers below keep each field's owner, as the contract says.
unsafe impl PageLayout for Page64 {
    const NAME: &'static str = "64";
    const PRESENT_BYTE_MASK: u8 = 1 << PageFlag::Present as u8;
    const FLAGS_WORD: bool = true;

    #[inline(always)]
    unsafe fn init_reserved(&self, section: u64) {
        // SAFETY: the caller's contract.
        unsafe { Page64::init_reserved(self, section) }
    }

    #[inline(always)]
    unsafe fn init_device(&self, section: u64, node: u16) {
        // SAFETY: the caller's contract.
        unsafe { Page64::init_device(self, section, node) }
    }

    #[inline(always)]
    unsafe fn clear_to_hole(&self) {
        // SAFETY: the caller's contract.
        unsafe { Page64::clear_to_hole(self) }
    }

    #[inline(always)]
    fn is_present(&self) -> bool {
        Page64::is_present(self)
    }

    #[inline(always)]
    fn section(&self) -> u64 {
        Page64::section(self)
    }

    #[inline(always)]
    fn zone_id(&self) -> u8 {
        Page64::zone_id(self)
    }

    #[inline(always)]
    fn node_id(&self) -> u16 {
        Page64::node_id(self)
    }
}

// SAFETY: (1) the links are their own `AtomicPtr` fields, shared only
// with `compound_head` (the `lru.next` overlay) and `poison`; (2) `private`
// and `refcount` have their own fields; (3) `zone_node` is its own field
// and no writer below touches `Present` or `section`.
unsafe impl BuddyPage for Page64 {
    #[inline(always)]
    fn test(&self, flag: PageFlag) -> bool {
        Page64::test(self, flag)
    }
    #[inline(always)]
    fn flags(&self) -> u64 {
        Page64::flags(self)
    }
    #[inline(always)]
    unsafe fn set(&self, flag: PageFlag) {
        // SAFETY: the caller's contract.
        unsafe { Page64::set(self, flag) }
    }
    #[inline(always)]
    unsafe fn clear(&self, flag: PageFlag) {
        // SAFETY: the caller's contract.
        unsafe { Page64::clear(self, flag) }
    }
    #[inline(always)]
    unsafe fn set_nonatomic(&self, flag: PageFlag) {
        // SAFETY: the caller's contract.
        unsafe { Page64::set_nonatomic(self, flag) }
    }
    #[inline(always)]
    unsafe fn clear_nonatomic(&self, flag: PageFlag) {
        // SAFETY: the caller's contract.
        unsafe { Page64::clear_nonatomic(self, flag) }
    }
    #[inline(always)]
    unsafe fn set_unlocked(&self, flag: PageFlag) {
        // SAFETY: the caller's contract.
        unsafe { Page64::set_unlocked(self, flag) }
    }
    #[inline(always)]
    unsafe fn clear_unlocked(&self, flag: PageFlag) {
        // SAFETY: the caller's contract.
        unsafe { Page64::clear_unlocked(self, flag) }
    }
    #[inline(always)]
    fn set_user(&self, flag: UserFlag) {
        Page64::set_user(self, flag)
    }
    #[inline(always)]
    fn clear_user(&self, flag: UserFlag) {
        Page64::clear_user(self, flag)
    }
    #[inline(always)]
    fn private(&self) -> u64 {
        Page64::private(self)
    }
    #[inline(always)]
    unsafe fn set_private(&self, value: u64) {
        // SAFETY: the caller's contract.
        unsafe { Page64::set_private(self, value) }
    }
    #[inline(always)]
    fn lru_next(&self) -> *mut Page64 {
        Page64::lru_next(self)
    }
    #[inline(always)]
    fn lru_prev(&self) -> *mut Page64 {
        Page64::lru_prev(self)
    }
    #[inline(always)]
    unsafe fn set_lru_next(&self, next: *mut Page64) {
        // SAFETY: the caller's contract.
        unsafe { Page64::set_lru_next(self, next) }
    }
    #[inline(always)]
    unsafe fn set_lru_prev(&self, prev: *mut Page64) {
        // SAFETY: the caller's contract.
        unsafe { Page64::set_lru_prev(self, prev) }
    }
    #[inline(always)]
    unsafe fn set_zone_node(&self, zone: u8, node: u16) {
        // SAFETY: the caller's contract.
        unsafe { Page64::set_zone_node(self, zone, node) }
    }
    #[inline(always)]
    fn refcount(&self) -> i32 {
        Page64::refcount(self)
    }
    #[inline(always)]
    unsafe fn set_refcount(&self, count: i32) {
        // SAFETY: the caller's contract.
        unsafe { Page64::set_refcount(self, count) }
    }
    #[inline(always)]
    unsafe fn ref_freeze(&self, expected: i32) -> bool {
        // SAFETY: the caller's contract.
        unsafe { Page64::ref_freeze(self, expected) }
    }
    #[inline(always)]
    fn compound_head(&self) -> Option<*const Page64> {
        Page64::compound_head(self)
    }
    #[inline(always)]
    unsafe fn prep_compound_tail(&self, head: *const Page64) {
        self.set_mapping(TAIL_MAPPING);
        // SAFETY: the caller's contract.
        unsafe { self.set_compound_head(Some(head)) }
    }
    #[inline(always)]
    unsafe fn clear_compound_tail(&self) {
        self.set_mapping(0);
        // SAFETY: the caller's contract.
        unsafe { self.set_compound_head(None) }
    }
    #[inline(always)]
    fn compound_tail_bad_reason(&self, head: *const Page64) -> Option<&'static str> {
        if self.mapping() != TAIL_MAPPING {
            Some("corrupted mapping in tail page")
        } else if Page64::compound_head(self) != Some(head) {
            Some("compound_head not consistent")
        } else if self.mapcount() != 0 {
            Some("nonzero mapcount")
        } else {
            None
        }
    }
    #[inline(always)]
    fn free_bad_reason(&self) -> Option<&'static str> {
        if self.mapcount() != 0 {
            Some("nonzero mapcount")
        } else if self.mapping() != 0 {
            Some("non-NULL mapping")
        } else if Page64::test(self, PageFlag::Locked) {
            Some("PAGE_FLAGS_CHECK_AT_FREE flag(s) set")
        } else {
            None
        }
    }
    #[inline(always)]
    unsafe fn clear_flags_at_free(&self) {
        // SAFETY: the caller's contract.
        unsafe { Page64::clear_flags_at_free(self) }
    }
    #[inline(always)]
    unsafe fn poison(&self) {
        // SAFETY: the caller's contract.
        unsafe { Page64::poison(self) }
    }
    #[inline(always)]
    fn is_poisoned(&self) -> bool {
        Page64::is_poisoned(self)
    }
}

impl sealed::Sealed for Page64 {}

impl std::fmt::Debug for Page64 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Page64")
            .field("flags", &format_args!("{:#x}", self.flags()))
            .field("private", &self.private())
            .field("section", &self.section())
            .field("zone", &self.zone_id())
            .field("node", &self.node_id())
            .field("refcount", &self.refcount())
            .field("mapcount", &self.mapcount())
            .field("mapping", &format_args!("{:#x}", self.mapping()))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_page_is_a_hole_and_init_makes_it_present() {
        let p = Page64::default();
        assert!(!p.is_present());
        // SAFETY: a local descriptor no one else sees.
        unsafe { p.init_reserved(7) };
        assert!(p.is_present() && p.test(PageFlag::Reserved));
        assert_eq!(p.section(), 7);
        assert_eq!(p.flags() & 0xff, p.flags(), "init flags live in byte 0");
    }

    #[test]
    fn atomic_and_nonatomic_ops_agree() {
        let p = Page64::default();
        // SAFETY: a local descriptor no one else sees; this test owns it.
        unsafe {
            p.set(PageFlag::Buddy);
            p.set_nonatomic(PageFlag::Dirty);
        }
        assert!(p.test(PageFlag::Buddy) && p.test(PageFlag::Dirty));
        // SAFETY: as above.
        unsafe { p.clear_nonatomic(PageFlag::Buddy) };
        p.clear_user(UserFlag::Dirty);
        assert_eq!(p.flags(), 0);
        p.set_user(UserFlag::Referenced);
        assert!(p.test(PageFlag::Referenced));
        // SAFETY: as above.
        unsafe { p.set_zone_node(3, 513) };
        assert_eq!((p.zone_id(), p.node_id()), (3, 513));
    }
}
