//! `peers`: pfnlab's allocator beside a floor and other frame allocators on
//! the same workloads, in one run: `hot-pair` (order-0 alloc+free with no
//! split or merge), `split-merge-pair` (each pair splits a max-order block
//! and merges it back), `burst-128` (128 allocations, then 128 frees, per
//! page), and `burst-128-2threads` (two threads doing `burst-128` at once:
//! pfnlab on one per-CPU handle each, the peers on one shared allocator —
//! `frame-alloc` lock-free, the others behind a `Mutex`).
//!
//! The floor ([`FloorBuddy`], in `floor`) is the least a buddy can do and
//! is always measured, and so is LLFree ([`buddy::llfree`], the lock-free
//! design the buddy is measured against: its frames are the same blocks'
//! RAM, numbered from 0; it neither splits nor merges, so it has no
//! split-merge pair; its two threads each use a reservation of their own
//! on one shared instance). The peer crates
//! (`crates`) join with the `peers` feature. Every figure printed comes
//! from this run.

use buddy::AllocError;
use buddy::{Kernel, Options};
use serde::Serialize;
use sparsemem::{Layout, MemRange, RangeKind};
use vmemmap::VmemmapOptions;

pub mod floor;
mod runners;
pub use runners::hold_partial_blocks;
// The peer crates: frame-alloc's pool mapping and unsafe free, and
// bitmap-allocator's zeroed tree.
#[cfg(feature = "peers")]
#[allow(unsafe_code)]
pub mod crates;

use floor::FloorBuddy;
use runners::{Llfree, Ours, Peer, Runner};

use super::{Ctx, Experiment, ExperimentId, cell};
use crate::error::{PeerError, RunError};
use crate::models::{Buildable, ModelKind, ModelVisitor, build_allocator};
use crate::report::{Row, Subject};
use crate::spread::{Comparison, Interval, rank_sentence, ratio_text};
use crate::timing::{Measurement, Plan};
use crate::workloads::{Frames, SharedFrames};

/// A workload every contender runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// Order-0 alloc+free with no split or merge.
    HotPair,
    /// Each pair splits a max-order block and merges it back.
    SplitMergePair,
    /// 128 allocations, then 128 frees, per page.
    #[serde(rename = "burst-128")]
    Burst,
    /// Two threads doing `burst-128` at once.
    #[serde(rename = "burst-128-2threads")]
    BurstTwoThreads,
}

impl Workload {
    /// The workloads, in table order (and the order of each contender's
    /// `[Measurement; 4]`).
    pub const ALL: [Workload; 4] = [
        Workload::HotPair,
        Workload::SplitMergePair,
        Workload::Burst,
        Workload::BurstTwoThreads,
    ];

    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Workload::HotPair => "hot-pair",
            Workload::SplitMergePair => "split-merge-pair",
            Workload::Burst => "burst-128",
            Workload::BurstTwoThreads => "burst-128-2threads",
        }
    }
}

/// Threads of the two-thread workload.
pub const THREADS: usize = 2;

/// An allocator in the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Contender {
    /// pfnlab's allocator (the `Kernel` variant) over the chosen model.
    Pfnlab,
    /// The floor: [`FloorBuddy`].
    Floor,
    /// LLFree ([`buddy::llfree`]), built into the buddy crate.
    Llfree,
    /// `buddy_system_allocator::FrameAllocator<11>`.
    #[cfg(feature = "peers")]
    #[serde(rename = "buddy_system_allocator")]
    BuddySystemAllocator,
    /// `frame-alloc`'s `SummaryBuddyAllocator<11>`.
    #[cfg(feature = "peers")]
    FrameAlloc,
    /// `bitmap-allocator`'s `BitAlloc16M`.
    #[cfg(feature = "peers")]
    BitmapAllocator,
}

