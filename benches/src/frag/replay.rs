//! Fragmentation under a recorded workload: a trace (a `pfnlab trace
//! record` recording, or the kernel's own `trace` file) replayed through
//! the buddy of an era and through LLFree, the free memory sampled every K
//! events into a [`FragSample`] series.
//!
//! The buddy's replay is `pfnlab replay`'s ([`crate::trace::replay`]): the
//! recording's own layout (the host's for a trace without one), one
//! per-CPU handle per trace CPU, each `mm_page_alloc` allocated with its
//! GFP mask and order, each `mm_page_free` freeing the block that stands
//! for its pfn, from the model's boot state. A replay has no randomness,
//! so one pass gives the series; there is no interval to take over trials.
//!
//! LLFree has no GFP masks and no zones: an allocation asks its order in
//! the class of the mask's migratetype (movable or immovable) from the
//! trace CPU's reservations, on as many frames as the buddy manages on the
//! same layout. Orders above its huge frame (order 9) cannot be served and
//! are counted as refused; so are allocations it has no memory for. The
//! kernel's own zone-side events (`mm_page_alloc_zone_locked`,
//! `mm_page_pcpu_drain`) and `mm_page_free_batched` move no block, for
//! either allocator.
//!
//! What a sample can and cannot say: the trace holds only the allocations
//! made while it was recorded, so the memory the machine already held is
//! free in the model; the share of free memory in huge frames starts near
//! all of it and shows what the recorded workload alone does to it.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use buddy::Era;
use buddy::llfree::{Class, HUGE_ORDER, LLFree};
use serde::Serialize;
use sparsemem::{Migratetype, Order, Pfn};

use super::{FragSample, Live, sample_llfree};
use crate::models::ModelKind;
use crate::trace::format::TraceReader;
use crate::trace::replay::{ReadTrace, ReplayOptions, replay_layout, replay_models};
use crate::trace::{EventKind, TraceError};

/// Events between samples unless asked otherwise.
pub const DEFAULT_SAMPLE_EVERY: u64 = 4096;

/// The recordings committed with pfnlab, from its source tree: a
/// compression and a copy (`gzip-dd`), and a directory walk with a
/// compression on a machine still initialising its memmap (`snapshots`).
/// `benches/tests/data/README.md` says how each was made.
pub fn committed_traces() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    ["gzip-dd.trace.zst", "snapshots.trace.zst"]
        .iter()
        .map(|name| dir.join(name))
        .collect()
}

/// One allocator's replay of one trace.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TraceRun {
    /// The trace, as given.
    pub trace: String,
    /// The layout it was replayed on.
    pub layout: String,
    /// Events replayed.
    pub events: u64,
    /// Allocations made.
    pub allocs: u64,
    /// Allocations refused, by reason.
    pub refused: BTreeMap<String, u64>,
    /// Frees made.
    pub frees: u64,
    /// Pages the replay still held after the last event.
    pub held_pages: u64,
    /// The free memory before the first event, every K events, and after
    /// the last (`ops`: events replayed).
    pub series: Vec<FragSample>,
}

impl TraceRun {
    /// Allocations refused, every reason together.
    pub fn refused_total(&self) -> u64 {
        self.refused.values().sum()
    }

    /// Huge frames wholly free before the first event and not after the
    /// last (0 when the series is empty or the trace freed more than it
    /// took).
    pub fn huge_frames_broken(&self) -> u64 {
        match (self.series.first(), self.series.last()) {
            (Some(a), Some(b)) => a.free_huge_frames.saturating_sub(b.free_huge_frames),
            _ => 0,
        }
    }
}

