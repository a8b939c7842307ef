//! `Page8`: the memdesc word alone, the Memdescs plan's end state
//! (`struct page { unsigned long memdesc; }`).
//!
//! The low 4 bits are the memdesc type ([`MemdescType`]). With no flags
//! word, everything the allocator reads lives either in the word itself
//! or in a separately allocated, 16-byte-aligned descriptor the word
//! points to:
//! - `Reserved` (1) and `Device` (2) are the pages with **no
//!   descriptor**: memmap init's reserved pages, a free block's interior
//!   pages, the non-head pages of a non-compound allocation, device
//!   memory. The 60 bits above the type are packed as `page->flags` packs
//!   its upper bits today: the seven page flags but `PG_present` (which
//!   the type says) in bits 4..11, a one-bit count in bit 11 (memmap
//!   init's `init_page_count` of a reserved page, the pgmap's reference of
//!   a device page), a 5-bit `private` in bits 12..17 (the order a block
//!   head carries between its list and its holder, up to
//!   `MAX_PAGE_ORDER_LIMIT`), then zone (8 bits), node (12) and section
//!   (27: one fewer than at 32 and 16 bytes, still more than
//!   `MAX_SECTIONS_SHIFT`);
//! - `Buddy` (5, the plan's "Free"): a free, per-CPU or chained page,
//!   pointing to its `struct buddy` ([`Buddy8`]) from this size's
//!   `struct buddy` cache: the links, the order, and the header every
//!   8-byte descriptor carries (the packed flags, zone, node and section,
//!   which the page can no longer hold);
//! - `Misc` (3): an allocated page the buddy handed out, pointing to its
//!   own memdesc ([`Misc8`], pfnlab's stand-in for the folio or other
//!   memdesc its user would own) from its own cache: the header,
//!   `_refcount` and `private`. It is allocated when the page gets its
//!   first reference (`set_page_refcounted` in `prep_new_page`) and freed
//!   when the last is dropped (the free path's `page_ref_freeze`), so it
//!   lives exactly while the count is non-zero, as a folio does;
//! - `Tail` (6): a compound tail, its head page's address (16-byte
//!   aligned: a compound head's pfn is even) with `private` in bits
//!   48..64. Its flags, zone, node and section are its head's: two
//!   dependent loads;
//! - `Poisoned` (15): `page_init_poison`'s 0xff, never dereferenced.
//!
//! `page_zone()`, `page_to_nid()` and SPARSEMEM's `page_to_section()`
//! therefore cost nothing more for a page with no descriptor and one
//! dependent load more for a page with one (two for a tail).
//!
//! Type 0 is "no descriptor": an all-zero word is a hole, and the fault
//! probe's one-byte load reads the type in the low nibble of byte 0.

use std::ptr::{null_mut, without_provenance_mut};
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, Ordering::Relaxed};

mod buddy;

use super::kmem_cache::KmemCache;
use super::{BuddyPage, PageFlag, PageLayout, ZONE_DEVICE_ID, buddy_page, packed, sealed};

/// Bits of the memdesc type, in the low bits of the word.
pub const MEMDESC_TYPE_BITS: u32 = 4;
pub(super) const TYPE_MASK: u64 = (1 << MEMDESC_TYPE_BITS) - 1;
/// Page flag `n` (1..8) is bit `FLAG_SHIFT + n` of a packed word and of a
/// descriptor's header; `PG_present` (0) is the type's.
const FLAG_SHIFT: u32 = MEMDESC_TYPE_BITS - 1;
/// The page-flag bits of a packed word or header.
const FLAGS_MASK: u64 = 0x7f << MEMDESC_TYPE_BITS;
/// The user flags' bits (`PG_locked`, `PG_referenced`, `PG_dirty`).
const USER_MASK: u64 =
    (PageFlag::Locked.mask() | PageFlag::Referenced.mask() | PageFlag::Dirty.mask()) << FLAG_SHIFT;
