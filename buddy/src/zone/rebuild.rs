//! A zone's free lists rebuilt to a planned state (the start state a
//! snapshot asks for, [`crate::start_state`]): every free block is taken
//! off, the pageblocks get their planned migratetypes, the planned free
//! blocks go back through `__free_one_page`, and the rest of each taken
//! block is handed out as allocated blocks. The planned `HighAtomic`
//! pageblocks become the zone's `nr_reserved_highatomic`.
//!
//! # Safety
//! As `take_range`: the pages written are those of blocks just taken off
//! the lists (owned by this `&mut` holder), each piece reached as the
//! owned head plus its offset inside the block.

use sparsemem::{BuddyPage, Migratetype, Order, Pfn};

use super::{Zone, for_each_aligned_block};
use crate::list::{OwnedBlock, page_offset};
use crate::types::BuddyModel;
use crate::variant::Variant;

impl<V: Variant, P: BuddyPage> Zone<V, P> {
    /// Rebuilds the free lists: `migratetypes` on their pageblocks, then
    /// exactly the blocks of `free` free (sorted by pfn, each inside one of
    /// today's free blocks, no two buddies), and the rest of today's free
    /// memory allocated, returned as `(head, order)` blocks (aligned, at
    /// most `MAX_PAGE_ORDER`), ready for a free; `migratetypes` covers
    /// every pageblock of the zone, and its `HighAtomic` ones are the
    /// reserve from now on. `NR_FREE_PAGES` is the
    /// caller's to adjust, as the allocator keeps it only in some eras.
    pub(crate) fn rebuild_free_lists<M: BuddyModel<Page = P>>(
        &mut self,
        model: &M,
        migratetypes: &[(Pfn, Migratetype)],
        free: &[(Pfn, Order)],
    ) -> Vec<(Pfn, Order)> {
        let area = self.free_area.get_mut();
        let max_order = area.max_order();
        let mut today: Vec<(Pfn, Order)> = Order::up_to(max_order)
            .flat_map(|o| area.block_pfns(model, o).into_iter().map(move |p| (p, o)))
            .collect();
        today.sort_unstable();
        let taken: Vec<OwnedBlock<P>> = today
            .iter()
            .filter_map(|&(head, order)| area.take_free_block(model, head, order))
            .collect();
        debug_assert_eq!(taken.len(), today.len());
        for &(pfn, mt) in migratetypes {
            model.set_pfnblock_migratetype(pfn, mt);
        }
        // The plan's `HighAtomic` pageblocks are the zone's reserve: counted
        // as `reserve_highatomic_pageblock` would have counted them, so the
        // watermark hides them and pressure can give them back.
        let reserved = migratetypes
            .iter()
            .filter(|&&(_, mt)| mt == Migratetype::HighAtomic)
            .count() as u64;
        self.nr_reserved_highatomic.store(
            reserved * model.geometry().pageblock_nr_pages(),
            std::sync::atomic::Ordering::Relaxed,
        );
        let mut allocated = Vec::new();
        let mut next = free.iter().peekable();
        for block in taken {
            let head = block.pfn().get();
            let end = head + block.order().nr_pages();
            // A piece of the owned block: valid, in this zone, on no list.
            let piece = |pfn: Pfn, order: Order| {
                // SAFETY: `pfn..pfn + 2^order` lies inside the owned block
                // (the caller's pieces and the gaps between them), so the
                // head plus the offset is that pfn's descriptor, with the
                // block's section provenance; no one else holds it.
                unsafe {
                    OwnedBlock::new(
                        page_offset(block.as_ptr(), (pfn.get() - head) as i64),
                        pfn,
                        order,
                    )
                }
            };
            let mut at = head;
            while let Some(&&(pfn, order)) = next.peek().filter(|(p, _)| p.get() < end) {
                debug_assert!(pfn.get() >= at && pfn.get() + order.nr_pages() <= end);
                for_each_aligned_block(Pfn::new(at), pfn, max_order, |p, o| {
                    allocated.push((piece(p, o).prep(false), o));
                });
                area.free_one(model, piece(pfn, order));
                at = pfn.get() + order.nr_pages();
                next.next();
            }
            for_each_aligned_block(Pfn::new(at), Pfn::new(end), max_order, |p, o| {
                allocated.push((piece(p, o).prep(false), o));
            });
        }
        debug_assert!(next.next().is_none(), "a free block outside today's");
        allocated
    }
}
