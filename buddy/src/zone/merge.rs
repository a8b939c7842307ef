//! `__free_one_page`: a freed block merged with its free buddies.
//!
//! While below `MAX_PAGE_ORDER`, the buddy at `pfn ^ (1 << order)` is
//! reached as `page + (buddy_pfn - pfn)` (after `pfn_valid` with the hole
//! check), tested with `page_is_buddy` (`PageBuddy`, the order in
//! `private`, the zone), taken off its list (`__del_page_from_free_list`),
//! and the two become one block an order up; from a pageblock up the
//! buddy's migratetype is tested too, out of line, where the kernel's
//! branch is `unlikely`. The result goes on `free_area[order]`, at the
//! tail when `FPI_TO_TAIL` or `buddy_merge_likely` says so.
//!
//! # Safety
//! As in [`super::free_area`]: a buddy is reached inside the freed block's
//! `MAX_PAGE_ORDER` block, so inside one section whose memmap the head
//! pointer has provenance over, and its pfn is valid by the hole check or
//! by the zone's invariant; pages are written only while the free area
//! owns them, under the zone lock.

use sparsemem::{BuddyPage, Migratetype, Pfn};

use super::free_area::{FreeArea, change_pageblock_range, mergeable};
use crate::list::{OwnedBlock, page_offset};
use crate::types::BuddyModel;
use crate::variant::Variant;

/// `fpi_t`: how `__free_one_page` frees a block, with the kernel's bits
/// (mm/page_alloc.c: `FPI_NONE` 0, `FPI_TO_TAIL` `BIT(1)`; its other flags
/// skip work pfnlab does not model: page reporting, the trylock of a free
/// from any context).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct FpiFlags(u8);

impl FpiFlags {
    /// `FPI_NONE`: the merged block goes to the head of its list (unless
    /// `buddy_merge_likely` sends it to the tail).
    pub(crate) const NONE: FpiFlags = FpiFlags(0);
    /// `FPI_TO_TAIL`: the merged block goes to the tail of its list, so it
    /// is allocated last (memory being onlined).
    pub(crate) const TO_TAIL: FpiFlags = FpiFlags(1 << 1);

