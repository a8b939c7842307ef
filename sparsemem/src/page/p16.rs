//! `Page16`: the flags word and the memdesc word.
//!
//! The step between Wilcox's 32-byte sketch and the 8-byte end state. The
//! flags word is the 32-byte layout's (page flags, and above them the
//! section, node and zone), with `PageBuddy` a flag bit as there. The
//! memdesc word is typed in its low 4 bits ([`MemdescType`]):
//! - `None` (0): a hole or a page nothing has written (count 0, `private`
//!   0);
//! - `Misc`: a bare page the buddy handed out (no folio exists in pfnlab),
//!   its `_refcount` in bits 4..36 and `private` in bits 48..64: the plan
//!   lets a memdesc keep what it needs in the word itself;
//! - `Buddy` (the plan's "Free"): a page on a free, per-CPU or chain list,
//!   pointing to its `struct buddy` ([`Buddy16`]) from the
//!   [`KmemCache`] of this size, which holds the links and the order; the
//!   merge loop's read of a buddy's order is one dependent load through it;
//! - `Tail`: a compound tail, the head page's address (16-byte aligned)
//!   with `private` in bits 48..64 (user addresses are below 2^48,
//!   asserted where one is stored).

use std::ptr::{null_mut, without_provenance_mut};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering::Relaxed};

use super::kmem_cache::{KmemCache, SlabInfo};
use super::p8::TYPE_MASK;
use super::{
    BuddyPage, ListState, MemdescType, PageFlag, PageLayout, UserFlag, ZONE_DEVICE_ID, buddy_page,
    packed, sealed,
};

/// Low bits of `flags` that are page flags, as at 32 bytes.
const FLAG_BITS: u32 = 16;
/// The bits of `flags` that are page flags.
const PAGE_FLAGS_MASK: u64 = (1 << FLAG_BITS) - 1;
/// A `Misc` word's count: bits 4..36.
const COUNT_SHIFT: u32 = 4;
/// A `Misc` or `Tail` word's `private`: bits 48..64.
const PRIVATE_SHIFT: u32 = 48;
/// The address bits of a `Buddy` or `Tail` word.
const ADDR_MASK: usize = ((1 << PRIVATE_SHIFT) - 1) & !(TYPE_MASK as usize);

/// `struct buddy` at 16 bytes: what a listed page's own words held at 32.
///
/// Invariants: allocated from [`BUDDY_CACHE`] and pointed to by exactly
/// one page's memdesc word (`page`) while that page is listed; 32 bytes,
/// 16-byte aligned (pinned below), as the plan wants every memdesc.
#[repr(C, align(16))]
#[derive(Default)]
pub struct Buddy16 {
    /// `buddy_list.next` / `pcp_list.next`.
    next: AtomicPtr<Page16>,
    /// `buddy_list.prev` / `pcp_list.prev`.
    prev: AtomicPtr<Page16>,
    /// The order while free (`private`).
    private: AtomicU64,
    /// The page whose memdesc points here (the checker's back-pointer; a
    /// folio in the plan keeps its pfn the same way).
    page: AtomicPtr<Page16>,
}

const _: () = assert!(std::mem::size_of::<Buddy16>() == 32);
const _: () = assert!(std::mem::align_of::<Buddy16>() == 16);

/// The `kmem_cache` of `struct buddy` every 16-byte allocator shares.
static BUDDY_CACHE: KmemCache<Buddy16> = KmemCache::new();

/// The 16-byte `struct page`. See the module documentation.
///
/// Invariants:
/// - exactly 16 bytes and 16-byte aligned (pinned below): four descriptors
///   per cache line;
/// - an all-zero `Page16` is a hole;
/// - `memdesc` is one of the words the module documentation lists; a
///   `Buddy` word points to a live `Buddy16` naming this page.
///
/// # Safety
/// Every `unsafe fn` that writes a descriptor has the [layout
/// contract](PageLayout#safety).
#[repr(C, align(16))]
#[derive(Default)]
pub struct Page16 {
    flags: AtomicU64,
    /// A pointer, so a descriptor's or a head's address keeps its
    /// provenance.
    memdesc: AtomicPtr<u8>,
}

const _: () = assert!(std::mem::size_of::<Page16>() == 16);
const _: () = assert!(std::mem::align_of::<Page16>() == 16);
const _: () = assert!(std::mem::offset_of!(Page16, flags) == 0);
const _: () = assert!(std::mem::offset_of!(Page16, memdesc) == 8);

/// A `Misc` word: a bare page's count and `private`.
#[inline(always)]
fn misc_word(count: i32, private: u64) -> *mut u8 {
    debug_assert!(private >> (64 - PRIVATE_SHIFT) == 0, "private fits 16 bits");
    without_provenance_mut(
        MemdescType::Misc as usize
            | (count as u32 as usize) << COUNT_SHIFT
            | (private as usize) << PRIVATE_SHIFT,
    )
}

