//! Per-CPU page lists (`per_cpu_pages`) and bulk allocation.
//!
//! A [`PerCpu`] handle is one CPU's `pcp` for every zone. Blocks come from
//! its lists without the zone lock; an empty list is refilled by
//! `rmqueue_bulk`, and when the lists together reach `high` pages a
//! `batch` of pages goes back with `free_pcppages_bulk`, which takes the
//! coldest blocks of the lists in the era's order (to 5.17: round-robin
//! from list 1 with `batch_free`; 5.18 on: each list emptied in turn from
//! the one just freed to), keeping no position between calls. The shape
//! follows the era:
//!
//! | era | lists per zone | orders | guard |
//! |---|---|---|---|
//! | 2.6.9, 2.6.23 | one | 0 | interrupts off (`local_irq_save`: the flags save, [`irqflags`]) |
//! | 5.13 | one per `MIGRATE_PCPTYPES` migratetype | 0 | as above |
//! | 5.14, 5.15 | one per migratetype and order up to `PAGE_ALLOC_COSTLY_ORDER`, and one per migratetype for `pageblock_order` (THP): 15 | 0–3 and `pageblock_order` | as above (`local_lock_irqsave`) |
//! | 6.1 to 6.8 | as 5.14 with one THP list for all: 13 | as above | `pcp->lock`, tried with a trylock; 6.1 with interrupts off as above (`spin_trylock_irqsave`) |
//! | 6.12, 6.18 | as 5.14 with two THP lists, movable and the rest: 14 | as above | `pcp->lock`, tried with a trylock |
//!
//! With migratetypes a freed block goes on the list of its pageblock's
//! migratetype — a memory-model lookup on every free, as
//! `free_unref_page` makes it — and an allocation takes from the list of
//! its request's migratetype. A higher-order refill takes `batch >> order`
//! blocks, at least two (`nr_pcp_alloc`). From 5.14 a drain at `high`
//! frees `batch << free_factor` pages, the factor growing by one with each
//! drain while that stays below `high - batch` and halved by each
//! allocation, and from 5.18 a free of order 1 to 3 while `free_factor` is
//! not 0 empties the lists (`free_high`); from 6.7 `high` and the refill
//! and drain sizes are tuned between `high_min` and `high_max` instead
//! ([`tune`]; the vmstat tick is [`PerCpu::vmstat_update`]). `high` and
//! `batch` are copied into the handle's `per_cpu_pages` when it is made,
//! as the kernel keeps them per CPU; they change only with `&mut` on the
//! allocator. From 6.0 a failed trylock sends the request to the zone; in
//! pfnlab it only fails inside an interrupt modelled on the handle
//! (`with_pcp_locked`, for tests), since no remote drain shares a handle's
//! lists. The allocation and free that only ever try their locks,
//! `alloc_pages_nolock` and `free_pages_nolock` (6.15), are [`nolock`]'s.
//! Refill and drain take the zone lock once per batch
//! ([`LockPolicy::PerBatch`](crate::LockPolicy::PerBatch), the kernel) or
//! once per block ([`LockPolicy::PerPage`](crate::LockPolicy::PerPage), the
//! 2007 proposal). A handle belongs to one thread; dropping it (thread
//! exit) drains everything back, so pages are never lost.
//!
//! Pages moved between a zone and a per-CPU list change the zone's
//! `NR_FREE_PAGES` through this CPU's delta, folded in at the zone's stat
//! threshold (`__mod_zone_page_state`).
//!
//! The refill is [`refill`]'s, the drain and its order of lists
//! [`drain`]'s; bulk allocation through these lists is [`bulk`]'s.

mod bulk;
mod entry;
// `local_irq_save`'s flags save: the one inline assembly of the per-CPU
// path.
#[allow(unsafe_code)]
mod irqflags;

pub use entry::{MemallocSaved, MemallocScope, NUMA_STATS_THRESHOLD};
pub use nolock::GFP_NOLOCK;

use sparsemem::{BuddyPage, MIGRATE_PCPTYPES, Migratetype, NR_PAGE_ORDERS, NodeId, Order, Pfn};

use crate::alloc::Allocator;
use crate::era::{PcpForm, PcpThpLists};
use crate::error::{FreeError, RequestError};
use crate::gfp::{AllocContext, Gfp};
use crate::list::{OwnedBlock, PcpList};
use crate::lock::TryLock;
use crate::node::{Node, NodeMask};
use crate::types::{BuddyModel, NumaEvents, ZoneId, ZoneStats};
use crate::variant::Variant;
use irqflags::{local_irq_restore, local_irq_save_if};

