//! The allocator: nodes of zones over one memory model, the zone path for
//! any order, and the misuse checks on free.
//!
//! Construction follows boot: every RAM range becomes part of its node's
//! DMA, DMA32 or Normal zone by physical address, hotplug ranges become
//! Movable; each page gets its zone and node ids and loses `PG_reserved`,
//! and the ranges are freed in the largest aligned blocks, merging as they
//! go (`memblock_free_all`). Reserved pages and holes inside a zone's span
//! are never on a free list, so they are never handed out.

use std::marker::PhantomData;

use sparsemem::{
    Layout, MAX_PAGE_ORDER, MemoryModel, NR_PAGE_ORDERS, Order, Page, PageFlag, Pfn, RangeKind,
};

use crate::error::AllocError;
use crate::lock::SpinLock;
use crate::node::{Gfp, Node, NodeMask, build_nodes};
use crate::variant::Variant;
use crate::zone::{FreeArea, ZoneStats, ZoneType};

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
}

/// One zone.
pub struct Zone<V> {
    /// The zone type.
    pub kind: ZoneType,
    /// Its node.
    pub node: u16,
    /// Its id: the index in [`Allocator::zones`], stored in its pages.
    pub id: u8,
    pub(crate) start: Pfn,
    pub(crate) end: Pfn,
    pub(crate) managed: u64,
    pub(crate) free: SpinLock<FreeArea<V>>,
    pub(crate) batch: u32,
    pub(crate) high: u32,
}

impl<V: Variant> Zone<V> {
    /// First pfn of the span.
    pub fn start_pfn(&self) -> Pfn {
        self.start
    }

    /// One past the last pfn of the span.
    pub fn end_pfn(&self) -> Pfn {
        self.end
    }

    /// Pages given to the allocator.
    pub fn managed_pages(&self) -> u64 {
        self.managed
    }

    /// Per-CPU `batch`.
    pub fn batch(&self) -> u32 {
        self.batch
    }

    /// Per-CPU `high`.
    pub fn high(&self) -> u32 {
        self.high
    }

    /// Free pages on the zone's lists (not counting per-CPU lists).
    pub fn free_pages(&self) -> u64 {
        self.free.lock().free_pages()
    }

    /// `nr_free` per order.
    pub fn nr_free(&self) -> [u64; NR_PAGE_ORDERS] {
        self.free.lock().nr_free()
    }

    /// The zone's statistics (taken under its lock).
    pub fn stats(&self) -> ZoneStats {
        self.free.lock().stats
    }

    /// Zone-lock acquisitions so far.
    pub fn lock_acquisitions(&self) -> u64 {
        self.free.acquisitions()
    }

    pub(crate) fn set_pcp_sizes(&mut self, batch: Option<u32>) {
        self.batch = batch.unwrap_or_else(|| zone_batchsize(self.managed)).max(1);
        self.high = 6 * self.batch;
    }
}

/// The kernel's `zone_batchsize`: 0.1 % of the zone or 1 MiB of 4 KiB
/// pages, a quarter of that, rounded down to `2^n - 1` (63 for zones of
/// 1 GiB and up).
pub fn zone_batchsize(managed_pages: u64) -> u32 {
    let batch = (managed_pages >> 10).min(256) / 4;
    let batch = batch.max(1);
    let b = batch + batch / 2;
    ((1u64 << (63 - b.leading_zeros())) - 1).max(1) as u32
}

/// Largest number of pages one bulk request may ask for.
pub const MAX_BULK: usize = 4096;

/// A zoned buddy allocator over model `M`, variant `V`.
pub struct Allocator<M, V> {
    pub(crate) model: M,
    pub(crate) zones: Vec<Zone<V>>,
    pub(crate) nodes: Vec<Node>,
    pub(crate) options: Options,
    /// Subsections (global numbers) present in the model but managed by no
    /// zone: hot-added and not yet onlined, or offlined. Only these may be
    /// onlined or hot-removed, as only added memory blocks can in Linux —
    /// never the reserved hole of an early section.
    pub(crate) offline: std::collections::BTreeSet<u64>,
    _variant: PhantomData<V>,
}

/// Zone type of a boot RAM pfn by physical address.
fn ram_zone(layout: &Layout, pfn: Pfn) -> ZoneType {
    let addr = pfn.get() << layout.geometry().page_shift();
    if addr < 16 << 20 {
        ZoneType::Dma
    } else if addr < 4 << 30 {
        ZoneType::Dma32
    } else {
        ZoneType::Normal
    }
}

