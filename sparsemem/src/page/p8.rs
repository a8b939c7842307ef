//! `Page8`: the memdesc word alone, the Memdescs plan's end state
//! (`struct page { unsigned long memdesc; }`).
//!
//! The low 4 bits are the memdesc type; for a type with a descriptor the
//! bits above are the address of a separately allocated, 16-byte-aligned
//! descriptor (a free page's `struct buddy`, a folio, a slab). With no
//! flags word there is nowhere in the page for `page_zone`, `page_to_nid`
//! and SPARSEMEM's `page_to_section`: pfnlab's reading is that a type with
//! no descriptor ([`MemdescType::Reserved`], [`MemdescType::Device`]) packs
//! them into the 60 bits above its type, as `page->flags` packs them
//! today, and that a type with a descriptor keeps them in the descriptor's
//! header (one dependent load more).
//!
//! Type 0 is "no descriptor": an all-zero word is a hole, and the fault
//! probe's one-byte load reads the type in the low nibble of byte 0.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::{PageLayout, ZONE_DEVICE_ID, packed, sealed};

/// Bits of the memdesc type, in the low bits of the word.
pub const MEMDESC_TYPE_BITS: u32 = 4;
pub(super) const TYPE_MASK: u64 = (1 << MEMDESC_TYPE_BITS) - 1;

/// What an 8-byte page's memdesc word says the page is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum MemdescType {
    /// No descriptor: a hole (the all-zero word).
    None = 0,
    /// A reserved page with no descriptor (memmap init, holes, firmware):
    /// the section, zone and node are packed above the type.
    Reserved = 1,
    /// A device page (ZONE_DEVICE): packed as `Reserved`, zone
    /// [`ZONE_DEVICE_ID`].
    Device = 2,
    /// The plan's "Misc" (pfnlab's reading): a bare page the buddy handed
    /// out with no folio, whose count and `private` fit in the word (at 16
    /// bytes; see `p16`).
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

/// The 8-byte `struct page`. See the module documentation.
///
/// Invariants:
/// - exactly 8 bytes and 8-byte aligned (pinned below): eight descriptors
///   per cache line;
/// - an all-zero `Page8` is a hole ([`MemdescType::None`]).
///
/// # Safety
/// Every `unsafe fn` that writes a descriptor has the [layout
/// contract](PageLayout#safety).
#[repr(C, align(8))]
#[derive(Default)]
pub struct Page8 {
    memdesc: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Page8>() == 8);
const _: () = assert!(std::mem::align_of::<Page8>() == 8);
const _: () = assert!(TYPE_MASK <= u8::MAX as u64, "the type fits in byte 0");

impl Page8 {
    /// The memdesc word.
    #[inline(always)]
    pub fn memdesc(&self) -> u64 {
        self.memdesc.load(Relaxed)
    }

    /// The memdesc type.
    #[inline(always)]
    pub fn memdesc_type(&self) -> MemdescType {
        MemdescType::of(self.memdesc())
    }
}

// SAFETY: (1) the one field is an atomic integer, so all-zero bytes are a
// valid value (type 0, a hole) and shared references may alias; (2) the
// type is the low nibble of byte 0 (little-endian word at offset 0) and
// is non-zero exactly when present; (3) 8 bytes, aligned to 8.
unsafe impl PageLayout for Page8 {
    const NAME: &'static str = "8";
    const PRESENT_BYTE_MASK: u8 = TYPE_MASK as u8;
    const FLAGS_WORD: bool = false;

    unsafe fn init_reserved(&self, section: u64) {
        let word = packed::pack(MEMDESC_TYPE_BITS, section, 0, 0);
        self.memdesc
            .store(word | MemdescType::Reserved as u64, Relaxed);
    }

    unsafe fn init_device(&self, section: u64, node: u16) {
        let word = packed::pack(MEMDESC_TYPE_BITS, section, ZONE_DEVICE_ID, node);
        self.memdesc
            .store(word | MemdescType::Device as u64, Relaxed);
    }

    unsafe fn clear_to_hole(&self) {
        self.memdesc.store(0, Relaxed);
    }

    #[inline(always)]
    fn is_present(&self) -> bool {
        self.memdesc() & TYPE_MASK != 0
    }

    #[inline(always)]
    fn section(&self) -> u64 {
        packed::section(MEMDESC_TYPE_BITS, self.memdesc())
    }

    #[inline(always)]
    fn zone_id(&self) -> u8 {
        packed::zone(MEMDESC_TYPE_BITS, self.memdesc())
    }

    #[inline(always)]
    fn node_id(&self) -> u16 {
        packed::node(MEMDESC_TYPE_BITS, self.memdesc())
    }
}

impl sealed::Sealed for Page8 {}

impl std::fmt::Debug for Page8 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Page8")
            .field("memdesc", &format_args!("{:#x}", self.memdesc()))
            .finish()
    }
}