impl Contender {
    /// The name in tables and JSON (`variant`).
    pub fn name(self) -> &'static str {
        match self {
            Contender::Pfnlab => "pfnlab",
            Contender::Floor => "floor",
            Contender::Llfree => "llfree",
            #[cfg(feature = "peers")]
            Contender::BuddySystemAllocator => "buddy_system_allocator",
            #[cfg(feature = "peers")]
            Contender::FrameAlloc => "frame-alloc",
            #[cfg(feature = "peers")]
            Contender::BitmapAllocator => "bitmap-allocator",
        }
    }

    /// What it is, in one line.
    pub fn what(self) -> &'static str {
        match self {
            Contender::Pfnlab => {
                "bookkeeping only (no pageblock lookups, watermarks or page checks); hot-pair and bursts through the per-CPU lists (one handle per thread), split-merge-pair on the zone path (zone lock taken)"
            }
            Contender::Floor => {
                "intrusive free lists in a descriptor array, XOR buddy; no lock, no per-CPU lists, no checks (a Mutex for two threads)"
            }
            Contender::Llfree => {
                "LLFree (USENIX ATC 2023) in the buddy crate: per-huge-frame bitfields and counters, a tree reserved per CPU, lock-free; its frees checked (an order byte per frame); it neither splits nor merges, so it has no split-merge pair and that row is not applicable; one reservation per thread, one shared instance"
            }
            #[cfg(feature = "peers")]
            Contender::BuddySystemAllocator => {
                "FrameAllocator<11>: BTreeSet free lists (a Mutex for two threads)"
            }
            #[cfg(feature = "peers")]
            Contender::FrameAlloc => {
                "SummaryBuddyAllocator<11>: lock-free per-order bitmaps with summary words, its bitmap in a MAP_NORESERVE mapping of the span made outside the timed region; shared by both threads without a lock"
            }
            #[cfg(feature = "peers")]
            Contender::BitmapAllocator => {
                "BitAlloc16M: a 16-ary segment tree of bits, order 0 only: it has no split-merge pair, so that row is not applicable (a Mutex for two threads)"
            }
        }
    }
}

impl Contender {
    /// Whether it can do `workload` at all: bitmap-allocator has no orders
    /// and LLFree never splits or merges, so neither has a split-merge
    /// pair (bitmap-allocator's would be a plain alloc+free, LLFree's an
    /// order-9 get and put: different operations).
    pub fn does(self, workload: Workload) -> bool {
        workload != Workload::SplitMergePair || self.cannot_split().is_none()
    }

    /// Why it has no split-merge pair, if it has none.
    fn cannot_split(self) -> Option<&'static str> {
        match self {
            Contender::Llfree => Some("no splits"),
            #[cfg(feature = "peers")]
            Contender::BitmapAllocator => Some("no orders"),
            _ => None,
        }
    }
}

/// One workload's measurements, pfnlab first.
#[derive(Clone, Debug)]
pub struct PeerWorkload {
    /// The workload.
    pub workload: Workload,
    /// Each contender's per-page cost.
    pub results: Vec<(Contender, Measurement)>,
}

impl PeerWorkload {
    /// The measurement of `who`, if it ran.
    pub fn of(&self, who: Contender) -> Option<&Measurement> {
        self.results.iter().find(|(c, _)| *c == who).map(|(_, m)| m)
    }
}

/// Every workload.
#[derive(Clone, Debug)]
pub struct PeersResults {
    /// In [`Workload::ALL`] order.
    pub workloads: Vec<PeerWorkload>,
    /// pfnlab's splits and merges per split-merge pair, counted by its
    /// zone statistics during the run.
    pub splits_merges_per_pair: (f64, f64),
}

struct Visitor {
    plan: Plan,
    alloc_options: Options,
    /// The floor and the peer crates, built before the model.
    others: Vec<Box<dyn Runner>>,
}

impl ModelVisitor for Visitor {
    type Output = (Vec<PeerWorkload>, (f64, f64));

