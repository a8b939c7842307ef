//! Proactive compaction: kcompactd compacting a node in the background
//! while its fragmentation score is high (Linux 5.9, Nitin Gupta's "mm:
//! Proactive compaction", facdaa917c4d; mm/compaction.c as of 6.6 is the
//! form modelled).
//!
//! Each node's kcompactd sleeps `HPAGE_FRAG_CHECK_INTERVAL_MSEC` (500 ms)
//! at a time. When a sleep times out with no wakeup for a requested order,
//! it checks the node (`should_proactive_compact_node`): the node's
//! fragmentation score above the high mark starts `proactive_compact_node`,
//! a whole-zone `MIGRATE_SYNC_LIGHT` run of every populated zone that
//! `__compact_finished` ends as soon as that zone's own score is at or
//! below the low mark. If the node's score did not go down, the next sleep
//! is `COMPACT_MAX_DEFER_SHIFT` times longer (64 intervals, 32 s).
//!
//! - A zone's score (`fragmentation_score_zone`) is `extfrag_for_order`
//!   at `COMPACTION_HPAGE_ORDER` (the PMD order with THP): the per cent of
//!   its free pages not in free blocks of that order or more.
//! - The node's (`fragmentation_score_node`) is the sum of its zones'
//!   scores, each weighted by the zone's share of the node's present pages
//!   (`fragmentation_score_zone_weighted`), so a small zone barely counts.
//! - The marks (`fragmentation_score_wmark`) come from
//!   `vm.compaction_proactiveness` (default 20): low is 100 less it, at
//!   least 5; high is low plus 10, at most 100. 0 turns it off.
//!
//! Where pfnlab differs: time is the caller's ([`Kcompactd::advance`]
//! runs each timeout that has expired by the time it is given); the zones
//! are weighted by their managed pages, which pfnlab's zones count as
//! present (holes inside a zone's span are not present in either);
//! `kswapd_is_running` is never true (pfnlab has no kswapd), and nothing
//! wakes kcompactd for an order (`wakeup_kcompactd` comes from kswapd and
//! `defrag_mode`'s slow path, neither of which pfnlab has). Compaction
//! moves only pages with owners ([`Owners`]), as all of pfnlab's does.

use sparsemem::{Migratetype, NR_PAGE_ORDERS, NodeId};

use super::finish::fill_contig_page_info;
use super::run::{CompactRun, CompactVmstat, compact_zone_until};
use super::{CompactControl, CompactError, CompactState};
use crate::alloc::Allocator;
use crate::migrate::Owners;
use crate::types::{BuddyModel, ZoneId};
use crate::variant::Variant;
use crate::zone::Zone;

/// `HPAGE_FRAG_CHECK_INTERVAL_MSEC`: kcompactd's sleep between checks.
pub const HPAGE_FRAG_CHECK_INTERVAL_MSEC: u64 = 500;

/// `sysctl_compaction_proactiveness`' default.
pub const DEFAULT_COMPACTION_PROACTIVENESS: u8 = 20;

/// `extfrag_for_order` (mm/vmstat.c): of the free pages in `nr_free` (free
/// blocks per order), the per cent not in free blocks of `order` or more;
/// 0 when nothing is free.
pub fn extfrag_for_order(nr_free: &[u64], order: usize) -> u32 {
    let info = fill_contig_page_info(nr_free, order);
    if info.free_pages == 0 {
        return 0;
    }
    ((info.free_pages - (info.free_blocks_suitable << order)) * 100 / info.free_pages) as u32
}

/// `COMPACTION_HPAGE_ORDER` of `alloc`'s geometry: `HPAGE_PMD_ORDER`,
/// one PMD's reach (order 9 with 4 KiB pages).
pub fn compaction_hpage_order<M: BuddyModel, V: Variant>(alloc: &Allocator<M, V>) -> usize {
    sparsemem::hvo::hugetlb_orders(alloc.model().geometry())[0] as usize
}

/// `fragmentation_score_zone`: `extfrag_for_order` of `zone` at `order`
/// (`COMPACTION_HPAGE_ORDER`), 0 to 100.
pub fn fragmentation_score_zone<V: Variant, P: sparsemem::BuddyPage>(
    zone: &Zone<V, P>,
    order: usize,
) -> u32 {
    let nr_free: [u64; NR_PAGE_ORDERS] = zone.nr_free();
    extfrag_for_order(&nr_free, order)
}

