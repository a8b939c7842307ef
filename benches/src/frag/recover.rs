//! The cost to recover huge frames from a workload's end state.
//!
//! A fragmented allocator can still give a huge frame if something moves
//! the allocated frames out of one. Two readings of that cost, from the
//! same end state:
//!
//! - **Frames to move** (LLFree's measure, Wrenger et al., USENIX ATC
//!   2023: 266,503 frames for LLFree against 6,634,775 for Linux after its
//!   fragmentation benchmark on 128 GiB): the allocated base frames in the
//!   least-occupied huge frames, as many huge frames as are wanted. It is
//!   the least any compaction must copy, whatever its scanners do: a huge
//!   frame is free only once each of its allocated frames has gone, and
//!   the cheapest ones to empty are those holding the fewest. A huge frame
//!   holding an immovable allocation cannot be emptied. Enough free memory
//!   must remain elsewhere to take the moved frames: `k` huge frames can
//!   be emptied only while `k` huge frames' worth of memory is free.
//!   [`frames_to_move`] computes it for `k` huge frames; [`Recovery`]
//!   reports it for the wanted count and for every huge frame the free
//!   memory could make (the paper's figures appear to be this second
//!   form; the paper gives the numbers, not their formula).
//! - **A compaction run** (the buddy, from 2.6.35 on): what the kernel
//!   does when `K` huge frames are asked for, as growing the hugetlb pool
//!   by `K` does (`echo K > /proc/sys/vm/nr_hugepages`: mm/hugetlb.c's
//!   `alloc_pool_huge_folio` and `alloc_buddy_hugetlb_folio`,
//!   `alloc_buddy_huge_page` before folios): `K` order-9 allocations with
//!   `htlb_alloc_mask` (`GFP_HIGHUSER_MOVABLE` for a migratable hstate)
//!   and `__GFP_COMP | __GFP_NOWARN | __GFP_RETRY_MAYFAIL` (the pool's
//!   `__GFP_THISNODE` changes nothing on one node), each compacting
//!   directly when it fails (`__alloc_pages_direct_compact`). The pool
//!   stops trying hard on a node after a failure (`node_alloc_noretry`);
//!   here the first failure ends the step.
//!   Each allocation goes through the slow path's compaction loop
//!   ([`buddy::alloc_pages_direct_compact_retry`]): async first, then
//!   `COMPACT_PRIO_SYNC_LIGHT`, which a costly order does not go past
//!   (`MIN_COMPACT_COSTLY_PRIORITY`), retried while `should_compact_retry`
//!   allows (`__GFP_RETRY_MAYFAIL` lets it); reclaim between the tries is
//!   not modelled. Each run stops at `compact_finished`'s first free order-9 block, which the
//!   allocation takes; the next allocation compacts again. `/proc/sys/vm/
//!   compact_memory` would not fit: it compacts the whole zone whatever is
//!   wanted. The movable allocations get owners ([`buddy::Owners`], the
//!   page-table entries that map them) and the immovable ones do not. The
//!   per-CPU lists are drained first (`drain_all_pages`, which the slow
//!   path runs before it gives up), so the free scanner sees every free
//!   page. The huge frames it took are given back at the end.

use std::collections::HashMap;
use std::time::Instant;

use buddy::{
    Allocator, BuddyModel, CompactState, CompactVmstat, Gfp, Owners, Variant,
    alloc_pages_direct_compact_retry,
};
use serde::Serialize;
use sparsemem::{Migratetype, NodeId};

use super::Live;
use crate::spread::Interval;

/// Allocated base frames per huge frame, from a workload's live set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Occupancy {
    /// Huge frames in the allocator's memory.
    pub huge_frames: u64,
    /// Base frames per huge frame (`1 << huge_order`).
    pub frames_per_huge: u64,
    /// Free base frames.
    pub free_frames: u64,
    /// Allocated frames per occupied huge frame: (movable, immovable).
    occupied: HashMap<u64, (u64, u64)>,
}

