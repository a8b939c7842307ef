//! The allocator: nodes of zones over one memory model, the zone path for
//! any order, and the misuse checks on free (its construction is `init`'s).
//!
//! Every allocation walks its zonelist as `get_page_from_freelist` does:
//! the GFP mask's zone limit (`gfp_zone`), the cpuset check, then
//! `zone_watermark_fast` against the zone's low watermark, read from the
//! lock-free `NR_FREE_PAGES` counter, plus its `lowmem_reserve`. A request
//! no zone can serve above its low watermark tries once more with the slow
//! path's flags (the min watermark; part of the reserve for `__GFP_HIGH`
//! and non-blocking requests; no watermark for `__GFP_MEMALLOC`). pfnlab
//! has no kswapd, direct reclaim or compaction: a request that fails both
//! passes (and, under `vm.defrag_mode`, the slow path's last retry;
//! `slowpath`) is refused with [`RequestError::NoMemory`]. Watermarks exist in
//! every era (2.6.9 had `pages_min/low/high`); pfnlab uses today's
//! formulas for all of them.

use std::marker::PhantomData;

use sparsemem::{BuddyPage, Migratetype, NodeId, Order, OrderTooLarge, PageFlag, PageLayout, Pfn};

use crate::era::{Era, Mechanisms, Path, PcpForm};
use crate::error::{FreeError, RequestError};
use crate::frames::Frames;
use crate::gfp::{AllocContext, AllocFlags, Gfp, GfpError};
use crate::list::OwnedBlock;
use crate::lock::{SpinGuard, ZoneLockKind};
use crate::node::{Node, NodeMask};
use crate::types::{BuddyModel, ZoneId, ZoneStats};
use crate::variant::Variant;
use crate::zone::{ClaimError, FreeArea, Zone, claim_for_free};

/// How the zone lock is taken around a per-CPU batch.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum LockPolicy {
    /// Held across the whole batch (the kernel).
    #[default]
    PerBatch,
    /// Taken and released per page (the 2007 proposal).
    PerPage,
}

/// Construction options.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Zone-lock policy of `rmqueue_bulk` / `free_pcppages_bulk`.
    pub lock_policy: LockPolicy,
    /// Overrides the per-CPU `batch` (default: the kernel's formula).
    pub pcp_batch: Option<u32>,
    /// The kernel whose mechanisms the allocator models (default 6.18).
    pub era: Era,
    /// Online CPUs (`num_online_cpus`, default: this machine's,
    /// `available_parallelism`). `zone_highsize` splits a node's low
    /// watermark over its own CPUs: these spread evenly over the nodes with
    /// memory, unless [`Allocator::set_node_cpus`] gives each node's.
    pub cpus: Option<u32>,
    /// Which of the era's mechanisms run (default: all).
    pub mechanisms: Mechanisms,
    /// The zone lock's kind (default: the unfair byte lock in every era;
    /// uncontended, the ticket and queued locks the kernel moved to in
    /// 2.6.25 and 4.2 cost the same one locked operation, so only the lock
    /// experiment, which contends for it, chooses).
    pub zone_lock: ZoneLockKind,
    /// `vm.defrag_mode` (Linux 6.15 on; refused in an older era): no
    /// fallback that leaves a pageblock mixed until the slow path has
    /// nothing else to try (see `Allocator::alloc_pages_slowpath`;
    /// default: off, the kernel's default).
    pub defrag_mode: bool,
    /// `vm.percpu_pagelist_high_fraction` (Linux 5.14 on, and every era
    /// from 5.14 here): with a value `f` (at least 8), `pcp->high` is a zone's
    /// managed pages over `f`, split over the node's CPUs, instead of its
    /// low watermark; 0, the default, keeps the watermark.
    pub percpu_pagelist_high_fraction: u32,
    /// `vm.min_free_kbytes`, `vm.watermark_scale_factor`,
    /// `vm.lowmem_reserve_ratio` and whether THP is enabled: the inputs of
    /// the watermarks and `lowmem_reserve` (default: the kernel's defaults
    /// without THP).
    pub sysctls: crate::watermark::Sysctls,
    /// Back the layout's memory with real frames ([`Frames`]), so
    /// [`Allocator::page_address`] answers and `__GFP_ZERO` clears pages
    /// (default: off; pfnlab then touches only `struct page`s).
    pub frames: bool,
    /// `CONFIG_DEFERRED_STRUCT_PAGE_INIT` (Linux 4.2 on): boot writes each
    /// node's memmap only up to its `first_deferred_pfn`, the rest waits
    /// for [`Allocator::deferred_init_memmap`] or an allocation's
    /// [`Allocator::deferred_grow_zone`] (default: off).
    pub deferred_init: bool,
    /// `kernelcore=` and `movablecore=` (2.6.23 on): the top of each
    /// node's memory becomes ZONE_MOVABLE at boot (default: neither, no
    /// movable zone).
    pub movable_core: crate::MovableCore,
}

