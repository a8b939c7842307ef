//! Intrusive page lists: free lists threaded through `struct page`'s `lru`
//! links, as `free_area[order].free_list` and the per-CPU lists are (at 32
//! bytes, the `buddy_list` / `pcp_list` words of the page's union; the
//! layout's [`BuddyPage`] accessors say where).
//!
//! A hop from one page to the next is one pointer load from the page's own
//! cache line; nothing is allocated. The list is doubly linked and
//! null-terminated, with head and tail kept in the list header, so add at
//! either end and unlink from the middle are O(1) (`list_add`,
//! `list_add_tail`, `list_del`).
//!
//! Above the raw list sit the safe faces the rest of the allocator uses:
//! [`OwnedBlock`], a block that no list holds and that its holder owns
//! (taken off a free list, or claimed by a free), [`PcpList`], a per-CPU
//! list that only takes and gives such blocks, [`ChainList`], the
//! allocated pages of a [`PageChain`](crate::PageChain), and
//! [`TrylockFreePages`] (`llist`), the blocks a free that only tries the
//! zone lock leaves waiting. Allocation and free paths
//! move blocks between lists by moving tokens, so only this module and the
//! buddy algorithm in `zone` write a `struct page`.
//!
//! # Safety
//! The list stores raw pointers to pages in a memory model's memmap. The
//! owner of a `PageList` (a zone's free area behind the zone lock, or a
//! per-CPU list owned by one thread) guarantees, for as long as a page is on
//! the list: the page's memmap stays mapped (hotplug needs `&mut` on the
//! allocator, which cannot coexist with the lists' users), and no other list
//! links the same page. Links are only touched by this module.

use sparsemem::{BuddyPage, MAX_PAGE_ORDER_LIMIT, Order, PageFlag, Pfn};

use crate::types::BuddyModel;

mod llist;

pub(crate) use llist::TrylockFreePages;

/// A doubly linked list of pages through their `lru` links, counting its
/// pages when `COUNTED` (a zone's free list, whose counts are `nr_free`)
/// and not otherwise (a per-CPU list: the kernel keeps only `pcp->count`
/// over all of a CPU's lists, and so does [`PerCpu`](crate::PerCpu)).
///
/// Invariants: `head` is null iff `tail` is null iff the list is empty;
/// following `lru_next` from `head` ends at `tail`, following `lru_prev`
/// from `tail` visits the same pages in reverse, so the head's `lru_prev`
/// and the tail's `lru_next` are null; when `COUNTED`, `len` is the number
/// of pages (else it stays 0).
pub struct PageList<P, const COUNTED: bool = true> {
    head: *mut P,
    tail: *mut P,
    len: u64,
}

// SAFETY: the list is only a set of addresses into a memmap whose pages are
// all atomics; its owner serialises use (zone lock or a single thread).
unsafe impl<P, const COUNTED: bool> Send for PageList<P, COUNTED> {}

impl<P, const COUNTED: bool> Default for PageList<P, COUNTED> {
    fn default() -> Self {
        PageList {
            head: std::ptr::null_mut(),
            tail: std::ptr::null_mut(),
            len: 0,
        }
    }
}

impl<P: BuddyPage, const COUNTED: bool> PageList<P, COUNTED> {
    /// Pages on the list (walked, for a list that does not count).
    #[inline(always)]
    pub fn len(&self) -> u64 {
        if COUNTED {
            self.len
        } else {
            self.iter().count() as u64
        }
    }

