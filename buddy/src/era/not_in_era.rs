//! What an era refuses: a variant whose mechanism had gone by then, or a
//! mechanism or sysctl that arrived later, each with the release that
//! added or removed it.

use std::fmt;

use super::Era;
use crate::variant::VariantName;

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
    /// `vm.defrag_mode`, which arrived in 6.15.
    DefragMode {
        /// The era asked for.
        era: Era,
    },
    /// `kernelcore=` or `movablecore=`, which arrived in 2.6.23 (their
    /// percentages in 4.17).
    MovableCore {
        /// The era asked for.
        era: Era,
        /// Whether it was a percentage the era did not take.
        percent: bool,
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
            NotInEra::MovableCore {
                era,
                percent: false,
            } => write!(
                f,
                "kernelcore= and movablecore= arrived with ZONE_MOVABLE in Linux 2.6.23; era {era} has no movable zone"
            ),
            NotInEra::MovableCore { era, percent: true } => write!(
                f,
                "kernelcore= and movablecore= take a percentage from Linux 4.17; era {era} takes a size"
            ),
            NotInEra::AllocNolock { era } => write!(
                f,
                "alloc_pages_nolock and free_pages_nolock arrived in Linux 6.15; era {era} has no allocation that only tries its locks"
            ),
            NotInEra::DefragMode { era } => write!(
                f,
                "vm.defrag_mode arrived in Linux 6.15; era {era} falls back to another migratetype's pageblock without it (use era 6.18)"
            ),
        }
    }
}

impl std::error::Error for NotInEra {}