/// `path` as a reader of the report knows it: from the repository's root
/// for a file inside it (the committed recordings), else as given.
fn shown(path: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent();
    root.and_then(|r| path.strip_prefix(r).ok())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The trace at `path` can be opened and read: what to check before a
/// long run.
pub fn check_trace(path: &Path) -> Result<(), TraceError> {
    TraceReader::open(path).map(drop)
}

/// The trace at `path` through the buddy of `era` (with `vm.defrag_mode`
/// when `defrag_mode`) over the memory model `kind`, sampled every
/// `every` events.
pub fn replay_buddy(
    path: &Path,
    kind: ModelKind,
    era: Era,
    defrag_mode: bool,
    every: u64,
) -> Result<TraceRun, TraceError> {
    let header = TraceReader::open(path)?.header().cloned();
    let loaded = replay_layout(None, header.as_ref())
        .map_err(|e| TraceError::file(format!("{}: its layout: {e}", path.display())))?;
    let options = ReplayOptions {
        era,
        defrag_mode,
        trials: 1,
        sample_every: Some(every.max(1)),
        empty_lists: true,
        ..ReplayOptions::default()
    };
    let open = || TraceReader::open(path);
    let mut results = replay_models(&open, &loaded.layout, &[kind], options, &|_, _| {})?;
    let (_, result) = results
        .pop()
        .ok_or_else(|| TraceError::file("no model replayed".to_owned()))?;
    let result = result.map_err(|e| TraceError::file(format!("the model: {e}")))?;
    Ok(TraceRun {
        trace: shown(path),
        layout: loaded.layout.source().to_string(),
        events: result.events.events,
        allocs: result.events.allocs,
        refused: result.events.alloc_failures,
        frees: result.events.frees,
        held_pages: result.allocator.held_pages,
        series: result.series,
    })
}

/// The trace at `path` through an LLFree of `frames` frames with a CPU
/// per trace CPU, sampled every `every` events (see the module
/// documentation for what it serves). A free LLFree refuses is an error:
/// the replay only frees what it allocated.
pub fn replay_llfree(path: &Path, frames: u64, every: u64) -> Result<TraceRun, TraceError> {
    let open = || TraceReader::open(path);
    let trace = ReadTrace::read(&open, false)?;
    let cpus = trace
        .events
        .iter()
        .map(|e| usize::from(e.cpu) + 1)
        .max()
        .unwrap_or(1)
        .min(buddy::llfree::MAX_CPUS);
    let llfree = LLFree::new(frames, cpus).map_err(|e| TraceError::file(format!("LLFree: {e}")))?;
    let mut run = LlfreeReplay {
        llfree: &llfree,
        cpus,
        held: HashMap::new(),
        events: 0,
        allocs: 0,
        frees: 0,
        refused: BTreeMap::new(),
    };
    let every = every.max(1);
    let mut series = vec![run.sample()];
    for e in &trace.events {
        run.event(e)
            .map_err(|why| TraceError::at(e.line, format!("{}: {why}", e.kind)))?;
        if run.events.is_multiple_of(every) {
            series.push(run.sample());
        }
    }
    if series.last().is_none_or(|s| s.ops != run.events) {
        series.push(run.sample());
    }
    let layout = format!("{frames} frames");
    let held_pages = run.held.values().map(|(_, o, _)| o.nr_pages()).sum();
    Ok(TraceRun {
        held_pages,
        trace: shown(path),
        layout,
        events: run.events,
        allocs: run.allocs,
        refused: run.refused,
        frees: run.frees,
        series,
    })
}

/// A trace replay's state over LLFree.
struct LlfreeReplay<'a> {
    llfree: &'a LLFree,
    cpus: usize,
    /// Trace pfn → LLFree's block and the migratetype asked for.
    held: HashMap<u64, (Pfn, Order, Migratetype)>,
    events: u64,
    allocs: u64,
    frees: u64,
    refused: BTreeMap<String, u64>,
}