    /// Whether the list is empty (the head, which a pop reads anyway).
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.head.is_null()
    }

    /// `list_add`: at the head.
    ///
    /// # Safety
    /// `page` points to a live descriptor of the memmap this list serves,
    /// on no list, owned by the list's owner, and stays live while listed
    /// (module contract).
    #[inline(always)]
    pub unsafe fn push_front(&mut self, page: *const P) {
        let p = page.cast_mut();
        // SAFETY: (1) the caller's contract makes `page` live and its links
        // the list owner's to write (attaching its `struct buddy` first,
        // where the layout keeps the links there); (2) `head`, when set, is
        // on this list, so live and owned the same way.
        unsafe {
            (*page).list_attach();
            (*page).set_lru_prev(std::ptr::null_mut());
            (*page).set_lru_next(self.head);
            if self.head.is_null() {
                self.tail = p;
            } else {
                (*self.head).set_lru_prev(p);
            }
        }
        self.head = p;
        if COUNTED {
            self.len += 1;
        }
    }

    /// `list_add_tail`.
    ///
    /// # Safety
    /// As for [`PageList::push_front`].
    #[inline(always)]
    pub unsafe fn push_back(&mut self, page: *const P) {
        let p = page.cast_mut();
        // SAFETY: as in `push_front`, with `tail` for `head`.
        unsafe {
            (*page).list_attach();
            (*page).set_lru_next(std::ptr::null_mut());
            (*page).set_lru_prev(self.tail);
            if self.tail.is_null() {
                self.head = p;
            } else {
                (*self.tail).set_lru_next(p);
            }
        }
        self.tail = p;
        if COUNTED {
            self.len += 1;
        }
    }

    /// Removes and returns the head page (the pointer that was pushed).
    #[inline(always)]
    pub fn pop_front(&mut self) -> Option<*const P> {
        let head = self.head;
        if head.is_null() {
            return None;
        }
        // SAFETY: (1) `head` is on this list, so live and its links the list
        // owner's (module contract); (2) `next` is null or the next page on
        // this list, owned the same way. The head's `lru_prev` is already
        // null, so only `lru_next` is cleared (`list_del` of the first
        // entry).
        unsafe {
            let next = (*head).lru_next();
            self.head = next;
            if next.is_null() {
                self.tail = std::ptr::null_mut();
            } else {
                (*next).set_lru_prev(std::ptr::null_mut());
            }
            (*head).set_lru_next(std::ptr::null_mut());
            (*head).list_detach();
        }
        if COUNTED {
            self.len -= 1;
        }
        Some(head)
    }

    /// Removes and returns the tail page (the coldest, on a pcp list).
    #[inline(always)]
    pub fn pop_back(&mut self) -> Option<*const P> {
        let tail = self.tail;
        if tail.is_null() {
            return None;
        }
        // SAFETY: `tail` is on this list.
        unsafe { self.unlink(tail) };
        Some(tail)
    }

    /// `list_del`: removes `page`.
    ///
    /// # Safety
    /// `page` is on this list.
    #[inline(always)]
    pub unsafe fn unlink(&mut self, page: *const P) {
        debug_assert!(!self.is_empty());
        // SAFETY: (1) listed pages are live and their links belong to this
        // list's owner (module contract); (2) `prev` and `next` are null or
        // neighbours on this list, so live and owned the same way.
        unsafe {
            let pr = &*page;
            let (prev, next) = (pr.lru_prev(), pr.lru_next());
            if prev.is_null() {
                self.head = next;
            } else {
                (*prev).set_lru_next(next);
            }
            if next.is_null() {
                self.tail = prev;
            } else {
                (*next).set_lru_prev(prev);
            }
            pr.set_lru_next(std::ptr::null_mut());
            pr.set_lru_prev(std::ptr::null_mut());
            pr.list_detach();
        }
        if COUNTED {
            self.len -= 1;
        }
    }

    /// Unlinks every page (an allocator being dropped gives the `struct
    /// buddy`s of its listed pages back to their cache, which outlives
    /// it).
    pub(crate) fn release(&mut self) {
        while self.pop_front().is_some() {}
    }

    /// The listed pointers, head first (for checks and reports; O(len)).
    pub fn iter(&self) -> impl Iterator<Item = *const P> + '_ {
        let mut at = self.head;
        std::iter::from_fn(move || {
            if at.is_null() {
                return None;
            }
            let here = at;
            // SAFETY: pages on the list are live (module contract), and
            // `&self` keeps the list unchanged while iterating.
            at = unsafe { &*at }.lru_next();
            Some(here.cast_const())
        })
    }
}

