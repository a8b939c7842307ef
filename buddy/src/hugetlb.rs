//! A hugetlb pool over the allocator (`mm/hugetlb.c`), with HugeTLB
//! vmemmap optimisation where the memory model has it.
//!
//! One [`HugetlbPool`] is one hstate: folios of one order, the geometry's
//! PMD order (2 MiB with 4 KiB pages) or PUD order (1 GiB). Growing the
//! pool (`nr_hugepages` up, `alloc_fresh_hugetlb_folio`) takes folios from
//! the buddy: `alloc_pages` with `__GFP_COMP` (`prep_compound_page`) for
//! orders within `MAX_PAGE_ORDER`, and for gigantic orders an aligned run
//! of free max-order blocks of one zone, taken as they are
//! (`alloc_contig_range`; the kernel also migrates movable pages out of the
//! way, which pfnlab does not: a simplification, so a gigantic request
//! fails as soon as no such run is free) and made one compound folio
//! (`prep_compound_gigantic_folio`). With HVO on, new folios are optimised
//! (batched as 6.7's `hugetlb_vmemmap_optimize_folios`, or one by one).
//! HVO arrived in 5.14 keeping two vmemmap pages per folio; pfnlab models
//! the one-page fake-head layout of 5.18 on ("mm: hugetlb: free the 2nd
//! vmemmap page associated with each HugeTLB page"), so an era from 6.1
//! has it, batched from 6.7 (6.8 on); 2026's shared-tail layout is a
//! patch set on top of it, offered with the 6.18 era only.
//!
//! Shrinking (`update_and_free_pages_bulk`) must first restore each folio's
//! vmemmap, which allocates its pages back from the buddy on the folio's
//! node and can fail. As the kernel does, a folio whose restore fails goes
//! back into the pool as a surplus folio (`add_hugetlb_folio(.., true)`)
//! and shrinking reports no error; the batched path first frees the
//! folios that were restored and retries the others once. Only
//! [`HugetlbPool::dissolve_free_folio`] returns the failure.
//!
//! The vmemmap pages a restore takes are order-0 pages the pool keeps (they
//! back the memmap from then on); optimising a folio frees such pages back
//! to the buddy first. Pages freed beyond those were boot memmap, which
//! lies outside the simulated memory, so nothing returns for them.
//!
//! # Safety
//! The compound fields of a gigantic folio are written here over the
//! max-order blocks the pool took from the free lists and owns; the HVO
//! calls are made for folios the pool owns and does not write while they
//! are optimised.

use std::collections::BTreeSet;

use sparsemem::hvo::{HvoError, HvoLayout, hugetlb_orders, vmemmap_pages_per_folio};
use sparsemem::{BuddyPage, NodeId, Order, PAGE_STRUCT_SIZE, PageFlag, Pfn};

use crate::alloc::Allocator;
use crate::era::Era;
use crate::error::{FreeError, RequestError};
use crate::gfp::Gfp;
use crate::types::{BuddyModel, ZoneId};
use crate::variant::Variant;

/// Whether `era` has HVO in `mode`'s form: the fake-head layout from
/// 5.18, batched from 6.7 (`hugetlb_vmemmap_optimize_folios`), the
/// shared-tail patch set on 6.18 only.
fn hvo_in_era(mode: HvoMode, era: Era) -> bool {
    let layout = match mode.layout {
        HvoLayout::FakeHead => era.since(5, 18),
        HvoLayout::SharedTail => era.since(6, 18),
    };
    layout && (!mode.batched || era.since(6, 7))
}

/// `htlb_alloc_mask`: `GFP_HIGHUSER | __GFP_COMP | __GFP_RETRY_MAYFAIL |
/// __GFP_NOWARN` (hugepages not treated as movable).
fn htlb_alloc_mask() -> Gfp {
    Gfp::HIGHUSER | Gfp::COMP | Gfp::RETRY_MAYFAIL | Gfp::NOWARN
}