    fn visit<M: Buildable>(
        mut self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<Self::Output, AllocError> {
        let alloc = build_allocator::<M, Kernel>(layout, options, self.alloc_options)?;
        let mut ours = Ours::new(&alloc, layout.first_node())?;
        let before = alloc.stats_total();
        let measured = {
            let mut runners: Vec<&mut dyn Runner> = vec![&mut ours];
            runners.extend(self.others.iter_mut().map(|r| &mut **r as &mut dyn Runner));
            runners::measure_all(self.plan, &mut runners)
        };
        // Only the split-merge workload reaches the zone's free lists: the
        // others run on the per-CPU lists, and a refill or drain splits or
        // merges at most once per batch, which the counts below include.
        let after = alloc.stats_total();
        let per_pair = |a: u64, b: u64| (a - b) as f64 / ours.split_pairs.max(1) as f64;
        let splits_merges = (
            per_pair(after.splits, before.splits),
            per_pair(after.merges, before.merges),
        );
        let workloads = measured
            .into_iter()
            .map(|(workload, results)| PeerWorkload { workload, results })
            .collect();
        Ok((workloads, splits_merges))
    }
}

/// The layout's RAM in whole max-order blocks: what the peers manage, so
/// that a split-merge pair splits a whole block as pfnlab's does in its
/// zone (holes between blocks stay holes).
pub fn whole_blocks(layout: &Layout) -> Result<Layout, PeerError> {
    let g = layout.geometry();
    let block = g.max_order_nr_pages() << g.page_shift();
    let ranges: Vec<MemRange> = layout
        .ram_ranges()
        .filter_map(|(r, _, _)| {
            let (start, end) = (
                r.start.get().next_multiple_of(block),
                r.end.get() / block * block,
            );
            (start < end).then(|| MemRange::new(start, end, RangeKind::Ram, r.node))
        })
        .collect();
    Layout::new(
        *g,
        ranges,
        format!("{} (whole max-order blocks)", layout.source()),
    )
    .map_err(|_| PeerError::NoWholeBlock {
        layout: layout.source().into(),
    })
}

/// A peer or the floor as a runner: three instances of it (the hot pair's,
/// a fresh one for split-merge and bursts whose partly used blocks `hold`
/// keeps, and one the two threads share).
fn runner<F, S>(
    who: Contender,
    mut make: impl FnMut() -> Result<F, PeerError>,
    shared: impl FnOnce(F) -> S,
    hold: impl FnOnce(&mut F) -> Vec<u64>,
) -> Result<Box<dyn Runner>, PeerError>
where
    F: Frames + 'static,
    S: SharedFrames + 'static,
{
    Ok(Box::new(Peer::new(
        who,
        [make()?, make()?],
        shared(make()?),
        hold,
    )))
}

/// The peer crates built in, on the same blocks, each with the frames of
/// its partly used max-order blocks held on its split-merge instance.
#[cfg(feature = "peers")]
fn peer_runners(blocks: &Layout) -> Result<Vec<Box<dyn Runner>>, PeerError> {
    use crates::{SegmentTree, SummaryBuddy, frame_allocator};
    use std::sync::Mutex;
    let block_pages = blocks.geometry().max_order_nr_pages();
    Ok(vec![
        runner(
            Contender::BuddySystemAllocator,
            || Ok(frame_allocator(blocks)),
            Mutex::new,
            |f| hold_partial_blocks(f, block_pages),
        )?,
        // Lock-free: the threads share it as it is.
        runner(
            Contender::FrameAlloc,
            || SummaryBuddy::new(blocks),
            |f| f,
            |f| hold_partial_blocks(f, block_pages),
        )?,
        runner(
            Contender::BitmapAllocator,
            || SegmentTree::new(blocks),
            Mutex::new,
            |f| hold_partial_blocks(f, block_pages),
        )?,
    ])
}

/// No peer crate in this build.
#[cfg(not(feature = "peers"))]
fn peer_runners(_: &Layout) -> Result<Vec<Box<dyn Runner>>, PeerError> {
    Ok(Vec::new())
}

/// Measures pfnlab (over `ctx`'s model), the floor and every peer built in.
pub fn measure_peers(ctx: &Ctx) -> Result<PeersResults, RunError> {
    let blocks = whole_blocks(&ctx.layout)?;
    // Every free block of the floor is whole: nothing to hold.
    let mut others = vec![runner(
        Contender::Floor,
        || FloorBuddy::new(&blocks),
        std::sync::Mutex::new,
        |_| Vec::new(),
    )?];
    // LLFree numbers its frames from 0: as many as the blocks' RAM (their
    // only ranges), without the holes between them.
    let llfree = Llfree::new(blocks.present_pages()).map_err(|e| PeerError::Refused {
        peer: "llfree",
        message: e.to_string(),
    })?;
    others.push(Box::new(llfree));
    others.extend(peer_runners(&blocks)?);
    // The peers keep free lists and nothing else, so pfnlab runs its
    // bookkeeping only: no pageblock lookups, watermarks or page checks
    // (`bench breakdown` adds them back one at a time).
    let (workloads, splits_merges_per_pair) = ctx.visit(Visitor {
        plan: ctx.plan,
        alloc_options: buddy::Options {
            mechanisms: buddy::Mechanisms::BOOKKEEPING,
            ..ctx.options()
        },
        others,
    })?;
    Ok(PeersResults {
        workloads,
        splits_merges_per_pair,
    })
}

/// A row's parameters.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct PeerParams {
    /// The workload.
    pub workload: Workload,
}

/// A row's extra fields.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct PeerExtra {
    /// pfnlab's split-merge row: splits per pair (its zone statistics).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub splits_per_pair: Option<f64>,
    /// pfnlab's split-merge row: merges per pair.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merges_per_pair: Option<f64>,
    /// Every other contender: its time over pfnlab's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_vs_pfnlab: Option<f64>,
    /// The same with its interval, `{median, lo, hi, ...}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_vs_pfnlab_interval: Option<Interval>,
}

/// One row of `bench peers`' report.
pub type PeerRow = Row<Contender, PeerParams, PeerExtra>;

