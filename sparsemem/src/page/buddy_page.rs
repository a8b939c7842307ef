//! What the page allocator needs of a layout whose `struct page` holds the
//! allocator's state itself: the 64-byte layout (every field its own slot)
//! and Wilcox's 32-byte sketch (the links, the count and the order in its
//! unions).
//!
//! The allocator (crate `buddy`) is generic over this trait, so each size
//! is its own monomorphised hot path. The writers are `unsafe fn`s with the
//! [layout contract](PageLayout#safety); they live here because only this
//! module's layouts can reach their private fields.
//!
//! The 16-byte layout implements it too, with the links and the order of a
//! listed page moved to a `struct buddy` from a slab cache: the list code
//! calls [`BuddyPage::list_attach`] before linking a page and
//! [`BuddyPage::list_detach`] after unlinking it, which are empty (and
//! compile to nothing) where the page holds its own links. The 8-byte
//! layout implements it with a second descriptor besides: an allocated
//! page's memdesc, which its count's first reference allocates and its
//! last frees (see `p8` and `docs/memdesc.md`); the checker reads it
//! through [`BuddyPage::memdesc_state`].

use std::sync::atomic::AtomicU64;

use super::kmem_cache::SlabInfo;
use super::{PageFlag, PageLayout, UserFlag};

/// Where a page's list state lives, as the structure checker sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListState {
    /// In the page itself (64 and 32 bytes): nothing to check.
    InPage,
    /// The layout keeps it in a descriptor, and this page holds none (it
    /// is on no list).
    Detached,
    /// The page's memdesc word points to a `struct buddy`.
    Descriptor {
        /// The slab cache says the object is allocated.
        live: bool,
        /// The descriptor names this page as its owner.
        names_page: bool,
    },
}

/// A layout whose pages carry the buddy allocator's state in place: the
/// flags, the free-list links (`buddy_list` / `pcp_list` / `lru`), the
/// order (`private`), the reference count and the compound-page fields.
///
/// # Safety
/// The implementer promises, beyond [`PageLayout`]'s contract:
/// 1. `lru_next`/`lru_prev` return exactly what the last
///    `set_lru_next`/`set_lru_prev` stored, with its provenance, until the
///    count, the compound head or poison is written (the slots they share
///    in a union);
/// 2. `private` returns what `set_private` stored, and `refcount` what
///    `set_refcount` stored, while the page is on no list;
/// 3. `zone_id`/`node_id` return what `set_zone_node` stored, and no
///    writer here changes [`PageLayout::is_present`] or the section.
///
/// Every `unsafe fn` has the [layout contract](PageLayout#safety) for its
/// caller.
pub unsafe trait BuddyPage: PageLayout + std::fmt::Debug {
    /// Whether the flag is set (`PageX`).
    fn test(&self, flag: PageFlag) -> bool;

    /// The whole flags word.
    fn flags(&self) -> u64;

    /// Atomic set (`SetPageX`, a `lock or`).
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns `flag`.
    unsafe fn set(&self, flag: PageFlag);

    /// Atomic clear (`ClearPageX`, a `lock and`).
    ///
    /// # Safety
    /// As for [`BuddyPage::set`].
    unsafe fn clear(&self, flag: PageFlag);