/// The pool's counters, as `/sys/kernel/mm/hugepages/*/` names them, and
/// the outcomes of its vmemmap work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HugetlbCounts {
    /// `nr_hugepages`: folios in the pool.
    pub nr_hugepages: u64,
    /// `free_hugepages`: folios in the pool not handed out.
    pub free_hugepages: u64,
    /// `surplus_hugepages`: folios kept because their restore failed.
    pub surplus_hugepages: u64,
    /// Folios optimised.
    pub optimized: u64,
    /// Restores that failed for want of vmemmap pages.
    pub restore_failures: u64,
    /// Fresh folios left plain because their memmap is self-hosted
    /// (memmap_on_memory: `PageVmemmapSelfHosted`).
    pub skipped_self_hosted: u64,
    /// Vmemmap pages allocated from the buddy by restores.
    pub vmemmap_pages_allocated: u64,
    /// Of those, pages freed back to the buddy by later optimisations.
    pub vmemmap_pages_returned: u64,
}

/// Why a hugetlb request was refused.
#[derive(Debug)]
pub enum HugetlbError {
    /// The geometry has no hugetlb size of this order.
    NoHstate {
        /// The order asked for.
        order: u32,
        /// The geometry's PMD and PUD orders.
        orders: [u32; 2],
    },
    /// HVO asked for and refused (the model, the architecture, the size).
    Hvo(HvoError),
    /// HVO asked for in a kernel without pfnlab's form of it (before
    /// 5.18; batched before 6.7; shared tails before 6.18).
    NoHvoInEra(Era),
    /// A gigantic folio needs an aligned run of free max-order blocks in
    /// one zone, and none is free (no migration makes one).
    NoContiguousRange {
        /// The order asked for.
        order: u32,
    },
    /// The buddy had no folio.
    NoMemory(RequestError),
    /// Dissolving a folio: its vmemmap could not be restored (`-ENOMEM`).
    RestoreNoMemory(Pfn),
    /// The pfn is not a free folio of the pool.
    NotFree(Pfn),
    /// The buddy refused a free (a bug in the pool if it happens).
    Free(FreeError),
    /// A gigantic folio at a layout whose tails cannot keep their own
    /// section (8 bytes: a tail's word is its head's address).
    GiganticTails {
        /// The order asked for.
        order: u32,
        /// Bytes of the layout's `struct page`.
        page_size: u64,
    },
}

impl std::fmt::Display for HugetlbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HugetlbError::NoHstate { order, orders } => write!(
                f,
                "no hugetlb size of order {order}: this geometry has orders {} (PMD) and {} (PUD)",
                orders[0], orders[1]
            ),
            HugetlbError::Hvo(e) => write!(f, "{e}"),
            HugetlbError::NoHvoInEra(era) => write!(
                f,
                "pfnlab's HugeTLB vmemmap optimisation is 5.18's fake heads (batched from 6.7, shared tails with 6.18 only); Linux {} has not that form",
                era.name()
            ),
            HugetlbError::NoContiguousRange { order } => write!(
                f,
                "no free contiguous range for a gigantic folio of order {order} (alloc_contig_range's migration is not modelled)"
            ),
            HugetlbError::NoMemory(e) => write!(f, "no memory for a hugetlb folio: {e}"),
            HugetlbError::RestoreNoMemory(pfn) => write!(
                f,
                "cannot dissolve the folio at {pfn:?}: no memory to restore its vmemmap"
            ),
            HugetlbError::NotFree(pfn) => write!(f, "{pfn:?} is not a free folio of the pool"),
            HugetlbError::Free(e) => write!(f, "the buddy refused a hugetlb free: {e}"),
            HugetlbError::GiganticTails { order, page_size } => write!(
                f,
                "a gigantic folio of order {order} spans sections, and a {page_size}-byte struct \
                 page's tail holds only its head's address, not its own section"
            ),
        }
    }
}

impl std::error::Error for HugetlbError {}

impl From<HvoError> for HugetlbError {
    fn from(e: HvoError) -> Self {
        HugetlbError::Hvo(e)
    }
}

/// HVO for a pool: the layout, and whether optimise and restore batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HvoMode {
    /// 5.18+ fake heads or 2026's shared tails.
    pub layout: HvoLayout,
    /// 6.7's batched form.
    pub batched: bool,
}

