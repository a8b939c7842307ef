//! A run's start state: the free lists of a snapshot, placed by a seed,
//! for every allocator a run builds (`--start-state snapshot:FILE
//! --seed N` on the default comparison, `bench bulk` and `replay`, and
//! `--start-state recorded` on a replay of a recording that carries its
//! machine's snapshots).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use buddy::views::{BuddyInfo, PageTypeInfo, Zoneinfo};
use buddy::{AllocError, Allocator, BuddyModel, Era, Options, Variant};
use serde::Serialize;
use sparsemem::{Order, Pfn};

use super::{Snapshot, SnapshotError};

/// A snapshot's pagetypeinfo (and the buddyinfo read with it), parsed
/// once, and the seed that places its blocks: cheap to clone into every
/// model's visitor.
#[derive(Clone, Debug)]
pub struct StartState {
    record: StartStateRecord,
    types: Arc<PageTypeInfo>,
    buddy: Option<Arc<BuddyInfo>>,
    deferred: Option<DeferredZone>,
    era: Option<(Era, String)>,
    pagesets: Arc<Vec<SnapshotPageset>>,
}

/// One CPU's pageset of one zone as the snapshot's zoneinfo shows it: the
/// pages on its lists and its `high`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotPageset {
    /// The zone's node.
    pub node: u32,
    /// The zone's name.
    pub zone: String,
    /// The CPU.
    pub cpu: u32,
    /// `count`.
    pub count: u64,
    /// `high`.
    pub high: u64,
}

/// What a report says of a run's start state.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct StartStateRecord {
    /// The snapshot's file: a snapshot, or the recording that carries it.
    pub snapshot: PathBuf,
    /// Whether the snapshot is the one a recording carries from its start
    /// (`--start-state recorded`).
    pub recorded: bool,
    /// The placement's seed.
    pub seed: u64,
    /// Whether the snapshot's machine was still in deferred struct page
    /// init, so the allocators started in it.
    pub deferred_init: bool,
}

impl StartState {
    /// Reads the snapshot at `path` and parses what a start state needs;
    /// a snapshot without a pagetypeinfo is refused here, before anything
    /// is built.
    pub fn load(path: &Path, seed: u64) -> Result<StartState, SnapshotError> {
        StartState::of(&Snapshot::load(path)?, path, false, seed)
    }

    /// The start state of `snapshot`, read from the file at `path`
    /// (`recorded`: the recording that carries it from its start).
    pub fn of(
        snapshot: &Snapshot,
        path: &Path,
        recorded: bool,
        seed: u64,
    ) -> Result<StartState, SnapshotError> {
        let types = snapshot.start_types()?;
        let deferred = snapshot.deferred_zone()?;
        Ok(StartState {
            record: StartStateRecord {
                snapshot: path.to_owned(),
                recorded,
                seed,
                deferred_init: deferred.is_some(),
            },
            types: Arc::new(types),
            buddy: snapshot.buddyinfo()?.map(Arc::new),
            deferred,
            era: snapshot.era(),
            pagesets: Arc::new(pagesets(snapshot)?),
        })
    }

    /// Every CPU's pageset of every populated zone in the snapshot's
    /// zoneinfo (none without one): where a replay's per-CPU lists start.
    pub fn pagesets(&self) -> &[SnapshotPageset] {
        &self.pagesets
    }

    /// The newest pfnlab era at or below the snapshot's kernel release,
    /// with the release as written, if it has one.
    pub fn era(&self) -> Option<&(Era, String)> {
        self.era.as_ref()
    }

    /// The first zone the snapshot's machine had not finished
    /// initialising, if any: the allocators are then built with deferred
    /// struct page init ([`buddy::Options::deferred_init`]) and grown to
    /// the snapshot's pageblocks before its free lists are placed.
    pub fn deferred_zone(&self) -> Option<&DeferredZone> {
        self.deferred.as_ref()
    }

    /// `options` as a start state from this snapshot needs them: with
    /// deferred init when the machine was still in it, refused for an era
    /// without it.
    pub fn options(&self, options: Options) -> Result<Options, SnapshotError> {
        let Some(zone) = &self.deferred else {
            return Ok(options);
        };
        if !options.era.has_deferred_init() {
            return Err(SnapshotError::DeferredInit {
                zone: zone.clone(),
                era: options.era,
            });
        }
        Ok(Options {
            deferred_init: true,
            ..options
        })
    }