/// A block of `2^order` pages that no list holds, owned by its holder.
///
/// Invariants (established by the `unsafe` constructor's caller):
/// - `page` is the head's descriptor from
///   [`MemoryModel::pfn_to_page_ptr`] of the model the allocator owns, so it
///   is live while the allocator is borrowed and carries provenance over its
///   section;
/// - `pfn` is its pfn, aligned to `order`, and the block lies in one zone
///   (a pfn is below 2^58 with every geometry's physical address bits);
/// - no free list or per-CPU list links the head, and no other token names
///   the same block.
///
/// Not `Clone`: moving the token is moving the ownership.
#[derive(Debug)]
pub(crate) struct OwnedBlock<P> {
    page: *const P,
    /// The pfn above the low [`ORDER_BITS`] bits, the order in them: two
    /// words, so the token travels in two registers into the functions the
    /// hot paths keep out of line. (Six bits: with a 64-byte descriptor, a
    /// pfn worked out as a memmap offset over 64 comes back out without a
    /// mask.)
    pfn_order: u64,
}

/// Bits of [`OwnedBlock::pfn_order`] that hold the order (0..=16).
const ORDER_BITS: u32 = 6;

impl<P: BuddyPage> OwnedBlock<P> {
    /// Wraps a block head.
    ///
    /// # Safety
    /// The invariants of [`OwnedBlock`] hold for `(page, pfn, order)`.
    #[inline(always)]
    pub(crate) unsafe fn new(page: *const P, pfn: Pfn, order: Order) -> OwnedBlock<P> {
        debug_assert!(
            pfn.get().is_multiple_of(order.nr_pages()) && pfn.get() >> (64 - ORDER_BITS) == 0
        );
        OwnedBlock {
            page,
            pfn_order: pfn.get() << ORDER_BITS | u64::from(order.get()),
        }
    }

    /// The head's pfn.
    #[inline(always)]
    pub(crate) fn pfn(&self) -> Pfn {
        Pfn::new(self.pfn_order >> ORDER_BITS)
    }

    /// The block's order.
    #[inline(always)]
    pub(crate) fn order(&self) -> Order {
        let order = (self.pfn_order & ((1 << ORDER_BITS) - 1)) as u8;
        // SAFETY: `new` stored an `Order` in these bits (wide enough for
        // any), whose invariant bounds it by `MAX_PAGE_ORDER_LIMIT`; told
        // to the compiler, the saturation below costs nothing.
        unsafe { std::hint::assert_unchecked(order <= MAX_PAGE_ORDER_LIMIT) };
        Order::saturating(order)
    }

    /// The head's descriptor pointer (with its section provenance).
    #[inline(always)]
    pub(crate) fn as_ptr(&self) -> *const P {
        self.page
    }

    /// The head's descriptor.
    #[inline(always)]
    pub(crate) fn page(&self) -> &P {
        // SAFETY: a live descriptor (type invariant).
        unsafe { &*self.page }
    }

    /// Tail `i` of the block (`page + i`).
    #[inline(always)]
    fn tail(&self, i: u64) -> &P {
        // SAFETY: the block's pages are valid descriptors of one section
        // (an aligned block of at most MAX_PAGE_ORDER lies in one section,
        // and a block of the buddy is wholly memory), and `page` carries
        // provenance over the section (type invariant).
        unsafe { &*page_offset(self.page.cast_mut(), i as i64) }
    }