/// A packed word's one-bit count.
const COUNT_BIT: u64 = 1 << 11;
/// A packed word's `private`: bits 12..17.
const PRIVATE_SHIFT: u32 = 12;
/// The largest `private` a packed word holds.
const PACKED_PRIVATE_MAX: u64 = 31;
const PRIVATE_MASK: u64 = PACKED_PRIVATE_MAX << PRIVATE_SHIFT;
/// Where the packed zone, node and section start.
const PACK_LOW: u32 = 17;
/// What a descriptor's header keeps of a packed word: the flags and the
/// zone, node and section.
const HEADER_MASK: u64 = !(TYPE_MASK | COUNT_BIT | PRIVATE_MASK);
/// A `Tail` word's `private`: bits 48..64.
const TAIL_PRIVATE_SHIFT: u32 = 48;
/// The address bits of a `Tail` word.
const TAIL_ADDR_MASK: usize = ((1 << TAIL_PRIVATE_SHIFT) - 1) & !(TYPE_MASK as usize);

const _: () = assert!(PACK_LOW + ZONES_WIDTH + NODES_WIDTH + SECTIONS_WIDTH == 64);
const _: () = assert!(FLAGS_MASK & (COUNT_BIT | PRIVATE_MASK | TYPE_MASK) == 0);
const _: () = assert!(PACKED_PRIVATE_MAX >= crate::MAX_PAGE_ORDER_LIMIT as u64);

/// Bits of zone id, as `packed` has them.
const ZONES_WIDTH: u32 = 8;
/// Bits of node id, as `packed` has them.
const NODES_WIDTH: u32 = 12;
/// Bits of section number: one fewer than `packed`'s, still enough for
/// `MAX_SECTIONS_SHIFT`, so that `private` holds every order.
pub(crate) const SECTIONS_WIDTH: u32 = packed::SECTIONS_WIDTH - 1;

/// `page->flags`' upper bits as the kernel packs them, above the 8-byte
/// word's low [`PACK_LOW`] bits (type, flags, count, `private`).
mod pack8 {
    use super::{NODES_WIDTH, PACK_LOW, SECTIONS_WIDTH, ZONES_WIDTH};

    /// The packed placement of `section`, `zone`, `node`.
    #[inline(always)]
    pub(super) const fn pack(section: u64, zone: u8, node: u16) -> u64 {
        debug_assert!(section >> SECTIONS_WIDTH == 0 && node >> NODES_WIDTH == 0);
        ((zone as u64) << PACK_LOW)
            | ((node as u64) << (PACK_LOW + ZONES_WIDTH))
            | (section << (PACK_LOW + ZONES_WIDTH + NODES_WIDTH))
    }

    /// The zone id of a packed word.
    #[inline(always)]
    pub(super) const fn zone(word: u64) -> u8 {
        (word >> PACK_LOW) as u8
    }

    /// The node id of a packed word.
    #[inline(always)]
    pub(super) const fn node(word: u64) -> u16 {
        ((word >> (PACK_LOW + ZONES_WIDTH)) & ((1 << NODES_WIDTH) - 1)) as u16
    }

    /// The section number of a packed word.
    #[inline(always)]
    pub(super) const fn section(word: u64) -> u64 {
        word >> (PACK_LOW + ZONES_WIDTH + NODES_WIDTH)
    }

    /// `word` with its zone and node replaced.
    #[inline(always)]
    pub(super) const fn with_zone_node(word: u64, zone: u8, node: u16) -> u64 {
        let mask = ((1u64 << (ZONES_WIDTH + NODES_WIDTH)) - 1) << PACK_LOW;
        (word & !mask) | pack(0, zone, node)
    }
}