/// `fragmentation_score_node`: the scores of `node`'s zones, each weighted
/// by its pages over the node's plus one
/// (`fragmentation_score_zone_weighted`), summed; 0 to 100.
pub fn fragmentation_score_node<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    node: NodeId,
) -> u32 {
    let order = compaction_hpage_order(alloc);
    let zones: Vec<&Zone<V, M::Page>> = alloc
        .zones()
        .iter()
        .filter(|z| z.node == node && z.managed_pages() > 0)
        .collect();
    let node_pages: u64 = zones.iter().map(|z| z.managed_pages()).sum();
    zones
        .iter()
        .map(|z| {
            let weighted = z.managed_pages() * u64::from(fragmentation_score_zone(z, order));
            (weighted / (node_pages + 1)) as u32
        })
        .sum()
}

/// `fragmentation_score_wmark`: the low mark (`low`) or the high one for
/// `proactiveness` (0 to 100).
pub fn fragmentation_score_wmark(proactiveness: u8, low: bool) -> u32 {
    let wmark_low = (100u32.saturating_sub(u32::from(proactiveness))).max(5);
    if low {
        wmark_low
    } else {
        (wmark_low + 10).min(100)
    }
}

/// One proactive pass over a node: its score before and after, and each
/// zone's run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProactiveRun {
    /// `fragmentation_score_node` before the pass.
    pub score_before: u32,
    /// And after it.
    pub score_after: u32,
    /// Each populated zone's run.
    pub runs: Vec<(ZoneId, CompactRun)>,
}

/// Why proactive compaction cannot run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProactiveError {
    /// `vm.compaction_proactiveness` above 100.
    Proactiveness(u8),
    /// The era predates proactive compaction (5.9).
    NotInEra(crate::Era),
    /// A compaction run could not start.
    Compact(CompactError),
}

impl std::fmt::Display for ProactiveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProactiveError::Proactiveness(p) => {
                write!(f, "compaction_proactiveness {p} is not from 0 to 100")
            }
            ProactiveError::NotInEra(era) => {
                write!(f, "{era} has no proactive compaction (added in 5.9)")
            }
            ProactiveError::Compact(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ProactiveError {}

/// `should_proactive_compact_node`, then `proactive_compact_node` if it
/// says so: `None` when the node's score is at or below the high mark for
/// `proactiveness` (or it is 0). Every zone of `node` is compacted with
/// its state in `states` (by zone index) and `owners`' pages moved; the
/// runs' counts go into `vmstat`, the kcompactd ones included.
pub fn proactive_compact_node<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    node: NodeId,
    owners: &mut Owners,
    states: &mut [CompactState],
    proactiveness: u8,
    vmstat: &mut CompactVmstat,
) -> Result<Option<ProactiveRun>, ProactiveError> {
    if proactiveness > 100 {
        return Err(ProactiveError::Proactiveness(proactiveness));
    }
    let era = alloc.options().era;
    if !era.since(5, 9) {
        return Err(ProactiveError::NotInEra(era));
    }
    let score_before = fragmentation_score_node(alloc, node);
    if proactiveness == 0 || score_before <= fragmentation_score_wmark(proactiveness, false) {
        return Ok(None);
    }
    let wmark_low = fragmentation_score_wmark(proactiveness, true);
    let order = compaction_hpage_order(alloc);
    // `.order = -1, MIGRATE_SYNC_LIGHT, ignore_skip_hint, whole_zone,
    // GFP_KERNEL, proactive_compaction`.
    let cc = CompactControl {
        migratetype: Migratetype::Unmovable,
        ..CompactControl::PROC
    };
    let mut runs = Vec::new();
    let zones: Vec<ZoneId> = alloc
        .zones()
        .iter()
        .filter(|z| z.node == node && z.managed_pages() > 0)
        .map(|z| z.id)
        .collect();
    for zid in zones {
        let Some(state) = states.get_mut(zid.index()) else {
            continue;
        };
        let zone = alloc
            .zone(zid)
            .ok_or(ProactiveError::Compact(CompactError::NoZone(zid)))?;
        // `__compact_finished`'s proactive branch.
        let done = || fragmentation_score_zone(zone, order) <= wmark_low;
        let run = compact_zone_until(alloc, zid, state, owners, cc, done)
            .map_err(ProactiveError::Compact)?;
        vmstat.account(&run);
        vmstat.kcompactd_migrate_scanned += run.counts.migrate_scanned;
        vmstat.kcompactd_free_scanned += run.counts.free_scanned;
        runs.push((zid, run));
    }
    Ok(Some(ProactiveRun {
        score_before,
        score_after: fragmentation_score_node(alloc, node),
        runs,
    }))
}

