//! `struct mem_section`: one section-table entry, with the kernel's encoded
//! memmap pointer.
//!
//! The kernel stores in `section_mem_map` the address of the section's
//! memmap *minus the section's first pfn* (in `struct page` units), so that
//! `pfn_to_page` is `decoded + pfn` with no subtraction; the low bits, free
//! because `struct page`s are aligned, carry flags:
//! `SECTION_MARKED_PRESENT`, `SECTION_HAS_MEM_MAP`, `SECTION_IS_ONLINE`,
//! `SECTION_IS_EARLY`, `SECTION_TAINT_ZONE_DEVICE`. pfnlab does the same with strict-provenance pointer
//! operations (`wrapping_sub` / `map_addr`), so the encoded value keeps the
//! provenance of the mapping it points into.
//!
//! # Safety
//! The encoded pointer is only decoded into a reference by the memory models,
//! for pfns their table says are valid, while they own the memmap. This
//! module never dereferences it.

use crate::page::Page;
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

const _: () = assert!(SECTION_FLAGS_MASK < std::mem::align_of::<Page>());

/// `struct mem_section_usage`: the subsection bitmap of one section and its
/// pageblocks' flags.
#[derive(Debug, Default)]
pub struct SectionUsage {
    /// Present subsections.
    pub subsection_map: SubsectionMap,
    /// `pageblock_flags[]`: each pageblock's migratetype.
    pub pageblock_flags: crate::pageblock::SectionBlockFlags,
}

/// One section-table entry: 16 bytes, as in the kernel, so a 4 KiB root page
/// of the EXTREME table holds 256 of them.
///
/// Invariants:
/// - when `SECTION_HAS_MEM_MAP` is set, the decoded map plus any pfn of a
///   present subsection of this section points at that pfn's `Page`;
/// - `usage` is `Some` whenever `SECTION_HAS_MEM_MAP` is set.
#[repr(C)]
#[derive(Debug)]
pub struct MemSection {
    section_mem_map: *const Page,
    usage: Option<Box<SectionUsage>>,
}

const _: () = assert!(std::mem::size_of::<MemSection>() == 16);

// SAFETY: the raw pointer is an address into a memmap owned by the model
// that owns this table; the entry itself never dereferences it, and the
// models only hand out `&Page` (a Sync type) borrowed from `&self`.
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

    /// `__section_mem_map_addr`: the decoded (still pfn-biased) map pointer.
    #[inline(always)]
    pub fn mem_map_biased(&self) -> *const Page {
        self.section_mem_map.map_addr(|a| a & !SECTION_FLAGS_MASK)
    }

    /// The address of `pfn`'s descriptor: `decoded + pfn`.
    #[inline(always)]
    pub fn page_ptr(&self, pfn: u64) -> *const Page {
        self.mem_map_biased().wrapping_add(pfn as usize)
    }

    /// `sparse_encode_mem_map` + `sparse_init_one_section`: sets the memmap
    /// of a section starting at `first_pfn`, with flags.
    pub fn set_mem_map(&mut self, mem_map: *const Page, first_pfn: u64, flags: usize) {
        debug_assert!(mem_map.addr() & SECTION_FLAGS_MASK == 0);
        debug_assert!(flags & !SECTION_FLAGS_MASK == 0);
        let biased = mem_map.wrapping_sub(first_pfn as usize);
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

    #[test]
    fn encoding_round_trips() {
        let pages: Vec<Page> = (0..4).map(|_| Page::default()).collect();
        let mut ms = MemSection::EMPTY;
        assert!(!ms.has_mem_map());
        ms.set_mem_map(
            pages.as_ptr(),
            1 << 15,
            SECTION_HAS_MEM_MAP | SECTION_IS_EARLY,
        );
        assert!(ms.has_mem_map() && ms.is_early() && !ms.is_online());
        assert_eq!(ms.page_ptr((1 << 15) + 3), &pages[3] as *const Page);
        ms.update_flags(SECTION_IS_ONLINE, SECTION_IS_EARLY);
        assert!(ms.is_online() && !ms.is_early());
        assert_eq!(ms.page_ptr(1 << 15), pages.as_ptr());
    }
}