/// One hstate's pool of folios.
///
/// Invariants:
/// - every folio of `free`, `in_use` is an allocated compound block of
///   the buddy of `order` (gigantic: its max-order blocks) owned by the
///   pool, optimised exactly when `hvo` is on and it was optimised
///   successfully;
/// - `vmemmap_pages` are order-0 pages the pool owns;
/// - `surplus ⊆ free ∪ in_use`.
pub struct HugetlbPool {
    order: u32,
    node: NodeId,
    hvo: Option<HvoMode>,
    free: Vec<Pfn>,
    in_use: BTreeSet<Pfn>,
    surplus: BTreeSet<Pfn>,
    vmemmap_pages: Vec<Pfn>,
    counts: HugetlbCounts,
}

impl HugetlbPool {
    /// An empty pool of folios of `order` on `node`, optimised with `hvo`.
    pub fn new<M: BuddyModel, V: Variant>(
        alloc: &Allocator<M, V>,
        order: u32,
        node: NodeId,
        hvo: Option<HvoMode>,
    ) -> Result<HugetlbPool, HugetlbError> {
        let orders = hugetlb_orders(alloc.model().geometry());
        if !orders.contains(&order) {
            return Err(HugetlbError::NoHstate { order, orders });
        }
        if order > u32::from(alloc.model().geometry().max_order().get())
            && !<M::Page as sparsemem::PageLayout>::FLAGS_WORD
        {
            return Err(HugetlbError::GiganticTails {
                order,
                page_size: <M::Page as sparsemem::PageLayout>::SIZE,
            });
        }
        if let Some(mode) = hvo
            && !hvo_in_era(mode, alloc.options().era)
        {
            return Err(HugetlbError::NoHvoInEra(alloc.options().era));
        }
        if hvo.is_some() {
            alloc.model().hugetlb_vmemmap()?.hvo_supported(order)?;
        }
        alloc.node_index(node).map_err(HugetlbError::NoMemory)?;
        Ok(HugetlbPool {
            order,
            node,
            hvo,
            free: Vec::new(),
            in_use: BTreeSet::new(),
            surplus: BTreeSet::new(),
            vmemmap_pages: Vec::new(),
            counts: HugetlbCounts::default(),
        })
    }

    /// The counters.
    pub fn counts(&self) -> HugetlbCounts {
        let mut c = self.counts;
        c.free_hugepages = self.free.len() as u64;
        c.nr_hugepages = (self.free.len() + self.in_use.len()) as u64;
        c.surplus_hugepages = self.surplus.len() as u64;
        c
    }

    /// The folios' order.
    pub fn order(&self) -> u32 {
        self.order
    }

    /// Every block the pool holds from the buddy, as `(pfn, order)`:
    /// each folio (a gigantic one as its max-order blocks) and each vmemmap
    /// page restores took.
    pub fn blocks<M: BuddyModel, V: Variant>(&self, alloc: &Allocator<M, V>) -> Vec<(Pfn, Order)> {
        let max = alloc.model().geometry().max_order();
        let (chunk, step) = if self.order > u32::from(max.get()) {
            (max, max.nr_pages())
        } else {
            (Order::new(self.order as u8), 1u64 << self.order)
        };
        let per = (1u64 << self.order) / step;
        let folios = self.free.iter().chain(&self.in_use);
        let mut out: Vec<(Pfn, Order)> = folios
            .flat_map(|&h| (0..per).map(move |i| (h + i * step, chunk)))
            .collect();
        out.extend(self.vmemmap_pages.iter().map(|&p| (p, Order::ZERO)));
        out
    }

