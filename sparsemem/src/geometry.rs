//! The sizes that shape a physical memory map: page size, section size,
//! subsection size, the physical address width, the buddy's largest order,
//! the pageblock size and the DMA zone limits.
//!
//! The kernel fixes these at compile time per architecture
//! (`PAGE_SHIFT`, `SECTION_SIZE_BITS`, `MAX_PHYSMEM_BITS`, `SUBSECTION_SHIFT`,
//! `MAX_PAGE_ORDER`, `pageblock_order`) or at boot (`zone_sizes_init`);
//! pfnlab keeps them as runtime values so one binary can compare
//! architectures. Presets reproduce the kernel's values, each cited where
//! the kernel defines it; custom geometries are checked against the same
//! constraints the kernel enforces at build time (a `MAX_PAGE_ORDER` block
//! must fit in one section, a pageblock in a max-order block).
//!
//! | preset | PAGE_SHIFT | SECTION_SIZE_BITS | MAX_PAGE_ORDER | pageblock_order | ZONE_DMA | ZONE_DMA32 |
//! |---|---|---|---|---|---|---|
//! | x86_64, x86_64-la57 | 12 | 27 | 10 | 9 | < 16 MiB | < 4 GiB |
//! | arm64-4k | 12 | 27 | 10 | 9 | < 4 GiB (zone_dma_bits 32) | empty |
//! | arm64-16k | 14 | 27 | 11 | 11 | < 4 GiB (zone_dma_bits 32) | empty |
//! | arm64-64k | 16 | 29 | 13 | 13 | < 4 GiB (zone_dma_bits 32) | empty |
//! | ia64 | 14 | 30 | 16 | 14 | none | < 4 GiB |
//!
//! Sources: x86 `MAX_DMA_PFN` / `MAX_DMA32_PFN` (arch/x86/include/asm/dma.h)
//! and `ARCH_FORCE_MAX_ORDER` default 10; arm64 `ARCH_FORCE_MAX_ORDER`
//! ("13" with 64 KiB pages, else "10", arch/arm64/Kconfig), `pageblock_order`
//! = `HUGETLB_PAGE_ORDER` = `PMD_SHIFT - PAGE_SHIFT`
//! (include/linux/pageblock-flags.h), and `zone_sizes_init` in
//! arch/arm64/mm/init.c: `zone_dma_bits = min3(32, dt, acpi)`, so without
//! firmware limits ZONE_DMA covers the 32-bit space and ZONE_DMA32 is empty
//! (30 bits on a Raspberry Pi 4: set `zone_dma_bytes` in a custom
//! geometry); ia64 `ARCH_FORCE_MAX_ORDER` "16" if HUGETLB_PAGE
//! (arch/ia64/Kconfig, removed in 6.7), `pageblock_order` =
//! `HPAGE_SHIFT_DEFAULT` (28) - `PAGE_SHIFT`, and only ZONE_DMA32 below
//! `MAX_DMA_ADDRESS` (4 GiB, arch/ia64/mm/contig.c `paging_init`).
//!
//! Not modelled: arm64's `max_zone_phys` widens the DMA zones to all memory
//! when DRAM starts above 4 GiB.

use std::fmt;

use serde::Deserialize;

use crate::error::{Granule, HotplugError};
use crate::types::{DEFAULT_MAX_PAGE_ORDER, MAX_PAGE_ORDER_LIMIT, Order, Pfn, PhysAddr, SectionNr};

/// `SUBSECTION_SHIFT`: sub-section hotplug granularity, 2 MiB on every
/// architecture.
pub const SUBSECTION_SHIFT: u32 = 21;

/// Most section-number bits a geometry may have (`SECTIONS_SHIFT`):
/// x86_64 with 5-level paging has 52 - 27 = 25.
pub const MAX_SECTIONS_SHIFT: u32 = 25;

// Every section number fits the bits a 32-, 16- or 8-byte page packs it in.
const _: () = assert!(crate::page::packed::SECTIONS_WIDTH >= MAX_SECTIONS_SHIFT);
// The 8-byte page packs one section bit fewer (`p8`), still enough.
const _: () = assert!(crate::page::P8_SECTIONS_WIDTH >= MAX_SECTIONS_SHIFT);

