//! The section table: classic (one level) and SPARSEMEM_EXTREME (two level),
//! and the bookkeeping every section-based model shares.
//!
//! Classic SPARSEMEM has one static array of `NR_MEM_SECTIONS` entries:
//! `pfn_valid` is one load of the entry (and, for a section that is not
//! early, one more of its usage map). EXTREME adds a level: a root array of
//! pointers to 4 KiB pages of 256 entries, allocated only where memory
//! exists, so a 52-bit physical space costs one pointer per 32 GiB rather
//! than a 512 MiB table; the price is one more dependent load.
//!
//! [`SectionTable`] implements `pfn_valid` over either root exactly as the
//! kernel's `pfn_valid` does (section number bound, `valid_section`,
//! `early_section` short cut, `pfn_section_valid`), plus hot add/remove of
//! subsections and online/offline of sections. Hotplug is split into a
//! *plan* (validation, no mutation) and a *commit*, so a model can provision
//! memmap between the two and leave everything unchanged on failure.

use std::collections::BTreeSet;

use crate::error::{HotplugError, TableTooLarge};
use crate::geometry::Geometry;
use crate::page::Page;
use crate::section::{
    MemSection, SECTION_HAS_MEM_MAP, SECTION_IS_EARLY, SECTION_IS_ONLINE, SECTION_MARKED_PRESENT,
};
use crate::subsection::SubsectionMap;
use crate::types::{Pfn, SectionNr};

/// Entries per EXTREME root page (`SECTIONS_PER_ROOT`): 4 KiB / 16 bytes.
pub const SECTIONS_PER_ROOT: u64 = 256;

/// Largest classic table pfnlab builds, in bytes.
pub const CLASSIC_TABLE_LIMIT_BYTES: u64 = 64 << 20;

/// How section numbers find their [`MemSection`]: the table's first level.
pub trait SectionRoot: Send + Sync + Sized + 'static {
    /// Model-name suffix: `sparse` or `sparse-extreme`.
    const NAME: &'static str;

    /// An empty table for `geometry`.
    fn new(geometry: &Geometry) -> Result<Self, TableTooLarge>;

    /// `__nr_to_section`: the entry, or `None` beyond the table or in a
    /// missing root page.
    fn get(&self, nr: u64) -> Option<&MemSection>;

    /// The entry, allocating its root page if needed (`sparse_index_init`).
    fn get_or_alloc(&mut self, nr: u64) -> &mut MemSection;

    /// The entry for mutation, if its root page exists.
    fn get_mut(&mut self, nr: u64) -> Option<&mut MemSection>;

    /// Bytes of table memory (entries and root pointers).
    fn table_bytes(&self) -> u64;
}

/// Classic SPARSEMEM: one array of every section's entry.
pub struct Classic {
    sections: Box<[MemSection]>,
}

impl SectionRoot for Classic {
    const NAME: &'static str = "sparse";

    fn new(geometry: &Geometry) -> Result<Self, TableTooLarge> {
        let n = geometry.nr_mem_sections();
        let bytes = n * std::mem::size_of::<MemSection>() as u64;
        if bytes > CLASSIC_TABLE_LIMIT_BYTES {
            return Err(TableTooLarge {
                bytes,
                limit: CLASSIC_TABLE_LIMIT_BYTES,
            });
        }
        let zeroed = Box::<[MemSection]>::new_zeroed_slice(n as usize);
        // SAFETY: an all-zero MemSection is MemSection::EMPTY: a null pointer
        // and `None` (Option<Box<_>> is guaranteed to use the null niche). A
        // zeroed allocation also stays untouched, like the kernel's BSS array.
        let sections = unsafe { zeroed.assume_init() };
        Ok(Classic { sections })
    }

    #[inline(always)]
    fn get(&self, nr: u64) -> Option<&MemSection> {
        self.sections.get(nr as usize)
    }

    fn get_or_alloc(&mut self, nr: u64) -> &mut MemSection {
        &mut self.sections[nr as usize]
    }

    fn get_mut(&mut self, nr: u64) -> Option<&mut MemSection> {
        self.sections.get_mut(nr as usize)
    }

    fn table_bytes(&self) -> u64 {
        std::mem::size_of_val(&*self.sections) as u64
    }
}