impl Occupancy {
    /// The occupancy of `live` in memory of `nr_frames` base frames
    /// (huge frames of `1 << huge_order` of them); every frame the live set
    /// does not hold counts as free.
    pub fn of(live: &[Live], nr_frames: u64, huge_order: u32) -> Occupancy {
        let mut occupied: HashMap<u64, (u64, u64)> = HashMap::new();
        let mut held = 0;
        for l in live {
            let nr = l.order.nr_pages();
            held += nr;
            let slot = occupied.entry(l.pfn.get() >> huge_order).or_default();
            if l.migratetype == Migratetype::Movable {
                slot.0 += nr;
            } else {
                slot.1 += nr;
            }
        }
        Occupancy {
            huge_frames: nr_frames >> huge_order,
            frames_per_huge: 1 << huge_order,
            free_frames: nr_frames.saturating_sub(held),
            occupied,
        }
    }

    /// Huge frames no allocation touches.
    pub fn free_huge(&self) -> u64 {
        self.huge_frames.saturating_sub(self.occupied.len() as u64)
    }

    /// Huge frames the free memory would make if it were all together.
    pub fn possible(&self) -> u64 {
        let pinned = self.occupied.values().filter(|o| o.1 > 0).count() as u64;
        let emptiable = self.huge_frames.saturating_sub(pinned);
        (self.free_frames / self.frames_per_huge).min(emptiable)
    }
}

/// Frames to move to have `k` huge frames wholly free: the allocated
/// frames of the `k` least-occupied huge frames holding no immovable
/// allocation; `None` when there are fewer such huge frames, or less free
/// memory than `k` huge frames (the moved frames would have nowhere to
/// go).
pub fn frames_to_move(occ: &Occupancy, k: u64) -> Option<u64> {
    if k > occ.possible() {
        return None;
    }
    let mut movable: Vec<u64> = occ
        .occupied
        .values()
        .filter(|o| o.1 == 0)
        .map(|o| o.0)
        .collect();
    movable.sort_unstable();
    let from_occupied = k.saturating_sub(occ.free_huge()) as usize;
    Some(movable.iter().take(from_occupied).sum())
}

/// What recovering huge frames cost on one run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Recovery {
    /// Huge frames wanted (`--recover`).
    pub wanted: u64,
    /// Huge frames the allocator's memory makes.
    pub huge_frames: u64,
    /// Huge frames wholly free at the end of the workload.
    pub free_huge: u64,
    /// Frames to move to have `wanted` huge frames free (`None`: the
    /// free or movable memory does not allow it).
    pub frames_to_move: Option<u64>,
    /// Huge frames all the free memory would make.
    pub possible: u64,
    /// Frames to move to make them all: the paper's reading.
    pub frames_to_move_all: u64,
    /// The compaction run (`None` for an allocator without compaction).
    pub compaction: Option<CompactionCost>,
}

impl Recovery {
    /// The measure alone, for an allocator without compaction.
    pub fn measure(occ: &Occupancy, wanted: u64) -> Recovery {
        Recovery {
            wanted,
            huge_frames: occ.huge_frames,
            free_huge: occ.free_huge(),
            frames_to_move: frames_to_move(occ, wanted),
            possible: occ.possible(),
            frames_to_move_all: frames_to_move(occ, occ.possible()).unwrap_or(0),
            compaction: None,
        }
    }
}

/// What the compaction run did, in `/proc/vmstat`'s terms.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CompactionCost {
    /// Order-9 allocations that succeeded (at most the wanted count).
    pub recovered: u64,
    /// Direct compactions run (`compact_stall`).
    pub compact_stall: u64,
    /// `pgmigrate_success`: base frames moved.
    pub pgmigrate_success: u64,
    /// `pgmigrate_fail`.
    pub pgmigrate_fail: u64,
    /// `compact_migrate_scanned`.
    pub compact_migrate_scanned: u64,
    /// `compact_free_scanned`.
    pub compact_free_scanned: u64,
    /// `compact_isolated`.
    pub compact_isolated: u64,
    /// Free order-9 blocks (in huge frames) before the run.
    pub free_huge_before: u64,
    /// The same after the run, the huge frames taken given back.
    pub free_huge_after: u64,
    /// Wall time of the allocations and their compaction, ns.
    pub elapsed_ns: f64,
}

impl CompactionCost {
    /// `pfns scanned`: both scanners.
    pub fn scanned(&self) -> u64 {
        self.compact_migrate_scanned + self.compact_free_scanned
    }
}

