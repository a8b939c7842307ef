//! `struct mem_section`: one section-table entry, with the kernel's encoded
//! memmap pointer.
//!
//! The kernel stores in `section_mem_map` the address of the section's
//! memmap *minus the section's first pfn* (in `struct page` units), so that
//! `pfn_to_page` is `decoded + pfn` with no subtraction; the low bits carry
//! flags:
//! `SECTION_MARKED_PRESENT`, `SECTION_HAS_MEM_MAP`, `SECTION_IS_ONLINE`,
//! `SECTION_IS_EARLY`, `SECTION_TAINT_ZONE_DEVICE`. pfnlab does the same with strict-provenance pointer
//! operations (`wrapping_sub` / `map_addr`), so the encoded value keeps the
//! provenance of the mapping it points into.
//!
//! ## Why the low bits stay free at every `struct page` size
//! The bits are free because of the memmap *array's* alignment, not the
//! entry's: an 8-byte `struct page` is only 8-byte aligned, three bits
//! short of the six flags need. The encoded value is `mem_map -
//! first_pfn * sizeof(struct page)`; a section's memmap is allocated
//! page-aligned (a mapping here, a page or PMD from memblock in the
//! kernel), and `first_pfn` is a multiple of `PAGES_PER_SECTION`, so the
//! bias is a multiple of `PAGES_PER_SECTION * sizeof(struct page)` — at
//! least 2^13 * 8 bytes for every geometry pfnlab has. The value is
//! therefore aligned to the smaller of the two, far more than 64 bytes, at
//! every size (the kernel's comment in `include/linux/mmzone.h` makes the
//! same argument). The entry stores a byte address, so one table type
//! serves every layout; [`MemSection::page_ptr`] scales by the layout.
//!
//! # Safety
//! The encoded pointer is only decoded into a reference by the memory models,
//! for pfns their table says are valid, while they own the memmap. This
//! module never dereferences it.

use crate::page::PageLayout;
use crate::subsection::SubsectionMap;

/// `SECTION_MARKED_PRESENT`: the section has (or had) memory.
pub const SECTION_MARKED_PRESENT: usize = 1 << 0;
/// `SECTION_HAS_MEM_MAP`: the section has a memmap (`valid_section`).
pub const SECTION_HAS_MEM_MAP: usize = 1 << 1;
/// `SECTION_IS_ONLINE`: the section's pages are online.
pub const SECTION_IS_ONLINE: usize = 1 << 2;
/// `SECTION_IS_EARLY`: boot memory; every pfn of the section is valid.
pub const SECTION_IS_EARLY: usize = 1 << 3;
/// `SECTION_TAINT_ZONE_DEVICE`: some subsection holds device memory, so
/// `pfn_to_online_page` must ask whether a pfn is device memory
/// (`get_dev_pagemap`) even in an online section.
pub const SECTION_TAINT_ZONE_DEVICE: usize = 1 << 4;
const SECTION_FLAGS_MASK: usize = (1 << 6) - 1;

/// Fewest pfns per section of any geometry (arm64 with 64 KiB pages:
/// 2^29 / 2^16).
const MIN_PAGES_PER_SECTION: usize = 1 << 13;
/// The smallest layout.
const MIN_PAGE_STRUCT_SIZE: usize = 8;
/// A memmap array's alignment: it is allocated whole host pages.
const MEMMAP_ALIGN: usize = 4096;

const _: () = assert!(SECTION_FLAGS_MASK < MEMMAP_ALIGN);
const _: () = assert!(SECTION_FLAGS_MASK < MIN_PAGES_PER_SECTION * MIN_PAGE_STRUCT_SIZE);

/// `struct mem_section_usage`: the subsection bitmap of one section and its
/// pageblocks' flags.
#[derive(Debug, Default)]
pub struct SectionUsage {
    /// Present subsections.
    pub subsection_map: SubsectionMap,
    /// `pageblock_flags[]`: each pageblock's migratetype.
    pub pageblock_flags: crate::pageblock::SectionBlockFlags,
}

/// One section-table entry: 16 bytes, as in a kernel without
/// `CONFIG_PAGE_EXTENSION`, so a 4 KiB root page of the EXTREME table holds
/// 256 of them. (That option adds a `page_ext` pointer and a pad word: 32
/// bytes and 128 per root page. pfnlab has no page extensions.)
///
/// Invariants:
/// - when `SECTION_HAS_MEM_MAP` is set, the decoded map plus any pfn of a
///   present subsection of this section points at that pfn's `Page`;
/// - `usage` is `Some` whenever `SECTION_HAS_MEM_MAP` is set.
#[repr(C)]
#[derive(Debug)]
pub struct MemSection {
    section_mem_map: *const u8,
    usage: Option<Box<SectionUsage>>,
}

const _: () = assert!(std::mem::size_of::<MemSection>() == 16);

// SAFETY: the raw pointer is an address into a memmap owned by the model
// that owns this table; the entry itself never dereferences it, and the
// models only hand out shared descriptors (Sync types) borrowed from `&self`.
unsafe impl Send for MemSection {}
// SAFETY: as above; shared access only reads the pointer value.
unsafe impl Sync for MemSection {}