    /// `prep_new_page` (`post_alloc_hook` and, for `__GFP_COMP`,
    /// `prep_compound_page`): the block goes to its caller, so its head gets
    /// refcount 1 and its order in `private` (a free with the wrong order
    /// is caught). A compound block's head is marked `PG_head` and every
    /// tail gets `compound_head`, `TAIL_MAPPING` and a cleared `private`,
    /// the first tail the order (the folio's): the memmap writes a THP
    /// costs. Returns the head pfn the caller now owns.
    ///
    /// The token is kept: a holder that goes on owning the block (a
    /// [`PageChain`](crate::PageChain)) still needs it; the others drop it.
    #[inline(always)]
    pub(crate) fn prep(&self, compound: bool) -> Pfn {
        let page = self.page();
        // SAFETY: the token owns the block and its head is on no list, so the
        // allocator's fields are this holder's to write.
        unsafe {
            page.set_private(u64::from(self.order().get()));
            page.set_refcount(1);
        }
        if compound && self.order() > Order::ZERO {
            self.prep_compound_page();
        }
        self.pfn()
    }

    #[inline(never)]
    fn prep_compound_page(&self) {
        // SAFETY: the token owns the block: every page of it is on no list
        // and written by no one else.
        unsafe { self.page().set_nonatomic(PageFlag::Head) };
        for i in 1..self.order().nr_pages() {
            let tail = self.tail(i);
            // SAFETY: as above.
            unsafe {
                tail.prep_compound_tail(self.page);
                tail.set_private(if i == 1 {
                    u64::from(self.order().get())
                } else {
                    0
                });
            }
        }
    }

    /// `free_pages_prepare` with the checks of `free_page_is_bad` and
    /// `free_tail_page_prepare`: the head (and every tail of a block of
    /// order > 0) must be unmapped, without a mapping and without a flag of
    /// `PAGE_FLAGS_CHECK_AT_FREE` (here `PG_locked`); a compound block's
    /// tails must point at the head and keep `TAIL_MAPPING`. Only if all
    /// hold are the tails' compound fields and every page's flags cleared
    /// (`flags &= ~PAGE_FLAGS_CHECK_AT_PREP`, one store per page). On a bad
    /// page nothing was written; the kernel's reason is returned with the
    /// offending pfn.
    #[inline(always)]
    pub(crate) fn free_pages_prepare(&self) -> Result<(), (Pfn, &'static str)> {
        let head = self.page();
        let compound = head.test(PageFlag::Head);
        if let Some(reason) = head.free_bad_reason() {
            return Err((self.pfn(), reason));
        }
        if self.order() > Order::ZERO {
            // SAFETY: this token's own parts.
            unsafe { check_tails(self.page, self.pfn(), self.order(), compound) }?;
            for i in 1..self.order().nr_pages() {
                let tail = self.tail(i);
                if compound {
                    // SAFETY: the token owns the block (checked above: the
                    // tail is this block's, on no list).
                    unsafe { tail.clear_compound_tail() };
                }
                // SAFETY: as above.
                unsafe { tail.clear_flags_at_free() };
            }
        }
        // SAFETY: the token owns the head.
        unsafe { head.clear_flags_at_free() };
        Ok(())
    }

    /// `split_page`'s writes: the claimed non-compound block's `1 << order`
    /// pages each become an allocated order-0 page with its own reference
    /// (`private` 0, `_refcount` 1), for the holder to free one by one.
    /// The caller checked the block is not compound.
    pub(crate) fn split(self) {
        for i in 1..self.order().nr_pages() {
            let tail = self.tail(i);
            // SAFETY: the token owns the block, so its tails are on no list
            // and written by no one else; each becomes its own page.
            unsafe {
                tail.set_private(0);
                tail.set_refcount(1);
            }
        }
        // SAFETY: the token owns the head; restoring the reference the
        // claim froze, at order 0, hands it back as the first page.
        unsafe {
            self.page().set_private(0);
            self.page().set_refcount(1);
        }
    }