    /// Grows the pool by up to `n` folios (`nr_hugepages` raised): returns
    /// how many it got; an error only when it got none.
    pub fn grow<M: BuddyModel, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        n: u64,
    ) -> Result<u64, HugetlbError> {
        let mut fresh = Vec::new();
        let mut last = None;
        for _ in 0..n {
            match self.alloc_fresh_folio(alloc) {
                Ok(pfn) => fresh.push(pfn),
                Err(e) => {
                    last = Some(e);
                    break;
                }
            }
        }
        if let (true, Some(e)) = (fresh.is_empty() && n > 0, last) {
            return Err(e);
        }
        // The folios are the pool's whether or not HVO took them all (a
        // folio left plain is restored as a no-op on shrink).
        let optimized = self.optimize_new(alloc, &fresh);
        let got = fresh.len() as u64;
        self.free.extend(fresh);
        optimized.map(|()| got)
    }

    /// `alloc_fresh_hugetlb_folio`: one folio from the buddy.
    fn alloc_fresh_folio<M: BuddyModel, V: Variant>(
        &self,
        alloc: &Allocator<M, V>,
    ) -> Result<Pfn, HugetlbError> {
        let max = alloc.model().geometry().max_order();
        if self.order <= u32::from(max.get()) {
            let order = Order::new(self.order as u8);
            return alloc
                .alloc_pages(order, htlb_alloc_mask(), self.node, None)
                .map_err(HugetlbError::NoMemory);
        }
        self.alloc_gigantic(alloc, max)
    }

    /// A gigantic folio: an aligned run of free max-order blocks of one
    /// zone of the node, taken whole, then made one compound folio.
    fn alloc_gigantic<M: BuddyModel, V: Variant>(
        &self,
        alloc: &Allocator<M, V>,
        max: Order,
    ) -> Result<Pfn, HugetlbError> {
        let nr = 1u64 << self.order;
        for zone in alloc.zones().iter().filter(|z| z.node == self.node) {
            let Some(head) = find_contig_run(alloc, zone.id, nr, max) else {
                continue;
            };
            if alloc.take_free_range(zone.id, head, nr, max) {
                // SAFETY: the pool now owns every block of the range.
                unsafe { prep_compound_gigantic_folio(alloc.model(), head, nr) };
                return Ok(head);
            }
        }
        Err(HugetlbError::NoContiguousRange { order: self.order })
    }

    /// Optimises fresh folios, then gives back vmemmap pages the pool holds
    /// for the pages that optimisation freed.
    fn optimize_new<M: BuddyModel, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        fresh: &[Pfn],
    ) -> Result<(), HugetlbError> {
        let (Some(mode), false) = (self.hvo, fresh.is_empty()) else {
            return Ok(());
        };
        let hvo = alloc.model().hugetlb_vmemmap()?;
        // `vmemmap_should_optimize_folio`: a folio whose memmap lives in
        // its own memory block is left plain.
        let (plain, fresh): (Vec<Pfn>, Vec<Pfn>) =
            fresh.iter().partition(|&&h| vmemmap_self_hosted(alloc, h));
        self.counts.skipped_self_hosted += plain.len() as u64;
        if fresh.is_empty() {
            return Ok(());
        }
        if mode.batched {
            // SAFETY: the pool owns the fresh folios and writes none of
            // their tails while optimised.
            unsafe { hvo.optimize(&fresh, self.order, mode.layout, true) }?;
            self.counts.optimized += fresh.len() as u64;
        } else {
            for &h in &fresh {
                // SAFETY: as above.
                unsafe { hvo.optimize(&[h], self.order, mode.layout, false) }?;
                self.counts.optimized += 1;
            }
        }
        let freed = fresh.len() as u64 * self.tail_vmemmap_pages();
        for _ in 0..freed.min(self.vmemmap_pages.len() as u64) {
            if let Some(p) = self.vmemmap_pages.pop() {
                alloc
                    .free_pages(p, Order::ZERO)
                    .map_err(HugetlbError::Free)?;
                self.counts.vmemmap_pages_returned += 1;
            }
        }
        Ok(())
    }

    /// Vmemmap pages of a folio after its first.
    fn tail_vmemmap_pages(&self) -> u64 {
        let ps = sparsemem::memmap::host_page_size() as u64;
        vmemmap_pages_per_folio(self.order, ps, PAGE_STRUCT_SIZE) - 1
    }

    /// `alloc_hugetlb_folio`: a free folio of the pool for a user.
    pub fn alloc_folio(&mut self) -> Option<Pfn> {
        let pfn = self.free.pop()?;
        self.in_use.insert(pfn);
        Some(pfn)
    }

    /// `free_huge_folio`: a user's folio back to the pool (a surplus folio
    /// stays free in the pool until a shrink frees it).
    pub fn free_folio(&mut self, pfn: Pfn) -> Result<(), HugetlbError> {
        if !self.in_use.remove(&pfn) {
            return Err(HugetlbError::NotFree(pfn));
        }
        self.free.push(pfn);
        Ok(())
    }

    /// Shrinks the pool by up to `n` free folios (`nr_hugepages` lowered,
    /// surplus folios first): each is restored and given back to the
    /// buddy; a folio whose restore fails stays as surplus. Returns how
    /// many went back; never an error for a failed restore.
    pub fn shrink<M: BuddyModel, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        n: u64,
    ) -> Result<u64, HugetlbError> {
        let mut victims = Vec::new();
        self.free.sort_by_key(|p| !self.surplus.contains(p));
        for _ in 0..n {
            let Some(p) = (!self.free.is_empty()).then(|| self.free.remove(0)) else {
                break;
            };
            victims.push(p);
        }
        let batched = self.hvo.is_some_and(|m| m.batched);
        let mut freed = 0;
        let mut failed = Vec::new();
        for &p in &victims {
            if self.restore(alloc, p)? {
                self.free_to_buddy(alloc, p)?;
                freed += 1;
            } else {
                failed.push(p);
            }
        }
        if batched && freed > 0 {
            // 6.7: the restored folios were freed first; retry the others.
            failed.retain(|&p| match self.restore(alloc, p) {
                Ok(true) => {
                    freed += u64::from(self.free_to_buddy(alloc, p).is_ok());
                    false
                }
                _ => true,
            });
        }
        for p in failed {
            self.counts.restore_failures += 1;
            self.surplus.insert(p);
            self.free.push(p);
        }
        Ok(freed)
    }

    /// `dissolve_free_hugetlb_folio`: one free folio back to the buddy, or
    /// `-ENOMEM` when its vmemmap cannot be restored (it stays in the pool).
    pub fn dissolve_free_folio<M: BuddyModel, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        pfn: Pfn,
    ) -> Result<(), HugetlbError> {
        let Some(i) = self.free.iter().position(|&p| p == pfn) else {
            return Err(HugetlbError::NotFree(pfn));
        };
        if !self.restore(alloc, pfn)? {
            self.counts.restore_failures += 1;
            return Err(HugetlbError::RestoreNoMemory(pfn));
        }
        self.free.remove(i);
        self.free_to_buddy(alloc, pfn)
    }

    /// `hugetlb_vmemmap_restore_folio`: pages for the folio's tail vmemmap
    /// from the buddy on its node, then the real restore. `Ok(false)`: not
    /// enough memory, nothing changed.
    fn restore<M: BuddyModel, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        pfn: Pfn,
    ) -> Result<bool, HugetlbError> {
        let Some(mode) = self.hvo else {
            return Ok(true);
        };
        let hvo = alloc.model().hugetlb_vmemmap()?;
        if hvo.optimized(pfn).is_none() {
            return Ok(true);
        }
        let need = self.tail_vmemmap_pages();
        let mut got = Vec::new();
        for _ in 0..need {
            match alloc.alloc_pages(Order::ZERO, Gfp::KERNEL | Gfp::NORETRY, self.node, None) {
                Ok(p) => got.push(p),
                Err(_) => {
                    for p in got {
                        alloc
                            .free_pages(p, Order::ZERO)
                            .map_err(HugetlbError::Free)?;
                    }
                    return Ok(false);
                }
            }
        }
        // SAFETY: the pool owns the folio; no tail reference is held.
        unsafe { hvo.restore(&[pfn], self.order, mode.batched) }?;
        self.counts.vmemmap_pages_allocated += got.len() as u64;
        self.vmemmap_pages.extend(got);
        Ok(true)
    }

    /// `__update_and_free_hugetlb_folio` after the restore: the folio's
    /// blocks back to the buddy.
    fn free_to_buddy<M: BuddyModel, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        pfn: Pfn,
    ) -> Result<(), HugetlbError> {
        self.surplus.remove(&pfn);
        let max = alloc.model().geometry().max_order();
        if self.order <= u32::from(max.get()) {
            return alloc
                .free_pages(pfn, Order::new(self.order as u8))
                .map_err(HugetlbError::Free);
        }
        let nr = 1u64 << self.order;
        // SAFETY: the pool owns the gigantic folio, restored.
        unsafe { destroy_compound_gigantic_folio(alloc.model(), pfn, nr, max) };
        for i in 0..nr / max.nr_pages() {
            alloc
                .free_pages(pfn + i * max.nr_pages(), max)
                .map_err(HugetlbError::Free)?;
        }
        Ok(())
    }
}

