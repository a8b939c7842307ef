//! Refilling a CPU's list from its zone: `rmqueue_bulk`, and the refill an
//! empty list gets (`nr_pcp_alloc` blocks, out of the hot path).
//!
//! The zone lock is taken once per batch ([`LockPolicy::PerBatch`]) or
//! once per block ([`LockPolicy::PerPage`]).

use sparsemem::{BuddyPage, Migratetype, Order};

use super::Pcp;
use crate::alloc::{Allocator, LockPolicy};
use crate::list::OwnedBlock;
use crate::types::{BuddyModel, ZoneId};
use crate::variant::Variant;
use crate::zone::FreeArea;

impl<P: BuddyPage> Pcp<P> {
    /// `__rmqueue_pcplist` on these lists: list `pindex`'s first block,
    /// refilled first when empty, for migratetype `mt` with or without
    /// `ALLOC_NOFRAGMENT` (`nofragment`).
    #[inline(always)]
    pub(super) fn __rmqueue_pcplist<M: BuddyModel<Page = P>, V: Variant, const TRYLOCK: bool>(
        &mut self,
        alloc: &Allocator<M, V>,
        zid: ZoneId,
        (mt, nofragment): (Migratetype, bool),
        order: Order,
        pindex: usize,
    ) -> Option<OwnedBlock<P>> {
        if self.lists[pindex].is_empty() {
            self.refill(alloc, zid, order, (mt, nofragment), pindex, TRYLOCK);
        }
        let block = self.lists[pindex].pop_front(&alloc.model, order)?;
        self.count -= order.nr_pages();
        self.pending_allocs[order.index()] += 1;
        Some(block)
    }

    /// `rmqueue_bulk`: moves up to `count` blocks of `order` from the zone
    /// to the list `pindex`; returns how many. With `trylock`
    /// (`ALLOC_TRYLOCK`, Linux 6.15, commit 97769a53f117) the zone lock is
    /// only tried (`spin_trylock_irqsave`): held, it moves nothing (per
    /// block, the first held lock ends the batch). `nofragment` is
    /// `ALLOC_NOFRAGMENT`, which `__rmqueue` gets for each block.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rmqueue_bulk<M: BuddyModel<Page = P>, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        zid: ZoneId,
        order: Order,
        count: u32,
        (mt, nofragment): (Migratetype, bool),
        pindex: usize,
        trylock: bool,
    ) -> u32 {
        let zone = &alloc.zones[zid.index()];
        let acquire = || {
            if trylock {
                zone.free_area.try_lock()
            } else {
                Some(zone.free_area.lock())
            }
        };
        let mut moved = 0;
        let mut first = true;
        let mut take = |area: &mut FreeArea<V, P>, pcp: &mut Pcp<P>| {
            if std::mem::take(&mut first) {
                area.stats.pcp_refills += 1;
                pcp.fold(&mut area.stats);
            }
            pcp.lists[pindex].push_back(area.rmqueue(&alloc.model, order, mt, nofragment)?);
            area.stats.pcp_refill_blocks += 1;
            pcp.refill_blocks += 1;
            Some(())
        };
        match alloc.options.lock_policy {
            LockPolicy::PerBatch => {
                if let Some(mut area) = acquire() {
                    while moved < count && take(&mut area, self).is_some() {
                        moved += 1;
                    }
                }
            }
            LockPolicy::PerPage => {
                while moved < count
                    && let Some(mut area) = acquire()
                    && take(&mut area, self).is_some()
                {
                    moved += 1;
                }
            }
        }
        let pages = u64::from(moved) << order.get();
        self.count += pages;
        self.mod_free_pages(alloc, zid, -(pages as i64));
        moved
    }

    /// An empty list's refill, out of the hot path: `rmqueue_bulk` of
    /// `nr_pcp_alloc` blocks — `batch`, and for higher orders
    /// `batch >> order`, at least 2; from 6.7 scaled and raising `high`
    /// ([`tune`]). With `trylock` the zone lock is only tried, as
    /// [`Pcp::rmqueue_bulk`] says; `request` is the migratetype and
    /// `ALLOC_NOFRAGMENT`.
    #[cold]
    #[inline(never)]
    pub(super) fn refill<M: BuddyModel<Page = P>, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        zid: ZoneId,
        order: Order,
        request: (Migratetype, bool),
        pindex: usize,
        trylock: bool,
    ) {
        let batch = self.batch;
        let count = if alloc.path.pcp_high_tuning {
            self.nr_pcp_alloc(alloc.zones[zid.index()].below_high(), order)
        } else if order == Order::ZERO || batch <= 1 {
            // A batch of 1 (a boot pageset, or a tiny zone) stays 1.
            batch
        } else {
            (batch >> order.get()).max(2)
        };
        self.rmqueue_bulk(alloc, zid, order, count, request, pindex, trylock);
    }
}
