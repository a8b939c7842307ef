//! `Page16`: the flags word and the memdesc word.
//!
//! The step between Wilcox's 32-byte sketch and the 8-byte end state:
//! everything but the flags (and, in them, the section, node and zone)
//! lives in the descriptor the memdesc word points to — a free page's
//! links and order in a `struct buddy`, an allocated page's count and
//! mapping in its folio. With no `page_type`, `PageBuddy` is a flag bit,
//! as at 32 bytes.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::{PageFlag, PageLayout, ZONE_DEVICE_ID, packed, sealed};

/// Low bits of `flags` that are page flags, as at 32 bytes.
const FLAG_BITS: u32 = 16;

/// The 16-byte `struct page`. See the module documentation.
///
/// Invariants:
/// - exactly 16 bytes and 16-byte aligned (pinned below): four descriptors
///   per cache line;
/// - an all-zero `Page16` is a hole;
/// - `memdesc` is 0 or a memdesc word (type in the low 4 bits, a
///   16-byte-aligned descriptor's address above), as at 8 bytes.
///
/// # Safety
/// Every `unsafe fn` that writes a descriptor has the [layout
/// contract](PageLayout#safety).
#[repr(C, align(16))]
#[derive(Default)]
pub struct Page16 {
    flags: AtomicU64,
    memdesc: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Page16>() == 16);
const _: () = assert!(std::mem::align_of::<Page16>() == 16);
const _: () = assert!(std::mem::offset_of!(Page16, flags) == 0);
const _: () = assert!(std::mem::offset_of!(Page16, memdesc) == 8);

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
        self.memdesc.load(Relaxed)
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
        self.memdesc.store(0, Relaxed);
    }

    unsafe fn init_device(&self, section: u64, node: u16) {
        let flags = PageFlag::Present.mask() | PageFlag::Reserved.mask();
        self.flags.store(
            flags | packed::pack(FLAG_BITS, section, ZONE_DEVICE_ID, node),
            Relaxed,
        );
        self.memdesc.store(0, Relaxed);
    }

    unsafe fn clear_to_hole(&self) {
        self.flags.store(0, Relaxed);
        self.memdesc.store(0, Relaxed);
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

impl sealed::Sealed for Page16 {}

impl std::fmt::Debug for Page16 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Page16")
            .field("flags", &format_args!("{:#x}", self.flags()))
            .field("memdesc", &format_args!("{:#x}", self.memdesc()))
            .finish()
    }
}
