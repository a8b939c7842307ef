//! Test support shared by the tests and the fuzzers (feature `testing`): a
//! reference of allocated blocks and the whole-allocator checks — no page
//! handed out twice, no hole handed out, conservation, full coalescing.

use std::collections::BTreeMap;

use crate::{Allocator, Gfp, PerCpu, Variant};
use sparsemem::{Layout, MemoryModel, NR_PAGE_ORDERS, Order, Pfn};

/// The reference: allocated blocks by head pfn.
#[derive(Default)]
pub struct Reference {
    /// Allocated blocks: head pfn to order.
    pub blocks: BTreeMap<u64, Order>,
}

impl Reference {
    /// Records a new block, failing if it overlaps one already allocated
    /// (a page handed out twice) or is not memory of the layout (a hole was
    /// handed out).
    pub fn record(&mut self, layout: &Layout, pfn: Pfn, order: Order) -> Result<(), String> {
        let (start, end) = (pfn.get(), pfn.get() + order.nr_pages());
        let inside = layout
            .memory_ranges()
            .any(|(_, a, b)| a.get() <= start && end <= b.get());
        if !inside {
            return Err(format!(
                "block {pfn}/{order} is not inside one memory range (a hole was handed out)"
            ));
        }
        self.insert(pfn, order)
    }

    /// As [`Reference::record`], for memory that may have been hot-added:
    /// every page of the block must be valid in `model` and not reserved.
    pub fn record_model<M: MemoryModel>(
        &mut self,
        model: &M,
        pfn: Pfn,
        order: Order,
    ) -> Result<(), String> {
        for p in pfn.get()..pfn.get() + order.nr_pages() {
            let ok = model
                .pfn_to_page(Pfn::new(p))
                .is_some_and(|page| !page.test(sparsemem::PageFlag::Reserved));
            if !ok {
                return Err(format!(
                    "block {pfn}/{order} holds {p:#x}, a hole or reserved page"
                ));
            }
        }
        self.insert(pfn, order)
    }

    fn insert(&mut self, pfn: Pfn, order: Order) -> Result<(), String> {
        let (start, end) = (pfn.get(), pfn.get() + order.nr_pages());
        if !start.is_multiple_of(order.nr_pages()) {
            return Err(format!("block {pfn} of order {order} is misaligned"));
        }
        if let Some((&p, &o)) = self.blocks.range(..end).next_back()
            && p + o.nr_pages() > start
        {
            return Err(format!("block {pfn}/{order} overlaps allocated {p:#x}/{o}"));
        }
        self.blocks.insert(start, order);
        Ok(())
    }

    /// Pages allocated.
    pub fn pages(&self) -> u64 {
        self.blocks.values().map(|o| o.nr_pages()).sum()
    }

    /// Takes one block out (the `i`-th, modulo the count).
    pub fn take(&mut self, i: usize) -> Option<(Pfn, Order)> {
        let key = *self.blocks.keys().nth(i % self.blocks.len().max(1))?;
        let order = self.blocks.remove(&key)?;
        Some((Pfn::new(key), order))
    }
}

/// Initial `nr_free` of every zone.
pub fn snapshot<M: MemoryModel, V: Variant>(alloc: &Allocator<M, V>) -> Vec<[u64; NR_PAGE_ORDERS]> {
    alloc.zones().iter().map(|z| z.nr_free()).collect()
}

/// Conservation: free + on pcp lists + allocated == managed, and the
/// free lists hold only free-block heads of their order.
pub fn check_conservation<M: MemoryModel, V: Variant>(
    alloc: &Allocator<M, V>,
    pcp_pages: u64,
    reference: &Reference,
) -> Result<(), String> {
    let managed: u64 = alloc.zones().iter().map(|z| z.managed_pages()).sum();
    let free: u64 = alloc.zones().iter().map(|z| z.free_pages()).sum();
    if free + pcp_pages + reference.pages() != managed {
        return Err(format!(
            "conservation: free {free} + pcp {pcp_pages} + allocated {} != managed {managed}",
            reference.pages()
        ));
    }
    Ok(())
}

/// Frees everything in `reference`, drains `cpu`, and checks every zone is
/// back to `initial`.
pub fn free_all_and_check<M: MemoryModel, V: Variant>(
    mut cpu: PerCpu<'_, M, V>,
    reference: &mut Reference,
    initial: &[[u64; NR_PAGE_ORDERS]],
) -> Result<(), String> {
    while let Some((pfn, order)) = reference.take(0) {
        cpu.free_pages(pfn, order)
            .map_err(|e| format!("free {pfn}/{order}: {e}"))?;
    }
    let alloc = cpu.allocator();
    drop(cpu);
    let now = snapshot(alloc);
    if now != initial {
        return Err(format!(
            "not fully coalesced:\n  initial {initial:?}\n  now     {now:?}"
        ));
    }
    check_conservation(alloc, 0, reference)
}

/// The GFP used by the tests: any zone.
pub const GFP: Gfp = Gfp::MOVABLE;
