//! Kernel eras: which of the allocator's mechanisms exist, so a question can
//! be asked of the kernel it belongs to and answered beside today's.
//!
//! | era | free lists | per-CPU `high` | buddy tracking (the seed's) |
//! |---|---|---|---|
//! | 2.6.9 | one per order | `6 × batch` (`pageset_set_batch`) | per-order bitmap ([`Bitmap`](crate::Bitmap)) |
//! | 2.6.23 | one per order | `6 × batch` | no bitmap |
//! | 5.13 | per order and migratetype, fallback and stealing; a pageblock lookup per free | `6 × batch` (the last release before `zone_highsize`) | no bitmap |
//! | 6.18 | as 5.13 | `zone_highsize`: the zone's low watermark (or its managed pages over `percpu_pagelist_high_fraction`) split over the node's CPUs, at least `4 × batch` | no bitmap |
//!
//! The per-CPU list shape follows the era too (see [`PerCpu`](crate::PerCpu)):
//! one order-0 list, one per migratetype (2.6.25 to 5.13), or one per
//! migratetype and order with a `pcp->lock` (6.18). A freed block whose
//! next-order buddy is free goes to the tail of its list from 2.6.35
//! (`buddy_merge_likely`). Watermark checks, the GFP mask (6.18's bits) and
//! page preparation with its checks on free are the same in every era.
//!
//! The buddy-tracking variant stays a type parameter
//! ([`Variant`](crate::Variant)), and an era refuses a variant it did not
//! have ([`Era::check_variant`]): the bitmap and atomic flag operations
//! exist in 2.6.9 only, the hole check up to 5.13. Memory models and
//! hotplug are accepted in every era on purpose: what a memory model would
//! have cost in an older allocator is the lab's question (the 2006 thread
//! asked it of a virtual memmap that 2.6.17 did not have).

use std::fmt;

use crate::variant::{Variant, VariantName};

/// A kernel release whose allocator pfnlab can model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Era {
    /// Linux 2.6.9 (2004): the bitmap buddy's last release.
    V2_6_9,
    /// Linux 2.6.23 (2007): the zone-lock discussion's kernel.
    V2_6_23,
    /// Linux 5.13 (2021): the bulk page allocator's first release.
    V5_13,
    /// Linux 6.18: today's.
    #[default]
    V6_18,
}

impl Era {
    /// Every era, oldest first.
    pub const ALL: [Era; 4] = [Era::V2_6_9, Era::V2_6_23, Era::V5_13, Era::V6_18];

    /// The release as written (`6.18`).
    pub fn name(self) -> &'static str {
        match self {
            Era::V2_6_9 => "2.6.9",
            Era::V2_6_23 => "2.6.23",
            Era::V5_13 => "5.13",
            Era::V6_18 => "6.18",
        }
    }

    /// Parses a release name, or says which exist.
    pub fn parse(s: &str) -> Result<Era, String> {
        Era::ALL.into_iter().find(|e| e.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Era::ALL.iter().map(|e| e.name()).collect();
            format!("unknown era `{s}` (known: {})", names.join(", "))
        })
    }

    /// Whether pages are grouped by mobility: free lists per migratetype and
    /// a pageblock lookup on every free (Linux 2.6.24 on).
    pub fn has_migratetypes(self) -> bool {
        self >= Era::V5_13
    }

    /// Whether `pcp->high` comes from the zone's low watermark
    /// (`zone_highsize`, Linux 5.14 on) rather than `6 × batch`.
    pub fn pcp_high_from_watermark(self) -> bool {
        self >= Era::V6_18
    }

    /// Whether the per-CPU lists hold blocks of orders up to
    /// `PAGE_ALLOC_COSTLY_ORDER` and of `pageblock_order` (THP), one list per
    /// migratetype and order (5.14 on), rather than order-0 pages only.
    pub fn pcp_high_orders(self) -> bool {
        self >= Era::V6_18
    }

    /// Whether a CPU's `pcp->high` is tuned between `high_min` and
    /// `high_max` at run time (Linux 6.7 on): raised on refill, lowered
    /// while the zone is below its high watermark, decayed by the vmstat
    /// work.
    pub fn pcp_high_tuning(self) -> bool {
        self >= Era::V6_18
    }

    /// Whether the per-CPU lists are guarded by `pcp->lock`, tried with
    /// `pcp_spin_trylock` (6.0 on), rather than by disabling interrupts.
    pub fn pcp_lock(self) -> bool {
        self >= Era::V6_18
    }

    /// Whether the kernel has `alloc_pages_nolock` and `free_pages_nolock`,
    /// the allocation and free for any context that only ever try a lock
    /// (Linux 6.15 on: `try_alloc_pages`, commit 97769a53f117, renamed
    /// `alloc_pages_nolock` in 6.16; `free_pages_nolock`, commit
    /// 8c57b687e833).
    pub fn has_alloc_nolock(self) -> bool {
        self >= Era::V6_18
    }

    /// Whether pfnlab models this era's per-call entry of the single-page
    /// path ([`Mechanisms::entry`]): the 5.13 and 6.18 allocators'. The
    /// 2.6 eras' entry (no scoped GFP constraints, a different
    /// `zone_statistics`) is not modelled: their questions are the buddy's
    /// own.
    pub fn models_entry(self) -> bool {
        self >= Era::V5_13
    }

    /// Whether a freed block whose next-order buddy is free goes to the
    /// tail of its list (`buddy_merge_likely`; the check came with 2.6.35).
    pub fn has_buddy_merge_likely(self) -> bool {
        self >= Era::V5_13
    }

    /// Whether variant `V`'s mechanisms existed in this era, or why not.
    ///
    /// - The per-order buddy bitmap and atomic flag operations under the
    ///   zone lock are 2.6.9's and the 2004 no-bitmap patch's variants of
    ///   it; the no-bitmap buddy was merged with non-atomic flag operations,
    ///   so every later era refuses both.
    /// - The hole check (`CONFIG_HOLES_IN_ZONE`'s `pfn_valid` on the buddy)
    ///   existed until 5.13 and was removed in 5.14.
    pub fn check_variant<V: Variant>(self) -> Result<(), NotInEra> {
        let gone = if V::BITMAP && self > Era::V2_6_9 {
            Some(Gone::BuddyBitmap)
        } else if V::ATOMIC_FLAGS && self > Era::V2_6_9 {
            Some(Gone::AtomicBuddyFlags)
        } else if V::HOLE_CHECK && self > Era::V5_13 {
            Some(Gone::HolesInZone)
        } else {
            None
        };
        match gone {
            Some(gone) => Err(NotInEra::Variant {
                variant: VariantName::of::<V>(),
                era: self,
                gone,
            }),
            None => Ok(()),
        }
    }
}

