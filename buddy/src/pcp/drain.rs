//! Draining a CPU's lists back to its zone: `free_pcppages_bulk`, the
//! batch drained once the lists reach `high`, and the order of lists each
//! era's drain takes ([`DrainOrder`]).
//!
//! The zone lock is taken once per batch ([`LockPolicy::PerBatch`]) or
//! once per block ([`LockPolicy::PerPage`]).

use sparsemem::{BuddyPage, MIGRATE_PCPTYPES};

use super::{NR_PCP_LISTS, Pcp, pindex_to_order};
use crate::alloc::{Allocator, LockPolicy};
use crate::list::PcpList;
use crate::types::{BuddyModel, ZoneId};
use crate::variant::Variant;
use crate::zone::FreeArea;

impl<P: BuddyPage> Pcp<P> {
    /// `free_pcppages_bulk`: returns at least `count` pages (or all there
    /// are) of the coldest blocks of this CPU's lists for zone `zid` to the
    /// buddy lists, in the era's order ([`DrainOrder`]); 6.x starts at
    /// list `pindex`.
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
        let mut order_of_lists = DrainOrder::new(alloc.path.pcp_high_orders, pindex);
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

    /// `free_unref_page_commit`'s drain once the lists reach `high`: a
    /// `batch` back to the buddy, out of the hot path.
    #[cold]
    #[inline(never)]
    pub(super) fn drain_batch<M: BuddyModel<Page = P>, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        zid: ZoneId,
        pindex: usize,
    ) {
        self.free_pcppages_bulk(alloc, zid, u64::from(self.batch), pindex);
    }
}

/// The order `free_pcppages_bulk` takes the lists in. The kernel keeps
/// no position between calls: each drain starts afresh.
///
/// - 5.13 and older (`batch_free`): the `MIGRATE_PCPTYPES` order-0 lists
///   round-robin from list 1 (the kernel's `migratetype` starts at 0 and
///   is incremented before use); each list visited, empty or not, adds
///   one to `batch_free`, and up to `batch_free` pages come from the
///   non-empty list found, so fuller lists give more; when only one list
///   has pages, all of the rest come from it.
/// - 6.x: from the list of the page just freed (`pindex`), each list
///   emptied in turn before the next, wrapping past the last.
enum DrainOrder {
    /// 5.13: the list taken from and the pages it may still give.
    BatchFree { list: usize, batch_free: u64 },
    /// 6.x: the list being emptied.
    InTurn { list: usize },
}

impl DrainOrder {
    fn new(high_orders: bool, pindex: usize) -> DrainOrder {
        if high_orders {
            DrainOrder::InTurn { list: pindex }
        } else {
            DrainOrder::BatchFree {
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
            DrainOrder::BatchFree { list, batch_free } => {
                if *batch_free == 0 || lists[*list].is_empty() {
                    lists[..MIGRATE_PCPTYPES].iter().find(|l| !l.is_empty())?;
                    loop {
                        *batch_free += 1;
                        *list = (*list + 1) % MIGRATE_PCPTYPES;
                        if !lists[*list].is_empty() {
                            break;
                        }
                    }
                    if *batch_free == MIGRATE_PCPTYPES as u64 {
                        *batch_free = left;
                    }
                }
                *batch_free -= 1;
                Some(*list)
            }
        }
    }
}
