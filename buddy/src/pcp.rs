//! Per-CPU page lists (`per_cpu_pages`) and bulk allocation.
//!
//! A [`PerCpu`] handle is one CPU's `pcp` for every zone: order-0 pages
//! come from its lists without the zone lock; an empty list is refilled
//! with `batch` pages by `rmqueue_bulk`, and lists that reach `high`
//! together are drained by `batch` pages with `free_pcppages_bulk`, taking
//! the coldest page of each non-empty list in turn. In eras with
//! migratetypes (2.6.25 to 5.14 shape: one order-0 list per
//! `MIGRATE_PCPTYPES`) a freed page goes on the list of its pageblock's
//! migratetype — a memory-model lookup on every free, as
//! `free_unref_page` makes it — and an allocation takes from the list of
//! the request's migratetype; earlier eras have one list. The 6.x lists per
//! order are not modelled yet. Both take the zone
//! lock once per batch ([`LockPolicy::PerBatch`], the kernel) or once per
//! page ([`LockPolicy::PerPage`], the 2007 proposal). A handle belongs to
//! one thread; dropping it (thread exit) drains everything back, so pages
//! are never lost.
//!
//! Pages moved between a zone and a per-CPU list change the zone's
//! `NR_FREE_PAGES` through this CPU's delta, folded in at the zone's stat
//! threshold (`__mod_zone_page_state`).
//!
//! Bulk allocation (`alloc_pages_bulk`, 2021) checks the low watermark once
//! per call, with the request's page count on top, picks the first zone
//! that passes and fills a list or an array from that zone's pcp list,
//! refilling it as needed. When no zone passes, or the zone runs dry before
//! the first page, it allocates one page the ordinary way and returns, as
//! the kernel does. The array form fills only empty slots and returns how
//! many slots are populated, counting those that were already full.

use sparsemem::{MIGRATE_PCPTYPES, MemoryModel, Migratetype, NodeId, Order, Pfn};

use crate::alloc::{Allocator, LockPolicy, MAX_BULK};
use crate::error::AllocError;
use crate::gfp::{AllocContext, AllocFlags, Gfp};
use crate::list::PcpList;
use crate::node::NodeMask;
use crate::variant::Variant;
use crate::zone::{FreeArea, ZoneId, ZoneStats};

/// One CPU's per-CPU lists; see the module documentation.
pub struct PerCpu<'a, M: MemoryModel, V: Variant> {
    alloc: &'a Allocator<M, V>,
    /// The node's index in the allocator's nodes (its zonelists).
    node_index: usize,
    lists: Vec<[PcpList; MIGRATE_PCPTYPES]>,
    /// The list `free_pcppages_bulk` takes from next, per zone.
    next_drain: Vec<usize>,
    /// Order-0 allocations and frees per zone not yet folded into the
    /// zone's statistics (the kernel's per-CPU vm event counters).
    pending: Vec<(u64, u64)>,
    /// `vm_stat_diff[NR_FREE_PAGES]` per zone: this CPU's change to the
    /// zone's free-page counter not yet folded in.
    stat_diff: Vec<i64>,
    cpuset: Option<NodeMask>,
}

/// Adds a handle's pending counts to a zone's statistics (lock held).
fn fold(pending: &mut (u64, u64), stats: &mut ZoneStats) {
    stats.allocs[0] += pending.0;
    stats.frees[0] += pending.1;
    *pending = (0, 0);
}

impl<M: MemoryModel, V: Variant> Allocator<M, V> {
    /// A per-CPU handle for a CPU of `node`, for one thread: its per-CPU
    /// lists for every zone, allocating along `node`'s zonelist. A node with
    /// no memory in this allocator is [`AllocError::UnknownNode`].
    pub fn cpu_on(&self, node: NodeId) -> Result<PerCpu<'_, M, V>, AllocError> {
        Ok(PerCpu {
            alloc: self,
            node_index: self.node_index(node)?,
            lists: (0..self.zones.len()).map(|_| Default::default()).collect(),
            next_drain: vec![0; self.zones.len()],
            pending: vec![(0, 0); self.zones.len()],
            stat_diff: vec![0; self.zones.len()],
            cpuset: None,
        })
    }
}