impl Options {
    /// The default options for kernel `era`.
    pub fn for_era(era: Era) -> Options {
        Options {
            era,
            ..Options::default()
        }
    }
}

/// A zoned buddy allocator over model `M`, variant `V`.
pub struct Allocator<M: BuddyModel, V> {
    pub(crate) model: M,
    pub(crate) zones: Vec<Zone<V, M::Page>>,
    pub(crate) nodes: Vec<Node>,
    pub(crate) options: Options,
    /// The era's mechanisms that run, resolved once.
    pub(crate) path: Path,
    /// The per-CPU path's form byte, rewritten by
    /// [`Allocator::update_pcp_form`] whenever a choice in it changes.
    pub(crate) pcp_form: PcpForm,
    /// Real frames, when asked for.
    pub(crate) frames: Option<Frames>,
    /// Memory blocks (global block numbers) present in the model but
    /// managed by no zone — hot-added and not yet onlined, or offlined —
    /// with the node they were added for. Only these may be onlined or
    /// hot-removed, as only offline memory blocks can in Linux.
    pub(crate) offline: std::collections::BTreeMap<u64, NodeId>,
    /// Memory blocks (global block numbers) hot-added with their memmap on
    /// the memory, and the pfns at each block's start that memmap takes
    /// (the block's `vmem_altmap`): self-hosted, never in the buddy.
    pub(crate) altmaps: std::collections::BTreeMap<u64, u64>,
    /// Deferred struct page init's state and its static key.
    pub(crate) deferred: crate::memmap_init::Deferred,
    /// The memory hotplug notifier chain online and offline call.
    pub(crate) memory_chain: crate::memory_notify::MemoryNotifierChain,
    /// The CPUs of each node, by node id, when given
    /// ([`Allocator::set_node_cpus`]); empty: [`Options::cpus`] spread
    /// evenly over the nodes.
    pub(crate) node_cpus: Vec<u32>,
    pub(crate) _variant: PhantomData<V>,
}

/// Where listed pages hold a `struct buddy` (16 bytes), the free lists give
/// them back to the global cache before the memmap goes: the kernel never
/// tears a zone down, but pfnlab's allocators come and go while the cache
/// stays. Nothing at 64 and 32 bytes (a constant test).
impl<M: BuddyModel, V> Drop for Allocator<M, V> {
    fn drop(&mut self) {
        if <M::Page as sparsemem::BuddyPage>::LINKS_IN_PAGE {
            return;
        }
        for zone in &self.zones {
            // Blocks `free_pages_nolock` left waiting give their `struct
            // buddy`s back as they are taken.
            zone.trylock_free_pages.take_all(&self.model).for_each(drop);
        }
        for zone in &mut self.zones {
            let area = zone.free_area.get_mut();
            area.lists.iter_mut().flatten().for_each(|l| l.release());
        }
    }
}

impl<M: BuddyModel, V: Variant> Allocator<M, V> {
    /// The memory model, to read: the allocator owns every page's list
    /// links, order, count and zone, and safe code cannot write them.
    ///
    /// ```compile_fail,E0133
    /// use buddy::{Allocator, Kernel, Options};
    /// use sparsemem::{Layout, MemoryModel, NodeId, SparseExtreme};
    ///
    /// let layout = Layout::preset("x86-pci-hole").unwrap();
    /// let alloc = Allocator::<_, Kernel>::new(SparseExtreme::new(&layout).unwrap(), &layout, Options::default()).unwrap();
    /// let p = alloc.cpu_on(NodeId::ZERO).unwrap().alloc(buddy::Gfp::KERNEL).unwrap();
    /// let junk = 0x1000 as *mut sparsemem::Page;
    /// alloc.model().pfn_to_page(p).unwrap().set_lru_next(junk); // E0133: unsafe
    /// ```
    pub fn model(&self) -> &M {
        &self.model
    }