    /// Gives a claimed block back to its holder unchanged (a refused free):
    /// the reference the claim froze is restored.
    pub(crate) fn unclaim(self) {
        // SAFETY: the token owns the head; restoring the count the claim
        // froze makes it the caller's allocated block again.
        unsafe { self.page().set_refcount(1) };
    }
}

/// The tail checks of [`OwnedBlock::free_pages_prepare`] for the block
/// headed by `head` (its parts passed by value, so the hot path keeps the
/// token in registers).
///
/// # Safety
/// `(head, head_pfn, order)` are the parts of an [`OwnedBlock`] the
/// caller holds.
#[inline(never)]
unsafe fn check_tails<P: BuddyPage>(
    head: *const P,
    head_pfn: Pfn,
    order: Order,
    compound: bool,
) -> Result<(), (Pfn, &'static str)> {
    for i in 1..order.nr_pages() {
        // SAFETY: as in `OwnedBlock::tail`, for the token the caller holds.
        let tail = unsafe { &*page_offset(head.cast_mut(), i as i64) };
        let pfn = Pfn::new(head_pfn.get() + i);
        let bad = if compound {
            tail.compound_tail_bad_reason(head)
        } else {
            tail.free_bad_reason()
        };
        if let Some(reason) = bad {
            return Err((pfn, reason));
        }
    }
    Ok(())
}

/// A per-CPU list (`pcp->lists`): order-0 blocks in and out as
/// [`OwnedBlock`]s, each marked with the `PG_private`-like
/// [`PageFlag::Pcp`] while listed.
#[derive(Default)]
pub(crate) struct PcpList<P> {
    list: PageList<P, false>,
}

impl<P: BuddyPage> PcpList<P> {
    /// Blocks on the list (a walk, for tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> u64 {
        self.list.len()
    }

    /// Whether the list is empty.
    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Lists `block` at the head (a freed page is hot). Every block on one
    /// list has the same order (the list's, `pindex_to_order`).
    #[inline(always)]
    pub(crate) fn push_front(&mut self, block: OwnedBlock<P>) {
        // SAFETY: the token owns the block, which is on no list: marking and
        // linking it are the owner's writes, and it stays live while listed.
        // The mark is a plain store in every variant: the 2004 patch did
        // not route it through the flag operations it changed.
        unsafe {
            block.page().set_nonatomic(PageFlag::Pcp);
            self.list.push_front(block.as_ptr());
        }
    }

    /// Lists `block` at the tail (a refill, in the order taken).
    #[inline(always)]
    pub(crate) fn push_back(&mut self, block: OwnedBlock<P>) {
        // SAFETY: as for `push_front`.
        unsafe {
            block.page().set_nonatomic(PageFlag::Pcp);
            self.list.push_back(block.as_ptr());
        }
    }

    /// Takes the head block (the hottest); `order` is the list's.
    #[inline(always)]
    pub(crate) fn pop_front<M: BuddyModel<Page = P>>(
        &mut self,
        model: &M,
        order: Order,
    ) -> Option<OwnedBlock<P>> {
        let page = self.list.pop_front()?;
        // SAFETY: only owned blocks of `model` of the list's order are ever
        // listed here.
        Some(unsafe { Self::unmark(model, page, order) })
    }

    /// Takes the tail block (the coldest, for `free_pcppages_bulk`).
    #[inline(always)]
    pub(crate) fn pop_back<M: BuddyModel<Page = P>>(
        &mut self,
        model: &M,
        order: Order,
    ) -> Option<OwnedBlock<P>> {
        let page = self.list.pop_back()?;
        // SAFETY: as for `pop_front`.
        Some(unsafe { Self::unmark(model, page, order) })
    }

    /// Clears the pcp mark of a page just unlinked and wraps it again.
    ///
    /// # Safety
    /// `page` was listed here (so it came from an [`OwnedBlock`] of `order`
    /// of `model`) and has just been unlinked.
    #[inline(always)]
    unsafe fn unmark<M: BuddyModel<Page = P>>(
        model: &M,
        page: *const P,
        order: Order,
    ) -> OwnedBlock<P> {
        // SAFETY: the page was an owned block's head, live while listed.
        let pr = unsafe { &*page };
        // SAFETY: unlinked, so this holder owns it again (a plain store, as
        // in `push_front`).
        unsafe { pr.clear_nonatomic(PageFlag::Pcp) };
        let pfn = model.page_to_pfn(pr);
        // SAFETY: the invariants held when it was listed and nothing but this
        // list touched it since.
        unsafe { OwnedBlock::new(page, pfn, order) }
    }
}