impl MemSection {
    /// An absent section (all zero, like the kernel's BSS table).
    pub const EMPTY: MemSection = MemSection {
        section_mem_map: std::ptr::null(),
        usage: None,
    };

    /// The flag bits.
    #[inline(always)]
    pub fn flags(&self) -> usize {
        self.section_mem_map.addr() & SECTION_FLAGS_MASK
    }

    /// `valid_section`: the section has a memmap.
    #[inline(always)]
    pub fn has_mem_map(&self) -> bool {
        self.flags() & SECTION_HAS_MEM_MAP != 0
    }

    /// `early_section`.
    #[inline(always)]
    pub fn is_early(&self) -> bool {
        self.flags() & SECTION_IS_EARLY != 0
    }

    /// `online_section`.
    #[inline(always)]
    pub fn is_online(&self) -> bool {
        self.flags() & SECTION_IS_ONLINE != 0
    }

    /// `online_device_section`: online and tainted by device memory.
    #[inline(always)]
    pub fn is_online_device(&self) -> bool {
        let both = SECTION_IS_ONLINE | SECTION_TAINT_ZONE_DEVICE;
        self.flags() & both == both
    }

    /// The pageblock flags, if the section has usage data.
    #[inline(always)]
    pub fn pageblock_flags(&self) -> Option<&crate::pageblock::SectionBlockFlags> {
        self.usage.as_deref().map(|u| &u.pageblock_flags)
    }

    /// The subsection bitmap, if the section has usage data.
    #[inline(always)]
    pub fn subsection_map(&self) -> Option<&SubsectionMap> {
        self.usage.as_deref().map(|u| &u.subsection_map)
    }

    /// `pfn_section_valid`: the pfn's subsection bit.
    #[inline(always)]
    pub fn subsection_valid(&self, index: u64) -> bool {
        match &self.usage {
            Some(u) => u.subsection_map.test(index),
            None => false,
        }
    }

    /// `__section_mem_map_addr`: the decoded (still pfn-biased) map
    /// address, in bytes.
    #[inline(always)]
    pub fn mem_map_biased(&self) -> *const u8 {
        self.section_mem_map.map_addr(|a| a & !SECTION_FLAGS_MASK)
    }

    /// The address of `pfn`'s descriptor: `decoded + pfn`, in descriptors
    /// of the layout the memmap was encoded with.
    #[inline(always)]
    pub fn page_ptr<P: PageLayout>(&self, pfn: u64) -> *const P {
        self.mem_map_biased()
            .wrapping_add((pfn * P::SIZE) as usize)
            .cast::<P>()
    }

    /// `sparse_encode_mem_map` + `sparse_init_one_section`: sets the memmap
    /// of a section starting at `first_pfn`, with flags. The memmap array
    /// must be host-page aligned (see the module documentation).
    pub fn set_mem_map<P: PageLayout>(&mut self, mem_map: *const P, first_pfn: u64, flags: usize) {
        debug_assert!(mem_map.addr() & SECTION_FLAGS_MASK == 0);
        debug_assert!(flags & !SECTION_FLAGS_MASK == 0);
        let biased = mem_map
            .cast::<u8>()
            .wrapping_sub((first_pfn * P::SIZE) as usize);
        debug_assert!(biased.addr() & SECTION_FLAGS_MASK == 0);
        self.section_mem_map = biased.map_addr(|a| a | flags);
    }

    /// Sets or clears flag bits, keeping the pointer.
    pub fn update_flags(&mut self, set: usize, clear: usize) {
        let flags = (self.flags() | set) & !clear;
        self.section_mem_map = self.mem_map_biased().map_addr(|a| a | flags);
    }

    /// The usage data, created on first use.
    pub fn usage_mut(&mut self) -> &mut SectionUsage {
        self.usage.get_or_insert_with(Box::default)
    }

    /// Forgets the memmap and usage (the section becomes absent).
    pub fn clear(&mut self) {
        *self = MemSection::EMPTY;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memmap::MemmapBlock;
    use crate::page::{Page8, Page16, Page32, Page64};

    fn encoding_round_trips<P: PageLayout>() {
        let block = MemmapBlock::<P>::new(4).unwrap();
        let pages = block.pages();
        let mut ms = MemSection::EMPTY;
        assert!(!ms.has_mem_map());
        ms.set_mem_map(
            block.as_ptr(),
            1 << 15,
            SECTION_HAS_MEM_MAP | SECTION_IS_EARLY,
        );
        assert!(ms.has_mem_map() && ms.is_early() && !ms.is_online());
        assert_eq!(ms.page_ptr::<P>((1 << 15) + 3), &pages[3] as *const P);
        ms.update_flags(SECTION_IS_ONLINE, SECTION_IS_EARLY);
        assert!(ms.is_online() && !ms.is_early());
        assert_eq!(ms.page_ptr::<P>(1 << 15), block.as_ptr());
        assert_eq!(ms.flags(), SECTION_HAS_MEM_MAP | SECTION_IS_ONLINE);
    }

    #[test]
    fn encoding_round_trips_at_every_size() {
        encoding_round_trips::<Page64>();
        encoding_round_trips::<Page32>();
        encoding_round_trips::<Page16>();
        encoding_round_trips::<Page8>();
    }
}
