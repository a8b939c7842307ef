//! `compact_zone` with migration: the scanners isolate, `migrate_pages`
//! moves each owned page into a free page the free scanner took
//! (`compaction_alloc` / `compaction_free`), and what the free scanner
//! took and did not use goes back (`release_free_list`).

use sparsemem::{Order, Pfn};

use super::finish::{CompactResult, compaction_suitable, has_free_block};
use super::{CompactControl, CompactCounts, CompactError, CompactState, Scan};
use crate::alloc::Allocator;
use crate::migrate::{MigrateCounts, MigrateError, Owners, migrate_pages};
use crate::types::{BuddyModel, ZoneId};
use crate::variant::Variant;

/// One [`compact_zone`] run: how it ended and what it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactRun {
    /// How the run ended.
    pub result: CompactResult,
    /// The scanners' counts.
    pub counts: CompactCounts,
    /// What migration did.
    pub migrate: MigrateCounts,
}

/// The compaction and migration counters of `/proc/vmstat`, summed over
/// runs ([`CompactVmstat::account`]) and direct compactions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompactVmstat {
    /// `compact_migrate_scanned`.
    pub compact_migrate_scanned: u64,
    /// `compact_free_scanned`.
    pub compact_free_scanned: u64,
    /// `compact_isolated`: both scanners' isolations.
    pub compact_isolated: u64,
    /// `compact_stall`: direct compactions that ran.
    pub compact_stall: u64,
    /// `compact_fail`: direct compactions after which the allocation
    /// still failed.
    pub compact_fail: u64,
    /// `compact_success`: direct compactions after which it succeeded.
    pub compact_success: u64,
    /// `pgmigrate_success` (base pages).
    pub pgmigrate_success: u64,
    /// `pgmigrate_fail` (base pages).
    pub pgmigrate_fail: u64,
    /// `compact_daemon_migrate_scanned` (`KCOMPACTD_MIGRATE_SCANNED`):
    /// the migrate scanner's pfns in kcompactd's runs, also in
    /// `compact_migrate_scanned`.
    pub kcompactd_migrate_scanned: u64,
    /// `compact_daemon_free_scanned` (`KCOMPACTD_FREE_SCANNED`).
    pub kcompactd_free_scanned: u64,
}

impl CompactVmstat {
    /// Adds one run's counts, as `compact_zone` and `migrate_pages` do.
    pub fn account(&mut self, run: &CompactRun) {
        self.compact_migrate_scanned += run.counts.migrate_scanned;
        self.compact_free_scanned += run.counts.free_scanned;
        self.compact_isolated += run.counts.compact_isolated();
        self.pgmigrate_success += run.migrate.pgmigrate_success;
        self.pgmigrate_fail += run.migrate.pgmigrate_fail;
    }
}

impl<M: BuddyModel, V: Variant> Allocator<M, V> {
    /// `__isolate_free_page` and `split_map_pages`: the free block
    /// `(pfn, order)` of zone `zid` taken off its list and split into
    /// allocated order-0 pages; false if it is no longer a free block.
    fn isolate_free_block(&self, zid: ZoneId, pfn: Pfn, order: Order) -> bool {
        let Some(zone) = self.zones.get(zid.index()) else {
            return false;
        };
        let mut area = zone.free_area.lock();
        let Some(block) = area.take_free_block(&self.model, pfn, order) else {
            return false;
        };
        drop(area);
        if self.path.watermarks {
            zone.mod_free_pages(-(order.nr_pages() as i64));
        }
        block.prep(false);
        block.split();
        true
    }
}

