//! Deferred struct page init (`CONFIG_DEFERRED_STRUCT_PAGE_INIT`): boot
//! writes only part of the memmap, threads write the rest later, and an
//! allocation that misses grows the zone on demand.
//!
//! The kernel (4.2, Mel Gorman; on demand since 4.17, Pavel Tatashin;
//! multithreaded by padata since 5.7, Daniel Jordan) initialises at boot
//! only the `struct page`s of each node's low zones and the first part of
//! its highest zone — the zone that ends where the node ends — up to the
//! node's `first_deferred_pfn`. pfnlab sets it by the rule of 4.17 on
//! (`defer_init`), which every era with the mechanism (5.13 on) runs: count the zone's memory pfns in order, and defer from the
//! first section-aligned pfn once more than `PAGES_PER_SECTION` have been
//! counted — one section of memory initialised. (4.2 to 4.16 kept 2 GiB of
//! the highest zone instead, `static_init_pgcnt`; no pfnlab era has that
//! rule.) The free memory past it keeps a memmap that no
//! `__init_single_page` has written: pfnlab poisons it as a
//! `CONFIG_DEBUG_VM` kernel does (every byte 0xff, [`Page::poison`]), so a
//! read recognises it ([`Page::is_poisoned`]). Holes and reserved pages
//! inside the deferred range are initialised early, as
//! `init_unavailable_range` and `reserve_bootmem_region` do; the model's own
//! memmap setup already wrote them.
//!
//! During the window the memory models answer as the kernel's do, because
//! nothing of the model changes: `pfn_valid` is true (a memmap entry
//! exists), `pfn_to_page` returns the entry and `pfn_to_online_page` too
//! (the section is online) — the entry is garbage. The vmemmap detectors
//! all say "valid": `table` reads the section, `probe` loads byte 0 of the
//! entry and finds 0xff (the present bit set: the poison cannot be told
//! from a page by one byte), and `uffd` never fires because the memmap is
//! populated.
//!
//! The rest is written by [`Allocator::deferred_init_memmap`]
//! (`deferred_init_memmap` with `padata_do_multithreaded`): per node, it
//! takes the deferred range under the node's resize lock
//! (`pgdat_resize_lock`, leaving `first_deferred_pfn` at `ULONG_MAX`), splits
//! it into section-aligned chunks that `nr_threads` threads claim, and in
//! each chunk initialises one `MAX_PAGE_ORDER` block's memory, then frees it
//! in the largest aligned blocks (`deferred_init_maxorder`), so a buddy the
//! free looks at is always written. The kernel runs one thread per node at
//! once; pfnlab runs the nodes one after the other, each with its threads.
//! Until then an allocation that finds a zone short calls
//! [`Allocator::deferred_grow_zone`] (`_deferred_grow_zone`), which
//! initialises whole sections from `first_deferred_pfn` until the request's
//! `1 << order` pages, rounded up to a section, are free, under the resize
//! lock. Either way each page freed is added to its zone's managed pages
//! there and then (`__free_pages_core`), so a zone's `managed` grows
//! through the window, as a machine's zoneinfo shows it. Both sit behind
//! the `deferred_pages` static key: the per-CPU
//! allocation path picks its compiled form once per call from the key
//! ([`Allocator::deferred_pages_enabled`]), and the form without the grow
//! is the only one left once [`Allocator::page_alloc_init_late`] turns the
//! key off. That call waits for the init (running it where it has not
//! run), sets
//! `zone->contiguous` (kept false at boot, as the kernel sets it only
//! here) and works out the watermarks again.
//!
//! The zone path ([`Allocator::alloc_pages`], which the hugetlb pool
//! takes) switches between the same two forms on the key and grows on a
//! miss at any order, as `get_page_from_freelist` does. Bulk allocation
//! grows a zone short of its watermark in its own zone loop from 6.12, as
//! `alloc_pages_bulk_noprof` does since Kirill Shutemov's `4be9064baac0`
//! ("mm: accept memory in __alloc_pages_bulk()", 6.12-rc1) beside
//! unaccepted memory's; before (pfnlab's 5.13 to 6.8) it moves on to the
//! next zone, and grows only through its one-page allocation: when no
//! zone is left, or when one page is all the call wants.
//!
//! A grow initialises and frees a section at a time, each in
//! `MAX_PAGE_ORDER` blocks, until a whole section's worth of pages (the
//! request's, rounded up to a section) was added: 6.18's
//! `deferred_grow_zone`, which since Mike Rapoport's `3acb913c9d5b`
//! (6.18-rc1) calls `deferred_init_memmap_chunk` per section. Before, it
//! walked `MAX_PAGE_ORDER` blocks and checked the quota where a block
//! crossed into another section, which stops at the same pfn where the
//! memory has no holes. Left out: 6.18's single padata job per zone
//! (pfnlab's init threads claim sections of the node's range), and the
//! grow's unlocked first read of `first_deferred_pfn`, after which a grow
//! that waited for the resize lock while another grew returns true
//! without growing; pfnlab's reads it under the lock and grows on from
//! there.
//!
//! # Safety
//! Deferred pages are written through `&Page` while the allocator is
//! shared. Each write is of a poisoned page of a chunk that exactly one
//! thread claimed (an atomic cursor, or the resize lock for a grow): no
//! list links it and the allocator reads no page of a `MAX_PAGE_ORDER`
//! block before the block is freed under the zone lock, after every page
//! of the block was written (a buddy never leaves its `MAX_PAGE_ORDER`
//! block, and the range before `first_deferred_pfn` is whole sections).