/// `PageVmemmapSelfHosted` on the vmemmap page of the folio's head: the
/// head's memory block carries its own memmap (memmap_on_memory's
/// altmap), so the vmemmap pages HVO would free are pfns of the block
/// itself, which never came from the buddy. The kernel asks the head's
/// vmemmap page only: a block's memmap is at its start, and a folio
/// smaller than a block lies in one block.
fn vmemmap_self_hosted<M: BuddyModel, V: Variant>(alloc: &Allocator<M, V>, head: Pfn) -> bool {
    let per = alloc.model().geometry().memory_block_pages();
    let block = Pfn::new(head.get() / per * per);
    !alloc.self_hosted_pfns(block, block + per).is_empty()
}

/// The first aligned run of `nr` pages of free max-order blocks in zone
/// `zid`.
fn find_contig_run<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    zid: ZoneId,
    nr: u64,
    max: Order,
) -> Option<Pfn> {
    let free: BTreeSet<u64> = alloc
        .free_blocks(zid)
        .into_iter()
        .filter(|&(_, o)| o == max)
        .map(|(p, _)| p.get())
        .collect();
    let step = max.nr_pages();
    free.iter()
        .copied()
        .filter(|p| p.is_multiple_of(nr))
        .find(|&head| (0..nr / step).all(|i| free.contains(&(head + i * step))))
        .map(Pfn::new)
}

