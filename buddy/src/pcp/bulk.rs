//! Bulk allocation through the per-CPU lists (`alloc_pages_bulk`, 2021).
//!
//! One call checks the low watermark once, with the request's `nr_pages`
//! on top (an array's length, its filled slots included), picks the first
//! zone that passes and fills a list or an array from that zone's order-0
//! pcp list under one pcp lock, refilling it as needed. A request for one
//! page — `nr_pages` less the array's leading filled slots — goes to the
//! ordinary one-page allocation instead, and so does one no zone passes
//! for, or whose zone runs dry before the first page, as the kernel's do.
//! The array form fills only empty slots and returns how many slots are
//! populated, counting those that were already full.
//!
//! From 6.12 a zone short of the watermark that still has deferred struct
//! pages is grown and checked again before the loop moves on
//! ([`crate::Allocator::bulk_grow_zone`]); before, the zone is passed over,
//! and only the one-page fallback can grow it.

use sparsemem::{Order, Pfn};

use super::PerCpu;
use super::irqflags::{local_irq_restore, local_irq_save_if};
use crate::chain::PageChain;
use crate::error::{FreeError, RequestError};
use crate::gfp::{AllocContext, AllocFlags, Gfp};
use crate::list::OwnedBlock;
use crate::types::{BuddyModel, MAX_BULK, ZoneId};
use crate::variant::Variant;

/// The counts `alloc_pages_bulk_noprof` works from.
#[derive(Clone, Copy, Debug)]
struct BulkCounts {
    /// `nr_pages`: a list's length, or an array's with its filled slots.
    nr_pages: usize,
    /// `nr_populated` on entry: the array's leading filled slots.
    nr_populated: usize,
    /// The pages to take: the array's empty slots (`nr_pages` for a list).
    want: usize,
}

impl BulkCounts {
    /// A list of `nr_pages`: nothing populated, every page wanted.
    fn list(nr_pages: usize) -> BulkCounts {
        BulkCounts {
            nr_pages,
            nr_populated: 0,
            want: nr_pages,
        }
    }
}

impl<'a, M: BuddyModel, V: Variant> PerCpu<'a, M, V> {
    /// The zone a bulk request of `nr_pages` is served from: the first
    /// zone of the zonelist the request and the cpuset allow whose low
    /// watermark holds with `nr_pages` on top — one check per call, not
    /// per page. A zone that fails it is grown and checked again where the
    /// era's bulk path does that ([`crate::Allocator::bulk_grow_zone`]).
    ///
    /// `mm/page_alloc.c: alloc_pages_bulk_noprof`, its zone loop in 6.18 as
    /// 6.12's `4be9064baac0` wrote it (6.15 gave `cond_accept_memory` its
    /// `alloc_flags`; pfnlab has no unaccepted memory):
    ///
    /// ```c
    /// retry_this_zone:
    ///     mark = wmark_pages(zone, alloc_flags & ALLOC_WMARK_MASK) + nr_pages;
    ///     if (zone_watermark_fast(zone, 0, mark, ...)) break;
    ///     if (cond_accept_memory(zone, 0, alloc_flags)) goto retry_this_zone;
    ///     if (deferred_pages_enabled())
    ///         if (_deferred_grow_zone(zone, 0)) goto retry_this_zone;
    /// ```
    ///
    /// 5.13 to 6.11 have only the mark and the `break`: a zone that fails
    /// is passed over.
    fn bulk_zone(&self, ac: &AllocContext, nr_pages: usize) -> Option<ZoneId> {
        let alloc = self.alloc;
        self.node.zonelist(ac.gfp).iter().copied().find(|&zid| {
            let zone = &alloc.zones[zid.index()];
            let above = || {
                !alloc.path.watermarks
                    || zone.watermark_ok(
                        Order::ZERO,
                        zone.watermarks.low + nr_pages as u64,
                        ac.highest_zone,
                        AllocFlags::FAST,
                    )
            };
            zone.kind <= ac.highest_zone
                && self.cpuset.as_ref().is_none_or(|m| m.test(zone.node))
                && (above() || alloc.bulk_grow_zone(zid, above))
        })
    }

    /// `alloc_pages_bulk_noprof` (`__alloc_pages_bulk` before 6.10): up
    /// to `counts.want` pages from one zone's per-CPU list, each given to
    /// `put` with its token (`put` says whether it kept the page), under
    /// one pcp lock (6.0 on); `counts.nr_pages` is the watermark check's
    /// extra. When `nr_pages - nr_populated` is 1 ("Use the single page
    /// allocator for one page"), no zone passes its watermark, the trylock
    /// fails, or the zone runs dry before the first page, it allocates one
    /// page the ordinary way and returns, as the kernel does. Returns how
    /// many pages `put` got.
    fn alloc_bulk(
        &mut self,
        gfp: Gfp,
        counts: BulkCounts,
        mut put: impl FnMut(Pfn, Option<OwnedBlock<M::Page>>) -> bool,
    ) -> Result<usize, RequestError> {
        let BulkCounts {
            nr_pages,
            nr_populated,
            want,
        } = counts;
        debug_assert!(want <= nr_pages - nr_populated);
        if nr_pages > MAX_BULK {
            return Err(RequestError::BulkTooLarge {
                requested: nr_pages,
            });
        }
        if want == 0 {
            return Ok(0);
        }
        let ac = self.alloc.prepare_alloc_pages(gfp)?;
        let mut got = 0;
        if nr_pages - nr_populated > 1
            && let Some(zid) = self.bulk_zone(&ac, nr_pages)
        {
            got = self.take_bulk(zid, &ac, gfp, want, &mut put);
        }
        if got == 0
            && let Ok(pfn) = self.alloc(gfp)
        {
            got = usize::from(put(pfn, None));
        }
        Ok(got)
    }