impl<M: BuddyModel, V: Variant> Scan<'_, M, V> {
    /// The free scanner's isolation of one free block, onto `freepages`.
    pub(super) fn isolate_free_block(&mut self, pfn: Pfn, order: Order) -> bool {
        if !self.alloc.isolate_free_block(self.zone.id, pfn, order) {
            return false;
        }
        self.freepages
            .extend((0..order.nr_pages()).map(|i| Pfn::new(pfn.get() + i)));
        true
    }

    /// `compaction_alloc` before 6.9: an order-0 page from `freepages`,
    /// after one more free scan if it is empty; nothing for a larger
    /// source (only base pages move).
    fn compaction_alloc(&mut self, order: Order, wanted: u64) -> Option<Pfn> {
        if order != Order::ZERO {
            return None;
        }
        if self.freepages.is_empty() {
            self.isolate_freepages(wanted.max(1));
        }
        self.freepages.pop()
    }

    /// `release_free_list`: every isolated free page back to the buddy.
    fn release_free_list(&mut self) {
        for pfn in self.freepages.drain(..) {
            // An isolated page is an allocated order-0 page of this run.
            let freed = self.alloc.free_pages(pfn, Order::ZERO);
            debug_assert!(freed.is_ok(), "an isolated free page frees");
        }
    }

    /// One isolate-and-migrate step; `Some` ends the run.
    fn step(&mut self, owners: &mut Owners, migrate: &mut MigrateCounts) -> Option<CompactResult> {
        self.migratepages.clear();
        if self.isolate_migratepages(Some(owners)) == 0 {
            // Nothing isolated before the scanners met or the budget ran
            // out: `compact_finished` says which; a walk that stopped for
            // neither cannot go on.
            let r = self.compact_finished();
            return Some(if r == CompactResult::Continue {
                CompactResult::Complete
            } else {
                r
            });
        }
        let mut list = std::mem::take(&mut self.migratepages);
        let wanted = list.len() as u64;
        let mut unused = Vec::new();
        let alloc = self.alloc;
        let done = migrate_pages(
            alloc,
            owners,
            &mut list,
            |_, order| self.compaction_alloc(order, wanted),
            |pfn| unused.push(pfn),
            migrate,
        );
        // `compaction_free`: an unused target goes back on the list.
        self.freepages.append(&mut unused);
        match done {
            Err(MigrateError::NoTarget) if !self.met() => Some(CompactResult::Contended),
            _ => None,
        }
    }
}

/// `compact_zone` over zone `zid` of `alloc`, moving the pages `owners`
/// hold (see the module doc of `compaction`): with an order
/// ([`CompactControl::order`]), first `SUCCESS` if the zone already passes
/// its min watermark at that order with a free block of it, and `SKIPPED` if `compaction_suitable`
/// says no; a restarting zone clears its skip hints; then isolate and
/// migrate until `compact_finished` says otherwise, and give the unused
/// free pages back.
pub fn compact_zone<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    zid: ZoneId,
    state: &mut CompactState,
    owners: &mut Owners,
    cc: CompactControl,
) -> Result<CompactRun, CompactError> {
    compact_zone_until(alloc, zid, state, owners, cc, || false)
}

/// [`compact_zone`] that also ends `SUCCESS` where `compact_finished`
/// would go on and `done` says the run's goal is met (proactive
/// compaction's zone score at its low mark).
pub(super) fn compact_zone_until<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    zid: ZoneId,
    state: &mut CompactState,
    owners: &mut Owners,
    cc: CompactControl,
    done: impl Fn() -> bool,
) -> Result<CompactRun, CompactError> {
    let mut run = CompactRun {
        result: CompactResult::Skipped,
        counts: CompactCounts::default(),
        migrate: MigrateCounts::default(),
    };
    let zone = alloc.zone(zid).ok_or(CompactError::NoZone(zid))?;
    if let Some(order) = cc.order {
        if !alloc.options().era.has_compaction() {
            return Err(CompactError::NoCompaction(alloc.options().era));
        }
        let min = zone.watermarks().min;
        if zone.zone_watermark_ok(order, min, zone.kind) && has_free_block(zone, order) {
            run.result = CompactResult::Success;
            return Ok(run);
        }
        if !compaction_suitable(zone, order, min) {
            return Ok(run);
        }
        if state.compaction_restarting(order) {
            state.reset_isolation_suitable();
        }
    }
    let mut scan = Scan::start(alloc, zid, state, cc, true)?;
    let mut migrate = MigrateCounts::default();
    let result = loop {
        let r = scan.compact_finished();
        if r != CompactResult::Continue {
            break r;
        }
        if done() {
            break CompactResult::Success;
        }
        if let Some(r) = scan.step(owners, &mut migrate) {
            break r;
        }
    };
    scan.release_free_list();
    run.counts = scan.finish();
    run.result = result;
    run.migrate = migrate;
    Ok(run)
}