/// Most subsections a section may have: the subsection bitmap in a
/// section's usage is sized for this (ia64: 1 GiB / 2 MiB = 512).
pub const MAX_SUBSECTIONS_PER_SECTION: u64 = 512;

/// Where the DMA zones end on one architecture (`zone_sizes_init`'s
/// `max_zone_pfns`): memory below `dma` is ZONE_DMA, below `dma32`
/// ZONE_DMA32, the rest ZONE_NORMAL. `None` means the architecture has no
/// such zone.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ZoneLimits {
    /// End of ZONE_DMA in bytes.
    pub dma: Option<u64>,
    /// End of ZONE_DMA32 in bytes.
    pub dma32: Option<u64>,
}

impl ZoneLimits {
    /// x86_64: ZONE_DMA below 16 MiB, the ISA DMA limit (`MAX_DMA_PFN`), and
    /// ZONE_DMA32 below 4 GiB (`MAX_DMA32_PFN`), arch/x86/include/asm/dma.h.
    pub const X86_64: ZoneLimits = ZoneLimits {
        dma: Some(16 << 20),
        dma32: Some(4 << 30),
    };
    /// arm64 without firmware DMA limits: `zone_dma_bits` = 32, so ZONE_DMA
    /// is the 32-bit space and ZONE_DMA32 is empty (arch/arm64/mm/init.c).
    pub const ARM64: ZoneLimits = ZoneLimits {
        dma: Some(4 << 30),
        dma32: Some(4 << 30),
    };
    /// ia64: no ZONE_DMA; ZONE_DMA32 below `MAX_DMA_ADDRESS`, 4 GiB.
    pub const IA64: ZoneLimits = ZoneLimits {
        dma: None,
        dma32: Some(4 << 30),
    };
}

/// Page, section and physical-address sizes of one architecture, with its
/// buddy orders and zone limits.
///
/// Invariants (checked by [`Geometry::new`] and the `with_` methods):
/// - `10 <= page_shift <= 21`;
/// - `max_page_order <= MAX_PAGE_ORDER_LIMIT` and
///   `page_shift + max_page_order <= section_size_bits` (a max-order block
///   fits in a section, so a buddy never leaves its section);
/// - `pageblock_order <= max_page_order`;
/// - zone limits are page aligned, `dma <= dma32`, and within the physical
///   address space;
/// - `page_shift <= SUBSECTION_SHIFT <= section_size_bits` and at most
///   [`MAX_SUBSECTIONS_PER_SECTION`] subsections per section;
/// - `section_size_bits <= max_physmem_bits <= 57`, and at most
///   [`MAX_SECTIONS_SHIFT`] bits of section number (the section tables stay
///   bounded: 2^25 sections is x86_64 with 5-level paging).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Geometry {
    name: &'static str,
    page_shift: u32,
    section_size_bits: u32,
    max_physmem_bits: u32,
    max_page_order: u8,
    pageblock_order: u8,
    zone_limits: ZoneLimits,
}

/// A geometry that breaks one of the kernel's constraints, or an unknown
/// preset name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GeometryError {
    /// No preset has this name.
    UnknownPreset(String),
    /// The numbers break a constraint; the text says which.
    Invalid(String),
}

impl fmt::Display for GeometryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GeometryError::UnknownPreset(name) => write!(
                f,
                "unknown geometry `{name}` (known: {})",
                Geometry::PRESET_NAMES.join(", ")
            ),
            GeometryError::Invalid(why) => write!(f, "impossible geometry: {why}"),
        }
    }
}

impl std::error::Error for GeometryError {}

/// A custom geometry as written in a layout file; the optional keys
/// default as [`Geometry::new`] does.
#[derive(Deserialize, Debug, Clone, Copy)]
#[serde(deny_unknown_fields)]
pub(crate) struct CustomGeometry {
    pub page_shift: u32,
    pub section_size_bits: u32,
    pub max_physmem_bits: u32,
    pub max_page_order: Option<u8>,
    pub pageblock_order: Option<u8>,
    /// End of ZONE_DMA in bytes; 0 for none.
    pub zone_dma_bytes: Option<u64>,
    /// End of ZONE_DMA32 in bytes; 0 for none.
    pub zone_dma32_bytes: Option<u64>,
}

