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
//! Every present section has a whole section's memmap of
//! `PAGES_PER_SECTION` descriptors, as the kernel allocates for
//! non-VMEMMAP SPARSEMEM, and every descriptor of a present section is
//! initialised (holes in boot memory as reserved pages). Where it lives
//! follows the kernel:
//! - boot memory: `sparse_init_nid` reserves one buffer per node for all
//!   of the node's present sections (`sparse_buffer_init(map_count *
//!   section_map_size())`) and carves each section's memmap from it
//!   (`sparse_buffer_alloc`), so a node's boot memmaps are one mapping
//!   here, in huge pages like the kernel's direct map at every `struct
//!   page` size (a 256 KiB section memmap at 8 bytes shares its 2 MiB
//!   pages with its neighbours);
//! - a section added later (hot-added memory, or a boot section removed
//!   and added again): a mapping of its own, as
//!   `__populate_section_memmap` allocates one per section;
//! - removing a boot section gives its part of the buffer back
//!   (`free_map_bootmem`): its host pages are discarded, the rest of the
//!   buffer stays.
//!
//! [`DirectMap::BasePages`] maps every one of them in 4 KiB pages instead.

use std::collections::BTreeMap;
use std::marker::PhantomData;

use crate::error::{BuildError, HotplugError, VMEMMAP_MODELS};
use crate::geometry::Geometry;
use crate::layout::{Layout, RangeKind};
use crate::memmap::{DirectMap, MemmapBlock, check_memmap_budget, host_page_size, smaps_totals};
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
/// `memmaps`, with every descriptor initialised; a `SectionMemmap::Boot`
/// names a buffer of `boot` and a section-sized run inside it that no
/// other section has; the table has no VMEMMAP, so it holds whole
/// sections only.
pub struct Sparse<R: SectionRoot, P: PageLayout = Page64> {
    table: SectionTable<R, false>,
    /// One buffer per node holding its boot sections' memmaps.
    boot: Vec<MemmapBlock<P>>,
    memmaps: BTreeMap<SectionNr, SectionMemmap<P>>,
    /// How every section memmap is mapped, boot's and hot-added ones.
    direct_map: DirectMap,
    _root: PhantomData<R>,
}

/// Classic one-level SPARSEMEM.
pub type SparseClassic = Sparse<Classic>;
/// SPARSEMEM_EXTREME.
pub type SparseExtreme = Sparse<Extreme>;

/// Where one section's memmap lives.
enum SectionMemmap<P: PageLayout> {
    /// Carved from the node's boot buffer (`sparse_buffer_alloc`):
    /// descriptors `[first, first + PAGES_PER_SECTION)` of `boot[buffer]`.
    Boot { buffer: usize, first: u64 },
    /// A mapping of its own (`__populate_section_memmap` for a section
    /// added after boot).
    Own(MemmapBlock<P>),
}

/// Initialises every descriptor of section `nr`'s fresh memmap.
fn init_section<P: PageLayout>(pages: &[P], nr: SectionNr) {
    for page in pages {
        // SAFETY: a fresh memmap owned by the model, not yet installed, so
        // no allocator sees it.
        unsafe { page.init_reserved(nr.get()) };
    }
}

/// A fresh memmap of its own for section `nr`, every descriptor
/// initialised.
fn section_memmap<P: PageLayout>(
    g: &Geometry,
    nr: SectionNr,
    direct_map: DirectMap,
) -> std::io::Result<MemmapBlock<P>> {
    let block = MemmapBlock::<P>::with_direct_map(g.pages_per_section(), direct_map)?;
    init_section(block.pages(), nr);
    Ok(block)
}

