//! HugeTLB vmemmap optimisation on a memfd-backed memmap, for real.
//!
//! `mm/hugetlb_vmemmap.c` walks the vmemmap page table of a hugetlb folio
//! (`vmemmap_remap_range`): it splits a PMD mapping into PTEs
//! (`vmemmap_split_pmd`), points every PTE after the first at the first
//! page read-only (`vmemmap_remap_pte`), flushes the TLB and frees the old
//! pages (`free_vmemmap_page_list`). Restoring (`vmemmap_remap_alloc`)
//! allocates pages on the folio's node, copies the reused page into each
//! (`vmemmap_restore_pte`, then `reset_struct_pages` rewrites the first
//! four descriptors of each from the next four, so no copy of the head
//! survives) and maps them writable. 6.7 batches a set of folios: split
//! all, one flush, remap all, one flush.
//!
//! Here the vmemmap is a memfd mapped shared ([`crate::backing`]), so the
//! same steps are system calls on real memory:
//! - split: with THP requested, `MADV_NOHUGEPAGE` on each PMD of memmap a
//!   folio touches, once per PMD (the host kernel splits the mapping itself
//!   when part of it is replaced); counted;
//! - remap: `mmap(MAP_FIXED, PROT_READ)` of the reused page's file offset at
//!   each tail vmemmap page's address (one small VMA each);
//! - free: `fallocate(PUNCH_HOLE)` over the folio's tail vmemmap pages, so
//!   the process's memory really drops;
//! - restore: `pwrite` of the copied page into each hole, then one
//!   `mmap(MAP_FIXED, PROT_READ | PROT_WRITE)` of the folio's own file range.
//!
//! What is not the kernel's: user-space `mmap`/`munmap` and the host's TLB
//! shootdowns stand in for edits of `init_mm`'s page table and
//! `flush_tlb_kernel_range`, so the batched form batches the steps (split
//! all, remap all, free all; restore: refill all, map all), not the
//! flushes (each `mmap` flushes on its own); there is no break-before-make
//! and no speculative pfn walker racing the remap. Each remapped page is a
//! VMA of its own, so `vm.max_map_count` (65530 by default) bounds the
//! optimised 1 GiB folios at about 15.
//!
//! # Safety
//! Raw reads of descriptors in the memmap and the owner's writes of tail
//! compound fields, under [`HugetlbVmemmap`]'s contract: the caller owns
//! each folio.

use sparsemem::hvo::{HugetlbVmemmap, HvoError, HvoLayout, vmemmap_pages_per_folio};
use sparsemem::{MemoryModel, PAGE_STRUCT_SIZE, Page, PageFlag, Pfn};

use crate::backing::Prot;
use crate::hvo_state::{HvoCounts, HvoInner};
use crate::model::{Detector, Vmemmap};

/// `NR_RESET_STRUCT_PAGE`: descriptors rewritten at the start of each
/// restored vmemmap page (mm/hugetlb_vmemmap.c), from the ones after them.
pub const NR_RESET_STRUCT_PAGE: usize = 4;

/// One folio's vmemmap: its byte offset and page count.
#[derive(Clone, Copy)]
struct Span {
    offset: usize,
    pages: usize,
}

impl<D: Detector> Vmemmap<D> {
    /// Counts of HVO outcomes so far.
    pub fn hvo_counts(&self) -> HvoCounts {
        self.hvo.lock().counts
    }

    /// The memmap's own resident bytes as the kernel counts them: the
    /// memfd's allocated blocks (`None` for an anonymous memmap).
    pub fn memmap_file_bytes(&self) -> Option<std::io::Result<u64>> {
        self.reservation.memfd().map(|m| m.allocated_bytes())
    }

    /// `/proc/self/smaps` totals over the memmap.
    pub fn memmap_smaps(&self) -> std::io::Result<crate::reserve::Smaps> {
        self.reservation.smaps()
    }

    fn page_size(&self) -> usize {
        vmemmap_page_size()
    }

    fn span(&self, head: Pfn, order: u32) -> Result<Span, HvoError> {
        let nr = 1u64 << order;
        let aligned = head.get().is_multiple_of(nr);
        let end = head.get().checked_add(nr);
        if !aligned || end.is_none_or(|e| e > self.max_pfn()) || !self.pfn_valid(head) {
            return Err(HvoError::BadFolio(head, order));
        }
        let ps = self.page_size() as u64;
        Ok(Span {
            offset: (head.get() * PAGE_STRUCT_SIZE) as usize,
            pages: vmemmap_pages_per_folio(order, ps, PAGE_STRUCT_SIZE) as usize,
        })
    }