/// Wholly free huge frames on `alloc`'s free lists.
fn free_huge_blocks<M: BuddyModel, V: Variant>(alloc: &Allocator<M, V>) -> u64 {
    let pageblock_order = alloc.model().geometry().pageblock_order().index();
    alloc
        .zones()
        .iter()
        .flat_map(|z| z.nr_free().into_iter().enumerate())
        .filter(|&(o, _)| o >= pageblock_order)
        .map(|(o, n)| n << (o - pageblock_order))
        .sum()
}

/// The hugetlb pool's allocation mask: `htlb_alloc_mask` for a
/// migratable hstate with what `alloc_buddy_hugetlb_folio` adds when it
/// tries hard (mm/hugetlb.c).
const HUGETLB_GFP: Gfp = Gfp::HIGHUSER_MOVABLE
    .union(Gfp::COMP)
    .union(Gfp::RETRY_MAYFAIL)
    .union(Gfp::NOWARN);

/// Recovers `k` huge frames from `alloc`'s state by compaction (see the
/// module doc), `live` being every allocation the workload holds; the
/// allocator's per-CPU handles must be gone. The moved allocations' pfns
/// in `live` follow their owners. The allocator must be of an era with
/// compaction.
pub fn compact_buddy<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    live: &mut [Live],
    k: u64,
) -> Result<(CompactionCost, Owners), String> {
    let mut owners = Owners::new();
    let mut ids = Vec::with_capacity(live.len());
    for l in live.iter() {
        ids.push(match l.migratetype {
            Migratetype::Movable => Some(
                owners
                    .own(alloc, l.pfn, l.order, Gfp::HIGHUSER_MOVABLE)
                    .map_err(|e| format!("owning {}: {e}", l.pfn))?,
            ),
            _ => None,
        });
    }
    let node = alloc.nodes().first().map_or(NodeId::new(0), |n| n.id);
    let order = alloc.model().geometry().pageblock_order();
    let mut states = CompactState::for_zones(alloc);
    let mut vmstat = CompactVmstat::default();
    let free_huge_before = free_huge_blocks(alloc);
    let mut taken = Vec::new();
    let mut tries = Vec::new();
    let t = Instant::now();
    for _ in 0..k {
        let got = alloc_pages_direct_compact_retry(
            alloc,
            order,
            HUGETLB_GFP,
            node,
            &mut owners,
            &mut states,
            &mut vmstat,
            &mut tries,
        );
        match got {
            Ok(pfn) => taken.push(pfn),
            Err(_) => break,
        }
    }
    let elapsed_ns = t.elapsed().as_secs_f64() * 1e9;
    for (l, id) in live.iter_mut().zip(&ids) {
        if let Some(id) = id {
            let (pfn, _) = owners.resolve(*id).ok_or("an owner vanished")?;
            l.pfn = pfn;
        }
    }
    let recovered = taken.len() as u64;
    for pfn in taken {
        alloc
            .free_pages(pfn, order)
            .map_err(|e| format!("giving back huge frame {pfn}: {e}"))?;
    }
    let cost = CompactionCost {
        recovered,
        compact_stall: vmstat.compact_stall,
        pgmigrate_success: vmstat.pgmigrate_success,
        pgmigrate_fail: vmstat.pgmigrate_fail,
        compact_migrate_scanned: vmstat.compact_migrate_scanned,
        compact_free_scanned: vmstat.compact_free_scanned,
        compact_isolated: vmstat.compact_isolated,
        free_huge_before,
        free_huge_after: free_huge_blocks(alloc),
        elapsed_ns,
    };
    Ok((cost, owners))
}

/// The recovery of `k` huge frames on a buddy at the end of a workload
/// (per-CPU handles gone): the measure, and a compaction run where the
/// era has compaction.
pub fn recover_buddy<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    live: &mut [Live],
    k: u64,
) -> Result<Recovery, String> {
    let huge_order = alloc.model().geometry().pageblock_order().get();
    let occ = Occupancy::of(live, alloc.managed_pages_total(), u32::from(huge_order));
    let mut recovery = Recovery::measure(&occ, k);
    if alloc.options().era.has_compaction() {
        recovery.compaction = Some(compact_buddy(alloc, live, k)?.0);
    }
    Ok(recovery)
}

