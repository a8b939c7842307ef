//! The one trait every memory model implements.
//!
//! `MemoryModel` is what the allocator and the experiments are generic over.
//! Generic code is monomorphised per model, so `pfn_valid` and `pfn_to_page`
//! inline into the caller's loop exactly as the kernel's macros do; the CLI
//! chooses a model once, at the top, never per call.

use crate::error::HotplugError;
use crate::geometry::Geometry;
use crate::page::PageLayout;
use crate::pageblock::Migratetype;
use crate::types::Pfn;

/// Memory spent on the memmap (the array(s) of `struct page`) and on the
/// tables that find it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemmapBytes {
    /// Virtual bytes mapped or reserved for `struct page`s.
    pub reserved: u64,
    /// Bytes of those actually resident in RAM, measured with `mincore`.
    pub resident: u64,
    /// Bytes of section tables (root array, section entries, usage maps).
    pub tables: u64,
    /// Resident memmap bytes in transparent huge pages (`AnonHugePages` of
    /// the memmap's own mappings); 0 where THP is not requested or given.
    pub huge: u64,
}

/// A memory block's own frames as a file, for its memmap to be mapped onto
/// ([`MemoryModel::hot_add_memmap_on_frames`]): the frame of the block's first
/// pfn is at byte `offset` of `fd`.
#[derive(Clone, Copy, Debug)]
pub struct MemmapFrames<'a> {
    /// The file behind the frames (a memfd).
    pub fd: std::os::fd::BorrowedFd<'a>,
    /// Byte offset of the block's first frame in the file.
    pub offset: u64,
}

/// Which `for_each_valid_pfn` the kernel builds for a memory model
/// (include/linux/mmzone.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PfnWalker {
    /// FLATMEM: the range clamped to `[ARCH_PFN_OFFSET, ARCH_PFN_OFFSET +
    /// max_mapnr)`, then every pfn of it.
    FlatClamp,
    /// SPARSEMEM without VMEMMAP: section numbers one at a time up to
    /// `__highest_present_section_nr`; a present section is walked whole.
    Sections,
    /// SPARSEMEM_VMEMMAP: as [`PfnWalker::Sections`], and inside a section
    /// that is not early the next present subsection (`find_next_bit` on
    /// the subsection map); `pfn_valid` is re-asked only at subsection
    /// boundaries.
    Subsections,
    /// The generic fallback (`pfn_valid` on every pfn of the range): what
    /// the kernel runs when the architecture brings its own `pfn_valid`
    /// (`CONFIG_HAVE_ARCH_PFN_VALID`), because the section walker is
    /// defined only beside the generic SPARSEMEM `pfn_valid`.
    PerPfn,
}

impl PfnWalker {
    /// The walker's name in reports.
    pub const fn name(self) -> &'static str {
        match self {
            PfnWalker::FlatClamp => "flat-clamp",
            PfnWalker::Sections => "sections",
            PfnWalker::Subsections => "subsections",
            PfnWalker::PerPfn => "per-pfn",
        }
    }
}

/// The generic per-pfn `first_valid_pfn`: `pfn_valid` on each pfn of
/// `[pfn, end)` until one is valid; `end` when none is.
#[inline]
pub fn first_valid_pfn_per_pfn<M: MemoryModel + ?Sized>(model: &M, pfn: Pfn, end: Pfn) -> Pfn {
    let mut p = pfn;
    while p < end {
        if model.pfn_valid(p) {
            return p;
        }
        p = p + 1;
    }
    end
}

