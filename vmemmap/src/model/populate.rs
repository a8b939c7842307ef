//! Populating and retiring the memmap, in PMDs where the kernel maps
//! vmemmap with PMDs.
//!
//! x86_64's `vmemmap_populate` maps a range of at least one section's
//! memmap with `vmemmap_populate_hugepages`: every 2 MiB of the vmemmap it
//! touches gets a whole PMD as soon as any part of it is needed, so at
//! 8 bytes one PMD holds the memmap of eight sections (1 GiB of RAM). A
//! smaller range (a subsection's, on the ZONE_DEVICE path) goes to
//! `vmemmap_populate_basepages` and is mapped in 4 KiB pages. pfnlab does
//! the same with THP requested: a section's memmap populates the whole
//! PMDs around it, `MADV_HUGEPAGE`, and a subsection's populates its own
//! host pages, `MADV_NOHUGEPAGE` (or huge, when they lie in a PMD already
//! populated whole). Descriptors of pfns that are not valid inside a
//! populated PMD stay zero, which every detector reads as a hole.
//!
//! Removal follows `remove_pmd_table`: a PMD is freed only when no valid
//! pfn's descriptor is left in it (`vmemmap_pmd_is_unused`); until then its
//! retired descriptors are holes in place. A memfd-backed memmap (HVO's)
//! and one without THP are populated in host pages, as before.

use std::io;

use sparsemem::PageLayout;
use sparsemem::memmap::PMD_SIZE;

use super::{Detector, Vmemmap};

impl<D: Detector, P: PageLayout> Vmemmap<D, P> {
    /// The host-page-aligned byte range of the memmap of `[first, first+nr)`.
    pub(super) fn memmap_span(&self, first: u64, nr: u64) -> (usize, usize) {
        let page = sparsemem::memmap::host_page_size() as u64;
        let start = first * P::SIZE / page * page;
        let end = ((first + nr) * P::SIZE).div_ceil(page) * page;
        (start as usize, (end - start) as usize)
    }

    /// Whether populating the memmap of `nr` pfns maps whole PMDs
    /// (`vmemmap_populate_hugepages`: at least a section's memmap).
    fn populates_pmds(&self, nr: u64) -> bool {
        self.reservation.thp_requested()
            && self.reservation.memfd().is_none()
            && nr >= self.table.geometry().pages_per_section()
    }

    /// The PMDs (byte offsets) that hold any of `[offset, offset + len)`.
    fn pmds_of(&self, offset: usize, len: usize) -> std::ops::Range<usize> {
        let end = (offset + len)
            .next_multiple_of(PMD_SIZE)
            .min(self.reservation.len());
        offset / PMD_SIZE * PMD_SIZE..end
    }

    /// Populates the memmap of `[first, first + nr)` and initialises it.
    pub(super) fn populate_pfns(&mut self, first: u64, nr: u64) -> io::Result<()> {
        let (offset, len) = self.memmap_span(first, nr);
        let base = self.reservation.base();
        if self.populates_pmds(nr) {
            for pmd in self.pmds_of(offset, len).step_by(PMD_SIZE) {
                if !self.huge_pmds.contains(&pmd) {
                    self.detector
                        .before_populate(base.wrapping_add(pmd), PMD_SIZE)?;
                    self.reservation.populate(pmd, PMD_SIZE, true)?;
                    self.huge_pmds.insert(pmd);
                }
            }
            // Part of a PMD populated whole before may have been mapped
            // over since (a memmap on frames, restored as a hole): the span
            // itself is made accessible again either way.
            self.reservation.populate(offset, len, true)?;
        } else {
            let in_huge_pmd = self.huge_pmds.contains(&(offset / PMD_SIZE * PMD_SIZE));
            self.detector
                .before_populate(base.wrapping_add(offset), len)?;
            self.reservation.populate(offset, len, in_huge_pmd)?;
        }
        let shift = self.table.geometry().pfn_section_shift();
        for pfn in first..first + nr {
            // SAFETY: (1) the descriptor lies in the range just populated;
            // (2) the model owns it and `&mut self` excludes any allocator
            // use, so initialising it is the owner's write.
            unsafe { (*self.base.add(pfn as usize)).init_reserved(pfn >> shift) };
        }
        Ok(())
    }

    /// Retires the memmap of `ranges`, whose pfns the table no longer
    /// holds valid. Two passes, because neighbouring subsections can share a
    /// host page (2 KiB of memmap per subsection with 64 KiB pages) or a
    /// PMD: first every descriptor becomes a hole, then each host page
    /// outside a whole-populated PMD, and each such PMD, left holding no
    /// valid pfn goes back to the kernel, once.
    pub(super) fn retire(&mut self, ranges: &[(u64, u64)]) -> io::Result<()> {
        for &(first, nr) in ranges {
            for pfn in first..first + nr {
                // SAFETY: nothing has been depopulated yet in this call, and
                // these pfns were valid (so populated) until the table commit
                // just before; `&mut self` excludes any live `&P`, so
                // the model retires descriptors it owns.
                unsafe { (*self.base.add(pfn as usize)).clear_to_hole() };
            }
        }
        let page = sparsemem::memmap::host_page_size();
        let mut dead = std::collections::BTreeMap::new();
        for &(first, nr) in ranges {
            let (offset, len) = self.memmap_span(first, nr);
            for pmd in self.pmds_of(offset, len).step_by(PMD_SIZE) {
                if self.huge_pmds.contains(&pmd) && !self.any_valid_bytes(pmd, PMD_SIZE) {
                    dead.insert(pmd, PMD_SIZE);
                }
            }
            for host in (offset..offset + len).step_by(page) {
                let pmd = host / PMD_SIZE * PMD_SIZE;
                if !self.huge_pmds.contains(&pmd) && !self.any_valid_bytes(host, page) {
                    dead.insert(host, page);
                }
            }
        }
        for (at, len) in dead {
            self.reservation.depopulate(at, len)?;
            self.huge_pmds.remove(&at);
            self.detector
                .after_depopulate(self.reservation.base().wrapping_add(at), len)?;
        }
        Ok(())
    }

    /// Whether the memmap bytes `[offset, offset + len)` hold a valid pfn's
    /// descriptor.
    fn any_valid_bytes(&self, offset: usize, len: usize) -> bool {
        let first = offset as u64 / P::SIZE;
        let nr = (len as u64 / P::SIZE).min(self.max_pfn.saturating_sub(first));
        self.any_valid(first, nr)
    }
}
