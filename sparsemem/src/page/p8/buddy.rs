//! `BuddyPage` for [`Page8`]: the allocator's accessors, each reading or
//! writing wherever the page's memdesc word says the state is (the packed
//! word, the `struct buddy`, the memdesc, or the head of a tail).

use std::ptr::{null_mut, without_provenance_mut};
use std::sync::atomic::Ordering::Relaxed;

use super::super::kmem_cache::SlabInfo;
use super::super::{BuddyPage, ListState, PageFlag, PageLayout, UserFlag};
use super::{
    BUDDY_CACHE, Buddy8, COUNT_BIT, FLAG_SHIFT, FLAGS_MASK, Form, HEADER_MASK, MISC_CACHE,
    MemdescType, Misc8, Page8, TAIL_ADDR_MASK, TAIL_PRIVATE_SHIFT, TYPE_MASK, USER_MASK, View,
    desc_ptr, fmask, packed_private, packed_word, tagged,
};

// SAFETY: (1) the links are the two `AtomicPtr`s of the page's `struct
// buddy`, stored and loaded with their provenance while the page is
// attached (the list code attaches before linking and detaches after
// unlinking), and nothing but poison or a count written over a listed
// page (both outside the contract) replaces the word; (2) `private` is
// the packed word's, the `struct buddy`'s, the memdesc's or the tail
// word's, moved between them whenever the word changes type, and the
// count is the packed bit or the memdesc's, moved the same way (a count
// the packed bit cannot hold takes a memdesc); (3) `set_zone_node`
// rewrites only the packed zone and node bits, wherever the header is,
// and no writer below makes a present word a hole or changes its
// section.
unsafe impl BuddyPage for Page8 {
    const LINKS_IN_PAGE: bool = false;