/// A physical memory model: how a pfn is validated and turned into its
/// `struct page`.
///
/// Every implementation answers [`pfn_valid`](MemoryModel::pfn_valid) with
/// the validity semantics in the crate documentation, and keeps these
/// invariants:
/// - `pfn_valid(p)` implies `pfn_to_page(p)` is a present page
///   ([`PageLayout::is_present`]) and `page_to_pfn(pfn_to_page(p)) == p`;
/// - a `&Page` handed out stays valid for as long as the model is borrowed;
///   only `&mut self` methods (hotplug) can retire memmap.
///
/// # Safety
/// The allocator dereferences what a model hands out, so an implementer
/// promises, for every pfn `p` with `pfn_valid(p)` and until the next
/// `&mut self` call:
/// 1. `pfn_to_page_ptr(p)` points to a live, initialised descriptor of
///    layout [`MemoryModel::Page`] owned by
///    the model, and `page_to_pfn` of it is `p`;
/// 2. the descriptors of one section are one contiguous run, and the pointer
///    carries provenance over that run, so `ptr.offset(q - p)` is the
///    descriptor of any valid `q` in the same section;
/// 3. `pfn_valid` answers from the model's own state, never from a
///    descriptor's contents that safe code could change;
/// 4. `geometry()` is the geometry the model was built for, and never
///    changes.
///
/// Like the x86_64 crate's `unsafe trait FrameAllocator`, the promise is the
/// implementer's: a safe caller can rely on it.
pub unsafe trait MemoryModel: Send + Sync {
    /// The `struct page` layout of the model's memmap ([`Page64`](crate::Page64)
    /// unless the model was built at another size).
    type Page: PageLayout;

    /// Short model name as the CLI spells it (`flat`, `sparse-extreme`, …).
    fn name(&self) -> &'static str;

    /// The geometry the model was built for.
    fn geometry(&self) -> &Geometry;

    /// `pfn_valid`: whether a `struct page` exists for `pfn`.
    fn pfn_valid(&self, pfn: Pfn) -> bool;

    /// The address of `pfn`'s descriptor, with provenance over the whole
    /// contiguous memmap run that holds it (at least its section), so that
    /// `ptr.offset(k)` reaches the descriptor of `pfn + k` within the same
    /// section — the kernel's `page + (buddy_pfn - pfn)`. A pointer taken
    /// from a `&Self::Page` covers only that one descriptor.
    ///
    /// # Safety
    /// `pfn_valid(pfn)` returned true on this model, with no `&mut self`
    /// call since.
    unsafe fn pfn_to_page_ptr(&self, pfn: Pfn) -> *const Self::Page;

    /// `pfn_to_page` without the validity check.
    ///
    /// # Safety
    /// As for [`MemoryModel::pfn_to_page_ptr`].
    #[inline(always)]
    unsafe fn pfn_to_page_unchecked(&self, pfn: Pfn) -> &Self::Page {
        // SAFETY: the caller's promise makes the pointer valid, initialised
        // and owned by `self` for the borrow's lifetime.
        unsafe { &*self.pfn_to_page_ptr(pfn) }
    }

    /// `pfn_to_page` guarded by `pfn_valid`.
    #[inline(always)]
    fn pfn_to_page(&self, pfn: Pfn) -> Option<&Self::Page> {
        if self.pfn_valid(pfn) {
            // SAFETY: pfn_valid(pfn) just returned true and `self` is borrowed
            // shared for the result's lifetime, so no hotplug can intervene.
            Some(unsafe { self.pfn_to_page_unchecked(pfn) })
        } else {
            None
        }
    }

    /// [`MemoryModel::pfn_to_page_ptr`] guarded by `pfn_valid`: one lookup
    /// where a caller needs both the answer and the pointer with its
    /// section provenance (the allocator's free path).
    #[inline(always)]
    fn pfn_to_page_ptr_checked(&self, pfn: Pfn) -> Option<*const Self::Page> {
        if self.pfn_valid(pfn) {
            // SAFETY: pfn_valid(pfn) just returned true on this model.
            Some(unsafe { self.pfn_to_page_ptr(pfn) })
        } else {
            None
        }
    }