    /// `page_address`: where `pfn`'s frame is, with real frames
    /// ([`Options::frames`]); `None` without them or outside the layout's
    /// memory. Reading or writing it is the caller's `unsafe`, and sound
    /// only while the caller holds the page. An owned page may move (see
    /// [`crate::Owners`]); one a stale owner still names is not held until
    /// that owner is given up.
    pub fn page_address(&self, pfn: Pfn) -> Option<std::ptr::NonNull<u8>> {
        self.frames.as_ref()?.page_address(pfn)
    }

    /// `prep_new_page`: `post_alloc_hook` (with `__GFP_ZERO` and real
    /// frames, `kernel_init_pages` clears every page) and, with
    /// `__GFP_COMP`, `prep_compound_page`; returns the pfn handed out.
    #[inline(always)]
    pub(crate) fn prep_new_page(&self, block: OwnedBlock<M::Page>, gfp: Gfp) -> Pfn {
        self.prep_block(&block, gfp)
    }

    /// [`Allocator::prep_new_page`] keeping the token.
    #[inline(always)]
    pub(crate) fn prep_block(&self, block: &OwnedBlock<M::Page>, gfp: Gfp) -> Pfn {
        if gfp.contains(Gfp::ZERO)
            && let Some(frames) = &self.frames
        {
            frames.clear_block(block);
        }
        block.prep(gfp.contains(Gfp::COMP) && self.path.page_prep)
    }

    /// Rewrites the per-CPU path's form byte from the path and the
    /// `deferred_pages` key: at construction, and whenever the key
    /// changes (under `&mut self`, so no per-CPU handle reads it
    /// meanwhile).
    pub(crate) fn update_pcp_form(&mut self) {
        self.pcp_form = PcpForm::new(&self.path, self.deferred_pages_enabled());
    }

    /// The zones, by id.
    pub fn zones(&self) -> &[Zone<V, M::Page>] {
        &self.zones
    }

    /// The nodes.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The options.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The zone with id `zid`, if there is one.
    pub fn zone(&self, zid: ZoneId) -> Option<&Zone<V, M::Page>> {
        self.zones.get(zid.index())
    }

    /// The index of `node` in [`Allocator::nodes`], or
    /// [`RequestError::UnknownNode`] when no zone has memory on it.
    pub(crate) fn node_index(&self, node: NodeId) -> Result<usize, RequestError> {
        self.nodes
            .binary_search_by_key(&node, |n| n.id)
            .map_err(|_| RequestError::UnknownNode { node })
    }

    /// The zonelist for an allocation from `node` (the fallback list, or
    /// the node's own zones with `__GFP_THISNODE`).
    pub fn zonelist(&self, node: NodeId, gfp: Gfp) -> Result<&[ZoneId], RequestError> {
        Ok(self.nodes[self.node_index(node)?].zonelist(gfp))
    }

    /// `prepare_alloc_pages`: the request's zone limit and migratetype for
    /// this era, or why the mask is invalid; with the `ALLOC_NOFRAGMENT`
    /// that `__alloc_pages` adds next (`alloc_flags_nofragment`).
    #[inline(always)]
    pub(crate) fn prepare_alloc_pages(&self, gfp: Gfp) -> Result<AllocContext, GfpError> {
        let mut ac = AllocContext::new(gfp, self.path.mobility)?;
        ac.nofragment = self.alloc_flags_nofragment();
        Ok(ac)
    }

    /// Whether `get_page_from_freelist` may take from `zone` for a
    /// request: the GFP zone limit, the cpuset (`allowed`), then
    /// `zone_watermark_fast` with `flags` (none when the watermark
    /// mechanism is off) — from 6.7 against the high watermark first
    /// unless the zone is already `ZONE_BELOW_HIGH`, which a failure sets.
    #[inline(always)]
    pub(crate) fn zone_usable(
        &self,
        zone: &Zone<V, M::Page>,
        order: Order,
        ac: &AllocContext,
        flags: AllocFlags,
        allowed: bool,
        tuned: bool,
    ) -> bool {
        if zone.kind > ac.highest_zone || !allowed {
            return false;
        }
        // 6.7's `ZONE_BELOW_HIGH` detection: the high watermark first,
        // and a zone that passes it is taken without the request's own.
        if tuned && flags.wmark.is_some() && !zone.below_high() {
            if zone.watermark_ok(order, zone.watermarks.high, ac.highest_zone, flags) {
                return true;
            }
            zone.set_below_high(true);
        }
        match zone.wmark_pages(flags) {
            Some(mark) => zone.watermark_ok(order, mark, ac.highest_zone, flags),
            None => true,
        }
    }