/// One section's piece of a pfn range ([`Geometry::section_chunks`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SectionChunk {
    /// The section.
    pub nr: SectionNr,
    /// First pfn of the piece.
    pub start: Pfn,
    /// One past its last pfn.
    pub end: Pfn,
    /// Index of the subsection holding `start`.
    pub first_subsection: u64,
    /// Index of the subsection holding `end - 1`.
    pub last_subsection: u64,
}

impl Geometry {
    /// x86_64 with 4-level paging: 4 KiB pages, 128 MiB sections, 46 bits,
    /// MAX_PAGE_ORDER 10, 2 MiB pageblocks.
    pub const X86_64: Geometry =
        Geometry::preset("x86_64", [12, 27, 46], [10, 9], ZoneLimits::X86_64);
    /// x86_64 with 5-level paging (LA57): 52 physical address bits.
    pub const X86_64_LA57: Geometry =
        Geometry::preset("x86_64-la57", [12, 27, 52], [10, 9], ZoneLimits::X86_64);
    /// arm64 with 4 KiB pages: MAX_PAGE_ORDER 10, 2 MiB pageblocks.
    pub const ARM64_4K: Geometry =
        Geometry::preset("arm64-4k", [12, 27, 48], [10, 9], ZoneLimits::ARM64);
    /// arm64 with 16 KiB pages: 128 MiB sections (`SECTION_SIZE_BITS` 27
    /// for 4K and 16K pages, arch/arm64/include/asm/sparsemem.h),
    /// MAX_PAGE_ORDER 11 (`ARCH_FORCE_MAX_ORDER` "11" with 16K pages) and
    /// 32 MiB pageblocks (PMD order 11).
    pub const ARM64_16K: Geometry =
        Geometry::preset("arm64-16k", [14, 27, 48], [11, 11], ZoneLimits::ARM64);
    /// arm64 with 64 KiB pages and 512 MiB sections: MAX_PAGE_ORDER 13, so
    /// a max-order block is the whole section, and 512 MiB pageblocks.
    pub const ARM64_64K: Geometry =
        Geometry::preset("arm64-64k", [16, 29, 48], [13, 13], ZoneLimits::ARM64);
    /// ia64 with 16 KiB pages and 1 GiB sections: MAX_PAGE_ORDER 16 (a
    /// max-order block is the section), 256 MiB pageblocks.
    pub const IA64: Geometry = Geometry::preset("ia64", [14, 30, 50], [16, 14], ZoneLimits::IA64);

    /// Every preset, in the order of [`Geometry::PRESET_NAMES`].
    pub const PRESETS: [Geometry; 6] = [
        Geometry::X86_64,
        Geometry::X86_64_LA57,
        Geometry::ARM64_4K,
        Geometry::ARM64_16K,
        Geometry::ARM64_64K,
        Geometry::IA64,
    ];

    /// Names accepted by [`Geometry::by_name`].
    pub const PRESET_NAMES: [&'static str; 6] = [
        "x86_64",
        "x86_64-la57",
        "arm64-4k",
        "arm64-16k",
        "arm64-64k",
        "ia64",
    ];

    const fn preset(
        name: &'static str,
        [page_shift, section_size_bits, max_physmem_bits]: [u32; 3],
        [max_page_order, pageblock_order]: [u8; 2],
        zone_limits: ZoneLimits,
    ) -> Geometry {
        Geometry {
            name,
            page_shift,
            section_size_bits,
            max_physmem_bits,
            max_page_order,
            pageblock_order,
            zone_limits,
        }
    }

    /// Looks up a preset by name.
    pub fn by_name(name: &str) -> Result<Geometry, GeometryError> {
        Geometry::PRESETS
            .into_iter()
            .find(|g| g.name == name)
            .ok_or_else(|| GeometryError::UnknownPreset(name.to_owned()))
    }

