//! Test support shared by the tests and the fuzzers (feature `testing`): a
//! reference of allocated blocks and the whole-allocator checks — no page
//! handed out twice, no hole handed out, conservation, full coalescing.

use std::collections::{BTreeMap, BTreeSet};

use crate::types::{BuddyModel, ZoneId};
use crate::{Allocator, Gfp, PerCpu, Variant};
use sparsemem::{
    BuddyPage, Layout, ListState, Migratetype, NR_PAGE_ORDERS, Order, PageFlag, PageLayout, Pfn,
};

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
    let highatomic: u64 = Order::up_to(area.max_order())
        .map(|o| area.block_pfns_of(model, o, Migratetype::HighAtomic).len() as u64 * o.nr_pages())
        .sum();
    if highatomic != zone.nr_free_highatomic() {
        return Err(format!(
            "zone {}: nr_free_highatomic {} but the HighAtomic lists hold {highatomic} pages",
            zone.id,
            zone.nr_free_highatomic()
        ));
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
            check_free_head(alloc, zid, pfn, order)?;
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

/// The head of free block `pfn`/`order` in zone `zid`: marked
/// `PageBuddy` with its order and zone, and its links where the layout
/// keeps them (in the page, or in a live `struct buddy` naming it).
fn check_free_head<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    zid: ZoneId,
    pfn: Pfn,
    order: Order,
) -> Result<(), String> {
    let head = alloc.model().pfn_to_page(pfn);
    let marked = head.is_some_and(|p| {
        p.test(PageFlag::Buddy) && p.private() == u64::from(order.get()) && p.zone_id() == zid.get()
    });
    if !marked {
        return Err(format!(
            "zone {zid}: list entry {pfn}/{order} is not a free head of that order: {head:?}"
        ));
    }
    let desc = head.map(BuddyPage::list_state);
    let own = ListState::Descriptor {
        live: true,
        names_page: true,
    };
    if !matches!(desc, Some(d) if d == ListState::InPage || d == own) {
        return Err(format!(
            "zone {zid}: free block {pfn}/{order} has no live struct buddy of its own: {desc:?}"
        ));
    }
    if let Some(ListState::Descriptor { .. }) = head.map(BuddyPage::memdesc_state) {
        return Err(format!(
            "zone {zid}: free block {pfn}/{order} still holds an allocated page's memdesc: {head:?}"
        ));
    }
    Ok(())
}

/// The pages of `alloc`'s zones that hold a `struct buddy`, where the
/// layout keeps a listed page's links in one (16 bytes), with an error for
/// the first that holds one the cache does not know or that names another
/// page; 0 where the page holds its own links.
pub fn descriptor_holders<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
) -> Result<u64, String> {
    if <M::Page as BuddyPage>::LINKS_IN_PAGE {
        return Ok(0);
    }
    let mut holders = 0;
    for zone in alloc.zones() {
        let zid = zone.id.get();
        for pfn in zone.start_pfn().get()..zone.end_pfn().get() {
            let Some(page) = alloc.model().pfn_to_page(Pfn::new(pfn)) else {
                continue;
            };
            match page.list_state() {
                ListState::Descriptor { live, names_page } if page.zone_id() == zid => {
                    if !(live && names_page) {
                        return Err(format!(
                            "zone {zid}: pfn {pfn:#x} holds a struct buddy that is \
                             {}: {page:?}",
                            if live {
                                "another page's"
                            } else {
                                "not allocated"
                            }
                        ));
                    }
                    holders += 1;
                }
                _ => {}
            }
        }
    }
    Ok(holders)
}

/// Where listed pages keep their links in a `struct buddy` (16 bytes): no
/// page of an allocated block of `reference` holds one (none leaked onto
/// an allocated page). Cheap: only the allocated pages are read.
fn check_allocated_hold_no_descriptor<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    reference: &Reference,
) -> Result<(), String> {
    if <M::Page as BuddyPage>::LINKS_IN_PAGE {
        return Ok(());
    }
    let memdescs = <M::Page as BuddyPage>::memdesc_cache_info().is_some();
    let own = ListState::Descriptor {
        live: true,
        names_page: true,
    };
    for (&head, &order) in &reference.blocks {
        for pfn in head..head + order.nr_pages() {
            let page = alloc.model().pfn_to_page(Pfn::new(pfn));
            if let Some(p) = page.filter(|p| matches!(p.list_state(), ListState::Descriptor { .. }))
            {
                return Err(format!(
                    "descriptors: allocated pfn {pfn:#x} (of {head:#x}/{order}) holds a struct buddy: {p:?}"
                ));
            }
            // At 8 bytes: exactly the head holds a memdesc, live and its own.
            let state = page.map(BuddyPage::memdesc_state);
            let holds = matches!(state, Some(ListState::Descriptor { .. }));
            if memdescs && (holds != (pfn == head) || holds && state != Some(own)) {
                return Err(format!(
                    "memdescs: allocated pfn {pfn:#x} (of {head:#x}/{order}) holds {state:?}: {page:?}"
                ));
            }
        }
    }
    Ok(())
}