/// What an 8-byte page's memdesc word says the page is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum MemdescType {
    /// No descriptor: a hole (the all-zero word).
    None = 0,
    /// A page with no descriptor (memmap init's reserved pages, a free
    /// block's interior, a non-compound allocation's other pages): flags,
    /// a one-bit count, a 4-bit `private`, section, zone and node packed
    /// above the type.
    Reserved = 1,
    /// A device page (ZONE_DEVICE): packed as `Reserved`, zone
    /// [`ZONE_DEVICE_ID`].
    Device = 2,
    /// The plan's "Misc" (pfnlab's reading): a bare page the buddy handed
    /// out with no folio. At 16 bytes its count and `private` fit in the
    /// word; at 8 bytes the word points to its own memdesc (`Misc8`).
    Misc = 3,
    /// The plan's "Free": a free or listed page, pointing to its `struct
    /// buddy` (links and order).
    Buddy = 5,
    /// pfnlab's stand-in for a folio pointer: a compound page's tail,
    /// pointing to its head page (there is no folio to point to), with
    /// `private` in the bits above the address.
    Tail = 6,
    /// `page_init_poison`'s 0xff: not a type, never dereferenced.
    Poisoned = 15,
}

impl MemdescType {
    /// The type in the low bits of a memdesc word.
    #[inline(always)]
    pub(super) fn of(word: u64) -> MemdescType {
        match word & TYPE_MASK {
            0 => MemdescType::None,
            1 => MemdescType::Reserved,
            2 => MemdescType::Device,
            3 => MemdescType::Misc,
            5 => MemdescType::Buddy,
            6 => MemdescType::Tail,
            15 => MemdescType::Poisoned,
            t => unreachable!("memdesc type {t} is never written"),
        }
    }
}

/// `struct buddy` at 8 bytes: a listed page's links and order, and the
/// header the page cannot hold.
///
/// Invariants: allocated from [`BUDDY_CACHE`] and pointed to by exactly
/// one page's memdesc word (`page`) while that page is listed; 48 bytes,
/// 16-byte aligned (pinned below).
#[repr(C, align(16))]
#[derive(Default)]
struct Buddy8 {
    /// The packed flags, zone, node and section ([`HEADER_MASK`]).
    header: AtomicU64,
    /// `buddy_list.next` / `pcp_list.next`.
    next: AtomicPtr<Page8>,
    /// `buddy_list.prev` / `pcp_list.prev`.
    prev: AtomicPtr<Page8>,
    /// The order while free (`private`).
    private: AtomicU64,
    /// The page whose memdesc points here (the checker's back-pointer).
    page: AtomicPtr<Page8>,
}

const _: () = assert!(std::mem::size_of::<Buddy8>() == 48);
const _: () = assert!(std::mem::align_of::<Buddy8>() == 16);

/// The memdesc of an allocated 8-byte page (type `Misc`): what its user
/// would own as a folio, here the header, the count and `private`.
///
/// Invariants: allocated from [`MISC_CACHE`] and pointed to by exactly one
/// page's memdesc word (`page`) while that page's count is non-zero; 32
/// bytes, 16-byte aligned (pinned below).
#[repr(C, align(16))]
#[derive(Default)]
struct Misc8 {
    /// The packed flags, zone, node and section ([`HEADER_MASK`]).
    header: AtomicU64,
    /// `_refcount`.
    refcount: AtomicI32,
    /// `private` (the order of an allocated head).
    private: AtomicU64,
    /// The page whose memdesc points here (the checker's back-pointer; a
    /// folio keeps its pfn the same way).
    page: AtomicPtr<Page8>,
}

const _: () = assert!(std::mem::size_of::<Misc8>() == 32);
const _: () = assert!(std::mem::align_of::<Misc8>() == 16);

/// The `kmem_cache` of `struct buddy` every 8-byte allocator shares.
static BUDDY_CACHE: KmemCache<Buddy8> = KmemCache::new();
/// The `kmem_cache` of allocated pages' memdescs every 8-byte allocator
/// shares.
static MISC_CACHE: KmemCache<Misc8> = KmemCache::new();