    /// `vmemmap_split_pmd` for the PMDs of memmap `span` touches.
    fn split(&self, inner: &mut HvoInner, span: Span) {
        if !self.reservation.thp_requested() {
            return;
        }
        const PMD: usize = 2 << 20;
        let ps = self.page_size();
        let first = span.offset / PMD * PMD;
        for pmd in (first..span.offset + span.pages * ps).step_by(PMD) {
            if inner.split.insert(pmd) {
                // A refusal leaves the PMD as it was; the host kernel splits
                // it anyway when a part is remapped.
                let _ = self.reservation.advise_nohugepage(pmd, PMD);
                inner.counts.pmd_splits += 1;
            }
        }
    }

    /// The file offset every tail vmemmap page of the folio maps.
    fn reuse_offset(
        &self,
        inner: &mut HvoInner,
        head: Pfn,
        order: u32,
        span: Span,
        layout: HvoLayout,
    ) -> Result<u64, HvoError> {
        match layout {
            HvoLayout::FakeHead => Ok(span.offset as u64),
            HvoLayout::SharedTail => {
                // SAFETY: the folio is valid (checked by `span`), so its
                // head descriptor is in populated memmap.
                let page = unsafe { &*self.vmemmap_base().add(head.get() as usize) };
                // SAFETY: the caller owns the folio (trait contract).
                unsafe { self.write_compound_info(head, order) };
                let key = (order, page.zone_id(), page.node_id());
                if let Some(&offset) = inner.shared.get(&key) {
                    return Ok(offset);
                }
                let offset =
                    self.reservation.len() as u64 + (inner.shared.len() * self.page_size()) as u64;
                // The shared page: every slot a copy of one mask-encoded tail.
                let tail = self.read_bytes(span.offset + 2 * PAGE_STRUCT_SIZE as usize, 64);
                let bytes: Vec<u8> = tail
                    .iter()
                    .copied()
                    .cycle()
                    .take(self.page_size())
                    .collect();
                if let Err(e) = self.memfd()?.write_at(offset, &bytes) {
                    // SAFETY: as above; the folio stays plain.
                    unsafe { self.write_compound_head(head, order) };
                    return Err(e.into());
                }
                inner.shared.insert(key, offset);
                Ok(offset)
            }
        }
    }

    fn memfd(&self) -> Result<&crate::backing::Memfd, HvoError> {
        self.reservation.memfd().ok_or(HvoError::NotShared)
    }

    /// Rewrites the tails of the folio's first vmemmap page in 2026's mask
    /// encoding: `compound_info` = the mask of the folio's memmap size, bit
    /// 0 set (the head is the tail's address with the low bits cleared).
    ///
    /// # Safety
    /// The caller owns the folio; its first vmemmap page is writable.
    unsafe fn write_compound_info(&self, head: Pfn, order: u32) {
        let per_page = (self.page_size() as u64 / PAGE_STRUCT_SIZE).min(1 << order);
        // SAFETY: the caller's contract.
        unsafe { self.write_compound_info_n(head, order, per_page) };
    }

    /// Writes the mask encoding into the first `nr` descriptors of the
    /// folio (the head's is skipped).
    ///
    /// # Safety
    /// The caller owns the folio; those descriptors are writable.
    unsafe fn write_compound_info_n(&self, head: Pfn, order: u32, nr: u64) {
        let info = !((PAGE_STRUCT_SIZE << order) as usize - 1);
        for i in 1..nr {
            // SAFETY: the descriptor is in the folio, populated and
            // writable (caller's contract); the caller owns the folio, so the
            // compound field is theirs (trait contract). The slot holds
            // a mask, not a pointer, as the kernel's union does.
            unsafe {
                let tail = &*self.vmemmap_base().add((head.get() + i) as usize);
                tail.set_compound_head(Some(std::ptr::without_provenance(info)));
            }
        }
    }

