//! `memmap_init` over a zone's span, in the forms the kernel has had.
//!
//! At boot every `struct page` of a zone's span is written once
//! (`__init_single_page`: zone and node links, a reference count of one,
//! `PG_reserved` until the buddy takes the page). What changed over the
//! years is how the loop finds the pfns that have a `struct page`:
//!
//! - [`MemmapInitForm::PerPfn`] (2.6 to 4.10, and the 2.6.9 and 2.6.23
//!   eras): `memmap_init_zone` asks `early_pfn_valid` of every pfn of the
//!   span and initialises the valid ones, holes with a memmap included.
//! - [`MemmapInitForm::SkipToNextRegion`] (4.11 to 4.16 only; a labelled
//!   variant, no pfnlab era has it; Paul Burton, "mm: page_alloc: skip over
//!   regions of invalid pfns where possible"): at an invalid pfn, jump to
//!   the next memblock memory region (`memblock_next_valid_pfn`). It leaves
//!   uninitialised the valid pfns that are not memory and follow an
//!   invalid one — the leading hole of a present section — which is why it
//!   was reverted in 4.17 (`move_freepages` found pages of the wrong zone
//!   in a pageblock).
//! - [`MemmapInitForm::MemblockRanges`] (5.8 onwards; the 5.13 and 6.18
//!   eras): `memmap_init` walks `for_each_mem_pfn_range`, initialising the
//!   memory of each range without asking `pfn_valid`, and the holes
//!   between ranges with `init_unavailable_range`, which asks `pfn_valid`
//!   of each pageblock's first pfn and skips the pageblock when it is
//!   invalid. Where validity is finer than a pageblock (arm64 with 64 KiB
//!   pages: 512 MiB pageblocks, 2 MiB subsections) a valid hole pfn in a
//!   pageblock whose first pfn is invalid is skipped too.
//!
//! Every form writes the same thing to each pfn it initialises; the forms
//! differ in which pfns they reach and in how many `pfn_valid` calls that
//! takes, which [`MemmapInitCounts`] reports. Writing through the model
//! pfnlab checks `pfn_valid` once more per written pfn (`pfn_to_page`,
//! checked, so safe code cannot reach a pfn without a memmap); that check
//! is not counted, as the kernel does not make it.

use sparsemem::{NodeId, Page, PageFlag, Pfn};

use crate::era::Era;
use crate::types::BuddyModel;

/// How `memmap_init` finds the pfns it initialises.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemmapInitForm {
    /// `early_pfn_valid` on every pfn of the span (2.6 eras).
    PerPfn,
    /// At an invalid pfn, skip to the next memblock region (4.11–4.16: a
    /// labelled variant, in no pfnlab era).
    SkipToNextRegion,
    /// Memblock ranges, holes by `init_unavailable_range` (5.8+: the 5.13
    /// and 6.18 eras).
    MemblockRanges,
}

impl MemmapInitForm {
    /// Every form.
    pub const ALL: [MemmapInitForm; 3] = [
        MemmapInitForm::PerPfn,
        MemmapInitForm::SkipToNextRegion,
        MemmapInitForm::MemblockRanges,
    ];

    /// The form `era` runs.
    pub const fn of_era(era: Era) -> MemmapInitForm {
        match era {
            Era::V2_6_9 | Era::V2_6_23 => MemmapInitForm::PerPfn,
            Era::V5_13 | Era::V6_18 => MemmapInitForm::MemblockRanges,
        }
    }

    /// The form's name in reports.
    pub const fn name(self) -> &'static str {
        match self {
            MemmapInitForm::PerPfn => "per-pfn (2.6)",
            MemmapInitForm::SkipToNextRegion => "skip-to-region (4.11-4.16 variant)",
            MemmapInitForm::MemblockRanges => "memblock-ranges (5.8+)",
        }
    }
}

/// The zone a `memmap_init` writes: its span and ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemmapInitZone {
    /// The zone id written into each page.
    pub zone: u8,
    /// The node id written into each page.
    pub node: NodeId,
    /// First pfn of the span.
    pub start: Pfn,
    /// One past the last pfn of the span.
    pub end: Pfn,
}

/// What one `memmap_init` did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemmapInitCounts {
    /// `pfn_valid` (`early_pfn_valid`) calls the form makes.
    pub pfn_valid_calls: u64,
    /// Pages initialised.
    pub pages_initialised: u64,
    /// Memblock region searches (`memblock_next_valid_pfn`).
    pub region_searches: u64,
}

