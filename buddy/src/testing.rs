//! Test support shared by the tests and the fuzzers (feature `testing`): a
//! reference of allocated blocks and the whole-allocator checks — no page
//! handed out twice, no hole handed out, conservation, full coalescing.

use std::collections::{BTreeMap, BTreeSet};

use crate::types::BuddyModel;
use crate::{Allocator, Gfp, PerCpu, Variant};
use sparsemem::{BuddyPage, Layout, Migratetype, NR_PAGE_ORDERS, Order, PageFlag, PageLayout, Pfn};

/// With migratetypes, every free block sits on the list of its pageblocks'
/// migratetype (each pageblock it covers), as Linux 6.x keeps it.
fn check_migratetype_lists<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    zone: &crate::Zone<V, M::Page>,
) -> Result<(), String> {
    let area = zone.free_area.lock();
    if !area.migratetypes {
        return Ok(());
    }
    let model = alloc.model();
    let pageblock = model.geometry().pageblock_nr_pages();
    for order in Order::up_to(area.max_order()) {
        for mt in Migratetype::ALL {
            for pfn in area.block_pfns_of(model, order, mt) {
                let end = pfn.get() + order.nr_pages();
                let mut p = pfn.get() & !(pageblock - 1);
                while p < end {
                    let got = model.get_pfnblock_migratetype(Pfn::new(p));
                    if got != mt {
                        return Err(format!(
                            "zone {}: free block {pfn}/{order} on the {mt} list, pageblock at {p:#x} is {got}",
                            zone.id
                        ));
                    }
                    p += pageblock;
                }
            }
        }
    }
    Ok(())
}

/// The reference: allocated blocks by head pfn.
#[derive(Default)]
pub struct Reference {
    /// Allocated blocks: head pfn to order.
    pub blocks: BTreeMap<u64, Order>,
}

