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

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use super::{PageFlag, PageLayout, ZONE_DEVICE_ID, packed, sealed};

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
    /// `buddy_list.next` / `pcp_list.next` / `memdesc`.
    list_next_or_memdesc: AtomicUsize,
    /// `buddy_list.prev` / `pcp_list.prev` / `_refcount`.
    list_prev_or_refcount: AtomicUsize,
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
        self.list_next_or_memdesc.load(Relaxed)
    }

    /// `page_ref_count`: the second word of the union, read as the count.
    #[inline(always)]
    pub fn refcount(&self) -> i32 {
        self.list_prev_or_refcount.load(Relaxed) as i32
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
        self.list_next_or_memdesc.store(0, Relaxed);
        self.list_prev_or_refcount.store(0, Relaxed);
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
        self.list_prev_or_refcount.store(1, Relaxed);
    }

    unsafe fn clear_to_hole(&self) {
        self.flags.store(0, Relaxed);
        self.list_next_or_memdesc.store(0, Relaxed);
        self.list_prev_or_refcount.store(0, Relaxed);
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
