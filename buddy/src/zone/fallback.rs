//! `__rmqueue`: the smallest block of the requested migratetype, else a
//! block borrowed from another migratetype (`__rmqueue_fallback`).
//!
//! When the lists of the request's migratetype are empty, the allocator
//! looks for the largest free block on the fallback lists (Unmovable →
//! Reclaimable, Movable; Movable → Reclaimable, Unmovable; Reclaimable →
//! Unmovable, Movable), largest first so that a whole pageblock is claimed
//! rather than many fragmented. Then, as `steal_suitable_fallback` does:
//! - a block of a pageblock or more is claimed whole: every pageblock it
//!   covers changes migratetype (`change_pageblock_range`);
//! - a smaller block's pageblock is claimed when stealing is worth it
//!   (`can_steal_fallback`: the request is at least half a pageblock, or it
//!   is Unmovable or Reclaimable) and at least half of the pageblock is
//!   free: its free blocks move to the request's lists
//!   (`move_freepages_block`) and it changes migratetype;
//! - otherwise the block is used where it is, its pageblock unchanged.
//!
//! The `MIGRATE_HIGHATOMIC` reserve is never a fallback: only the
//! requests with its rights take from it (`zone::highatomic`).
//!
//! `ALLOC_NOFRAGMENT` (Linux 4.20's flag, which 6.15's `vm.defrag_mode`
//! sets on every request) allows only the first kind: `__rmqueue_claim`
//! starts its search no lower than `pageblock_order` (its `min_order`), so
//! only a free block of a whole pageblock or more can be claimed, and
//! `__rmqueue` skips `__rmqueue_steal`. A request it leaves without a
//! block goes back to the slow path, which decides when to ask again
//! without the flag (`Allocator::alloc_pages_slowpath`).
//!
//! Simplifications, said: no
//! "alike pages" count of in-use movable pages, and the 6.x
//! `find_smallest` retry for Movable requests is not modelled. The last
//! case above is 6.10's (commit c0cd6f557b90) in every era: before it,
//! the whole block went to the request's lists and the rest of its split
//! stayed there, in the other migratetype's pageblock; the model keeps
//! every free block on its own pageblock's list.
//!
//! # Safety
//! Only free blocks move here, from one list of the free area to another,
//! under the zone lock: every page unlinked is a block head the free area's
//! invariants put on exactly that list (its order, its pageblock's
//! migratetype), and it is relinked before the lock is let go. Pointers
//! come from the lists themselves or from `pfn_to_page_ptr` of a pfn the
//! model just found valid.

use sparsemem::{BuddyPage, Migratetype, Order, PageFlag, Pfn};

use super::free_area::{FreeArea, change_pageblock_range};
use crate::list::OwnedBlock;
use crate::types::BuddyModel;
use crate::variant::Variant;

/// `fallbacks[]`: where each migratetype borrows from, in order.
pub const FALLBACKS: [[Migratetype; 2]; 3] = [
    [Migratetype::Reclaimable, Migratetype::Movable],
    [Migratetype::Reclaimable, Migratetype::Unmovable],
    [Migratetype::Unmovable, Migratetype::Movable],
];

impl<V: Variant, P: BuddyPage> FreeArea<V, P> {
    /// `__rmqueue`: a block of `order` for migratetype `mt`; with
    /// `nofragment` (`ALLOC_NOFRAGMENT`) only a whole free pageblock of
    /// another migratetype may be claimed for it.
    #[inline(always)]
    pub(crate) fn rmqueue<M: BuddyModel<Page = P>>(
        &mut self,
        model: &M,
        order: Order,
        mt: Migratetype,
        nofragment: bool,
    ) -> Option<OwnedBlock<P>> {
        let mt = if self.migratetypes {
            mt
        } else {
            Migratetype::Movable
        };
        self.rmqueue_smallest(model, order, mt)
            .or_else(|| self.rmqueue_fallback(model, order, mt, nofragment))
    }

    /// `__rmqueue_fallback` (6.15 splits it into `__rmqueue_claim` and
    /// `__rmqueue_steal`): with `nofragment`, the search stops above
    /// `pageblock_order` (`__rmqueue_claim`'s `min_order`), where every
    /// block found is claimed whole, and nothing is stolen.
    #[cold]
    fn rmqueue_fallback<M: BuddyModel<Page = P>>(
        &mut self,
        model: &M,
        order: Order,
        mt: Migratetype,
        nofragment: bool,
    ) -> Option<OwnedBlock<P>> {
        let fallbacks = FALLBACKS.get(mt.index())?;
        if !self.migratetypes {
            return None;
        }
        let pageblock_order = model.geometry().pageblock_order().index();
        let min_order = if nofragment {
            order.index().max(pageblock_order)
        } else {
            order.index()
        };
        for current in (min_order..=self.max_order().index()).rev() {
            for &fallback in fallbacks {
                let Some(head) = self.lists[current][fallback.index()].iter().next() else {
                    continue;
                };
                // SAFETY: listed pages are live descriptors of the model.
                let pfn = model.page_to_pfn(unsafe { &*head });
                self.stats.fallbacks += 1;
                if current >= pageblock_order {
                    // Claim the whole block.
                    self.stats.whole_block_claims += 1;
                    // SAFETY: `head` is on lists[current][fallback], at `pfn`.
                    unsafe { self.retype_free_block(model, head, pfn, current, [fallback, mt]) };
                    return self.rmqueue_smallest(model, order, mt);
                }
                let can_steal = order.index() >= pageblock_order / 2
                    || mt == Migratetype::Unmovable
                    || mt == Migratetype::Reclaimable;
                if can_steal && self.claim_pageblock(model, pfn, fallback, mt) {
                    return self.rmqueue_smallest(model, order, mt);
                }
                self.stats.stolen[mt.index()][fallback.index()] += 1;
                return self.rmqueue_smallest(model, order, fallback);
            }
        }
        None
    }