impl Reference {
    /// Records a new block, failing if it overlaps one already allocated
    /// (a page handed out twice) or is not boot memory of the layout (a
    /// hole, or offline or device memory, was handed out).
    pub fn record(&mut self, layout: &Layout, pfn: Pfn, order: Order) -> Result<(), String> {
        let (start, end) = (pfn.get(), pfn.get() + order.nr_pages());
        let inside = layout
            .ram_ranges()
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
    pub fn record_model<M: BuddyModel>(
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
pub fn snapshot<M: BuddyModel, V: Variant>(alloc: &Allocator<M, V>) -> Vec<[u64; NR_PAGE_ORDERS]> {
    alloc.zones().iter().map(|z| z.nr_free()).collect()
}

/// The free lists' structure, zone by zone, read from the lists themselves
/// (not from counts):
/// - every entry heads a free block of its list's order: aligned, inside
///   the zone's span, its head marked `PageBuddy` with that order and the
///   zone's id;
/// - no two free blocks overlap, and none overlaps an allocated block of
///   `reference`;
/// - no free block's buddy is free at the same order (they would have
///   merged), below `MAX_PAGE_ORDER`;
/// - `nr_free[order]` is the length of each list.
pub fn check_structure<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    reference: &Reference,
) -> Result<(), String> {
    for zone in alloc.zones() {
        let zid = zone.id;
        let mut blocks = alloc.free_blocks(zid);
        let mut counted = [0u64; NR_PAGE_ORDERS];
        for &(pfn, order) in &blocks {
            counted[order.index()] += 1;
            let end = pfn.get() + order.nr_pages();
            if !pfn.get().is_multiple_of(order.nr_pages()) {
                return Err(format!(
                    "zone {zid}: free block {pfn}/{order} is misaligned"
                ));
            }
            if !(zone.spans(pfn) && end <= zone.end_pfn().get()) {
                return Err(format!(
                    "zone {zid}: free block {pfn}/{order} leaves the zone"
                ));
            }
            let head = alloc.model().pfn_to_page(pfn);
            let marked = head.is_some_and(|p| {
                p.test(PageFlag::Buddy)
                    && p.private() == u64::from(order.get())
                    && p.zone_id() == zid.get()
            });
            if !marked {
                return Err(format!(
                    "zone {zid}: list entry {pfn}/{order} is not a free head of that order: {head:?}"
                ));
            }
            if let Some((&a, &o)) = reference.blocks.range(..end).next_back()
                && a + o.nr_pages() > pfn.get()
            {
                return Err(format!(
                    "zone {zid}: free block {pfn}/{order} overlaps allocated {a:#x}/{o}"
                ));
            }
        }
        if counted != zone.nr_free() {
            return Err(format!(
                "zone {zid}: nr_free {:?} but the lists hold {counted:?}",
                zone.nr_free()
            ));
        }
        blocks.sort_unstable();
        for w in blocks.windows(2) {
            let ((a, oa), (b, ob)) = (w[0], w[1]);
            if a.get() + oa.nr_pages() > b.get() {
                return Err(format!(
                    "zone {zid}: free blocks {a}/{oa} and {b}/{ob} overlap"
                ));
            }
        }
        check_migratetype_lists(alloc, zone)?;
        let free: BTreeSet<(u64, Order)> = blocks.iter().map(|&(p, o)| (p.get(), o)).collect();
        for &(pfn, order) in &blocks {
            if order < zone.max_order() && free.contains(&(pfn.get() ^ order.nr_pages(), order)) {
                return Err(format!(
                    "zone {zid}: {pfn}/{order} and its buddy are both free and unmerged"
                ));
            }
        }
    }
    Ok(())
}

/// Conservation (free + on pcp lists + allocated == managed) and the free
/// lists' structure ([`check_structure`]).
pub fn check_conservation<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    pcp_pages: u64,
    reference: &Reference,
) -> Result<(), String> {
    check_structure(alloc, reference)?;
    let managed: u64 = alloc.zones().iter().map(|z| z.managed_pages()).sum();
    let free: u64 = alloc.zones().iter().map(|z| z.nr_free_pages()).sum();
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
pub fn free_all_and_check<M: BuddyModel, V: Variant>(
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

/// Runs the generic check `$f::<P, T…>(args…)` (returning `Result<_, String>`)
/// at every `struct page` layout the allocator runs at (64, 32 and 16
/// bytes: the [`BuddyPage`] layouts), largest first, and stops at the first error,
/// which names the size. sparsemem's `for_each_page_layout!` for the
/// allocator.
#[macro_export]
macro_rules! for_each_buddy_layout {
    ($f:ident $(::<$($t:ty),+>)? ( $($arg:expr),* $(,)? )) => {{
        let mut result: Result<(), String> = Ok(());
        $crate::for_each_buddy_layout!(@one result, $f, sparsemem::Page64, [$($($t),+)?], $($arg),*);
        $crate::for_each_buddy_layout!(@one result, $f, sparsemem::Page32, [$($($t),+)?], $($arg),*);
        $crate::for_each_buddy_layout!(@one result, $f, sparsemem::Page16, [$($($t),+)?], $($arg),*);
        result
    }};
    (@one $result:ident, $f:ident, $p:ty, [$($t:ty),*], $($arg:expr),*) => {
        if $result.is_ok() {
            $result = $f::<$p, $($t),*>($($arg),*).map(|_| ()).map_err(|e| {
                format!("{} at {}-byte struct page", e, <$p as sparsemem::PageLayout>::SIZE)
            });
        }
    };
}

/// The GFP used by the tests: any zone.
pub const GFP: Gfp = Gfp::HIGHUSER_MOVABLE;

/// A `Kernel` allocator over SPARSEMEM_EXTREME on one x86_64 RAM range
/// `[start, end)` (bytes), in `era`.
pub fn ram_allocator(
    start: u64,
    end: u64,
    era: crate::Era,
) -> Allocator<sparsemem::SparseExtreme, crate::Kernel> {
    let layout = Layout::new(
        sparsemem::Geometry::X86_64,
        vec![sparsemem::MemRange::new(
            start,
            end,
            sparsemem::RangeKind::Ram,
            0,
        )],
        "one RAM range",
    )
    .expect("a valid range");
    let model = sparsemem::SparseExtreme::new(&layout).expect("the model builds");
    Allocator::new(model, &layout, crate::Options::for_era(era)).expect("the allocator builds")
}