    /// The walker the kernel builds for this model; what
    /// [`first_valid_pfn`](MemoryModel::first_valid_pfn) implements.
    fn pfn_walker(&self) -> PfnWalker {
        PfnWalker::PerPfn
    }

    /// `first_valid_pfn`: the first pfn of `[pfn, end)` for which
    /// `pfn_valid` is true, or `end` (or above) when there is none. Total:
    /// any input gives an answer, never a panic. The default is the
    /// generic per-pfn loop ([`PfnWalker::PerPfn`]).
    #[inline(always)]
    fn first_valid_pfn(&self, pfn: Pfn, end: Pfn) -> Pfn {
        first_valid_pfn_per_pfn(self, pfn, end)
    }

    /// `next_valid_pfn`: the valid pfn after `pfn`, a pfn the walk just
    /// yielded, below `end`, or `end` (or above). The kernel's section
    /// walkers re-ask only at a (sub)section boundary, so for a `pfn` that
    /// is not valid the answer is some pfn above it (never a panic).
    #[inline(always)]
    fn next_valid_pfn(&self, pfn: Pfn, end: Pfn) -> Pfn {
        match pfn.checked_add(1) {
            Some(next) if next < end => self.first_valid_pfn(next, end),
            _ => end,
        }
    }

    /// [`first_valid_pfn`](MemoryModel::first_valid_pfn) with absent
    /// EXTREME root pages skipped 256 sections at a time: pfnlab's
    /// variant, in no kernel (6.x walks section numbers one by one). Where
    /// a model has no root pages it is the kernel's walk.
    #[inline(always)]
    fn first_valid_pfn_bulk(&self, pfn: Pfn, end: Pfn) -> Pfn {
        self.first_valid_pfn(pfn, end)
    }

    /// [`next_valid_pfn`](MemoryModel::next_valid_pfn) of the bulk variant.
    #[inline(always)]
    fn next_valid_pfn_bulk(&self, pfn: Pfn, end: Pfn) -> Pfn {
        self.next_valid_pfn(pfn, end)
    }

    /// `page_to_pfn` for a page this model handed out.
    fn page_to_pfn(&self, page: &Self::Page) -> Pfn;

    /// `pfn_to_online_page`: the page when its section is online, its
    /// subsection valid (`pfn_section_valid`) and it is not device memory.
    /// Online state never changes `pfn_valid`.
    fn pfn_to_online_page(&self, pfn: Pfn) -> Option<&Self::Page>;

    /// Memory spent on the memmap and its tables.
    fn memmap_bytes(&self) -> MemmapBytes;

    /// The model's HugeTLB vmemmap optimisation: none but
    /// SPARSEMEM_VMEMMAP's (the default refuses).
    fn hugetlb_vmemmap(&self) -> Result<&dyn crate::hvo::HugetlbVmemmap, crate::hvo::HvoError> {
        Err(crate::hvo::HvoError::NoVmemmap(self.name()))
    }

    /// `get_pfnblock_migratetype`: the migratetype of `pfn`'s pageblock,
    /// from the model's pageblock flags (a section's usage under SPARSEMEM
    /// and VMEMMAP, the node's bitmap under FLATMEM). Every pageblock starts
    /// `Movable`; a pfn the model does not describe reads `Unmovable`.
    fn get_pfnblock_migratetype(&self, pfn: Pfn) -> Migratetype;

    /// `set_pfnblock_migratetype`: records `mt` for `pfn`'s pageblock;
    /// nothing for a pfn the model does not describe. An atomic update of
    /// the block's bits only, so concurrent setters of other blocks are
    /// safe.
    fn set_pfnblock_migratetype(&self, pfn: Pfn, mt: Migratetype);

    /// Hot-adds ordinary memory `[start, start + nr_pages)` in whole memory
    /// blocks (`add_memory` → `arch_add_memory`); it stays offline, its
    /// descriptors present and reserved until the allocator onlines it.
    fn hot_add(&mut self, start: Pfn, nr_pages: u64) -> Result<(), HotplugError>;

