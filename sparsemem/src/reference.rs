//! A plain reference for the validity semantics, written straight from their
//! definition and sharing no code with the models, for differential tests.
//!
//! - A pfn at or beyond `2^(MAX_PHYSMEM_BITS - PAGE_SHIFT)` is invalid.
//! - FLATMEM: valid on the boot-memory span rounded out to max-order
//!   blocks (`alloc_node_mem_map`); no hotplug.
//! - SPARSEMEM without VMEMMAP: valid on every present section, whole
//!   (`pfn_section_valid` is 1); a section is present when any memory lies
//!   in it; memory comes and goes in whole memory blocks (one section).
//! - VMEMMAP: every pfn of an early section (one holding a whole RAM page)
//!   is valid; elsewhere a pfn is valid when its 2 MiB subsection is
//!   present. Device memory comes and goes in subsections.
//!
//! `pfn_to_online_page` (section models): the section is online, the pfn's
//! subsection present, and the pfn not device memory. Boot memory is online
//! from the start, hot-added memory is not, device memory never. Removing
//! memory needs every subsection present, and a section left with none
//! disappears (early or not).

use std::collections::BTreeSet;
use std::ops::Range;

use crate::geometry::{Geometry, SUBSECTION_SHIFT};
use crate::layout::{Layout, RangeKind};
use crate::types::Pfn;

/// Which validity rule a model follows.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Semantics {
    /// FLATMEM: one span.
    Flat,
    /// SPARSEMEM without VMEMMAP: whole sections.
    Section,
    /// SPARSEMEM_VMEMMAP: early sections whole, subsections elsewhere.
    Vmemmap,
}

impl Semantics {
    /// The rule a model of this name follows.
    pub fn of_model(name: &str) -> Semantics {
        match name {
            "flat" => Semantics::Flat,
            "sparse" | "sparse-extreme" => Semantics::Section,
            _ => Semantics::Vmemmap,
        }
    }
}

/// The reference: the flat span, and sets of early sections, present and
/// device subsections (global numbers) and online sections.
#[derive(Clone, Debug)]
pub struct Reference {
    geometry: Geometry,
    semantics: Semantics,
    flat: (u64, u64),
    early: BTreeSet<u64>,
    present: BTreeSet<u64>,
    device: BTreeSet<u64>,
    online: BTreeSet<u64>,
}

impl Reference {
    /// The reference state of a freshly built model of `layout` that
    /// follows `semantics`.
    pub fn new(layout: &Layout, semantics: Semantics) -> Reference {
        let g = *layout.geometry();
        let ps = g.page_size();
        let mut r = Reference {
            geometry: g,
            semantics,
            flat: (u64::MAX, 0),
            early: BTreeSet::new(),
            present: BTreeSet::new(),
            device: BTreeSet::new(),
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
            let subs = (first_byte >> SUBSECTION_SHIFT)..((end_byte - 1) >> SUBSECTION_SHIFT) + 1;
            if range.kind == RangeKind::Ram {
                r.flat.0 = r.flat.0.min(first_byte / ps);
                r.flat.1 = r.flat.1.max(end_byte / ps);
            }
            if range.kind == RangeKind::Device {
                r.device.extend(subs.clone());
            }
            for sec in r.sections_of(&subs) {
                if range.kind == RangeKind::Ram {
                    r.early.insert(sec);
                    r.online.insert(sec);
                }
                if semantics == Semantics::Section {
                    r.present.extend(r.subsections_of_section(sec));
                }
            }
            r.present.extend(subs);
        }
        let block = g.max_order_nr_pages();
        r.flat = (
            r.flat.0 & !(block - 1),
            r.flat.1.next_multiple_of(block).min(g.max_pfn().get()),
        );
        r
    }

    fn section_of(&self, pfn: u64) -> u64 {
        pfn >> (self.geometry.section_size_bits() - self.geometry.page_shift())
    }

    fn subsection_of(&self, pfn: u64) -> u64 {
        pfn >> (SUBSECTION_SHIFT - self.geometry.page_shift())
    }

    fn sections_of(&self, subs: &Range<u64>) -> BTreeSet<u64> {
        let shift = self.geometry.section_size_bits() - SUBSECTION_SHIFT;
        subs.clone().map(|s| s >> shift).collect()
    }

    fn subsections_of_section(&self, sec: u64) -> Range<u64> {
        let shift = self.geometry.section_size_bits() - SUBSECTION_SHIFT;
        sec << shift..(sec + 1) << shift
    }