    /// Builds and validates a custom geometry (see the type's invariants)
    /// with the generic `MAX_PAGE_ORDER` (10), `pageblock_order` of one
    /// page-table page's reach (`PMD_SHIFT - PAGE_SHIFT` = `page_shift - 3`,
    /// the `HUGETLB_PAGE_ORDER` of x86_64 and arm64) capped at the max
    /// order, and x86_64's zone limits.
    pub fn new(
        page_shift: u32,
        section_size_bits: u32,
        max_physmem_bits: u32,
    ) -> Result<Geometry, GeometryError> {
        let bad = |why: String| Err(GeometryError::Invalid(why));
        if !(10..=21).contains(&page_shift) {
            return bad(format!("page_shift {page_shift} is outside 10..=21"));
        }
        if section_size_bits < SUBSECTION_SHIFT
            || section_size_bits - SUBSECTION_SHIFT > MAX_SUBSECTIONS_PER_SECTION.trailing_zeros()
        {
            return bad(format!(
                "section_size_bits {section_size_bits} must be within {SUBSECTION_SHIFT}..={} (2 MiB subsections, at most {MAX_SUBSECTIONS_PER_SECTION} per section)",
                SUBSECTION_SHIFT + MAX_SUBSECTIONS_PER_SECTION.trailing_zeros()
            ));
        }
        if !(section_size_bits..=57).contains(&max_physmem_bits) {
            return bad(format!(
                "max_physmem_bits {max_physmem_bits} must be within {section_size_bits}..=57"
            ));
        }
        if max_physmem_bits - section_size_bits > MAX_SECTIONS_SHIFT {
            return bad(format!(
                "2^{} sections (max_physmem_bits {max_physmem_bits} - section_size_bits {section_size_bits}) exceed 2^{MAX_SECTIONS_SHIFT}",
                max_physmem_bits - section_size_bits
            ));
        }
        let max_page_order = DEFAULT_MAX_PAGE_ORDER;
        let pageblock_order = (page_shift - 3).min(u32::from(max_page_order)) as u8;
        Geometry::preset(
            "custom",
            [page_shift, section_size_bits, max_physmem_bits],
            [max_page_order, pageblock_order],
            ZoneLimits::X86_64,
        )
        .with_orders(max_page_order, pageblock_order)?
        .with_zone_limits(ZoneLimits::X86_64)
    }

    /// The same geometry with another `MAX_PAGE_ORDER` and `pageblock_order`,
    /// validated.
    pub fn with_orders(
        self,
        max_page_order: u8,
        pageblock_order: u8,
    ) -> Result<Geometry, GeometryError> {
        let bad = |why: String| Err(GeometryError::Invalid(why));
        if max_page_order > MAX_PAGE_ORDER_LIMIT {
            return bad(format!(
                "MAX_PAGE_ORDER {max_page_order} is above {MAX_PAGE_ORDER_LIMIT}, the largest any architecture used"
            ));
        }
        let block_bits = self.page_shift + u32::from(max_page_order);
        if block_bits > self.section_size_bits {
            return bad(format!(
                "a MAX_PAGE_ORDER block (2^{block_bits} bytes) does not fit in a 2^{}-byte section",
                self.section_size_bits
            ));
        }
        if pageblock_order > max_page_order {
            return bad(format!(
                "pageblock_order {pageblock_order} is above MAX_PAGE_ORDER {max_page_order}"
            ));
        }
        let per_section_bits =
            self.section_size_bits - self.page_shift - u32::from(pageblock_order);
        if 1u64 << per_section_bits > crate::pageblock::MAX_PAGEBLOCKS_PER_SECTION {
            return bad(format!(
                "pageblock_order {pageblock_order} gives 2^{per_section_bits} pageblocks per section; at most {} fit a section's pageblock flags",
                crate::pageblock::MAX_PAGEBLOCKS_PER_SECTION
            ));
        }
        Ok(Geometry {
            max_page_order,
            pageblock_order,
            ..self
        })
    }

