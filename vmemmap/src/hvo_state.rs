//! The model's HVO bookkeeping, below both the model that holds it and
//! the remap code ([`crate::hvo`]) that keeps it: which folios are
//! optimised, the shared tail pages of 2026's layout, the memmap PMDs
//! split so far, and the outcome counts.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use sparsemem::hvo::HvoLayout;

/// Outcomes of the model's HVO operations (for the lab and the tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HvoCounts {
    /// Folios optimised.
    pub optimized: u64,
    /// Folios restored.
    pub restored: u64,
    /// Vmemmap pages freed (holes punched).
    pub pages_freed: u64,
    /// Vmemmap pages allocated back.
    pub pages_restored: u64,
    /// Memmap PMDs split.
    pub pmd_splits: u64,
}

/// The model's HVO bookkeeping.
#[derive(Default)]
pub(crate) struct HvoState {
    inner: Mutex<HvoInner>,
}

/// What [`HvoState`]'s lock guards.
#[derive(Default)]
pub(crate) struct HvoInner {
    /// Optimised folios by head pfn: order and layout.
    pub(crate) folios: BTreeMap<u64, (u32, HvoLayout)>,
    /// 2026's shared tail pages: file offset by (order, zone, node).
    pub(crate) shared: BTreeMap<(u32, u8, u16), u64>,
    /// Memmap PMDs split so far, by offset.
    pub(crate) split: BTreeSet<usize>,
    /// What the operations did so far.
    pub(crate) counts: HvoCounts,
}

impl HvoState {
    /// The bookkeeping, locked (a poisoned lock is taken over as it is).
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, HvoInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}