    /// The flags of `get_page_from_freelist`'s first pass: the low
    /// watermark (`ALLOC_WMARK_LOW`), or none with the mechanism off.
    #[inline(always)]
    pub(crate) fn fast_flags(&self) -> AllocFlags {
        if self.path.watermarks {
            AllocFlags::FAST
        } else {
            AllocFlags::NO_WATERMARKS
        }
    }

    /// `__alloc_pages` on the zone path (no per-CPU list): walks the
    /// zonelist of `node`, taking each zone's lock once.
    pub fn alloc_pages(
        &self,
        order: Order,
        gfp: Gfp,
        node: NodeId,
        mask: Option<&NodeMask>,
    ) -> Result<Pfn, RequestError> {
        self.alloc_pages_with(order, gfp, node, |zone| {
            mask.is_none_or(|m| m.test(zone.node))
        })
    }

    /// The zone path with a caller-supplied per-zone check in the place of
    /// the kernel's `__cpuset_zone_allowed`: `allowed` is asked of every
    /// zone of the walk (both passes), and a zone it refuses is skipped.
    /// [`Allocator::alloc_pages`] passes its node mask through it.
    #[inline]
    pub fn alloc_pages_with(
        &self,
        order: Order,
        gfp: Gfp,
        node: NodeId,
        allowed: impl FnMut(&Zone<V, M::Page>) -> bool,
    ) -> Result<Pfn, RequestError> {
        let node = &self.nodes[self.node_index(node)?];
        self.alloc_pages_at(order, gfp, node, true, allowed)
    }

    /// [`Allocator::alloc_pages_with`] for `node`:
    /// `__alloc_pages` on the zone path. `get_page_from_freelist` walks the
    /// zonelist with the low watermark; if no zone can serve the request,
    /// the slow path walks it once more with the min watermark. The
    /// `deferred_pages` key picks the compiled form with the grow on a miss
    /// or without it, as on the per-CPU path. `defrag_retry` is
    /// [`AllocContext::defrag_retry`].
    #[inline(always)]
    pub(crate) fn alloc_pages_at(
        &self,
        order: Order,
        gfp: Gfp,
        node: &Node,
        defrag_retry: bool,
        allowed: impl FnMut(&Zone<V, M::Page>) -> bool,
    ) -> Result<Pfn, RequestError> {
        if self.deferred_pages_enabled() {
            self.alloc_pages_at_on::<true>(order, gfp, node, defrag_retry, allowed)
        } else {
            self.alloc_pages_at_on::<false>(order, gfp, node, defrag_retry, allowed)
        }
    }

    /// [`Allocator::alloc_pages_at`] with `deferred_grow_zone` on a miss
    /// (`DEFERRED`) or not.
    #[inline(always)]
    fn alloc_pages_at_on<const DEFERRED: bool>(
        &self,
        order: Order,
        gfp: Gfp,
        node: &Node,
        defrag_retry: bool,
        mut allowed: impl FnMut(&Zone<V, M::Page>) -> bool,
    ) -> Result<Pfn, RequestError> {
        self.check_order(order)?;
        let ac = AllocContext {
            defrag_retry,
            ..self.prepare_alloc_pages(gfp)?
        };
        let flags = self.fast_flags();
        for &zid in node.zonelist(gfp) {
            let zone = &self.zones[zid.index()];
            let usable = allowed(zone);
            if self.zone_usable(zone, order, &ac, flags, usable, self.path.pcp_high_tuning)
                && let Some(pfn) =
                    self.rmqueue_buddy(zid, order, ac.migratetype, gfp, ac.nofragment)
            {
                return Ok(pfn);
            }
            if DEFERRED
                && usable
                && zone.kind <= ac.highest_zone
                && let Some(pfn) = self.grow_and_rmqueue_buddy(zid, order, &ac)
            {
                return Ok(pfn);
            }
        }
        self.alloc_pages_slowpath(order, &ac, node, false, allowed, |zid, ac| {
            self.rmqueue_buddy(zid, order, ac.migratetype, gfp, ac.nofragment)
        })
    }

