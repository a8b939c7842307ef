//! A zone's free area (`free_area[]`) and the buddy algorithm proper.
//!
//! The three kernel routines, on pages (never a `pfn_to_page` per hop):
//! - `__free_one_page` ([`super::merge`]): while below `MAX_PAGE_ORDER`,
//!   find the buddy at `pfn ^ (1 << order)` (optionally after `pfn_valid`),
//!   stop unless it is a free block of the same order in the same zone,
//!   else unlink it and merge; put the result on `free_area[order]`.
//! - `__rmqueue_smallest`: take the first block of the smallest order that
//!   has one;
//! - `expand`: split it, putting the upper halves back on lower orders.
//!
//! Each loop step does what the kernel's does and no more: what is counted
//! (the splits and merges of [`ZoneStats`], `nr_free_highatomic`) is
//! counted once per call, from the orders, as the kernel's
//! `account_freepages` is.
//!
//! Everything here runs under the zone lock ([`crate::lock::SpinLock`]).
//!
//! # Safety
//! A page is written here only while the free area owns it: it heads a
//! block on its lists, or a block an [`OwnedBlock`] token hands in, or one
//! just taken off the lists. A buddy or the upper half of a split is
//! reached as `page + offset` ([`page_offset`]) inside one `MAX_PAGE_ORDER`
//! block, so inside one section whose memmap the head pointer has
//! provenance over; its pfn is valid by the hole check or, without it, by
//! the zone's invariant that every such block of its memory is wholly
//! valid.

use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sparsemem::{
    BuddyPage, MIGRATE_TYPES, Migratetype, NR_PAGE_ORDERS, Order, Page, PageFlag, Pfn,
};

use crate::era::Path;
use crate::list::{OwnedBlock, PageList, page_offset};
use crate::types::{BuddyModel, ZoneStats};
use crate::variant::Variant;

/// `change_pageblock_range`: every pageblock of the block of `order` at
/// `head` (one when the block is smaller) gets migratetype `mt`.
pub(crate) fn change_pageblock_range<M: BuddyModel>(
    model: &M,
    head: Pfn,
    order: usize,
    mt: Migratetype,
) {
    let pageblock = model.geometry().pageblock_nr_pages();
    let first = head.get() & !(pageblock - 1);
    let end = (head.get() + (1u64 << order)).max(first + pageblock);
    for pfn in (first..end).step_by(pageblock as usize) {
        model.set_pfnblock_migratetype(Pfn::new(pfn), mt);
    }
}

/// `migratetype_is_mergeable`: a type whose free blocks may merge with
/// another type's across pageblocks (those with per-CPU lists).
#[inline(always)]
pub(crate) fn mergeable(mt: Migratetype) -> bool {
    mt.index() < sparsemem::MIGRATE_PCPTYPES
}

/// `free_area[]` of one zone, behind the zone lock: a list per order and
/// migratetype (`free_list[MIGRATE_TYPES]`).
///
/// Invariants:
/// - a page is on `lists[o][mt]` iff it heads a free block of order `o`;
///   then it is marked buddy with `private == o` and the block lies in the
///   zone;
/// - with migratetypes (2.6.24 on), `mt` is the migratetype of every
///   pageblock the block covers (the model's pageblock flags), as Linux
///   6.x keeps it; without, every block is on the `Movable` list;
/// - the lists of order `o` hold `nr_free[o]` blocks;
/// - `free_highatomic` counts the pages on the `HighAtomic` lists;
/// - with the bitmap variant, bit `(pfn - bitmap_base) >> (o + 1)` of
///   `bitmap[o]` is set iff exactly one block of the pair at order `o` is
///   free;
/// - without the hole check, every `MAX_PAGE_ORDER` block holding a page of
///   the zone is wholly valid ([`check_blocks`](super::check_blocks) before memory is given).
pub struct FreeArea<V, P = Page> {
    /// Statistics, changed only under the zone lock.
    pub stats: ZoneStats,
    pub(crate) lists: [[PageList<P>; MIGRATE_TYPES]; NR_PAGE_ORDERS],
    /// Whether the era groups pages by mobility (migratetype lists and
    /// pageblock lookups on free).
    pub(crate) migratetypes: bool,
    /// Whether a freed block whose next-order buddy is free goes to the
    /// tail of its list (`buddy_merge_likely`, 2.6.35 on).
    pub(super) merge_likely: bool,
    bitmap: Vec<Vec<u64>>,
    bitmap_base: u64,
    zone_id: u8,
    /// `MAX_PAGE_ORDER` of the geometry: lists above it stay empty.
    /// Written once, by `new` (so below `NR_PAGE_ORDERS`).
    max_order: usize,
    /// `nr_free_highatomic`: pages on the `HighAtomic` lists, written
    /// under the zone lock and read without it by the zone's watermark
    /// check (`READ_ONCE`), so `Relaxed`; shared with the [`Zone`](super::Zone).
    pub(crate) free_highatomic: Arc<AtomicU64>,
    _variant: PhantomData<V>,
}

