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
//! kernel's `pfn_valid` does (section number bound, `valid_section`, and
//! with VMEMMAP the `early_section` short cut and `pfn_section_valid`),
//! `pfn_to_online_page`'s test, hot add/remove of memory blocks and (with
//! VMEMMAP) of device subsections, and online/offline of sections. Hotplug is split into a
//! *plan* (validation, no mutation) and a *commit*, so a model can provision
//! memmap between the two and leave everything unchanged on failure.

use std::collections::BTreeSet;

use crate::error::{HotplugError, TableTooLarge};
use crate::geometry::Geometry;
use crate::layout::SectionPlan;
use crate::page::PageLayout;
use crate::pageblock::Migratetype;
use crate::section::{
    MemSection, SECTION_HAS_MEM_MAP, SECTION_IS_EARLY, SECTION_IS_ONLINE, SECTION_MARKED_PRESENT,
    SECTION_TAINT_ZONE_DEVICE,
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

    /// For pfnlab's bulk-skipping walk (a labelled variant, in no kernel):
    /// when `nr`'s root page is absent, the first section number of the
    /// next root page; `None` when the entry exists (always, for the
    /// classic table).
    #[inline(always)]
    fn absent_root_end(&self, nr: u64) -> Option<u64> {
        let _ = nr;
        None
    }
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

    #[inline(always)]
    fn absent_root_end(&self, nr: u64) -> Option<u64> {
        let root = (nr / SECTIONS_PER_ROOT) as usize;
        match self.roots.get(root) {
            Some(Some(_)) => None,
            _ => Some((root as u64 + 1) * SECTIONS_PER_ROOT),
        }
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

/// What a hotplug request adds or removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryKind {
    /// Ordinary memory (`add_memory` / `remove_memory`): whole memory
    /// blocks.
    Memory,
    /// Device memory (`memremap_pages` / `memunmap_pages`): 2 MiB
    /// subsections, VMEMMAP only.
    Device,
}

/// A section table plus the bookkeeping shared by every section-based
/// model. `VMEMMAP` says whether the kernel it models has
/// SPARSEMEM_VMEMMAP: only then does a section carry a subsection map that
/// `pfn_valid` consults (`pfn_section_valid`; without VMEMMAP it is a stub
/// returning 1 and hotplug comes in whole sections), and only then can it
/// hold device memory.
///
/// Invariants:
/// - `present` holds exactly the sections whose entry has a memmap;
/// - a section with a memmap has at least one subsection bit set, and
///   without VMEMMAP all of them;
/// - `pgmap` holds only present subsections, and their sections carry
///   `SECTION_TAINT_ZONE_DEVICE`; it is empty without VMEMMAP.
pub struct SectionTable<R, const VMEMMAP: bool> {
    geometry: Geometry,
    root: R,
    present: BTreeSet<SectionNr>,
    /// Device-memory subsections (global numbers): the kernel finds these
    /// through `get_dev_pagemap`'s pgmap lookup.
    pgmap: BTreeSet<u64>,
    /// `__highest_present_section_nr`: raised when a section becomes
    /// present and, as in the kernel, never lowered on removal; `None`
    /// until the first section.
    highest_present: Option<u64>,
}

impl<R: SectionRoot, const VMEMMAP: bool> SectionTable<R, VMEMMAP> {
    /// An empty table.
    pub fn new(geometry: Geometry) -> Result<Self, TableTooLarge> {
        Ok(SectionTable {
            root: R::new(&geometry)?,
            geometry,
            present: BTreeSet::new(),
            pgmap: BTreeSet::new(),
            highest_present: None,
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
    /// memmap, and — with VMEMMAP only — the section is early or the pfn's
    /// subsection is present.
    #[inline(always)]
    pub fn pfn_valid(&self, pfn: Pfn) -> bool {
        let Some(ms) = self.pfn_to_section(pfn) else {
            return false;
        };
        let flags = ms.flags();
        if flags & SECTION_HAS_MEM_MAP == 0 {
            return false;
        }
        if !VMEMMAP || flags & SECTION_IS_EARLY != 0 {
            return true;
        }
        ms.subsection_valid(self.geometry.subsection_index(pfn))
    }

    /// `pfn_section_valid`: the subsection bit with VMEMMAP, 1 without.
    #[inline(always)]
    fn pfn_section_valid(&self, ms: &MemSection, pfn: Pfn) -> bool {
        !VMEMMAP || ms.subsection_valid(self.geometry.subsection_index(pfn))
    }

    /// `pfn_to_online_page`'s test: the section is online, the pfn's
    /// subsection is valid (`pfn_section_valid`, not the early short cut: a
    /// hole subsection of boot memory is valid but not online), and in a
    /// section tainted by device memory the pfn is not device memory.
    pub fn pfn_online(&self, pfn: Pfn) -> bool {
        let Some(ms) = self.pfn_to_section(pfn) else {
            return false;
        };
        if !ms.has_mem_map() || !ms.is_online() || !self.pfn_section_valid(ms, pfn) {
            return false;
        }
        !ms.is_online_device() || !self.is_device(pfn)
    }

    /// `get_pfnblock_migratetype` under SPARSEMEM:
    /// `__pfn_to_section(pfn)->usage->pageblock_flags`. A pfn of no section
    /// reads `Unmovable`.
    #[inline(always)]
    pub fn get_pfnblock_migratetype(&self, pfn: Pfn) -> Migratetype {
        match self
            .pfn_to_section(pfn)
            .and_then(MemSection::pageblock_flags)
        {
            Some(flags) => flags.get(self.geometry.pageblock_index(pfn)),
            None => Migratetype::Unmovable,
        }
    }

    /// `set_pfnblock_migratetype`; nothing for a pfn of no section.
    pub fn set_pfnblock_migratetype(&self, pfn: Pfn, mt: Migratetype) {
        if let Some(flags) = self
            .pfn_to_section(pfn)
            .and_then(MemSection::pageblock_flags)
        {
            flags.set(self.geometry.pageblock_index(pfn), mt);
        }
    }

    /// Whether `pfn` is device memory (`get_dev_pagemap` finds a pgmap).
    pub fn is_device(&self, pfn: Pfn) -> bool {
        self.pgmap
            .contains(&(pfn.get() >> self.geometry.pfn_subsection_shift()))
    }

    /// Sets up a boot-time section (`sparse_init_one_section`) as `plan`
    /// describes it; early sections start online.
    pub fn install<P: PageLayout>(&mut self, nr: SectionNr, mem_map: *const P, plan: &SectionPlan) {
        debug_assert!(!plan.subsections.is_empty());
        debug_assert!(VMEMMAP || plan.device.is_empty());
        let mut flags = SECTION_MARKED_PRESENT | SECTION_HAS_MEM_MAP;
        if plan.early {
            flags |= SECTION_IS_EARLY | SECTION_IS_ONLINE;
        }
        if !plan.device.is_empty() {
            flags |= SECTION_TAINT_ZONE_DEVICE;
        }
        let g = self.geometry;
        let first_pfn = g.section_nr_to_pfn(nr).get();
        let ms = self.root.get_or_alloc(nr.get());
        ms.set_mem_map(mem_map, first_pfn, flags);
        ms.usage_mut().subsection_map = if VMEMMAP {
            plan.subsections
        } else {
            SubsectionMap::range(0, g.subsections_per_section() - 1)
        };
        // memmap_init_range marks every pageblock MIGRATE_MOVABLE.
        ms.usage_mut()
            .pageblock_flags
            .fill(g.pageblocks_per_section(), Migratetype::Movable);
        let first_sub = first_pfn >> g.pfn_subsection_shift();
        self.pgmap.extend(plan.device.iter().map(|i| first_sub + i));
        self.mark_present(nr);
    }

    /// `section_mark_present`'s bookkeeping: the section joins `present`
    /// and raises `__highest_present_section_nr`.
    fn mark_present(&mut self, nr: SectionNr) {
        self.present.insert(nr);
        self.highest_present = self.highest_present.max(Some(nr.get()));
    }

    /// `__highest_present_section_nr`, `None` before the first section.
    #[inline(always)]
    pub(crate) fn highest_present_section(&self) -> Option<u64> {
        self.highest_present
    }

    /// The table's first level.
    #[inline(always)]
    pub(crate) fn root(&self) -> &R {
        &self.root
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

    /// Checks a hotplug request and splits it per section, changing nothing:
    /// ordinary memory in whole memory blocks (and everything in whole
    /// sections without VMEMMAP, `check_pfn_span`), device memory in
    /// subsections and only with VMEMMAP; a memory removal may not touch
    /// device memory, a device removal only device memory.
    pub fn plan(
        &self,
        start: Pfn,
        nr_pages: u64,
        op: HotplugOp,
        kind: MemoryKind,
    ) -> Result<Vec<SectionChange>, HotplugError> {
        let g = self.geometry;
        let sub = g.pages_per_subsection();
        let end = match kind {
            MemoryKind::Memory => g.check_memory_block_range(start, nr_pages)?,
            MemoryKind::Device if !VMEMMAP => {
                return Err(HotplugError::NeedsVmemmap { model: R::NAME });
            }
            MemoryKind::Device => g.check_subsection_range(start, nr_pages)?,
        };
        let mut changes = Vec::new();
        for chunk in g.section_chunks(start, end) {
            let nr = chunk.nr;
            let base = g.section_nr_to_pfn(nr);
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
                let pfn = base + i * sub;
                return Err(match op {
                    HotplugOp::Add => HotplugError::AlreadyPresent { pfn },
                    HotplugOp::Remove => HotplugError::NotPresent { pfn },
                });
            }
            if op == HotplugOp::Remove {
                let want_device = kind == MemoryKind::Device;
                if let Some(i) = bits
                    .iter()
                    .find(|&i| self.is_device(base + i * sub) != want_device)
                {
                    return Err(HotplugError::Device {
                        pfn: base + i * sub,
                        is_device: !want_device,
                    });
                }
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
    /// section that had none (`whole_section`); new sections start offline,
    /// and device memory taints its sections.
    pub fn commit_add<P: PageLayout>(
        &mut self,
        changes: &[SectionChange],
        kind: MemoryKind,
        mut mem_map_of: impl FnMut(SectionNr) -> *const P,
    ) {
        let g = self.geometry;
        for c in changes {
            let ms = self.root.get_or_alloc(c.nr.get());
            if c.whole_section {
                let first_pfn = g.section_nr_to_pfn(c.nr).get();
                ms.set_mem_map(
                    mem_map_of(c.nr),
                    first_pfn,
                    SECTION_MARKED_PRESENT | SECTION_HAS_MEM_MAP,
                );
                ms.usage_mut().subsection_map = SubsectionMap::EMPTY;
                ms.usage_mut()
                    .pageblock_flags
                    .fill(g.pageblocks_per_section(), Migratetype::Movable);
                self.present.insert(c.nr);
                self.highest_present = self.highest_present.max(Some(c.nr.get()));
            }
            let usage = ms.usage_mut();
            usage.subsection_map = usage.subsection_map.or(&c.bits);
            if kind == MemoryKind::Device {
                ms.update_flags(SECTION_TAINT_ZONE_DEVICE, 0);
                let first_sub = g.section_nr_to_pfn(c.nr).get() >> g.pfn_subsection_shift();
                self.pgmap.extend(c.bits.iter().map(|i| first_sub + i));
            }
        }
    }

    /// Applies a planned remove: clears the bits, and clears sections left
    /// empty (early or not, as the kernel's `section_deactivate` does).
    pub fn commit_remove(&mut self, changes: &[SectionChange]) {
        let g = self.geometry;
        for c in changes {
            let first_sub = g.section_nr_to_pfn(c.nr).get() >> g.pfn_subsection_shift();
            for i in c.bits.iter() {
                self.pgmap.remove(&(first_sub + i));
            }
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

    /// Marks the sections of `[start, start + nr_pages)` online or offline
    /// (`online_mem_sections` / `offline_mem_sections`): whole memory
    /// blocks, every subsection valid, none of them device memory.
    pub fn set_online(
        &mut self,
        start: Pfn,
        nr_pages: u64,
        online: bool,
    ) -> Result<(), HotplugError> {
        let g = self.geometry;
        let end = g.check_memory_block_range(start, nr_pages)?;
        let sub = g.pages_per_subsection();
        let mut pfn = start;
        while pfn < end {
            if !self.pfn_valid(pfn) {
                return Err(HotplugError::NotPresent { pfn });
            }
            if self.is_device(pfn) {
                return Err(HotplugError::Device {
                    pfn,
                    is_device: true,
                });
            }
            pfn = pfn + sub;
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
        let e = SectionTable::<Classic, false>::new(Geometry::X86_64_LA57)
            .err()
            .unwrap();
        assert_eq!(
            e.to_string(),
            "a classic section table for this geometry takes 512 MiB (limit 64 MiB); use `sparse-extreme`"
        );
        assert!(SectionTable::<Extreme, false>::new(Geometry::X86_64_LA57).is_ok());
    }

    #[test]
    fn extreme_allocates_root_pages_lazily() {
        let mut t = SectionTable::<Extreme, true>::new(Geometry::X86_64).unwrap();
        let before = t.table_bytes();
        assert_eq!(before, 2048 * 8, "one root pointer per 256 sections");
        let plan = t
            .plan(Pfn::new(1 << 30), 512, HotplugOp::Add, MemoryKind::Device)
            .unwrap();
        assert_eq!(plan.len(), 1);
        let dummy = crate::memmap::MemmapBlock::<crate::page::Page64>::new(1).unwrap();
        t.commit_add(&plan, MemoryKind::Device, |_| dummy.as_ptr());
        assert!(t.table_bytes() >= before + 4096);
        assert!(t.pfn_valid(Pfn::new((1 << 30) + 511)));
        assert!(!t.pfn_valid(Pfn::new((1 << 30) + 512)));
        assert!(t.is_device(Pfn::new(1 << 30)) && !t.pfn_online(Pfn::new(1 << 30)));
    }

    #[test]
    fn without_vmemmap_a_present_section_is_valid_everywhere() {
        let mut t = SectionTable::<Classic, false>::new(Geometry::X86_64).unwrap();
        let device = t.plan(Pfn::new(1 << 30), 512, HotplugOp::Add, MemoryKind::Device);
        assert!(matches!(
            device,
            Err(HotplugError::NeedsVmemmap { model: "sparse" })
        ));
        let sub = t.plan(Pfn::new(1 << 30), 512, HotplugOp::Add, MemoryKind::Memory);
        assert!(matches!(sub, Err(HotplugError::Misaligned { .. })));
        let plan = t
            .plan(Pfn::new(1 << 30), 32768, HotplugOp::Add, MemoryKind::Memory)
            .unwrap();
        let dummy = crate::memmap::MemmapBlock::<crate::page::Page64>::new(1).unwrap();
        t.commit_add(&plan, MemoryKind::Memory, |_| dummy.as_ptr());
        assert!(t.pfn_valid(Pfn::new((1 << 30) + 32767)));
        assert!(
            !t.pfn_online(Pfn::new(1 << 30)),
            "hot-added memory starts offline"
        );
        t.set_online(Pfn::new(1 << 30), 32768, true).unwrap();
        assert!(t.pfn_online(Pfn::new((1 << 30) + 32767)));
    }

    #[test]
    fn plan_refuses_bad_requests_without_changes() {
        let t = SectionTable::<Classic, true>::new(Geometry::X86_64).unwrap();
        let plan = |start, nr, op, kind| t.plan(Pfn::new(start), nr, op, kind);
        use MemoryKind::{Device, Memory};
        assert!(matches!(
            plan(1, 512, HotplugOp::Add, Device),
            Err(HotplugError::Misaligned { .. })
        ));
        assert!(matches!(
            plan(0, 512, HotplugOp::Remove, Device),
            Err(HotplugError::NotPresent { pfn }) if pfn == Pfn::new(0)
        ));
        assert!(matches!(
            plan(1 << 34, 512, HotplugOp::Add, Device),
            Err(HotplugError::OutOfRange { .. })
        ));
        assert!(matches!(
            plan(u64::MAX - 511, 512, HotplugOp::Add, Device),
            Err(HotplugError::Misaligned { .. } | HotplugError::OutOfRange { .. })
        ));
        assert!(matches!(
            plan(512, 32768, HotplugOp::Add, Memory),
            Err(HotplugError::Misaligned {
                granule: crate::Granule::MemoryBlock,
                ..
            })
        ));
    }
}