/// `(node, type) -> pfn ranges` of a layout's memory.
fn zone_parts(layout: &Layout) -> std::collections::BTreeMap<(u16, ZoneType), Vec<(Pfn, Pfn)>> {
    let g = layout.geometry();
    let bounds = [16u64 << 20, 4 << 30].map(|b| b >> g.page_shift());
    let mut parts: std::collections::BTreeMap<(u16, ZoneType), Vec<(Pfn, Pfn)>> =
        Default::default();
    for (r, first, end) in layout.memory_ranges() {
        let mut cuts = vec![first.get()];
        cuts.extend(
            bounds
                .iter()
                .copied()
                .filter(|&b| b > first.get() && b < end.get()),
        );
        cuts.push(end.get());
        for w in cuts.windows(2) {
            let kind = if r.kind == RangeKind::Hotplug {
                ZoneType::Movable
            } else {
                ram_zone(layout, Pfn::new(w[0]))
            };
            parts
                .entry((r.node, kind))
                .or_default()
                .push((Pfn::new(w[0]), Pfn::new(w[1])));
        }
    }
    parts
}

impl<M: MemoryModel, V: Variant> Allocator<M, V> {
    /// Builds nodes and zones for `layout` over `model` (built from the
    /// same layout) and frees all memory into them.
    pub fn new(model: M, layout: &Layout, options: Options) -> Result<Self, AllocError> {
        let parts = zone_parts(layout);
        if parts.len() > 255 {
            return Err(AllocError::TooManyZones);
        }
        let mut alloc = Allocator {
            model,
            zones: Vec::new(),
            nodes: Vec::new(),
            options,
            offline: Default::default(),
            _variant: PhantomData,
        };
        for (i, ((node, kind), ranges)) in parts.iter().enumerate() {
            let start = ranges.iter().map(|r| r.0).min().unwrap_or_default();
            let end = ranges.iter().map(|r| r.1).max().unwrap_or_default();
            alloc.zones.push(Zone {
                kind: *kind,
                node: *node,
                id: i as u8,
                start,
                end,
                managed: 0,
                free: SpinLock::new(FreeArea::new(i as u8, start, end)),
                batch: 1,
                high: 6,
            });
        }
        for (i, ranges) in parts.values().enumerate() {
            for &(first, end) in ranges {
                alloc.check_blocks(first, end)?;
            }
            for &(first, end) in ranges {
                alloc.give_range(i, first, end);
            }
        }
        for zone in &mut alloc.zones {
            zone.set_pcp_sizes(options.pcp_batch);
        }
        alloc.rebuild_nodes();
        Ok(alloc)
    }

    pub(crate) fn rebuild_nodes(&mut self) {
        let triples: Vec<(usize, u16, ZoneType)> = self
            .zones
            .iter()
            .map(|z| (z.id as usize, z.node, z.kind))
            .collect();
        self.nodes = build_nodes(&triples);
    }

    /// Without the hole check, refuses ranges whose `MAX_PAGE_ORDER` blocks
    /// contain invalid pfns (the buddy of a valid page must be readable).
    pub(crate) fn check_blocks(&self, first: Pfn, end: Pfn) -> Result<(), AllocError> {
        if V::HOLE_CHECK {
            return Ok(());
        }
        let block = Order::MAX.nr_pages();
        let step = self.model.geometry().pages_per_subsection().min(block);
        let mut head = first.get() & !(block - 1);
        while head < end.get() {
            let probes = (head..head + block)
                .step_by(step as usize)
                .chain([head + block - 1]);
            for pfn in probes {
                if !self.model.pfn_valid(Pfn::new(pfn)) {
                    return Err(AllocError::HolesInBlock { pfn: Pfn::new(pfn) });
                }
            }
            head += block;
        }
        Ok(())
    }

