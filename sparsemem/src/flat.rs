//! FLATMEM: one `mem_map` array over the whole node.
//!
//! The kernel's flat model allocates a `struct page` for every pfn of the
//! node, holes included (their pages are marked reserved), so `pfn_valid`
//! is a single range check and `pfn_to_page` is
//! `mem_map + (pfn - ARCH_PFN_OFFSET)`. It is the fastest lookup and the
//! most wasteful memmap: a hole costs as much as RAM.
//!
//! The array is sized as `alloc_node_mem_map` sizes it: from the node's
//! first pfn rounded down to `MAX_ORDER_NR_PAGES` to its end rounded up, so
//! every max-order block that holds memory has all its descriptors and the
//! buddy may read a buddy's descriptor without `pfn_valid`. pfnlab's
//! `ARCH_PFN_OFFSET` is the array's first pfn and `max_mapnr` its length:
//! `pfn_valid` answers "a descriptor exists" over the whole array. (Until
//! Linux 6.15 each architecture set `max_mapnr`, to `max_pfn -
//! ARCH_PFN_OFFSET`, leaving the rounded tail's descriptors allocated and
//! initialised but invalid; since 6.15 the core sets it when it allocates
//! the FLATMEM map. x86 used `ARCH_PFN_OFFSET` 0.) FLATMEM has no memory hotplug and no
//! ZONE_DEVICE: a layout with `hotplug` or `device` ranges is refused.

use crate::error::{BuildError, HOTPLUG_MODELS, HotplugError, NO_HOTPLUG, VMEMMAP_MODELS};
use crate::geometry::Geometry;
use crate::layout::{Layout, RangeKind};
use crate::memmap::{DirectMap, MemmapBlock, check_memmap_budget};
use crate::model::{MemmapBytes, MemoryModel, PfnWalker};
use crate::page::{Page64, PageLayout};
use crate::pageblock::{Migratetype, NR_PAGEBLOCK_BITS, get_bits, set_bits};
use crate::types::Pfn;

/// The FLATMEM model.
///
/// Invariants: `mem_map` holds `nr_pages` initialised pages, the first for
/// `pfn_offset`; both ends are `MAX_ORDER_NR_PAGES` aligned; every pfn of
/// the span is valid. `P` is the `struct page` layout; FLATMEM exists at
/// every size (`page_to_pfn` is arithmetic, it reads nothing in the page).
pub struct Flat<P: PageLayout = Page64> {
    geometry: Geometry,
    pfn_offset: u64,
    nr_pages: u64,
    mem_map: MemmapBlock<P>,
    /// The node's `pageblock_flags`: 4 bits per pageblock of the array
    /// (under FLATMEM the kernel keeps them in the zone; pfnlab's one node
    /// holds them for all its zones).
    pageblock_flags: Box<[std::sync::atomic::AtomicU64]>,
}

impl Flat {
    /// Builds the memmap over the layout's boot memory
    /// ([`Layout::pfn_span`]), rounded out to max-order blocks, with
    /// 64-byte pages.
    pub fn new(layout: &Layout) -> Result<Flat, BuildError> {
        Flat::build(layout)
    }
}

impl<P: PageLayout> Flat<P> {
    /// As [`Flat::new`], with `struct page` layout `P`.
    pub fn build(layout: &Layout) -> Result<Flat<P>, BuildError> {
        Flat::build_mapped(layout, DirectMap::HugePages)
    }

    /// As [`Flat::build`], with the `mem_map` mapped as `direct_map` says
    /// (the kernel's `mem_map` is memblock memory in the direct map).
    pub fn build_mapped(layout: &Layout, direct_map: DirectMap) -> Result<Flat<P>, BuildError> {
        let geometry = *layout.geometry();
        for (kind, why, models) in [
            (
                RangeKind::Hotplug,
                "FLATMEM has no memory hotplug",
                HOTPLUG_MODELS,
            ),
            (
                RangeKind::Device,
                "device memory (ZONE_DEVICE) needs SPARSEMEM_VMEMMAP",
                VMEMMAP_MODELS,
            ),
        ] {
            if let Some((r, _, _)) = layout.ranges_of(kind).next() {
                return Err(BuildError::CannotHold {
                    model: "flat",
                    start: r.start,
                    end: r.end,
                    why,
                    models,
                });
            }
        }
        let (lo, hi) = layout.pfn_span();
        let block = geometry.max_order_nr_pages();
        let first = lo.get() & !(block - 1);
        let end = hi
            .get()
            .next_multiple_of(block)
            .min(geometry.max_pfn().get());
        let nr_pages = end - first;
        check_memmap_budget(nr_pages.saturating_mul(P::SIZE))?;
        let mem_map = MemmapBlock::<P>::with_direct_map(nr_pages, direct_map)?;
        let shift = geometry.pfn_section_shift();
        for (i, page) in mem_map.pages().iter().enumerate() {
            // SAFETY: a fresh mem_map owned by the model under construction.
            unsafe { page.init_reserved((first + i as u64) >> shift) };
        }
        let blocks = nr_pages.div_ceil(geometry.pageblock_nr_pages());
        let words = (blocks * u64::from(NR_PAGEBLOCK_BITS)).div_ceil(64);
        let pageblock_flags: Box<[std::sync::atomic::AtomicU64]> = (0..words)
            .map(|_| std::sync::atomic::AtomicU64::new(0))
            .collect();
        for b in 0..blocks {
            set_bits(&pageblock_flags, b, Migratetype::Movable);
        }
        Ok(Flat {
            geometry,
            pfn_offset: first,
            nr_pages,
            mem_map,
            pageblock_flags,
        })
    }

