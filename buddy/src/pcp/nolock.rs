//! `alloc_pages_nolock` and `free_pages_nolock` (Linux 6.15 on): an
//! allocation and a free for any context — a BPF program on a tracepoint,
//! an NMI that interrupted this CPU inside the allocator — that never
//! spin on a lock and never sleep.
//!
//! The kernel's (mm/page_alloc.c; `try_alloc_pages`, commit 97769a53f117
//! "mm, bpf: Introduce try_alloc_pages() for opportunistic page
//! allocation", renamed `alloc_pages_nolock` in 6.16; in 6.18
//! `alloc_frozen_pages_nolock_noprof`; `free_pages_nolock`, commit
//! 8c57b687e833 "mm, bpf: Introduce free_pages_nolock()"):
//!
//! - The allocation refuses at once an order the per-CPU lists do not
//!   hold (`!pcp_allowed_order`) and any request while deferred struct
//!   page init may still grow a zone (`deferred_pages_enabled`:
//!   `_deferred_grow_zone` takes the zone lock). It allocates with
//!   `__GFP_NOWARN | __GFP_ZERO | __GFP_NOMEMALLOC | __GFP_COMP` (6.18; the
//!   caller may add only `__GFP_ACCOUNT`, memory-cgroup charging, which
//!   pfnlab does not model) — no zone modifier, so up to ZONE_NORMAL, and
//!   no mobility, so the unmovable lists — and with `alloc_flags =
//!   ALLOC_TRYLOCK` alone: the *min* watermark (`ALLOC_WMARK_MIN` is 0),
//!   no reserve. It walks the zonelist once with `get_page_from_freelist`
//!   and has no slow path: no reclaim, no compaction, no kswapd wake-up,
//!   no retry.
//! - In each zone that passes the watermark, `rmqueue` tries this CPU's
//!   list under `pcp_spin_trylock`; an empty list is refilled by
//!   `rmqueue_bulk`, which with `ALLOC_TRYLOCK` only tries the zone lock.
//!   When the pcp lock is held or the list stays empty, `rmqueue_buddy`
//!   tries the zone lock (`spin_trylock_irqsave`) and takes the block from
//!   the buddy. A held zone lock sends the walk to the next zone; a walk
//!   that finds nothing returns NULL. So the pcp lock held alone does not
//!   fail the request (the buddy serves it), and the zone lock held alone
//!   does not either while this CPU's list has a block.
//! - The free (`___free_pages(page, order, FPI_TRYLOCK)`) is the ordinary
//!   one with every lock tried: a block of an order the lists hold goes
//!   on this CPU's list under `pcp_spin_trylock`, with no drain at
//!   `high` (`free_frozen_page_commit` returns before `nr_pcp_high`: "Let
//!   pcp->count get over high mark temporarily"); other orders, isolated
//!   pageblocks and a held pcp lock go to `free_one_page`, which tries
//!   the zone lock and, when it is held, leaves the block on
//!   `zone->trylock_free_pages` (an `llist`). The next `free_one_page`
//!   that takes the lock outright frees those blocks first, so none is
//!   lost; a `FPI_TRYLOCK` free that gets the lock leaves them.
//!
//! What pfnlab leaves out: the `PREEMPT_RT` refusals in NMI and hard-IRQ
//! context (pfnlab has no contexts), `kmsan_alloc_page`, the
//! `should_fail_alloc_page` fault injection that `ALLOC_TRYLOCK` skips,
//! unaccepted memory (`cond_accept_memory` returns at once under
//! `ALLOC_TRYLOCK`), and `__GFP_ACCOUNT`'s charge. A request names no node:
//! it is `NUMA_NO_NODE`, this CPU's.

use sparsemem::{Migratetype, Order, Pfn};

use super::{BATCH, FACTOR, PerCpu, TUNED};
use crate::alloc::Allocator;
use crate::era::NotInEra;
use crate::error::{FreeError, RequestError};
use crate::gfp::{AllocContext, AllocFlags, Gfp};
use crate::list::OwnedBlock;
use crate::types::{BuddyModel, ZoneId};
use crate::variant::Variant;

/// The mask `alloc_pages_nolock` allocates with in 6.18
/// (`alloc_frozen_pages_nolock_noprof`'s `alloc_gfp` with no caller flag).
pub const GFP_NOLOCK: Gfp = Gfp::NOWARN
    .union(Gfp::ZERO)
    .union(Gfp::NOMEMALLOC)
    .union(Gfp::COMP);