    /// The same geometry with other zone limits, validated.
    pub fn with_zone_limits(self, limits: ZoneLimits) -> Result<Geometry, GeometryError> {
        let bad = |why: String| Err(GeometryError::Invalid(why));
        let max = self.max_phys_addr().get();
        for (name, limit) in [("ZONE_DMA", limits.dma), ("ZONE_DMA32", limits.dma32)] {
            match limit {
                Some(b) if b == 0 || !b.is_multiple_of(self.page_size()) || b > max => {
                    return bad(format!(
                        "the end of {name} ({b:#x}) must be a page-aligned address within 2^{} bytes",
                        self.max_physmem_bits
                    ));
                }
                _ => {}
            }
        }
        if let (Some(dma), Some(dma32)) = (limits.dma, limits.dma32)
            && dma > dma32
        {
            return bad(format!(
                "ZONE_DMA ends at {dma:#x}, above the end of ZONE_DMA32 ({dma32:#x})"
            ));
        }
        Ok(Geometry {
            zone_limits: limits,
            ..self
        })
    }

    pub(crate) fn from_custom(c: CustomGeometry) -> Result<Geometry, GeometryError> {
        let g = Geometry::new(c.page_shift, c.section_size_bits, c.max_physmem_bits)?;
        let max_page_order = c.max_page_order.unwrap_or(g.max_page_order);
        let pageblock_order = c
            .pageblock_order
            .unwrap_or_else(|| g.pageblock_order.min(max_page_order));
        let limit = |given: Option<u64>, default| match given {
            Some(0) => None,
            Some(b) => Some(b),
            None => default,
        };
        let limits = ZoneLimits {
            dma: limit(c.zone_dma_bytes, g.zone_limits.dma),
            dma32: limit(c.zone_dma32_bytes, g.zone_limits.dma32),
        };
        g.with_orders(max_page_order, pageblock_order)?
            .with_zone_limits(limits)
    }

    /// Preset name, or `custom`.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// `PAGE_SHIFT`.
    #[inline(always)]
    pub const fn page_shift(&self) -> u32 {
        self.page_shift
    }

    /// `PAGE_SIZE` in bytes.
    #[inline(always)]
    pub const fn page_size(&self) -> u64 {
        1 << self.page_shift
    }

    /// `SECTION_SIZE_BITS`.
    #[inline(always)]
    pub const fn section_size_bits(&self) -> u32 {
        self.section_size_bits
    }

    /// `MAX_PHYSMEM_BITS`.
    #[inline(always)]
    pub const fn max_physmem_bits(&self) -> u32 {
        self.max_physmem_bits
    }

    /// `MAX_PAGE_ORDER`: the largest buddy order, inclusive.
    #[inline(always)]
    pub const fn max_order(&self) -> Order {
        // No check: the type's invariant bounds the field.
        Order(self.max_page_order)
    }

    /// `MAX_ORDER_NR_PAGES`: pages in a max-order block.
    #[inline(always)]
    pub const fn max_order_nr_pages(&self) -> u64 {
        1 << self.max_page_order
    }

    /// `pageblock_order`: the order of the blocks migratetypes are tracked
    /// for.
    #[inline(always)]
    pub const fn pageblock_order(&self) -> Order {
        // No check: the type's invariant bounds the field.
        Order(self.pageblock_order)
    }

    /// `pageblock_nr_pages`.
    #[inline(always)]
    pub const fn pageblock_nr_pages(&self) -> u64 {
        1 << self.pageblock_order
    }

    /// Pageblocks in one section.
    #[inline(always)]
    pub const fn pageblocks_per_section(&self) -> u64 {
        self.pages_per_section() >> self.pageblock_order
    }

    /// `pfn_to_bitidx`: the index of `pfn`'s pageblock within its section.
    #[inline(always)]
    pub const fn pageblock_index(&self, pfn: Pfn) -> u64 {
        (pfn.get() & (self.pages_per_section() - 1)) >> self.pageblock_order
    }

    /// Where the DMA zones end.
    #[inline(always)]
    pub const fn zone_limits(&self) -> ZoneLimits {
        self.zone_limits
    }