pub use crate::types::PAGE_ALLOC_COSTLY_ORDER;

/// `CONFIG_PCP_BATCH_SCALE_MAX` (default 5, Linux 6.7 on): the most a
/// refill or a drain scales `batch` by, as a shift.
pub const PCP_BATCH_SCALE_MAX: u32 = 5;

/// Lists for orders `0..=PAGE_ALLOC_COSTLY_ORDER`, one per migratetype.
const NR_LOWORDER_PCP_LISTS: usize = MIGRATE_PCPTYPES * (PAGE_ALLOC_COSTLY_ORDER as usize + 1);

/// The most `NR_PCP_LISTS` any era has: the low-order lists and 5.14's
/// one per migratetype for `pageblock_order` (`NR_PCP_THP`). Later eras
/// use fewer THP lists ([`PcpThpLists`]) and leave the rest empty, which
/// no walk over the lists can tell from the kernel's shorter array.
pub const NR_PCP_LISTS: usize = NR_LOWORDER_PCP_LISTS + MIGRATE_PCPTYPES;

/// How an allocation's form sizes the lists (`SIZING`, the form byte's
/// `TUNED` and `BATCH` bits): `batch << free_factor`, halved by each
/// allocation (`FACTOR`, 5.14 to 6.6, neither bit: the dispatch's first
/// form), a plain `batch` (`BATCH`: before 5.14, or 6.7 on untuned), or
/// 6.7's tuning (`TUNED`). A free has two forms, tuned or not: its one
/// test of the factor, `free_high`'s, follows the order's, and before
/// 5.14 only order 0 reaches it.
pub(super) const FACTOR: u8 = 0;
pub(super) const BATCH: u8 = PcpForm::BATCH;
pub(super) const TUNED: u8 = PcpForm::TUNED;

/// One CPU's `per_cpu_pages` for one zone.
#[derive(Default)]
struct Pcp<P> {
    /// `pcp->lists[]`, by `order_to_pindex`.
    lists: [PcpList<P>; NR_PCP_LISTS],
    /// `pcp->count`: pages on the lists (a block of order `o` counts
    /// `2^o`).
    count: u64,
    /// `pcp->high` and `pcp->batch`: the zone's, copied when the handle is
    /// made (they change only with `&mut` on the allocator, when no handle
    /// exists), so the hot path reads its own line as the kernel's does.
    /// From 6.7 `high` starts at 0 and is tuned ([`tune`]).
    high: u64,
    batch: u32,
    /// `pcp->high_min` and `pcp->high_max` (6.7), the zone's.
    high_min: u64,
    high_max: u64,
    /// `pcp->free_count`: pages freed lately (halved on each allocation),
    /// the size of the next drain (6.7).
    free_count: u64,
    /// `free_count` at which a run of high-order frees drains
    /// (`free_high`, 6.7): `batch`, from 6.16 `batch + high_min / 2`.
    free_high_count: u64,
    /// `pcp->free_factor`: the shift of the next drain's `batch` (5.14 to
    /// 6.6; halved on each allocation).
    free_factor: u32,
    /// `pcp->alloc_factor`: the shift of the next order-0 refill (6.7).
    alloc_factor: u32,
    /// `PCPF_PREV_FREE_HIGH_ORDER`: the last free was of an order from 1
    /// to `PAGE_ALLOC_COSTLY_ORDER`.
    prev_free_high_order: bool,
    /// `PCPF_FREE_HIGH_BATCH` (6.7): this CPU's share of its last-level
    /// cache holds more than three batches, so `free_high` waits for a
    /// `batch` on the lists ([`PerCpu::update_cacheinfo`]).
    free_high_batch: bool,
    /// Allocations and frees per order not yet folded into the zone's
    /// statistics (the kernel's per-CPU vm event counters).
    pending_allocs: [u64; NR_PAGE_ORDERS],
    pending_frees: [u64; NR_PAGE_ORDERS],
    /// `vm_stat_diff[NR_FREE_PAGES]`: this CPU's change to the zone's
    /// free-page counter not yet folded in.
    stat_diff: i64,
    /// `zone_statistics`' NUMA counts not yet folded in (5.13's
    /// `vm_numa_stat_diff`, 6.18's `vm_numa_event`).
    numa: NumaEvents,
    /// `pcp->lock` (6.0 on).
    lock: TryLock,
    /// Blocks this CPU's refills took and its drains gave back, over the
    /// handle's life: the zone's `pcp_refill_blocks` and
    /// `pcp_drain_blocks` of this CPU alone (read on the slow paths only).
    refill_blocks: u64,
    drain_blocks: u64,
}

