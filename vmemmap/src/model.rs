//! `Vmemmap<D>`: the virtually mapped memmap as a [`MemoryModel`].
//!
//! `pfn_to_page` is `vmemmap + pfn` — pointer arithmetic, no table. What
//! differs between detectors is how `pfn_valid` learns that a pfn is a hole:
//! the section table ([`Table`]), a fault-probed load ([`Probe`]) or a
//! userfaultfd (`Uffd`, `UffdSigbus`, feature `uffd`). All of them keep the
//! section table, because hotplug and online state are tracked there, as in
//! the kernel.
//!
//! ## Exactness when a host page mixes valid and invalid pfns
//! A 2 MiB subsection's memmap is 32 KiB with 4 KiB pages, but only 2 KiB
//! with arm64's 64 KiB pages (and 8 KiB with ia64's 16 KiB), so one 4 KiB
//! host page of memmap can hold descriptors of a present subsection and of
//! an absent one. Such a host page is populated, and a load from the absent
//! half does not fault. The answer stays exact because a descriptor is
//! initialised (byte 0 non-zero under the layout's present mask: the
//! [`sparsemem::PageFlag::Present`] bit, or the memdesc type at 8 bytes)
//! exactly when its pfn is valid, and descriptors of removed subsections
//! are zeroed: the probe reads byte 0 with the same load that would fault,
//! and reports "valid" only when the load succeeds *and* the mask is set. A
//! userfaultfd zero page reads as all-zero, so it is "invalid" the same way.

use std::collections::BTreeMap;
use std::io;

use sparsemem::table::{Extreme, HotplugOp, MemoryKind, SectionChange, SectionTable};
use sparsemem::{
    BuildError, Geometry, HotplugError, Layout, MemmapBytes, MemmapFrames, MemoryModel,
    Migratetype, NodeId, Page64, PageLayout, Pfn, PfnWalker, RangeKind, SectionNr,
    first_valid_pfn_per_pfn,
};

use sparsemem::hvo::{HugetlbVmemmap, HvoError};

use crate::hvo_state::HvoState;

mod on_frames;
mod populate;
use crate::reserve::{Backing, HoleStyle, Reservation, thp_available};

/// Options for building a vmemmap model.
#[derive(Clone, Copy, Debug)]
pub struct VmemmapOptions {
    /// Ask for transparent huge pages on populated memmap (default: when
    /// the kernel allows it).
    pub thp: bool,
    /// Back the memmap with a memfd instead of private anonymous memory,
    /// so HugeTLB vmemmap optimisation can map a memmap page twice
    /// (default: off). Refused for the userfaultfd detectors.
    pub memfd: bool,
}

impl Default for VmemmapOptions {
    fn default() -> Self {
        VmemmapOptions {
            thp: thp_available(),
            memfd: false,
        }
    }
}

/// How a vmemmap model tells holes from pages.
pub trait Detector: Sized + Send + Sync + 'static {
    /// The model name (`vmemmap-table`, …).
    const NAME: &'static str;
    /// How holes in the reservation must behave for this detector.
    const HOLES: HoleStyle;
    /// The `for_each_valid_pfn` the kernel would build:
    /// [`PfnWalker::Subsections`] for the stock table, and
    /// [`PfnWalker::PerPfn`] for a detector that replaces `pfn_valid`
    /// (`CONFIG_HAVE_ARCH_PFN_VALID`, as ia64's `ia64_pfn_valid` did): the
    /// section walker is defined only beside the generic SPARSEMEM
    /// `pfn_valid`, so such a kernel falls back to `pfn_valid` per pfn,
    /// each a probe (a caught fault per hole pfn).
    const WALKER: PfnWalker;

    /// Sets the detector up on a fresh reservation, before anything is
    /// populated.
    fn attach(reservation: &Reservation) -> Result<Self, BuildError>;

    /// `pfn_valid` for this detector, at `struct page` layout `P`.
    fn pfn_valid<P: PageLayout>(model: &Vmemmap<Self, P>, pfn: Pfn) -> bool;

    /// Called before `[addr, addr + len)` is populated.
    fn before_populate(&self, _addr: *mut u8, _len: usize) -> io::Result<()> {
        Ok(())
    }

    /// Called after `[addr, addr + len)` went back to being a hole.
    fn after_depopulate(&self, _addr: *mut u8, _len: usize) -> io::Result<()> {
        Ok(())
    }
}

