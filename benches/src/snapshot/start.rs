//! A run's start state: the free lists of a snapshot, placed by a seed,
//! for every allocator a run builds (`--start-state snapshot:FILE
//! --seed N` on the default comparison, `bench bulk` and `replay`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use buddy::views::{BuddyInfo, PageTypeInfo, Zoneinfo};
use buddy::{AllocError, Allocator, BuddyModel, Variant};
use serde::Serialize;

use super::{Snapshot, SnapshotError};

/// A snapshot's pagetypeinfo (and the buddyinfo read with it), parsed
/// once, and the seed that places its blocks: cheap to clone into every
/// model's visitor.
#[derive(Clone, Debug)]
pub struct StartState {
    record: StartStateRecord,
    types: Arc<PageTypeInfo>,
    buddy: Option<Arc<BuddyInfo>>,
}

/// What a report says of a run's start state.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct StartStateRecord {
    /// The snapshot.
    pub snapshot: PathBuf,
    /// The placement's seed.
    pub seed: u64,
}

impl StartState {
    /// Reads the snapshot at `path` and parses what a start state needs;
    /// a snapshot without a pagetypeinfo is refused here, before anything
    /// is built.
    pub fn load(path: &Path, seed: u64) -> Result<StartState, SnapshotError> {
        let snapshot = Snapshot::load(path)?;
        let types = snapshot.start_types()?;
        Ok(StartState {
            record: StartStateRecord {
                snapshot: path.to_owned(),
                seed,
            },
            types: Arc::new(types),
            buddy: snapshot.buddyinfo()?.map(Arc::new),
        })
    }

    /// The snapshot and the seed, for the report.
    pub fn record(&self) -> &StartStateRecord {
        &self.record
    }

    /// Rebuilds `alloc`'s free lists to the snapshot's
    /// ([`Allocator::set_start_state_with`]) and returns the pages it left
    /// allocated; on error `alloc` is unchanged.
    pub fn apply<M: BuddyModel, V: Variant>(
        &self,
        alloc: &mut Allocator<M, V>,
    ) -> Result<u64, AllocError> {
        let held = alloc
            .set_start_state_with(&self.types, self.buddy.as_deref(), self.record.seed)
            .map_err(AllocError::StartState)?;
        Ok(held.iter().map(|(_, order)| order.nr_pages()).sum())
    }

    /// `snapshot:FILE (seed N)`, for a header line.
    pub fn label(&self) -> String {
        format!(
            "snapshot:{} (seed {})",
            self.record.snapshot.display(),
            self.record.seed
        )
    }
}

/// Refuses a snapshot of a machine still in deferred struct page init: a
/// zone whose pagetypeinfo counts fewer pageblocks than its present pages
/// fill by more than one (a zone's edges may cut one short). The kernel
/// counts a pageblock only when its first `struct page` is initialised
/// and in the zone (`pagetypeinfo_showblockcount_print`), and adds pages
/// to `managed` as deferred init frees them (`__free_pages_core`), so
/// such a machine's free lists cover part of each deferred zone.
pub(super) fn still_deferred(types: &PageTypeInfo, zones: &Zoneinfo) -> Result<(), SnapshotError> {
    let per_block = 1u64 << types.pageblock_order;
    for t in &types.zones {
        let Some(z) = zones.zone(t.node, &t.zone) else {
            continue;
        };
        let blocks: u64 = t.blocks.iter().sum();
        if (blocks + 1) * per_block < z.present {
            return Err(SnapshotError::DeferredInit {
                node: t.node,
                zone: t.zone.clone(),
                blocks,
                present: z.present,
                managed: z.managed,
            });
        }
    }
    Ok(())
}
