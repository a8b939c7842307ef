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
//!
//! With deferred struct page init the boot walk stops, in each node's
//! highest zone, at the node's `first_deferred_pfn` ([`first_deferred_pfn`],
//! 4.17's `defer_init`), and the free memory past it keeps a memmap that
//! nothing wrote, poisoned here as `CONFIG_DEBUG_VM` does; the `deferred`
//! module writes it later (its module doc tells the whole story).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64};

use sparsemem::{BuddyPage, NodeId, PageFlag, Pfn};

use crate::era::Era;
use crate::types::{BuddyModel, ZoneId};

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
        if era.since(5, 8) {
            MemmapInitForm::MemblockRanges
        } else {
            MemmapInitForm::PerPfn
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
fn init_single_page<P: BuddyPage>(page: &P, zone: &MemmapInitZone) -> bool {
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

// Deferred struct page init's boot half: where each node's memmap stops
// being written (`defer_init`) and the poison left past it; the
// allocator's half (the init threads, the grow, the static key's users)
// is `deferred`'s.

/// `first_deferred_pfn` of a node whose memory is taken: no deferred pages
/// left to claim (`ULONG_MAX`).
pub(crate) const TAKEN: u64 = u64::MAX;

/// The deferred-init state of one node's highest zone.
pub(crate) struct DeferredZone {
    /// The zone.
    pub(crate) zone: ZoneId,
    /// Its node.
    pub(crate) node: NodeId,
    /// `pgdat->first_deferred_pfn` behind `pgdat_resize_lock`: where the
    /// unclaimed deferred memory starts, or [`TAKEN`].
    pub(crate) first_deferred_pfn: Mutex<u64>,
    /// `first_deferred_pfn` at boot.
    pub(crate) boot_first: Pfn,
    /// One past the zone's last pfn.
    pub(crate) end: Pfn,
    /// The zone's memory from `first_deferred_pfn` on (sorted, disjoint).
    pub(crate) memory: Vec<(Pfn, Pfn)>,
    /// Pages freed since boot (each also added to the zone's `managed` as
    /// it is freed, as `__free_pages_core` does).
    pub(crate) freed: AtomicU64,
}

/// Every node's deferred state and the `deferred_pages` static key.
#[derive(Default)]
pub(crate) struct Deferred {
    /// `deferred_pages`: on from boot until `page_alloc_init_late`. Read
    /// `Relaxed`: it turns off only under `&mut Allocator`, when no
    /// per-CPU handle exists, so no reader races the store.
    pub(crate) key: AtomicBool,
    pub(crate) zones: Vec<DeferredZone>,
}

/// `defer_init` (4.17 on) over a highest zone's memory: the first
/// section-aligned memory pfn counted after more than `PAGES_PER_SECTION`
/// memory pfns, or `None` when the zone is too small to defer anything.
pub(crate) fn first_deferred_pfn(memory: &[(Pfn, Pfn)], pages_per_section: u64) -> Option<Pfn> {
    let mut counted = 0u64;
    for &(start, end) in memory {
        // The pfn `p` is counted as number `counted + (p - start) + 1`.
        let earliest = start.get() + pages_per_section.saturating_sub(counted);
        let p = earliest.next_multiple_of(pages_per_section);
        if p < end.get() {
            return Some(Pfn::new(p));
        }
        counted += end.get() - start.get();
    }
    None
}

impl DeferredZone {
    /// The deferred state of `zone` whose memory is `memory` (sorted),
    /// or `None` when nothing is deferred.
    pub(crate) fn new(
        zone: ZoneId,
        node: NodeId,
        memory: &[(Pfn, Pfn)],
        pages_per_section: u64,
    ) -> Option<DeferredZone> {
        let first = first_deferred_pfn(memory, pages_per_section)?;
        let end = memory.last()?.1;
        let deferred: Vec<(Pfn, Pfn)> = memory
            .iter()
            .filter(|&&(_, e)| e > first)
            .map(|&(s, e)| (s.max(first), e))
            .collect();
        Some(DeferredZone {
            zone,
            node,
            first_deferred_pfn: Mutex::new(first.get()),
            boot_first: first,
            end,
            memory: deferred,
            freed: AtomicU64::new(0),
        })
    }

    /// The deferred memory inside `[start, end)`.
    pub(crate) fn memory_in(&self, start: Pfn, end: Pfn) -> impl Iterator<Item = (Pfn, Pfn)> + '_ {
        let i = self.memory.partition_point(|&(_, e)| e <= start);
        self.memory[i..]
            .iter()
            .take_while(move |&&(s, _)| s < end)
            .map(move |&(s, e)| (s.max(start), e.min(end)))
    }

    /// Initialises at boot the deferred memory of every `MAX_PAGE_ORDER`
    /// block that holds memory of another zone (`others`): the other
    /// zone's frees look at buddies in the block, and must not read
    /// poison. The kernel defers to the node's end whatever the block
    /// holds; a block shared by two nodes is a layout its NUMA setup
    /// warns about, and pfnlab's generated layouts have them.
    pub(crate) fn keep_unshared(&mut self, others: &[(Pfn, Pfn)], block_pages: u64) {
        let shared = |pfn: u64| {
            let head = pfn & !(block_pages - 1);
            let (a, b) = (Pfn::new(head), Pfn::new(head + block_pages));
            others.iter().any(|&(s, e)| s < b && a < e)
        };
        let mut kept = Vec::new();
        for &(s, e) in &self.memory {
            let mut pfn = s.get();
            while pfn < e.get() {
                let next = ((pfn | (block_pages - 1)) + 1).min(e.get());
                if !shared(pfn) {
                    match kept.last_mut() {
                        Some((_, end)) if *end == Pfn::new(pfn) => *end = Pfn::new(next),
                        _ => kept.push((Pfn::new(pfn), Pfn::new(next))),
                    }
                }
                pfn = next;
            }
        }
        self.memory = kept;
    }

    /// `memory` (the zone's, sorted) minus the deferred part: what boot
    /// frees.
    pub(crate) fn boot_part(&self, memory: &[(Pfn, Pfn)]) -> Vec<(Pfn, Pfn)> {
        let mut out = Vec::new();
        for &(s, e) in memory {
            let mut pfn = s;
            for (ds, de) in self.memory_in(s, e) {
                if pfn < ds {
                    out.push((pfn, ds));
                }
                pfn = de;
            }
            if pfn < e {
                out.push((pfn, e));
            }
        }
        out
    }
}

impl Deferred {
    /// The state for `zones`, with the key on when any has deferred pages.
    pub(crate) fn new(zones: Vec<DeferredZone>) -> Deferred {
        Deferred {
            key: AtomicBool::new(!zones.is_empty()),
            zones,
        }
    }

    pub(crate) fn of_zone(&self, zid: ZoneId) -> Option<&DeferredZone> {
        self.zones.iter().find(|d| d.zone == zid)
    }
}

/// `page_init_poison` over the deferred memory of `zones`: the state of a
/// memmap that boot allocated and did not write.
pub(crate) fn poison_deferred<M: BuddyModel>(model: &mut M, zones: &[DeferredZone]) {
    let model: &M = model;
    for d in zones {
        for &(s, e) in &d.memory {
            for pfn in s.get()..e.get() {
                if let Some(page) = model.pfn_to_page(Pfn::new(pfn)) {
                    // SAFETY: the model is held by `&mut`, so no allocator
                    // or other borrower holds the descriptor, and the page
                    // is free memory no list links yet.
                    unsafe { page.poison() };
                }
            }
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

    #[test]
    fn first_deferred_pfn_follows_defer_init() {
        let p = Pfn::new;
        // One range from 0: the second section starts the deferred part.
        assert_eq!(first_deferred_pfn(&[(p(0), p(4096))], 1024), Some(p(1024)));
        // A range that starts mid-section counts from its start.
        assert_eq!(
            first_deferred_pfn(&[(p(100), p(4096))], 1024),
            Some(p(2048))
        );
        // Memory split in two: 600 pages counted, then 424 more needed.
        assert_eq!(
            first_deferred_pfn(&[(p(0), p(600)), (p(3000), p(8000))], 1024),
            Some(p(4096))
        );
        // Too small to defer.
        assert_eq!(first_deferred_pfn(&[(p(0), p(1024))], 1024), None);
        // The first pfn past one section is deferred even when little follows.
        assert_eq!(first_deferred_pfn(&[(p(0), p(1500))], 1024), Some(p(1024)));
    }

    #[test]
    fn boot_part_stops_at_first_deferred_pfn() {
        let p = Pfn::new;
        let memory = [(p(0), p(600)), (p(3000), p(8000))];
        let d = DeferredZone::new(ZoneId::new(0), NodeId::ZERO, &memory, 1024).unwrap();
        assert_eq!(d.memory, vec![(p(4096), p(8000))]);
        assert_eq!(
            d.boot_part(&memory),
            vec![(p(0), p(600)), (p(3000), p(4096))]
        );
    }

    #[test]
    fn a_block_shared_with_another_zone_is_initialised_at_boot() {
        let p = Pfn::new;
        let memory = [(p(0), p(8000))];
        let mut d = DeferredZone::new(ZoneId::new(0), NodeId::ZERO, &memory, 1024).unwrap();
        // Another node's memory from 7900: the block [7680, 8192) is shared.
        d.keep_unshared(&[(p(7900), p(9000))], 512);
        assert_eq!(d.memory, vec![(p(1024), p(7680))]);
        assert_eq!(
            d.boot_part(&memory),
            vec![(p(0), p(1024)), (p(7680), p(8000))]
        );
    }
}