/// `--recover`'s default: 1 % of the huge frames, at least one.
pub fn default_recover(huge_frames: u64) -> u64 {
    (huge_frames / 100).max(1)
}

/// The huge frames a run recovers: `asked`, or the default for
/// `huge_frames` when not given; 0 turns recovery off.
pub fn wanted(asked: Option<u64>, huge_frames: u64) -> u64 {
    asked.unwrap_or_else(|| default_recover(huge_frames))
}

/// One allocator's recoveries over the trials: medians and intervals.
#[derive(Clone, Debug, Serialize)]
pub struct RecoverySummary {
    /// Huge frames wanted.
    pub wanted: u64,
    /// Trials whose free and movable memory allowed `wanted`.
    pub allowed: usize,
    /// Frames to move for `wanted`, over the trials that allowed it.
    pub frames_to_move: Option<Interval>,
    /// Huge frames all the free memory would make.
    pub possible: Option<Interval>,
    /// Frames to move to make them all (the paper's reading).
    pub frames_to_move_all: Option<Interval>,
    /// The same per GiB of the allocator's memory (huge frames of 2 MiB),
    /// to set beside the paper's 128 GiB.
    pub frames_to_move_all_per_gib: Option<Interval>,
    /// The compaction runs (`None` without compaction).
    pub compaction: Option<CompactionSummary>,
}

/// Compaction runs over the trials.
#[derive(Clone, Debug, Serialize)]
pub struct CompactionSummary {
    /// Huge frames the allocations got.
    pub recovered: Option<Interval>,
    /// `pgmigrate_success`: frames moved.
    pub pgmigrate_success: Option<Interval>,
    /// `pgmigrate_fail`.
    pub pgmigrate_fail: Option<Interval>,
    /// pfns both scanners scanned.
    pub pfns_scanned: Option<Interval>,
    /// `compact_isolated`.
    pub compact_isolated: Option<Interval>,
    /// Free huge frames before the run.
    pub free_huge_before: Option<Interval>,
    /// Free huge frames after it, those taken given back.
    pub free_huge_after: Option<Interval>,
    /// Wall time, ms.
    pub elapsed_ms: Option<Interval>,
}

fn interval(values: impl Iterator<Item = f64>) -> Option<Interval> {
    Interval::of_median(&values.collect::<Vec<_>>()).ok()
}

impl RecoverySummary {
    /// The summary of `runs` (`None` when no run recovered anything).
    pub fn of(runs: &[Recovery]) -> Option<RecoverySummary> {
        let first = runs.first()?;
        let costs: Vec<&CompactionCost> =
            runs.iter().filter_map(|r| r.compaction.as_ref()).collect();
        let of = |f: fn(&CompactionCost) -> f64| interval(costs.iter().map(|&c| f(c)));
        let compaction = (!costs.is_empty()).then(|| CompactionSummary {
            recovered: of(|c| c.recovered as f64),
            pgmigrate_success: of(|c| c.pgmigrate_success as f64),
            pgmigrate_fail: of(|c| c.pgmigrate_fail as f64),
            pfns_scanned: of(|c| c.scanned() as f64),
            compact_isolated: of(|c| c.compact_isolated as f64),
            free_huge_before: of(|c| c.free_huge_before as f64),
            free_huge_after: of(|c| c.free_huge_after as f64),
            elapsed_ms: of(|c| c.elapsed_ns / 1e6),
        });
        Some(RecoverySummary {
            wanted: first.wanted,
            allowed: runs.iter().filter(|r| r.frames_to_move.is_some()).count(),
            frames_to_move: interval(
                runs.iter()
                    .filter_map(|r| r.frames_to_move)
                    .map(|v| v as f64),
            ),
            possible: interval(runs.iter().map(|r| r.possible as f64)),
            frames_to_move_all: interval(runs.iter().map(|r| r.frames_to_move_all as f64)),
            frames_to_move_all_per_gib: interval(
                runs.iter()
                    .filter(|r| r.huge_frames > 0)
                    .map(|r| r.frames_to_move_all as f64 * 512.0 / r.huge_frames as f64),
            ),
            compaction,
        })
    }
}

#[cfg(test)]
#[path = "recover_tests.rs"]
mod tests;