    /// Whether every flag of `other` is set.
    #[inline(always)]
    pub(crate) const fn contains(self, other: FpiFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl<V: Variant, P: BuddyPage> FreeArea<V, P> {
    /// `__free_one_page`: frees `block` and merges it with free buddies,
    /// putting the result at the head of its list.
    #[inline(always)]
    pub(crate) fn free_one<M: BuddyModel<Page = P>>(&mut self, model: &M, block: OwnedBlock<P>) {
        self.free_one_fpi(model, block, FpiFlags::NONE);
    }

    /// `__free_one_page` with the caller's `fpi_flags`.
    ///
    /// The buddy is reached as `page + (buddy_pfn - pfn)` without a
    /// `pfn_to_page`; with the hole check it is first tested with
    /// `pfn_valid`, without it the zone's invariant (every `MAX_PAGE_ORDER`
    /// block holding its memory is wholly valid) makes it readable. Each
    /// step does what the kernel's does: `page_is_buddy` (`PageBuddy`, the
    /// order, the zone), the migratetype test from a pageblock up, the
    /// buddy's `__del_page_from_free_list`; what is counted (the reserve's
    /// pages, the merges, the hole checks) is counted once per free, from
    /// the orders, as the kernel's `account_freepages` is.
    #[inline(always)]
    pub(crate) fn free_one_fpi<M: BuddyModel<Page = P>>(
        &mut self,
        model: &M,
        block: OwnedBlock<P>,
        fpi: FpiFlags,
    ) {
        let mut page = block.as_ptr();
        let mut pfn = block.pfn().get();
        let freed_order = block.order().index();
        let mut order = freed_order;
        // `get_pfnblock_migratetype` of the freed page: the per-free lookup.
        let mt = self.list_mt(model, block.pfn());
        // Merging moves pages between lists of this one type (a buddy of
        // another type stops it, unless both are mergeable, which the
        // reserve is not), so the reserve gains the freed block's pages.
        self.account_highatomic(mt, freed_order, true);
        let max_order = self.max_order_bound();
        // Below a pageblock the buddy shares the freed page's block, so its
        // list: those steps test no migratetype. From a pageblock up
        // (`unlikely(order >= pageblock_order)` in the kernel) the steps
        // continue out of line. Without migratetypes every block is on one
        // list, and no step tests one.
        let untyped_to = if self.migratetypes {
            max_order.min(model.geometry().pageblock_order().index())
        } else {
            max_order
        };
        while order < untyped_to {
            let Some(merged) = self.merge_step(model, page, pfn, order, mt, false) else {
                break;
            };
            (page, pfn) = merged;
            order += 1;
        }
        if order >= untyped_to && order < max_order {
            (page, pfn, order) = self.merge_typed(model, page, pfn, order, mt, max_order);
        }
        let merges = (order - freed_order) as u64;
        self.stats.merges += merges;
        if V::HOLE_CHECK {
            // One `pfn_valid` per step, and one more in the step that
            // stopped short of `MAX_PAGE_ORDER`.
            self.stats.hole_checks += merges + u64::from(order < max_order);
        }
        let to_tail =
            fpi.contains(FpiFlags::TO_TAIL) || self.buddy_merge_likely(model, page, pfn, order);
        // SAFETY: `page` heads the merged free block, owned (the token and
        // the merged buddies, just unlinked) and on no list.
        unsafe { self.add_to_list(page, order, mt, to_tail) };
    }

    /// One step of `__free_one_page`'s loop: if the buddy of the free
    /// block `(page, pfn, order)` of migratetype `mt` is a free block it
    /// may merge with, takes the buddy off its list and returns the merged
    /// block's head and pfn (`combined_pfn`, the lower of the two).
    /// `typed`: the buddy's pageblock may have another migratetype (from a
    /// pageblock up), so it is looked up and tested.
    #[inline(always)]
    fn merge_step<M: BuddyModel<Page = P>>(
        &mut self,
        model: &M,
        page: *const P,
        pfn: u64,
        order: usize,
        mt: Migratetype,
        typed: bool,
    ) -> Option<(*const P, u64)> {
        let buddy_pfn = pfn ^ (1 << order);
        if V::HOLE_CHECK && !model.pfn_valid(Pfn::new(buddy_pfn)) {
            self.stats.hole_hits += 1;
            return None;
        }
        // SAFETY: the buddy is in the same MAX_PAGE_ORDER block, hence the
        // same section, and its pfn is valid (just checked, or by the
        // zone's invariant); `page` has provenance over the section.
        let buddy = unsafe { page_offset(page, buddy_pfn as i64 - pfn as i64) };
        // SAFETY: a valid descriptor (above) of the borrowed model.
        let buddy_ref = unsafe { &*buddy };
        if V::BITMAP {
            if !self.toggle(order, pfn) {
                return None;
            }
            debug_assert!(self.page_is_buddy(buddy_ref, order));
        } else if !self.page_is_buddy(buddy_ref, order) {
            return None;
        }
        let buddy_mt = if typed {
            self.list_mt(model, Pfn::new(buddy_pfn))
        } else {
            mt
        };
        // 6.x keeps a reserved (or isolated) pageblock from merging with
        // another type's (`migratetype_is_mergeable`), so the reserve's
        // pageblocks stay counted.
        if buddy_mt != mt && !(mergeable(mt) && mergeable(buddy_mt)) {
            return None;
        }
        // SAFETY: page_is_buddy (or the pair bit) says the buddy heads a
        // free block of this order, so it is on lists[order][buddy_mt].
        unsafe { self.del_from_list(buddy, order, buddy_mt) };
        if buddy_mt != mt {
            // "Match buddy type": the merged block is one migratetype.
            change_pageblock_range(model, Pfn::new(buddy_pfn), order, mt);
        }
        Some(if buddy_pfn < pfn {
            (buddy, buddy_pfn)
        } else {
            (page, pfn)
        })
    }

    /// The steps of `__free_one_page` from a pageblock up, each testing
    /// the buddy's migratetype: out of line, as the kernel marks them
    /// `unlikely`. Returns the merged block `(page, pfn, order)`.
    #[cold]
    #[inline(never)]
    fn merge_typed<M: BuddyModel<Page = P>>(
        &mut self,
        model: &M,
        mut page: *const P,
        mut pfn: u64,
        mut order: usize,
        mt: Migratetype,
        max_order: usize,
    ) -> (*const P, u64, usize) {
        while order < max_order {
            let Some(merged) = self.merge_step(model, page, pfn, order, mt, true) else {
                break;
            };
            (page, pfn) = merged;
            order += 1;
        }
        (page, pfn, order)
    }

    /// `buddy_merge_likely`: whether the block `(pfn, order)` that stopped
    /// merging would merge one order up as soon as its buddy is freed —
    /// the buddy of the pair it would form is free already. Then it goes to
    /// the tail of its list, so it is allocated last. Another memmap read
    /// per free, at a pfn computed from the freed one; with the hole check
    /// both pfns are tested first (the kernel tested only the buddy's;
    /// pfnlab must not read a hole's descriptor).
    #[inline(always)]
    fn buddy_merge_likely<M: BuddyModel<Page = P>>(
        &mut self,
        model: &M,
        page: *const P,
        pfn: u64,
        order: usize,
    ) -> bool {
        if !self.merge_likely || order + 1 >= self.max_order_bound() {
            return false;
        }
        let buddy_pfn = pfn ^ (1 << order);
        let combined_pfn = buddy_pfn & pfn;
        let higher_buddy_pfn = combined_pfn ^ (1 << (order + 1));
        if V::HOLE_CHECK {
            self.stats.hole_checks += 2;
            if !model.pfn_valid(Pfn::new(buddy_pfn)) || !model.pfn_valid(Pfn::new(higher_buddy_pfn))
            {
                self.stats.hole_hits += 1;
                return false;
            }
        }
        // SAFETY: the higher buddy is in the freed block's MAX_PAGE_ORDER
        // block (order + 1 < max_order), so in its section, and valid (just
        // checked, or by the zone's invariant); `page` has provenance over
        // the section.
        let higher_buddy =
            unsafe { &*page_offset(page.cast_mut(), higher_buddy_pfn as i64 - pfn as i64) };
        let likely = self.page_is_buddy(higher_buddy, order + 1);
        self.stats.merge_likely_tails += u64::from(likely);
        likely
    }
}