impl<P: BuddyPage> Pcp<P> {
    /// `__mod_zone_page_state(zone, NR_FREE_PAGES, delta)`: this CPU's
    /// delta, folded into the zone's counter once it passes the zone's
    /// `stat_threshold`.
    #[inline(always)]
    fn mod_free_pages<M: BuddyModel, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        zid: ZoneId,
        delta: i64,
    ) {
        if !alloc.path.watermarks {
            return;
        }
        let zone = &alloc.zones[zid.index()];
        let x = self.stat_diff + delta;
        if x.abs() > zone.stat_threshold {
            zone.mod_free_pages(x);
            self.stat_diff = 0;
        } else {
            self.stat_diff = x;
        }
    }

    /// Adds the pending counts to a zone's statistics (zone lock held).
    fn fold(&mut self, stats: &mut ZoneStats) {
        for o in 0..NR_PAGE_ORDERS {
            stats.allocs[o] += std::mem::take(&mut self.pending_allocs[o]);
            stats.frees[o] += std::mem::take(&mut self.pending_frees[o]);
        }
        stats.numa += std::mem::take(&mut self.numa);
    }
}

/// `pindex_to_order`.
#[inline(always)]
fn pindex_to_order(pindex: usize, pageblock_order: Order) -> Order {
    if pindex < NR_LOWORDER_PCP_LISTS {
        Order::new((pindex / MIGRATE_PCPTYPES) as u8)
    } else {
        pageblock_order
    }
}

/// One CPU's per-CPU lists; see the module documentation.
pub struct PerCpu<'a, M: BuddyModel, V: Variant> {
    alloc: &'a Allocator<M, V>,
    /// The node (its zonelists), as `numa_node_id()` names it.
    node: &'a Node,
    /// Per zone.
    pcp: Vec<Pcp<M::Page>>,
    cpuset: Option<NodeMask>,
    /// The task's scoped allocation constraints (`current->flags`'
    /// `PF_MEMALLOC_*`), as [`MemallocScope`] bits.
    memalloc: u8,
}

impl<M: BuddyModel, V: Variant> Allocator<M, V> {
    /// A per-CPU handle for a CPU of `node`, for one thread: its per-CPU
    /// lists for every zone, allocating along `node`'s zonelist. A node with
    /// no memory in this allocator is [`RequestError::UnknownNode`].
    pub fn cpu_on(&self, node: NodeId) -> Result<PerCpu<'_, M, V>, RequestError> {
        Ok(PerCpu {
            alloc: self,
            node: &self.nodes[self.node_index(node)?],
            pcp: self
                .zones
                .iter()
                .map(|zone| Pcp {
                    // `BOOT_PAGESET_HIGH` until the first use clamps it.
                    high: if self.path.pcp_high_tuning {
                        0
                    } else {
                        u64::from(zone.high)
                    },
                    batch: zone.batch,
                    high_min: u64::from(zone.high),
                    high_max: u64::from(zone.high_max),
                    free_high_count: if self.path.free_high_above_high_min {
                        u64::from(zone.batch) + u64::from(zone.high) / 2
                    } else {
                        u64::from(zone.batch)
                    },
                    ..Pcp::default()
                })
                .collect(),
            cpuset: None,
            memalloc: 0,
        })
    }
}

impl<'a, M: BuddyModel, V: Variant> PerCpu<'a, M, V> {
    /// Restricts allocations to the nodes of `mask` (the task's cpuset
    /// `mems_allowed`), checked per zone as `__cpuset_zone_allowed` does.
    pub fn set_cpuset(&mut self, mask: Option<NodeMask>) {
        self.cpuset = mask;
    }

    /// Pages on this CPU's lists for zone `zid` (`pcp->count`; 0 for an id
    /// of no zone).
    pub fn count(&self, zid: ZoneId) -> u64 {
        self.pcp.get(zid.index()).map_or(0, |p| p.count)
    }

    /// This CPU's `pcp->high` for zone `zid` (0 for an id of no zone).
    pub fn high(&self, zid: ZoneId) -> u64 {
        self.pcp.get(zid.index()).map_or(0, |p| p.high)
    }

    /// The node this CPU belongs to.
    pub fn node(&self) -> NodeId {
        self.node.id
    }

    /// Pages on all of this CPU's lists.
    pub fn total_count(&self) -> u64 {
        self.pcp.iter().map(|p| p.count).sum()
    }

