//! SPARSEMEM: a section table, and a separate memmap per present section.
//!
//! `pfn_valid` walks the table ([`SectionTable::pfn_valid`]): section
//! number, entry (one load for the classic table, two dependent loads for
//! EXTREME), `SECTION_HAS_MEM_MAP`, the `SECTION_IS_EARLY` short cut, and for
//! other sections the subsection bitmap behind `usage` (one more dependent
//! load). `pfn_to_page` decodes the entry's biased memmap pointer and adds
//! the pfn.
//!
//! Each section's memmap is an anonymous `memmap2` mapping of
//! `PAGES_PER_SECTION` descriptors, as the kernel allocates a whole
//! section's memmap for non-VMEMMAP SPARSEMEM. Only descriptors of valid
//! pfns are initialised, so an invalid pfn's descriptor reads as a hole.
//!
//! Deliberate difference from the kernel: Linux allows sub-section hot-add
//! only with SPARSEMEM_VMEMMAP (for ZONE_DEVICE). pfnlab keeps the
//! subsection map in the table models too, and hot-adds and removes at
//! 2 MiB granularity here as well, so every section-based model answers
//! `pfn_valid` alike and can be compared on the same layouts.

use std::collections::BTreeMap;
use std::marker::PhantomData;

use crate::error::{BuildError, HotplugError};
use crate::geometry::Geometry;
use crate::layout::Layout;
use crate::memmap::{MemmapBlock, check_memmap_budget};
use crate::model::{MemmapBytes, MemoryModel};
use crate::page::{PAGE_STRUCT_SIZE, Page};
use crate::table::{Classic, Extreme, HotplugOp, SectionChange, SectionRoot, SectionTable};
use crate::types::{Pfn, SectionNr};

/// A SPARSEMEM model over section root `R` ([`Classic`] or [`Extreme`]).
///
/// Invariants: every present section in `table` has its memmap in
/// `memmaps`, and the descriptor of a pfn is present exactly when the pfn is
/// valid.
pub struct Sparse<R: SectionRoot> {
    table: SectionTable<R>,
    memmaps: BTreeMap<SectionNr, MemmapBlock>,
    _root: PhantomData<R>,
}

/// Classic one-level SPARSEMEM.
pub type SparseClassic = Sparse<Classic>;
/// SPARSEMEM_EXTREME.
pub type SparseExtreme = Sparse<Extreme>;

/// Initialises the descriptors of the subsections in `bits` of section `nr`.
fn init_subsections(
    g: &Geometry,
    block: &MemmapBlock,
    nr: SectionNr,
    change_bits: impl Iterator<Item = u64>,
) {
    let per = g.pages_per_subsection() as usize;
    for i in change_bits {
        let first = i as usize * per;
        for page in &block.pages()[first..first + per] {
            // SAFETY: the model owns a memmap block it is initialising; no
            // allocator can see a subsection before it is installed.
            unsafe { page.init_reserved(nr.get()) };
        }
    }
}

impl<R: SectionRoot> Sparse<R> {
    /// Builds the table and memmaps for `layout`; boot and hotplug ranges
    /// start online.
    pub fn new(layout: &Layout) -> Result<Self, BuildError> {
        let g = *layout.geometry();
        // Refuse absurd layouts before planning them section by section.
        check_memmap_budget(layout.present_pages().saturating_mul(PAGE_STRUCT_SIZE))?;
        let mut table = SectionTable::<R>::new(g)?;
        let plan = layout.section_plan();
        check_memmap_budget(plan.len() as u64 * g.pages_per_section() * PAGE_STRUCT_SIZE)?;
        let mut memmaps = BTreeMap::new();
        for (&nr, sp) in &plan {
            let block = MemmapBlock::new(g.pages_per_section())?;
            if sp.early {
                for page in block.pages() {
                    // SAFETY: a fresh block owned by the model, not yet
                    // installed, so no allocator sees it.
                    unsafe { page.init_reserved(nr.get()) };
                }
            } else {
                init_subsections(&g, &block, nr, sp.subsections.iter());
            }
            table.install(nr, block.as_ptr(), sp.early, sp.subsections, true);
            memmaps.insert(nr, block);
        }
        Ok(Sparse {
            table,
            memmaps,
            _root: PhantomData,
        })
    }