    /// One block from one zone, under its lock, prepared for its caller
    /// as `gfp` asks: `rmqueue_buddy`.
    #[inline(always)]
    pub(crate) fn rmqueue_buddy(
        &self,
        zid: ZoneId,
        order: Order,
        mt: Migratetype,
        gfp: Gfp,
        nofragment: bool,
    ) -> Option<Pfn> {
        let zone = self.zones.get(zid.index())?;
        self.rmqueue_buddy_locked(zone, zone.free_area.lock(), order, mt, gfp, nofragment)
    }

    /// The body of `rmqueue_buddy` once `area` holds zone `zone`'s lock;
    /// `nofragment` is `ALLOC_NOFRAGMENT`.
    #[inline(always)]
    pub(crate) fn rmqueue_buddy_locked(
        &self,
        zone: &Zone<V, M::Page>,
        mut area: SpinGuard<'_, FreeArea<V, M::Page>>,
        order: Order,
        mt: Migratetype,
        gfp: Gfp,
        nofragment: bool,
    ) -> Option<Pfn> {
        let block = area.rmqueue(&self.model, order, mt, nofragment)?;
        area.stats.allocs[order.index()] += 1;
        drop(area);
        if self.path.watermarks {
            zone.mod_free_pages(-(order.nr_pages() as i64));
        }
        Some(self.prep_new_page(block, gfp))
    }

    /// Takes the free max-order blocks of `[head, head + nr_pages)` from
    /// zone `zid` under one lock hold, each prepared as an order-`max`
    /// allocation (the hugetlb pool's gigantic folios); all or none.
    pub(crate) fn take_free_range(
        &self,
        zid: ZoneId,
        head: Pfn,
        nr_pages: u64,
        max: Order,
    ) -> bool {
        let Some(zone) = self.zones.get(zid.index()) else {
            return false;
        };
        let mut area = zone.free_area.lock();
        let mut taken = Vec::new();
        for i in 0..nr_pages / max.nr_pages() {
            match area.take_free_block(&self.model, head + i * max.nr_pages(), max) {
                Some(block) => taken.push(block),
                None => {
                    for block in taken {
                        area.free_one(&self.model, block);
                    }
                    return false;
                }
            }
        }
        area.stats.allocs[max.index()] += taken.len() as u64;
        drop(area);
        if self.path.watermarks {
            zone.mod_free_pages(-(nr_pages as i64));
        }
        for block in taken {
            self.prep_new_page(block, Gfp::KERNEL);
        }
        true
    }

    /// Refuses an order above the geometry's `MAX_PAGE_ORDER` (the
    /// kernel's `WARN_ON_ONCE(order > MAX_PAGE_ORDER)` in `__alloc_pages`).
    #[inline(always)]
    pub(crate) fn check_order(&self, order: Order) -> Result<(), OrderTooLarge> {
        let max = self.model.geometry().max_order();
        if order > max {
            return Err(OrderTooLarge {
                order: u64::from(order.get()),
                max: max.get(),
            });
        }
        Ok(())
    }

    /// `__free_pages` on the zone path, after the misuse checks: the
    /// block straight to the buddy lists under the zone lock
    /// (`free_one_page`), after the blocks `free_pages_nolock` left
    /// waiting (6.15).
    pub fn free_pages(&self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        let (block, zid) = self.claim_for_free(pfn, order)?;
        let zone = &self.zones[zid.index()];
        let mut area = zone.free_area.lock();
        let waited = zone.free_trylock_pages(&self.model, &mut area);
        area.free_one(&self.model, block);
        area.stats.frees[order.index()] += 1;
        drop(area);
        if self.path.watermarks {
            zone.mod_free_pages((order.nr_pages() + waited) as i64);
        }
        Ok(())
    }