/// Allocated order-0 pages held on a list through their `lru` links, the
/// raw half of a [`PageChain`](crate::PageChain): while a page is listed
/// its reference count is held at zero, so no claim of a free can take it.
/// The chain above owns the allocator borrow that keeps the pages live.
#[derive(Default)]
pub(crate) struct ChainList<P> {
    list: PageList<P>,
}

impl<P: BuddyPage> ChainList<P> {
    /// Pages on the list.
    pub(crate) fn len(&self) -> u64 {
        self.list.len()
    }

    /// Whether the list is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The pages' pfns, first to last (`list_for_each_entry` and
    /// `page_to_pfn`); `model` is the one the pages were allocated from.
    pub(crate) fn iter<'m, M: BuddyModel<Page = P>>(
        &'m self,
        model: &'m M,
    ) -> impl Iterator<Item = Pfn> + 'm {
        // SAFETY: every listed page is a live descriptor of the model the
        // owner allocated it from (`push`), borrowed with the list.
        self.list
            .iter()
            .map(move |p| model.page_to_pfn(unsafe { &*p }))
    }

    /// Takes the first page off the list; it is its pfn's holder's
    /// ordinary allocated page from then on.
    pub(crate) fn pop_front<M: BuddyModel<Page = P>>(&mut self, model: &M) -> Option<Pfn> {
        let page = self.list.pop_front()?;
        // SAFETY: listed pages are live descriptors (`push`).
        let page = unsafe { &*page };
        // SAFETY: the list owned the page (count held at zero); giving the
        // count back makes the pfn's holder its owner, as after an
        // ordinary allocation.
        unsafe { page.set_refcount(1) };
        Some(model.page_to_pfn(page))
    }

    /// Lists an order-0 block just prepared for the owner; the token proves
    /// no one else owns it.
    #[inline(always)]
    pub(crate) fn push(&mut self, block: OwnedBlock<P>) {
        debug_assert_eq!(block.order(), Order::ZERO);
        // SAFETY: the token owns the block and no list links it: holding its
        // count at zero keeps every claim off it while it is listed, and
        // linking it writes only its links and the old tail's. The page
        // stays live while listed (module contract: the owner borrows the
        // allocator).
        unsafe {
            block.page().set_refcount(0);
            self.list.push_back(block.as_ptr());
        }
    }
}