/// A variant's mechanism that ended before the era asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gone {
    /// The per-order buddy bitmap, which ended with 2.6.9.
    BuddyBitmap,
    /// Atomic `PageBuddy` operations under the zone lock: the 2004 patch's
    /// variant against 2.6.9.
    AtomicBuddyFlags,
    /// `CONFIG_HOLES_IN_ZONE`'s check, removed in 5.14.
    HolesInZone,
}

/// Something asked of an era that did not have it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotInEra {
    /// A variant whose mechanism had ended by `era`.
    Variant {
        /// The variant.
        variant: VariantName,
        /// The era asked for.
        era: Era,
        /// What had gone.
        gone: Gone,
    },
    /// Deferred struct page init, which arrived in 4.2.
    DeferredInit {
        /// The era asked for.
        era: Era,
    },
    /// `percpu_pagelist_high_fraction`, which arrived in 5.14.
    HighFraction {
        /// The era asked for.
        era: Era,
    },
    /// `alloc_pages_nolock` and `free_pages_nolock`, which arrived in 6.15.
    AllocNolock {
        /// The era asked for.
        era: Era,
    },
}

impl fmt::Display for NotInEra {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            NotInEra::Variant { variant, era, gone } => {
                write!(f, "variant {variant} does not exist in era {era}: ")?;
                f.write_str(match gone {
                    Gone::BuddyBitmap => {
                        "the per-order buddy bitmap ended with 2.6.9 (use era 2.6.9)"
                    }
                    Gone::AtomicBuddyFlags => {
                        "atomic PageBuddy operations under the zone lock are the 2004 patch's variant against 2.6.9 (use era 2.6.9)"
                    }
                    Gone::HolesInZone => {
                        "CONFIG_HOLES_IN_ZONE was removed in 5.14 (use era 5.13 or older)"
                    }
                })
            }
            NotInEra::DeferredInit { era } => write!(
                f,
                "deferred struct page init arrived in Linux 4.2; era {era} initialises every struct page at boot"
            ),
            NotInEra::HighFraction { era } => write!(
                f,
                "percpu_pagelist_high_fraction arrived in Linux 5.14; era {era} sizes pcp->high as 6 × batch"
            ),
            NotInEra::AllocNolock { era } => write!(
                f,
                "alloc_pages_nolock and free_pages_nolock arrived in Linux 6.15; era {era} has no allocation that only tries its locks"
            ),
        }
    }
}

impl std::error::Error for NotInEra {}