    #[inline(always)]
    fn test(&self, flag: PageFlag) -> bool {
        if flag == PageFlag::Present {
            return self.is_present();
        }
        match self.view() {
            View::Hole => false,
            View::Tail(head, _) => head.header() & fmask(flag) & USER_MASK != 0,
            _ => self.header() & fmask(flag) != 0,
        }
    }
    #[inline(always)]
    fn flags(&self) -> u64 {
        match self.view() {
            View::Hole => 0,
            View::Poisoned => u64::MAX,
            View::Tail(head, _) => 1 | (head.header() & USER_MASK) >> FLAG_SHIFT,
            _ => 1 | (self.header() & FLAGS_MASK) >> FLAG_SHIFT,
        }
    }
    #[inline(always)]
    unsafe fn set(&self, flag: PageFlag) {
        self.update_flags(fmask(flag), true, Form::Atomic);
    }
    #[inline(always)]
    unsafe fn clear(&self, flag: PageFlag) {
        self.update_flags(fmask(flag), false, Form::Atomic);
    }
    #[inline(always)]
    unsafe fn set_nonatomic(&self, flag: PageFlag) {
        self.update_flags(fmask(flag), true, Form::NonAtomic);
    }
    #[inline(always)]
    unsafe fn clear_nonatomic(&self, flag: PageFlag) {
        self.update_flags(fmask(flag), false, Form::NonAtomic);
    }
    #[inline(always)]
    unsafe fn set_unlocked(&self, flag: PageFlag) {
        self.update_flags(fmask(flag), true, Form::Unlocked);
    }
    #[inline(always)]
    unsafe fn clear_unlocked(&self, flag: PageFlag) {
        self.update_flags(fmask(flag), false, Form::Unlocked);
    }
    #[inline(always)]
    fn set_user(&self, flag: UserFlag) {
        self.update_flags(fmask(flag.into()), true, Form::Atomic);
    }
    #[inline(always)]
    fn clear_user(&self, flag: UserFlag) {
        self.update_flags(fmask(flag.into()), false, Form::Atomic);
    }
    #[inline(always)]
    fn private(&self) -> u64 {
        match self.view() {
            View::Packed(word) => packed_private(word),
            // The dependent load: the order of a free page is its
            // descriptor's.
            View::Buddy(d) => d.private.load(Relaxed),
            View::Misc(d) => d.private.load(Relaxed),
            View::Tail(_, private) => private,
            View::Hole | View::Poisoned => 0,
        }
    }
    #[inline(always)]
    unsafe fn set_private(&self, value: u64) {
        match self.view() {
            View::Packed(word) => {
                let new = packed_word(word, value, word & COUNT_BIT != 0);
                let ty = word & TYPE_MASK;
                self.memdesc.store(
                    new.map_addr(|a| a & !(TYPE_MASK as usize) | ty as usize),
                    Relaxed,
                );
            }
            View::Buddy(d) => d.private.store(value, Relaxed),
            View::Misc(d) => d.private.store(value, Relaxed),
            View::Tail(..) => {
                assert!(
                    value >> (64 - TAIL_PRIVATE_SHIFT) == 0,
                    "private fits 16 bits"
                );
                let word = self.word().map_addr(|a| {
                    a & !(usize::MAX << TAIL_PRIVATE_SHIFT) | (value as usize) << TAIL_PRIVATE_SHIFT
                });
                self.memdesc.store(word, Relaxed);
            }
            View::Hole | View::Poisoned => debug_assert!(false, "private of a hole: {self:?}"),
        }
    }
    super::super::buddy_page::desc_links_ops!();
    #[inline(always)]
    unsafe fn set_zone_node(&self, zone: u8, node: u16) {
        let rewrite = |v: u64| super::pack8::with_zone_node(v, zone, node);
        match self.view() {
            View::Packed(word) => self
                .memdesc
                .store(without_provenance_mut(rewrite(word) as usize), Relaxed),
            View::Buddy(d) => d.header.store(rewrite(d.header.load(Relaxed)), Relaxed),
            View::Misc(d) => d.header.store(rewrite(d.header.load(Relaxed)), Relaxed),
            View::Tail(..) | View::Hole | View::Poisoned => {
                debug_assert!(false, "set_page_links of a page with no header: {self:?}")
            }
        }
    }
    #[inline(always)]
    fn refcount(&self) -> i32 {
        match self.view() {
            View::Packed(word) => i32::from(word & COUNT_BIT != 0),
            View::Misc(d) => d.refcount.load(Relaxed),
            _ => 0,
        }
    }
    #[inline(always)]
    unsafe fn set_refcount(&self, count: i32) {
        match self.view() {
            // The last reference: the memdesc goes back to its cache.
            // SAFETY: the page's own memdesc; the caller owns the page.
            View::Misc(d) if count == 0 => unsafe { self.release_misc(d) },
            View::Misc(d) => d.refcount.store(count, Relaxed),
            View::Packed(word) if count == 0 => self.memdesc.store(
                without_provenance_mut((word & !COUNT_BIT) as usize),
                Relaxed,
            ),
            // Memmap init's and the pgmap's reference of a page no one is
            // handed: the packed bit.
            View::Packed(word) if count == 1 && word & fmask(PageFlag::Reserved) != 0 => self
                .memdesc
                .store(without_provenance_mut((word | COUNT_BIT) as usize), Relaxed),
            // The first reference of a page handed to a holder
            // (`set_page_refcounted`): it gets its memdesc.
            View::Packed(word) => self.attach_misc(word, count),
            View::Tail(..) => {
                // SAFETY: the caller owns the page, which is on no list.
                unsafe { self.clear_compound_tail() };
                // SAFETY: as above.
                unsafe { self.set_refcount(count) };
            }
            View::Buddy(_) | View::Hole | View::Poisoned => {
                debug_assert!(false, "a count over a page with none: {self:?}")
            }
        }
    }
    #[inline(always)]
    unsafe fn ref_freeze(&self, expected: i32) -> bool {
        // Relaxed, as at 64 bytes. The compare-exchange is on the page's
        // word, so of several racing frees exactly one moves it off its
        // memdesc; a listed page's word is a `struct buddy` and never
        // matches.
        let word = self.word();
        let new = match self.view_of(word) {
            View::Packed(w) if i32::from(w & COUNT_BIT != 0) == expected => {
                without_provenance_mut((w & !COUNT_BIT) as usize)
            }
            View::Misc(d) if d.refcount.load(Relaxed) == expected => {
                packed_word(d.header.load(Relaxed), d.private.load(Relaxed), false)
            }
            _ => return false,
        };
        if self
            .memdesc
            .compare_exchange(word, new, Relaxed, Relaxed)
            .is_err()
        {
            return false;
        }
        if MemdescType::of(word.addr() as u64) == MemdescType::Misc {
            // The free path's side of the plan: the page's memdesc is freed
            // with its last reference.
            // SAFETY: the object was this page's, and the word the exchange
            // just wrote no longer points to it.
            unsafe { MISC_CACHE.free(desc_ptr::<Misc8>(word)) };
        }
        true
    }
    #[inline(always)]
    fn compound_head(&self) -> Option<*const Page8> {
        match self.view() {
            View::Tail(head, _) => Some(std::ptr::from_ref(head)),
            _ => None,
        }
    }
    #[inline(always)]
    unsafe fn prep_compound_tail(&self, head: *const Page8) {
        let private = BuddyPage::private(self);
        assert!(
            private >> (64 - TAIL_PRIVATE_SHIFT) == 0,
            "private fits 16 bits"
        );
        let tail = head.cast_mut().cast::<u8>().map_addr(|a| {
            assert_eq!(
                a & !TAIL_ADDR_MASK,
                0,
                "a compound head's address is 16-byte aligned and fits 48 bits"
            );
            a | MemdescType::Tail as usize | (private as usize) << TAIL_PRIVATE_SHIFT
        });
        let word = self.word();
        let own = self.misc_desc().is_some().then(|| desc_ptr::<Misc8>(word));
        self.memdesc.store(tail, Relaxed);
        if let Some(d) = own {
            // A block head joining a gigantic folio: its own memdesc goes,
            // the folio's (the head's) stands for it.
            // SAFETY: the page's memdesc, which its word no longer names.
            unsafe { MISC_CACHE.free(d) };
        }
    }
    #[inline(always)]
    unsafe fn clear_compound_tail(&self) {
        let View::Tail(head, private) = self.view() else {
            debug_assert!(false, "clearing a page that is not a tail: {self:?}");
            return;
        };
        // The tail's placement is its head's (one block, one section); its
        // flags were the head's and stay there.
        let header = head.header() & !FLAGS_MASK;
        self.memdesc
            .store(packed_word(header, private, false), Relaxed);
    }
    #[inline(always)]
    fn compound_tail_bad_reason(&self, head: *const Page8) -> Option<&'static str> {
        (BuddyPage::compound_head(self) != Some(head)).then_some("compound_head not consistent")
    }
    #[inline(always)]
    fn free_bad_reason(&self) -> Option<&'static str> {
        // As at 32 bytes: a page the buddy hands out has no folio, so only
        // the flags can be bad.
        self.test(PageFlag::Locked)
            .then_some("PAGE_FLAGS_CHECK_AT_FREE flag(s) set")
    }
    #[inline(always)]
    unsafe fn clear_flags_at_free(&self) {
        self.update_flags(FLAGS_MASK, false, Form::NonAtomic);
    }
    #[inline(always)]
    unsafe fn poison(&self) {
        self.memdesc
            .store(without_provenance_mut(usize::MAX), Relaxed);
    }
    #[inline(always)]
    fn is_poisoned(&self) -> bool {
        self.word().addr() == usize::MAX
    }
    unsafe fn list_attach(&self) {
        let View::Packed(word) = self.view() else {
            panic!("attaching a page that is listed or has a memdesc: {self:?}");
        };
        debug_assert_eq!(word & COUNT_BIT, 0, "a listed page has no count");
        let desc = BUDDY_CACHE.alloc();
        // SAFETY: a fresh object of the cache, no one else's yet.
        let d = unsafe { &*desc };
        d.header.store(word & HEADER_MASK, Relaxed);
        d.private.store(packed_private(word), Relaxed);
        d.page.store(std::ptr::from_ref(self).cast_mut(), Relaxed);
        self.memdesc
            .store(tagged(desc, MemdescType::Buddy), Relaxed);
    }
    unsafe fn list_detach(&self) {
        let obj = desc_ptr::<Buddy8>(self.word());
        let desc = self
            .buddy_desc()
            .expect("detaching a page that is not attached");
        debug_assert!(desc.next.load(Relaxed).is_null() && desc.prev.load(Relaxed).is_null());
        let word = packed_word(desc.header.load(Relaxed), desc.private.load(Relaxed), false);
        self.memdesc.store(word, Relaxed);
        // SAFETY: the object was this page's, and the page's word no longer
        // points to it.
        unsafe { BUDDY_CACHE.free(obj) };
    }
    fn list_state(&self) -> ListState {
        match self.buddy_desc() {
            None => ListState::Detached,
            Some(d) => {
                let live = BUDDY_CACHE.is_live(d);
                let names_page =
                    live && d.page.load(Relaxed).cast_const() == std::ptr::from_ref(self);
                ListState::Descriptor { live, names_page }
            }
        }
    }
    fn memdesc_state(&self) -> ListState {
        match self.misc_desc() {
            None => ListState::Detached,
            Some(d) => {
                let live = MISC_CACHE.is_live(d);
                let names_page =
                    live && d.page.load(Relaxed).cast_const() == std::ptr::from_ref(self);
                ListState::Descriptor { live, names_page }
            }
        }
    }
    fn buddy_cache_info() -> Option<SlabInfo> {
        Some(BUDDY_CACHE.info())
    }
    fn memdesc_cache_info() -> Option<SlabInfo> {
        Some(MISC_CACHE.info())
    }
}