    /// Hot-removes ordinary memory `[start, start + nr_pages)` in whole
    /// memory blocks (`remove_memory`); every subsection of it must be
    /// present and none device memory. Its memmap goes back to the kernel.
    fn hot_remove(&mut self, start: Pfn, nr_pages: u64) -> Result<(), HotplugError>;

    /// Adds device memory `[start, start + nr_pages)` in 2 MiB subsections
    /// (`memremap_pages`): valid, never online, its descriptors in the
    /// ZONE_DEVICE zone of `node`. Only VMEMMAP models can; the others
    /// answer [`HotplugError::NeedsVmemmap`].
    fn add_device(
        &mut self,
        start: Pfn,
        nr_pages: u64,
        node: crate::NodeId,
    ) -> Result<(), HotplugError> {
        let _ = (start, nr_pages, node);
        Err(HotplugError::NeedsVmemmap { model: self.name() })
    }

    /// Hot-adds ordinary memory as [`MemoryModel::hot_add`] does, with each
    /// memory block's memmap carved from the block's own first
    /// `vmemmap_pages` pfns (`MHP_MEMMAP_ON_MEMORY`: a `vmem_altmap` per
    /// block handed to `vmemmap_populate`). Only VMEMMAP models can; the
    /// others answer [`HotplugError::NeedsVmemmap`], as only
    /// `vmemmap_populate` takes an altmap.
    fn hot_add_memmap_on_memory(
        &mut self,
        start: Pfn,
        nr_pages: u64,
        vmemmap_pages: u64,
    ) -> Result<(), HotplugError> {
        let _ = (start, nr_pages, vmemmap_pages);
        Err(HotplugError::NeedsVmemmap { model: self.name() })
    }

    /// Hot-adds one memory block at `start` (`nr_pages`) as
    /// [`MemoryModel::hot_add_memmap_on_memory`] does, with its memmap
    /// mapped onto `frames`, the file pages that are the block's own first
    /// frames, so the block's `struct page`s are populated and stored in
    /// the block's memory (the altmap's pages, seen once as frames and once
    /// as memmap), as `vmemmap_populate(…, altmap)` takes them. Hot-removing
    /// the block unmaps them. Only VMEMMAP models with `PROT_NONE` holes
    /// can; the others answer [`HotplugError::NeedsVmemmap`] or
    /// [`HotplugError::Unsupported`].
    ///
    /// # Safety
    /// - `frames.fd`'s bytes `[frames.offset, frames.offset + nr_pages *
    ///   size_of::<Self::Page>())` are given to the model until the block
    ///   is hot-removed: nothing writes them meanwhile except through the
    ///   model's descriptors (they are the block's self-hosted pfns, which
    ///   no allocator hands out);
    /// - `frames.offset` is host-page aligned.
    unsafe fn hot_add_memmap_on_frames(
        &mut self,
        start: Pfn,
        nr_pages: u64,
        vmemmap_pages: u64,
        frames: MemmapFrames<'_>,
    ) -> Result<(), HotplugError> {
        let _ = (start, nr_pages, vmemmap_pages, frames);
        Err(HotplugError::NeedsVmemmap { model: self.name() })
    }

    /// Removes device memory added by [`MemoryModel::add_device`]
    /// (`memunmap_pages`), in subsections; every subsection of the range
    /// must be device memory.
    fn remove_device(&mut self, start: Pfn, nr_pages: u64) -> Result<(), HotplugError> {
        let _ = (start, nr_pages);
        Err(HotplugError::NeedsVmemmap { model: self.name() })
    }

    /// Marks the sections of `[start, start + nr_pages)` online or offline
    /// (`online_mem_sections`): whole memory blocks, every subsection valid,
    /// none of it device memory.
    fn set_online(&mut self, start: Pfn, nr_pages: u64, online: bool) -> Result<(), HotplugError>;
}