    /// `memory_block_size_bytes()` in pages: the unit memory is hot-added,
    /// onlined and offlined in. pfnlab uses one section, the kernel's
    /// `MIN_MEMORY_BLOCK_SIZE` (x86_64 picks up to 2 GiB on machines with
    /// 64 GiB and more; arm64 and ia64 use one section).
    #[inline(always)]
    pub const fn memory_block_pages(&self) -> u64 {
        self.pages_per_section()
    }

    /// `PFN_SECTION_SHIFT`: pfn bits below the section number.
    #[inline(always)]
    pub const fn pfn_section_shift(&self) -> u32 {
        self.section_size_bits - self.page_shift
    }

    /// `PAGES_PER_SECTION`.
    #[inline(always)]
    pub const fn pages_per_section(&self) -> u64 {
        1 << self.pfn_section_shift()
    }

    /// `PFN_SUBSECTION_SHIFT`: pfn bits below the subsection number.
    #[inline(always)]
    pub const fn pfn_subsection_shift(&self) -> u32 {
        SUBSECTION_SHIFT - self.page_shift
    }

    /// `PAGES_PER_SUBSECTION`.
    #[inline(always)]
    pub const fn pages_per_subsection(&self) -> u64 {
        1 << self.pfn_subsection_shift()
    }

    /// `SUBSECTIONS_PER_SECTION`.
    #[inline(always)]
    pub const fn subsections_per_section(&self) -> u64 {
        1 << (self.section_size_bits - SUBSECTION_SHIFT)
    }

    /// `NR_MEM_SECTIONS`: sections in the whole physical address space.
    #[inline(always)]
    pub const fn nr_mem_sections(&self) -> u64 {
        1 << (self.max_physmem_bits - self.section_size_bits)
    }

    /// One past the largest pfn the physical address width allows
    /// (`2^(MAX_PHYSMEM_BITS - PAGE_SHIFT)`).
    #[inline(always)]
    pub const fn max_pfn(&self) -> Pfn {
        Pfn::new(1 << (self.max_physmem_bits - self.page_shift))
    }

    /// One past the largest physical address (`2^MAX_PHYSMEM_BITS`).
    pub const fn max_phys_addr(&self) -> PhysAddr {
        PhysAddr::new(1 << self.max_physmem_bits)
    }

    /// `pfn_to_section_nr`.
    #[inline(always)]
    pub const fn pfn_to_section_nr(&self, pfn: Pfn) -> SectionNr {
        SectionNr::new(pfn.get() >> self.pfn_section_shift())
    }

    /// `section_nr_to_pfn`: the first pfn of a section.
    #[inline(always)]
    pub const fn section_nr_to_pfn(&self, nr: SectionNr) -> Pfn {
        Pfn::new(nr.get() << self.pfn_section_shift())
    }

    /// `subsection_map_index`: the subsection of `pfn` within its section.
    #[inline(always)]
    pub const fn subsection_index(&self, pfn: Pfn) -> u64 {
        (pfn.get() & (self.pages_per_section() - 1)) >> self.pfn_subsection_shift()
    }