/// The descriptor `offset` places after `page` in the same memmap run
/// (`page + offset` in the kernel): how a buddy or the second half of a
/// split block is reached without a `pfn_to_page`.
///
/// # Safety
/// `page` carries provenance over its memmap run
/// ([`MemoryModel::pfn_to_page_ptr`](sparsemem::MemoryModel::pfn_to_page_ptr)),
/// and its pfn plus `offset` is a valid pfn in the same section (every model
/// keeps a section's memmap contiguous, and a `MAX_PAGE_ORDER` block never
/// leaves its section).
#[inline(always)]
pub unsafe fn page_offset<P>(page: *const P, offset: i64) -> *const P {
    // SAFETY: per the contract the target lies in the same allocation.
    unsafe { page.offset(offset as isize) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sparsemem::{Page16, Page32, Page64};

    #[test]
    fn push_pop_unlink() {
        push_pop_unlink_at::<Page64>();
        push_pop_unlink_at::<Page32>();
        push_pop_unlink_at::<Page16>();
    }

    fn push_pop_unlink_at<P: BuddyPage>() {
        let pages: Vec<P> = (0..4).map(|_| P::default()).collect();
        let p: Vec<*const P> = (0..4).map(|i| pages.as_ptr().wrapping_add(i)).collect();
        let mut l: PageList<P> = PageList::default();
        // SAFETY: the pages outlive the list and each is listed once.
        unsafe {
            l.push_back(p[1]);
            l.push_front(p[0]);
            l.push_back(p[2]);
            l.push_back(p[3]);
            l.unlink(p[2]);
        }
        assert_eq!(l.iter().collect::<Vec<_>>(), vec![p[0], p[1], p[3]]);
        assert_eq!(l.len(), 3);
        assert_eq!(l.pop_front(), Some(p[0]));
        assert_eq!(l.pop_back(), Some(p[3]));
        // SAFETY: p[1] is listed.
        unsafe { l.unlink(p[1]) };
        assert!(l.is_empty() && l.pop_front().is_none());
    }

    /// Both list kinds against a `VecDeque` over a seeded sequence of
    /// operations: the forward walk, the backward links, the null ends
    /// (which `pop_front` relies on) and the length after every step.
    #[test]
    fn counted_and_uncounted_lists_follow_a_deque() {
        fn check<P: BuddyPage, const C: bool>(steps: usize) {
            let pages: Vec<P> = (0..8).map(|_| P::default()).collect();
            let p = |i: usize| pages.as_ptr().wrapping_add(i);
            let mut l = PageList::<P, C>::default();
            let mut model = std::collections::VecDeque::new();
            let mut x = 0x9e37_79b9_u32;
            for _ in 0..steps {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                let i = (x >> 8) as usize % 8;
                let listed = model.contains(&i);
                match x % 5 {
                    // SAFETY: `i` is not listed; the pages outlive the list.
                    0 | 1 if !listed => unsafe { l.push_front(p(i)) },
                    // SAFETY: as above.
                    2 if !listed => unsafe { l.push_back(p(i)) },
                    // SAFETY: `i` is listed.
                    3 if listed => unsafe { l.unlink(p(i)) },
                    _ => {
                        let front = x.is_multiple_of(2);
                        let got = if front { l.pop_front() } else { l.pop_back() };
                        let want = if front {
                            model.pop_front()
                        } else {
                            model.pop_back()
                        };
                        assert_eq!(got, want.map(p));
                        continue;
                    }
                }
                match x % 5 {
                    0 | 1 => model.push_front(i),
                    2 => model.push_back(i),
                    _ => model.retain(|&j| j != i),
                }
                let forward: Vec<_> = l.iter().collect();
                assert_eq!(forward, model.iter().map(|&j| p(j)).collect::<Vec<_>>());
                assert_eq!(l.len(), model.len() as u64);
                let mut back = Vec::new();
                let mut at = l.tail;
                while !at.is_null() {
                    back.push(at.cast_const());
                    // SAFETY: listed pages are live.
                    at = unsafe { &*at }.lru_prev();
                }
                back.reverse();
                assert_eq!(back, forward, "the backward links");
                if let (Some(&h), Some(&t)) = (forward.first(), forward.last()) {
                    // SAFETY: listed pages are live.
                    let (h, t) = unsafe { (&*h, &*t) };
                    assert!(h.lru_prev().is_null() && t.lru_next().is_null());
                }
            }
        }
        let steps = if cfg!(miri) { 300 } else { 5000 };
        check::<Page64, true>(steps);
        check::<Page64, false>(steps);
        check::<Page32, true>(steps);
        check::<Page32, false>(steps);
        check::<Page16, true>(steps);
        check::<Page16, false>(steps);
    }
}
