//! The section table by its edges: online state that must stop at a
//! section boundary, the pfns carried in errors, absent entries beside
//! present ones in the same root page, and the present-section index.

use sparsemem::table::{Classic, Extreme, HotplugOp, MemoryKind, SectionRoot, SectionTable};
use sparsemem::{Geometry, HotplugError, Page, Pfn, SectionNr};

const G: Geometry = Geometry::X86_64;
const SECTION: u64 = 1 << 15; // pages per 128 MiB section
const SUB: u64 = 512; // pages per 2 MiB subsection

/// The kind a range is added as: whole sections are memory blocks, other
/// ranges device memory.
fn kind_of(start: u64, nr: u64) -> MemoryKind {
    if start.is_multiple_of(SECTION) && nr.is_multiple_of(SECTION) {
        MemoryKind::Memory
    } else {
        MemoryKind::Device
    }
}

/// A VMEMMAP table with `[start, start + nr)` hot-added (offline) over a
/// dummy memmap: the table never dereferences it.
fn with_added<R: SectionRoot>(ranges: &[(u64, u64)]) -> SectionTable<R, true> {
    static DUMMY: [Page; 1] = [const { Page::new_zeroed() }];
    let mut t = SectionTable::<R, true>::new(G).unwrap();
    for &(start, nr) in ranges {
        let kind = kind_of(start, nr);
        let plan = t.plan(Pfn::new(start), nr, HotplugOp::Add, kind).unwrap();
        t.commit_add(&plan, kind, |_| DUMMY.as_ptr());
    }
    t
}

fn both(check: impl Fn(&dyn Fn(&[(u64, u64)]) -> Box<dyn TableView>)) {
    check(&|r| Box::new(with_added::<Classic>(r)));
    check(&|r| Box::new(with_added::<Extreme>(r)));
}

/// The calls these tests make, object-safe over both roots.
trait TableView {
    fn valid(&self, pfn: u64) -> bool;
    fn online(&self, pfn: u64) -> bool;
    fn set_online(&mut self, start: u64, nr: u64, online: bool) -> Result<(), HotplugError>;
    fn plan_add(&self, start: u64, nr: u64) -> Result<usize, HotplugError>;
    fn remove(&mut self, start: u64, nr: u64);
    fn present(&self) -> (usize, Vec<SectionNr>);
}

impl<R: SectionRoot> TableView for SectionTable<R, true> {
    fn valid(&self, pfn: u64) -> bool {
        self.pfn_valid(Pfn::new(pfn))
    }
    fn online(&self, pfn: u64) -> bool {
        self.pfn_online(Pfn::new(pfn))
    }
    fn set_online(&mut self, start: u64, nr: u64, online: bool) -> Result<(), HotplugError> {
        SectionTable::set_online(self, Pfn::new(start), nr, online)
    }
    fn plan_add(&self, start: u64, nr: u64) -> Result<usize, HotplugError> {
        self.plan(Pfn::new(start), nr, HotplugOp::Add, kind_of(start, nr))
            .map(|p| p.len())
    }
    fn remove(&mut self, start: u64, nr: u64) {
        let plan = self
            .plan(Pfn::new(start), nr, HotplugOp::Remove, kind_of(start, nr))
            .unwrap();
        self.commit_remove(&plan);
    }
    fn present(&self) -> (usize, Vec<SectionNr>) {
        (
            self.nr_present(),
            self.sections().map(|(nr, _)| nr).collect(),
        )
    }
}

#[test]
fn onlining_a_range_that_ends_on_a_section_boundary_leaves_the_next_section_alone() {
    both(|make| {
        let mut t = make(&[(0, 2 * SECTION)]);
        assert!(
            !t.online(0) && !t.online(SECTION),
            "hot-added memory starts offline"
        );
        t.set_online(0, SECTION, true).unwrap();
        assert!(t.online(0) && t.online(SECTION - 1));
        assert!(!t.online(SECTION), "the range ended at the boundary");
        t.set_online(SECTION, SECTION, true).unwrap();
        t.set_online(0, SECTION, false).unwrap();
        assert!(
            !t.online(SECTION - 1) && t.online(SECTION),
            "offline stops at the boundary too"
        );
        assert!(t.valid(0), "online state never changes validity");
    });
}