    /// The allocator.
    pub fn allocator(&self) -> &'a Allocator<M, V> {
        self.alloc
    }

    /// `pcp_allowed_order`: which orders go through the per-CPU lists in
    /// this era — order 0 only before 5.14, then every order up to
    /// `PAGE_ALLOC_COSTLY_ORDER` and `pageblock_order` (a THP).
    #[inline(always)]
    pub fn pcp_allowed_order(&self, order: Order) -> bool {
        order == Order::ZERO
            || (self.alloc.path.pcp_high_orders
                && (order.get() <= PAGE_ALLOC_COSTLY_ORDER
                    || order == self.alloc.model.geometry().pageblock_order()))
    }

    /// `order_to_pindex` for a migratetype below `MIGRATE_PCPTYPES` (a
    /// request's, or a pageblock's mapped by [`pcp_migratetype`]), with
    /// the era's THP lists.
    #[inline(always)]
    fn order_to_pindex(&self, mt: Migratetype, order: Order) -> usize {
        // A request's migratetype (`gfp_migratetype`, or Movable for all
        // without mobility grouping) always has a per-CPU list.
        debug_assert!(mt.index() < MIGRATE_PCPTYPES);
        if order.get() > PAGE_ALLOC_COSTLY_ORDER {
            NR_LOWORDER_PCP_LISTS
                + match self.alloc.path.pcp_thp_lists {
                    PcpThpLists::MovableOrNot => usize::from(mt == Migratetype::Movable),
                    PcpThpLists::Shared => 0,
                    PcpThpLists::PerMigratetype => mt.index(),
                }
        } else {
            MIGRATE_PCPTYPES * order.index() + mt.index()
        }
    }

    /// `__rmqueue_pcplist`: one block of `order` from zone `zid`'s list for
    /// `request` (the migratetype, and whether `ALLOC_NOFRAGMENT`),
    /// refilled with `rmqueue_bulk` when empty — with `TRYLOCK`
    /// (`ALLOC_TRYLOCK`, 6.15) only if the zone lock is free; the caller
    /// holds the pcp lock where the era has one.
    #[inline(always)]
    fn __rmqueue_pcplist<const TRYLOCK: bool>(
        &mut self,
        zid: ZoneId,
        request: (Migratetype, bool),
        order: Order,
    ) -> Option<OwnedBlock<M::Page>> {
        let alloc = self.alloc;
        let pindex = self.order_to_pindex(request.0, order);
        self.pcp[zid.index()].__rmqueue_pcplist::<M, V, TRYLOCK>(alloc, zid, request, order, pindex)
    }

    /// `rmqueue_pcplist`: [`PerCpu::__rmqueue_pcplist`] under the pcp lock
    /// (6.0 on), prepared for the caller; `None` when the list cannot be
    /// refilled or the trylock fails, so the caller goes to the zone. The
    /// zone's `per_cpu_pages` is looked up once, before the lock, so that
    /// the lock's atomic does not make the compiler look it up again.
    #[inline(always)]
    fn rmqueue_pcplist<const SIZING: u8, const TRYLOCK: bool>(
        &mut self,
        zid: ZoneId,
        request: (Migratetype, bool),
        order: Order,
        gfp: Gfp,
    ) -> Option<Pfn> {
        let alloc = self.alloc;
        let locked = alloc.path.pcp_lock;
        let pindex = self.order_to_pindex(request.0, order);
        let pcp = &mut self.pcp[zid.index()];
        let flags = local_irq_save_if(alloc.path.pcp_irq_save);
        if locked && !pcp.lock.try_lock() {
            local_irq_restore(flags);
            return None;
        }
        match SIZING {
            // Allocations shrink the next drain (6.7).
            TUNED => pcp.free_count >>= 1,
            // And before, its shift (5.14 to 6.6).
            FACTOR => pcp.free_factor >>= 1,
            _ => {}
        }
        let block = pcp.__rmqueue_pcplist::<M, V, TRYLOCK>(alloc, zid, request, order, pindex);
        if locked {
            pcp.lock.unlock();
        }
        local_irq_restore(flags);
        Some(alloc.prep_new_page(block?, gfp))
    }

    /// `rmqueue`: through the per-CPU list when the order may use it, else
    /// (or when that fails) from the zone (`rmqueue_buddy`).
    #[inline(always)]
    fn rmqueue<const SIZING: u8>(
        &mut self,
        zid: ZoneId,
        ac: AllocContext,
        order: Order,
    ) -> Option<Pfn> {
        let request = (ac.migratetype, ac.nofragment);
        if self.pcp_allowed_order(order)
            && let Some(pfn) = self.rmqueue_pcplist::<SIZING, false>(zid, request, order, ac.gfp)
        {
            return Some(pfn);
        }
        self.rmqueue_buddy(zid, ac, order)
    }

    /// [`PerCpu::rmqueue`] with the era's tuning chosen at run time, for
    /// the paths off the fast one.
    fn rmqueue_any(&mut self, zid: ZoneId, ac: AllocContext, order: Order) -> Option<Pfn> {
        match self.alloc.pcp_form.bits() & (TUNED | BATCH) {
            TUNED => self.rmqueue::<TUNED>(zid, ac, order),
            BATCH => self.rmqueue::<BATCH>(zid, ac, order),
            _ => self.rmqueue::<FACTOR>(zid, ac, order),
        }
    }

    /// `rmqueue_buddy` kept out of line, so the per-CPU path stays small.
    #[inline(never)]
    fn rmqueue_buddy(&self, zid: ZoneId, ac: AllocContext, order: Order) -> Option<Pfn> {
        self.alloc
            .rmqueue_buddy(zid, order, ac.migratetype, ac.gfp, ac.nofragment)
    }

    /// `buffered_rmqueue` for a zone the caller's own zonelist walk chose:
    /// a block of `order` from zone `zid` through this CPU's list (order 0)
    /// or the zone's free lists, with no watermark or cpuset check — those
    /// are the walk's. `Ok(None)` when the zone has no such block; an error
    /// for a GFP mask that cannot be served, a bad order, or a zone id
    /// this allocator does not have. The cpuset experiment builds the
    /// 2.6.18, 2.6.19 and today's `get_page_from_freelist` walks on it.
    pub fn buffered_rmqueue(
        &mut self,
        zid: ZoneId,
        order: Order,
        gfp: Gfp,
    ) -> Result<Option<Pfn>, RequestError> {
        let alloc = self.alloc;
        alloc.check_order(order)?;
        if zid.index() >= alloc.zones.len() {
            return Err(RequestError::UnknownZone(zid));
        }
        let ac = alloc.prepare_alloc_pages(gfp)?;
        Ok(self.rmqueue_any(zid, ac, order))
    }

    /// Allocates one page (order 0) through the per-CPU lists, with the
    /// watermark check `get_page_from_freelist` makes on every call.
    #[inline]
    pub fn alloc(&mut self, gfp: Gfp) -> Result<Pfn, RequestError> {
        self.alloc_pages(Order::ZERO, gfp)
    }

    /// Allocates a block of `order`: through the per-CPU lists when the era
    /// allows the order there ([`PerCpu::pcp_allowed_order`]), else on the
    /// zone path, walking the zonelist with the watermark checks.
    ///
    /// How the era sizes the lists is in the path as that era's kernel has
    /// it (a `batch` at `high` before 5.14, the drain factor and `free_high`
    /// from 5.14 to 6.6, 6.7's tuning of `pcp->high` after), and deferred
    /// struct page init's grow on a miss while the `deferred_pages` key is
    /// on ([`Allocator::deferred_pages_enabled`]; `page_alloc_init_late`
    /// turns it off). Both are folded into the allocator's one form byte
    /// (`PcpForm`), rewritten whenever either changes: a call reads that
    /// byte and jumps to a form compiled on its own, so an era's path
    /// carries none of another era's sizing and a booted one none of the
    /// grow's (a static branch, like the kernel's static keys, rather than
    /// a flag read at each step). The kernel's per-call entry
    /// ([`Mechanisms::entry`](crate::Mechanisms::entry)) is a third bit of
    /// the byte: its forms are one arm, the out-of-line `__alloc_pages`,
    /// so the forms without it stay as small as they were.
    #[inline(always)]
    pub fn alloc_pages(&mut self, order: Order, gfp: Gfp) -> Result<Pfn, RequestError> {
        // The booted forms inline and the rest behind one call; a chain
        // of compares, in the order of the byte's values.
        match self.alloc.pcp_form.bits() {
            FACTOR => self.alloc_pages_on::<FACTOR, false, false>(order, gfp),
            TUNED => self.alloc_pages_on::<TUNED, false, false>(order, gfp),
            BATCH => self.alloc_pages_on::<BATCH, false, false>(order, gfp),
            _ => self.alloc_pages_unbooted_or_entry(order, gfp),
        }
    }

    /// The forms of [`PerCpu::alloc_pages`] a booted path without the
    /// kernel's entry never takes: `deferred_grow_zone` on a miss (until
    /// `page_alloc_init_late`), and every form with `PcpForm::ENTRY`. Out
    /// of line, so the booted forms' dispatch stays a few compares; the
    /// kernel keeps its deferred grow inline behind a static branch
    /// instead, so pfnlab's window pays one call more per allocation.
    #[inline(never)]
    fn alloc_pages_unbooted_or_entry(
        &mut self,
        order: Order,
        gfp: Gfp,
    ) -> Result<Pfn, RequestError> {
        const DEFERRED: u8 = PcpForm::DEFERRED;
        const TUNED_DEFERRED: u8 = TUNED | DEFERRED;
        const BATCH_DEFERRED: u8 = BATCH | DEFERRED;
        match self.alloc.pcp_form.bits() {
            DEFERRED => self.alloc_pages_on::<FACTOR, true, false>(order, gfp),
            TUNED_DEFERRED => self.alloc_pages_on::<TUNED, true, false>(order, gfp),
            BATCH_DEFERRED => self.alloc_pages_on::<BATCH, true, false>(order, gfp),
            _ => self.alloc_pages_entry(order, gfp),
        }
    }

    /// [`PerCpu::alloc_pages`] with the lists sized as `SIZING` says,
    /// `deferred_grow_zone` on a miss (`DEFERRED`) or not, and the kernel's
    /// entry (`ENTRY`: `current_gfp_context`, the preferred zone
    /// and `zone_statistics`; its calls are `__alloc_pages`') or not.
    #[inline(always)]
    fn alloc_pages_on<const SIZING: u8, const DEFERRED: bool, const ENTRY: bool>(
        &mut self,
        order: Order,
        gfp: Gfp,
    ) -> Result<Pfn, RequestError> {
        let alloc = self.alloc;
        alloc.check_order(order)?;
        let gfp = if ENTRY {
            self.current_gfp_context(gfp)
        } else {
            gfp
        };
        let ac = alloc.prepare_alloc_pages(gfp)?;
        let preferred = if ENTRY {
            self.first_zones_zonelist(&ac)
        } else {
            None
        };
        let flags = alloc.fast_flags();
        for &zid in self.node.zonelist(gfp) {
            // Every id of a zonelist names a zone; `get` rather than an
            // index only so that the zone is not looked up when none of
            // the checks below reads it.
            let Some(zone) = alloc.zones.get(zid.index()) else {
                continue;
            };
            let allowed = self.cpuset.as_ref().is_none_or(|m| m.test(zone.node));
            if alloc.zone_usable(zone, order, &ac, flags, allowed, SIZING == TUNED)
                && let Some(pfn) = self.rmqueue::<SIZING>(zid, ac, order)
            {
                return Ok(self.count_numa(preferred, zid, pfn));
            }
            if DEFERRED
                && allowed
                && zone.kind <= ac.highest_zone
                && let Some(pfn) = self.grow_and_rmqueue::<SIZING>(zid, ac, order)
            {
                return Ok(self.count_numa(preferred, zid, pfn));
            }
        }
        self.alloc_pages_slowpath(order, ac, preferred)
    }

    /// `zone_statistics` for a page from zone `zid`, when the request has
    /// a preferred zone (the entry's); returns the page.
    #[inline(always)]
    fn count_numa(&mut self, preferred: Option<ZoneId>, zid: ZoneId, pfn: Pfn) -> Pfn {
        if let Some(preferred) = preferred {
            self.zone_statistics(preferred, zid, 1);
        }
        pfn
    }

    /// `get_page_from_freelist`'s miss with deferred pages: while
    /// `deferred_grow_zone` grows the zone, try it again without the
    /// watermark (`goto try_this_zone`).
    #[cold]
    #[inline(never)]
    fn grow_and_rmqueue<const SIZING: u8>(
        &mut self,
        zid: ZoneId,
        ac: AllocContext,
        order: Order,
    ) -> Option<Pfn> {
        while self.alloc.deferred_grow_zone(zid, order) {
            if let Some(pfn) = self.rmqueue::<SIZING>(zid, ac, order) {
                return Some(pfn);
            }
        }
        None
    }

    /// Frees one page (order 0); see [`PerCpu::free_pages`].
    #[inline]
    pub fn free(&mut self, pfn: Pfn) -> Result<(), FreeError> {
        self.free_pages(pfn, Order::ZERO)
    }

    /// Frees a block (`free_unref_page`): after the misuse and bad-page
    /// checks, a block of an order the per-CPU lists take goes on the list
    /// of its pageblock's migratetype — looked up through the memory model
    /// on every free — and a batch is drained when the lists reach `high`;
    /// other orders, isolated pageblocks and a failed pcp trylock go to the
    /// zone.
    /// As for allocation, 6.7's tuning is compiled into one form of the
    /// path and absent from the other, chosen by the form byte (the drain
    /// factor needs none here: see the sizing constants).
    #[inline(always)]
    pub fn free_pages(&mut self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        const ENTRY: u8 = PcpForm::ENTRY;
        match self.alloc.pcp_form.bits() & (TUNED | ENTRY) {
            0 => self.free_pages_on::<false>(pfn, order),
            TUNED => self.free_pages_on::<true>(pfn, order),
            // Both forms with `PcpForm::ENTRY`.
            _ => self.free_pages_entry(pfn, order),
        }
    }

    /// [`PerCpu::free_pages`] with the tuning in the path (`TUNING`) or
    /// not.
    #[inline(always)]
    fn free_pages_on<const TUNING: bool>(
        &mut self,
        pfn: Pfn,
        order: Order,
    ) -> Result<(), FreeError> {
        let alloc = self.alloc;
        let (block, zid) = alloc.claim_for_free(pfn, order)?;
        if !self.pcp_allowed_order(order) {
            self.free_one_page(zid, block);
            return Ok(());
        }
        let (mt, pindex) = self.free_list_of(pfn, order);
        let locked = alloc.path.pcp_lock;
        if mt == Migratetype::Isolate {
            self.free_one_page(zid, block);
            return Ok(());
        }
        let flags = local_irq_save_if(alloc.path.pcp_irq_save);
        let pcp = &mut self.pcp[zid.index()];
        if locked && !pcp.lock.try_lock() {
            local_irq_restore(flags);
            self.free_one_page(zid, block);
            return Ok(());
        }
        pcp.lists[pindex].push_front(block);
        pcp.count += order.nr_pages();
        pcp.pending_frees[order.index()] += 1;
        if TUNING {
            let free_high = pcp.note_free(order);
            if free_high || pcp.count >= pcp.high || alloc.zones[zid.index()].below_high() {
                pcp.commit_tuned(alloc, zid, pindex, free_high);
            }
        } else if pcp.count >= pcp.high || pcp.free_high_untuned(alloc, order) {
            pcp.drain_untuned(alloc, zid, pindex, order);
        }
        if locked {
            pcp.lock.unlock();
        }
        local_irq_restore(flags);
        Ok(())
    }

    /// A freed block's pageblock migratetype (`get_pfnblock_migratetype`,
    /// the per-free memory-model lookup; the one list of an era without
    /// migratetypes needs none) and the per-CPU list it goes on.
    #[inline(always)]
    pub(super) fn free_list_of(&self, pfn: Pfn, order: Order) -> (Migratetype, usize) {
        let mt = if self.alloc.path.migratetypes {
            self.alloc.model.get_pfnblock_migratetype(pfn)
        } else {
            Migratetype::Movable
        };
        (mt, self.order_to_pindex(pcp_migratetype(mt), order))
    }

    /// `free_one_page`: a claimed block straight to the zone's buddy lists,
    /// after the blocks `free_pages_nolock` left waiting (6.15).
    #[inline(never)]
    fn free_one_page(&mut self, zid: ZoneId, block: OwnedBlock<M::Page>) {
        let order = block.order();
        let zone = &self.alloc.zones[zid.index()];
        let mut area = zone.free_area.lock();
        let waited = zone.free_trylock_pages(&self.alloc.model, &mut area);
        area.free_one(&self.alloc.model, block);
        area.stats.frees[order.index()] += 1;
        drop(area);
        let pages = order.nr_pages() + waited;
        self.pcp[zid.index()].mod_free_pages(self.alloc, zid, pages as i64);
    }
}