/// The 8-byte `struct page`. See the module documentation.
///
/// Invariants:
/// - exactly 8 bytes and 8-byte aligned (pinned below): eight descriptors
///   per cache line;
/// - an all-zero `Page8` is a hole ([`MemdescType::None`]);
/// - a `Buddy` word points to a live `Buddy8` naming this page, a `Misc`
///   word to a live `Misc8` naming it, a `Tail` word to a head page that
///   is not a tail.
///
/// # Safety
/// Every `unsafe fn` that writes a descriptor has the [layout
/// contract](PageLayout#safety).
#[repr(C, align(8))]
#[derive(Default)]
pub struct Page8 {
    /// A pointer, so a descriptor's or a head's address keeps its
    /// provenance.
    memdesc: AtomicPtr<u8>,
}

const _: () = assert!(std::mem::size_of::<Page8>() == 8);
const _: () = assert!(std::mem::align_of::<Page8>() == 8);
const _: () = assert!(TYPE_MASK <= u8::MAX as u64, "the type fits in byte 0");

/// A memdesc word, decoded.
enum View<'a> {
    /// `None`: a hole.
    Hole,
    /// `Reserved` or `Device`: the packed word.
    Packed(u64),
    /// `Buddy`.
    Buddy(&'a Buddy8),
    /// `Misc`.
    Misc(&'a Misc8),
    /// `Tail`: the head and the tail's `private`.
    Tail(&'a Page8, u64),
    /// `Poisoned`.
    Poisoned,
}

/// A packed word's `private`.
#[inline(always)]
fn packed_private(word: u64) -> u64 {
    (word & PRIVATE_MASK) >> PRIVATE_SHIFT
}

/// The packed word for a page with no descriptor: `header`'s flags and
/// placement, `private` and the count bit.
#[inline(always)]
fn packed_word(header: u64, private: u64, counted: bool) -> *mut u8 {
    assert!(
        private <= PACKED_PRIVATE_MAX,
        "a page with no descriptor holds private {private} in 5 bits"
    );
    without_provenance_mut(
        ((header & HEADER_MASK)
            | private << PRIVATE_SHIFT
            | if counted { COUNT_BIT } else { 0 }
            | MemdescType::Reserved as u64) as usize,
    )
}

/// The descriptor a `Buddy` or `Misc` word points to, as the raw pointer
/// the cache handed out (its provenance, not a shared reference's, so the
/// cache may write the whole object back on free).
#[inline(always)]
fn desc_ptr<T>(word: *mut u8) -> *mut T {
    word.map_addr(|a| a & !(TYPE_MASK as usize)).cast()
}

/// A flag's bit in a packed word or a header.
#[inline(always)]
fn fmask(flag: PageFlag) -> u64 {
    debug_assert_ne!(flag, PageFlag::Present, "PG_present is the memdesc type");
    flag.mask() << FLAG_SHIFT
}

/// A descriptor's address tagged with its type.
#[inline(always)]
fn tagged<T>(desc: *mut T, ty: MemdescType) -> *mut u8 {
    desc.cast::<u8>().map_addr(|a| {
        debug_assert_eq!(a as u64 & TYPE_MASK, 0, "memdescs are 16-byte aligned");
        a | ty as usize
    })
}

/// How a flag write is done: `SetPageX`, `__SetPageX`, or a uniprocessor
/// kernel's `set_bit`.
#[derive(Clone, Copy)]
enum Form {
    Atomic,
    NonAtomic,
    Unlocked,
}

impl Page8 {
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

    /// The word, decoded.
    #[inline(always)]
    fn view(&self) -> View<'_> {
        self.view_of(self.word())
    }

    /// `word`, a value this page's memdesc held, decoded.
    #[inline(always)]
    fn view_of(&self, word: *mut u8) -> View<'_> {
        let addr = word.addr() as u64;
        match MemdescType::of(addr) {
            MemdescType::None => View::Hole,
            MemdescType::Reserved | MemdescType::Device => View::Packed(addr),
            // SAFETY: a `Buddy` word points to an object of `BUDDY_CACHE`
            // (type invariant), whose slabs live for the process.
            MemdescType::Buddy => View::Buddy(unsafe {
                &*word
                    .map_addr(|a| a & !(TYPE_MASK as usize))
                    .cast::<Buddy8>()
            }),
            // SAFETY: as above, for `MISC_CACHE`.
            MemdescType::Misc => View::Misc(unsafe { &*desc_ptr::<Misc8>(word) }),
            // SAFETY: a `Tail` word points to its head page, a descriptor
            // of the same memmap, live while this one is.
            MemdescType::Tail => View::Tail(
                unsafe { &*word.map_addr(|a| a & TAIL_ADDR_MASK).cast::<Page8>() },
                addr >> TAIL_PRIVATE_SHIFT,
            ),
            MemdescType::Poisoned => View::Poisoned,
        }
    }

    /// The packed flags, zone, node and section, wherever the page keeps
    /// them: the word, its descriptor's header, or its head's.
    #[inline(always)]
    fn header(&self) -> u64 {
        match self.view() {
            View::Hole => 0,
            View::Packed(word) => word,
            // The dependent load `page_zone()` pays at 8 bytes.
            View::Buddy(d) => d.header.load(Relaxed),
            View::Misc(d) => d.header.load(Relaxed),
            View::Tail(head, _) => head.header(),
            View::Poisoned => u64::MAX,
        }
    }

    /// Sets (`set`) or clears the flag bits `mask` where the page keeps its
    /// flags. A packed word is rewritten with a compare-exchange, so a
    /// concurrent writer of the word can never leave it a mixture.
    #[inline(always)]
    fn update_flags(&self, mask: u64, set: bool, form: Form) {
        let apply = |v: u64| if set { v | mask } else { v & !mask };
        match self.view() {
            View::Packed(word) => match form {
                Form::Atomic => {
                    let mut old = without_provenance_mut::<u8>(word as usize);
                    loop {
                        let now = old.addr() as u64;
                        if !matches!(
                            MemdescType::of(now),
                            MemdescType::Reserved | MemdescType::Device
                        ) {
                            // The word took a descriptor meanwhile.
                            return self.update_flags(mask, set, form);
                        }
                        let new = without_provenance_mut(apply(now) as usize);
                        match self
                            .memdesc
                            .compare_exchange_weak(old, new, Relaxed, Relaxed)
                        {
                            Ok(_) => return,
                            Err(seen) => old = seen,
                        }
                    }
                }
                // A load and a store: the caller excludes other writers.
                Form::NonAtomic | Form::Unlocked => self
                    .memdesc
                    .store(without_provenance_mut(apply(word) as usize), Relaxed),
            },
            View::Buddy(d) => update_header(&d.header, mask, set, form),
            View::Misc(d) => update_header(&d.header, mask, set, form),
            View::Tail(head, _) => {
                debug_assert_eq!(mask & !USER_MASK, 0, "an allocator flag on a tail");
                head.update_flags(mask & USER_MASK, set, form);
            }
            View::Hole | View::Poisoned => {}
        }
    }
}