#[test]
fn errors_carry_the_first_offending_subsection() {
    both(|make| {
        // Section 1 holds device subsections 0..4 and 8; 4..8 is a hole.
        let mut t = make(&[(SECTION, 4 * SUB), (SECTION + 8 * SUB, SUB)]);
        let e = t.set_online(SECTION, SECTION, true).unwrap_err();
        assert!(
            matches!(e, HotplugError::Device { pfn, is_device: true } if pfn == Pfn::new(SECTION)),
            "device memory is never onlined: {e}"
        );
        assert!(!t.online(SECTION), "a refused online changes nothing");
        let e = t.set_online(3 * SECTION, SECTION, true).unwrap_err();
        assert_eq!(
            e.to_string(),
            HotplugError::NotPresent {
                pfn: Pfn::new(3 * SECTION)
            }
            .to_string()
        );
        let e = t.set_online(SECTION + 7, SECTION, true).unwrap_err();
        assert!(
            matches!(e, HotplugError::Misaligned { start, .. } if start == Pfn::new(SECTION + 7)),
            "online comes in memory blocks: {e}"
        );
        let e = t.plan_add(SECTION + 2 * SUB, 4 * SUB).unwrap_err();
        assert!(
            matches!(e, HotplugError::AlreadyPresent { pfn } if pfn == Pfn::new(SECTION + 2 * SUB)),
            "{e}"
        );
        assert_eq!(
            t.plan_add(SECTION + 4 * SUB, 4 * SUB).unwrap(),
            1,
            "the hole can be added"
        );
        let e = t.plan_add(SECTION, SECTION).unwrap_err();
        assert!(
            matches!(e, HotplugError::AlreadyPresent { pfn } if pfn == Pfn::new(SECTION)),
            "a memory block over device memory: {e}"
        );
        let e = t.set_online(SECTION, 0, true).unwrap_err();
        assert!(
            matches!(e, HotplugError::Misaligned { .. }),
            "an empty range: {e}"
        );
    });
}

#[test]
fn an_absent_section_beside_a_present_one_is_invalid() {
    both(|make| {
        // Sections 0 and 2 present; 1 and 3 share their root page (EXTREME)
        // or their array (classic) but have no memmap.
        let t = make(&[(0, SUB), (2 * SECTION, SECTION)]);
        for pfn in [SUB, SECTION, SECTION + 5, 3 * SECTION, 255 * SECTION] {
            assert!(!t.valid(pfn), "{pfn:#x}");
        }
        assert!(t.valid(0) && t.valid(SUB - 1) && t.valid(2 * SECTION) && t.valid(3 * SECTION - 1));
    });
}

#[test]
fn the_present_index_follows_adds_and_removes() {
    both(|make| {
        let mut t = make(&[(3 * SECTION, SUB), (0, SUB), (SECTION, 2 * SECTION)]);
        // Sections 1 and 2 were one request: memory goes away per block.
        let nrs = |v: &[u64]| v.iter().map(|&n| SectionNr::new(n)).collect::<Vec<_>>();
        assert_eq!(t.present(), (4, nrs(&[0, 1, 2, 3])), "ascending, each once");
        t.remove(SECTION, SECTION);
        assert_eq!(t.present(), (3, nrs(&[0, 2, 3])));
        assert!(!t.valid(SECTION));
        t.remove(3 * SECTION, SUB);
        assert_eq!(
            t.present(),
            (2, nrs(&[0, 2])),
            "a section left empty is gone"
        );
    });
}