/// A vmemmap model with detector `D` and `struct page` layout `P`.
///
/// Every detector exists at every size: the probe's one-byte load tests
/// the layout's [`PageLayout::PRESENT_BYTE_MASK`] (the flags word's
/// `Present` bit, or at 8 bytes the memdesc type), and the memmap is
/// populated at the layout's stride: a subsection's in host pages, so a
/// 2 MiB subsection's memmap is 32 KiB at 64 bytes and one 4 KiB page at
/// 8 bytes ([`Vmemmap::subsection_memmap_bytes`]), and with THP a
/// section's in the whole 2 MiB PMDs around it (the `populate` module).
///
/// Invariants:
/// - `base` is the reservation's base: the descriptor of pfn `p` is at
///   `base + p` for every `p < max_pfn`;
/// - a descriptor is initialised (PRESENT) exactly when its pfn is valid
///   by the section table; every populated host page contains only such
///   descriptors and zeroed ones;
/// - every offset in `huge_pmds` is a PMD of the reservation populated
///   whole.
pub struct Vmemmap<D: Detector, P: PageLayout = Page64> {
    table: SectionTable<Extreme, true>,
    base: *const P,
    max_pfn: u64,
    detector: D,
    pub(crate) reservation: Reservation,
    pub(crate) hvo: HvoState,
    /// memmap_on_memory blocks whose memmap is mapped on their own frames
    /// ([`MemoryModel::hot_add_memmap_on_frames`]): first pfn → pages.
    on_frames: BTreeMap<u64, u64>,
    /// Byte offsets of the memmap PMDs populated whole, in 2 MiB runs
    /// (`vmemmap_populate_hugepages`; see `populate`).
    huge_pmds: std::collections::BTreeSet<usize>,
}

// SAFETY: `base` points into `reservation`, owned by this value; descriptors
// are all atomics, so sharing `&P`s across threads is sound, and all
// mutation of the mapping goes through `&mut self`.
unsafe impl<D: Detector, P: PageLayout> Send for Vmemmap<D, P> {}
// SAFETY: as above.
unsafe impl<D: Detector, P: PageLayout> Sync for Vmemmap<D, P> {}

impl<D: Detector> Vmemmap<D> {
    /// Reserves the memmap of the whole physical space and populates the
    /// layout's memory: boot memory online, hot-added memory offline,
    /// device memory (ZONE_DEVICE) never online; 64-byte pages.
    pub fn new(layout: &Layout) -> Result<Self, BuildError> {
        Self::with_options(layout, VmemmapOptions::default())
    }

    /// As [`Vmemmap::new`], with options.
    pub fn with_options(layout: &Layout, options: VmemmapOptions) -> Result<Self, BuildError> {
        Vmemmap::build(layout, options)
    }
}

impl<D: Detector, P: PageLayout> Vmemmap<D, P> {
    /// As [`Vmemmap::with_options`], with `struct page` layout `P`.
    pub fn build(layout: &Layout, options: VmemmapOptions) -> Result<Self, BuildError> {
        let g = *layout.geometry();
        // Refuse absurd layouts before planning them section by section.
        sparsemem::memmap::check_memmap_budget(layout.present_pages().saturating_mul(P::SIZE))?;
        let plan = layout.section_plan();
        let populated: u64 = plan
            .values()
            .map(|p| {
                if p.early {
                    g.pages_per_section()
                } else {
                    u64::from(p.subsections.count()) * g.pages_per_subsection()
                }
            })
            .sum();
        sparsemem::memmap::check_memmap_budget(populated * P::SIZE)?;
        let max_pfn = g.max_pfn().get();
        let bytes = max_pfn * P::SIZE;
        if options.memfd && D::HOLES == HoleStyle::Missing {
            return Err(BuildError::Unsupported(format!(
                "{} cannot have a memfd-backed memmap: a userfaultfd on shmem is not modelled",
                D::NAME
            )));
        }
        let backing = if options.memfd {
            Backing::Memfd
        } else {
            Backing::Anonymous
        };
        let reservation = Reservation::with_backing(bytes as usize, D::HOLES, options.thp, backing)
            .map_err(|e| {
            BuildError::Unsupported(format!(
                "cannot reserve {} GiB of address space for the memmap of a 2^{}-byte physical space ({e}); \
                 the user address space is 128 TiB with 4-level paging",
                bytes >> 30,
                g.max_physmem_bits()
            ))
        })?;
        let detector = D::attach(&reservation)?;
        let mut model = Vmemmap {
            table: SectionTable::new(g)?,
            base: reservation.base().cast::<P>(),
            max_pfn,
            detector,
            reservation,
            hvo: HvoState::default(),
            on_frames: BTreeMap::new(),
            huge_pmds: std::collections::BTreeSet::new(),
        };
        for (&nr, sp) in &plan {
            let first = g.section_nr_to_pfn(nr).get();
            if sp.early {
                model.populate_pfns(first, g.pages_per_section())?;
            } else {
                for i in sp.subsections.iter() {
                    model.populate_pfns(
                        first + i * g.pages_per_subsection(),
                        g.pages_per_subsection(),
                    )?;
                }
            }
            let mem_map = model.base.wrapping_add(first as usize);
            model.table.install(nr, mem_map, sp);
        }
        for (r, first, end) in layout.ranges_of(RangeKind::Device) {
            model.init_device(first.get(), end.get() - first.get(), Layout::node_id(r));
        }
        Ok(model)
    }

