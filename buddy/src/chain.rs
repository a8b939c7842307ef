//! A chain of allocated pages (`struct list_head` of pages), the list that
//! `alloc_pages_bulk_list` fills and a caller frees by walking.
//!
//! It sits above the allocator because it frees through it: dropping a
//! chain gives back what is left on it. The links and the held reference
//! counts are [`ChainList`]'s, in `list`, the only writer of a page's links.

use sparsemem::{Order, Pfn};

use crate::alloc::Allocator;
use crate::list::{ChainList, OwnedBlock};
use crate::types::BuddyModel;
use crate::variant::Variant;

/// Allocated order-0 pages threaded through their `lru` links: the
/// `struct list_head` that `alloc_pages_bulk_list` fills
/// ([`PerCpu::alloc_bulk_list`](crate::PerCpu::alloc_bulk_list)) and a
/// caller frees by walking it
/// ([`PerCpu::free_bulk_list`](crate::PerCpu::free_bulk_list)).
///
/// Adding a page writes its own descriptor's links (and the previous
/// tail's); walking is one dependent load per page, `page->lru.next`, and
/// a pfn is `page_to_pfn` of the descriptor reached, as in the kernel.
///
/// Where pfnlab differs: while a page is on the chain its reference count
/// is held at zero (the chain owns it), so a stray
/// [`free_pages`](crate::Allocator::free_pages) of its pfn is refused as
/// [`NotAllocated`](crate::FreeError::NotAllocated) instead of freeing a
/// page whose links the chain still follows. The kernel trusts its caller;
/// the cost is one plain store per page on a line the list writes anyway.
/// [`PageChain::pop_front`] gives a page back as an ordinary allocated page,
/// and dropping a chain frees what is left on it, so no page is lost.
pub struct PageChain<'a, M: BuddyModel, V: Variant> {
    alloc: &'a Allocator<M, V>,
    list: ChainList<M::Page>,
}

impl<'a, M: BuddyModel, V: Variant> PageChain<'a, M, V> {
    /// An empty chain (`LIST_HEAD(list)`) for pages of `alloc`.
    pub fn new(alloc: &'a Allocator<M, V>) -> PageChain<'a, M, V> {
        PageChain {
            alloc,
            list: ChainList::default(),
        }
    }

    /// The allocator whose pages the chain holds.
    pub fn allocator(&self) -> &'a Allocator<M, V> {
        self.alloc
    }

    /// Pages on the chain.
    pub fn len(&self) -> usize {
        self.list.len() as usize
    }

    /// Whether the chain is empty.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The pages' pfns, first to last (`list_for_each_entry` and
    /// `page_to_pfn`).
    pub fn iter(&self) -> impl Iterator<Item = Pfn> + '_ {
        self.list.iter(&self.alloc.model)
    }

    /// Takes the first page off the chain; it is the caller's ordinary
    /// allocated page from then on (free it with `free_pages`).
    pub fn pop_front(&mut self) -> Option<Pfn> {
        self.list.pop_front(&self.alloc.model)
    }

    /// Lists an order-0 block of `self.alloc` just prepared for the
    /// caller; the token proves no one else owns it.
    #[inline(always)]
    pub(crate) fn push(&mut self, block: OwnedBlock<M::Page>) {
        self.list.push(block);
    }
}

impl<M: BuddyModel, V: Variant> Drop for PageChain<'_, M, V> {
    fn drop(&mut self) {
        while let Some(pfn) = self.pop_front() {
            // Cannot fail: the page was allocated and is held by no one else.
            let freed = self.alloc.free_pages(pfn, Order::ZERO);
            debug_assert!(freed.is_ok(), "{freed:?}");
        }
    }
}

impl<M: BuddyModel, V: Variant> std::fmt::Debug for PageChain<'_, M, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageChain")
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}