/// One node's kcompactd, its proactive part, on the caller's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kcompactd {
    node: NodeId,
    proactiveness: u8,
    /// When the current sleep times out, ms.
    wakes_at_ms: u64,
}

impl Kcompactd {
    /// kcompactd of `node` started at time 0 with
    /// `vm.compaction_proactiveness` set to `proactiveness` (0 to 100).
    pub fn new(node: NodeId, proactiveness: u8) -> Result<Kcompactd, ProactiveError> {
        if proactiveness > 100 {
            return Err(ProactiveError::Proactiveness(proactiveness));
        }
        Ok(Kcompactd {
            node,
            proactiveness,
            wakes_at_ms: HPAGE_FRAG_CHECK_INTERVAL_MSEC,
        })
    }

    /// When the current sleep times out, ms (`None`: never, with
    /// proactiveness 0, `MAX_SCHEDULE_TIMEOUT`).
    pub fn wakes_at_ms(&self) -> Option<u64> {
        (self.proactiveness > 0).then_some(self.wakes_at_ms)
    }

    /// Every sleep that times out by `now_ms`, in order: the proactive
    /// check and, where it says so, the pass; the next sleep is the
    /// default interval, or 64 of them after a pass that did not lower the
    /// node's score. Returns the passes that ran.
    pub fn advance<M: BuddyModel, V: Variant>(
        &mut self,
        now_ms: u64,
        alloc: &Allocator<M, V>,
        owners: &mut Owners,
        states: &mut [CompactState],
        vmstat: &mut CompactVmstat,
    ) -> Result<Vec<ProactiveRun>, ProactiveError> {
        let mut passes = Vec::new();
        while let Some(at) = self.wakes_at_ms()
            && at <= now_ms
        {
            let ran = proactive_compact_node(
                alloc,
                self.node,
                owners,
                states,
                self.proactiveness,
                vmstat,
            )?;
            let interval = HPAGE_FRAG_CHECK_INTERVAL_MSEC;
            let timeout = match ran {
                Some(pass) => {
                    let progress = pass.score_after < pass.score_before;
                    passes.push(pass);
                    if progress {
                        interval
                    } else {
                        interval << super::COMPACT_MAX_DEFER_SHIFT
                    }
                }
                // Nothing changes the node between two checks here, so
                // every check up to `now_ms` would find the same score:
                // the next one that could differ is the first after it.
                None => interval.saturating_mul((now_ms - at) / interval + 1),
            };
            match at.checked_add(timeout) {
                Some(next) => self.wakes_at_ms = next,
                None => {
                    self.wakes_at_ms = u64::MAX;
                    break;
                }
            }
        }
        Ok(passes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extfrag_for_order_is_the_share_not_in_large_enough_blocks() {
        // 8 single pages and 2 order-2 blocks: 16 pages free.
        let nr_free = [8, 0, 2, 0];
        assert_eq!(extfrag_for_order(&nr_free, 0), 0);
        assert_eq!(extfrag_for_order(&nr_free, 2), 50);
        assert_eq!(extfrag_for_order(&nr_free, 3), 100);
        assert_eq!(extfrag_for_order(&[0, 0, 0], 1), 0);
        // Integer per cent, rounded down: 1 of 3 pages unusable.
        assert_eq!(extfrag_for_order(&[1, 1], 1), 33);
    }

    #[test]
    fn the_marks_follow_proactiveness() {
        assert_eq!(fragmentation_score_wmark(20, true), 80);
        assert_eq!(fragmentation_score_wmark(20, false), 90);
        // Capped: low at least 5, high at most 100.
        assert_eq!(fragmentation_score_wmark(100, true), 5);
        assert_eq!(fragmentation_score_wmark(100, false), 15);
        assert_eq!(fragmentation_score_wmark(0, true), 100);
        assert_eq!(fragmentation_score_wmark(0, false), 100);
        assert_eq!(fragmentation_score_wmark(95, true), 5);
    }

    #[test]
    fn a_proactiveness_above_100_is_refused() {
        assert_eq!(
            Kcompactd::new(NodeId::ZERO, 101),
            Err(ProactiveError::Proactiveness(101))
        );
        let k = Kcompactd::new(NodeId::ZERO, 0).unwrap();
        assert_eq!(k.wakes_at_ms(), None);
    }
}