    /// The section table.
    pub fn table(&self) -> &SectionTable<Extreme, true> {
        &self.table
    }

    /// The detector.
    pub fn detector(&self) -> &D {
        &self.detector
    }

    /// `vmemmap`: the descriptor of pfn 0.
    #[inline(always)]
    pub fn vmemmap_base(&self) -> *const P {
        self.base
    }

    /// Bytes of memmap one subsection populates (`PAGES_PER_SUBSECTION *
    /// sizeof(struct page)`): 32 KiB at 64 bytes, 4 KiB at 8 bytes with
    /// 4 KiB pages. Populating rounds it up to whole host pages.
    pub fn subsection_memmap_bytes(&self) -> u64 {
        self.table.geometry().pages_per_subsection() * P::SIZE
    }

    /// One past the largest pfn the reservation covers.
    #[inline(always)]
    pub fn max_pfn(&self) -> u64 {
        self.max_pfn
    }

    /// Whether THP was requested, and bytes of memmap in huge pages now.
    pub fn thp(&self) -> (bool, u64) {
        let huge = self.reservation.residency().map_or(0, |r| r.1);
        (self.reservation.thp_requested(), huge)
    }

    /// Initialises populated descriptors `[first, first + nr)` as device
    /// memory of `node` (`memmap_init_zone_device`).
    fn init_device(&mut self, first: u64, nr: u64, node: NodeId) {
        let shift = self.table.geometry().pfn_section_shift();
        for pfn in first..first + nr {
            // SAFETY: (1) the descriptor was populated with its subsection;
            // (2) the model owns it and `&mut self` excludes any allocator
            // use, so initialising it is the owner's write.
            unsafe { (*self.base.add(pfn as usize)).init_device(pfn >> shift, node.get()) };
        }
    }

    /// Populates and installs the subsections of planned additions.
    fn add(&mut self, changes: &[SectionChange], kind: MemoryKind) -> Result<(), HotplugError> {
        let g = *self.table.geometry();
        let new_subsections: u64 = changes.iter().map(|c| u64::from(c.bits.count())).sum();
        sparsemem::memmap::check_memmap_budget(
            new_subsections * g.pages_per_subsection() * P::SIZE,
        )
        .map_err(HotplugError::TooLarge)?;
        let per_section = g.pages_per_section() / g.pages_per_subsection();
        for c in changes {
            let first = g.section_nr_to_pfn(c.nr).get();
            // `section_activate` populates a whole section's memmap in one
            // call (PMD-mapped), a partial one subsection by subsection.
            if u64::from(c.bits.count()) == per_section {
                self.populate_pfns(first, g.pages_per_section())
                    .map_err(HotplugError::Memmap)?;
                continue;
            }
            for i in c.bits.iter() {
                self.populate_pfns(
                    first + i * g.pages_per_subsection(),
                    g.pages_per_subsection(),
                )
                .map_err(HotplugError::Memmap)?;
            }
        }
        let base = self.base;
        self.table.commit_add(changes, kind, |nr: SectionNr| {
            base.wrapping_add(g.section_nr_to_pfn(nr).get() as usize)
        });
        Ok(())
    }

