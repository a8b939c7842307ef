//! Compile-time variants of the allocator, chosen with type parameters so
//! an unused variant costs nothing on the hot path.
//!
//! - **Buddy tracking.** No-bitmap (2.6.11 onwards): a free block's head is
//!   marked `PageBuddy` with its order in `private`, and `page_is_buddy`
//!   reads the buddy's descriptor. Bitmap (2.6.9): one bit per buddy pair
//!   and order, toggled on every allocation and free; the bit says whether
//!   the buddy is free without touching its descriptor. pfnlab's bitmap
//!   variant still marks free heads (with the configured flag operations),
//!   because misuse detection needs it; the merge decision comes from the
//!   bitmap.
//! - **Flag operations.** Atomic RMW (`SetPageBuddy`, a `lock or`) or
//!   non-atomic load + store (`__SetPageBuddy`), correct here because the
//!   zone lock is held. Only the operations the 2004 patch changed go
//!   through the variant: the buddy marking (`PageBuddy`, once
//!   `PG_private`) in `__free_pages_bulk`, `expand` and `__rmqueue`. The
//!   per-CPU list marks are plain stores in every variant.
//! - **SMP or UP.** A uniprocessor kernel compiles `set_bit` without the
//!   `lock` prefix ([`Up`]): the "atomic" operations are then unlocked
//!   read-modify-writes, and so are the `PG_referenced` touches that stay
//!   atomic on SMP ([`Variant::set_bit`]).
//! - **Hole check.** `pfn_valid(buddy_pfn)` before looking at the buddy on
//!   every merge step (the old `CONFIG_HOLES_IN_ZONE`). This is where the
//!   memory model meets the allocator.

use sparsemem::{BuddyPage, PageFlag, UserFlag};
use std::fmt;

/// A variant's name as a value: which of the variant's choices it makes,
/// shown as [`Variant::name`] spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VariantName {
    bitmap: bool,
    atomic_flags: bool,
    smp: bool,
    hole_check: bool,
}

impl VariantName {
    /// The name of `V`.
    pub fn of<V: Variant + ?Sized>() -> VariantName {
        VariantName {
            bitmap: V::BITMAP,
            atomic_flags: V::ATOMIC_FLAGS,
            smp: V::SMP,
            hole_check: V::HOLE_CHECK,
        }
    }
}

impl fmt::Display for VariantName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}-{}{}",
            if self.bitmap { "bitmap" } else { "nobitmap" },
            match (self.atomic_flags, self.smp) {
                (true, true) => "atomic",
                (true, false) => "up",
                (false, _) => "nonatomic",
            },
            if self.hole_check { "+holecheck" } else { "" }
        )
    }
}

/// A set of compile-time choices. Implemented by [`Config`].
pub trait Variant: Send + Sync + 'static {
    /// Atomic (`true`) or non-atomic page-flag operations.
    const ATOMIC_FLAGS: bool;
    /// The 2.6.9 per-order bitmap (`true`) or the no-bitmap scheme.
    const BITMAP: bool;
    /// `pfn_valid` on the buddy before every merge step.
    const HOLE_CHECK: bool;
    /// A multiprocessor build (`true`): atomic flag operations carry the
    /// `lock` prefix. `false` models `CONFIG_SMP=n`, where they do not.
    const SMP: bool = true;

    /// A short name, e.g. `nobitmap-atomic+holecheck`.
    fn name() -> String {
        VariantName::of::<Self>().to_string()
    }

    /// Sets a flag with the variant's operation.
    ///
    /// # Safety
    /// The `Page` contract for the whole flags word: the caller owns the
    /// page (under the zone lock, or as the holder of an owned block).
    #[inline(always)]
    unsafe fn set<P: BuddyPage>(page: &P, flag: PageFlag) {
        // SAFETY: the caller's contract covers every form.
        unsafe {
            if Self::ATOMIC_FLAGS && Self::SMP {
                page.set(flag)
            } else if Self::ATOMIC_FLAGS {
                page.set_unlocked(flag)
            } else {
                page.set_nonatomic(flag)
            }
        }
    }

    /// Clears a flag with the variant's operation.
    ///
    /// # Safety
    /// As for [`Variant::set`].
    #[inline(always)]
    unsafe fn clear<P: BuddyPage>(page: &P, flag: PageFlag) {
        // SAFETY: the caller's contract covers every form.
        unsafe {
            if Self::ATOMIC_FLAGS && Self::SMP {
                page.clear(flag)
            } else if Self::ATOMIC_FLAGS {
                page.clear_unlocked(flag)
            } else {
                page.clear_nonatomic(flag)
            }
        }
    }

    /// `set_bit` on a flag outside the buddy's (`SetPageReferenced` from
    /// `mark_page_accessed`): atomic in every SMP variant, because the 2004
    /// patch did not touch it, and unlocked on [`Up`].
    ///
    /// # Safety
    /// On a UP variant, the [`Variant::set`] contract; none on SMP.
    #[inline(always)]
    unsafe fn set_bit<P: BuddyPage>(page: &P, flag: UserFlag) {
        if Self::SMP {
            page.set_user(flag);
        } else {
            // SAFETY: the caller excludes other writers on a UP variant.
            unsafe { page.set_unlocked(flag.into()) }
        }
    }

    /// `clear_bit` on a flag outside the buddy's; see
    /// [`Variant::set_bit`].
    ///
    /// # Safety
    /// As for [`Variant::set_bit`].
    #[inline(always)]
    unsafe fn clear_bit<P: BuddyPage>(page: &P, flag: UserFlag) {
        if Self::SMP {
            page.clear_user(flag);
        } else {
            // SAFETY: the caller excludes other writers on a UP variant.
            unsafe { page.clear_unlocked(flag.into()) }
        }
    }
}

