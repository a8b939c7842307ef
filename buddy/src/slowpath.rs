//! `__alloc_pages_slowpath` as far as pfnlab has its mechanisms: the
//! second zonelist walk with `gfp_to_alloc_flags`, the HIGHATOMIC
//! reserve given back where direct reclaim would run, and `vm.defrag_mode`.
//!
//! # defrag_mode
//!
//! Johannes Weiner's `vm.defrag_mode` (Linux 6.15, e3aa7df331bc "mm:
//! page_alloc: defrag_mode", with its fix 7a95a05f15d5 "mm: page_alloc:
//! fix defrag_mode's retry & OOM path") makes the allocator run reclaim and
//! compaction to their full extent *before* a fallback that mixes
//! migratetypes in a pageblock. The kernel already had the means,
//! `ALLOC_NOFRAGMENT` (4.20, for spreading over zones before fragmenting
//! one); the sysctl sets it on every request and changes when it is let go
//! (mm/page_alloc.c):
//!
//! - `alloc_flags_nofragment` sets it for the fast path;
//!   `get_page_from_freelist` then does not drop it and walk again, as it
//!   does without the sysctl, on a remote node or after a failed walk;
//! - `gfp_to_alloc_flags` sets it for the slow path too, which keeps it
//!   through direct reclaim, direct compaction and their retries
//!   (`should_reclaim_retry`, `should_compact_retry`), and drops it for
//!   one more try only when all of them have failed, just before the OOM
//!   killer. A request that leaves the slow path earlier — one that cannot
//!   reclaim (`nopage` at once), `__GFP_NORETRY`, a costly order without
//!   `__GFP_RETRY_MAYFAIL` — never drops it, and fails rather than
//!   fragment. `__GFP_MEMALLOC`'s walk without watermarks replaces the
//!   flags (`__gfp_pfmemalloc_flags`) and so goes without it;
//! - `__rmqueue` with the flag claims only whole free pageblocks and steals
//!   nothing (`zone::fallback`).
//!
//! pfnlab has none of reclaim, kswapd or kcompactd, and compaction needs
//! owners the allocator does not keep; so here the flag is dropped when
//! the walks with it and the HIGHATOMIC reserve's giving back have failed.
//! A caller with owners gets direct compaction before the fallback from
//! [`alloc_pages_direct_compact`](crate::alloc_pages_direct_compact),
//! which keeps the flag through its first try and its compaction, and
//! from [`alloc_pages_direct_compact_retry`](crate::alloc_pages_direct_compact_retry),
//! which keeps it through all its compactions and retries.
//!
//! Not modelled, from the same series: kswapd woken at `pageblock_order`
//! (`wake_all_kswapds`' `reclaim_order`, "defrag_mode kswapd/kcompactd
//! assistance") and the free-pageblock watermarks kswapd and kcompactd
//! meet (`NR_FREE_PAGES_BLOCKS`, "defrag_mode kswapd/kcompactd
//! watermarks"): pfnlab has no kswapd or kcompactd to run them. Nor is
//! 4.20's own use of the flag (a Normal zone first spreads to DMA32
//! before it fragments): without the sysctl pfnlab's requests never carry
//! it.

use sparsemem::{Migratetype, Order, Pfn};

use crate::alloc::Allocator;
use crate::error::RequestError;
use crate::gfp::{AllocContext, AllocFlags, Gfp};
use crate::node::Node;
use crate::types::{BuddyModel, PAGE_ALLOC_COSTLY_ORDER, ZoneId};
use crate::variant::Variant;
use crate::zone::Zone;

/// Whether a request that may reclaim gets past the slow path's early
/// exits to its retries (`should_reclaim_retry` and what follows): not
/// `__GFP_NORETRY`, and not a costly order without `__GFP_RETRY_MAYFAIL`.
pub(crate) fn slowpath_retries(gfp: Gfp, order: Order) -> bool {
    gfp.contains(Gfp::DIRECT_RECLAIM)
        && !gfp.contains(Gfp::NORETRY)
        && (order.get() <= PAGE_ALLOC_COSTLY_ORDER || gfp.contains(Gfp::RETRY_MAYFAIL))
}

impl<M: BuddyModel, V: Variant> Allocator<M, V> {
    /// `alloc_flags_nofragment`'s `ALLOC_NOFRAGMENT`: set on every request
    /// under `vm.defrag_mode` (see the module documentation for 4.20's
    /// zone rule, which pfnlab leaves out).
    #[inline(always)]
    pub(crate) fn alloc_flags_nofragment(&self) -> bool {
        self.options.defrag_mode
    }