    /// Retires the memmap of planned removals.
    ///
    /// Subsections removed from an early section that stays keep their
    /// memmap, and `pfn_valid` stays true for them (the early section is
    /// valid whole). The kernel's `remove_pfn_range_from_zone` leaves those
    /// descriptors uninitialised (poisoned under `CONFIG_DEBUG_VM`); pfnlab
    /// puts them back in the state boot gives an early section's hole
    /// (reserved, no zone), so no stale ZONE_DEVICE descriptor outlives
    /// its device range.
    fn remove(&mut self, changes: &[SectionChange]) -> Result<(), HotplugError> {
        let g = *self.table.geometry();
        let mut retired = Vec::new();
        let mut uninitialised = Vec::new();
        for c in changes {
            let was_early = self
                .table
                .nr_to_section(c.nr)
                .is_some_and(|ms| ms.is_early());
            if was_early && !c.whole_section {
                let first = g.section_nr_to_pfn(c.nr).get();
                uninitialised.extend(c.bits.iter().map(|i| first + i * g.pages_per_subsection()));
            } else {
                retired.extend(self.retired_ranges(c, was_early));
            }
        }
        self.table.commit_remove(changes);
        let shift = g.pfn_section_shift();
        for first in uninitialised {
            for pfn in first..first + g.pages_per_subsection() {
                // SAFETY: (1) an early section's memmap stays populated
                // while the section is present, and this one is (it did
                // not empty); (2) the model owns the descriptor and
                // `&mut self` excludes any allocator use.
                unsafe { (*self.base.add(pfn as usize)).init_reserved(pfn >> shift) };
            }
        }
        self.retire(&retired).map_err(HotplugError::Memmap)
    }

    /// Whether any pfn of `[first, first + nr)` is valid by the table.
    fn any_valid(&self, first: u64, nr: u64) -> bool {
        let per = self.table.geometry().pages_per_subsection();
        let mut pfn = first;
        while pfn < first + nr {
            if self.table.pfn_valid(Pfn::new(pfn)) {
                return true;
            }
            pfn = (pfn | (per - 1)) + 1;
        }
        false
    }

    /// The pfn ranges whose memmap a planned removal retires: a whole
    /// early section that empties, or the removed subsections of a section
    /// that is not early (an early section's memmap stays populated).
    fn retired_ranges(&self, c: &SectionChange, was_early: bool) -> Vec<(u64, u64)> {
        let g = self.table.geometry();
        let first = g.section_nr_to_pfn(c.nr).get();
        match (was_early, c.whole_section) {
            (true, true) => vec![(first, g.pages_per_section())],
            (true, false) => Vec::new(),
            (false, _) => c
                .bits
                .iter()
                .map(|i| {
                    (
                        first + i * g.pages_per_subsection(),
                        g.pages_per_subsection(),
                    )
                })
                .collect(),
        }
    }
}

// SAFETY: the trait's promises, point by point: (1) a valid pfn's
// descriptor is in a memmap the model owns and initialised, and
// `page_to_pfn` inverts `pfn_to_page` (tested generically for every model);
// (2) the whole memmap is one reservation and every pointer is derived
// from its base; (3) validity comes from the section table, or (probe and
// userfaultfd detectors) from the PRESENT bit, which only this model writes
// (`PageLayout::init_reserved` / `clear_to_hole` are unsafe owners'
// writes); (4) the geometry is the table's, set at construction.
unsafe impl<D: Detector, P: PageLayout> MemoryModel for Vmemmap<D, P> {
    type Page = P;