use std::sync::atomic::{AtomicU64, Ordering};

use sparsemem::{BuddyPage, NodeId, Order, PageFlag, PageLayout, Pfn};

use crate::alloc::Allocator;
use crate::era::{Era, NotInEra};
use crate::error::InitError;
use crate::list::OwnedBlock;
use crate::memmap_init::{DeferredZone, TAKEN};
use crate::types::{BuddyModel, ZoneId};
use crate::variant::Variant;
use crate::zone::{FpiFlags, for_each_aligned_block};

/// Why deferred init cannot be had.
pub(crate) fn check_era(era: Era) -> Result<(), InitError> {
    if era.has_deferred_init() {
        Ok(())
    } else {
        Err(InitError::EraMismatch(NotInEra::DeferredInit { era }))
    }
}

impl<M: BuddyModel, V: Variant> Allocator<M, V> {
    /// `deferred_pages_enabled()`: whether the `deferred_pages` static key
    /// is on (some node may still have deferred pages).
    #[inline(always)]
    pub fn deferred_pages_enabled(&self) -> bool {
        self.deferred.key.load(Ordering::Relaxed)
    }

    /// Pfns whose `struct page` deferred init has not written yet, over
    /// every node (0 once init completed, or without deferred init).
    pub fn deferred_pages_pending(&self) -> u64 {
        self.deferred
            .zones
            .iter()
            .map(|d| {
                let all: u64 = d.memory.iter().map(|(s, e)| e.get() - s.get()).sum();
                all - d.freed.load(Ordering::Relaxed)
            })
            .sum()
    }

    /// Each node's `first_deferred_pfn` at boot, by node.
    pub fn first_deferred_pfns(&self) -> Vec<(NodeId, Pfn)> {
        self.deferred
            .zones
            .iter()
            .map(|d| (d.node, d.boot_first))
            .collect()
    }

    /// `__init_single_page` + the boot free's writes for every deferred
    /// memory pfn of `[start, end)` (inside one `MAX_PAGE_ORDER` block),
    /// then the block's memory freed in the largest aligned blocks.
    fn init_and_free_maxorder(&self, d: &DeferredZone, start: Pfn, end: Pfn) -> u64 {
        let zone = &self.zones[d.zone.index()];
        let shift = self.model.geometry().pfn_section_shift();
        let mut nr = 0;
        for (s, e) in d.memory_in(start, end) {
            for pfn in s.get()..e.get() {
                // SAFETY: a deferred memory pfn is valid (the model was
                // built from the layout); its page is poisoned, on no list,
                // and in a chunk only this caller claimed (module doc).
                unsafe {
                    let page: &M::Page = self.model.pfn_to_page_unchecked(Pfn::new(pfn));
                    debug_assert!(page.is_poisoned(), "deferred pfn {pfn:#x} written twice");
                    page.init_reserved(pfn >> shift);
                    page.set_zone_node(zone.id.get(), zone.node.get());
                    page.set_refcount(0);
                    page.clear(PageFlag::Reserved);
                }
            }
            nr += e.get() - s.get();
        }
        let max_order = self.model.geometry().max_order();
        let mut area = zone.free_area.lock();
        for (s, e) in d.memory_in(start, end) {
            for_each_aligned_block(s, e, max_order, |pfn, order| {
                // SAFETY: just written and not yet freed: on no list and
                // held by nobody else; the pointer is the model's for a
                // valid pfn.
                let block = unsafe { OwnedBlock::new(self.model.pfn_to_page_ptr(pfn), pfn, order) };
                area.free_one_fpi(&self.model, block, FpiFlags::NONE);
            });
        }
        drop(area);
        zone.mod_free_pages(nr as i64);
        // `__free_pages_core` adds the pages to `managed_pages` as it frees
        // them; Relaxed: see the field.
        zone.managed.fetch_add(nr, Ordering::Relaxed);
        nr
    }