    /// Splits `[start, end)` into its pieces within one section each, lowest
    /// first, with the subsections each piece touches (how `sparse_add_section`
    /// callers and `memblocks_present` walk a range).
    pub fn section_chunks(&self, start: Pfn, end: Pfn) -> impl Iterator<Item = SectionChunk> + '_ {
        let mut pfn = start.get();
        std::iter::from_fn(move || {
            if pfn >= end.get() {
                return None;
            }
            let nr = self.pfn_to_section_nr(Pfn::new(pfn));
            let chunk_end =
                (self.section_nr_to_pfn(nr).get() + self.pages_per_section()).min(end.get());
            let chunk = SectionChunk {
                nr,
                start: Pfn::new(pfn),
                end: Pfn::new(chunk_end),
                first_subsection: self.subsection_index(Pfn::new(pfn)),
                last_subsection: self.subsection_index(Pfn::new(chunk_end - 1)),
            };
            pfn = chunk_end;
            Some(chunk)
        })
    }

    /// Checks a hotplug range as `check_pfn_span` does at subsection
    /// granularity: not empty, `start` and `nr_pages` subsection aligned,
    /// ending at or below `max_pfn`. Returns the end pfn.
    pub fn check_subsection_range(&self, start: Pfn, nr_pages: u64) -> Result<Pfn, HotplugError> {
        self.check_aligned_range(start, nr_pages, Granule::Subsection)
    }

    /// Checks a range of ordinary hotplug memory as
    /// `check_hotplug_memory_range` does: whole memory blocks
    /// ([`Geometry::memory_block_pages`]), ending at or below `max_pfn`.
    /// Returns the end pfn.
    pub fn check_memory_block_range(&self, start: Pfn, nr_pages: u64) -> Result<Pfn, HotplugError> {
        self.check_aligned_range(start, nr_pages, Granule::MemoryBlock)
    }

    /// Pages in one `granule`.
    pub const fn granule_pages(&self, granule: Granule) -> u64 {
        match granule {
            Granule::Subsection => self.pages_per_subsection(),
            Granule::MemoryBlock => self.memory_block_pages(),
        }
    }

    /// Checks that `[start, start + nr_pages)` is not empty, comes in whole
    /// `granule`s and ends at or below `max_pfn`. Returns the end pfn.
    pub fn check_aligned_range(
        &self,
        start: Pfn,
        nr_pages: u64,
        granule: Granule,
    ) -> Result<Pfn, HotplugError> {
        let unit_pages = self.granule_pages(granule);
        if nr_pages == 0
            || !start.get().is_multiple_of(unit_pages)
            || !nr_pages.is_multiple_of(unit_pages)
        {
            return Err(HotplugError::Misaligned {
                start,
                nr_pages,
                granule,
                unit_pages,
            });
        }
        start
            .checked_add(nr_pages)
            .filter(|e| *e <= self.max_pfn())
            .ok_or(HotplugError::OutOfRange {
                end: Pfn::new(start.get().saturating_add(nr_pages)),
                max_pfn: self.max_pfn(),
            })
    }

    /// The pfn of a physical address, rounded down (`PHYS_PFN`).
    #[inline(always)]
    pub const fn phys_to_pfn(&self, addr: PhysAddr) -> Pfn {
        Pfn::new(addr.get() >> self.page_shift)
    }

    /// The physical address of a pfn (`PFN_PHYS`), or `None` when it does not
    /// fit in 64 bits.
    pub const fn pfn_to_phys(&self, pfn: Pfn) -> Option<PhysAddr> {
        if pfn.get() >> (64 - self.page_shift) != 0 {
            None
        } else {
            Some(PhysAddr::new(pfn.get() << self.page_shift))
        }
    }
}