    /// Non-atomic set (`__SetPageX`): load + store.
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety) for the whole flags word:
    /// the caller excludes every other writer of it.
    unsafe fn set_nonatomic(&self, flag: PageFlag);

    /// Non-atomic clear (`__ClearPageX`).
    ///
    /// # Safety
    /// As for [`BuddyPage::set_nonatomic`].
    unsafe fn clear_nonatomic(&self, flag: PageFlag);

    /// `set_bit` as a uniprocessor kernel compiles it (no `lock`).
    ///
    /// # Safety
    /// As for [`BuddyPage::set_nonatomic`].
    unsafe fn set_unlocked(&self, flag: PageFlag);

    /// `clear_bit` as a uniprocessor kernel compiles it.
    ///
    /// # Safety
    /// As for [`BuddyPage::set_nonatomic`].
    unsafe fn clear_unlocked(&self, flag: PageFlag);

    /// Atomic set of a user flag.
    fn set_user(&self, flag: UserFlag);

    /// Atomic clear of a user flag.
    fn clear_user(&self, flag: UserFlag);

    /// `page_private`: the buddy order while [`PageFlag::Buddy`] is set.
    fn private(&self) -> u64;

    /// `set_page_private`.
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns this field.
    unsafe fn set_private(&self, value: u64);

    /// The next page on the list the page is on.
    fn lru_next(&self) -> *mut Self;

    /// The previous page on the list the page is on.
    fn lru_prev(&self) -> *mut Self;

    /// Sets the next link.
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns the links.
    unsafe fn set_lru_next(&self, next: *mut Self);

    /// Sets the previous link.
    ///
    /// # Safety
    /// As for [`BuddyPage::set_lru_next`].
    unsafe fn set_lru_prev(&self, prev: *mut Self);

    /// `set_page_links`: zone and node ids.
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns this field.
    unsafe fn set_zone_node(&self, zone: u8, node: u16);

    /// `page_ref_count` (meaningless while the page is listed where the
    /// count shares a slot with a link).
    fn refcount(&self) -> i32;

    /// `set_page_count`.
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns this field.
    unsafe fn set_refcount(&self, count: i32);

    /// `page_ref_freeze`: the count from `expected` to 0 atomically, or
    /// false and no change.
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns this field.
    unsafe fn ref_freeze(&self, expected: i32) -> bool;

    /// `compound_head` of a tail page, or `None` for a page that is not one.
    fn compound_head(&self) -> Option<*const Self>;

    /// `prep_compound_tail`: makes the page a tail of `head`.
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns the page,
    /// which is on no list.
    unsafe fn prep_compound_tail(&self, head: *const Self);

    /// Undoes [`BuddyPage::prep_compound_tail`] (the free path, or a
    /// gigantic folio's destruction).
    ///
    /// # Safety
    /// As for [`BuddyPage::prep_compound_tail`].
    unsafe fn clear_compound_tail(&self);

    /// `free_tail_page_prepare`'s checks of a tail of the compound page at
    /// `head`: why it cannot be freed, if it cannot.
    fn compound_tail_bad_reason(&self, head: *const Self) -> Option<&'static str>;

    /// `page_bad_reason` for a page being freed: why it cannot be, if it
    /// cannot (mapped, a mapping, `PAGE_FLAGS_CHECK_AT_FREE`).
    fn free_bad_reason(&self) -> Option<&'static str>;

    /// `page->flags &= ~PAGE_FLAGS_CHECK_AT_PREP`: every page flag but
    /// `Present` cleared (the section, zone and node bits kept), one store.
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety) for the whole flags word.
    unsafe fn clear_flags_at_free(&self);

    /// `page_init_poison`: every byte 0xff.
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns every
    /// field, and no list links the page.
    unsafe fn poison(&self);

    /// `PagePoisoned`: the flags word is all ones.
    fn is_poisoned(&self) -> bool;

    /// Whether the page holds its own links and order (no descriptor).
    const LINKS_IN_PAGE: bool = true;

    /// The page is about to go on a free, per-CPU or chain list: where the
    /// links do not fit in the page, `kmem_cache_alloc` of its `struct
    /// buddy`, which takes over `private`. Nothing at 64 and 32 bytes.
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns the page,
    /// which is on no list.
    #[inline(always)]
    unsafe fn list_attach(&self) {}

    /// The page has just been unlinked from its list: `private` back into
    /// the page and `kmem_cache_free` of its `struct buddy`. Nothing at 64
    /// and 32 bytes.
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns the page,
    /// which was attached and is on no list now.
    #[inline(always)]
    unsafe fn list_detach(&self) {}

    /// Where the page's list state is (for the structure checker).
    #[inline(always)]
    fn list_state(&self) -> ListState {
        ListState::InPage
    }

    /// The counts of the layout's `struct buddy` cache, `None` where there
    /// is none. The cache is global (one per layout), as a `kmem_cache` is.
    fn buddy_cache_info() -> Option<SlabInfo> {
        None
    }

    /// Where an allocated page's own memdesc is, for the structure checker:
    /// [`ListState::InPage`] where the layout keeps the count and `private`
    /// in the page (64, 32 and 16 bytes); at 8 bytes `Detached` for a page
    /// with none, or the memdesc's state (the same shape as a `struct
    /// buddy`'s).
    #[inline(always)]
    fn memdesc_state(&self) -> ListState {
        ListState::InPage
    }

    /// The counts of the layout's cache of allocated pages' memdescs,
    /// `None` where there is none (every size but 8 bytes).
    fn memdesc_cache_info() -> Option<SlabInfo> {
        None
    }
}

/// `or` of `mask` into `word` as a uniprocessor kernel's `set_bit` compiles
/// it: one read-modify-write instruction without `lock` on x86_64 (a load
/// and a store elsewhere, and under Miri).
///
/// # Safety
/// The caller excludes every other writer of `word`, or a concurrent write
/// would be lost.
#[inline(always)]
pub(super) unsafe fn or_unlocked(word: &AtomicU64, mask: u64) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: the address is `word`'s, aligned and live for the borrow;
    // the instruction reads and writes only those 8 bytes, and an aligned
    // `or` is single-copy atomic for a concurrent reader, so it behaves as
    // a relaxed load and store. The caller excludes other writers.
    unsafe {
        std::arch::asm!(
            "or qword ptr [{word}], {mask}",
            word = in(reg) word.as_ptr(),
            mask = in(reg) mask,
            options(nostack),
        );
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    {
        use std::sync::atomic::Ordering::Relaxed;
        word.store(word.load(Relaxed) | mask, Relaxed);
    }
}