    /// `move_freepages_block` when at least half of `pfn`'s pageblock is
    /// free and no other zone shares it: its free blocks move from the
    /// `from` lists to the `to` lists and the pageblock becomes `to`.
    /// Returns whether it was claimed.
    fn claim_pageblock<M: BuddyModel<Page = P>>(
        &mut self,
        model: &M,
        pfn: Pfn,
        from: Migratetype,
        to: Migratetype,
    ) -> bool {
        let size = model.geometry().pageblock_nr_pages();
        match self.pageblock_free_blocks(model, pfn) {
            Some((heads, free_pages)) if free_pages * 2 >= size => {
                self.move_free_blocks(model, pfn, heads, from, to);
                self.stats.steals += 1;
                true
            }
            _ => false,
        }
    }

    /// The free block `(pfn, order)` of a pageblock or more, first on the
    /// `from` lists, moves to the `to` lists and every pageblock it covers
    /// becomes `to` (`move_to_free_list` + `change_pageblock_range`).
    ///
    /// # Safety
    /// `head` is `pfn`'s descriptor, on `lists[order][from]`.
    pub(crate) unsafe fn retype_free_block<M: BuddyModel<Page = P>>(
        &mut self,
        model: &M,
        head: *const P,
        pfn: Pfn,
        order: usize,
        [from, to]: [Migratetype; 2],
    ) {
        // SAFETY: the caller's contract.
        unsafe { self.del(head, order, from) };
        change_pageblock_range(model, pfn, order, to);
        // SAFETY: unlinked just above; its pageblocks are now `to`.
        unsafe { self.add(head, order, to, false) };
    }

    /// `move_freepages_block`: the free blocks of `pfn`'s pageblock move
    /// from the `from` lists to the `to` lists and the pageblock becomes
    /// `to`; `None`, with nothing changed, when another zone shares the
    /// pageblock (`prep_move_freepages_block`'s span test). Returns the
    /// free pages moved.
    pub(crate) fn move_freepages_block<M: BuddyModel<Page = P>>(
        &mut self,
        model: &M,
        pfn: Pfn,
        from: Migratetype,
        to: Migratetype,
    ) -> Option<u64> {
        let (heads, free_pages) = self.pageblock_free_blocks(model, pfn)?;
        self.move_free_blocks(model, pfn, heads, from, to);
        Some(free_pages)
    }

    /// The free block heads of this zone in `pfn`'s pageblock, with their
    /// orders, and their free pages; `None` when a managed page of another
    /// zone lies in it. One memmap read per block or per pfn between.
    fn pageblock_free_blocks<M: BuddyModel<Page = P>>(
        &self,
        model: &M,
        pfn: Pfn,
    ) -> Option<(Vec<(*const P, usize)>, u64)> {
        let size = model.geometry().pageblock_nr_pages();
        let start = pfn.get() & !(size - 1);
        let mut heads = Vec::new();
        let mut free_pages = 0;
        let mut p = start;
        while p < start + size {
            match model.pfn_to_page(Pfn::new(p)) {
                // A pageblock that another zone shares is never moved (the
                // kernel's `zone_spans_pfn` test): that zone's free blocks
                // would be left on lists of the old migratetype.
                Some(page)
                    if !page.test(PageFlag::Reserved) && page.zone_id() != self.zone_id() =>
                {
                    return None;
                }
                Some(page) if page.test(PageFlag::Buddy) && page.zone_id() == self.zone_id() => {
                    let order = page.private() as usize;
                    // SAFETY: a valid pfn of the borrowed model.
                    heads.push((unsafe { model.pfn_to_page_ptr(Pfn::new(p)) }, order));
                    free_pages += 1u64 << order;
                    p += 1 << order;
                }
                _ => p += 1,
            }
        }
        Some((heads, free_pages))
    }

    /// Moves `heads` (free blocks of `pfn`'s pageblock, found by
    /// [`FreeArea::pageblock_free_blocks`] under this lock hold) from the
    /// `from` lists to the `to` lists; the pageblock becomes `to`.
    fn move_free_blocks<M: BuddyModel<Page = P>>(
        &mut self,
        model: &M,
        pfn: Pfn,
        heads: Vec<(*const P, usize)>,
        from: Migratetype,
        to: Migratetype,
    ) {
        for (page, order) in heads {
            // SAFETY: a free block head of this zone inside a pageblock of
            // migratetype `from`, so on lists[order][from] (invariant).
            unsafe {
                self.del(page, order, from);
                self.add(page, order, to, false);
            }
        }
        let size = model.geometry().pageblock_nr_pages();
        model.set_pfnblock_migratetype(Pfn::new(pfn.get() & !(size - 1)), to);
    }
}