    /// The batch of [`PerCpu::alloc_bulk`] from zone `zid`'s order-0 pcp
    /// list: up to `want` pages given to `put`, under the pcp lock when
    /// the era has one (nothing when the trylock fails). Returns how many
    /// pages `put` got.
    fn take_bulk(
        &mut self,
        zid: ZoneId,
        ac: &AllocContext,
        gfp: Gfp,
        want: usize,
        put: &mut impl FnMut(Pfn, Option<OwnedBlock<M::Page>>) -> bool,
    ) -> usize {
        // The entry's preferred zone, for `zone_statistics`: 5.13 counts
        // each page (its NUMA counters were per-CPU diffs, updated with
        // interrupts off), 5.14 on once per call with the pages taken.
        let preferred = if self.alloc.path.entry {
            self.first_zones_zonelist(ac)
        } else {
            None
        };
        let per_page = self.alloc.path.numa_stat_diffs;
        let locked = self.alloc.path.pcp_lock;
        let flags = local_irq_save_if(self.alloc.path.pcp_irq_save);
        if locked && !self.pcp[zid.index()].lock.try_lock() {
            local_irq_restore(flags);
            return 0;
        }
        let (mut got, mut taken) = (0, 0);
        while got < want {
            let request = (ac.migratetype, ac.nofragment);
            let Some(block) = self.__rmqueue_pcplist::<false>(zid, request, Order::ZERO) else {
                break;
            };
            taken += 1;
            if per_page && let Some(p) = preferred {
                self.zone_statistics(p, zid, 1);
            }
            let pfn = self.alloc.prep_block(&block, gfp.without(Gfp::COMP));
            got += usize::from(put(pfn, Some(block)));
        }
        if locked {
            self.pcp[zid.index()].lock.unlock();
        }
        local_irq_restore(flags);
        if !per_page
            && taken > 0
            && let Some(p) = preferred
        {
            self.zone_statistics(p, zid, taken);
        }
        got
    }

    /// `alloc_pages_bulk_list`: threads up to `nr_pages` order-0 pages onto
    /// `list` through their `lru` links; returns how many were added. The
    /// chain must be one of this CPU's allocator
    /// ([`RequestError::ForeignChain`] otherwise).
    pub fn alloc_bulk_list(
        &mut self,
        nr_pages: usize,
        gfp: Gfp,
        list: &mut PageChain<'a, M, V>,
    ) -> Result<usize, RequestError> {
        if !std::ptr::eq(list.allocator(), self.alloc) {
            return Err(RequestError::ForeignChain);
        }
        let alloc = self.alloc;
        self.alloc_bulk(gfp, BulkCounts::list(nr_pages), |pfn, block| {
            // The one page of the fallback comes as a pfn: claim it back. A
            // claim fails only if another thread freed the pfn meanwhile (a
            // misuse); the page is then that thread's doing, not listed.
            match block.map_or_else(|| alloc.claim(pfn, Order::ZERO).map(|(b, _)| b), Ok) {
                Ok(block) => {
                    list.push(block);
                    true
                }
                Err(_) => false,
            }
        })
    }

    /// Frees every page of `list` by walking it (`list_for_each_entry_safe`
    /// and `__free_page` on each, the free path of [`PerCpu::free`]);
    /// returns how many were freed. The chain must be one of this CPU's
    /// allocator ([`FreeError::ForeignChain`] otherwise).
    pub fn free_bulk_list(&mut self, list: &mut PageChain<'a, M, V>) -> Result<usize, FreeError> {
        if !std::ptr::eq(list.allocator(), self.alloc) {
            return Err(FreeError::ForeignChain);
        }
        let mut freed = 0;
        while let Some(pfn) = list.pop_front() {
            self.free(pfn)?;
            freed += 1;
        }
        Ok(freed)
    }

    /// `alloc_pages_bulk` into a vector: appends up to `nr_pages` order-0
    /// pages' pfns to `out`; returns how many were added.
    pub fn alloc_bulk_vec(
        &mut self,
        nr_pages: usize,
        gfp: Gfp,
        out: &mut Vec<Pfn>,
    ) -> Result<usize, RequestError> {
        self.alloc_bulk(gfp, BulkCounts::list(nr_pages), |pfn, _| {
            out.push(pfn);
            true
        })
    }

    /// `alloc_pages_bulk_array`: fills the empty slots of `slots`; returns
    /// the number of populated slots, including those already full. Like
    /// the kernel's, it fills slots in order and stops at the first it
    /// cannot fill, so the count is the populated prefix.
    pub fn alloc_bulk_array(
        &mut self,
        gfp: Gfp,
        slots: &mut [Option<Pfn>],
    ) -> Result<usize, RequestError> {
        if slots.len() > MAX_BULK {
            return Err(RequestError::BulkTooLarge {
                requested: slots.len(),
            });
        }
        let counts = BulkCounts {
            nr_pages: slots.len(),
            nr_populated: slots.iter().take_while(|s| s.is_some()).count(),
            want: slots.iter().filter(|s| s.is_none()).count(),
        };
        let mut free_slots = slots.iter_mut().filter(|s| s.is_none());
        self.alloc_bulk(gfp, counts, |pfn, _| {
            if let Some(slot) = free_slots.next() {
                *slot = Some(pfn);
            }
            true
        })?;
        Ok(slots.iter().take_while(|s| s.is_some()).count())
    }
}