impl<V: Variant, P: BuddyPage> FreeArea<V, P> {
    /// Empty free lists for zone `zone_id` spanning `[start, end)`, with
    /// blocks up to `max_order`, shaped as the era's `path` has them.
    pub(crate) fn new(zone_id: u8, [start, end]: [Pfn; 2], max_order: Order, path: Path) -> Self {
        let mut area = FreeArea {
            stats: ZoneStats::default(),
            lists: Default::default(),
            migratetypes: path.migratetypes,
            merge_likely: path.merge_likely,
            bitmap: Vec::new(),
            bitmap_base: start.get() & !(max_order.nr_pages() - 1),
            zone_id,
            max_order: max_order.index(),
            free_highatomic: Arc::default(),
            _variant: PhantomData,
        };
        area.resize(start, end);
        area
    }

    /// The largest order of this zone's blocks (`MAX_PAGE_ORDER`).
    pub fn max_order(&self) -> Order {
        Order::new(self.max_order as u8)
    }

    /// Makes the bitmap cover the zone span `[start, end)` (which may have
    /// grown either way by hot add), keeping every pair bit.
    pub(crate) fn resize(&mut self, start: Pfn, end: Pfn) {
        if !V::BITMAP {
            return;
        }
        let new_base = self
            .bitmap_base
            .min(start.get() & !(self.max_order().nr_pages() - 1));
        let span = end.get().saturating_sub(new_base);
        let old = std::mem::take(&mut self.bitmap);
        self.bitmap = (0..self.max_order)
            .map(|o| vec![0u64; ((span >> (o + 1)) + 1).div_ceil(64) as usize])
            .collect();
        let shift = self.bitmap_base - new_base;
        for (o, map) in old.iter().enumerate() {
            let offset = shift >> (o + 1);
            for bit in
                (0..map.len() as u64 * 64).filter(|b| map[(b / 64) as usize] & (1 << (b % 64)) != 0)
            {
                let to = bit + offset;
                self.bitmap[o][(to / 64) as usize] |= 1 << (to % 64);
            }
        }
        self.bitmap_base = new_base;
    }

    /// `nr_free` per order.
    pub fn nr_free(&self) -> [u64; NR_PAGE_ORDERS] {
        std::array::from_fn(|o| self.lists[o].iter().map(PageList::len).sum())
    }

    /// Free pages on the lists.
    pub fn nr_free_pages(&self) -> u64 {
        self.nr_free().iter().enumerate().map(|(o, n)| n << o).sum()
    }

    /// Pfns of the blocks on the free lists of one order (for checks).
    pub fn block_pfns<M: BuddyModel<Page = P>>(&self, model: &M, order: Order) -> Vec<Pfn> {
        Migratetype::ALL
            .into_iter()
            .flat_map(|mt| self.block_pfns_of(model, order, mt))
            .collect()
    }

    /// Pfns of the blocks on the free list of one order and migratetype.
    pub fn block_pfns_of<M: BuddyModel<Page = P>>(
        &self,
        model: &M,
        order: Order,
        mt: Migratetype,
    ) -> Vec<Pfn> {
        self.lists[order.index()][mt.index()]
            .iter()
            // SAFETY: listed pages are live descriptors of `model`'s memmap.
            .map(|p| model.page_to_pfn(unsafe { &*p }))
            .collect()
    }

    /// The zone's id, as its pages carry it.
    pub(crate) fn zone_id(&self) -> u8 {
        self.zone_id
    }

    /// The list a block headed at `pfn` belongs on: its pageblock's
    /// migratetype (`get_pfnblock_migratetype`, a memory-model lookup), or
    /// the one list of an era without migratetypes.
    #[inline(always)]
    pub(crate) fn list_mt<M: BuddyModel<Page = P>>(&self, model: &M, pfn: Pfn) -> Migratetype {
        if self.migratetypes {
            model.get_pfnblock_migratetype(pfn)
        } else {
            Migratetype::Movable
        }
    }

