//! Bulk allocation through the per-CPU lists (`alloc_pages_bulk`, 2021).
//!
//! One call checks the low watermark once, with the request's page count
//! on top, picks the first zone that passes and fills a list or an array
//! from that zone's order-0 pcp list under one pcp lock, refilling it as
//! needed. When no zone passes, or the zone runs dry before the first page,
//! it allocates one page the ordinary way and returns, as the kernel does.
//! The array form fills only empty slots and returns how many slots are
//! populated, counting those that were already full.

use sparsemem::{Order, Pfn};

use super::PerCpu;
use crate::chain::PageChain;
use crate::error::{FreeError, RequestError};
use crate::gfp::{AllocContext, AllocFlags, Gfp};
use crate::list::OwnedBlock;
use crate::types::{BuddyModel, MAX_BULK, ZoneId};
use crate::variant::Variant;

impl<'a, M: BuddyModel, V: Variant> PerCpu<'a, M, V> {
    /// The zone a bulk request of `nr_pages` is served from
    /// (`__alloc_pages_bulk`, 5.13): the first zone of the zonelist the
    /// request and the cpuset allow whose low watermark holds with
    /// `nr_pages` on top — one check per call, not per page.
    ///
    /// A zone short of its watermark with deferred pages is grown first
    /// where the era's bulk path does it ([`crate::Allocator::bulk_grow_zone`]).
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

    /// `__alloc_pages_bulk`: up to `want` pages from one zone's per-CPU
    /// list, each given to `put` with its token (`put` says whether it
    /// kept the page), under one pcp
    /// lock (6.0 on). When no zone passes its watermark, the trylock fails, or
    /// the zone runs dry before the first page, it allocates one page the
    /// ordinary way and returns, as the kernel does. Returns how many pages
    /// `put` got.
    fn alloc_bulk(
        &mut self,
        gfp: Gfp,
        want: usize,
        mut put: impl FnMut(Pfn, Option<OwnedBlock<M::Page>>) -> bool,
    ) -> Result<usize, RequestError> {
        if want > MAX_BULK {
            return Err(RequestError::BulkTooLarge { requested: want });
        }
        if want == 0 {
            return Ok(0);
        }
        let ac = self.alloc.prepare_alloc_pages(gfp)?;
        // The entry's preferred zone, for `zone_statistics`: 5.13 counts
        // each page (its NUMA counters were per-CPU diffs, updated with
        // interrupts off), 5.14 on once per call with the pages taken.
        let preferred = if self.alloc.path.entry {
            self.first_zones_zonelist(&ac)
        } else {
            None
        };
        let per_page = self.alloc.path.numa_stat_diffs;
        let locked = self.alloc.path.pcp_lock;
        let mut got = 0;
        if let Some(zid) = self.bulk_zone(&ac, want)
            && (!locked || self.pcp[zid.index()].lock.try_lock())
        {
            let mut taken = 0;
            while got < want {
                match self.__rmqueue_pcplist::<false>(zid, ac.migratetype, Order::ZERO) {
                    Some(block) => {
                        taken += 1;
                        if per_page && let Some(p) = preferred {
                            self.zone_statistics(p, zid, 1);
                        }
                        let pfn = self.alloc.prep_block(&block, gfp.without(Gfp::COMP));
                        got += usize::from(put(pfn, Some(block)));
                    }
                    None => break,
                }
            }
            if locked {
                self.pcp[zid.index()].lock.unlock();
            }
            if !per_page
                && taken > 0
                && let Some(p) = preferred
            {
                self.zone_statistics(p, zid, taken);
            }
        }
        if got == 0
            && let Ok(pfn) = self.alloc(gfp)
        {
            got = usize::from(put(pfn, None));
        }
        Ok(got)
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
        self.alloc_bulk(gfp, nr_pages, |pfn, block| {
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
        self.alloc_bulk(gfp, nr_pages, |pfn, _| {
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
        let empty = slots.iter().filter(|s| s.is_none()).count();
        let mut free_slots = slots.iter_mut().filter(|s| s.is_none());
        self.alloc_bulk(gfp, empty, |pfn, _| {
            if let Some(slot) = free_slots.next() {
                *slot = Some(pfn);
            }
            true
        })?;
        Ok(slots.iter().take_while(|s| s.is_some()).count())
    }
}
