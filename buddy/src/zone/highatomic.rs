//! The `MIGRATE_HIGHATOMIC` reserve (Mel Gorman, Linux 4.4: "reserve
//! pageblocks for high-order atomic allocations on demand").
//!
//! A high-order atomic request that succeeds in the slow path turns the
//! pageblock its block came from into a `HighAtomic` one
//! (`reserve_highatomic_pageblock`): the pageblock's free blocks move to
//! the `HighAtomic` lists, and the allocated block, once freed, goes back
//! there too, since a free finds its list by its pageblock. Only requests
//! with the reserve's rights take from those lists
//! (`ALLOC_HIGHATOMIC`, and from 6.3 any non-blocking request
//! whose own lists failed); every other request's watermark check does not
//! count them. The reserve is limited per zone to about 1 % of its
//! managed pages (see [`HighatomicRules`] for each era's limit), and given
//! back under pressure (`unreserve_highatomic_pageblock`): a request that
//! may reclaim and failed its slow-path walk — where the kernel's direct
//! reclaim and `should_reclaim_retry` would run, and find nothing to
//! reclaim in pfnlab — converts one reserved pageblock per retry to its
//! own migratetype (the kernel's choice: the pageblock's type before it
//! was reserved is not kept), keeping one pageblock per zone until no
//! other retry is left (`force`).
//!
//! What it costs is the kernel's: a lock hold and one memmap read per free
//! block or per pfn of the pageblock (`move_freepages_block`), on the slow
//! path only. Simplifications, said: in 5.13 a pageblock another zone
//! shares is not reserved (5.13 set its type and moved nothing; pfnlab
//! keeps 6.x's rule that a pageblock's free blocks are on its type's
//! lists), and `drain_all_pages` after a failed reclaim is not modelled.

use std::sync::atomic::Ordering;

use sparsemem::{BuddyPage, Migratetype, Order, Pfn};

use super::Zone;
use super::free_area::{change_pageblock_range, mergeable};
use crate::types::{BuddyModel, HighatomicRules};
use crate::variant::Variant;

impl<V: Variant, P: BuddyPage> Zone<V, P> {
    /// The most pages this zone may reserve, or `None` when it may
    /// reserve none (6.18's rules, 6.8's limit: a zone under 100
    /// pageblocks).
    fn max_highatomic(&self, pageblock_nr_pages: u64) -> Option<u64> {
        let one_percent = self.managed_pages() / 100;
        match self.highatomic {
            HighatomicRules::None => None,
            HighatomicRules::Harder => Some(one_percent + pageblock_nr_pages),
            HighatomicRules::HighAtomic if one_percent < pageblock_nr_pages => None,
            HighatomicRules::HighAtomic => Some(one_percent.next_multiple_of(pageblock_nr_pages)),
        }
    }

    /// `reserve_highatomic_pageblock`: after a successful high-order atomic
    /// allocation of `order` at `pfn`, its pageblock (6.18's rules, from
    /// 6.10: every
    /// pageblock of a block of a pageblock or more) becomes `HighAtomic`,
    /// unless the zone has reserved its limit or the pageblock's type may
    /// not merge with others. Returns whether it reserved.
    pub(crate) fn reserve_highatomic_pageblock<M: BuddyModel<Page = P>>(
        &self,
        model: &M,
        pfn: Pfn,
        order: Order,
    ) -> bool {
        let geometry = model.geometry();
        let pageblock_nr_pages = geometry.pageblock_nr_pages();
        let Some(max) = self.max_highatomic(pageblock_nr_pages) else {
            return false;
        };
        // The unlocked check, then the recheck under the lock.
        if self.nr_reserved_highatomic() >= max {
            return false;
        }
        let mut area = self.free_area.lock();
        if self.nr_reserved_highatomic() >= max {
            return false;
        }
        let mt = model.get_pfnblock_migratetype(pfn);
        if !mergeable(mt) {
            return false;
        }
        let reserved = if order < geometry.pageblock_order() {
            area.move_freepages_block(model, pfn, mt, Migratetype::HighAtomic)
                .map(|_| pageblock_nr_pages)
        } else if self.highatomic == HighatomicRules::HighAtomic {
            change_pageblock_range(model, pfn, order.index(), Migratetype::HighAtomic);
            Some(order.nr_pages())
        } else {
            // 5.13 retyped only the block's first pageblock; the block is
            // allocated, so no free block moves.
            model.set_pfnblock_migratetype(pfn, Migratetype::HighAtomic);
            Some(pageblock_nr_pages)
        };
        drop(area);
        match reserved {
            Some(pages) => {
                self.nr_reserved_highatomic
                    .fetch_add(pages, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// `unreserve_highatomic_pageblock` on this zone: the first reserved
    /// pageblock holding a free block (lowest order first) goes back to
    /// migratetype `to` with its free blocks; unless `force`, a zone keeps
    /// its last pageblock. Returns whether one was given back.
    pub(crate) fn unreserve_highatomic_pageblock<M: BuddyModel<Page = P>>(
        &self,
        model: &M,
        to: Migratetype,
        force: bool,
    ) -> bool {
        let geometry = model.geometry();
        let pageblock_nr_pages = geometry.pageblock_nr_pages();
        let reserved = self.nr_reserved_highatomic();
        if reserved == 0 || (!force && reserved <= pageblock_nr_pages) {
            return false;
        }
        let mut area = self.free_area.lock();
        let found = Order::up_to(area.max_order()).find_map(|order| {
            let head = area.lists[order.index()][Migratetype::HighAtomic.index()]
                .iter()
                .next()?;
            // SAFETY: listed pages are live descriptors of the model.
            Some((head, model.page_to_pfn(unsafe { &*head }), order))
        });
        let Some((head, pfn, order)) = found else {
            return false;
        };
        let size = match self.highatomic {
            HighatomicRules::HighAtomic => pageblock_nr_pages.max(order.nr_pages()),
            _ => pageblock_nr_pages,
        };
        self.nr_reserved_highatomic
            .fetch_sub(size.min(reserved), Ordering::Relaxed);
        if order < geometry.pageblock_order() {
            // Reserved pageblocks lie wholly in the zone, so this moves.
            let moved = area.move_freepages_block(model, pfn, Migratetype::HighAtomic, to);
            debug_assert!(moved.is_some_and(|pages| pages > 0));
        } else {
            let types = [Migratetype::HighAtomic, to];
            // SAFETY: `head` was first on lists[order][HighAtomic] just
            // above, under this lock hold, and is `pfn`'s descriptor.
            unsafe { area.retype_free_block(model, head, pfn, order.index(), types) };
        }
        true
    }
}