/// Which of the era's allocation-path mechanisms run. All of them by
/// default; `pfnlab bench breakdown` turns them off one at a time to see
/// what each costs. Turning one off never turns on something the era did
/// not have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Mechanisms {
    /// Grouping by mobility: free and per-CPU lists per migratetype and the
    /// pageblock lookup (`get_pfnblock_migratetype`) on every free.
    pub pageblock: bool,
    /// `prepare_alloc_pages`' alloc flags, `zone_watermark_fast` on every
    /// allocation, `lowmem_reserve`, and the `NR_FREE_PAGES` counter with
    /// its per-CPU deltas. Without it the zone limit and migratetype still
    /// come from the GFP mask, and [`crate::Zone::nr_free_pages_state`] is
    /// not kept.
    pub watermarks: bool,
    /// Page preparation: `prep_compound_page` for `__GFP_COMP`, the
    /// bad-page checks and flag clearing of `free_pages_prepare`, and
    /// `buddy_merge_likely`. The refcount and order pfnlab keeps in every
    /// allocated head (its double-free detection) stay.
    pub page_prep: bool,
    /// The kernel's per-call entry of the single-page path, in the eras
    /// that model it ([`Era::models_entry`]): `current_gfp_context`, the
    /// preferred zone, `zone_statistics`' NUMA counters, and the entry
    /// functions as calls the kernel does not inline (`__alloc_pages`,
    /// `get_page_from_freelist`, `__free_pages`, `free_unref_page` or
    /// `__free_frozen_pages`). See [`PerCpu`](crate::PerCpu)'s `entry`
    /// module documentation.
    pub entry: bool,
}

impl Mechanisms {
    /// Everything the era had.
    pub const ALL: Mechanisms = Mechanisms {
        pageblock: true,
        watermarks: true,
        page_prep: true,
        entry: true,
    };

    /// Bookkeeping only: lists, splits and merges, per-CPU batching, and
    /// pfnlab's misuse checks.
    pub const BOOKKEEPING: Mechanisms = Mechanisms {
        pageblock: false,
        watermarks: false,
        page_prep: false,
        entry: false,
    };
}

impl Default for Mechanisms {
    fn default() -> Mechanisms {
        Mechanisms::ALL
    }
}

/// What the allocation path does, resolved once from the era and the
/// mechanisms asked for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Path {
    pub(crate) migratetypes: bool,
    /// `!page_group_by_mobility_disabled`: requests carry their own
    /// migratetype (else every one is Movable, the type memmap init gives
    /// every pageblock, so all memory behaves as one type).
    pub(crate) mobility: bool,
    pub(crate) watermarks: bool,
    pub(crate) page_prep: bool,
    pub(crate) merge_likely: bool,
    pub(crate) pcp_high_orders: bool,
    pub(crate) pcp_lock: bool,
    pub(crate) pcp_high_tuning: bool,
    /// `alloc_pages_nolock` and `free_pages_nolock` exist (6.15 on).
    pub(crate) alloc_nolock: bool,
    /// The per-call entry ([`Mechanisms::entry`]).
    pub(crate) entry: bool,
    /// 5.13's NUMA counters: 16-bit per-CPU diffs folded at
    /// `NUMA_STATS_THRESHOLD` (5.14 made them plain event counters).
    pub(crate) numa_stat_diffs: bool,
    /// The zone lock's kind ([`Options::zone_lock`](crate::Options::zone_lock)).
    pub(crate) zone_lock: crate::ZoneLockKind,
    /// The `MIGRATE_HIGHATOMIC` reserve's rules (`zone::highatomic`).
    pub(crate) highatomic: crate::types::HighatomicRules,
}

impl Path {
    pub(crate) fn new(era: Era, m: Mechanisms) -> Path {
        Path {
            migratetypes: era.has_migratetypes() && m.pageblock,
            mobility: era.has_migratetypes() && m.pageblock,
            watermarks: m.watermarks,
            page_prep: m.page_prep,
            merge_likely: era.has_buddy_merge_likely() && m.page_prep,
            pcp_high_orders: era.pcp_high_orders(),
            pcp_lock: era.pcp_lock(),
            pcp_high_tuning: era.pcp_high_tuning() && m.watermarks,
            alloc_nolock: era.has_alloc_nolock(),
            entry: era.models_entry() && m.entry,
            numa_stat_diffs: era <= Era::V5_13,
            zone_lock: crate::ZoneLockKind::Unfair,
            highatomic: match era {
                _ if !(era.has_migratetypes() && m.pageblock && m.watermarks) => {
                    crate::types::HighatomicRules::None
                }
                Era::V5_13 => crate::types::HighatomicRules::Harder,
                _ => crate::types::HighatomicRules::HighAtomic,
            },
        }
    }
}