/// [`Page8::update_flags`] on a descriptor's header.
#[inline(always)]
fn update_header(header: &AtomicU64, mask: u64, set: bool, form: Form) {
    match form {
        Form::Atomic if set => _ = header.fetch_or(mask, Relaxed),
        Form::Atomic => _ = header.fetch_and(!mask, Relaxed),
        Form::NonAtomic => {
            let v = header.load(Relaxed);
            header.store(if set { v | mask } else { v & !mask }, Relaxed);
        }
        // SAFETY: `Form::Unlocked` comes only from `set_unlocked` and
        // `clear_unlocked`, whose callers exclude every other writer.
        Form::Unlocked if set => unsafe { buddy_page::or_unlocked(header, mask) },
        // SAFETY: as above.
        Form::Unlocked => unsafe { buddy_page::and_unlocked(header, !mask) },
    }
}

impl Page8 {
    /// The page gets its memdesc (`kmem_cache_alloc` from [`MISC_CACHE`]):
    /// the packed `word`'s flags, placement and `private` move into it,
    /// with `count`.
    fn attach_misc(&self, word: u64, count: i32) {
        let desc = MISC_CACHE.alloc();
        // SAFETY: a fresh object of the cache, no one else's yet.
        let d = unsafe { &*desc };
        d.header.store(word & HEADER_MASK, Relaxed);
        d.refcount.store(count, Relaxed);
        d.private.store(packed_private(word), Relaxed);
        d.page.store(std::ptr::from_ref(self).cast_mut(), Relaxed);
        self.memdesc.store(tagged(desc, MemdescType::Misc), Relaxed);
    }