/// The variant selected by three booleans.
#[derive(Debug, Clone, Copy, Default)]
pub struct Config<const ATOMIC_FLAGS: bool, const BITMAP: bool, const HOLE_CHECK: bool>;

impl<const A: bool, const B: bool, const H: bool> Variant for Config<A, B, H> {
    const ATOMIC_FLAGS: bool = A;
    const BITMAP: bool = B;
    const HOLE_CHECK: bool = H;
}

/// Today's kernel: no bitmap, non-atomic buddy marking under the zone lock,
/// no hole check.
pub type Kernel = Config<false, false, false>;
/// As [`Kernel`], with the `HOLES_IN_ZONE` check.
pub type KernelHoleCheck = Config<false, false, true>;
/// The 2.6.11 no-bitmap buddy with atomic flag operations.
pub type NoBitmapAtomic = Config<true, false, false>;
/// The 2.6.9 bitmap buddy.
pub type Bitmap = Config<false, true, false>;

/// The no-bitmap buddy built for one CPU (`CONFIG_SMP=n`): its atomic flag
/// operations are unlocked read-modify-writes, which is why the 2004
/// patch's seed saw no difference on UP. Only the flags change: pfnlab's
/// zone lock is still a locked compare-and-swap, where a UP kernel's
/// `spin_lock` only disables preemption.
#[derive(Debug, Clone, Copy, Default)]
pub struct Up;

impl Variant for Up {
    const ATOMIC_FLAGS: bool = true;
    const BITMAP: bool = false;
    const HOLE_CHECK: bool = false;
    const SMP: bool = false;
}

#[cfg(test)]
mod tests {
    use super::*;
    use sparsemem::{Page16, Page32, Page64};

    /// Every form of the flag operations changes its one bit and nothing
    /// else; the names say which form a variant uses.
    #[test]
    fn flag_operations_of_every_variant() {
        fn check<V: Variant>(name: &str) {
            at::<V, Page64>(name);
            at::<V, Page32>(name);
            at::<V, Page16>(name);
        }
        fn at<V: Variant, P: BuddyPage>(name: &str) {
            assert_eq!(V::name(), name);
            let page = P::default();
            // SAFETY: a local descriptor no other thread sees.
            unsafe {
                V::set(&page, PageFlag::Dirty);
                V::set(&page, PageFlag::Buddy);
                assert!(page.test(PageFlag::Buddy) && page.test(PageFlag::Dirty));
                V::clear(&page, PageFlag::Buddy);
                assert!(!page.test(PageFlag::Buddy) && page.test(PageFlag::Dirty));
                V::set_bit(&page, UserFlag::Referenced);
                assert!(page.test(PageFlag::Referenced));
                V::clear_bit(&page, UserFlag::Referenced);
                assert!(page.test(PageFlag::Dirty) && !page.test(PageFlag::Referenced));
                V::clear(&page, PageFlag::Dirty);
                assert_eq!(page.flags(), 0, "no other bit was touched");
            }
        }
        check::<Kernel>("nobitmap-nonatomic");
        check::<NoBitmapAtomic>("nobitmap-atomic");
        check::<Bitmap>("bitmap-nonatomic");
        check::<KernelHoleCheck>("nobitmap-nonatomic+holecheck");
        check::<Up>("nobitmap-up");
        const { assert!(!Up::SMP && Kernel::SMP) };
    }
}