impl LlfreeReplay<'_> {
    fn sample(&self) -> FragSample {
        let live: Vec<Live> = self.held.values().map(|&b| Live::from(b)).collect();
        sample_llfree(self.llfree, self.events, &live)
    }

    fn put(&mut self, cpu: usize, pfn: Pfn, order: Order) -> Result<(), String> {
        self.llfree
            .put(cpu, pfn, order)
            .map_err(|e| format!("LLFree refused its own block {pfn}/{order}: {e}"))?;
        self.frees += 1;
        Ok(())
    }

    fn event(&mut self, e: &crate::trace::Event) -> Result<(), String> {
        self.events += 1;
        let cpu = usize::from(e.cpu) % self.cpus;
        let Some(trace_pfn) = e.pfn else {
            return Ok(());
        };
        match e.kind {
            EventKind::Alloc => {
                // An allocation of a pfn still held: its free was not
                // traced, so the old block goes first.
                if let Some((pfn, order, _)) = self.held.remove(&trace_pfn) {
                    self.put(cpu, pfn, order)?;
                    self.frees -= 1;
                }
                if e.order > HUGE_ORDER {
                    *self
                        .refused
                        .entry(format!("order above {HUGE_ORDER}"))
                        .or_default() += 1;
                    return Ok(());
                }
                let order = Order::new(e.order);
                let migratetype = e.gfp.migratetype();
                match self.llfree.get(cpu, order, Class::of(migratetype)) {
                    Ok(pfn) => {
                        self.allocs += 1;
                        self.held.insert(trace_pfn, (pfn, order, migratetype));
                    }
                    Err(err) => {
                        *self.refused.entry(err.to_string()).or_default() += 1;
                    }
                }
            }
            EventKind::Free => match self.held.get(&trace_pfn) {
                Some(&(pfn, order, _)) if order.get() == e.order => {
                    self.held.remove(&trace_pfn);
                    self.put(cpu, pfn, order)?;
                }
                // Allocated before the recording, or split and freed
                // page by page: nothing of LLFree's stands for it.
                _ => {}
            },
            EventKind::FreeBatched | EventKind::AllocZoneLocked | EventKind::PcpuDrain => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(name)
    }

    #[test]
    fn a_replay_is_sampled_every_k_events_and_at_both_ends() {
        let path = data("ls-gzip.trace.txt");
        let run = replay_llfree(&path, 1 << 18, 500).unwrap();
        let ops: Vec<u64> = run.series.iter().map(|s| s.ops).collect();
        assert_eq!(ops.first(), Some(&0));
        assert_eq!(ops.last(), Some(&run.events));
        assert!(ops.windows(2).all(|w| w[1] > w[0]), "{ops:?}");
        let every_k = &ops[1..ops.len() - 1];
        assert!(every_k.iter().all(|o| o % 500 == 0), "{ops:?}");
        assert_eq!(every_k.len() as u64, (run.events - 1) / 500);
        // Before the first event everything is free.
        let first = &run.series[0];
        assert_eq!(first.free_pages, 1 << 18);
        assert_eq!(first.free_huge_frames, first.huge_frames);
    }

    #[test]
    fn llfree_loses_no_frame_over_a_replay() {
        let frames = 1 << 18;
        let run = replay_llfree(&data("ls-gzip.trace.txt"), frames, 256).unwrap();
        assert!(run.allocs > 0 && run.frees > 0, "{run:?}");
        // Every frame is free or held by the replay.
        let last = run.series.last().unwrap();
        assert!(run.held_pages > 0);
        assert_eq!(last.free_pages + run.held_pages, frames);
    }

    #[test]
    fn llfree_counts_what_it_cannot_serve() {
        // Fewer frames than the trace ever holds: some allocations are
        // refused, by reason, and still no frame is lost.
        let frames = 64;
        let run = replay_llfree(&data("ls-gzip.trace.txt"), frames, 256).unwrap();
        assert!(run.refused_total() > 0, "{:?}", run.refused);
        let last = run.series.last().unwrap();
        assert_eq!(last.free_pages + run.held_pages, frames);
    }

    #[test]
    fn the_buddys_series_reads_the_lists_the_replay_ends_with() {
        let path = data("snapshots.trace.zst");
        let run = replay_buddy(&path, ModelKind::Flat, Era::V6_18, false, 1000).unwrap();
        assert_eq!(run.series.first().map(|s| s.ops), Some(0));
        assert_eq!(run.series.last().map(|s| s.ops), Some(run.events));
        assert!(run.allocs > 0 && run.frees > 0);
        // The recorded workload takes pages: fewer are free at the end
        // than at boot, by no more than the replay holds and the per-CPU
        // lists keep.
        let (first, last) = (&run.series[0], run.series.last().unwrap());
        assert!(last.free_pages < first.free_pages);
        assert!(first.free_pages - last.free_pages >= run.held_pages);
        assert!(last.fallbacks.is_some() && last.free_blocks.is_some());
    }

    #[test]
    fn an_unreadable_trace_is_refused() {
        let missing = data("no-such.trace.zst");
        assert!(check_trace(&missing).is_err());
        assert!(replay_llfree(&missing, 1 << 18, 100).is_err());
    }
}
