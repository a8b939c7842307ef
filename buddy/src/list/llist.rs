//! `zone->trylock_free_pages`: the lock-free list of blocks a free that
//! may only try the zone lock leaves for the next free that takes it.
//!
//! # Safety
//! As the parent module's: a listed page's memmap stays mapped while the
//! allocator is borrowed, and only this list links it while it is listed.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use sparsemem::{BuddyPage, Order, PageFlag};

use super::OwnedBlock;
use crate::types::BuddyModel;

/// `zone->trylock_free_pages` (Linux 6.15, commit 8c57b687e833
/// "mm, bpf: Introduce free_pages_nolock()"): blocks a free that may only
/// try the zone lock (`FPI_TRYLOCK`) could not put on the free lists,
/// waiting for the next free that takes the lock outright
/// (`free_one_page`, which drains them first).
///
/// An `llist` threaded through the pages, as the kernel threads it through
/// `page->pcp_llist` with the order in `page->order`: here the head's
/// `lru` next link and `private` (where the layout keeps them in a
/// `struct buddy`, the head holds one while listed). Adding is a
/// compare-exchange loop that never waits on a holder
/// (`llist_add`); taking is one swap of the whole list (`llist_del_all`),
/// so no page is ever taken alone and no ABA can arise. A listed head
/// is marked [`PageFlag::Pcp`], as a page on a per-CPU list is: freed,
/// held off the buddy lists, so a second free of it is a double free.
///
/// Invariants: every listed page heads an [`OwnedBlock`] given to
/// [`TrylockFreePages::add`], of the order its `private` holds, with its
/// `lru_prev` null; `nr_pages` counts the listed pages (a count the
/// kernel does not keep: pfnlab's conservation check reads it).
pub(crate) struct TrylockFreePages<P> {
    head: AtomicPtr<P>,
    nr_pages: AtomicU64,
}

impl<P> Default for TrylockFreePages<P> {
    fn default() -> Self {
        TrylockFreePages {
            head: AtomicPtr::new(std::ptr::null_mut()),
            nr_pages: AtomicU64::new(0),
        }
    }
}

impl<P: BuddyPage> TrylockFreePages<P> {
    /// `add_page_to_zone_llist`: lists `block`, remembering its order.
    pub(crate) fn add(&self, block: OwnedBlock<P>) {
        let page = block.page();
        let order = block.order();
        // SAFETY: the token owns the block, which is on no list: marking,
        // attaching its links and writing its order are the owner's writes
        // (`page->order = order`), done before the swap below publishes it.
        unsafe {
            page.set_nonatomic(PageFlag::Pcp);
            page.list_attach();
            page.set_private(u64::from(order.get()));
            page.set_lru_prev(std::ptr::null_mut());
        }
        // Relaxed: a statistic, read once the threads are quiet.
        self.nr_pages.fetch_add(order.nr_pages(), Ordering::Relaxed);
        let p = block.as_ptr().cast_mut();
        let mut first = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: as above: the page is not yet reachable from the list.
            unsafe { page.set_lru_next(first) };
            // Release: publishes the page's links, mark and order to the
            // Acquire swap of `take_all`. Relaxed on failure: the next try
            // stores the new head in the link again.
            match self
                .head
                .compare_exchange_weak(first, p, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(now) => first = now,
            }
        }
    }

    /// `llist_empty`: one load, the check every locked free makes.
    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        // Relaxed: a hint; a block added just after is drained by a later
        // free, as in the kernel (`READ_ONCE`).
        self.head.load(Ordering::Relaxed).is_null()
    }

    /// Pages listed (pfnlab's count; see the type's invariants).
    pub(crate) fn nr_pages(&self) -> u64 {
        self.nr_pages.load(Ordering::Relaxed)
    }

    /// `llist_del_all`: takes every listed block, most recently added
    /// first, each back as the [`OwnedBlock`] it was (the pages of
    /// `model`, which the blocks came from).
    pub(crate) fn take_all<M: BuddyModel<Page = P>>(
        &self,
        model: &M,
    ) -> impl Iterator<Item = OwnedBlock<P>> {
        // Acquire: pairs with the Release of each `add` that listed a
        // page, so its links, mark and order are seen.
        let mut at = self.head.swap(std::ptr::null_mut(), Ordering::Acquire);
        std::iter::from_fn(move || {
            if at.is_null() {
                return None;
            }
            let here = at.cast_const();
            // SAFETY: (1) `here` was listed by `add`, so it heads an owned
            // block whose descriptor is live while the allocator (and so
            // `model`) is borrowed; (2) the swap made this caller the only
            // holder of every page it took: unlinking, unmarking and
            // detaching are its writes; (3) the token's invariants held
            // when `add` took it, and nothing but this list touched the
            // block since, so they hold again once it is unlinked.
            let block = unsafe {
                let page = &*here;
                let order = Order::saturating(page.private() as u8);
                at = page.lru_next();
                page.set_lru_next(std::ptr::null_mut());
                page.list_detach();
                page.clear_nonatomic(PageFlag::Pcp);
                // The pointer `add` listed, with its section's provenance.
                OwnedBlock::new(here, model.page_to_pfn(page), order)
            };
            self.nr_pages
                .fetch_sub(block.order().nr_pages(), Ordering::Relaxed);
            Some(block)
        })
    }
}
