//! `Page32`: Matthew Wilcox's 32-byte `struct page` ("State Of The Page",
//! linux-mm, January 2025).
//!
//! Four words, kernel field names:
//! - `flags`: the page flags in the low bits, and above them the section,
//!   node and zone (`page->flags` as the kernel packs it today);
//! - a union of `buddy_list` (a free page's links), `pcp_list` (a page on
//!   a per-CPU list) and `{memdesc, _refcount}` (an allocated page: its
//!   descriptor and its count);
//! - a union of `private` (the buddy order while free) and
//!   `_folio_mapcount`.
//!
//! The sketch has no `page_type`, which is where `PageBuddy` lives since
//! 4.x; here it is a flag bit again ([`PageFlag::Buddy`](super::PageFlag)),
//! as it was before `page_type` existed. `mapping`, the map count and the
//! compound head move to the memdesc's descriptor (the folio).

use std::ptr::{null_mut, without_provenance_mut};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering::Relaxed};

use super::{
    BuddyPage, PageFlag, PageLayout, UserFlag, ZONE_DEVICE_ID, buddy_page, packed, sealed,
};

/// Low bits of `flags` that are page flags; the section, node and zone sit
/// above them.
const FLAG_BITS: u32 = 16;

/// The 32-byte `struct page`. See the module documentation.
///
/// Invariants:
/// - exactly 32 bytes and 32-byte aligned (pinned below): two descriptors
///   per cache line;
/// - an all-zero `Page32` is a hole;
/// - `buddy_list` and `{memdesc, _refcount}` share two words: a page is
///   free (links) or allocated (descriptor and count), never both.
///
/// # Safety
/// Every `unsafe fn` that writes a descriptor has the [layout
/// contract](PageLayout#safety).
#[repr(C, align(32))]
#[derive(Default)]
pub struct Page32 {
    flags: AtomicU64,
    /// `buddy_list.next` / `pcp_list.next` / `memdesc` (a tail's compound
    /// head, bit 0 set, as the kernel's tails point at their folio). A
    /// pointer, so a link keeps its provenance.
    list_next_or_memdesc: AtomicPtr<Page32>,
    /// `buddy_list.prev` / `pcp_list.prev` / `_refcount` (the count as an
    /// address without provenance).
    list_prev_or_refcount: AtomicPtr<Page32>,
    /// `private` / `_folio_mapcount`.
    private: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Page32>() == 32);
const _: () = assert!(std::mem::align_of::<Page32>() == 32);
const _: () = assert!(std::mem::offset_of!(Page32, flags) == 0);
const _: () = assert!(std::mem::offset_of!(Page32, list_next_or_memdesc) == 8);
const _: () = assert!(std::mem::offset_of!(Page32, list_prev_or_refcount) == 16);
const _: () = assert!(std::mem::offset_of!(Page32, private) == 24);

impl Page32 {
    /// The whole flags word.
    #[inline(always)]
    pub fn flags(&self) -> u64 {
        self.flags.load(Relaxed)
    }

    /// Whether the flag is set (`PageX`).
    #[inline(always)]
    pub fn test(&self, flag: PageFlag) -> bool {
        self.flags() & flag.mask() != 0
    }

    /// `memdesc`: the allocated page's descriptor word (the first word of
    /// the union it shares with `buddy_list`).
    #[inline(always)]
    pub fn memdesc(&self) -> usize {
        self.list_next_or_memdesc.load(Relaxed).addr()
    }

    /// `page_ref_count`: the second word of the union, read as the count.
    #[inline(always)]
    pub fn refcount(&self) -> i32 {
        self.list_prev_or_refcount.load(Relaxed).addr() as u32 as i32
    }

    /// Stores a count in the `_refcount` half of the union.
    #[inline(always)]
    fn store_refcount(&self, count: i32) {
        let word = without_provenance_mut(count as u32 as usize);
        self.list_prev_or_refcount.store(word, Relaxed);
    }

    /// `page_private`.
    #[inline(always)]
    pub fn private(&self) -> u64 {
        self.private.load(Relaxed)
    }
}

// SAFETY: (1) every field is an atomic integer, so all-zero bytes are a
// valid value (a hole) and shared references may alias; (2) `flags` is at
// offset 0 and `Present` is its bit 0; (3) 32 bytes, aligned to 32.
unsafe impl PageLayout for Page32 {
    const NAME: &'static str = "32";
    const PRESENT_BYTE_MASK: u8 = 1 << PageFlag::Present as u8;
    const FLAGS_WORD: bool = true;

    unsafe fn init_reserved(&self, section: u64) {
        let flags = PageFlag::Present.mask() | PageFlag::Reserved.mask();
        self.flags
            .store(flags | packed::pack(FLAG_BITS, section, 0, 0), Relaxed);
        self.list_next_or_memdesc.store(null_mut(), Relaxed);
        self.list_prev_or_refcount.store(null_mut(), Relaxed);
        self.private.store(0, Relaxed);
    }

    unsafe fn init_device(&self, section: u64, node: u16) {
        // SAFETY: the caller's contract covers every field.
        unsafe { self.init_reserved(section) };
        let flags = self.flags.load(Relaxed);
        self.flags.store(
            packed::with_zone_node(FLAG_BITS, flags, ZONE_DEVICE_ID, node),
            Relaxed,
        );
        // The pgmap's reference, in the `_refcount` half of the union.
        self.store_refcount(1);
    }

    unsafe fn clear_to_hole(&self) {
        self.flags.store(0, Relaxed);
        self.list_next_or_memdesc.store(null_mut(), Relaxed);
        self.list_prev_or_refcount.store(null_mut(), Relaxed);
        self.private.store(0, Relaxed);
    }