    /// Hands `[first, end)` to zone `zid`: page ids, `PG_reserved` cleared,
    /// freed in the largest aligned blocks (`__free_pages_core`).
    pub(crate) fn give_range(&mut self, zid: usize, first: Pfn, end: Pfn) {
        let zone = &mut self.zones[zid];
        let area = zone.free.get_mut();
        for pfn in first.get()..end.get() {
            let page = self
                .model
                .pfn_to_page(Pfn::new(pfn))
                .expect("memory ranges are valid (semantics)");
            page.set_zone_node(zone.id, zone.node);
            page.set_refcount(0);
            page.clear(PageFlag::Reserved);
        }
        let mut pfn = first.get();
        while pfn < end.get() {
            let mut order = pfn.trailing_zeros().min(u32::from(MAX_PAGE_ORDER));
            while pfn + (1 << order) > end.get() {
                order -= 1;
            }
            assert!(
                self.model.pfn_valid(Pfn::new(pfn)),
                "memory ranges are valid (semantics)"
            );
            // SAFETY: (1) the pfn is valid (asserted), so the pointer is its
            // descriptor with section-wide provenance; (2) the block lies in
            // this zone's range and was never freed; (3) without the hole
            // check, `check_blocks` verified the surrounding blocks.
            unsafe {
                let page = self.model.pfn_to_page_ptr(Pfn::new(pfn));
                area.free_one(&self.model, page, Pfn::new(pfn), Order::new(order as u8));
            }
            pfn += 1 << order;
        }
        zone.managed += end.get() - first.get();
    }

    /// The memory model.
    pub fn model(&self) -> &M {
        &self.model
    }

