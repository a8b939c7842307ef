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
    #[inline(always)]
    pub fn push_front(&mut self, page: &Page) {
        let p = std::ptr::from_ref(page).cast_mut();
        page.set_lru_prev(std::ptr::null_mut());
        page.set_lru_next(self.head);
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
    #[inline(always)]
    pub fn push_back(&mut self, page: &Page) {
        let p = std::ptr::from_ref(page).cast_mut();
        page.set_lru_next(std::ptr::null_mut());
        page.set_lru_prev(self.tail);
        if self.tail.is_null() {
            self.head = p;
        } else {
            // SAFETY: `tail` is on this list, so live (module contract).
            unsafe { &*self.tail }.set_lru_next(p);
        }
        self.tail = p;
        self.len += 1;
    }

    /// Removes and returns the head page.
    ///
    /// # Safety
    /// `'a` must not outlive the borrow of the memory model whose memmap
    /// holds the listed pages.
    #[inline(always)]
    pub unsafe fn pop_front<'a>(&mut self) -> Option<&'a Page> {
        if self.head.is_null() {
            return None;
        }
        // SAFETY: `head` is on this list, so live for as long as the model
        // is borrowed; the caller bounds 'a by that borrow.
        let page = unsafe { &*self.head };
        self.unlink(page);
        Some(page)
    }

    /// Removes and returns the tail page (the coldest, on a pcp list).
    ///
    /// # Safety
    /// As for [`PageList::pop_front`].
    #[inline(always)]
    pub unsafe fn pop_back<'a>(&mut self) -> Option<&'a Page> {
        if self.tail.is_null() {
            return None;
        }
        // SAFETY: `tail` is on this list; the caller bounds 'a.
        let page = unsafe { &*self.tail };
        self.unlink(page);
        Some(page)
    }

    /// `list_del`: removes `page`, which must be on this list.
    #[inline(always)]
    pub fn unlink(&mut self, page: &Page) {
        debug_assert!(self.len > 0);
        let (prev, next) = (page.lru_prev(), page.lru_next());
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
        page.set_lru_next(std::ptr::null_mut());
        page.set_lru_prev(std::ptr::null_mut());
        self.len -= 1;
    }

    /// The pages, head first (for checks and reports; O(len)).
    ///
    /// # Safety
    /// As for [`PageList::pop_front`]; and the list must not change while
    /// the iterator is used.
    pub unsafe fn iter<'a>(&self) -> impl Iterator<Item = &'a Page> + 'a {
        let mut at = self.head;
        std::iter::from_fn(move || {
            // SAFETY: pages on the list are live (module contract).
            let page = unsafe { at.as_ref()? };
            at = page.lru_next();
            Some(page)
        })
    }
}

/// The page `offset` descriptors after `page` in the same memmap run
/// (`page + offset` in the kernel): how a buddy or the second half of a
/// split block is reached without a `pfn_to_page`.
///
/// # Safety
/// `page`'s pfn plus `offset` must be a valid pfn in the same section as
/// `page` (every model keeps a section's memmap contiguous, and a
/// `MAX_PAGE_ORDER` block never leaves its section).
#[inline(always)]
pub unsafe fn page_offset(page: &Page, offset: i64) -> &Page {
    // SAFETY: per the contract the target descriptor lies in the same
    // contiguous memmap as `page` and is initialised.
    unsafe { &*std::ptr::from_ref(page).offset(offset as isize) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_pop_unlink() {
        let pages: Vec<Page> = (0..4).map(|_| Page::new_zeroed()).collect();
        let mut l = PageList::default();
        l.push_back(&pages[1]);
        l.push_front(&pages[0]);
        l.push_back(&pages[2]);
        l.push_back(&pages[3]);
        l.unlink(&pages[2]);
        // SAFETY: `pages` outlives the iteration and the list is unchanged.
        let order: Vec<*const Page> = unsafe { l.iter() }.map(std::ptr::from_ref).collect();
        assert_eq!(
            order,
            vec![
                &pages[0] as *const _,
                &pages[1] as *const _,
                &pages[3] as *const _
            ]
        );
        assert_eq!(l.len(), 3);
        // SAFETY: `pages` outlives the returned reference.
        assert!(std::ptr::eq(unsafe { l.pop_front() }.unwrap(), &pages[0]));
        l.unlink(&pages[3]);
        l.unlink(&pages[1]);
        // SAFETY: as above.
        assert!(l.is_empty() && unsafe { l.pop_front() }.is_none());
    }
}