    /// Writes 2026's `compound_info` into every tail of a plain (not
    /// optimised) folio: the mask of its memmap size, bit 0 set, so
    /// [`compound_head_mask`] finds the head; [`Vmemmap::prep_compound_head`]
    /// writes the pointer encoding back.
    ///
    /// # Safety
    /// The caller owns the folio (an allocated compound page) and frees it
    /// only after writing the pointer encoding back.
    pub unsafe fn prep_compound_info(&self, head: Pfn, order: u32) -> Result<(), HvoError> {
        self.span(head, order)?;
        if self.hvo.lock().folios.contains_key(&head.get()) {
            return Err(HvoError::AlreadyOptimized(head));
        }
        // SAFETY: the caller owns the folio; not optimised, so every tail
        // descriptor is writable.
        unsafe { self.write_compound_info_n(head, order, 1 << order) };
        Ok(())
    }

    /// `prep_compound_tail`'s pointer encoding (head address, bit 0 set)
    /// back into every tail of a plain folio.
    ///
    /// # Safety
    /// As [`Vmemmap::prep_compound_info`].
    pub unsafe fn prep_compound_head(&self, head: Pfn, order: u32) -> Result<(), HvoError> {
        self.span(head, order)?;
        if self.hvo.lock().folios.contains_key(&head.get()) {
            return Err(HvoError::AlreadyOptimized(head));
        }
        // SAFETY: as in `prep_compound_info`.
        unsafe { self.write_compound_head_n(head, 1 << order) };
        Ok(())
    }

    /// Rewrites the tails of the folio's first vmemmap page in the pointer
    /// encoding `prep_compound_page` writes (head address, bit 0 set).
    ///
    /// # Safety
    /// As [`Vmemmap::write_compound_info`].
    unsafe fn write_compound_head(&self, head: Pfn, order: u32) {
        let per_page = (self.page_size() as u64 / PAGE_STRUCT_SIZE).min(1 << order);
        // SAFETY: the caller's contract.
        unsafe { self.write_compound_head_n(head, per_page) };
    }

    /// Writes the pointer encoding into the first `nr` descriptors of the
    /// folio (the head's is skipped).
    ///
    /// # Safety
    /// As [`Vmemmap::write_compound_info_n`].
    unsafe fn write_compound_head_n(&self, head: Pfn, nr: u64) {
        let head_page = self.vmemmap_base().wrapping_add(head.get() as usize);
        for i in 1..nr {
            // SAFETY: as in `write_compound_info`.
            unsafe {
                let tail = &*self.vmemmap_base().add((head.get() + i) as usize);
                tail.set_compound_head(Some(head_page));
            }
        }
    }