    /// The zones, by id.
    pub fn zones(&self) -> &[Zone<V>] {
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

    /// The zonelist for an allocation from `node` (the fallback list, or
    /// the node's own zones with `THISNODE`).
    #[inline(always)]
    pub fn zonelist(&self, node: u16, gfp: Gfp) -> &[usize] {
        let n = self
            .nodes
            .iter()
            .find(|n| n.id == node)
            .unwrap_or(&self.nodes[0]);
        if gfp.thisnode {
            &n.zonelist_thisnode
        } else {
            &n.zonelist
        }
    }

    /// Whether a zonelist entry may serve `gfp` under `mask`
    /// (`__cpuset_zone_allowed` plus the zone-type limit).
    #[inline(always)]
    pub(crate) fn zone_allowed(&self, zid: usize, gfp: Gfp, mask: Option<&NodeMask>) -> bool {
        let zone = &self.zones[zid];
        zone.kind <= gfp.highest_zone && mask.is_none_or(|m| m.test(zone.node))
    }

    /// `__alloc_pages` on the zone path (no per-CPU list): walks the
    /// zonelist of `node`, taking each zone's lock once.
    pub fn alloc_pages(
        &self,
        order: Order,
        gfp: Gfp,
        node: u16,
        mask: Option<&NodeMask>,
    ) -> Result<Pfn, AllocError> {
        self.alloc_pages_with(order, gfp, node, |zone| {
            mask.is_none_or(|m| m.test(zone.node))
        })
    }

    /// The zone path with a caller-supplied per-zone check, called for
    /// every zone of the walk that the GFP zone limit allows (how the
    /// cpuset experiment models `__cpuset_zone_allowed`).
    #[inline]
    pub fn alloc_pages_with(
        &self,
        order: Order,
        gfp: Gfp,
        node: u16,
        mut allowed: impl FnMut(&Zone<V>) -> bool,
    ) -> Result<Pfn, AllocError> {
        for &zid in self.zonelist(node, gfp) {
            let zone = &self.zones[zid];
            if zone.kind > gfp.highest_zone || !allowed(zone) {
                continue;
            }
            if let Some(pfn) = self.rmqueue(zid, order) {
                return Ok(pfn);
            }
        }
        Err(AllocError::NoMemory { order })
    }

    /// The zone path over a precomputed list of zone ids, with no per-zone
    /// check (a zonelist already filtered for the cpuset).
    #[inline]
    pub fn alloc_pages_from(&self, order: Order, zonelist: &[usize]) -> Result<Pfn, AllocError> {
        for &zid in zonelist {
            if let Some(pfn) = self.rmqueue(zid, order) {
                return Ok(pfn);
            }
        }
        Err(AllocError::NoMemory { order })
    }

    /// One block from one zone, under its lock.
    #[inline(always)]
    fn rmqueue(&self, zid: usize, order: Order) -> Option<Pfn> {
        let mut area = self.zones.get(zid)?.free.lock();
        let (page, pfn) = area.rmqueue_smallest(&self.model, order)?;
        // SAFETY: a block head just taken from the free lists: a live
        // descriptor of `self.model`, borrowed for this call.
        let page = unsafe { &*page };
        area.stats.allocs[order.index()] += 1;
        drop(area);
        prep_new_page(page, order);
        Some(pfn)
    }

    /// `__free_pages` on the zone path, after the misuse checks.
    pub fn free_pages(&self, pfn: Pfn, order: Order) -> Result<(), AllocError> {
        let (page, zid) = self.claim_for_free(pfn, order)?;
        let mut area = self.zones[zid].free.lock();
        // SAFETY: claim_for_free checked the pfn is valid, heads an allocated
        // block of `order` in zone `zid`, and claimed it; `page` comes from
        // pfn_to_page_ptr.
        unsafe { area.free_one(&self.model, page, pfn, order) };
        area.stats.frees[order.index()] += 1;
        Ok(())
    }

    /// Checks that `pfn` heads an allocated block of `order` and claims it
    /// (refcount 1 -> 0), so no other free can; nothing changes on error.
    /// Returns the head's descriptor pointer (`pfn_to_page_ptr`) and zone.
    #[inline(always)]
    pub(crate) fn claim_for_free(
        &self,
        pfn: Pfn,
        order: Order,
    ) -> Result<(*const Page, usize), AllocError> {
        let page = self
            .model
            .pfn_to_page(pfn)
            .ok_or(AllocError::OutsideZone { pfn })?;
        let zid = usize::from(page.zone_id());
        let in_zone = self
            .zones
            .get(zid)
            .is_some_and(|z| z.start <= pfn && pfn < z.end && !page.test(PageFlag::Reserved));
        if !in_zone {
            return Err(AllocError::OutsideZone { pfn });
        }
        if page.private() != u64::from(order.get()) && page.refcount() == 1 {
            return Err(AllocError::WrongOrder {
                pfn,
                freed: order,
                allocated: page.private(),
            });
        }
        if !page.ref_freeze(1) {
            return Err(self.classify_bad_free(page, pfn, zid));
        }
        // SAFETY: pfn_to_page just validated the pfn.
        Ok((unsafe { self.model.pfn_to_page_ptr(pfn) }, zid))
    }

    /// Why a free was refused: already free, or never allocated.
    #[cold]
    fn classify_bad_free(&self, page: &Page, pfn: Pfn, zid: usize) -> AllocError {
        if page.test(PageFlag::Pcp) || page.test(PageFlag::Buddy) {
            return AllocError::DoubleFree { pfn };
        }
        let _guard = self.zones[zid].free.lock();
        if self.free_block_containing(zid, pfn).is_some() {
            AllocError::DoubleFree { pfn }
        } else {
            AllocError::NotAllocated { pfn }
        }
    }

    /// The free block (head pfn, order) containing `pfn`, if any. The
    /// caller holds the zone's lock (or `&mut self`).
    pub(crate) fn free_block_containing(&self, zid: usize, pfn: Pfn) -> Option<(Pfn, Order)> {
        for o in Order::all() {
            let head = Pfn::new(pfn.get() & !(o.nr_pages() - 1));
            let Some(page) = self.model.pfn_to_page(head) else {
                continue;
            };
            if page.test(PageFlag::Buddy)
                && usize::from(page.zone_id()) == zid
                && head.get() + (1 << page.private()) > pfn.get()
            {
                return Some((head, Order::new(page.private() as u8)));
            }
        }
        None
    }

    /// Free pages on the zone lists of zone `zid`.
    pub fn zone_free_pages(&self, zid: usize) -> u64 {
        self.zones[zid].free_pages()
    }

    /// Every free block on zone `zid`'s lists as `(pfn, order)`.
    pub fn free_blocks(&self, zid: usize) -> Vec<(Pfn, Order)> {
        let area = self.zones[zid].free.lock();
        Order::all()
            .flat_map(|o| {
                area.block_pfns(&self.model, o)
                    .into_iter()
                    .map(move |p| (p, o))
            })
            .collect()
    }
}

/// `prep_new_page`: an allocated head has refcount 1 and its order in
/// `private` (so a free with the wrong order is caught).
#[inline(always)]
pub(crate) fn prep_new_page(page: &Page, order: Order) {
    page.set_private(u64::from(order.get()));
    page.set_refcount(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_follows_the_kernel_formula() {
        assert_eq!(zone_batchsize(1 << 18), 63, "1 GiB zone");
        assert_eq!(zone_batchsize(1 << 22), 63, "16 GiB zone");
        assert_eq!(zone_batchsize(1 << 15), 7, "128 MiB zone");
        assert_eq!(zone_batchsize(4096), 1, "16 MiB DMA zone");
    }
}