    /// The snapshot and the seed, for the report.
    pub fn record(&self) -> &StartStateRecord {
        &self.record
    }

    /// Rebuilds `alloc`'s free lists to the snapshot's
    /// ([`Allocator::set_start_state_with`]) and returns the pages it left
    /// allocated; on error `alloc`'s free lists are unchanged.
    pub fn apply<M: BuddyModel, V: Variant>(
        &self,
        alloc: &mut Allocator<M, V>,
    ) -> Result<u64, AllocError> {
        let held = self.apply_held(alloc)?;
        Ok(held.iter().map(|(_, order)| order.nr_pages()).sum())
    }

    /// [`StartState::apply`], returning the blocks it left allocated
    /// (`(head, order)`, each ready for a free or a `split_page`).
    pub fn apply_held<M: BuddyModel, V: Variant>(
        &self,
        alloc: &mut Allocator<M, V>,
    ) -> Result<Vec<(Pfn, Order)>, AllocError> {
        alloc
            .set_start_state_with(&self.types, self.buddy.as_deref(), self.record.seed)
            .map_err(AllocError::StartState)
    }

    /// `snapshot:FILE (seed N)`, for a header line, with the zone its
    /// machine was still initialising when it was in deferred init.
    pub fn label(&self) -> String {
        let deferred = self.deferred.as_ref().map_or(String::new(), |z| {
            format!(
                "; in deferred init as its machine was: node {} zone {} grown to its {} pageblocks",
                z.node, z.zone, z.blocks
            )
        });
        let what = if self.record.recorded {
            "recorded: the snapshot at the start of "
        } else {
            "snapshot:"
        };
        format!(
            "{what}{} (seed {}{deferred})",
            self.record.snapshot.display(),
            self.record.seed
        )
    }
}

/// The pagesets of `snapshot`'s zoneinfo.
fn pagesets(snapshot: &Snapshot) -> Result<Vec<SnapshotPageset>, SnapshotError> {
    let Some(info) = snapshot.zoneinfo()? else {
        return Ok(Vec::new());
    };
    Ok(info
        .zones
        .iter()
        .flat_map(|z| {
            let sets = z.populated.iter().flat_map(|p| &p.pagesets);
            sets.map(|s| SnapshotPageset {
                node: z.node,
                zone: z.zone.clone(),
                cpu: s.cpu,
                count: s.count,
                high: s.high,
            })
        })
        .collect())
}

/// A zone of a machine still in deferred struct page init: its
/// pagetypeinfo counts fewer pageblocks than its present pages fill by
/// more than one (a zone's edges may cut one short). The kernel counts a
/// pageblock only when its first `struct page` is initialised and in the
/// zone (`pagetypeinfo_showblockcount_print`), and adds pages to
/// `managed` as deferred init frees them (`__free_pages_core`), so such a
/// machine's free lists cover part of each deferred zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeferredZone {
    /// The zone's node.
    pub node: u32,
    /// The zone's name.
    pub zone: String,
    /// Pageblocks its pagetypeinfo counts.
    pub blocks: u64,
    /// Its present pages.
    pub present: u64,
    /// Its managed pages.
    pub managed: u64,
}

impl DeferredZone {
    /// `node 0 zone Normal counts 7680 pageblocks for 5505024 present
    /// pages (3932160 managed)`.
    pub fn describe(&self) -> String {
        format!(
            "node {} zone {} counts {} pageblocks for {} present pages ({} managed)",
            self.node, self.zone, self.blocks, self.present, self.managed
        )
    }
}

/// The first zone of the snapshot still in deferred init, if any.
pub(super) fn deferred_zone(types: &PageTypeInfo, zones: &Zoneinfo) -> Option<DeferredZone> {
    let per_block = 1u64 << types.pageblock_order;
    types.zones.iter().find_map(|t| {
        let z = zones.zone(t.node, &t.zone)?;
        let blocks: u64 = t.blocks.iter().sum();
        ((blocks + 1) * per_block < z.present).then(|| DeferredZone {
            node: t.node,
            zone: t.zone.clone(),
            blocks,
            present: z.present,
            managed: z.managed,
        })
    })
}