impl fmt::Display for Geometry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (PAGE_SHIFT {}, SECTION_SIZE_BITS {}, MAX_PHYSMEM_BITS {}, {} subsections/section, MAX_PAGE_ORDER {}, pageblock_order {})",
            self.name,
            self.page_shift,
            self.section_size_bits,
            self.max_physmem_bits,
            self.subsections_per_section(),
            self.max_page_order,
            self.pageblock_order
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_match_the_kernel() {
        let g = Geometry::by_name("x86_64").unwrap();
        assert_eq!(g.pages_per_section(), 32768);
        assert_eq!(g.subsections_per_section(), 64);
        assert_eq!(g.pages_per_subsection(), 512);
        assert_eq!(g.nr_mem_sections(), 1 << 19);
        assert_eq!(Geometry::IA64.subsections_per_section(), 512);
        assert_eq!(Geometry::ARM64_64K.pages_per_subsection(), 32);
        assert_eq!(Geometry::X86_64_LA57.max_pfn(), Pfn::new(1 << 40));
        for (g, name) in Geometry::PRESETS.iter().zip(Geometry::PRESET_NAMES) {
            assert_eq!(g.name(), name);
            let c = Geometry::new(g.page_shift, g.section_size_bits, g.max_physmem_bits)
                .and_then(|c| c.with_orders(g.max_page_order, g.pageblock_order))
                .and_then(|c| c.with_zone_limits(g.zone_limits));
            assert!(c.is_ok(), "{name} must pass its own validation");
            // A max-order block never leaves its section.
            assert!(g.max_order_nr_pages() <= g.pages_per_section(), "{name}");
        }
        assert_eq!(Geometry::ARM64_64K.max_order().get(), 13);
        assert_eq!(
            Geometry::ARM64_64K.max_order_nr_pages(),
            Geometry::ARM64_64K.pages_per_section(),
            "arm64 64K: a max-order block is one 512 MiB section"
        );
        assert_eq!(
            Geometry::IA64.max_order_nr_pages(),
            Geometry::IA64.pages_per_section()
        );
        assert_eq!(Geometry::X86_64.pageblock_order().get(), 9);
        assert_eq!(Geometry::IA64.zone_limits().dma, None);
        assert_eq!(
            Geometry::new(12, 27, 46).unwrap().pageblock_order().get(),
            9
        );
        assert_eq!(
            Geometry::new(16, 29, 48).unwrap().pageblock_order().get(),
            10
        );
    }

    #[test]
    fn impossible_geometries_are_refused() {
        let e = Geometry::new(12, 21, 46).unwrap_err();
        assert!(e.to_string().contains("MAX_PAGE_ORDER block"), "{e}");
        let e = Geometry::new(12, 31, 46).unwrap_err();
        assert!(e.to_string().contains("at most 512 per section"), "{e}");
        let e = Geometry::new(12, 27, 60).unwrap_err();
        assert!(e.to_string().contains("max_physmem_bits 60"), "{e}");
        let e = Geometry::new(9, 27, 46).unwrap_err();
        assert!(e.to_string().contains("page_shift 9"), "{e}");
        let e = Geometry::new(10, 21, 57).unwrap_err();
        assert!(e.to_string().contains("2^36 sections"), "{e}");
        let g = Geometry::new(16, 29, 48).unwrap();
        let e = g.with_orders(14, 9).unwrap_err();
        assert!(e.to_string().contains("2^30 bytes"), "{e}");
        let e = g.with_orders(17, 9).unwrap_err();
        assert!(
            e.to_string().contains("MAX_PAGE_ORDER 17 is above 16"),
            "{e}"
        );
        let e = g.with_orders(10, 11).unwrap_err();
        assert!(e.to_string().contains("pageblock_order 11"), "{e}");
        let e = Geometry::X86_64.with_orders(10, 0).unwrap_err();
        assert!(
            e.to_string()
                .contains("2^15 pageblocks per section; at most 512"),
            "{e}"
        );
        assert_eq!(Geometry::X86_64.pageblocks_per_section(), 64);
        assert_eq!(Geometry::ARM64_64K.pageblocks_per_section(), 1);
        let limits = |dma, dma32| ZoneLimits { dma, dma32 };
        let e = g
            .with_zone_limits(limits(Some(8 << 30), Some(4 << 30)))
            .unwrap_err();
        assert!(e.to_string().contains("above the end of ZONE_DMA32"), "{e}");
        let e = g.with_zone_limits(limits(Some(100), None)).unwrap_err();
        assert!(e.to_string().contains("page-aligned"), "{e}");
        let e = g.with_zone_limits(limits(None, Some(1 << 50))).unwrap_err();
        assert!(e.to_string().contains("within 2^48"), "{e}");
        let e = Geometry::by_name("vax").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown geometry `vax` (known: x86_64, x86_64-la57, arm64-4k, arm64-16k, arm64-64k, ia64)"
        );
    }

    #[test]
    fn conversions() {
        let g = Geometry::X86_64;
        let pfn = Pfn::new(3 * 32768 + 5 * 512 + 7);
        assert_eq!(g.pfn_to_section_nr(pfn), SectionNr::new(3));
        assert_eq!(g.subsection_index(pfn), 5);
        assert_eq!(g.section_nr_to_pfn(SectionNr::new(3)), Pfn::new(3 * 32768));
        assert_eq!(g.pfn_to_phys(Pfn::new(u64::MAX)), None);
        assert_eq!(g.phys_to_pfn(PhysAddr::new(0x9fc00)), Pfn::new(0x9f));
    }
}