/// The JSON rows: one per (workload, contender), with ratios to pfnlab.
pub fn rows(results: &PeersResults, model: ModelKind) -> Vec<PeerRow> {
    let mut rows = Vec::new();
    for w in &results.workloads {
        let Some(mine) = w.of(Contender::Pfnlab) else {
            continue;
        };
        for (c, m) in &w.results {
            let (subject, extra) = match c {
                Contender::Pfnlab => {
                    let counts = w.workload == Workload::SplitMergePair;
                    let (splits, merges) = results.splits_merges_per_pair;
                    let extra = PeerExtra {
                        splits_per_pair: counts.then_some(splits),
                        merges_per_pair: counts.then_some(merges),
                        ..PeerExtra::default()
                    };
                    (Subject::Model(model), extra)
                }
                _ => {
                    let extra = PeerExtra {
                        ratio_vs_pfnlab: Some(m.ns_per_op.median / mine.ns_per_op.median),
                        ratio_vs_pfnlab_interval: Interval::between(m, mine).ok(),
                        ..PeerExtra::default()
                    };
                    (Subject::NoModel, extra)
                }
            };
            let params = PeerParams {
                workload: w.workload,
            };
            rows.push(Row::new(*c, subject, params, m.clone(), extra));
        }
    }
    rows
}

/// The table: every contender per workload, pfnlab over the floor with its
/// interval, and per workload who is cheapest (only outside the noise).
pub fn render(results: &PeersResults) -> String {
    let contenders: Vec<Contender> = results
        .workloads
        .first()
        .map(|w| w.results.iter().map(|(c, _)| *c).collect())
        .unwrap_or_default();
    let mut table = format!("{:<17}", "workload");
    for c in &contenders {
        table += &format!(" {:>24}", c.name());
    }
    table += "   pfnlab/floor\n";
    for w in &results.workloads {
        table += &format!("{:<17}", w.workload.name());
        for c in &contenders {
            let text = w.of(*c).map_or_else(
                || format!("n/a ({})", c.cannot_split().unwrap_or("not run")),
                cell,
            );
            table += &format!(" {text:>24}");
        }
        if let Some(i) = over_floor(w) {
            table += &format!("   {}", ratio_text(&i));
        }
        table += "\n";
    }
    table += &format!(
        "\nmedian ns per page ({}); {THREADS} threads: wall time per page of both threads; pfnlab/floor: median of the per-trial ratios [95 % interval], every contender's trials of a workload interleaved.\n\
         pfnlab's split-merge pair did {:.1} splits and {:.1} merges on average (its zone statistics).\n",
        crate::timing::COUNTER_UNIT,
        results.splits_merges_per_pair.0,
        results.splits_merges_per_pair.1
    );
    for w in &results.workloads {
        let mut ranked: Vec<(&str, &Measurement)> =
            w.results.iter().map(|(c, m)| (c.name(), m)).collect();
        ranked.sort_by(|a, b| a.1.ns_per_op.median.total_cmp(&b.1.ns_per_op.median));
        table += &format!(
            "{}: {}\n",
            w.workload.name(),
            rank_sentence("this workload", &ranked)
        );
    }
    for c in &contenders {
        table += &format!("{}: {}.\n", c.name(), c.what());
    }
    if !cfg!(feature = "peers") {
        table += "The peer crates are not in this build: `cargo run --release --features peers`.\n";
    }
    table
}

/// pfnlab's cost over the floor's on one workload.
fn over_floor(w: &PeerWorkload) -> Option<Interval> {
    Interval::between(w.of(Contender::Pfnlab)?, w.of(Contender::Floor)?).ok()
}

/// Every ratio the table states: pfnlab over the floor, and each peer over
/// pfnlab, per workload.
pub fn comparisons(results: &PeersResults) -> Vec<Comparison> {
    let mut out = Vec::new();
    for w in &results.workloads {
        let name = w.workload.name();
        if let Some(i) = over_floor(w) {
            out.push(Comparison::from_interval(
                format!("pfnlab / floor: {name}"),
                i,
            ));
        }
        let Some(mine) = w.of(Contender::Pfnlab) else {
            continue;
        };
        for (c, m) in w
            .results
            .iter()
            .filter(|(c, _)| ![Contender::Pfnlab, Contender::Floor].contains(c))
        {
            out.extend(Comparison::of(
                format!("{} / pfnlab: {name}", c.name()),
                m,
                mine,
            ));
        }
    }
    out
}

/// The experiment `bench peers`.
pub struct Peers;

impl Experiment for Peers {
    const ID: ExperimentId = ExperimentId::Peers;
    type Params = ();
    type Results = PeersResults;
    type Row = PeerRow;

    fn measure(ctx: &Ctx, _: &()) -> Result<PeersResults, RunError> {
        measure_peers(ctx)
    }

    fn rows(ctx: &Ctx, results: &PeersResults) -> Vec<PeerRow> {
        rows(results, ctx.model)
    }

    fn render(_: &Ctx, results: &PeersResults) -> String {
        render(results)
    }

    fn comparisons(_: &Ctx, results: &PeersResults) -> Vec<Comparison> {
        comparisons(results)
    }
}