/// `prep_compound_gigantic_folio`: the head marked `PG_head`, every tail
/// pointing at it with `TAIL_MAPPING`.
///
/// # Safety
/// The caller owns every block of `[head, head + nr)`, taken from the free
/// lists (each block's head prepared by the buddy).
unsafe fn prep_compound_gigantic_folio<M: BuddyModel>(model: &M, head: Pfn, nr: u64) {
    let Some(head_page) = model.pfn_to_page(head) else {
        return;
    };
    // SAFETY: the caller owns the folio, so its pages' allocator fields are
    // the pool's to write.
    unsafe { head_page.set_nonatomic(PageFlag::Head) };
    for i in 1..nr {
        if let Some(tail) = model.pfn_to_page(head + i) {
            // SAFETY: as above.
            unsafe { tail.prep_compound_tail(head_page) };
        }
    }
}

/// `destroy_compound_gigantic_folio`: the compound fields cleared and each
/// max-order block's head as the buddy handed it out (order, one
/// reference: a restored vmemmap page holds copies of the folio's first
/// tails there), so each block frees as it was taken.
///
/// # Safety
/// As [`prep_compound_gigantic_folio`], for a restored folio.
unsafe fn destroy_compound_gigantic_folio<M: BuddyModel>(
    model: &M,
    head: Pfn,
    nr: u64,
    max: Order,
) {
    let Some(head_page) = model.pfn_to_page(head) else {
        return;
    };
    // SAFETY: the caller owns the folio.
    unsafe { head_page.clear_nonatomic(PageFlag::Head) };
    for i in 1..nr {
        if let Some(tail) = model.pfn_to_page(head + i) {
            // SAFETY: as above.
            unsafe { tail.clear_compound_tail() };
            if i.is_multiple_of(max.nr_pages()) {
                // SAFETY: as above.
                unsafe {
                    tail.set_private(u64::from(max.get()));
                    tail.set_refcount(1);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// HVO's forms by era: fake heads from 5.18 (6.1 here), batched from
    /// 6.7 (6.8 here), shared tails with 6.18 only.
    #[test]
    fn hvo_forms_follow_the_era() {
        let mode = |layout, batched| HvoMode { layout, batched };
        let fake = mode(HvoLayout::FakeHead, false);
        let batched = mode(HvoLayout::FakeHead, true);
        let shared = mode(HvoLayout::SharedTail, true);
        let eras = |m: HvoMode| -> Vec<Era> {
            Era::ALL.into_iter().filter(|&e| hvo_in_era(m, e)).collect()
        };
        use Era::*;
        assert_eq!(eras(fake), [V6_1, V6_6, V6_8, V6_12, V6_18]);
        assert_eq!(eras(batched), [V6_8, V6_12, V6_18]);
        assert_eq!(eras(shared), [V6_18]);
    }
}