    /// Checks that `pfn` heads an allocated block of `order`, claims it so
    /// no other free can, and prepares it (`free_pages_prepare`: a page
    /// still mapped or locked is [`FreeError::BadPage`]); nothing changes
    /// on error.
    #[inline(always)]
    pub(crate) fn claim_for_free(
        &self,
        pfn: Pfn,
        order: Order,
    ) -> Result<(OwnedBlock<M::Page>, ZoneId), FreeError> {
        let (block, zid) = self.claim(pfn, order)?;
        if !self.path.page_prep {
            return Ok((block, zid));
        }
        if let Err((pfn, reason)) = block.free_pages_prepare() {
            block.unclaim();
            return Err(FreeError::BadPage { pfn, reason });
        }
        Ok((block, zid))
    }

    /// The claim of [`Allocator::claim_for_free`].
    #[inline(always)]
    pub(crate) fn claim(
        &self,
        pfn: Pfn,
        order: Order,
    ) -> Result<(OwnedBlock<M::Page>, ZoneId), FreeError> {
        self.check_order(order)?;
        claim_for_free(&self.model, &self.zones, pfn, order)
            .map_err(|e| self.claim_refused(pfn, order, e))
    }

    /// What a refused claim tells the caller.
    #[cold]
    #[inline(never)]
    fn claim_refused(&self, pfn: Pfn, order: Order, e: ClaimError) -> FreeError {
        match e {
            ClaimError::OutsideZone
                if self
                    .model
                    .pfn_to_page(pfn)
                    .is_some_and(|p| p.is_zone_device()) =>
            {
                FreeError::DeviceMemory { pfn }
            }
            ClaimError::OutsideZone => FreeError::OutsideZone { pfn },
            ClaimError::WrongOrder { allocated } => FreeError::WrongOrder {
                pfn,
                freed: order,
                allocated,
            },
            ClaimError::NotAllocated(zid) => self.classify_bad_free(pfn, zid),
        }
    }

    /// Why a free was refused: already free, or never allocated.
    #[cold]
    fn classify_bad_free(&self, pfn: Pfn, zid: ZoneId) -> FreeError {
        let marked_free = self
            .model
            .pfn_to_page(pfn)
            .is_some_and(|page| page.test(PageFlag::Pcp) || page.test(PageFlag::Buddy));
        if marked_free {
            return FreeError::DoubleFree { pfn };
        }
        let _guard = self.zones[zid.index()].free_area.lock();
        if self.free_block_containing(zid, pfn).is_some() {
            FreeError::DoubleFree { pfn }
        } else {
            FreeError::NotAllocated { pfn }
        }
    }

    /// The free block (head pfn, order) containing `pfn`, if any. The
    /// caller holds the zone's lock (or `&mut self`).
    pub(crate) fn free_block_containing(&self, zid: ZoneId, pfn: Pfn) -> Option<(Pfn, Order)> {
        for o in Order::up_to(self.model.geometry().max_order()) {
            let head = Pfn::new(pfn.get() & !(o.nr_pages() - 1));
            let Some(page) = self.model.pfn_to_page(head) else {
                continue;
            };
            if page.test(PageFlag::Buddy)
                && page.zone_id() == zid.get()
                && head.get() + (1 << page.private()) > pfn.get()
            {
                return Some((head, Order::new(page.private() as u8)));
            }
        }
        None
    }

    /// Every free block on zone `zid`'s lists as `(pfn, order)` (none for
    /// an id of no zone).
    pub fn free_blocks(&self, zid: ZoneId) -> Vec<(Pfn, Order)> {
        let Some(zone) = self.zone(zid) else {
            return Vec::new();
        };
        let area = zone.free_area.lock();
        Order::up_to(area.max_order())
            .flat_map(|o| {
                area.block_pfns(&self.model, o)
                    .into_iter()
                    .map(move |p| (p, o))
            })
            .collect()
    }

    /// Free pages on every zone's free lists (the allocator-wide
    /// `NR_FREE_PAGES`, less what per-CPU lists hold).
    pub fn free_pages_total(&self) -> u64 {
        self.zones.iter().map(Zone::nr_free_pages).sum()
    }

    /// Pages given to the allocator, over every zone.
    pub fn managed_pages_total(&self) -> u64 {
        self.zones.iter().map(Zone::managed_pages).sum()
    }

    /// Every zone's statistics, summed.
    pub fn stats_total(&self) -> ZoneStats {
        self.zones.iter().fold(ZoneStats::default(), |mut sum, z| {
            sum += z.stats();
            sum
        })
    }
}