    /// `deferred_init_memmap_chunk` over one section-aligned chunk.
    fn init_chunk(&self, d: &DeferredZone, start: Pfn, end: Pfn) -> u64 {
        let block = self.model.geometry().max_order_nr_pages();
        let mut nr = 0;
        let mut pfn = start;
        while pfn < end {
            let next = (pfn + block).min(end);
            nr += self.init_and_free_maxorder(d, pfn, next);
            pfn = next;
        }
        // Relaxed: a count for reports; the pages' writes are published
        // by the zone lock.
        d.freed.fetch_add(nr, Ordering::Relaxed);
        nr
    }

    /// `deferred_init_memmap` for every node still deferred, each range
    /// split into sections that `nr_threads` threads (at least one: the
    /// caller's) claim. Safe to run while other threads allocate; an
    /// allocation that misses meanwhile finds nothing to grow (the
    /// threads own the range), as in the kernel. Returns the pages
    /// initialised.
    pub fn deferred_init_memmap(&self, nr_threads: usize) -> u64 {
        let section = self.model.geometry().pages_per_section();
        let mut total = 0;
        for d in &self.deferred.zones {
            let first = std::mem::replace(
                &mut *d
                    .first_deferred_pfn
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()),
                TAKEN,
            );
            if first == TAKEN {
                continue;
            }
            let cursor = AtomicU64::new(first);
            let work = || {
                let mut nr = 0;
                loop {
                    // Relaxed: the cursor only hands out disjoint chunks;
                    // the pages' writes are published by the zone lock.
                    let start = cursor.fetch_add(section, Ordering::Relaxed);
                    if start >= d.end.get() {
                        return nr;
                    }
                    let end = (start + section).min(d.end.get());
                    nr += self.init_chunk(d, Pfn::new(start), Pfn::new(end));
                }
            };
            total += std::thread::scope(|s| {
                let helpers: Vec<_> = (1..nr_threads.max(1)).map(|_| s.spawn(work)).collect();
                let own = work();
                own + helpers
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                    .sum::<u64>()
            });
        }
        total
    }

    /// `deferred_grow_zone`: when zone `zid` still has deferred pages past
    /// `first_deferred_pfn`, initialises and frees whole sections from
    /// there until at least `1 << order` pages, rounded up to a section,
    /// were added (fewer where the zone ends), and moves
    /// `first_deferred_pfn` past them (`ULONG_MAX` at the zone's end). True
    /// when it grew the zone.
    ///
    /// `mm/mm_init.c: deferred_grow_zone` (6.18):
    ///
    /// ```c
    /// unsigned long nr_pages_needed = SECTION_ALIGN_UP(1 << order);
    /// ...
    /// for (spfn = first_deferred_pfn, epfn = SECTION_ALIGN_UP(spfn + 1);
    ///      nr_pages < nr_pages_needed && spfn < zone_end_pfn(zone);
    ///      spfn = epfn, epfn += PAGES_PER_SECTION)
    ///     nr_pages += deferred_init_memmap_chunk(spfn, epfn, zone);
    /// pgdat->first_deferred_pfn = nr_pages ? spfn : ULONG_MAX;
    /// ...
    /// return nr_pages > 0;
    /// ```
    ///
    /// `first_deferred_pfn` is section-aligned and the zone's last pfn is
    /// memory, so a grow that finds the zone unfinished always adds pages;
    /// one that ends at the zone's end leaves nothing for the next, which
    /// returns false, as the kernel's does when it counts no pages.
    #[cold]
    #[inline(never)]
    pub fn deferred_grow_zone(&self, zid: ZoneId, order: Order) -> bool {
        let Some(d) = self.deferred.of_zone(zid) else {
            return false;
        };
        let section = self.model.geometry().pages_per_section();
        let needed = order.nr_pages().next_multiple_of(section);
        let mut guard = d
            .first_deferred_pfn
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let first = *guard;
        if first == TAKEN {
            return false;
        }
        let (mut pfn, mut nr) = (first, 0);
        while pfn < d.end.get() && nr < needed {
            let end = (pfn + section).min(d.end.get());
            nr += self.init_chunk(d, Pfn::new(pfn), Pfn::new(end));
            pfn = end;
        }
        *guard = if pfn >= d.end.get() { TAKEN } else { pfn };
        true
    }

    /// Grows zone `zid` a section at a time, as allocations that found it
    /// short would (`deferred_grow_zone` of order 0), until
    /// `/proc/pagetypeinfo` would count at least `pageblocks` of it or
    /// nothing of it is left deferred; returns the count reached. This is
    /// how a model reaches a machine still in deferred init, whose zones
    /// count only the pageblocks it has initialised. A zone without
    /// deferred pages is only counted.
    pub fn deferred_grow_zone_to(&mut self, zid: ZoneId, pageblocks: u64) -> u64 {
        let Some(zone) = self.zone(zid) else {
            return 0;
        };
        let (start, end) = (zone.start.get(), zone.end.get());
        let pb = self.model.geometry().pageblock_nr_pages();
        // pagetypeinfo probes every `pageblock_nr_pages` from the zone's
        // start; count the probes that fall in `[from, to)`.
        let count = |from: u64, to: u64| {
            let first = start + from.saturating_sub(start).next_multiple_of(pb);
            (first..to.min(end))
                .step_by(pb as usize)
                .filter(|&pfn| self.counts_pageblock(zid, Pfn::new(pfn)))
                .count() as u64
        };
        let mut counted = count(start, end);
        let Some(d) = self.deferred.of_zone(zid) else {
            return counted;
        };
        // `&mut self`: no other grow moves `first_deferred_pfn` between
        // the reads around each grow.
        let first = || {
            *d.first_deferred_pfn
                .lock()
                .unwrap_or_else(|e| e.into_inner())
        };
        while counted < pageblocks {
            let from = first();
            if from == TAKEN || !self.deferred_grow_zone(zid, Order::ZERO) {
                break;
            }
            let to = match first() {
                TAKEN => d.end.get(),
                pfn => pfn,
            };
            counted += count(from, to);
        }
        counted
    }

    /// `get_page_from_freelist`'s miss on the zone path with deferred
    /// pages: while `deferred_grow_zone` grows zone `zid`, take the block
    /// from its free lists without the watermark (`goto try_this_zone`).
    #[cold]
    #[inline(never)]
    pub(crate) fn grow_and_rmqueue_buddy(
        &self,
        zid: ZoneId,
        order: Order,
        ac: &crate::gfp::AllocContext,
    ) -> Option<Pfn> {
        while self.deferred_grow_zone(zid, order) {
            if let Some(pfn) = self.rmqueue_buddy(zid, order, ac.migratetype, ac.gfp, ac.nofragment)
            {
                return Some(pfn);
            }
        }
        None
    }

    /// The bulk allocator's zone loop on a zone short of its watermark:
    /// while the `deferred_pages` key is on and the era's bulk path grows
    /// zones ([`Era::bulk_grows_deferred_zone`]), grow zone `zid` a section
    /// at a time (`deferred_grow_zone` of order 0) until `above`, its
    /// watermark check, holds; true when it does, false when the grow
    /// gives up first, and the loop moves on to the next zone.
    ///
    /// `mm/page_alloc.c: alloc_pages_bulk_noprof` (6.18; 6.12's
    /// `4be9064baac0`), after the failed `zone_watermark_fast`:
    ///
    /// ```c
    /// /* Try again if zone has deferred pages */
    /// if (deferred_pages_enabled()) {
    ///     if (_deferred_grow_zone(zone, 0))
    ///         goto retry_this_zone;
    /// }
    /// ```
    ///
    /// 5.13's `__alloc_pages_bulk` to 6.11's `alloc_pages_bulk_noprof`
    /// move on to the next zone instead.
    #[cold]
    #[inline(never)]
    pub(crate) fn bulk_grow_zone(&self, zid: ZoneId, above: impl Fn() -> bool) -> bool {
        if !self.deferred_pages_enabled() || !self.options.era.bulk_grows_deferred_zone() {
            return false;
        }
        while self.deferred_grow_zone(zid, Order::ZERO) {
            if above() {
                return true;
            }
        }
        false
    }

    /// `page_alloc_init_late`: runs the deferred init where it has not run
    /// (with `nr_threads`), turns the `deferred_pages` key off, sets
    /// `zone->contiguous` and works the watermarks and per-CPU sizes out
    /// again. Nothing changes without deferred init.
    pub fn page_alloc_init_late(&mut self, nr_threads: usize) {
        if self.deferred.zones.is_empty() {
            return;
        }
        self.deferred_init_memmap(nr_threads);
        self.deferred.zones.clear();
        self.deferred.key.store(false, Ordering::Relaxed);
        self.update_pcp_form();
        for zone in &mut self.zones {
            crate::walk::set_zone_contiguous(&self.model, zone, None);
        }
        self.setup_watermarks_and_pcp();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eras_before_4_2_have_no_deferred_init() {
        assert!(check_era(Era::V2_6_23).is_err());
        assert!(check_era(Era::V5_13).is_ok());
    }
}