    /// A copy of `len` bytes of memmap at `offset`.
    fn read_bytes(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        // SAFETY: callers pass a range of a valid folio's first vmemmap
        // page, populated and readable; descriptors are atomics written by
        // their owner only, who is the caller.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.reservation.base().add(offset),
                out.as_mut_ptr(),
                len,
            )
        };
        out
    }

    /// `vmemmap_remap_pte` for one folio: every tail vmemmap page mapped
    /// read-only onto `reuse`. On a failure the folio's own pages (not yet
    /// freed) are mapped back and the error returned.
    fn remap(&self, span: Span, reuse: u64) -> Result<(), HvoError> {
        let memfd = self.memfd()?;
        let ps = self.page_size();
        for i in 1..span.pages {
            let offset = span.offset + i * ps;
            // SAFETY: (1) the page is the folio's tail vmemmap, in our
            // reservation; (2) the caller owns the folio and writes none of
            // its tails while optimised (trait contract); every descriptor
            // read through the new mapping is a tail as before.
            let mapped = unsafe {
                memfd.map_fixed(self.reservation.base().add(offset), ps, reuse, Prot::Read)
            };
            if let Err(e) = mapped {
                self.map_own(span)?;
                return Err(e.into());
            }
        }
        Ok(())
    }

    /// Maps the folio's own tail vmemmap pages back, writable.
    fn map_own(&self, span: Span) -> Result<(), HvoError> {
        let ps = self.page_size();
        // SAFETY: (1) the folio's tail vmemmap, in our reservation; (2) the
        // file range holds the tails' own contents (not freed, or just
        // rewritten by a restore); the caller holds no tail reference
        // across the call.
        unsafe {
            self.memfd()?.map_fixed(
                self.reservation.base().add(span.offset + ps),
                (span.pages - 1) * ps,
                (span.offset + ps) as u64,
                Prot::ReadWrite,
            )
        }?;
        Ok(())
    }

    /// `free_vmemmap_page_list` for one folio: its tail vmemmap pages'
    /// file pages given back to the kernel.
    fn release(&self, span: Span) -> Result<(), HvoError> {
        let ps = self.page_size();
        let start = (span.offset + ps) as u64;
        self.memfd()?
            .punch_hole(start, ((span.pages - 1) * ps) as u64)?;
        Ok(())
    }

    /// `vmemmap_restore_pte`'s copy for one folio: the head's vmemmap page
    /// with `reset_struct_pages` applied, written into each of its tail
    /// pages' holes (allocating them). On a failure the holes are punched
    /// again and the folio stays optimised.
    fn refill(&self, span: Span) -> Result<(), HvoError> {
        let ps = self.page_size();
        let mut page = self.read_bytes(span.offset, ps);
        // reset_struct_pages: no copy of the head (or of the folio's first
        // tails) at the start of a restored page.
        let sps = PAGE_STRUCT_SIZE as usize;
        page.copy_within(
            NR_RESET_STRUCT_PAGE * sps..2 * NR_RESET_STRUCT_PAGE * sps,
            0,
        );
        let tails = page.repeat(span.pages - 1);
        if let Err(e) = self.memfd()?.write_at((span.offset + ps) as u64, &tails) {
            self.release(span)?;
            return Err(e.into());
        }
        Ok(())
    }

    /// Maps refilled folios' own tail vmemmap back and records them as
    /// restored.
    fn map_all(&self, inner: &mut HvoInner, refilled: &[(Pfn, Span)]) -> Result<(), HvoError> {
        for &(head, span) in refilled {
            self.map_own(span)?;
            inner.folios.remove(&head.get());
            inner.counts.restored += 1;
            inner.counts.pages_restored += span.pages as u64 - 1;
        }
        Ok(())
    }

    /// Frees the tail vmemmap of remapped folios and records them as
    /// optimised.
    fn release_all(
        &self,
        inner: &mut HvoInner,
        remapped: &[(Pfn, Span)],
        order: u32,
        layout: HvoLayout,
    ) -> Result<(), HvoError> {
        for &(head, span) in remapped {
            // A folio is optimised once its tails are remapped; a failed
            // punch leaves pages allocated but unmapped, and is reported.
            inner.folios.insert(head.get(), (order, layout));
            inner.counts.optimized += 1;
            self.release(span)?;
            inner.counts.pages_freed += span.pages as u64 - 1;
        }
        Ok(())
    }

    /// Checks the folios and the preconditions, and their spans.
    fn spans(&self, heads: &[Pfn], order: u32) -> Result<Vec<Span>, HvoError> {
        self.hvo_supported(order)?;
        heads.iter().map(|&h| self.span(h, order)).collect()
    }
}

// SAFETY: the trait's promises: (1) the remap changes neither the
// reservation's base nor the section table, so `pfn_valid` (table, or the
// PRESENT bit every tail keeps: the reused page's tails are present) and
// `pfn_to_page`/`page_to_pfn` (address arithmetic) answer as before; (2)
// `restore` maps the folio's own file range writable again, holding the
// head page's tails copied and the first four of each page reset from the
// next four, which is what `prep_compound_page` wrote there.
unsafe impl<D: Detector> HugetlbVmemmap for Vmemmap<D> {
    fn hvo_supported(&self, order: u32) -> Result<(), HvoError> {
        let g = self.geometry();
        if !PAGE_STRUCT_SIZE.is_power_of_two() {
            return Err(HvoError::PageStructSize(PAGE_STRUCT_SIZE));
        }
        if g.name().starts_with("arm64") {
            return Err(HvoError::Arch(g.name()));
        }
        self.memfd()?;
        let ps = self.page_size() as u64;
        if vmemmap_pages_per_folio(order, ps, PAGE_STRUCT_SIZE) < 2 {
            return Err(HvoError::NotOptimizable(order));
        }
        Ok(())
    }

