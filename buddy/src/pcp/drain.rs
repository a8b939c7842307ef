//! Draining a CPU's lists back to its zone: `free_pcppages_bulk`, the
//! batch drained once the lists reach `high`, and the order of lists each
//! era's drain takes ([`DrainOrder`]), and a CPU's whole drain and vmstat
//! tick.
//!
//! The zone lock is taken once per batch ([`LockPolicy::PerBatch`]) or
//! once per block ([`LockPolicy::PerPage`]).

use sparsemem::{BuddyPage, MIGRATE_PCPTYPES, Order};

use super::{
    NR_PCP_LISTS, PAGE_ALLOC_COSTLY_ORDER, PCP_BATCH_SCALE_MAX, Pcp, PerCpu, pindex_to_order,
};
use crate::alloc::{Allocator, LockPolicy};
use crate::list::PcpList;
use crate::types::{BuddyModel, ZoneId};
use crate::variant::Variant;
use crate::zone::FreeArea;

impl<P: BuddyPage> Pcp<P> {
    /// `free_pcppages_bulk`: returns at least `count` pages (or all there
    /// are) of the coldest blocks of this CPU's lists for zone `zid` to the
    /// buddy lists, in the era's order ([`DrainOrder`]); from 5.18 it
    /// starts at list `pindex`.
    pub(super) fn free_pcppages_bulk<M: BuddyModel<Page = P>, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        zid: ZoneId,
        count: u64,
        pindex: usize,
    ) {
        let zone = &alloc.zones[zid.index()];
        let pageblock_order = alloc.model.geometry().pageblock_order();
        let count = count.min(self.count);
        if count == 0 {
            return;
        }
        let path = &alloc.path;
        let mut order_of_lists = DrainOrder::new(
            path.pcp_drain_in_turn,
            if path.pcp_high_orders {
                NR_PCP_LISTS
            } else {
                MIGRATE_PCPTYPES
            },
            pindex,
        );
        let mut first = true;
        let mut left = count;
        // One block back to the buddy, its pages; `None` when every list is
        // empty.
        let mut give = |area: &mut FreeArea<V, P>, pcp: &mut Pcp<P>| {
            if std::mem::take(&mut first) {
                area.stats.pcp_drains += 1;
                pcp.fold(&mut area.stats);
            }
            let k = order_of_lists.next_list(&pcp.lists, left)?;
            let order = pindex_to_order(k, pageblock_order);
            let block = pcp.lists[k].pop_back(&alloc.model, order)?;
            pcp.count -= order.nr_pages();
            left = left.saturating_sub(order.nr_pages());
            area.free_one(&alloc.model, block);
            area.stats.pcp_drain_blocks += 1;
            pcp.drain_blocks += 1;
            Some(order.nr_pages())
        };
        let mut freed = 0;
        match alloc.options.lock_policy {
            LockPolicy::PerBatch => {
                let mut area = zone.free_area.lock();
                while freed < count {
                    let Some(n) = give(&mut area, self) else {
                        break;
                    };
                    freed += n;
                }
            }
            LockPolicy::PerPage => {
                while freed < count {
                    let Some(n) = give(&mut zone.free_area.lock(), self) else {
                        break;
                    };
                    freed += n;
                }
            }
        }
        self.mod_free_pages(alloc, zid, freed as i64);
    }

    /// `free_high` before 6.7 (5.18 on): a free of order 1 to
    /// `PAGE_ALLOC_COSTLY_ORDER` while `free_factor` is not 0 — frees have
    /// come without allocations between — empties the lists.
    #[inline(always)]
    pub(super) fn free_high_untuned<M: BuddyModel<Page = P>, V: Variant>(
        &self,
        alloc: &Allocator<M, V>,
        order: Order,
    ) -> bool {
        order != Order::ZERO
            && order.get() <= PAGE_ALLOC_COSTLY_ORDER
            && self.free_factor > 0
            && alloc.path.pcp_free_high
    }

    /// `free_unref_page_commit`'s drain once the lists reach `high` (or
    /// on `free_high`), out of the hot path: before 5.14 a `batch` back
    /// to the buddy; from 5.14 `nr_pcp_free`'s `batch << free_factor`,
    /// clamped to leave `batch` on the lists, the factor growing by one
    /// while that stays below `high - batch`; on `free_high` everything.
    #[cold]
    #[inline(never)]
    pub(super) fn drain_untuned<M: BuddyModel<Page = P>, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        zid: ZoneId,
        pindex: usize,
        order: Order,
    ) {
        let batch = u64::from(self.batch);
        let nr = if !alloc.path.pcp_free_factor {
            batch
        } else if self.free_high_untuned(alloc, order) {
            self.count
        } else if self.high < batch {
            // A boot pageset, or one that caches nothing.
            1
        } else {
            let max_nr_free = self.high - batch;
            let scaled = batch.checked_shl(self.free_factor).unwrap_or(u64::MAX);
            if scaled < max_nr_free {
                self.free_factor += 1;
            }
            // `clamp(batch, min_nr_free, max_nr_free)`: the kernel's
            // clamp, `max_nr_free` winning when it is below `batch`.
            scaled.max(batch).min(max_nr_free)
        };
        self.free_pcppages_bulk(alloc, zid, nr, pindex);
    }
}

