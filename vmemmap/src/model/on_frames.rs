//! memmap_on_memory on real frames: a hot-added block's memmap mapped
//! onto the block's own first frames.
//!
//! The kernel's `vmemmap_populate(…, altmap)` takes the PMDs of a
//! memmap_on_memory block's memmap from the block's first pfns, so the
//! `struct page`s of the block are stored in the block's memory. Here the
//! allocator shares those frames as a file (a memfd) and the model maps
//! the block's part of the reservation from the same file pages: one page
//! of memory at two addresses, once as the frames at the block's pfns and
//! once as the descriptors. Hot-removing the block puts the reservation's
//! own hole back, so no page of the frames stays mapped in the memmap.
//! The frames are mapped before the block is populated, so its memmap is
//! written once, into them, as the kernel's altmap pages are.

use sparsemem::table::{HotplugOp, MemoryKind};
use sparsemem::{HotplugError, MemmapFrames, MemoryModel, PageLayout, Pfn};

use super::{Detector, Vmemmap};
use crate::reserve::HoleStyle;

impl<D: Detector, P: PageLayout> Vmemmap<D, P> {
    /// [`MemoryModel::hot_add_memmap_on_frames`] for this model: the
    /// block's memmap span (a hole: the block is absent) is mapped from
    /// the frames first, so populating and initialising the block's
    /// descriptors writes them into the frames.
    ///
    /// # Safety
    /// As the trait method's.
    pub(super) unsafe fn add_on_frames(
        &mut self,
        start: Pfn,
        nr_pages: u64,
        vmemmap_pages: u64,
        frames: MemmapFrames<'_>,
    ) -> Result<(), HotplugError> {
        let g = *self.geometry();
        self.table
            .plan(start, nr_pages, HotplugOp::Add, MemoryKind::Memory)?;
        if D::HOLES != HoleStyle::Inaccessible {
            return Err(HotplugError::Unsupported(
                "a memmap on frames needs PROT_NONE holes (no userfaultfd on shmem)",
            ));
        }
        if nr_pages != g.memory_block_pages() {
            return Err(HotplugError::Unsupported(
                "a memmap is mapped on the frames of one memory block",
            ));
        }
        let (offset, len) = self.memmap_span(start.get(), nr_pages);
        // SAFETY: (1) the block is absent (planned above), so its memmap
        // span is a hole no reference points into, and `&mut self`
        // excludes any other use; (2) the caller gives the file's range to
        // the model and promises its offset is page aligned (the trait's
        // contract), and a block's memmap span is whole host pages.
        unsafe {
            self.reservation
                .map_foreign(offset, len, frames.fd, frames.offset)
        }
        .map_err(HotplugError::Memmap)?;
        if let Err(e) = self.hot_add_memmap_on_memory(start, nr_pages, vmemmap_pages) {
            self.reservation
                .restore(offset, len)
                .map_err(HotplugError::Memmap)?;
            return Err(e);
        }
        self.on_frames.insert(start.get(), nr_pages);
        Ok(())
    }

    /// Puts the reservation's own hole back over the memmap of every
    /// block of `[start, end)` mapped on its frames, after the blocks were
    /// removed.
    pub(super) fn unmap_frames(&mut self, start: u64, end: u64) -> Result<(), HotplugError> {
        let hosted: Vec<_> = self
            .on_frames
            .range(start..end)
            .map(|(&s, &n)| (s, n))
            .collect();
        for (first, nr) in hosted {
            let (offset, len) = self.memmap_span(first, nr);
            self.reservation
                .restore(offset, len)
                .map_err(HotplugError::Memmap)?;
            self.on_frames.remove(&first);
        }
        Ok(())
    }

    /// Whether `pfn`'s block has its memmap on its own frames.
    pub(crate) fn memmap_on_frames_of(&self, pfn: Pfn) -> bool {
        let per = self.geometry().memory_block_pages();
        self.on_frames.contains_key(&(pfn.get() / per * per))
    }

    /// The first pfns of the blocks whose memmap lives on their own
    /// frames.
    pub fn memmap_on_frames(&self) -> Vec<Pfn> {
        self.on_frames.keys().map(|&p| Pfn::new(p)).collect()
    }
}