    /// The expected `pfn_valid`.
    pub fn pfn_valid(&self, pfn: Pfn) -> bool {
        let pfn = pfn.get();
        if pfn >= self.geometry.max_pfn().get() {
            return false;
        }
        let sub = self.subsection_of(pfn);
        match self.semantics {
            Semantics::Flat => self.flat.0 <= pfn && pfn < self.flat.1,
            Semantics::Section => self.present.contains(&sub),
            Semantics::Vmemmap => {
                self.early.contains(&self.section_of(pfn)) || self.present.contains(&sub)
            }
        }
    }

    /// The expected `pfn_to_online_page(pfn).is_some()`.
    pub fn pfn_online(&self, pfn: Pfn) -> bool {
        if self.semantics == Semantics::Flat {
            return self.pfn_valid(pfn);
        }
        let sub = self.subsection_of(pfn.get());
        pfn < self.geometry.max_pfn()
            && self.online.contains(&self.section_of(pfn.get()))
            && self.present.contains(&sub)
            && !self.device.contains(&sub)
    }

    /// Whether `pfn` is device memory.
    pub fn is_device(&self, pfn: Pfn) -> bool {
        self.pfn_valid(pfn) && self.device.contains(&self.subsection_of(pfn.get()))
    }

    /// The subsections of `[start, start + nr_pages)` when it is a request
    /// this model's semantics can take in units of `unit` pages.
    fn subsections(&self, start: Pfn, nr_pages: u64, unit: u64) -> Option<Range<u64>> {
        let end = start.get().checked_add(nr_pages)?;
        let aligned =
            nr_pages > 0 && start.get().is_multiple_of(unit) && nr_pages.is_multiple_of(unit);
        (aligned && self.semantics != Semantics::Flat && end <= self.geometry.max_pfn().get())
            .then(|| self.subsection_of(start.get())..self.subsection_of(end))
    }

    fn block_subsections(&self, start: Pfn, nr_pages: u64) -> Option<Range<u64>> {
        self.subsections(start, nr_pages, self.geometry.pages_per_section())
    }

    fn device_subsections(&self, start: Pfn, nr_pages: u64) -> Option<Range<u64>> {
        if self.semantics != Semantics::Vmemmap {
            return None;
        }
        self.subsections(start, nr_pages, self.geometry.pages_per_subsection())
    }

    fn add(&mut self, subs: Range<u64>, device: bool) -> bool {
        if subs.clone().any(|s| self.present.contains(&s)) {
            return false;
        }
        self.present.extend(subs.clone());
        if device {
            self.device.extend(subs);
        }
        true
    }

    fn remove(&mut self, subs: Range<u64>, device: bool) -> bool {
        let ok = subs
            .clone()
            .all(|s| self.present.contains(&s) && self.device.contains(&s) == device);
        if !ok {
            return false;
        }
        for s in subs.clone() {
            self.present.remove(&s);
            self.device.remove(&s);
        }
        for sec in self.sections_of(&subs) {
            let mut all = self.subsections_of_section(sec);
            if !all.any(|s| self.present.contains(&s)) {
                self.early.remove(&sec);
                self.online.remove(&sec);
            }
        }
        true
    }

    /// Hot add of memory blocks; `false` (and no change) when the model
    /// must refuse it.
    pub fn hot_add(&mut self, start: Pfn, nr_pages: u64) -> bool {
        self.block_subsections(start, nr_pages)
            .is_some_and(|subs| self.add(subs, false))
    }

    /// Hot remove of memory blocks; `false` (and no change) when refused.
    pub fn hot_remove(&mut self, start: Pfn, nr_pages: u64) -> bool {
        self.block_subsections(start, nr_pages)
            .is_some_and(|subs| self.remove(subs, false))
    }

    /// Adds device memory; `false` (and no change) when refused.
    pub fn add_device(&mut self, start: Pfn, nr_pages: u64) -> bool {
        self.device_subsections(start, nr_pages)
            .is_some_and(|subs| self.add(subs, true))
    }

    /// Removes device memory; `false` (and no change) when refused.
    pub fn remove_device(&mut self, start: Pfn, nr_pages: u64) -> bool {
        self.device_subsections(start, nr_pages)
            .is_some_and(|subs| self.remove(subs, true))
    }

    /// Online/offline of memory blocks; `false` (and no change) when some
    /// subsection is invalid or device memory.
    pub fn set_online(&mut self, start: Pfn, nr_pages: u64, online: bool) -> bool {
        let Some(subs) = self.block_subsections(start, nr_pages) else {
            return false;
        };
        let per = self.geometry.pages_per_subsection();
        let usable = subs
            .clone()
            .all(|s| self.pfn_valid(Pfn::new(s * per)) && !self.device.contains(&s));
        if !usable {
            return false;
        }
        for sec in self.sections_of(&subs) {
            if online {
                self.online.insert(sec);
            } else {
                self.online.remove(&sec);
            }
        }
        true
    }
}