/// The pages of `alloc`'s zones that hold an allocated page's memdesc
/// (8 bytes; 0 elsewhere): a walk of every zone page.
pub fn memdesc_holders<M: BuddyModel, V: Variant>(alloc: &Allocator<M, V>) -> u64 {
    if <M::Page as BuddyPage>::memdesc_cache_info().is_none() {
        return 0;
    }
    alloc
        .zones()
        .iter()
        .flat_map(|z| z.start_pfn().get()..z.end_pfn().get())
        .filter_map(|pfn| alloc.model().pfn_to_page(Pfn::new(pfn)))
        .filter(|p| matches!(p.memdesc_state(), ListState::Descriptor { .. }))
        .count() as u64
}

/// With every page freed and no per-CPU list holding any (the end of a
/// run), where listed pages keep their links in a `struct buddy` (16
/// bytes): the pages holding one are exactly the free blocks' heads (none
/// leaked, none missing; a walk of every zone page), and the slab cache
/// counts at least their objects and holds at least their memory.
pub fn check_descriptors_all_free<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
) -> Result<(), String> {
    let holders = descriptor_holders(alloc)?;
    let leaked = memdesc_holders(alloc);
    if leaked != 0 {
        return Err(format!(
            "memdescs: {leaked} pages still hold an allocated page's memdesc with everything freed"
        ));
    }
    let Some(cache) = <M::Page as BuddyPage>::buddy_cache_info() else {
        return Ok(());
    };
    let blocks: u64 = alloc
        .zones()
        .iter()
        .map(|z| z.nr_free().iter().sum::<u64>())
        .sum();
    if holders != blocks {
        return Err(format!(
            "descriptors: {holders} pages hold a struct buddy, but {blocks} free blocks are listed"
        ));
    }
    // The cache is shared by every allocator of this size (other tests
    // run beside this one), so its counts bound ours from above.
    if cache.active_objs < holders || cache.bytes() < cache.active_objs * cache.objsize {
        return Err(format!(
            "descriptors: {holders} held but the cache counts {cache:?}"
        ));
    }
    Ok(())
}

/// Conservation (free + on pcp lists + waiting on the zones'
/// `trylock_free_pages` + allocated == managed) and the free lists'
/// structure ([`check_structure`]); where listed pages keep their links in
/// a `struct buddy` (16 bytes), also that no allocated page of `reference`
/// holds one.
pub fn check_conservation<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    pcp_pages: u64,
    reference: &Reference,
) -> Result<(), String> {
    check_structure(alloc, reference)?;
    let managed: u64 = alloc.zones().iter().map(|z| z.managed_pages()).sum();
    let free: u64 = alloc.zones().iter().map(|z| z.nr_free_pages()).sum();
    let waiting: u64 = alloc
        .zones()
        .iter()
        .map(|z| z.nr_trylock_free_pages())
        .sum();
    if free + pcp_pages + waiting + reference.pages() != managed {
        return Err(format!(
            "conservation: free {free} + pcp {pcp_pages} + waiting {waiting} + allocated {} != managed {managed}",
            reference.pages()
        ));
    }
    check_allocated_hold_no_descriptor(alloc, reference)?;
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
    check_conservation(alloc, 0, reference)?;
    check_descriptors_all_free(alloc)
}

/// Runs the generic check `$f::<P, T…>(args…)` (returning `Result<_, String>`)
/// at every `struct page` layout the allocator runs at (64, 32, 16 and 8
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
        $crate::for_each_buddy_layout!(@one result, $f, sparsemem::Page8, [$($($t),+)?], $($arg),*);
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

/// Zone `zid`'s lock, held until dropped: a holder to set against the
/// paths that only try it (`alloc_pages_nolock`, `free_pages_nolock`).
/// `None` for an id of no zone.
pub fn hold_zone_lock<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    zid: ZoneId,
) -> Option<ZoneLockHeld<'_, V, M::Page>> {
    Some(ZoneLockHeld(alloc.zone(zid)?.free_area.lock()))
}

/// A zone lock held by [`hold_zone_lock`]; dropping it unlocks.
pub struct ZoneLockHeld<'a, V, P>(
    // Held for its drop.
    #[allow(dead_code)] crate::lock::SpinGuard<'a, crate::zone::FreeArea<V, P>>,
);

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
