//! SPARSEMEM without VMEMMAP: a section table, and a separate memmap per
//! present section.
//!
//! `pfn_valid` walks the table ([`SectionTable::pfn_valid`]): section
//! number, entry (one load for the classic table, two dependent loads for
//! EXTREME) and `SECTION_HAS_MEM_MAP`. As in the kernel, there is no
//! subsection map to consult: without VMEMMAP `pfn_section_valid` is a stub
//! returning 1, so a present section is valid over its whole span, and
//! memory comes and goes in whole sections (`check_pfn_span`; one memory
//! block here). Device memory (ZONE_DEVICE) depends on SPARSEMEM_VMEMMAP,
//! so a layout with `device` ranges is refused. `pfn_to_page` decodes the
//! entry's biased memmap pointer and adds the pfn.
//!
//! Each section's memmap is an anonymous `memmap2` mapping of
//! `PAGES_PER_SECTION` descriptors, as the kernel allocates a whole
//! section's memmap for non-VMEMMAP SPARSEMEM, in huge pages like the
//! kernel's direct map unless built with [`DirectMap::BasePages`] (a
//! memmap smaller than 2 MiB, below 64-byte pages, fits no huge page), and
//! every descriptor of a present section is initialised (holes in boot
//! memory as reserved pages).

use std::collections::BTreeMap;
use std::marker::PhantomData;

use crate::error::{BuildError, HotplugError, VMEMMAP_MODELS};
use crate::geometry::Geometry;
use crate::layout::{Layout, RangeKind};
use crate::memmap::{DirectMap, MemmapBlock, check_memmap_budget, smaps_totals};
use crate::model::{MemmapBytes, MemoryModel, PfnWalker};
use crate::page::{Page64, PageLayout};
use crate::pageblock::Migratetype;
use crate::table::{Classic, Extreme, HotplugOp, MemoryKind, SectionRoot, SectionTable};
use crate::types::{Pfn, SectionNr};

/// A SPARSEMEM model over section root `R` ([`Classic`] or [`Extreme`])
/// with `struct page` layout `P`.
///
/// `page_to_pfn` reads the section number from the page
/// (`SECTION_IN_PAGE_FLAGS`): from its own field at 64 bytes, from the
/// flags word at 32 and 16, and at 8 bytes from the memdesc word, which
/// packs it for the types that have no descriptor (see [`crate::Page8`]).
///
/// Invariants: every present section in `table` has its memmap in
/// `memmaps`, with every descriptor initialised; the table has no VMEMMAP,
/// so it holds whole sections only.
pub struct Sparse<R: SectionRoot, P: PageLayout = Page64> {
    table: SectionTable<R, false>,
    memmaps: BTreeMap<SectionNr, MemmapBlock<P>>,
    /// How every section memmap is mapped, boot's and hot-added ones.
    direct_map: DirectMap,
    _root: PhantomData<R>,
}

/// Classic one-level SPARSEMEM.
pub type SparseClassic = Sparse<Classic>;
/// SPARSEMEM_EXTREME.
pub type SparseExtreme = Sparse<Extreme>;

/// A fresh memmap for section `nr`, every descriptor initialised.
fn section_memmap<P: PageLayout>(
    g: &Geometry,
    nr: SectionNr,
    direct_map: DirectMap,
) -> std::io::Result<MemmapBlock<P>> {
    let block = MemmapBlock::<P>::with_direct_map(g.pages_per_section(), direct_map)?;
    for page in block.pages() {
        // SAFETY: a fresh block owned by the model, not yet installed, so no
        // allocator sees it.
        unsafe { page.init_reserved(nr.get()) };
    }
    Ok(block)
}

impl<R: SectionRoot> Sparse<R> {
    /// Builds the table and memmaps for `layout`: boot memory online,
    /// hot-added memory present and offline, 64-byte pages. Layouts with
    /// device memory are refused ([`BuildError::CannotHold`]).
    pub fn new(layout: &Layout) -> Result<Self, BuildError> {
        Sparse::build(layout)
    }
}

impl<R: SectionRoot, P: PageLayout> Sparse<R, P> {
    /// As [`Sparse::new`], with `struct page` layout `P`.
    pub fn build(layout: &Layout) -> Result<Self, BuildError> {
        Sparse::build_mapped(layout, DirectMap::HugePages)
    }

    /// As [`Sparse::build`], with every section memmap mapped as
    /// `direct_map` says (the kernel's come from memblock, in the direct
    /// map).
    pub fn build_mapped(layout: &Layout, direct_map: DirectMap) -> Result<Self, BuildError> {
        let g = *layout.geometry();
        if let Some((r, _, _)) = layout.ranges_of(RangeKind::Device).next() {
            return Err(BuildError::CannotHold {
                model: R::NAME,
                start: r.start,
                end: r.end,
                why: "device memory (ZONE_DEVICE) needs SPARSEMEM_VMEMMAP",
                models: VMEMMAP_MODELS,
            });
        }
        // Refuse absurd layouts before planning them section by section.
        check_memmap_budget(layout.present_pages().saturating_mul(P::SIZE))?;
        let mut table = SectionTable::<R, false>::new(g)?;
        let plan = layout.section_plan();
        check_memmap_budget(plan.len() as u64 * g.pages_per_section() * P::SIZE)?;
        let mut memmaps = BTreeMap::new();
        for (&nr, sp) in &plan {
            let block = section_memmap::<P>(&g, nr, direct_map)?;
            table.install(nr, block.as_ptr(), sp);
            memmaps.insert(nr, block);
        }
        Ok(Sparse {
            table,
            memmaps,
            direct_map,
            _root: PhantomData,
        })
    }