/// The per-CPU list a freed block of pageblock migratetype `mt` goes on:
/// its own below `MIGRATE_PCPTYPES`, Movable for a HighAtomic block (as
/// `free_unref_page` files it; an Isolate block never gets here).
#[inline(always)]
fn pcp_migratetype(mt: Migratetype) -> Migratetype {
    if mt.index() >= MIGRATE_PCPTYPES {
        Migratetype::Movable
    } else {
        mt
    }
}

impl<M: BuddyModel, V: Variant> Drop for PerCpu<'_, M, V> {
    fn drop(&mut self) {
        self.drain();
        for (zone, pcp) in self.alloc.zones.iter().zip(&mut self.pcp) {
            zone.mod_free_pages(std::mem::take(&mut pcp.stat_diff));
            if pcp
                .pending_allocs
                .iter()
                .chain(&pcp.pending_frees)
                .any(|&n| n > 0)
                || pcp.numa != NumaEvents::default()
            {
                pcp.fold(&mut zone.free_area.lock().stats);
            }
        }
    }
}

mod drain;
mod nolock;
mod refill;
mod slowpath;
mod tune;

#[cfg(test)]
mod drain_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Kernel;
    use sparsemem::{Geometry, Layout, MemRange, RangeKind, SparseExtreme};

    /// An allocator on 64 MiB of RAM from 16 MiB.
    fn allocator(options: crate::Options) -> Allocator<SparseExtreme, Kernel> {
        let layout = Layout::new(
            Geometry::X86_64,
            vec![MemRange::new(16 << 20, 80 << 20, RangeKind::Ram, 0)],
            "64 MiB",
        )
        .unwrap();
        let model = SparseExtreme::new(&layout).unwrap();
        Allocator::new(model, &layout, options).unwrap()
    }

    /// A failed `pcp_spin_trylock` sends a free to the zone and an
    /// allocation to `rmqueue_buddy` (in pfnlab only a test can hold the
    /// lock: no interrupt or remote drain shares a handle's lists).
    #[test]
    fn a_failed_trylock_goes_to_the_zone() {
        let alloc = allocator(Default::default());
        let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
        let zid = ZoneId::new(0);
        let a = cpu.alloc(Gfp::KERNEL).unwrap();
        let on_list = cpu.count(zid);
        assert!(on_list > 0, "the refill left pages on the list");
        assert!(cpu.pcp[0].lock.try_lock());
        let refills = alloc.stats_total().pcp_refills;
        let b = cpu.alloc(Gfp::KERNEL).unwrap();
        assert_eq!(cpu.count(zid), on_list, "taken from the zone, not the list");
        let free = alloc.free_pages_total();
        cpu.free(a).unwrap();
        assert_eq!(alloc.free_pages_total(), free + 1, "freed to the zone");
        assert_eq!(cpu.count(zid), on_list);
        assert_eq!(alloc.stats_total().pcp_refills, refills);
        cpu.pcp[0].lock.unlock();
        cpu.free(b).unwrap();
        assert_eq!(cpu.count(zid), on_list + 1, "to the list again");
    }

    /// Blocks restored onto the lists stay there past `high`, and a run
    /// of high-order ones (which would be `free_high` on the free path)
    /// drains nothing and leaves `free_count` as it was; a block not
    /// held is refused with nothing changed, and the next free takes the
    /// free path again.
    #[test]
    fn restored_blocks_stay_on_the_lists() {
        let alloc = allocator(crate::Options::for_era(crate::Era::V6_18));
        let node = NodeId::ZERO;
        let mut cpu = alloc.cpu_on(node).unwrap();
        let zid = ZoneId::new(0);
        let high = cpu.high(zid);
        let two = Order::new(2);
        let pages: Vec<Pfn> = (0..high + 8)
            .map(|_| {
                alloc
                    .alloc_pages(Order::ZERO, Gfp::KERNEL, node, None)
                    .unwrap()
            })
            .collect();
        let blocks: Vec<Pfn> = (0..64)
            .map(|_| alloc.alloc_pages(two, Gfp::KERNEL, node, None).unwrap())
            .collect();
        let free_count = cpu.pcp[0].free_count;
        for &pfn in &pages {
            cpu.restore_on_list(pfn, Order::ZERO).unwrap();
        }
        for &pfn in &blocks {
            cpu.restore_on_list(pfn, two).unwrap();
        }
        let held = high + 8 + 64 * 4;
        assert_eq!(cpu.count(zid), held);
        assert_eq!(cpu.pcp_blocks(), (0, 0), "no drain");
        assert_eq!(cpu.pcp[0].free_count, free_count);
        let err = cpu.restore_on_list(pages[0], Order::ZERO);
        assert!(err.is_err(), "{err:?}");
        assert_eq!(cpu.count(zid), held);
        let a = alloc
            .alloc_pages(Order::ZERO, Gfp::KERNEL, node, None)
            .unwrap();
        cpu.free(a).unwrap();
        assert!(cpu.pcp_blocks().1 > 0, "past high, a free drains");
    }
}