    fn name(&self) -> &'static str {
        D::NAME
    }

    fn geometry(&self) -> &Geometry {
        self.table.geometry()
    }

    #[inline(always)]
    fn pfn_valid(&self, pfn: Pfn) -> bool {
        D::pfn_valid(self, pfn)
    }

    #[inline(always)]
    unsafe fn pfn_to_page_ptr(&self, pfn: Pfn) -> *const P {
        debug_assert!(self.pfn_valid(pfn));
        // SAFETY: the caller promises pfn_valid(pfn), so pfn < max_pfn and
        // the address lies in the reservation (base has its provenance).
        unsafe { self.base.add(pfn.get() as usize) }
    }

    fn pfn_walker(&self) -> PfnWalker {
        D::WALKER
    }

    #[inline(always)]
    fn first_valid_pfn(&self, pfn: Pfn, end: Pfn) -> Pfn {
        match D::WALKER {
            PfnWalker::Subsections => self.table.first_valid_pfn::<false>(pfn, end),
            _ => first_valid_pfn_per_pfn(self, pfn, end),
        }
    }

    #[inline(always)]
    fn next_valid_pfn(&self, pfn: Pfn, end: Pfn) -> Pfn {
        match D::WALKER {
            PfnWalker::Subsections => self.table.next_valid_pfn::<false>(pfn, end),
            _ => match pfn.checked_add(1) {
                Some(next) => first_valid_pfn_per_pfn(self, next, end),
                None => end,
            },
        }
    }

    #[inline(always)]
    fn first_valid_pfn_bulk(&self, pfn: Pfn, end: Pfn) -> Pfn {
        match D::WALKER {
            PfnWalker::Subsections => self.table.first_valid_pfn::<true>(pfn, end),
            _ => self.first_valid_pfn(pfn, end),
        }
    }

    #[inline(always)]
    fn next_valid_pfn_bulk(&self, pfn: Pfn, end: Pfn) -> Pfn {
        match D::WALKER {
            PfnWalker::Subsections => self.table.next_valid_pfn::<true>(pfn, end),
            _ => self.next_valid_pfn(pfn, end),
        }
    }

    fn page_to_pfn(&self, page: &P) -> Pfn {
        let offset = std::ptr::from_ref(page).addr() - self.base.addr();
        Pfn::new(offset as u64 / P::SIZE)
    }

    fn pfn_to_online_page(&self, pfn: Pfn) -> Option<&P> {
        if self.table.pfn_online(pfn) {
            // SAFETY: pfn_online implies pfn_valid; `self` is borrowed shared.
            Some(unsafe { self.pfn_to_page_unchecked(pfn) })
        } else {
            None
        }
    }

    #[inline(always)]
    fn get_pfnblock_migratetype(&self, pfn: Pfn) -> Migratetype {
        self.table.get_pfnblock_migratetype(pfn)
    }

    fn set_pfnblock_migratetype(&self, pfn: Pfn, mt: Migratetype) {
        self.table.set_pfnblock_migratetype(pfn, mt);
    }

    fn memmap_bytes(&self) -> MemmapBytes {
        let (resident, huge) = self.reservation.residency().unwrap_or((0, 0));
        MemmapBytes {
            reserved: self.reservation.len() as u64,
            resident,
            tables: self.table.table_bytes(),
            huge,
        }
    }

    /// HVO is modelled for 64-byte pages only (its tail checks read
    /// [`Page64`]'s fields); other sizes are refused.
    fn hugetlb_vmemmap(&self) -> Result<&dyn HugetlbVmemmap, HvoError> {
        let any: &dyn std::any::Any = self;
        match any.downcast_ref::<Vmemmap<D, Page64>>() {
            Some(model) => Ok(model),
            None => Err(HvoError::PageStructSize(P::SIZE)),
        }
    }

    fn hot_add(&mut self, start: Pfn, nr_pages: u64) -> Result<(), HotplugError> {
        // Memory comes in whole sections, so the range itself bounds its
        // memmap: a range too large is refused before its sections are
        // planned one by one.
        sparsemem::memmap::check_memmap_budget(nr_pages.saturating_mul(P::SIZE))
            .map_err(HotplugError::TooLarge)?;
        let changes = self
            .table
            .plan(start, nr_pages, HotplugOp::Add, MemoryKind::Memory)?;
        self.add(&changes, MemoryKind::Memory)
    }

    fn hot_add_memmap_on_memory(
        &mut self,
        start: Pfn,
        nr_pages: u64,
        vmemmap_pages: u64,
    ) -> Result<(), HotplugError> {
        // The reservation maps every populated memmap page from host
        // memory; where a block's memmap lives is the allocator's record
        // of the altmap (its self-hosted pfns), which this model accepts
        // for any whole-block add it would take without one.
        if vmemmap_pages >= self.geometry().memory_block_pages() {
            return Err(HotplugError::Unsupported(
                "a memmap on the memory cannot take the whole memory block",
            ));
        }
        self.hot_add(start, nr_pages)
    }

    unsafe fn hot_add_memmap_on_frames(
        &mut self,
        start: Pfn,
        nr_pages: u64,
        vmemmap_pages: u64,
        frames: MemmapFrames<'_>,
    ) -> Result<(), HotplugError> {
        // SAFETY: the trait's contract is `add_on_frames`'s.
        unsafe { self.add_on_frames(start, nr_pages, vmemmap_pages, frames) }
    }

    fn hot_remove(&mut self, start: Pfn, nr_pages: u64) -> Result<(), HotplugError> {
        let changes = self
            .table
            .plan(start, nr_pages, HotplugOp::Remove, MemoryKind::Memory)?;
        self.remove(&changes)?;
        self.unmap_frames(start.get(), start.get() + nr_pages)
    }

    fn add_device(&mut self, start: Pfn, nr_pages: u64, node: NodeId) -> Result<(), HotplugError> {
        let changes = self
            .table
            .plan(start, nr_pages, HotplugOp::Add, MemoryKind::Device)?;
        self.add(&changes, MemoryKind::Device)?;
        self.init_device(start.get(), nr_pages, node);
        Ok(())
    }

    fn remove_device(&mut self, start: Pfn, nr_pages: u64) -> Result<(), HotplugError> {
        let changes = self
            .table
            .plan(start, nr_pages, HotplugOp::Remove, MemoryKind::Device)?;
        self.remove(&changes)
    }

    fn set_online(&mut self, start: Pfn, nr_pages: u64, online: bool) -> Result<(), HotplugError> {
        self.table.set_online(start, nr_pages, online)
    }
}

