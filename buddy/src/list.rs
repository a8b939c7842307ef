//! Intrusive page lists: free lists threaded through `struct page`'s `lru`
//! links, as `free_area[order].free_list` and the per-CPU lists are.
//!
//! A hop from one page to the next is one pointer load from the page's own
//! cache line; nothing is allocated. The list is doubly linked and
//! null-terminated, with head and tail kept in the list header, so add at
//! either end and unlink from the middle are O(1) (`list_add`,
//! `list_add_tail`, `list_del`).
//!
//! # Safety
//! The list stores raw pointers to pages in a memory model's memmap. The
//! owner of a `PageList` (a zone's free area behind the zone lock, or a
//! per-CPU list owned by one thread) guarantees, for as long as a page is on
//! the list: the page's memmap stays mapped (hotplug needs `&mut` on the
//! allocator, which cannot coexist with the lists' users), and no other list
//! links the same page. Links are only touched by this module.

use sparsemem::Page;

/// A doubly linked list of pages through their `lru` links.
///
/// Invariants: `head` is null iff `tail` is null iff `len == 0`; following
/// `lru_next` from `head` visits exactly `len` pages and ends at `tail`.
pub struct PageList {
    head: *mut Page,
    tail: *mut Page,
    len: u64,
}

// SAFETY: the list is only a set of addresses into a memmap whose pages are
// all atomics; its owner serialises use (zone lock or a single thread).
unsafe impl Send for PageList {}

impl Default for PageList {
    fn default() -> Self {
        PageList {
            head: std::ptr::null_mut(),
            tail: std::ptr::null_mut(),
            len: 0,
        }
    }
}

impl PageList {
    /// Pages on the list.
    #[inline(always)]
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the list is empty.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `list_add`: at the head.
    ///
    /// # Safety
    /// `page` points to a live descriptor of the memmap this list serves,
    /// on no list, and stays live while listed (module contract).
    #[inline(always)]
    pub unsafe fn push_front(&mut self, page: *const Page) {
        let p = page.cast_mut();
        // SAFETY: the caller's contract.
        let pr = unsafe { &*page };
        pr.set_lru_prev(std::ptr::null_mut());
        pr.set_lru_next(self.head);
        if self.head.is_null() {
            self.tail = p;
        } else {
            // SAFETY: `head` is on this list, so live (module contract).
            unsafe { &*self.head }.set_lru_prev(p);
        }
        self.head = p;
        self.len += 1;
    }

    /// `list_add_tail`.
    ///
    /// # Safety
    /// As for [`PageList::push_front`].
    #[inline(always)]
    pub unsafe fn push_back(&mut self, page: *const Page) {
        let p = page.cast_mut();
        // SAFETY: the caller's contract.
        let pr = unsafe { &*page };
        pr.set_lru_next(std::ptr::null_mut());
        pr.set_lru_prev(self.tail);
        if self.tail.is_null() {
            self.head = p;
        } else {
            // SAFETY: `tail` is on this list, so live (module contract).
            unsafe { &*self.tail }.set_lru_next(p);
        }
        self.tail = p;
        self.len += 1;
    }

    /// Removes and returns the head page (the pointer that was pushed).
    #[inline(always)]
    pub fn pop_front(&mut self) -> Option<*const Page> {
        let head = self.head;
        if head.is_null() {
            return None;
        }
        // SAFETY: `head` is on this list.
        unsafe { self.unlink(head) };
        Some(head)
    }

    /// Removes and returns the tail page (the coldest, on a pcp list).
    #[inline(always)]
    pub fn pop_back(&mut self) -> Option<*const Page> {
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
    pub unsafe fn unlink(&mut self, page: *const Page) {
        debug_assert!(self.len > 0);
        // SAFETY: listed pages are live (module contract).
        let pr = unsafe { &*page };
        let (prev, next) = (pr.lru_prev(), pr.lru_next());
        if prev.is_null() {
            self.head = next;
        } else {
            // SAFETY: a neighbour on this list, so live.
            unsafe { &*prev }.set_lru_next(next);
        }
        if next.is_null() {
            self.tail = prev;
        } else {
            // SAFETY: a neighbour on this list, so live.
            unsafe { &*next }.set_lru_prev(prev);
        }
        pr.set_lru_next(std::ptr::null_mut());
        pr.set_lru_prev(std::ptr::null_mut());
        self.len -= 1;
    }

    /// The listed pointers, head first (for checks and reports; O(len)).
    pub fn iter(&self) -> impl Iterator<Item = *const Page> + '_ {
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
pub unsafe fn page_offset(page: *const Page, offset: i64) -> *const Page {
    // SAFETY: per the contract the target lies in the same allocation.
    unsafe { page.offset(offset as isize) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_pop_unlink() {
        let pages: Vec<Page> = (0..4).map(|_| Page::new_zeroed()).collect();
        let p: Vec<*const Page> = (0..4).map(|i| pages.as_ptr().wrapping_add(i)).collect();
        let mut l = PageList::default();
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
}
