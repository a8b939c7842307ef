//! The userfaultfd detectors in the deferred window (feature `uffd`; the
//! host must permit userfaultfd, as it does for root, else each test says
//! why and passes without running).
//!
//! They register only the reservation's holes with userfaultfd, and the
//! memmap past `first_deferred_pfn` is populated (poisoned, not missing),
//! so in the window neither fires: `pfn_valid` loads byte 0 of a poisoned
//! descriptor, 0xff, whose present bit is set, and says valid — as the
//! table and the probe do. A hole of the same build still fires, so the
//! detector is live and the answer is not a detector that never looks.

use buddy::{Allocator, BuddyModel, Era, Kernel, Options};
use sparsemem::{BuddyPage, BuildError, Layout, MemoryModel, Pfn};
use vmemmap::{VmemmapUffd, VmemmapUffdSigbus};

use crate::common::two_zone_layout;

/// A pfn in the hole between 3 and 4 GiB: no memmap.
fn hole() -> Pfn {
    Pfn::new(((3 << 30) >> 12) + 100)
}

/// The model, or `None` with the reason printed when the host refuses
/// userfaultfd.
fn built<M>(model: Result<M, BuildError>) -> Option<M> {
    match model {
        Ok(m) => Some(m),
        Err(BuildError::Unsupported(why)) if why.contains("userfaultfd is not permitted") => {
            eprintln!("skipped: {why}");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// A 6.18 build with deferred init, still in its window.
fn in_the_window<M: BuddyModel>(model: M, layout: &Layout) -> (Allocator<M, Kernel>, Pfn) {
    let options = Options {
        deferred_init: true,
        ..Options::for_era(Era::V6_18)
    };
    let alloc = Allocator::new(model, layout, options).unwrap();
    assert!(alloc.deferred_pages_pending() > 0, "the window is open");
    let (_, first) = alloc.first_deferred_pfns()[0];
    (alloc, first)
}

/// Valid, a descriptor, online — and the descriptor is poison.
fn answers_valid_with_poison<M: BuddyModel>(alloc: &Allocator<M, Kernel>, first: Pfn) {
    for pfn in [first, first + 1, first + 4095] {
        let m = alloc.model();
        assert!(m.pfn_valid(pfn), "{}: pfn_valid in the window", m.name());
        assert!(m.pfn_to_page(pfn).unwrap().is_poisoned());
        assert!(m.pfn_to_online_page(pfn).unwrap().is_poisoned());
    }
}

#[test]
fn the_zero_page_detector_never_fires_in_the_window() {
    let layout = two_zone_layout();
    let Some(model) = built(VmemmapUffd::new(&layout)) else {
        return;
    };
    let (alloc, first) = in_the_window(model, &layout);
    let detector = alloc.model().detector();
    let before = detector.faults();
    answers_valid_with_poison(&alloc, first);
    assert_eq!(
        detector.faults(),
        before,
        "the deferred memmap is populated: no userfault"
    );
    assert!(!alloc.model().pfn_valid(hole()), "a hole reads as zero");
    assert_eq!(
        detector.faults(),
        before + 1,
        "and the hole's first touch faults"
    );
    assert!(detector.thread_alive());
}

#[test]
fn the_sigbus_detector_never_fires_in_the_window() {
    let layout = two_zone_layout();
    let Some(model) = built(VmemmapUffdSigbus::new(&layout)) else {
        return;
    };
    let (alloc, first) = in_the_window(model, &layout);
    answers_valid_with_poison(&alloc, first);
    // A hole raises SIGBUS, which the probe's fixup turns into "invalid".
    assert!(!alloc.model().pfn_valid(hole()));
}