    /// `ARCH_PFN_OFFSET`: the first pfn of the array.
    pub fn pfn_offset(&self) -> Pfn {
        Pfn::new(self.pfn_offset)
    }

    /// `max_mapnr`: descriptors in the array.
    pub fn max_mapnr(&self) -> u64 {
        self.nr_pages
    }
}

// SAFETY: the trait's promises, point by point: (1) a valid pfn's
// descriptor is in a memmap the model owns and initialised, and
// `page_to_pfn` inverts `pfn_to_page` (tested generically for every model);
// (2) each section's memmap is one contiguous allocation and the pointer is
// derived from its base; (3) validity comes from the model's tables or
// span, never from descriptor contents; (4) the geometry is a field set at
// construction.
unsafe impl<P: PageLayout> MemoryModel for Flat<P> {
    type Page = P;

    fn name(&self) -> &'static str {
        "flat"
    }

    fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    #[inline(always)]
    fn pfn_valid(&self, pfn: Pfn) -> bool {
        pfn.get().wrapping_sub(self.pfn_offset) < self.nr_pages
    }

    #[inline(always)]
    unsafe fn pfn_to_page_ptr(&self, pfn: Pfn) -> *const P {
        debug_assert!(self.pfn_valid(pfn));
        let index = (pfn.get() - self.pfn_offset) as usize;
        // SAFETY: the caller promises pfn_valid(pfn), so index < nr_pages and
        // the result stays inside the memmap block.
        unsafe { self.mem_map.as_ptr().add(index) }
    }

    fn pfn_walker(&self) -> PfnWalker {
        PfnWalker::FlatClamp
    }

    /// FLATMEM's `for_each_valid_pfn` start: the range clamped to the
    /// array; every pfn of the array is valid.
    #[inline(always)]
    fn first_valid_pfn(&self, pfn: Pfn, end: Pfn) -> Pfn {
        let first = pfn.get().max(self.pfn_offset);
        let limit = end.get().min(self.pfn_offset + self.nr_pages);
        if first < limit { Pfn::new(first) } else { end }
    }

    /// FLATMEM's step: the next pfn while it is inside the clamped range.
    /// It tests the range and never clamps again (no `max` per pfn), so
    /// the walk's dependency chain is the increment alone, as the kernel's
    /// clamped `pfn++` loop is.
    #[inline(always)]
    fn next_valid_pfn(&self, pfn: Pfn, end: Pfn) -> Pfn {
        let limit = end.get().min(self.pfn_offset + self.nr_pages);
        match pfn.get().checked_add(1) {
            Some(next) if next < limit && next >= self.pfn_offset => Pfn::new(next),
            _ => end,
        }
    }

    fn page_to_pfn(&self, page: &P) -> Pfn {
        let base = self.mem_map.as_ptr().addr();
        let index = (std::ptr::from_ref(page).addr() - base) as u64 / P::SIZE;
        Pfn::new(self.pfn_offset + index)
    }

    fn pfn_to_online_page(&self, pfn: Pfn) -> Option<&P> {
        self.pfn_to_page(pfn)
    }

    #[inline(always)]
    fn get_pfnblock_migratetype(&self, pfn: Pfn) -> Migratetype {
        let index =
            pfn.get().wrapping_sub(self.pfn_offset) >> self.geometry.pageblock_order().get();
        get_bits(&self.pageblock_flags, index)
    }

    fn set_pfnblock_migratetype(&self, pfn: Pfn, mt: Migratetype) {
        if self.pfn_valid(pfn) {
            let index = (pfn.get() - self.pfn_offset) >> self.geometry.pageblock_order().get();
            set_bits(&self.pageblock_flags, index, mt);
        }
    }

    fn memmap_bytes(&self) -> MemmapBytes {
        MemmapBytes {
            reserved: self.mem_map.reserved_bytes(),
            resident: self.mem_map.resident_bytes(),
            tables: std::mem::size_of_val(&*self.pageblock_flags) as u64,
            huge: self.mem_map.huge_bytes(),
        }
    }

    fn hot_add(&mut self, _: Pfn, _: u64) -> Result<(), HotplugError> {
        Err(HotplugError::Unsupported(NO_HOTPLUG))
    }

    fn hot_remove(&mut self, _: Pfn, _: u64) -> Result<(), HotplugError> {
        Err(HotplugError::Unsupported(NO_HOTPLUG))
    }

    fn set_online(&mut self, _: Pfn, _: u64, _: bool) -> Result<(), HotplugError> {
        Err(HotplugError::Unsupported(NO_HOTPLUG))
    }
}