    /// The page gives its memdesc back (`kmem_cache_free`): the header and
    /// `private` return to a packed word with no count.
    ///
    /// # Safety
    /// `d` is this page's memdesc (its word points to it) and the caller
    /// owns the page.
    unsafe fn release_misc(&self, d: &Misc8) {
        let obj = desc_ptr::<Misc8>(self.word());
        debug_assert!(std::ptr::eq(obj, d));
        let word = packed_word(d.header.load(Relaxed), d.private.load(Relaxed), false);
        self.memdesc.store(word, Relaxed);
        // SAFETY: the object was this page's, and the word no longer
        // points to it.
        unsafe { MISC_CACHE.free(obj) };
    }

    /// The `struct buddy` of a `Buddy` word, else `None`.
    #[inline(always)]
    fn buddy_desc(&self) -> Option<&Buddy8> {
        match self.view() {
            View::Buddy(d) => Some(d),
            _ => None,
        }
    }

    /// The memdesc of a `Misc` word, else `None`.
    #[inline(always)]
    fn misc_desc(&self) -> Option<&Misc8> {
        match self.view() {
            View::Misc(d) => Some(d),
            _ => None,
        }
    }
}

// SAFETY: (1) the one field is an atomic pointer, so all-zero bytes are a
// valid value (type 0, a hole) and shared references may alias; (2) the
// type is the low nibble of byte 0 (little-endian word at offset 0) and
// is non-zero exactly when present; (3) 8 bytes, aligned to 8.
unsafe impl PageLayout for Page8 {
    const NAME: &'static str = "8";
    const PRESENT_BYTE_MASK: u8 = TYPE_MASK as u8;
    const FLAGS_WORD: bool = false;

    unsafe fn init_reserved(&self, section: u64) {
        let header = pack8::pack(section, 0, 0) | fmask(PageFlag::Reserved);
        self.memdesc.store(packed_word(header, 0, false), Relaxed);
    }

    unsafe fn init_device(&self, section: u64, node: u16) {
        let header = pack8::pack(section, ZONE_DEVICE_ID, node) | fmask(PageFlag::Reserved);
        let word = packed_word(header, 0, true)
            .map_addr(|a| a & !(TYPE_MASK as usize) | MemdescType::Device as usize);
        self.memdesc.store(word, Relaxed);
    }

    unsafe fn clear_to_hole(&self) {
        self.memdesc.store(null_mut(), Relaxed);
    }

    #[inline(always)]
    fn is_present(&self) -> bool {
        self.memdesc() & TYPE_MASK != 0
    }

    #[inline(always)]
    fn section(&self) -> u64 {
        pack8::section(self.header())
    }

    #[inline(always)]
    fn zone_id(&self) -> u8 {
        pack8::zone(self.header())
    }

    #[inline(always)]
    fn node_id(&self) -> u16 {
        pack8::node(self.header())
    }
}

impl sealed::Sealed for Page8 {}

impl std::fmt::Debug for Page8 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Page8")
            .field("memdesc", &format_args!("{:#x}", self.memdesc()))
            .field("header", &format_args!("{:#x}", self.header()))
            .field("refcount", &BuddyPage::refcount(self))
            .field("private", &BuddyPage::private(self))
            .finish()
    }
}