impl<M: BuddyModel, V: Variant> Allocator<M, V> {
    /// `rmqueue_buddy` with `ALLOC_TRYLOCK` (Linux 6.15, commit
    /// 97769a53f117): `None` at once when the zone lock is held
    /// (`spin_trylock_irqsave`).
    fn rmqueue_buddy_trylock(
        &self,
        zid: ZoneId,
        order: Order,
        mt: Migratetype,
        gfp: Gfp,
    ) -> Option<Pfn> {
        let zone = self.zones.get(zid.index())?;
        self.rmqueue_buddy_locked(zone, zone.free_area.try_lock()?, order, mt, gfp, false)
    }
}

impl<M: BuddyModel, V: Variant> PerCpu<'_, M, V> {
    /// `alloc_pages_nolock(0, NUMA_NO_NODE, order)`: a block of `order`
    /// from this CPU's node without ever waiting on a lock; see the
    /// module documentation. `Ok(None)` is the kernel's NULL from the
    /// zonelist walk: no zone above its min watermark had a block to give
    /// without waiting (the kernel documents it as `ENOMEM`, not a reason
    /// to retry). Refused before any zone is looked at, as the kernel
    /// returns NULL there: an era without it
    /// ([`RequestError::NotInEra`]), an order the per-CPU lists do not
    /// hold ([`RequestError::NolockOrder`]), and a zone deferred init may
    /// still grow ([`RequestError::DeferredPages`]).
    ///
    /// ```
    /// use buddy::{Allocator, Era, Kernel, Options, RequestError};
    /// use sparsemem::{Layout, NodeId, Order, SparseExtreme};
    ///
    /// let layout = Layout::from_toml("[[range]]\nstart = 0x0\nend = 0x40000000\nkind = \"ram\"\n")?; // 1 GiB
    /// let model = SparseExtreme::new(&layout)?;
    /// let alloc = Allocator::<_, Kernel>::new(model, &layout, Options::for_era(Era::V6_18))?;
    /// let mut cpu = alloc.cpu_on(NodeId::ZERO)?;
    /// if let Some(pfn) = cpu.alloc_pages_nolock(Order::ZERO)? {
    ///     cpu.free_pages_nolock(pfn, Order::ZERO)?;
    /// }
    /// // Above PAGE_ALLOC_COSTLY_ORDER, and not a THP: refused at once.
    /// assert!(matches!(
    ///     cpu.alloc_pages_nolock(Order::new(5)),
    ///     Err(RequestError::NolockOrder { .. })
    /// ));
    ///
    /// // 5.13 has neither call.
    /// let model = SparseExtreme::new(&layout)?;
    /// let old = Allocator::<_, Kernel>::new(model, &layout, Options::for_era(Era::V5_13))?;
    /// let mut cpu = old.cpu_on(NodeId::ZERO)?;
    /// assert!(matches!(
    ///     cpu.alloc_pages_nolock(Order::ZERO),
    ///     Err(RequestError::NotInEra(_))
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn alloc_pages_nolock(&mut self, order: Order) -> Result<Option<Pfn>, RequestError> {
        let alloc = self.alloc;
        let era = alloc.options.era;
        if !era.has_alloc_nolock() {
            return Err(RequestError::NotInEra(NotInEra::AllocNolock { era }));
        }
        if !self.pcp_allowed_order(order) {
            return Err(RequestError::NolockOrder { order });
        }
        if alloc.deferred_pages_enabled() {
            return Err(RequestError::DeferredPages);
        }
        let ac = alloc.prepare_alloc_pages(GFP_NOLOCK)?;
        let preferred = if alloc.path.entry {
            self.first_zones_zonelist(&ac)
        } else {
            None
        };
        let flags = if alloc.path.watermarks {
            AllocFlags::TRYLOCK
        } else {
            AllocFlags::NO_WATERMARKS
        };
        let tuned = alloc.path.pcp_high_tuning;
        for &zid in self.node.zonelist(ac.gfp) {
            let zone = &alloc.zones[zid.index()];
            let allowed = self.cpuset.as_ref().is_none_or(|m| m.test(zone.node));
            if alloc.zone_usable(zone, order, &ac, flags, allowed, tuned)
                && let Some(pfn) = self.rmqueue_trylock(zid, ac, order)
            {
                return Ok(Some(self.count_numa(preferred, zid, pfn)));
            }
        }
        Ok(None)
    }

    /// `rmqueue` with `ALLOC_TRYLOCK`: this CPU's list under the tried
    /// pcp lock (refilled only if the zone lock is free), else the buddy
    /// if the zone lock is free. `alloc_pages_nolock` adds no
    /// `alloc_flags_nofragment`: its `ALLOC_TRYLOCK` alone, so no
    /// `ALLOC_NOFRAGMENT` even under `vm.defrag_mode`.
    fn rmqueue_trylock(&mut self, zid: ZoneId, ac: AllocContext, order: Order) -> Option<Pfn> {
        let (mt, gfp) = (ac.migratetype, ac.gfp);
        let request = (mt, false);
        let listed = match self.alloc.pcp_form.bits() & (TUNED | BATCH) {
            TUNED => self.rmqueue_pcplist::<TUNED, true>(zid, request, order, gfp),
            BATCH => self.rmqueue_pcplist::<BATCH, true>(zid, request, order, gfp),
            _ => self.rmqueue_pcplist::<FACTOR, true>(zid, request, order, gfp),
        };
        listed.or_else(|| self.alloc.rmqueue_buddy_trylock(zid, order, mt, gfp))
    }

    /// `free_pages_nolock`: frees a block as [`PerCpu::free_pages`] does,
    /// with every lock only tried (`FPI_TRYLOCK`); see the module
    /// documentation. A block whose zone lock is held waits on the zone's
    /// `trylock_free_pages` ([`Zone::nr_trylock_free_pages`](crate::Zone::nr_trylock_free_pages))
    /// for the next free that takes the lock. Misuse is refused as by
    /// [`PerCpu::free_pages`], and an era without it with
    /// [`FreeError::NotInEra`].
    pub fn free_pages_nolock(&mut self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        let alloc = self.alloc;
        let era = alloc.options.era;
        if !era.has_alloc_nolock() {
            return Err(FreeError::NotInEra(NotInEra::AllocNolock { era }));
        }
        let (block, zid) = alloc.claim_for_free(pfn, order)?;
        if !self.pcp_allowed_order(order) {
            // `__free_pages_ok(page, order, FPI_TRYLOCK)`.
            self.free_one_page_trylock(zid, block);
            return Ok(());
        }
        let (mt, pindex) = self.free_list_of(pfn, order);
        let pcp = &mut self.pcp[zid.index()];
        if mt == Migratetype::Isolate || !pcp.lock.try_lock() {
            self.free_one_page_trylock(zid, block);
            return Ok(());
        }
        pcp.lists[pindex].push_front(block);
        pcp.count += order.nr_pages();
        pcp.pending_frees[order.index()] += 1;
        if alloc.path.pcp_high_tuning {
            // `free_frozen_page_commit`'s bookkeeping, then its early
            // return under `FPI_TRYLOCK`: no `nr_pcp_high`, no drain.
            pcp.note_free(order);
        }
        pcp.lock.unlock();
        Ok(())
    }

    /// `free_one_page` with `FPI_TRYLOCK`: the block to the buddy if the
    /// zone lock is free (leaving the waiting blocks where they are), else
    /// onto the zone's `trylock_free_pages` (`add_page_to_zone_llist`).
    #[inline(never)]
    fn free_one_page_trylock(&mut self, zid: ZoneId, block: OwnedBlock<M::Page>) {
        let alloc = self.alloc;
        let zone = &alloc.zones[zid.index()];
        let Some(mut area) = zone.free_area.try_lock() else {
            zone.trylock_free_pages.add(block);
            return;
        };
        let order = block.order();
        area.free_one(&alloc.model, block);
        area.stats.frees[order.index()] += 1;
        drop(area);
        self.pcp[zid.index()].mod_free_pages(alloc, zid, order.nr_pages() as i64);
    }

    /// Runs `f` as an interrupt that arrives while this CPU holds zone
    /// `zid`'s `pcp->lock` (inside `rmqueue_pcplist` or
    /// `free_frozen_page_commit`) would run: every `pcp_spin_trylock` of
    /// that zone's lists in `f` fails. `None` for an id of no zone.
    #[cfg(feature = "testing")]
    pub fn with_pcp_locked<R>(&mut self, zid: ZoneId, f: impl FnOnce(&mut Self) -> R) -> Option<R> {
        let pcp = self.pcp.get(zid.index())?;
        if !pcp.lock.try_lock() {
            return Some(f(self));
        }
        let r = f(self);
        self.pcp[zid.index()].lock.unlock();
        Some(r)
    }
}