type RootPage = [MemSection; SECTIONS_PER_ROOT as usize];

/// SPARSEMEM_EXTREME: a root array of pointers to 4 KiB pages of entries.
pub struct Extreme {
    roots: Box<[Option<Box<RootPage>>]>,
    nr_root_pages: u64,
}

const _: () = assert!(std::mem::size_of::<RootPage>() == 4096);

impl SectionRoot for Extreme {
    const NAME: &'static str = "sparse-extreme";

    fn new(geometry: &Geometry) -> Result<Self, TableTooLarge> {
        let nr_roots = geometry.nr_mem_sections().div_ceil(SECTIONS_PER_ROOT);
        Ok(Extreme {
            roots: (0..nr_roots).map(|_| None).collect(),
            nr_root_pages: 0,
        })
    }

    #[inline(always)]
    fn get(&self, nr: u64) -> Option<&MemSection> {
        let root = self
            .roots
            .get((nr / SECTIONS_PER_ROOT) as usize)?
            .as_deref()?;
        Some(&root[(nr % SECTIONS_PER_ROOT) as usize])
    }

    fn get_or_alloc(&mut self, nr: u64) -> &mut MemSection {
        let slot = &mut self.roots[(nr / SECTIONS_PER_ROOT) as usize];
        if slot.is_none() {
            self.nr_root_pages += 1;
        }
        let root = slot.get_or_insert_with(|| Box::new([const { MemSection::EMPTY }; 256]));
        &mut root[(nr % SECTIONS_PER_ROOT) as usize]
    }

    fn get_mut(&mut self, nr: u64) -> Option<&mut MemSection> {
        let root = self
            .roots
            .get_mut((nr / SECTIONS_PER_ROOT) as usize)?
            .as_deref_mut()?;
        Some(&mut root[(nr % SECTIONS_PER_ROOT) as usize])
    }

    fn table_bytes(&self) -> u64 {
        std::mem::size_of_val(&*self.roots) as u64 + self.nr_root_pages * 4096
    }
}

/// One section's part of a hotplug request, produced by
/// [`SectionTable::plan`] and applied by a commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SectionChange {
    /// The section.
    pub nr: SectionNr,
    /// Subsections added or removed.
    pub bits: SubsectionMap,
    /// Add: the section has no memmap yet. Remove: the section is left with
    /// no subsection, so it and its memmap go away.
    pub whole_section: bool,
}

/// Which way a hotplug plan goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HotplugOp {
    /// `section_activate`.
    Add,
    /// `section_deactivate`.
    Remove,
}

/// A section table plus the bookkeeping shared by every section-based model.
///
/// Invariants:
/// - `present` holds exactly the sections whose entry has a memmap;
/// - a section with a memmap has at least one subsection bit set.
pub struct SectionTable<R> {
    geometry: Geometry,
    root: R,
    present: BTreeSet<SectionNr>,
}

impl<R: SectionRoot> SectionTable<R> {
    /// An empty table.
    pub fn new(geometry: Geometry) -> Result<Self, TableTooLarge> {
        Ok(SectionTable {
            root: R::new(&geometry)?,
            geometry,
            present: BTreeSet::new(),
        })
    }

    /// The geometry.
    #[inline(always)]
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// `__nr_to_section`.
    #[inline(always)]
    pub fn nr_to_section(&self, nr: SectionNr) -> Option<&MemSection> {
        self.root.get(nr.get())
    }

    /// `__pfn_to_section`.
    #[inline(always)]
    pub fn pfn_to_section(&self, pfn: Pfn) -> Option<&MemSection> {
        self.root
            .get(pfn.get() >> self.geometry.pfn_section_shift())
    }

    /// The kernel's SPARSEMEM `pfn_valid`: the entry exists and has a
    /// memmap, and the section is early or the pfn's subsection is present.
    #[inline(always)]
    pub fn pfn_valid(&self, pfn: Pfn) -> bool {
        let Some(ms) = self.pfn_to_section(pfn) else {
            return false;
        };
        let flags = ms.flags();
        if flags & SECTION_HAS_MEM_MAP == 0 {
            return false;
        }
        if flags & SECTION_IS_EARLY != 0 {
            return true;
        }
        ms.subsection_valid(self.geometry.subsection_index(pfn))
    }