    #[inline(always)]
    fn is_present(&self) -> bool {
        self.test(PageFlag::Present)
    }

    #[inline(always)]
    fn section(&self) -> u64 {
        packed::section(FLAG_BITS, self.flags())
    }

    #[inline(always)]
    fn zone_id(&self) -> u8 {
        packed::zone(FLAG_BITS, self.flags())
    }

    #[inline(always)]
    fn node_id(&self) -> u16 {
        packed::node(FLAG_BITS, self.flags())
    }
}

/// The bits of `flags` that are page flags (below the packed section,
/// node and zone).
const PAGE_FLAGS_MASK: u64 = (1 << FLAG_BITS) - 1;

// SAFETY: (1) the links are the two `AtomicPtr` halves of the union,
// stored and loaded with their provenance; the count, the compound head
// and poison overwrite them, as the contract allows; (2) `private` is its
// own word and the count its union half, untouched while unlisted;
// (3) `set_zone_node` rewrites only the packed zone and node bits, and no
// writer below clears `Present` or the section bits.
unsafe impl BuddyPage for Page32 {
    buddy_page::flags_word_ops!(flags);

    #[inline(always)]
    fn private(&self) -> u64 {
        Page32::private(self)
    }
    #[inline(always)]
    unsafe fn set_private(&self, value: u64) {
        self.private.store(value, Relaxed);
    }
    #[inline(always)]
    fn lru_next(&self) -> *mut Page32 {
        self.list_next_or_memdesc.load(Relaxed)
    }
    #[inline(always)]
    fn lru_prev(&self) -> *mut Page32 {
        self.list_prev_or_refcount.load(Relaxed)
    }
    #[inline(always)]
    unsafe fn set_lru_next(&self, next: *mut Page32) {
        self.list_next_or_memdesc.store(next, Relaxed);
    }
    #[inline(always)]
    unsafe fn set_lru_prev(&self, prev: *mut Page32) {
        self.list_prev_or_refcount.store(prev, Relaxed);
    }
    #[inline(always)]
    unsafe fn set_zone_node(&self, zone: u8, node: u16) {
        let flags = self.flags.load(Relaxed);
        let packed = packed::with_zone_node(FLAG_BITS, flags, zone, node);
        self.flags.store(packed, Relaxed);
    }
    #[inline(always)]
    fn refcount(&self) -> i32 {
        Page32::refcount(self)
    }
    #[inline(always)]
    unsafe fn set_refcount(&self, count: i32) {
        self.store_refcount(count);
    }
    #[inline(always)]
    unsafe fn ref_freeze(&self, expected: i32) -> bool {
        // Relaxed, as at 64 bytes. A listed page's half holds a link, a
        // 32-byte-aligned address that never equals a count of 1, so a
        // free of a listed page fails here as the kernel's union implies.
        let expected = without_provenance_mut(expected as u32 as usize);
        self.list_prev_or_refcount
            .compare_exchange(expected, null_mut(), Relaxed, Relaxed)
            .is_ok()
    }
    #[inline(always)]
    fn compound_head(&self) -> Option<*const Page32> {
        let raw = self.list_next_or_memdesc.load(Relaxed);
        (raw.addr() & 1 == 1).then_some(raw.map_addr(|a| a & !1).cast_const())
    }
    #[inline(always)]
    unsafe fn prep_compound_tail(&self, head: *const Page32) {
        // No `mapping` at 32 bytes (it is the folio's): the head pointer
        // alone, tagged, in the memdesc half of the union.
        let tagged = head.cast_mut().map_addr(|a| a | 1);
        self.list_next_or_memdesc.store(tagged, Relaxed);
    }
    #[inline(always)]
    unsafe fn clear_compound_tail(&self) {
        self.list_next_or_memdesc.store(null_mut(), Relaxed);
    }
    #[inline(always)]
    fn compound_tail_bad_reason(&self, head: *const Page32) -> Option<&'static str> {
        (BuddyPage::compound_head(self) != Some(head)).then_some("compound_head not consistent")
    }
    #[inline(always)]
    fn free_bad_reason(&self) -> Option<&'static str> {
        // `mapping` and the map count are the folio's: a page the buddy
        // hands out has none, so only the flags can be bad.
        Page32::test(self, PageFlag::Locked).then_some("PAGE_FLAGS_CHECK_AT_FREE flag(s) set")
    }
    #[inline(always)]
    unsafe fn clear_flags_at_free(&self) {
        let v = self.flags.load(Relaxed);
        let keep = PageFlag::Present.mask() | !PAGE_FLAGS_MASK;
        self.flags.store(v & keep, Relaxed);
    }
    #[inline(always)]
    unsafe fn poison(&self) {
        self.flags.store(u64::MAX, Relaxed);
        let ones = without_provenance_mut(usize::MAX);
        self.list_next_or_memdesc.store(ones, Relaxed);
        self.list_prev_or_refcount.store(ones, Relaxed);
        self.private.store(u64::MAX, Relaxed);
    }
    #[inline(always)]
    fn is_poisoned(&self) -> bool {
        self.flags.load(Relaxed) == u64::MAX
    }
}

impl sealed::Sealed for Page32 {}

impl std::fmt::Debug for Page32 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Page32")
            .field("flags", &format_args!("{:#x}", self.flags()))
            .field("memdesc", &format_args!("{:#x}", self.memdesc()))
            .field("refcount", &self.refcount())
            .field("private", &self.private())
            .finish()
    }
}