    /// `account_freepages` for the reserve: `nr_free_highatomic` follows
    /// the pages that join or leave the `HighAtomic` lists, once per
    /// block freed or taken, as the kernel accounts (a merge or a split
    /// moves pages between lists of one type and changes nothing).
    #[inline(always)]
    pub(super) fn account_highatomic(&self, mt: Migratetype, order: usize, joins: bool) {
        if mt == Migratetype::HighAtomic {
            // Relaxed load and store, no read-modify-write: only the zone
            // lock's holder writes the counter (the kernel's plain
            // `zone->nr_free_highatomic += nr_pages`), and lock-free readers
            // take any recent value (`READ_ONCE`).
            let free = self.free_highatomic.load(Ordering::Relaxed);
            let free = if joins {
                free + (1 << order)
            } else {
                free - (1 << order)
            };
            self.free_highatomic.store(free, Ordering::Relaxed);
        }
    }

    /// `__test_and_change_bit` on the pair bit of `pfn` at `order`: returns
    /// the old value.
    #[inline(always)]
    pub(super) fn toggle(&mut self, order: usize, pfn: u64) -> bool {
        let bit = (pfn - self.bitmap_base) >> (order + 1);
        let word = &mut self.bitmap[order][(bit / 64) as usize];
        let mask = 1u64 << (bit % 64);
        let old = *word & mask != 0;
        *word ^= mask;
        old
    }

    /// `add_to_free_list`: [`FreeArea::add_to_list`] with the reserve's
    /// accounting, for a block that joins the free pages.
    ///
    /// # Safety
    /// As for [`FreeArea::add_to_list`].
    #[inline(always)]
    pub(crate) unsafe fn add(
        &mut self,
        page: *const P,
        order: usize,
        mt: Migratetype,
        to_tail: bool,
    ) {
        self.account_highatomic(mt, order, true);
        // SAFETY: the caller's contract.
        unsafe { self.add_to_list(page, order, mt, to_tail) };
    }

    /// `__add_to_free_list` with `set_buddy_order`: puts a block head on
    /// `free_area[order].free_list[mt]`, at the head of the list or
    /// (`to_tail`) at its tail, without the reserve's accounting.
    ///
    /// # Safety
    /// `page` is a live descriptor heading a free block of this zone, on no
    /// list.
    #[inline(always)]
    pub(super) unsafe fn add_to_list(
        &mut self,
        page: *const P,
        order: usize,
        mt: Migratetype,
        to_tail: bool,
    ) {
        // SAFETY: the caller's contract.
        unsafe { Self::link_free(&mut self.lists[order][mt.index()], page, order, to_tail) };
    }

    /// `set_buddy_order` and the list add of [`FreeArea::add_to_list`], on
    /// the list `list` (the caller's `lists[order][mt]`).
    ///
    /// # Safety
    /// As for [`FreeArea::add_to_list`], and `list` is this zone's list of
    /// `order`.
    #[inline(always)]
    unsafe fn link_free(list: &mut PageList<P>, page: *const P, order: usize, to_tail: bool) {
        // SAFETY: the caller's contract.
        let pr = unsafe { &*page };
        // SAFETY: the caller hands this zone a block it owns, under the lock.
        unsafe {
            pr.set_private(order as u64);
            V::set(pr, PageFlag::Buddy);
        }
        // SAFETY: as above; the list's contract is the same.
        unsafe {
            if to_tail {
                list.push_back(page);
            } else {
                list.push_front(page);
            }
        }
    }

    /// `del_page_from_free_list`: [`FreeArea::del_from_list`] with the
    /// reserve's accounting, for a block that leaves the free pages.
    ///
    /// # Safety
    /// As for [`FreeArea::del_from_list`].
    #[inline(always)]
    pub(crate) unsafe fn del(&mut self, page: *const P, order: usize, mt: Migratetype) {
        // SAFETY: the caller's contract.
        unsafe { self.del_from_list(page, order, mt) };
        self.account_highatomic(mt, order, false);
    }

    /// `__del_page_from_free_list`: takes a block head off
    /// `free_area[order].free_list[mt]`, without the reserve's accounting.
    ///
    /// # Safety
    /// `page` is on `lists[order][mt]`.
    #[inline(always)]
    pub(super) unsafe fn del_from_list(&mut self, page: *const P, order: usize, mt: Migratetype) {
        // SAFETY: the caller's contract.
        unsafe { self.lists[order][mt.index()].unlink(page) };
        // SAFETY: listed pages are live, and the unlinked page is this
        // zone's under the lock.
        unsafe { V::clear(&*page, PageFlag::Buddy) };
    }

    /// `page_is_buddy`: a free block head of this order in this zone.
    #[inline(always)]
    pub(super) fn page_is_buddy(&self, buddy: &P, order: usize) -> bool {
        debug_assert!(!buddy.is_poisoned(), "page_is_buddy read a poisoned page");
        buddy.test(PageFlag::Buddy)
            && buddy.private() == order as u64
            && buddy.zone_id() == self.zone_id
    }