impl<'a, M: MemoryModel, V: Variant> PerCpu<'a, M, V> {
    /// Restricts allocations to the nodes of `mask` (the task's cpuset
    /// `mems_allowed`), checked per zone as `__cpuset_zone_allowed` does.
    pub fn set_cpuset(&mut self, mask: Option<NodeMask>) {
        self.cpuset = mask;
    }

    /// Pages on this CPU's list for zone `zid` (`pcp->count`; 0 for an id
    /// of no zone).
    pub fn count(&self, zid: ZoneId) -> u64 {
        self.lists
            .get(zid.index())
            .map_or(0, |l| l.iter().map(PcpList::len).sum())
    }

    /// The node this CPU belongs to.
    pub fn node(&self) -> NodeId {
        self.alloc.nodes[self.node_index].id
    }

    /// Pages on all of this CPU's lists.
    pub fn total_count(&self) -> u64 {
        self.lists.iter().flatten().map(PcpList::len).sum()
    }

    /// The allocator.
    pub fn allocator(&self) -> &'a Allocator<M, V> {
        self.alloc
    }

    /// `__mod_zone_page_state(zone, NR_FREE_PAGES, delta)`: this CPU's
    /// delta, folded into the zone's counter once it passes the zone's
    /// `stat_threshold`.
    #[inline(always)]
    fn mod_free_pages(&mut self, z: usize, delta: i64) {
        let zone = &self.alloc.zones[z];
        let x = self.stat_diff[z] + delta;
        if x.abs() > zone.stat_threshold {
            zone.mod_free_pages(x);
            self.stat_diff[z] = 0;
        } else {
            self.stat_diff[z] = x;
        }
    }

    /// `rmqueue_bulk`: moves up to `count` order-0 pages from the zone to
    /// this CPU's list; returns how many.
    fn rmqueue_bulk(&mut self, zid: ZoneId, count: u32, mt: Migratetype) -> u32 {
        let alloc = self.alloc;
        let zone = &alloc.zones[zid.index()];
        let list = &mut self.lists[zid.index()][mt.index()];
        let pending = &mut self.pending[zid.index()];
        let mut moved = 0;
        let mut first = true;
        let mut take = |area: &mut FreeArea<V>| {
            if std::mem::take(&mut first) {
                area.stats.pcp_refills += 1;
                fold(pending, &mut area.stats);
            }
            list.push_back::<V>(area.rmqueue(&alloc.model, Order::ZERO, mt)?);
            Some(())
        };
        match alloc.options.lock_policy {
            LockPolicy::PerBatch => {
                let mut area = zone.free.lock();
                while moved < count && take(&mut area).is_some() {
                    moved += 1;
                }
            }
            LockPolicy::PerPage => {
                while moved < count && take(&mut zone.free.lock()).is_some() {
                    moved += 1;
                }
            }
        }
        self.mod_free_pages(zid.index(), -i64::from(moved));
        moved
    }

    /// `free_pcppages_bulk`: returns up to `count` of the coldest pages of
    /// this CPU's list for zone `zid` to the buddy lists.
    fn free_pcppages_bulk(&mut self, zid: ZoneId, count: u64) {
        let alloc = self.alloc;
        let zone = &alloc.zones[zid.index()];
        let lists = &mut self.lists[zid.index()];
        let cursor = &mut self.next_drain[zid.index()];
        let pending = &mut self.pending[zid.index()];
        let mut first = true;
        let mut give = |area: &mut FreeArea<V>| {
            if std::mem::take(&mut first) {
                area.stats.pcp_drains += 1;
                fold(pending, &mut area.stats);
            }
            let mt = (0..MIGRATE_PCPTYPES)
                .map(|k| (*cursor + k) % MIGRATE_PCPTYPES)
                .find(|&mt| !lists[mt].is_empty())?;
            *cursor = (mt + 1) % MIGRATE_PCPTYPES;
            area.free_one(&alloc.model, lists[mt].pop_back::<M, V>(&alloc.model)?);
            Some(())
        };
        let mut n = 0;
        match alloc.options.lock_policy {
            LockPolicy::PerBatch => {
                let mut area = zone.free.lock();
                while n < count && give(&mut area).is_some() {
                    n += 1;
                }
            }
            LockPolicy::PerPage => {
                while n < count && give(&mut zone.free.lock()).is_some() {
                    n += 1;
                }
            }
        }
        self.mod_free_pages(zid.index(), n as i64);
    }

    /// One order-0 page from zone `zid` through this CPU's list.
    #[inline(always)]
    fn rmqueue_pcplist(&mut self, zid: ZoneId, mt: Migratetype) -> Option<Pfn> {
        let z = zid.index();
        let mt = self.pcp_migratetype(mt);
        if self.lists[z][mt.index()].is_empty() {
            let batch = self.alloc.zones[z].batch;
            self.rmqueue_bulk(zid, batch, mt);
        }
        let block = self.lists[z][mt.index()].pop_front::<M, V>(&self.alloc.model)?;
        self.pending[z].0 += 1;
        Some(block.prep_new_page(false))
    }

    /// Allocates one page (order 0) through the per-CPU lists, with the
    /// watermark check `get_page_from_freelist` makes on every call.
    #[inline]
    pub fn alloc(&mut self, gfp: Gfp) -> Result<Pfn, AllocError> {
        let alloc = self.alloc;
        let cpuset = self.cpuset.take();
        let got = alloc.alloc_pages_walk(
            Order::ZERO,
            gfp,
            self.node_index,
            |zone| cpuset.as_ref().is_none_or(|m| m.test(zone.node)),
            |zid, ac| self.rmqueue_pcplist(zid, ac.migratetype),
        );
        self.cpuset = cpuset;
        got
    }

    /// Allocates a block: order 0 through the per-CPU lists, larger orders
    /// on the zone path.
    pub fn alloc_pages(&mut self, order: Order, gfp: Gfp) -> Result<Pfn, AllocError> {
        if order == Order::ZERO {
            self.alloc(gfp)
        } else {
            let mask = self.cpuset.as_ref();
            self.alloc
                .alloc_pages_at(order, gfp, self.node_index, |zone| {
                    mask.is_none_or(|m| m.test(zone.node))
                })
        }
    }

    /// Frees one page (order 0) to this CPU's list, draining a batch when
    /// the list reaches `high`.
    #[inline]
    pub fn free(&mut self, pfn: Pfn) -> Result<(), AllocError> {
        let (block, zid) = self.alloc.claim_for_free(pfn, Order::ZERO)?;
        let z = zid.index();
        let alloc = self.alloc;
        let zone = &alloc.zones[z];
        let mt = if alloc.options.era.has_migratetypes() {
            // `get_pfnblock_migratetype`: the per-free memory-model lookup.
            alloc.model.get_pfnblock_migratetype(pfn)
        } else {
            Migratetype::Movable
        };
        if mt == Migratetype::Isolate {
            // An isolated pageblock's pages go straight back to the buddy.
            let mut area = zone.free.lock();
            area.free_one(&alloc.model, block);
            area.stats.frees[0] += 1;
            drop(area);
            self.mod_free_pages(z, 1);
            return Ok(());
        }
        let mt = self.pcp_migratetype(mt);
        self.lists[z][mt.index()].push_front::<V>(block);
        self.pending[z].1 += 1;
        if self.count(zid) >= u64::from(zone.high) {
            self.free_pcppages_bulk(zid, u64::from(zone.batch));
        }
        Ok(())
    }

    /// Frees a block: order 0 to the per-CPU list, larger to the zone.
    pub fn free_pages(&mut self, pfn: Pfn, order: Order) -> Result<(), AllocError> {
        if order == Order::ZERO {
            self.free(pfn)
        } else {
            self.alloc.free_pages(pfn, order)
        }
    }

    /// The zone a bulk request of `nr_pages` is served from
    /// (`__alloc_pages_bulk`, 5.13): the first zone of the zonelist the
    /// request and the cpuset allow whose low watermark holds with
    /// `nr_pages` on top — one check per call, not per page.
    fn bulk_zone(&self, ac: &AllocContext, nr_pages: usize) -> Option<ZoneId> {
        let alloc = self.alloc;
        alloc
            .zonelist_at(self.node_index, ac.gfp)
            .iter()
            .copied()
            .find(|&zid| {
                let zone = &alloc.zones[zid.index()];
                zone.kind <= ac.highest_zone
                    && self.cpuset.as_ref().is_none_or(|m| m.test(zone.node))
                    && zone.watermark_ok(
                        Order::ZERO,
                        zone.watermarks.low + nr_pages as u64,
                        ac.highest_zone,
                        AllocFlags::FAST,
                    )
            })
    }

    /// `__alloc_pages_bulk`: up to `want` pages from one zone's per-CPU
    /// list, each given to `put`. When no zone passes its watermark, or the
    /// zone runs dry before the first page, it allocates one page the
    /// ordinary way and returns, as the kernel does. Returns how many
    /// pages `put` got.
    fn alloc_bulk(
        &mut self,
        gfp: Gfp,
        want: usize,
        mut put: impl FnMut(Pfn),
    ) -> Result<usize, AllocError> {
        if want > MAX_BULK {
            return Err(AllocError::BulkTooLarge { requested: want });
        }
        if want == 0 {
            return Ok(0);
        }
        let ac = self.alloc.prepare_alloc_pages(gfp)?;
        let mut got = 0;
        if let Some(zid) = self.bulk_zone(&ac, want) {
            while got < want {
                match self.rmqueue_pcplist(zid, ac.migratetype) {
                    Some(pfn) => {
                        put(pfn);
                        got += 1;
                    }
                    None => break,
                }
            }
        }
        if got == 0
            && let Ok(pfn) = self.alloc(gfp)
        {
            put(pfn);
            got = 1;
        }
        Ok(got)
    }

    /// `alloc_pages_bulk_list`: appends up to `nr_pages` order-0 pages to
    /// `out`; returns how many were added.
    pub fn alloc_bulk_list(
        &mut self,
        nr_pages: usize,
        gfp: Gfp,
        out: &mut Vec<Pfn>,
    ) -> Result<usize, AllocError> {
        self.alloc_bulk(gfp, nr_pages, |pfn| out.push(pfn))
    }

    /// `alloc_pages_bulk_array`: fills the empty slots of `slots`; returns
    /// the number of populated slots, including those already full. Like
    /// the kernel's, it fills slots in order and stops at the first it
    /// cannot fill, so the count is the populated prefix.
    pub fn alloc_bulk_array(
        &mut self,
        gfp: Gfp,
        slots: &mut [Option<Pfn>],
    ) -> Result<usize, AllocError> {
        if slots.len() > MAX_BULK {
            return Err(AllocError::BulkTooLarge {
                requested: slots.len(),
            });
        }
        let empty = slots.iter().filter(|s| s.is_none()).count();
        let mut free_slots = slots.iter_mut().filter(|s| s.is_none());
        self.alloc_bulk(gfp, empty, |pfn| {
            if let Some(slot) = free_slots.next() {
                *slot = Some(pfn);
            }
        })?;
        Ok(slots.iter().take_while(|s| s.is_some()).count())
    }

    /// Returns every page on this CPU's lists to the buddy lists
    /// (`drain_local_pages`).
    pub fn drain(&mut self) {
        for z in 0..self.lists.len() {
            let zid = ZoneId::new(z as u8);
            let n = self.count(zid);
            if n > 0 {
                self.free_pcppages_bulk(zid, n);
            }
        }
    }

    /// The per-CPU list of migratetype `mt`: its own below
    /// `MIGRATE_PCPTYPES`, Movable for a HighAtomic block (as the kernel
    /// files it), and the one list of an era without migratetypes.
    #[inline(always)]
    fn pcp_migratetype(&self, mt: Migratetype) -> Migratetype {
        if !self.alloc.options.era.has_migratetypes() || mt.index() >= MIGRATE_PCPTYPES {
            Migratetype::Movable
        } else {
            mt
        }
    }
}

impl<M: MemoryModel, V: Variant> Drop for PerCpu<'_, M, V> {
    fn drop(&mut self) {
        self.drain();
        for (zone, diff) in self.alloc.zones.iter().zip(&mut self.stat_diff) {
            zone.mod_free_pages(std::mem::take(diff));
        }
        for (zid, pending) in self.pending.iter_mut().enumerate() {
            if *pending != (0, 0) {
                fold(pending, &mut self.alloc.zones[zid].free.lock().stats);
            }
        }
    }
}