/// The stock kernel: the section table decides, then `vmemmap + pfn`.
pub struct Table;

impl Detector for Table {
    const NAME: &'static str = "vmemmap-table";
    const HOLES: HoleStyle = HoleStyle::Inaccessible;
    const WALKER: PfnWalker = PfnWalker::Subsections;

    fn attach(_: &Reservation) -> Result<Self, BuildError> {
        Ok(Table)
    }

    #[inline(always)]
    fn pfn_valid<P: PageLayout>(model: &Vmemmap<Self, P>, pfn: Pfn) -> bool {
        model.table.pfn_valid(pfn)
    }
}

/// KAMEZAWA's fault-probed `pfn_valid`: load the descriptor's first byte;
/// a fault (read as 0) or a clear present mask (the `Present` flag, or at
/// 8 bytes the memdesc type) means "hole".
pub struct Probe;

impl Detector for Probe {
    const NAME: &'static str = "vmemmap-probe";
    const HOLES: HoleStyle = HoleStyle::Inaccessible;
    const WALKER: PfnWalker = PfnWalker::PerPfn;

    fn attach(_: &Reservation) -> Result<Self, BuildError> {
        install_fixup()?;
        Ok(Probe)
    }

    #[inline(always)]
    fn pfn_valid<P: PageLayout>(model: &Vmemmap<Self, P>, pfn: Pfn) -> bool {
        probe_present(model.base, model.max_pfn, pfn)
    }
}

/// Installs the fault fixup, where the architecture has one.
pub(crate) fn install_fixup() -> Result<(), BuildError> {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        crate::fixup::install().map_err(BuildError::Map)
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        Err(BuildError::Unsupported(format!(
            "the fault-probed pfn_valid needs an exception-table probe, written for x86_64 and aarch64 only (this is {})",
            std::env::consts::ARCH
        )))
    }
}

/// The fault-probed test shared by [`Probe`] and SIGBUS-mode userfaultfd.
#[inline(always)]
pub(crate) fn probe_present<P: PageLayout>(base: *const P, max_pfn: u64, pfn: Pfn) -> bool {
    if pfn.get() >= max_pfn {
        return false;
    }
    let addr = base.wrapping_add(pfn.get() as usize).cast::<u8>();
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        // SAFETY: pfn < max_pfn, so `addr` lies in the model's reservation,
        // whose holes are meant to fault; the fixup handler was installed by
        // the detector's `attach`.
        // A fault reads as 0: not present.
        (unsafe { crate::fixup::probe_byte(addr) }) & P::PRESENT_BYTE_MASK != 0
    }
    // No probe here: `attach` refused, so no model of this detector exists.
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = addr;
        false
    }
}
