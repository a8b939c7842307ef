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
//!   zone lock is held.
//! - **Hole check.** `pfn_valid(buddy_pfn)` before looking at the buddy on
//!   every merge step (the old `CONFIG_HOLES_IN_ZONE`). This is where the
//!   memory model meets the allocator.

use sparsemem::{Page, PageFlag};

/// A set of compile-time choices. Implemented by [`Config`].
pub trait Variant: Send + Sync + 'static {
    /// Atomic (`true`) or non-atomic page-flag operations.
    const ATOMIC_FLAGS: bool;
    /// The 2.6.9 per-order bitmap (`true`) or the no-bitmap scheme.
    const BITMAP: bool;
    /// `pfn_valid` on the buddy before every merge step.
    const HOLE_CHECK: bool;

    /// A short name, e.g. `nobitmap-atomic+holecheck`.
    fn name() -> String {
        format!(
            "{}-{}{}",
            if Self::BITMAP { "bitmap" } else { "nobitmap" },
            if Self::ATOMIC_FLAGS {
                "atomic"
            } else {
                "nonatomic"
            },
            if Self::HOLE_CHECK { "+holecheck" } else { "" }
        )
    }

    /// Sets a flag with the variant's operation.
    ///
    /// # Safety
    /// The `Page` contract for the whole flags word: the caller owns the
    /// page (under the zone lock, or as the holder of an owned block).
    #[inline(always)]
    unsafe fn set(page: &Page, flag: PageFlag) {
        // SAFETY: the caller's contract covers both forms.
        unsafe {
            if Self::ATOMIC_FLAGS {
                page.set(flag)
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
    unsafe fn clear(page: &Page, flag: PageFlag) {
        // SAFETY: the caller's contract covers both forms.
        unsafe {
            if Self::ATOMIC_FLAGS {
                page.clear(flag)
            } else {
                page.clear_nonatomic(flag)
            }
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
