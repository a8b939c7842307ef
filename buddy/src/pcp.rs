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
//! Bulk allocation (`alloc_pages_bulk`, 2021) fills a list or an array
//! from the preferred zone's pcp list, refilling it as needed, and falls
//! back to single allocations if that zone runs dry. The array form fills
//! only empty slots and returns how many slots are populated, counting those
//! that were already full.

use sparsemem::{MIGRATE_PCPTYPES, MemoryModel, Migratetype, NodeId, Order, Pfn};

use crate::alloc::{Allocator, LockPolicy, MAX_BULK};
use crate::error::AllocError;
use crate::list::PcpList;
use crate::node::{Gfp, NodeMask};
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
        Some(block.prep_new_page())
    }

    /// Allocates one page (order 0) through the per-CPU lists.
    #[inline]
    pub fn alloc(&mut self, gfp: Gfp) -> Result<Pfn, AllocError> {
        let alloc = self.alloc;
        for &zid in alloc.zonelist_at(self.node_index, gfp) {
            if !alloc.zone_allowed(zid, gfp, self.cpuset.as_ref()) {
                continue;
            }
            if let Some(pfn) = self.rmqueue_pcplist(zid, gfp.migratetype()) {
                return Ok(pfn);
            }
        }
        Err(AllocError::NoMemory { order: Order::ZERO })
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

    /// The zone a bulk request is served from: the first allowed one.
    fn preferred_zone(&self, gfp: Gfp) -> Option<ZoneId> {
        let alloc = self.alloc;
        alloc
            .zonelist_at(self.node_index, gfp)
            .iter()
            .copied()
            .find(|&z| alloc.zone_allowed(z, gfp, self.cpuset.as_ref()))
    }

    /// One page for a bulk request: the preferred zone's pcp list first,
    /// then the ordinary single-page path.
    #[inline(always)]
    fn bulk_one(&mut self, preferred: Option<ZoneId>, gfp: Gfp) -> Option<Pfn> {
        preferred
            .and_then(|zid| self.rmqueue_pcplist(zid, gfp.migratetype()))
            .or_else(|| self.alloc(gfp).ok())
    }

    /// `alloc_pages_bulk_list`: appends up to `nr_pages` order-0 pages to
    /// `out`; returns how many were added.
    pub fn alloc_bulk_list(
        &mut self,
        nr_pages: usize,
        gfp: Gfp,
        out: &mut Vec<Pfn>,
    ) -> Result<usize, AllocError> {
        if nr_pages > MAX_BULK {
            return Err(AllocError::BulkTooLarge {
                requested: nr_pages,
            });
        }
        let preferred = self.preferred_zone(gfp);
        let before = out.len();
        for _ in 0..nr_pages {
            match self.bulk_one(preferred, gfp) {
                Some(pfn) => out.push(pfn),
                None => break,
            }
        }
        Ok(out.len() - before)
    }

    /// `alloc_pages_bulk_array`: fills the empty slots of `slots`; returns
    /// the number of populated slots, including those already full. Like
    /// the kernel's, it stops at the first slot it cannot fill, so the
    /// count is the populated prefix.
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
        let preferred = self.preferred_zone(gfp);
        let mut populated = 0;
        for slot in slots.iter_mut() {
            if slot.is_none() {
                *slot = self.bulk_one(preferred, gfp);
            }
            if slot.is_some() {
                populated += 1;
            } else {
                break;
            }
        }
        Ok(populated)
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
        for (zid, pending) in self.pending.iter_mut().enumerate() {
            if *pending != (0, 0) {
                fold(pending, &mut self.alloc.zones[zid].free.lock().stats);
            }
        }
    }
}