/// `private` as a `Misc` or `Tail` word keeps it.
#[inline(always)]
fn inline_private(word: *mut u8) -> u64 {
    (word.addr() >> PRIVATE_SHIFT) as u64
}

impl Page16 {
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

    /// The memdesc word.
    #[inline(always)]
    pub fn memdesc(&self) -> u64 {
        self.word().addr() as u64
    }

    /// The memdesc type.
    #[inline(always)]
    pub fn memdesc_type(&self) -> MemdescType {
        MemdescType::of(self.memdesc())
    }

    #[inline(always)]
    fn word(&self) -> *mut u8 {
        self.memdesc.load(Relaxed)
    }

    /// The `struct buddy` of a `Buddy` word, else `None`.
    #[inline(always)]
    fn buddy_desc(&self) -> Option<&Buddy16> {
        let word = self.word();
        (MemdescType::of(word.addr() as u64) == MemdescType::Buddy).then(|| {
            // SAFETY: a `Buddy` word holds an object of `BUDDY_CACHE`
            // (type invariant), whose slabs live for the process.
            unsafe { &*word.map_addr(|a| a & ADDR_MASK).cast::<Buddy16>() }
        })
    }
}

// SAFETY: (1) both fields are atomic integers, so all-zero bytes are a
// valid value (a hole) and shared references may alias; (2) `flags` is at
// offset 0 and `Present` is its bit 0; (3) 16 bytes, aligned to 16.
unsafe impl PageLayout for Page16 {
    const NAME: &'static str = "16";
    const PRESENT_BYTE_MASK: u8 = 1 << PageFlag::Present as u8;
    const FLAGS_WORD: bool = true;

    unsafe fn init_reserved(&self, section: u64) {
        let flags = PageFlag::Present.mask() | PageFlag::Reserved.mask();
        self.flags
            .store(flags | packed::pack(FLAG_BITS, section, 0, 0), Relaxed);
        self.memdesc.store(null_mut(), Relaxed);
    }

    unsafe fn init_device(&self, section: u64, node: u16) {
        let flags = PageFlag::Present.mask() | PageFlag::Reserved.mask();
        self.flags.store(
            flags | packed::pack(FLAG_BITS, section, ZONE_DEVICE_ID, node),
            Relaxed,
        );
        self.memdesc.store(null_mut(), Relaxed);
    }

