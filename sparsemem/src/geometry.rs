//! The sizes that shape a physical memory map: page size, section size,
//! subsection size and the physical address width.
//!
//! The kernel fixes these at compile time per architecture
//! (`PAGE_SHIFT`, `SECTION_SIZE_BITS`, `MAX_PHYSMEM_BITS`, `SUBSECTION_SHIFT`);
//! pfnlab keeps them as runtime values so one binary can compare
//! architectures. Presets reproduce the kernel's values; custom geometries
//! are checked against the same constraints the kernel enforces at build
//! time (a `MAX_PAGE_ORDER` block must fit in one section).

use std::fmt;

use serde::Deserialize;

use crate::error::HotplugError;
use crate::types::{MAX_PAGE_ORDER, Pfn, PhysAddr, SectionNr};

/// `SUBSECTION_SHIFT`: sub-section hotplug granularity, 2 MiB on every
/// architecture.
pub const SUBSECTION_SHIFT: u32 = 21;

/// Most section-number bits a geometry may have (`SECTIONS_SHIFT`):
/// x86_64 with 5-level paging has 52 - 27 = 25.
pub const MAX_SECTIONS_SHIFT: u32 = 25;

/// Most subsections a section may have: the subsection bitmap in a
/// section's usage is sized for this (ia64: 1 GiB / 2 MiB = 512).
pub const MAX_SUBSECTIONS_PER_SECTION: u64 = 512;

/// Page, section and physical-address sizes of one architecture.
///
/// Invariants (checked by [`Geometry::new`]):
/// - `10 <= page_shift <= 21`;
/// - `page_shift + MAX_PAGE_ORDER <= section_size_bits` (a max-order block
///   fits in a section, so a buddy never leaves its section);
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

/// A custom geometry as written in a layout file.
#[derive(Deserialize, Debug, Clone, Copy)]
#[serde(deny_unknown_fields)]
pub(crate) struct CustomGeometry {
    pub page_shift: u32,
    pub section_size_bits: u32,
    pub max_physmem_bits: u32,
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
    /// x86_64 with 4-level paging: 4 KiB pages, 128 MiB sections, 46 bits.
    pub const X86_64: Geometry = Geometry::preset("x86_64", 12, 27, 46);
    /// x86_64 with 5-level paging (LA57): 52 physical address bits.
    pub const X86_64_LA57: Geometry = Geometry::preset("x86_64-la57", 12, 27, 52);
    /// arm64 with 4 KiB pages.
    pub const ARM64_4K: Geometry = Geometry::preset("arm64-4k", 12, 27, 48);
    /// arm64 with 64 KiB pages and 512 MiB sections.
    pub const ARM64_64K: Geometry = Geometry::preset("arm64-64k", 16, 29, 48);
    /// ia64 with 16 KiB pages and 1 GiB sections.
    pub const IA64: Geometry = Geometry::preset("ia64", 14, 30, 50);

    /// Every preset, in the order of [`Geometry::PRESET_NAMES`].
    pub const PRESETS: [Geometry; 5] = [
        Geometry::X86_64,
        Geometry::X86_64_LA57,
        Geometry::ARM64_4K,
        Geometry::ARM64_64K,
        Geometry::IA64,
    ];

    /// Names accepted by [`Geometry::by_name`].
    pub const PRESET_NAMES: [&'static str; 5] =
        ["x86_64", "x86_64-la57", "arm64-4k", "arm64-64k", "ia64"];

    const fn preset(name: &'static str, page: u32, section: u32, physmem: u32) -> Geometry {
        Geometry {
            name,
            page_shift: page,
            section_size_bits: section,
            max_physmem_bits: physmem,
        }
    }

    /// Looks up a preset by name.
    pub fn by_name(name: &str) -> Result<Geometry, GeometryError> {
        Geometry::PRESETS
            .into_iter()
            .find(|g| g.name == name)
            .ok_or_else(|| GeometryError::UnknownPreset(name.to_owned()))
    }

    /// Builds and validates a custom geometry (see the type's invariants).
    pub fn new(
        page_shift: u32,
        section_size_bits: u32,
        max_physmem_bits: u32,
    ) -> Result<Geometry, GeometryError> {
        let bad = |why: String| Err(GeometryError::Invalid(why));
        if !(10..=21).contains(&page_shift) {
            return bad(format!("page_shift {page_shift} is outside 10..=21"));
        }
        if page_shift + MAX_PAGE_ORDER as u32 > section_size_bits {
            return bad(format!(
                "a MAX_PAGE_ORDER block (2^{} bytes) does not fit in a 2^{section_size_bits}-byte section",
                page_shift + MAX_PAGE_ORDER as u32
            ));
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
        Ok(Geometry::preset(
            "custom",
            page_shift,
            section_size_bits,
            max_physmem_bits,
        ))
    }

    pub(crate) fn from_custom(c: CustomGeometry) -> Result<Geometry, GeometryError> {
        Geometry::new(c.page_shift, c.section_size_bits, c.max_physmem_bits)
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
        let sub = self.pages_per_subsection();
        if nr_pages == 0 || !start.get().is_multiple_of(sub) || !nr_pages.is_multiple_of(sub) {
            return Err(HotplugError::Misaligned { start, nr_pages });
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
            "{} (PAGE_SHIFT {}, SECTION_SIZE_BITS {}, MAX_PHYSMEM_BITS {}, {} subsections/section)",
            self.name,
            self.page_shift,
            self.section_size_bits,
            self.max_physmem_bits,
            self.subsections_per_section()
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
            let c = Geometry::new(g.page_shift, g.section_size_bits, g.max_physmem_bits);
            assert!(c.is_ok(), "{name} must pass its own validation");
        }
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
        let e = Geometry::by_name("vax").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown geometry `vax` (known: x86_64, x86_64-la57, arm64-4k, arm64-64k, ia64)"
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