/// `__init_single_page` + `SetPageReserved`: zone and node links, one
/// reference, reserved. Device memory's descriptors are left alone.
#[inline(always)]
fn init_single_page(page: &Page, zone: &MemmapInitZone) -> bool {
    if page.is_zone_device() {
        return false;
    }
    // SAFETY: `memmap_init` holds the model by `&mut`, so no allocator and
    // no other borrower holds any descriptor: the caller owns every field
    // (the `Page` contract).
    unsafe {
        page.set_zone_node(zone.zone, zone.node.get());
        page.set_refcount(1);
        page.set(PageFlag::Reserved);
    }
    true
}

/// Initialises `pfn` (checked: see the module doc) and counts it.
#[inline(always)]
fn init_pfn<M: BuddyModel>(model: &M, pfn: Pfn, zone: &MemmapInitZone, n: &mut MemmapInitCounts) {
    if let Some(page) = model.pfn_to_page(pfn)
        && init_single_page(page, zone)
    {
        n.pages_initialised += 1;
    }
}

/// `memblock_next_valid_pfn`: the first pfn after `pfn` inside a memory
/// region of `memory` (sorted, disjoint), or `end` when there is none.
fn memblock_next_valid_pfn(memory: &[(Pfn, Pfn)], pfn: Pfn, end: Pfn) -> Pfn {
    let next = pfn + 1;
    let i = memory.partition_point(|&(_, e)| e <= next);
    match memory.get(i) {
        Some(&(s, _)) => next.max(s).min(end),
        None => end,
    }
}

/// `memmap_init` of `zone`'s span over `model` in `form`; `memory` is the
/// node's memblock memory (sorted, disjoint pfn ranges).
pub fn memmap_init<M: BuddyModel>(
    model: &mut M,
    memory: &[(Pfn, Pfn)],
    zone: MemmapInitZone,
    form: MemmapInitForm,
) -> MemmapInitCounts {
    let model: &M = model;
    let mut n = MemmapInitCounts::default();
    match form {
        MemmapInitForm::PerPfn => {
            let mut pfn = zone.start;
            while pfn < zone.end {
                n.pfn_valid_calls += 1;
                if model.pfn_valid(pfn) {
                    init_pfn(model, pfn, &zone, &mut n);
                }
                pfn = pfn + 1;
            }
        }
        MemmapInitForm::SkipToNextRegion => {
            let mut pfn = zone.start;
            while pfn < zone.end {
                n.pfn_valid_calls += 1;
                if model.pfn_valid(pfn) {
                    init_pfn(model, pfn, &zone, &mut n);
                    pfn = pfn + 1;
                } else {
                    n.region_searches += 1;
                    pfn = memblock_next_valid_pfn(memory, pfn, zone.end);
                }
            }
        }
        MemmapInitForm::MemblockRanges => {
            let mut hole = zone.start;
            for &(s, e) in memory {
                let (s, e) = (s.clamp(zone.start, zone.end), e.clamp(zone.start, zone.end));
                if s >= e {
                    continue;
                }
                init_unavailable_range(model, [hole, s], &zone, &mut n);
                let mut pfn = s;
                while pfn < e {
                    init_pfn(model, pfn, &zone, &mut n);
                    pfn = pfn + 1;
                }
                hole = hole.max(e);
            }
            init_unavailable_range(model, [hole, zone.end], &zone, &mut n);
        }
    }
    n
}

/// `init_unavailable_range` (5.12+): the pfns of a hole whose pageblock's
/// first pfn is valid, reserved; a pageblock with an invalid first pfn is
/// skipped whole.
fn init_unavailable_range<M: BuddyModel>(
    model: &M,
    [start, end]: [Pfn; 2],
    zone: &MemmapInitZone,
    n: &mut MemmapInitCounts,
) {
    let block = model.geometry().pageblock_nr_pages();
    let mut pfn = start;
    while pfn < end {
        let block_start = Pfn::new(pfn.get() & !(block - 1));
        n.pfn_valid_calls += 1;
        if model.pfn_valid(block_start) {
            init_pfn(model, pfn, zone, n);
            pfn = pfn + 1;
        } else {
            pfn = block_start + block;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_valid_pfn_finds_the_next_region() {
        let p = Pfn::new;
        let memory = [(p(10), p(20)), (p(40), p(50))];
        let end = p(100);
        assert_eq!(memblock_next_valid_pfn(&memory, p(0), end), p(10));
        assert_eq!(memblock_next_valid_pfn(&memory, p(12), end), p(13));
        assert_eq!(memblock_next_valid_pfn(&memory, p(19), end), p(40));
        assert_eq!(memblock_next_valid_pfn(&memory, p(49), end), end);
        assert_eq!(memblock_next_valid_pfn(&memory, p(5), p(8)), p(8));
    }

    #[test]
    fn forms_of_eras() {
        assert_eq!(MemmapInitForm::of_era(Era::V2_6_9), MemmapInitForm::PerPfn);
        assert_eq!(
            MemmapInitForm::of_era(Era::V6_18),
            MemmapInitForm::MemblockRanges
        );
    }
}