    /// The section table (for reports and the vmemmap comparison).
    pub fn table(&self) -> &SectionTable<R> {
        &self.table
    }

    fn discard_subsections(&mut self, c: &SectionChange) -> Result<(), HotplugError> {
        let g = *self.table.geometry();
        let early = self
            .table
            .nr_to_section(c.nr)
            .is_some_and(|ms| ms.is_early());
        let Some(block) = self.memmaps.get_mut(&c.nr) else {
            return Ok(());
        };
        if early {
            // The memmap of an early section stays fully populated.
            return Ok(());
        }
        let per = g.pages_per_subsection();
        for i in c.bits.iter() {
            block
                .discard_range(i * per, per)
                .map_err(HotplugError::Memmap)?;
        }
        Ok(())
    }
}

// SAFETY: the trait's promises, point by point: (1) a valid pfn's
// descriptor is in a memmap the model owns and initialised, and
// `page_to_pfn` inverts `pfn_to_page` (tested generically for every model);
// (2) each section's memmap is one contiguous allocation and the pointer is
// derived from its base; (3) validity comes from the model's tables or
// span, never from descriptor contents; (4) the geometry is a field set at
// construction.
unsafe impl<R: SectionRoot> MemoryModel for Sparse<R> {
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
    unsafe fn pfn_to_page_ptr(&self, pfn: Pfn) -> *const Page {
        debug_assert!(self.pfn_valid(pfn));
        // SAFETY: the caller promises pfn_valid(pfn), so the section entry
        // exists; its decoded pointer (taken from the block's full-provenance
        // base) plus `pfn` lies in that section's MemmapBlock.
        unsafe { self.table.pfn_to_section(pfn).unwrap_unchecked() }.page_ptr(pfn.get())
    }

    fn page_to_pfn(&self, page: &Page) -> Pfn {
        let ms = self
            .table
            .nr_to_section(SectionNr::new(page.section()))
            .expect("page_to_pfn: the page's section is present");
        let offset = std::ptr::from_ref(page)
            .addr()
            .wrapping_sub(ms.mem_map_biased().addr());
        Pfn::new(offset as u64 / PAGE_STRUCT_SIZE)
    }

    fn pfn_to_online_page(&self, pfn: Pfn) -> Option<&Page> {
        if self.table.pfn_online(pfn) {
            // SAFETY: pfn_online implies pfn_valid; `self` is borrowed shared.
            Some(unsafe { self.pfn_to_page_unchecked(pfn) })
        } else {
            None
        }
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
        b
    }

    fn hot_add(&mut self, start: Pfn, nr_pages: u64) -> Result<(), HotplugError> {
        let g = *self.table.geometry();
        let changes = self.table.plan(start, nr_pages, HotplugOp::Add)?;
        let new_sections = changes.iter().filter(|c| c.whole_section).count() as u64;
        check_memmap_budget(new_sections * g.pages_per_section() * PAGE_STRUCT_SIZE)
            .map_err(HotplugError::TooLarge)?;
        let mut fresh = BTreeMap::new();
        for c in changes.iter().filter(|c| c.whole_section) {
            fresh.insert(
                c.nr,
                MemmapBlock::new(g.pages_per_section()).map_err(HotplugError::Memmap)?,
            );
        }
        for c in &changes {
            let block = fresh.get(&c.nr).or_else(|| self.memmaps.get(&c.nr));
            let block = block.expect("a present section has a memmap (invariant)");
            init_subsections(&g, block, c.nr, c.bits.iter());
        }
        self.table.commit_add(&changes, |nr| fresh[&nr].as_ptr());
        self.memmaps.extend(fresh);
        Ok(())
    }

    fn hot_remove(&mut self, start: Pfn, nr_pages: u64) -> Result<(), HotplugError> {
        let changes = self.table.plan(start, nr_pages, HotplugOp::Remove)?;
        for c in &changes {
            if !c.whole_section {
                self.discard_subsections(c)?;
            }
        }
        self.table.commit_remove(&changes);
        for c in changes.iter().filter(|c| c.whole_section) {
            self.memmaps.remove(&c.nr);
        }
        Ok(())
    }

    fn set_online(&mut self, start: Pfn, nr_pages: u64, online: bool) -> Result<(), HotplugError> {
        self.table.set_online(start, nr_pages, online)
    }
}