    /// `__alloc_pages_slowpath` without kswapd, reclaim or compaction: one
    /// more zonelist walk with `gfp_to_alloc_flags` (the min watermark,
    /// less for `__GFP_HIGH` and non-blocking requests, none for
    /// `__GFP_MEMALLOC`), with the `MIGRATE_HIGHATOMIC` reserve's rules
    /// (`zone::highatomic`): a request that may reclaim and fails the walk
    /// gives back a reserved pageblock and walks again, as long as one is
    /// given back. Under `vm.defrag_mode` the walks keep `ALLOC_NOFRAGMENT`
    /// until then, and a request that would retry walks once more without
    /// it (see the module documentation). A request that fails is
    /// [`RequestError::NoMemory`]. `take` takes a block from a zone that
    /// passed with the context it is given, through the per-CPU list first
    /// when `pcp_first` (the order is one the lists hold).
    #[cold]
    #[inline(never)]
    pub(crate) fn alloc_pages_slowpath(
        &self,
        order: Order,
        ac: &AllocContext,
        node: &Node,
        pcp_first: bool,
        mut allowed: impl FnMut(&Zone<V, M::Page>) -> bool,
        mut take: impl FnMut(ZoneId, &AllocContext) -> Option<Pfn>,
    ) -> Result<Pfn, RequestError> {
        if !self.path.watermarks {
            return Err(RequestError::NoMemory { order });
        }
        let flags = AllocFlags::slow(ac.gfp, order, self.path.highatomic);
        let mut ac = AllocContext {
            // `__gfp_pfmemalloc_flags` replaces the flags, this one too.
            nofragment: ac.nofragment && flags.wmark.is_some(),
            ..*ac
        };
        let mut force = false;
        loop {
            for &zid in node.zonelist(ac.gfp) {
                let zone = &self.zones[zid.index()];
                let usable = allowed(zone);
                if !self.zone_usable(zone, order, &ac, flags, usable, self.path.pcp_high_tuning) {
                    continue;
                }
                let highatomic = |alloc: &Self| {
                    alloc.rmqueue_buddy(zid, order, Migratetype::HighAtomic, ac.gfp, false)
                };
                let got = if flags.highatomic && !pcp_first {
                    highatomic(self).or_else(|| take(zid, &ac))
                } else {
                    take(zid, &ac).or_else(|| {
                        (flags.highatomic || flags.highatomic_fallback)
                            .then(|| highatomic(self))
                            .flatten()
                    })
                };
                if let Some(pfn) = got {
                    if flags.highatomic {
                        zone.reserve_highatomic_pageblock(&self.model, pfn, order);
                    }
                    return Ok(pfn);
                }
            }
            if self.unreserve_highatomic_pageblock(order, &ac, node, &mut force) {
                continue;
            }
            // "Reclaim/compaction failed to prevent the fallback".
            if ac.nofragment && ac.defrag_retry && slowpath_retries(ac.gfp, order) {
                ac.nofragment = false;
                continue;
            }
            return Err(RequestError::NoMemory { order });
        }
    }

    /// `unreserve_highatomic_pageblock` where a failed slow-path walk of a
    /// request that may reclaim would reclaim and retry: one reserved
    /// pageblock of the zonelist goes back to the request's migratetype,
    /// keeping each zone's last one (`__alloc_pages_direct_reclaim`) until
    /// none other is left; then, for a request that would retry
    /// ([`slowpath_retries`]), the last ones too (`force`, set here once).
    /// Returns whether one was given back.
    fn unreserve_highatomic_pageblock(
        &self,
        order: Order,
        ac: &AllocContext,
        node: &Node,
        force: &mut bool,
    ) -> bool {
        if !ac.gfp.contains(Gfp::DIRECT_RECLAIM) {
            return false;
        }
        let retries = slowpath_retries(ac.gfp, order);
        loop {
            let zones = node.zonelist(ac.gfp).iter().map(|z| &self.zones[z.index()]);
            if zones
                .filter(|zone| zone.kind <= ac.highest_zone)
                .any(|zone| {
                    zone.unreserve_highatomic_pageblock(&self.model, ac.migratetype, *force)
                })
            {
                return true;
            }
            if *force || !retries {
                return false;
            }
            *force = true;
        }
    }
}

impl<M: BuddyModel, V: Variant> Allocator<M, V> {
    /// [`Allocator::alloc_pages`] for a caller that compacts before it
    /// allows a fragmenting fallback: under `vm.defrag_mode` the slow path
    /// keeps `ALLOC_NOFRAGMENT` to its end.
    pub(crate) fn alloc_pages_nofragment(
        &self,
        order: Order,
        gfp: Gfp,
        node: sparsemem::NodeId,
    ) -> Result<Pfn, RequestError> {
        let node = &self.nodes[self.node_index(node)?];
        self.alloc_pages_at(order, gfp, node, false, |_| true)
    }
}