/// The order `free_pcppages_bulk` takes the lists in. The kernel keeps
/// no position between calls: each drain starts afresh.
///
/// - Before 5.18 (`batch_free`): the lists — the `MIGRATE_PCPTYPES`
///   order-0 ones to 5.13, all `NR_PCP_LISTS` in 5.14 to 5.17 —
///   round-robin from list 1 (the kernel's index starts at 0 and is
///   incremented before use); each list visited, empty or not, adds one
///   to `batch_free`, and up to `batch_free` blocks come from the
///   non-empty list found, so fuller lists give more; when only one list
///   has pages, all of the rest come from it.
/// - 5.18 on: from the list of the page just freed (`pindex`), each list
///   emptied in turn before the next, wrapping past the last.
enum DrainOrder {
    /// Before 5.18: the lists walked, the list taken from and the blocks
    /// it may still give.
    BatchFree {
        nr_lists: usize,
        list: usize,
        batch_free: u64,
    },
    /// 5.18 on: the list being emptied.
    InTurn { list: usize },
}

impl DrainOrder {
    fn new(in_turn: bool, nr_lists: usize, pindex: usize) -> DrainOrder {
        if in_turn {
            DrainOrder::InTurn { list: pindex }
        } else {
            DrainOrder::BatchFree {
                nr_lists,
                list: 0,
                batch_free: 0,
            }
        }
    }

    /// The list the next block comes from, with `left` pages still to
    /// free; `None` when every list is empty.
    fn next_list<P: BuddyPage>(
        &mut self,
        lists: &[PcpList<P>; NR_PCP_LISTS],
        left: u64,
    ) -> Option<usize> {
        match self {
            DrainOrder::InTurn { list } => {
                *list = (0..NR_PCP_LISTS)
                    .map(|j| (*list + j) % NR_PCP_LISTS)
                    .find(|&k| !lists[k].is_empty())?;
                Some(*list)
            }
            DrainOrder::BatchFree {
                nr_lists,
                list,
                batch_free,
            } => {
                let n = *nr_lists;
                if *batch_free == 0 || lists[*list].is_empty() {
                    lists[..n].iter().find(|l| !l.is_empty())?;
                    loop {
                        *batch_free += 1;
                        *list = (*list + 1) % n;
                        if !lists[*list].is_empty() {
                            break;
                        }
                    }
                    if *batch_free == n as u64 {
                        *batch_free = left;
                    }
                }
                *batch_free -= 1;
                Some(*list)
            }
        }
    }
}

impl<M: BuddyModel, V: Variant> PerCpu<'_, M, V> {
    /// `drain_pages_zone`: everything on this CPU's lists for zone `zid`
    /// back to the buddy lists, starting at list 0 — from 6.10 in chunks of
    /// at most `batch << PCP_BATCH_SCALE_MAX` pages, each its own
    /// `free_pcppages_bulk` (one zone-lock hold), before in one.
    fn drain_pages_zone(&mut self, zid: ZoneId) {
        let high_orders = self.alloc.path.pcp_drain_chunked;
        let pcp = &mut self.pcp[zid.index()];
        while pcp.count > 0 {
            let before = pcp.count;
            let chunk = if high_orders {
                before.min(u64::from(pcp.batch) << PCP_BATCH_SCALE_MAX)
            } else {
                before
            };
            pcp.free_pcppages_bulk(self.alloc, zid, chunk, 0);
            // `count` is the pages on the lists, so a drain always frees.
            debug_assert!(pcp.count < before, "pcp->count without pages");
            if pcp.count >= before {
                break;
            }
        }
    }

    /// `refresh_cpu_vm_stats(do_pagesets)`, the vmstat work each CPU runs
    /// every `vm.stat_interval` (1 s): this CPU's `NR_FREE_PAGES` deltas
    /// folded into its zones and, from 6.7, each zone's `high` decayed and
    /// the excess drained (`decay_pcp_high`). Returns whether anything
    /// changed, so the kernel would run it again.
    pub fn vmstat_update(&mut self) -> bool {
        let mut todo = false;
        for (z, pcp) in self.pcp.iter_mut().enumerate() {
            let diff = std::mem::take(&mut pcp.stat_diff);
            if diff != 0 {
                self.alloc.zones[z].mod_free_pages(diff);
                todo = true;
            }
            if self.alloc.path.pcp_high_tuning {
                todo |= pcp.decay_pcp_high(self.alloc, ZoneId::new(z as u8));
            }
        }
        todo
    }

    /// Returns every page on this CPU's lists to the buddy lists
    /// (`drain_local_pages`).
    pub fn drain(&mut self) {
        for z in 0..self.pcp.len() {
            self.drain_pages_zone(ZoneId::new(z as u8));
        }
    }
}