    /// Valid and in an online section (`pfn_to_online_page`'s test).
    pub fn pfn_online(&self, pfn: Pfn) -> bool {
        self.pfn_valid(pfn) && self.pfn_to_section(pfn).is_some_and(MemSection::is_online)
    }

    /// Sets up a boot-time section (`sparse_init_one_section`).
    pub fn install(
        &mut self,
        nr: SectionNr,
        mem_map: *const Page,
        early: bool,
        subsections: SubsectionMap,
        online: bool,
    ) {
        debug_assert!(!subsections.is_empty());
        let mut flags = SECTION_MARKED_PRESENT | SECTION_HAS_MEM_MAP;
        if early {
            flags |= SECTION_IS_EARLY;
        }
        if online {
            flags |= SECTION_IS_ONLINE;
        }
        let first_pfn = self.geometry.section_nr_to_pfn(nr).get();
        let ms = self.root.get_or_alloc(nr.get());
        ms.set_mem_map(mem_map, first_pfn, flags);
        ms.usage_mut().subsection_map = subsections;
        self.present.insert(nr);
    }

    /// Present sections, ascending, with their entries.
    pub fn sections(&self) -> impl Iterator<Item = (SectionNr, &MemSection)> + '_ {
        self.present
            .iter()
            .filter_map(|&nr| Some((nr, self.nr_to_section(nr)?)))
    }

    /// Number of present sections.
    pub fn nr_present(&self) -> usize {
        self.present.len()
    }

    /// Bytes of table memory, including usage maps.
    pub fn table_bytes(&self) -> u64 {
        self.root.table_bytes()
            + self.present.len() as u64 * std::mem::size_of::<crate::section::SectionUsage>() as u64
    }

    /// Checks a hotplug request and splits it per section, changing nothing.
    pub fn plan(
        &self,
        start: Pfn,
        nr_pages: u64,
        op: HotplugOp,
    ) -> Result<Vec<SectionChange>, HotplugError> {
        let g = self.geometry;
        let sub = g.pages_per_subsection();
        let end = g.check_subsection_range(start, nr_pages)?;
        let mut changes = Vec::new();
        for chunk in g.section_chunks(start, end) {
            let nr = chunk.nr;
            let bits = SubsectionMap::range(chunk.first_subsection, chunk.last_subsection);
            let current = self
                .nr_to_section(nr)
                .filter(|ms| ms.has_mem_map())
                .and_then(MemSection::subsection_map)
                .copied()
                .unwrap_or_default();
            let conflict = match op {
                HotplugOp::Add => bits.and(&current),
                HotplugOp::Remove => bits.and_not(&current),
            };
            if let Some(i) = conflict.iter().next() {
                let pfn = Pfn::new(g.section_nr_to_pfn(nr).get() + i * sub);
                return Err(match op {
                    HotplugOp::Add => HotplugError::AlreadyPresent { pfn },
                    HotplugOp::Remove => HotplugError::NotPresent { pfn },
                });
            }
            let whole_section = match op {
                HotplugOp::Add => current.is_empty(),
                HotplugOp::Remove => current.and_not(&bits).is_empty(),
            };
            changes.push(SectionChange {
                nr,
                bits,
                whole_section,
            });
        }
        Ok(changes)
    }

    /// Applies a planned add. `mem_map_of(nr)` gives the memmap of each
    /// section that had none (`whole_section`); the sections start offline.
    pub fn commit_add(
        &mut self,
        changes: &[SectionChange],
        mut mem_map_of: impl FnMut(SectionNr) -> *const Page,
    ) {
        for c in changes {
            if c.whole_section {
                let first_pfn = self.geometry.section_nr_to_pfn(c.nr).get();
                let map = mem_map_of(c.nr);
                let ms = self.root.get_or_alloc(c.nr.get());
                ms.set_mem_map(map, first_pfn, SECTION_MARKED_PRESENT | SECTION_HAS_MEM_MAP);
                ms.usage_mut().subsection_map = SubsectionMap::EMPTY;
                self.present.insert(c.nr);
            }
            let ms = self.root.get_or_alloc(c.nr.get());
            let usage = ms.usage_mut();
            usage.subsection_map = usage.subsection_map.or(&c.bits);
        }
    }

    /// Applies a planned remove: clears the bits, and clears sections left
    /// empty (early or not, as the kernel's `section_deactivate` does).
    pub fn commit_remove(&mut self, changes: &[SectionChange]) {
        for c in changes {
            let Some(ms) = self.root.get_mut(c.nr.get()) else {
                continue;
            };
            if c.whole_section {
                ms.clear();
                self.present.remove(&c.nr);
            } else {
                let usage = ms.usage_mut();
                usage.subsection_map = usage.subsection_map.and_not(&c.bits);
            }
        }
    }

    /// Marks every section that `[start, start + nr_pages)` touches online
    /// or offline. Every pfn of the range must be valid.
    pub fn set_online(
        &mut self,
        start: Pfn,
        nr_pages: u64,
        online: bool,
    ) -> Result<(), HotplugError> {
        let g = self.geometry;
        let end = start
            .checked_add(nr_pages)
            .filter(|e| nr_pages > 0 && *e <= g.max_pfn())
            .ok_or(HotplugError::OutOfRange {
                end: Pfn::new(start.get().saturating_add(nr_pages)),
                max_pfn: g.max_pfn(),
            })?;
        let sub = g.pages_per_subsection();
        for chunk in g.section_chunks(start, end) {
            let base = g.section_nr_to_pfn(chunk.nr);
            for i in chunk.first_subsection..=chunk.last_subsection {
                let first = base + i * sub;
                // The chunk's own first pfn stands for its subsection (it may
                // start mid-subsection); validity is per subsection.
                if !self.pfn_valid(first.max(chunk.start)) {
                    return Err(HotplugError::NotPresent { pfn: first });
                }
            }
        }
        let first = g.pfn_to_section_nr(start).get();
        let last = g.pfn_to_section_nr(Pfn::new(end.get() - 1)).get();
        for nr in first..=last {
            if let Some(ms) = self.root.get_mut(nr) {
                if online {
                    ms.update_flags(SECTION_IS_ONLINE, 0);
                } else {
                    ms.update_flags(0, SECTION_IS_ONLINE);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classic_refuses_la57_and_names_extreme() {
        let e = SectionTable::<Classic>::new(Geometry::X86_64_LA57)
            .err()
            .unwrap();
        assert_eq!(
            e.to_string(),
            "a classic section table for this geometry takes 512 MiB (limit 64 MiB); use `sparse-extreme`"
        );
        assert!(SectionTable::<Extreme>::new(Geometry::X86_64_LA57).is_ok());
    }

    #[test]
    fn extreme_allocates_root_pages_lazily() {
        let mut t = SectionTable::<Extreme>::new(Geometry::X86_64).unwrap();
        let before = t.table_bytes();
        assert_eq!(before, 2048 * 8, "one root pointer per 256 sections");
        let plan = t.plan(Pfn::new(1 << 30), 512, HotplugOp::Add).unwrap();
        assert_eq!(plan.len(), 1);
        let dummy = [const { Page::new_zeroed() }; 1];
        t.commit_add(&plan, |_| dummy.as_ptr());
        assert!(t.table_bytes() >= before + 4096);
        assert!(t.pfn_valid(Pfn::new((1 << 30) + 511)));
        assert!(!t.pfn_valid(Pfn::new((1 << 30) + 512)));
    }

    #[test]
    fn plan_refuses_bad_requests_without_changes() {
        let t = SectionTable::<Classic>::new(Geometry::X86_64).unwrap();
        assert!(matches!(
            t.plan(Pfn::new(1), 512, HotplugOp::Add),
            Err(HotplugError::Misaligned { .. })
        ));
        assert!(matches!(
            t.plan(Pfn::new(0), 512, HotplugOp::Remove),
            Err(HotplugError::NotPresent { pfn }) if pfn == Pfn::new(0)
        ));
        assert!(matches!(
            t.plan(Pfn::new(1 << 34), 512, HotplugOp::Add),
            Err(HotplugError::OutOfRange { .. })
        ));
        assert!(matches!(
            t.plan(Pfn::new(u64::MAX - 511), 512, HotplugOp::Add),
            Err(HotplugError::Misaligned { .. } | HotplugError::OutOfRange { .. })
        ));
    }
}