    unsafe fn clear_to_hole(&self) {
        self.flags.store(0, Relaxed);
        self.memdesc.store(null_mut(), Relaxed);
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

// SAFETY: (1) the links are the two `AtomicPtr`s of the page's `struct
// buddy`, stored and loaded with their provenance while the page is
// attached (the list code attaches before linking and detaches after
// unlinking), and nothing but poison or a count written over a listed
// page (both outside the contract) replaces the word; (2) `private` is
// the word's or the descriptor's, moved between them by attach and
// detach, and the count is the `Misc` word's; (3) `set_zone_node`
// rewrites only the packed zone and node bits of `flags`, and no writer
// below clears `Present` or the section bits.
unsafe impl BuddyPage for Page16 {
    const LINKS_IN_PAGE: bool = false;

    buddy_page::flags_word_ops!(flags);

    #[inline(always)]
    fn private(&self) -> u64 {
        match self.buddy_desc() {
            // The dependent load: the order of a free page is its
            // descriptor's.
            Some(desc) => desc.private.load(Relaxed),
            None => match self.memdesc_type() {
                MemdescType::Misc | MemdescType::Tail => inline_private(self.word()),
                _ => 0,
            },
        }
    }
    #[inline(always)]
    unsafe fn set_private(&self, value: u64) {
        if let Some(desc) = self.buddy_desc() {
            desc.private.store(value, Relaxed);
            return;
        }
        let word = self.word();
        let new = match self.memdesc_type() {
            MemdescType::Tail => word.map_addr(|a| {
                a & !(usize::MAX << PRIVATE_SHIFT) | (value as usize) << PRIVATE_SHIFT
            }),
            MemdescType::Misc => misc_word(BuddyPage::refcount(self), value),
            _ => misc_word(0, value),
        };
        self.memdesc.store(new, Relaxed);
    }
    buddy_page::desc_links_ops!();
    #[inline(always)]
    unsafe fn set_zone_node(&self, zone: u8, node: u16) {
        let flags = self.flags.load(Relaxed);
        let packed = packed::with_zone_node(FLAG_BITS, flags, zone, node);
        self.flags.store(packed, Relaxed);
    }
    #[inline(always)]
    fn refcount(&self) -> i32 {
        match self.memdesc_type() {
            MemdescType::Misc => (self.word().addr() >> COUNT_SHIFT) as u32 as i32,
            _ => 0,
        }
    }
    #[inline(always)]
    unsafe fn set_refcount(&self, count: i32) {
        // A listed page has no count (its word points to its links); the
        // contract keeps the allocator from writing one there.
        debug_assert!(self.buddy_desc().is_none(), "a count over a listed page");
        let private = match self.memdesc_type() {
            MemdescType::Misc | MemdescType::Tail => inline_private(self.word()),
            _ => 0,
        };
        self.memdesc.store(misc_word(count, private), Relaxed);
    }
    #[inline(always)]
    unsafe fn ref_freeze(&self, expected: i32) -> bool {
        // Relaxed, as at 64 bytes. Only a `Misc` word has a count: a
        // listed page's word is a descriptor pointer and never matches.
        let word = self.word();
        if self.memdesc_type() != MemdescType::Misc || BuddyPage::refcount(self) != expected {
            return false;
        }
        let frozen = misc_word(0, inline_private(word));
        self.memdesc
            .compare_exchange(word, frozen, Relaxed, Relaxed)
            .is_ok()
    }
    #[inline(always)]
    fn compound_head(&self) -> Option<*const Page16> {
        (self.memdesc_type() == MemdescType::Tail).then(|| {
            self.word()
                .map_addr(|a| a & ADDR_MASK)
                .cast::<Page16>()
                .cast_const()
        })
    }
    #[inline(always)]
    unsafe fn prep_compound_tail(&self, head: *const Page16) {
        let private = BuddyPage::private(self);
        let tagged = head.cast_mut().cast::<u8>().map_addr(|a| {
            assert_eq!(a & !ADDR_MASK, 0, "a head page's address fits 48 bits");
            a | MemdescType::Tail as usize | (private as usize) << PRIVATE_SHIFT
        });
        self.memdesc.store(tagged, Relaxed);
    }
    #[inline(always)]
    unsafe fn clear_compound_tail(&self) {
        let private = inline_private(self.word());
        self.memdesc.store(misc_word(0, private), Relaxed);
    }
    #[inline(always)]
    fn compound_tail_bad_reason(&self, head: *const Page16) -> Option<&'static str> {
        (BuddyPage::compound_head(self) != Some(head)).then_some("compound_head not consistent")
    }
    #[inline(always)]
    fn free_bad_reason(&self) -> Option<&'static str> {
        // As at 32 bytes: a page the buddy hands out has no folio, so only
        // the flags can be bad.
        Page16::test(self, PageFlag::Locked).then_some("PAGE_FLAGS_CHECK_AT_FREE flag(s) set")
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
        self.memdesc
            .store(without_provenance_mut(usize::MAX), Relaxed);
    }
    #[inline(always)]
    fn is_poisoned(&self) -> bool {
        self.flags.load(Relaxed) == u64::MAX
    }
    unsafe fn list_attach(&self) {
        debug_assert!(self.buddy_desc().is_none(), "attached twice");
        debug_assert_eq!(BuddyPage::refcount(self), 0, "a listed page has no count");
        let private = BuddyPage::private(self);
        let desc = BUDDY_CACHE.alloc();
        // SAFETY: a fresh object of the cache, no one else's yet.
        let d = unsafe { &*desc };
        d.private.store(private, Relaxed);
        d.page.store(std::ptr::from_ref(self).cast_mut(), Relaxed);
        let word = desc.cast::<u8>().map_addr(|a| {
            assert_eq!(a & !ADDR_MASK, 0, "a slab object's address fits 48 bits");
            a | MemdescType::Buddy as usize
        });
        self.memdesc.store(word, Relaxed);
    }
    unsafe fn list_detach(&self) {
        let desc = self
            .buddy_desc()
            .expect("detaching a page that is not attached");
        debug_assert!(desc.next.load(Relaxed).is_null() && desc.prev.load(Relaxed).is_null());
        let private = desc.private.load(Relaxed);
        let obj = std::ptr::from_ref(desc).cast_mut();
        self.memdesc.store(misc_word(0, private), Relaxed);
        // SAFETY: the object was this page's, and the page's word no longer
        // points to it.
        unsafe { BUDDY_CACHE.free(obj) };
    }
    fn list_state(&self) -> ListState {
        match self.buddy_desc() {
            None => ListState::Detached,
            Some(d) => {
                let live = BUDDY_CACHE.is_live(d);
                let names_page =
                    live && d.page.load(Relaxed).cast_const() == std::ptr::from_ref(self);
                ListState::Descriptor { live, names_page }
            }
        }
    }
    fn buddy_cache_info() -> Option<SlabInfo> {
        Some(BUDDY_CACHE.info())
    }
}

impl sealed::Sealed for Page16 {}

impl std::fmt::Debug for Page16 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Page16")
            .field("flags", &format_args!("{:#x}", self.flags()))
            .field("memdesc", &format_args!("{:#x}", self.memdesc()))
            .field("refcount", &BuddyPage::refcount(self))
            .field("private", &BuddyPage::private(self))
            .finish()
    }
}
