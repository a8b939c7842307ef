//! A plain reference for the validity semantics, written straight from their
//! definition and sharing no code with the models, for differential tests.
//!
//! - A pfn at or beyond `2^(MAX_PHYSMEM_BITS - PAGE_SHIFT)` is invalid.
//! - Section-based models: a section is early when a whole RAM page lies in
//!   it, and every pfn of an early section is valid; elsewhere a pfn is
//!   valid when its 2 MiB subsection holds hotplug memory.
//! - FLATMEM: valid exactly on `[lowest, highest)` of RAM/hotplug pfns.
//!
//! Hotplug follows the kernel: adding needs every subsection absent,
//! removing needs every subsection present, and a section left with no
//! present subsection disappears (early or not). Online state is per section
//! and never changes validity.

use std::collections::BTreeSet;

use crate::geometry::{Geometry, SUBSECTION_SHIFT};
use crate::layout::{Layout, RangeKind};
use crate::types::Pfn;

/// Which validity rule a model follows.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Semantics {
    /// FLATMEM: one span.
    Flat,
    /// Every section-based model.
    Section,
}

impl Semantics {
    /// The rule a model of this name follows.
    pub fn of_model(name: &str) -> Semantics {
        if name == "flat" {
            Semantics::Flat
        } else {
            Semantics::Section
        }
    }
}

/// The reference: sets of early sections, present subsections (global
/// subsection numbers) and online sections.
#[derive(Clone, Debug)]
pub struct Reference {
    geometry: Geometry,
    flat: (u64, u64),
    early: BTreeSet<u64>,
    present: BTreeSet<u64>,
    online: BTreeSet<u64>,
}

impl Reference {
    /// The reference state of a freshly built model of `layout`.
    pub fn new(layout: &Layout) -> Reference {
        let g = *layout.geometry();
        let ps = g.page_size();
        let section_bytes = 1u64 << g.section_size_bits();
        let mut r = Reference {
            geometry: g,
            flat: (u64::MAX, 0),
            early: BTreeSet::new(),
            present: BTreeSet::new(),
            online: BTreeSet::new(),
        };
        for range in layout.ranges() {
            if range.kind == RangeKind::Reserved {
                continue;
            }
            // Whole pages, in bytes: [first_byte, end_byte).
            let first_byte = range.start.get().div_ceil(ps) * ps;
            let end_byte = range.end.get() / ps * ps;
            if first_byte >= end_byte {
                continue;
            }
            r.flat.0 = r.flat.0.min(first_byte / ps);
            r.flat.1 = r.flat.1.max(end_byte / ps);
            for sub in (first_byte >> SUBSECTION_SHIFT)..=((end_byte - 1) >> SUBSECTION_SHIFT) {
                r.present.insert(sub);
            }
            for sec in (first_byte / section_bytes)..=((end_byte - 1) / section_bytes) {
                if range.kind == RangeKind::Ram {
                    r.early.insert(sec);
                }
                r.online.insert(sec);
            }
        }
        r
    }

    fn section_of(&self, pfn: u64) -> u64 {
        pfn >> (self.geometry.section_size_bits() - self.geometry.page_shift())
    }

    fn subsection_of(&self, pfn: u64) -> u64 {
        pfn >> (SUBSECTION_SHIFT - self.geometry.page_shift())
    }

    /// The expected `pfn_valid`.
    pub fn pfn_valid(&self, semantics: Semantics, pfn: Pfn) -> bool {
        let pfn = pfn.get();
        if pfn >= self.geometry.max_pfn().get() {
            return false;
        }
        match semantics {
            Semantics::Flat => self.flat.0 <= pfn && pfn < self.flat.1,
            Semantics::Section => {
                self.early.contains(&self.section_of(pfn))
                    || self.present.contains(&self.subsection_of(pfn))
            }
        }
    }

    /// The expected `pfn_to_online_page(pfn).is_some()` for section models.
    pub fn pfn_online(&self, pfn: Pfn) -> bool {
        self.pfn_valid(Semantics::Section, pfn) && self.online.contains(&self.section_of(pfn.get()))
    }

    fn subsections(&self, start: Pfn, nr_pages: u64) -> Option<std::ops::Range<u64>> {
        let per = self.geometry.pages_per_subsection();
        let end = start.get().checked_add(nr_pages)?;
        let aligned =
            nr_pages > 0 && start.get().is_multiple_of(per) && nr_pages.is_multiple_of(per);
        (aligned && end <= self.geometry.max_pfn().get())
            .then(|| self.subsection_of(start.get())..self.subsection_of(end))
    }

    fn sections_of_subsections(&self, subs: &std::ops::Range<u64>) -> BTreeSet<u64> {
        let shift = self.geometry.section_size_bits() - SUBSECTION_SHIFT;
        subs.clone().map(|s| s >> shift).collect()
    }

    fn section_has_present(&self, sec: u64) -> bool {
        let shift = self.geometry.section_size_bits() - SUBSECTION_SHIFT;
        self.present
            .range(sec << shift..(sec + 1) << shift)
            .next()
            .is_some()
    }

    /// Hot add; `false` (and no change) when the model must refuse it.
    pub fn hot_add(&mut self, start: Pfn, nr_pages: u64) -> bool {
        let Some(subs) = self.subsections(start, nr_pages) else {
            return false;
        };
        if subs.clone().any(|s| self.present.contains(&s)) {
            return false;
        }
        self.present.extend(subs);
        true
    }

    /// Hot remove; `false` (and no change) when the model must refuse it.
    pub fn hot_remove(&mut self, start: Pfn, nr_pages: u64) -> bool {
        let Some(subs) = self.subsections(start, nr_pages) else {
            return false;
        };
        if !subs.clone().all(|s| self.present.contains(&s)) {
            return false;
        }
        for s in subs.clone() {
            self.present.remove(&s);
        }
        for sec in self.sections_of_subsections(&subs) {
            if !self.section_has_present(sec) {
                self.early.remove(&sec);
                self.online.remove(&sec);
            }
        }
        true
    }

    /// Online/offline; `false` (and no change) when some pfn is invalid.
    pub fn set_online(&mut self, start: Pfn, nr_pages: u64, online: bool) -> bool {
        let Some(end) = start.get().checked_add(nr_pages) else {
            return false;
        };
        if nr_pages == 0 || end > self.geometry.max_pfn().get() {
            return false;
        }
        let per = self.geometry.pages_per_subsection();
        let mut pfn = start.get();
        while pfn < end {
            if !self.pfn_valid(Semantics::Section, Pfn::new(pfn)) {
                return false;
            }
            pfn = (pfn | (per - 1)) + 1;
        }
        for sec in self.section_of(start.get())..=self.section_of(end - 1) {
            if online {
                if self.section_has_present(sec) {
                    self.online.insert(sec);
                }
            } else {
                self.online.remove(&sec);
            }
        }
        true
    }
}