/// `sparse_init_nid`'s buffer for `sections` (one node's boot sections,
/// ascending), every section's descriptors initialised; section `i` starts
/// at descriptor `i * PAGES_PER_SECTION`.
fn sparse_buffer<P: PageLayout>(
    g: &Geometry,
    sections: &[SectionNr],
    direct_map: DirectMap,
) -> std::io::Result<MemmapBlock<P>> {
    let pps = g.pages_per_section();
    let buffer = MemmapBlock::<P>::with_direct_map(sections.len() as u64 * pps, direct_map)?;
    for (pages, &nr) in buffer.pages().chunks(pps as usize).zip(sections) {
        init_section(pages, nr);
    }
    Ok(buffer)
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
        // Boot sections by node, as `sparse_init` hands each node's run
        // to `sparse_init_nid`; the others (hotplug) get their own.
        let mut by_node: BTreeMap<_, Vec<SectionNr>> = BTreeMap::new();
        for &nr in plan.iter().filter(|(_, sp)| sp.early).map(|(nr, _)| nr) {
            let node = layout.node_of(g.section_nr_to_pfn(nr));
            by_node.entry(node).or_default().push(nr);
        }
        let mut boot = Vec::new();
        let mut memmaps = BTreeMap::new();
        for sections in by_node.values() {
            let buffer = sparse_buffer::<P>(&g, sections, direct_map)?;
            for (i, &nr) in sections.iter().enumerate() {
                let first = i as u64 * g.pages_per_section();
                table.install(nr, buffer.ptr_at(first), &plan[&nr]);
                let at = SectionMemmap::Boot {
                    buffer: boot.len(),
                    first,
                };
                memmaps.insert(nr, at);
            }
            boot.push(buffer);
        }
        for (&nr, sp) in plan.iter().filter(|(_, sp)| !sp.early) {
            let block = section_memmap::<P>(&g, nr, direct_map)?;
            table.install(nr, block.as_ptr(), sp);
            memmaps.insert(nr, SectionMemmap::Own(block));
        }
        Ok(Sparse {
            table,
            boot,
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
// (2) each section's memmap is one contiguous run, of a mapping of its
// own or of its node's boot buffer, and the pointer is derived from that
// mapping's base with the mapping's provenance (`MemmapBlock::ptr_at`); (3) validity comes from the model's tables or
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
        let section_bytes = (self.table.geometry().pages_per_section() * P::SIZE)
            .next_multiple_of(host_page_size() as u64);
        let mut b = MemmapBytes {
            tables: self.table.table_bytes(),
            ..MemmapBytes::default()
        };
        let mut blocks: Vec<&MemmapBlock<P>> = self.boot.iter().collect();
        for m in self.memmaps.values() {
            match m {
                // A removed boot section's part is discarded: not resident.
                SectionMemmap::Boot { .. } => b.reserved += section_bytes,
                SectionMemmap::Own(block) => {
                    b.reserved += block.reserved_bytes();
                    blocks.push(block);
                }
            }
        }
        b.resident = blocks.iter().map(|m| m.resident_bytes()).sum();
        let ranges: Vec<(u64, u64)> = blocks.iter().map(|m| m.address_range()).collect();
        b.huge = smaps_totals(&ranges).map_or(0, |t| t.huge);
        b
    }

    fn hot_add(&mut self, start: Pfn, nr_pages: u64) -> Result<(), HotplugError> {
        let g = *self.table.geometry();
        // Memory comes in whole sections, so the range itself bounds its
        // memmap: a range too large is refused before its sections are
        // planned one by one.
        check_memmap_budget(nr_pages.saturating_mul(P::SIZE)).map_err(HotplugError::TooLarge)?;
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
        self.memmaps
            .extend(fresh.into_iter().map(|(nr, b)| (nr, SectionMemmap::Own(b))));
        Ok(())
    }

    fn hot_remove(&mut self, start: Pfn, nr_pages: u64) -> Result<(), HotplugError> {
        let changes = self
            .table
            .plan(start, nr_pages, HotplugOp::Remove, MemoryKind::Memory)?;
        self.table.commit_remove(&changes);
        let pps = self.table.geometry().pages_per_section();
        for c in &changes {
            debug_assert!(c.whole_section, "memory blocks are whole sections");
            if let Some(SectionMemmap::Boot { buffer, first }) = self.memmaps.remove(&c.nr) {
                // `free_map_bootmem`: the section's part of the buffer goes
                // back; the table no longer points into it. A failed
                // discard leaves the bytes resident, nothing unsound.
                let _ = self.boot[buffer].discard_range(first, pps);
            }
        }
        Ok(())
    }

    fn set_online(&mut self, start: Pfn, nr_pages: u64, online: bool) -> Result<(), HotplugError> {
        self.table.set_online(start, nr_pages, online)
    }
}