/// `and` of `mask` into `word` without `lock`; see [`or_unlocked`].
///
/// # Safety
/// As for [`or_unlocked`].
#[inline(always)]
pub(super) unsafe fn and_unlocked(word: &AtomicU64, mask: u64) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: as in `or_unlocked`.
    unsafe {
        std::arch::asm!(
            "and qword ptr [{word}], {mask}",
            word = in(reg) word.as_ptr(),
            mask = in(reg) mask,
            options(nostack),
        );
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    {
        use std::sync::atomic::Ordering::Relaxed;
        word.store(word.load(Relaxed) & mask, Relaxed);
    }
}

/// The flag-word methods of [`BuddyPage`] for a layout whose page flags sit
/// in an `AtomicU64` field of the page (32 and 16 bytes), written once:
/// `PageX`, the atomic `SetPageX`/`ClearPageX` (`lock or`/`lock and`), the
/// non-atomic `__SetPageX` forms (load + store), the uniprocessor
/// `set_bit`, and the user flags. Expanded inside the layout's `unsafe impl
/// BuddyPage`, whose safety argument covers the field.
macro_rules! flags_word_ops {
    ($field:ident) => {
        #[inline(always)]
        fn test(&self, flag: PageFlag) -> bool {
            self.$field.load(Relaxed) & flag.mask() != 0
        }
        #[inline(always)]
        fn flags(&self) -> u64 {
            self.$field.load(Relaxed)
        }
        #[inline(always)]
        unsafe fn set(&self, flag: PageFlag) {
            self.$field.fetch_or(flag.mask(), Relaxed);
        }
        #[inline(always)]
        unsafe fn clear(&self, flag: PageFlag) {
            self.$field.fetch_and(!flag.mask(), Relaxed);
        }
        #[inline(always)]
        unsafe fn set_nonatomic(&self, flag: PageFlag) {
            let v = self.$field.load(Relaxed);
            self.$field.store(v | flag.mask(), Relaxed);
        }
        #[inline(always)]
        unsafe fn clear_nonatomic(&self, flag: PageFlag) {
            let v = self.$field.load(Relaxed);
            self.$field.store(v & !flag.mask(), Relaxed);
        }
        #[inline(always)]
        unsafe fn set_unlocked(&self, flag: PageFlag) {
            // SAFETY: the caller excludes other writers of the flags word.
            unsafe { buddy_page::or_unlocked(&self.$field, flag.mask()) }
        }
        #[inline(always)]
        unsafe fn clear_unlocked(&self, flag: PageFlag) {
            // SAFETY: as for `set_unlocked`.
            unsafe { buddy_page::and_unlocked(&self.$field, !flag.mask()) }
        }
        #[inline(always)]
        fn set_user(&self, flag: UserFlag) {
            self.$field.fetch_or(PageFlag::from(flag).mask(), Relaxed);
        }
        #[inline(always)]
        fn clear_user(&self, flag: UserFlag) {
            self.$field.fetch_and(!PageFlag::from(flag).mask(), Relaxed);
        }
    };
}
pub(super) use flags_word_ops;

/// The list-link methods of [`BuddyPage`] for a layout whose listed pages
/// keep their links in a `struct buddy` reached through the memdesc word
/// (16 and 8 bytes), written once: `lru_next`/`lru_prev` read the
/// descriptor's links (null on a detached page), `set_lru_next` and
/// `set_lru_prev` write them. Expanded inside the layout's `unsafe impl
/// BuddyPage`; the layout has `buddy_desc(&self) -> Option<&Desc>` and the
/// descriptor `next`/`prev` `AtomicPtr<Self>` fields.
macro_rules! desc_links_ops {
    () => {
        #[inline(always)]
        fn lru_next(&self) -> *mut Self {
            self.buddy_desc()
                .map_or(null_mut(), |d| d.next.load(Relaxed))
        }
        #[inline(always)]
        fn lru_prev(&self) -> *mut Self {
            self.buddy_desc()
                .map_or(null_mut(), |d| d.prev.load(Relaxed))
        }
        #[inline(always)]
        unsafe fn set_lru_next(&self, next: *mut Self) {
            let desc = self.buddy_desc();
            debug_assert!(desc.is_some() || next.is_null(), "linking a detached page");
            if let Some(d) = desc {
                d.next.store(next, Relaxed);
            }
        }
        #[inline(always)]
        unsafe fn set_lru_prev(&self, prev: *mut Self) {
            let desc = self.buddy_desc();
            debug_assert!(desc.is_some() || prev.is_null(), "linking a detached page");
            if let Some(d) = desc {
                d.prev.store(prev, Relaxed);
            }
        }
    };
}
pub(super) use desc_links_ops;