    unsafe fn optimize(
        &self,
        heads: &[Pfn],
        order: u32,
        layout: HvoLayout,
        batched: bool,
    ) -> Result<(), HvoError> {
        let spans = self.spans(heads, order)?;
        if let Some(&h) = heads.iter().find(|&&h| self.memmap_on_frames_of(h)) {
            return Err(HvoError::SelfHosted(h));
        }
        let mut inner = self.hvo.lock();
        for &h in heads {
            if inner.folios.contains_key(&h.get()) {
                return Err(HvoError::AlreadyOptimized(h));
            }
        }
        if batched {
            for &s in &spans {
                self.split(&mut inner, s);
            }
        }
        // Batched: remap all, then free all; else each folio in turn.
        let mut remapped = Vec::new();
        for (&head, &span) in heads.iter().zip(&spans) {
            if !batched {
                self.split(&mut inner, span);
            }
            let step = self
                .reuse_offset(&mut inner, head, order, span, layout)
                .and_then(|reuse| self.remap(span, reuse));
            if let Err(e) = step {
                if layout == HvoLayout::SharedTail {
                    // SAFETY: the caller owns the folio; its first vmemmap
                    // page is its own.
                    unsafe { self.write_compound_head(head, order) };
                }
                self.release_all(&mut inner, &remapped, order, layout)?;
                return Err(e);
            }
            remapped.push((head, span));
            if !batched {
                self.release_all(&mut inner, &remapped, order, layout)?;
                remapped.clear();
            }
        }
        self.release_all(&mut inner, &remapped, order, layout)
    }

    unsafe fn restore(&self, heads: &[Pfn], order: u32, batched: bool) -> Result<(), HvoError> {
        let spans = self.spans(heads, order)?;
        let mut inner = self.hvo.lock();
        for &h in heads {
            if inner.folios.get(&h.get()).is_none_or(|f| f.0 != order) {
                return Err(HvoError::NotOptimized(h));
            }
        }
        // Batched: refill all, then map all; else each folio in turn.
        let mut refilled = Vec::new();
        for (&head, &span) in heads.iter().zip(&spans) {
            if inner.folios[&head.get()].1 == HvoLayout::SharedTail {
                // SAFETY: the caller owns the folio; its first vmemmap page
                // was never remapped.
                unsafe { self.write_compound_head(head, order) };
            }
            let filled = self.refill(span);
            if let Err(e) = filled {
                if inner.folios[&head.get()].1 == HvoLayout::SharedTail {
                    // SAFETY: as above; the folio stays optimised.
                    unsafe { self.write_compound_info(head, order) };
                }
                self.map_all(&mut inner, &refilled)?;
                return Err(e);
            }
            refilled.push((head, span));
            if !batched {
                self.map_all(&mut inner, &refilled)?;
                refilled.clear();
            }
        }
        self.map_all(&mut inner, &refilled)
    }

    fn optimized(&self, head: Pfn) -> Option<HvoLayout> {
        self.hvo.lock().folios.get(&head.get()).map(|f| f.1)
    }
}

/// The vmemmap's page size: the host's, read once.
#[inline(always)]
fn vmemmap_page_size() -> usize {
    static PAGE_SIZE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE_SIZE.get_or_init(sparsemem::memmap::host_page_size)
}

/// `compound_head` as 5.18–2025 kernels read it: a tail's pointer, else
/// `page_fixed_fake_head` (the static key's enabled branch): a descriptor
/// at the start of a vmemmap page with `PG_head` set may be a fake head
/// (an alias of the real head's page), and its next descriptor, always a
/// tail, names the real head.
#[inline(always)]
pub fn compound_head_fake_head(page: &Page) -> *const Page {
    if let Some(head) = page.compound_head() {
        return head;
    }
    let addr = std::ptr::from_ref(page);
    if addr.addr().is_multiple_of(vmemmap_page_size()) && page.test(PageFlag::Head) {
        // SAFETY: `PG_head` is written only by the page's owners (an
        // `unsafe` write), and only on the head of a compound page of at
        // least two pages, so `page` is an element of a memmap array with
        // a next element; that element lies in the same vmemmap page as
        // `page` (a page holds more than one descriptor), which is mapped.
        if let Some(head) = unsafe { (*addr.add(1)).compound_head() } {
            return head;
        }
    }
    addr
}

/// `compound_head` with 2026's `compound_info`: a tail's slot holds the
/// mask of its folio's memmap size (bit 0 set), and the head is the tail's
/// own address masked; no fake head exists.
#[inline(always)]
pub fn compound_head_mask(page: &Page) -> *const Page {
    let addr = std::ptr::from_ref(page);
    match page.compound_head() {
        Some(mask) => addr.map_addr(|a| a & (mask.addr() | 1)),
        None => addr,
    }
}