    /// The section table (for reports and the vmemmap comparison).
    pub fn table(&self) -> &SectionTable<R, false> {
        &self.table
    }
}

// SAFETY: the trait's promises, point by point: (1) a valid pfn's
// descriptor is in a memmap the model owns and initialised, and
// `page_to_pfn` inverts `pfn_to_page` (tested generically for every model);
// (2) each section's memmap is one contiguous allocation and the pointer is
// derived from its base; (3) validity comes from the model's tables or
// span, never from descriptor contents; (4) the geometry is a field set at
// construction.
unsafe impl<R: SectionRoot, P: PageLayout> MemoryModel for Sparse<R, P> {
    type Page = P;

    fn name(&self) -> &'static str {
        R::NAME
    }

    fn geometry(&self) -> &Geometry {
        self.table.geometry()
    }

    #[inline(always)]
    fn pfn_valid(&self, pfn: Pfn) -> bool {
        self.table.pfn_valid(pfn)
    }

    #[inline(always)]
    unsafe fn pfn_to_page_ptr(&self, pfn: Pfn) -> *const P {
        debug_assert!(self.pfn_valid(pfn));
        // SAFETY: the caller promises pfn_valid(pfn), so the section entry
        // exists; its decoded pointer (taken from the block's full-provenance
        // base) plus `pfn` lies in that section's MemmapBlock.
        unsafe { self.table.pfn_to_section(pfn).unwrap_unchecked() }.page_ptr::<P>(pfn.get())
    }

    fn pfn_walker(&self) -> PfnWalker {
        PfnWalker::Sections
    }

    #[inline(always)]
    fn first_valid_pfn(&self, pfn: Pfn, end: Pfn) -> Pfn {
        self.table.first_valid_pfn::<false>(pfn, end)
    }

    #[inline(always)]
    fn next_valid_pfn(&self, pfn: Pfn, end: Pfn) -> Pfn {
        self.table.next_valid_pfn::<false>(pfn, end)
    }

    #[inline(always)]
    fn first_valid_pfn_bulk(&self, pfn: Pfn, end: Pfn) -> Pfn {
        self.table.first_valid_pfn::<true>(pfn, end)
    }

    #[inline(always)]
    fn next_valid_pfn_bulk(&self, pfn: Pfn, end: Pfn) -> Pfn {
        self.table.next_valid_pfn::<true>(pfn, end)
    }

    fn page_to_pfn(&self, page: &P) -> Pfn {
        let ms = self
            .table
            .nr_to_section(SectionNr::new(page.section()))
            .expect("page_to_pfn: the page's section is present");
        let offset = std::ptr::from_ref(page)
            .addr()
            .wrapping_sub(ms.mem_map_biased().addr());
        Pfn::new(offset as u64 / P::SIZE)
    }

    fn pfn_to_online_page(&self, pfn: Pfn) -> Option<&P> {
        if self.table.pfn_online(pfn) {
            // SAFETY: pfn_online implies pfn_valid; `self` is borrowed shared.
            Some(unsafe { self.pfn_to_page_unchecked(pfn) })
        } else {
            None
        }
    }

    #[inline(always)]
    fn get_pfnblock_migratetype(&self, pfn: Pfn) -> Migratetype {
        self.table.get_pfnblock_migratetype(pfn)
    }

    fn set_pfnblock_migratetype(&self, pfn: Pfn, mt: Migratetype) {
        self.table.set_pfnblock_migratetype(pfn, mt);
    }

    fn memmap_bytes(&self) -> MemmapBytes {
        let mut b = MemmapBytes {
            tables: self.table.table_bytes(),
            ..MemmapBytes::default()
        };
        for block in self.memmaps.values() {
            b.reserved += block.reserved_bytes();
            b.resident += block.resident_bytes();
        }
        let ranges: Vec<(u64, u64)> = self.memmaps.values().map(|m| m.address_range()).collect();
        b.huge = smaps_totals(&ranges).map_or(0, |t| t.huge);
        b
    }

    fn hot_add(&mut self, start: Pfn, nr_pages: u64) -> Result<(), HotplugError> {
        let g = *self.table.geometry();
        let changes = self
            .table
            .plan(start, nr_pages, HotplugOp::Add, MemoryKind::Memory)?;
        check_memmap_budget(changes.len() as u64 * g.pages_per_section() * P::SIZE)
            .map_err(HotplugError::TooLarge)?;
        let mut fresh = BTreeMap::new();
        for c in &changes {
            debug_assert!(c.whole_section, "memory blocks are whole sections");
            fresh.insert(
                c.nr,
                section_memmap::<P>(&g, c.nr, self.direct_map).map_err(HotplugError::Memmap)?,
            );
        }
        self.table
            .commit_add(&changes, MemoryKind::Memory, |nr| fresh[&nr].as_ptr());
        self.memmaps.extend(fresh);
        Ok(())
    }

    fn hot_remove(&mut self, start: Pfn, nr_pages: u64) -> Result<(), HotplugError> {
        let changes = self
            .table
            .plan(start, nr_pages, HotplugOp::Remove, MemoryKind::Memory)?;
        self.table.commit_remove(&changes);
        for c in &changes {
            debug_assert!(c.whole_section, "memory blocks are whole sections");
            self.memmaps.remove(&c.nr);
        }
        Ok(())
    }

    fn set_online(&mut self, start: Pfn, nr_pages: u64, online: bool) -> Result<(), HotplugError> {
        self.table.set_online(start, nr_pages, online)
    }
}