    /// Whether `head` is the head of a free block of `order` on these lists.
    pub(crate) fn is_free_block<M: BuddyModel<Page = P>>(
        &self,
        model: &M,
        head: Pfn,
        order: Order,
    ) -> bool {
        model
            .pfn_to_page(head)
            .is_some_and(|page| self.page_is_buddy(page, order.index()))
    }

    /// Takes the free block `(head, order)` off its list (offline), if it is
    /// one.
    pub(crate) fn take_free_block<M: BuddyModel<Page = P>>(
        &mut self,
        model: &M,
        head: Pfn,
        order: Order,
    ) -> Option<OwnedBlock<P>> {
        if !self.is_free_block(model, head, order) {
            return None;
        }
        // SAFETY: the pfn is valid (is_free_block found its page).
        let page = unsafe { model.pfn_to_page_ptr(head) };
        if V::BITMAP && order.index() < self.max_order {
            self.toggle(order.index(), head.get());
        }
        let mt = self.list_mt(model, head);
        // SAFETY: page_is_buddy says it heads a free block of this order of
        // this zone, so it is on lists[order], on its pageblock's
        // migratetype list (type invariant).
        unsafe { self.del(page, order.index(), mt) };
        // SAFETY: just unlinked: a block of this zone on no list, owned by
        // the caller from now on.
        Some(unsafe { OwnedBlock::new(page, head, order) })
    }

    /// `__rmqueue_smallest` + `expand`: a block of `order`, taken off the
    /// lists, with the head pointer it was freed with.
    #[inline(always)]
    pub(crate) fn rmqueue_smallest<M: BuddyModel<Page = P>>(
        &mut self,
        model: &M,
        order: Order,
        mt: Migratetype,
    ) -> Option<OwnedBlock<P>> {
        let low = order.index();
        let max_order = self.max_order_bound();
        // The kernel's loop: one list head per order, no more.
        let mut current = low;
        let page = loop {
            if current > max_order {
                return None;
            }
            if let Some(page) = self.lists[current][mt.index()].pop_front() {
                break page;
            }
            current += 1;
        };
        // The caller gets `order`'s pages; the split halves stay free.
        self.account_highatomic(mt, low, false);
        // SAFETY: listed pages are live descriptors of `model`'s memmap.
        let pr = unsafe { &*page };
        // SAFETY: just unlinked under the zone lock: this zone owns it.
        unsafe { V::clear(pr, PageFlag::Buddy) };
        let pfn = model.page_to_pfn(pr);
        if V::BITMAP && current < self.max_order {
            self.toggle(current, pfn.get());
        }
        // SAFETY: the block was free and is now off every list.
        unsafe { self.expand(page, pfn.get(), low, current, mt) };
        self.stats.splits += (current - low) as u64;
        // SAFETY: its upper halves went back on the lists; the head block
        // of order `low` is on no list and goes to the caller alone.
        Some(unsafe { OwnedBlock::new(page, pfn, order) })
    }

    /// `expand`: splits a block of order `high` down to `low`, putting
    /// each upper half on its list (the reserve's pages and the splits are
    /// counted by the caller, once).
    ///
    /// # Safety
    /// `page` heads a block of order `high` of this zone that is on no list,
    /// with provenance over its section.
    #[inline(always)]
    unsafe fn expand(
        &mut self,
        page: *const P,
        pfn: u64,
        low: usize,
        high: usize,
        mt: Migratetype,
    ) {
        // One bounds check per call, for the lists the halves go on.
        let mut order = high;
        let mut size = 1u64 << high;
        for list in self.lists[low..high].iter_mut().rev() {
            order -= 1;
            size >>= 1;
            // SAFETY: the upper half lies in the same block, so in the same
            // section, and is a valid descriptor.
            let half = unsafe { page_offset(page, size as i64) };
            // SAFETY: the upper half heads a free block of `order`, owned
            // by this zone and on no list.
            unsafe { Self::link_free(&mut list[mt.index()], half, order, false) };
        }
        if V::BITMAP {
            for order in low..high {
                self.toggle(order, pfn + (1 << order));
            }
        }
    }

    /// `MAX_PAGE_ORDER`, bounded by the lists' length where the compiler
    /// can see it, so indexing them by an order up to it needs no check
    /// per step (one compare per call instead).
    #[inline(always)]
    pub(super) fn max_order_bound(&self) -> usize {
        self.max_order.min(NR_PAGE_ORDERS - 1)
    }
}