/// The per-CPU fast path's compiled form: each run-time choice the path
/// would otherwise test on every call, folded into one byte that the
/// allocator rewrites whenever a choice changes
/// ([`Allocator::update_pcp_form`](crate::Allocator::update_pcp_form)), so that a call
/// reads one byte and jumps to a form compiled without the others' tests,
/// as a kernel patches a static key's jump into its code once.
///
/// The choices are bits: [`PcpForm::TUNED`], 6.7's tuning of `pcp->high`
/// (fixed by the era and the mechanisms), [`PcpForm::DEFERRED`],
/// deferred struct page init's grow on a miss (the `deferred_pages` key,
/// which `page_alloc_init_late` turns off), and [`PcpForm::ENTRY`], the
/// kernel's per-call entry (fixed by the era and the mechanisms).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PcpForm(u8);

impl PcpForm {
    /// 6.7's tuning of `pcp->high` is in the path.
    pub(crate) const TUNED: u8 = 1 << 0;
    /// `deferred_grow_zone` on a miss is in the path.
    pub(crate) const DEFERRED: u8 = 1 << 1;
    /// The kernel's per-call entry is in the path.
    pub(crate) const ENTRY: u8 = 1 << 2;

    /// The form for `path` with the `deferred_pages` key as given.
    pub(crate) fn new(path: &Path, deferred_pages: bool) -> PcpForm {
        let bit = |on: bool, b: u8| if on { b } else { 0 };
        PcpForm(
            bit(path.pcp_high_tuning, Self::TUNED)
                | bit(deferred_pages, Self::DEFERRED)
                | bit(path.entry, Self::ENTRY),
        )
    }

    /// The byte the path dispatches on.
    #[inline(always)]
    pub(crate) fn bits(self) -> u8 {
        self.0
    }
}

impl fmt::Display for Era {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_order() {
        for e in Era::ALL {
            assert_eq!(Era::parse(e.name()), Ok(e));
        }
        assert_eq!(
            Era::parse("3.0").unwrap_err(),
            "unknown era `3.0` (known: 2.6.9, 2.6.23, 5.13, 6.18)"
        );
        assert!(Era::V2_6_9 < Era::V6_18 && Era::default() == Era::V6_18);
        assert!(!Era::V5_13.pcp_high_from_watermark() && Era::V6_18.pcp_high_from_watermark());
    }

    #[test]
    fn the_form_byte_holds_each_choice() {
        let no_entry = Mechanisms {
            entry: false,
            ..Mechanisms::ALL
        };
        let tuned = Path::new(Era::V6_18, no_entry);
        let untuned = Path::new(Era::V5_13, no_entry);
        assert_eq!(PcpForm::new(&tuned, false).bits(), PcpForm::TUNED);
        assert_eq!(
            PcpForm::new(&tuned, true).bits(),
            PcpForm::TUNED | PcpForm::DEFERRED
        );
        assert_eq!(PcpForm::new(&untuned, true).bits(), PcpForm::DEFERRED);
        assert_eq!(PcpForm::new(&untuned, false).bits(), 0);
        // Bookkeeping only has no watermarks, so no tuning either.
        let bookkeeping = Path::new(Era::V6_18, Mechanisms::BOOKKEEPING);
        assert_eq!(PcpForm::new(&bookkeeping, false).bits(), 0);
        // The entry is 5.13's and 6.18's only.
        let all = |era| PcpForm::new(&Path::new(era, Mechanisms::ALL), false).bits();
        assert_eq!(all(Era::V6_18), PcpForm::TUNED | PcpForm::ENTRY);
        assert_eq!(all(Era::V5_13), PcpForm::ENTRY);
        assert_eq!(all(Era::V2_6_23), 0);
    }

    #[test]
    fn variants_exist_only_in_their_eras() {
        use crate::{Bitmap, Kernel, KernelHoleCheck, NoBitmapAtomic, Up};
        for e in Era::ALL {
            assert!(e.check_variant::<Kernel>().is_ok());
            assert_eq!(e.check_variant::<Up>().is_ok(), e == Era::V2_6_9);
            assert_eq!(e.check_variant::<Bitmap>().is_ok(), e == Era::V2_6_9);
            assert_eq!(
                e.check_variant::<NoBitmapAtomic>().is_ok(),
                e == Era::V2_6_9
            );
            assert_eq!(
                e.check_variant::<KernelHoleCheck>().is_ok(),
                e <= Era::V5_13
            );
        }
        for e in Era::ALL {
            assert_eq!(e.has_alloc_nolock(), e == Era::V6_18);
        }
        let why = Era::V6_18.check_variant::<KernelHoleCheck>().unwrap_err();
        assert!(why.to_string().contains("removed in 5.14"), "{why}");
    }
}
