//! This host's kernel beside the model: the same fragmenting shape run on
//! the machine's own page allocator, recorded, and replayed.
//!
//! [`run_on_host`] maps anonymous memory in this process (transparent huge
//! pages off for it, `MADV_NOHUGEPAGE`, so that every fault allocates one
//! base page) and runs [`FragShape`] on it: a write to a page is an
//! allocation (the anonymous fault's `alloc_pages`, movable), an
//! `MADV_DONTNEED` of one page a free (`zap_pte_range` hands it back through
//! the mmu_gather's batched free). Which page a fault gets is the kernel's
//! choice, so picking the virtual page at random is enough: the physical
//! placement is what the host's allocator decides, as the model's decides
//! its own.
//!
//! It needs root: the run is recorded through tracefs with the machine's
//! snapshot at both ends ([`crate::trace::record::record_while`]), and
//! then `/proc/sys/vm/compact_memory` is written once, timed, with the
//! compaction and migration counters of `/proc/vmstat` it moved. The
//! recording replays through the model from its first snapshot
//! ([`replay_recording`]), so the table holds the machine before, after
//! the workload and after compaction beside the model's end of the same
//! events. Nothing else is written: the trigger is not a setting, so there
//! is nothing to restore.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use buddy::views::BuddyInfo;
use serde::Serialize;
use sparsemem::NR_PAGE_ORDERS;

use super::workload::FragShape;
use super::{fragmentation_index, unusable_free_index};
use crate::host_kernel::{HostError, HostPaths, compact_memory, is_root};
use crate::layout_spec::LayoutSpec;
use crate::models::ModelKind;
use crate::snapshot::{Snapshot, StartState};
use crate::trace::format::{Header, TraceReader, write_recording};
use crate::trace::record::{RecordError, RecordOptions, host_snapshot, record_while};
use crate::trace::replay::end_state::{EndState, FreeState, compare_end_state};
use crate::trace::replay::{EventCounts, ReplayOptions, replay_layout, replay_models_from};
use crate::workloads::xorshift;

pub use region::HostRegion;

/// The order the table's indices are read at: `pageblock_order` on x86-64
/// with 4 KiB pages, a THP's order.
pub const HUGE_ORDER: usize = 9;

/// The `/proc/vmstat` counters compaction and migration move, by name.
pub const COMPACTION_COUNTERS: [&str; 8] = [
    "compact_migrate_scanned",
    "compact_free_scanned",
    "compact_isolated",
    "compact_stall",
    "compact_fail",
    "compact_success",
    "pgmigrate_success",
    "pgmigrate_fail",
];

/// Pages a workload writes to (allocates) and drops (frees), by index.
pub trait WorkPages {
    /// Pages there are.
    fn count(&self) -> usize;
    /// Writes page `i`: the first write after a drop allocates.
    fn touch(&mut self, i: usize);
    /// Drops page `i`: its frame goes back to the allocator.
    fn drop_page(&mut self, i: usize);
}

/// What [`run_shape`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HostWork {
    /// Pages written (allocations), the fill included.
    pub touched: u64,
    /// Pages dropped (frees).
    pub dropped: u64,
    /// Pages still held at the end.
    pub held: u64,
    /// Iterations run (fewer than the shape's when stopped).
    pub iterations: u32,
}

/// Runs `shape` on `pages`: writes every page, drops `shape.free` of them
/// at random, then each iteration drops `shape.churn` of that many random
/// held pages and writes as many random dropped ones, a drop and a write
/// in turn. Stops between iterations once `stop` is set.
pub fn run_shape(pages: &mut dyn WorkPages, shape: &FragShape, stop: &AtomicBool) -> HostWork {
    let n = pages.count();
    let mut work = HostWork::default();
    for i in 0..n {
        pages.touch(i);
    }
    work.touched = n as u64;
    let mut rng = shape.seed.max(1);
    let mut held: Vec<usize> = (0..n).collect();
    let mut dropped = Vec::with_capacity(n);
    let to_free = (n as f64 * shape.free) as usize;
    for _ in 0..to_free {
        dropped.push(take_random(&mut held, &mut rng, &mut *pages, &mut work));
    }
    let per_iteration = (to_free as f64 * shape.churn) as usize;
    for _ in 0..shape.iterations {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        for _ in 0..per_iteration {
            if held.is_empty() || dropped.is_empty() {
                break;
            }
            let freed = take_random(&mut held, &mut rng, &mut *pages, &mut work);
            let k = (xorshift(&mut rng) % dropped.len() as u64) as usize;
            let page = dropped.swap_remove(k);
            pages.touch(page);
            work.touched += 1;
            held.push(page);
            dropped.push(freed);
        }
        work.iterations += 1;
    }
    work.held = held.len() as u64;
    work
}

/// Drops a random page of `held` and returns it.
fn take_random(
    held: &mut Vec<usize>,
    rng: &mut u64,
    pages: &mut dyn WorkPages,
    work: &mut HostWork,
) -> usize {
    let k = (xorshift(rng) % held.len() as u64) as usize;
    let page = held.swap_remove(k);
    pages.drop_page(page);
    work.dropped += 1;
    page
}

/// The free memory one side holds, read the way the table reads it: over
/// every zone together, as [`super::FragSample`] does.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FreeShape {
    /// Free blocks per order, every zone together.
    pub nr_free: Vec<u64>,
    /// Free pages.
    pub free_pages: u64,
    /// The share of free pages in blocks of [`HUGE_ORDER`] or more.
    pub huge_share: f64,
    /// `unusable_index` at [`HUGE_ORDER`].
    pub unusable_index: f64,
    /// `extfrag_index` at [`HUGE_ORDER`].
    pub extfrag_index: f64,
}

impl FreeShape {
    /// The shape of `buddyinfo`'s free lists.
    pub fn of(buddyinfo: &BuddyInfo) -> FreeShape {
        let mut nr_free = vec![0u64; NR_PAGE_ORDERS];
        for zone in &buddyinfo.zones {
            for (o, &n) in zone.nr_free.iter().enumerate().take(NR_PAGE_ORDERS) {
                nr_free[o] += n;
            }
        }
        let free_pages: u64 = nr_free.iter().enumerate().map(|(o, &n)| n << o).sum();
        let huge: u64 = nr_free
            .iter()
            .enumerate()
            .skip(HUGE_ORDER)
            .map(|(o, &n)| n << o)
            .sum();
        FreeShape {
            huge_share: if free_pages == 0 {
                0.0
            } else {
                huge as f64 / free_pages as f64
            },
            unusable_index: unusable_free_index(&nr_free, HUGE_ORDER),
            extfrag_index: fragmentation_index(&nr_free, HUGE_ORDER),
            free_pages,
            nr_free,
        }
    }
}

/// `/proc/vmstat`'s [`COMPACTION_COUNTERS`] from `vmstat`'s text, a
/// missing one 0 (kernels built without `CONFIG_COMPACTION` or
/// `CONFIG_MIGRATION` lack them).
pub fn compaction_counters(vmstat: &str) -> [u64; 8] {
    let mut out = [0u64; 8];
    for line in vmstat.lines() {
        let mut words = line.split_whitespace();
        let (Some(name), Some(value)) = (words.next(), words.next()) else {
            continue;
        };
        if let Some(i) = COMPACTION_COUNTERS.iter().position(|c| *c == name) {
            out[i] = value.parse().unwrap_or(0);
        }
    }
    out
}

/// `after − before`, counter by counter, by name.
pub fn counter_deltas(before: &[u64; 8], after: &[u64; 8]) -> Vec<(&'static str, u64)> {
    COMPACTION_COUNTERS
        .iter()
        .zip(before.iter().zip(after))
        .map(|(name, (b, a))| (*name, a.saturating_sub(*b)))
        .collect()
}

/// One reading of the machine: its snapshot and the shape of its free
/// memory.
#[derive(Clone, Debug)]
pub struct HostState {
    /// The snapshot.
    pub snapshot: Snapshot,
    /// Its free lists' shape.
    pub free: FreeShape,
    /// Its compaction and migration counters.
    pub counters: [u64; 8],
}

impl HostState {
    /// The reading of `snapshot`; an error when it has no buddyinfo.
    pub fn of(snapshot: Snapshot) -> Result<HostState, HostFragError> {
        let buddyinfo = snapshot
            .buddyinfo()
            .map_err(|e| HostFragError::Snapshot(e.to_string()))?
            .ok_or_else(|| HostFragError::Snapshot("no /proc/buddyinfo".into()))?;
        let counters = compaction_counters(snapshot.proc.vmstat.as_deref().unwrap_or(""));
        Ok(HostState {
            free: FreeShape::of(&buddyinfo),
            snapshot,
            counters,
        })
    }
}

/// One run on the host.
#[derive(Debug)]
pub struct HostFragRun {
    /// Pages the workload mapped.
    pub pages: u64,
    /// What the workload did.
    pub work: HostWork,
    /// The recording, written with both snapshots.
    pub recording: PathBuf,
    /// Events recorded, and events the ring buffers lost.
    pub events: u64,
    /// Events lost (per-CPU overruns, summed).
    pub lost_events: u64,
    /// The machine before the workload.
    pub before: HostState,
    /// The machine after it, its memory still mapped.
    pub after: HostState,
    /// The machine after `compact_memory`.
    pub compacted: HostState,
    /// Wall time of the `compact_memory` write, in ns.
    pub compact_ns: f64,
    /// Wall time of the workload (tracing on), in ns.
    pub workload_ns: f64,
}

/// Why the host's run could not be made.
#[derive(Debug)]
pub enum HostFragError {
    /// Tracing and `compact_memory` are root-only.
    NeedsRoot,
    /// No pages to run on.
    Empty,
    /// The workload's memory could not be mapped.
    Map(std::io::Error),
    /// The recording failed.
    Record(RecordError),
    /// The recording could not be written.
    Write(PathBuf, std::io::Error),
    /// A snapshot lacks what the table reads.
    Snapshot(String),
    /// `compact_memory` failed.
    Host(HostError),
    /// The recording could not be replayed.
    Replay(String),
}

impl std::fmt::Display for HostFragError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostFragError::NeedsRoot => {
                f.write_str("the host's run needs root (tracefs and /proc/sys/vm/compact_memory)")
            }
            HostFragError::Empty => f.write_str("the host's run needs at least one page"),
            HostFragError::Map(e) => write!(f, "mapping the workload's memory: {e}"),
            HostFragError::Record(e) => write!(f, "recording: {e}"),
            HostFragError::Write(p, e) => write!(f, "writing {}: {e}", p.display()),
            HostFragError::Snapshot(why) => write!(f, "the machine's snapshot: {why}"),
            HostFragError::Host(e) => write!(f, "{e}"),
            HostFragError::Replay(why) => write!(f, "replaying the host's recording: {why}"),
        }
    }
}

impl std::error::Error for HostFragError {}

/// Runs `shape` on `pages` host pages, recorded into `out` with the
/// machine's snapshot at both ends, then compacts the machine once.
pub fn run_on_host(
    shape: &FragShape,
    pages: u64,
    out: &Path,
    stop: &AtomicBool,
) -> Result<HostFragRun, HostFragError> {
    if pages == 0 {
        return Err(HostFragError::Empty);
    }
    // A recording that cannot be written is refused before anything runs.
    std::fs::File::create(out).map_err(|e| HostFragError::Write(out.to_owned(), e))?;
    if !is_root() {
        return Err(HostFragError::NeedsRoot);
    }
    let mut region = HostRegion::map(pages as usize).map_err(HostFragError::Map)?;
    let options = RecordOptions {
        command: Vec::new(),
        seconds: 0.0,
        snapshot: true,
    };
    let mut work = HostWork::default();
    let mut workload_ns = 0.0;
    let recording = record_while(&options, stop, || {
        let t = Instant::now();
        work = run_shape(&mut region, shape, stop);
        workload_ns = t.elapsed().as_nanos() as f64;
    })
    .map_err(HostFragError::Record)?;
    write_recording(out, &recording.header, &recording.events)
        .map_err(|e| HostFragError::Write(out.to_owned(), e))?;
    let (before, after) = header_states(&recording.header)?;
    let t = Instant::now();
    compact_memory(&HostPaths::live()).map_err(HostFragError::Host)?;
    let compact_ns = t.elapsed().as_nanos() as f64;
    let compacted = HostState::of(host_snapshot())?;
    drop(region);
    Ok(HostFragRun {
        pages,
        work,
        recording: out.to_owned(),
        events: recording.events.len() as u64,
        lost_events: recording.header.lost_events.iter().sum(),
        before,
        after,
        compacted,
        compact_ns,
        workload_ns,
    })
}

/// The two snapshots a recording's header carries, read.
pub fn header_states(header: &Header) -> Result<(HostState, HostState), HostFragError> {
    let read = |text: Option<&str>, which: &str| {
        let text =
            text.ok_or_else(|| HostFragError::Snapshot(format!("the recording has no {which}")))?;
        let snapshot = Snapshot::from_json(text)
            .map_err(|e| HostFragError::Snapshot(format!("{which}: {e}")))?;
        HostState::of(snapshot)
    };
    Ok((
        read(header.snapshot_start.as_deref(), "start snapshot")?,
        read(header.snapshot_end.as_deref(), "end snapshot")?,
    ))
}

/// The model's end of a recording: the same events replayed from the
/// recording's start snapshot.
#[derive(Clone, Debug, Serialize)]
pub struct ModelEnd {
    /// The era the replay modelled (the snapshot's kernel's), by release.
    pub era: String,
    /// The shape of the model's free memory at the end.
    pub free: FreeShape,
    /// Its free lists against the machine's at the end of the recording.
    pub end_state: EndState,
    /// What the replay did with the events.
    pub events: EventCounts,
}

/// Replays the recording at `path` through the flat model, from its start
/// snapshot, and holds the model's end against its end snapshot (what
/// `pfnlab replay FILE --model flat --start-state recorded --end-state
/// recorded` does).
pub fn replay_recording(path: &Path) -> Result<ModelEnd, HostFragError> {
    let refused = |why: String| HostFragError::Replay(format!("{}: {why}", path.display()));
    let reader = TraceReader::open(path).map_err(|e| refused(e.to_string()))?;
    let header = reader
        .header()
        .cloned()
        .ok_or_else(|| refused("not a pfnlab recording".into()))?;
    drop(reader);
    let (_, after) = header_states(&header)?;
    let start_snapshot = Snapshot::from_json(header.snapshot_start.as_deref().unwrap_or(""))
        .map_err(|e| refused(e.to_string()))?;
    let start =
        StartState::of(&start_snapshot, path, true, 1).map_err(|e| refused(e.to_string()))?;
    let era = start.era().map(|(era, _)| *era).unwrap_or_default();
    let deferred_init = start
        .options(buddy::Options::for_era(era))
        .map_err(|e| refused(e.to_string()))?
        .deferred_init;
    let layout = replay_layout(Some(&LayoutSpec::Recorded), Some(&header))
        .map_err(|e| refused(e.to_string()))?
        .layout;
    let options = ReplayOptions {
        era,
        deferred_init,
        end_state: true,
        trials: 1,
        ..ReplayOptions::default()
    };
    let open = || TraceReader::open(path);
    let mut results = replay_models_from(
        &open,
        &layout,
        &[ModelKind::Flat],
        options,
        Some(&start),
        &|_, _| {},
    )
    .map_err(|e| refused(e.to_string()))?;
    let (_, result) = results
        .pop()
        .ok_or_else(|| refused("no model replayed".into()))?;
    let result = result.map_err(|e| refused(e.to_string()))?;
    let model = result
        .end_free
        .ok_or_else(|| refused("the replay kept no end state".into()))?;
    let machine = FreeState {
        buddyinfo: after
            .snapshot
            .buddyinfo()
            .map_err(|e| refused(e.to_string()))?
            .unwrap_or_default(),
        pagetypeinfo: after
            .snapshot
            .pagetypeinfo()
            .map_err(|e| refused(e.to_string()))?,
    };
    Ok(ModelEnd {
        era: era.to_string(),
        free: FreeShape::of(&model.buddyinfo),
        end_state: compare_end_state(&model, &machine, path.to_owned()),
        events: result.events,
    })
}

/// The host's run beside the model's replay of its recording: what `bench
/// frag --host-kernel` prints and writes.
#[derive(Clone, Debug, Serialize)]
pub struct HostComparison {
    /// Pages the workload mapped.
    pub pages: u64,
    /// What the workload did.
    pub work: HostWork,
    /// Wall time of the workload, in ns.
    pub workload_ns: f64,
    /// The recording, with both snapshots.
    pub recording: PathBuf,
    /// Events recorded.
    pub events: u64,
    /// Events the ring buffers lost.
    pub lost_events: u64,
    /// The machine's free memory before the workload.
    pub before: FreeShape,
    /// After it.
    pub after: FreeShape,
    /// After `compact_memory`.
    pub compacted: FreeShape,
    /// The counters the workload moved (the machine's own compaction and
    /// migration while it ran).
    pub workload_counters: BTreeMap<&'static str, u64>,
    /// The counters `compact_memory` moved.
    pub compact_counters: BTreeMap<&'static str, u64>,
    /// Wall time of the `compact_memory` write, in ns.
    pub compact_ns: f64,
    /// The model's end of the same events.
    pub model: ModelEnd,
}

/// [`run_on_host`], then [`replay_recording`] of its recording.
pub fn compare_on_host(
    shape: &FragShape,
    pages: u64,
    out: &Path,
    stop: &AtomicBool,
) -> Result<HostComparison, HostFragError> {
    let run = run_on_host(shape, pages, out, stop)?;
    let model = replay_recording(&run.recording)?;
    let deltas = |a: &HostState, b: &HostState| -> BTreeMap<&'static str, u64> {
        counter_deltas(&a.counters, &b.counters)
            .into_iter()
            .collect()
    };
    Ok(HostComparison {
        pages: run.pages,
        work: run.work,
        workload_ns: run.workload_ns,
        events: run.events,
        lost_events: run.lost_events,
        workload_counters: deltas(&run.before, &run.after),
        compact_counters: deltas(&run.after, &run.compacted),
        before: run.before.free,
        after: run.after.free,
        compacted: run.compacted.free,
        compact_ns: run.compact_ns,
        recording: run.recording,
        model,
    })
}

/// The table of a [`HostComparison`]: each state's free memory, then the
/// counters.
pub fn render_host(c: &HostComparison) -> String {
    use std::fmt::Write;
    let mut out = format!(
        "\nthis host's kernel, the same shape on {} pages of anonymous memory ({} written, {} dropped, {:.2} s), recorded ({} events, {} lost) into {}:\n",
        c.pages,
        c.work.touched,
        c.work.dropped,
        c.workload_ns / 1e9,
        c.events,
        c.lost_events,
        c.recording.display()
    );
    let _ = writeln!(
        out,
        "{:<34} {:>12} {:>16} {:>14} {:>14}",
        "state", "free pages", "in order>=9, %", "unusable(9)", "extfrag(9)"
    );
    let model_label = format!("model {} replaying the recording", c.model.era);
    for (label, f) in [
        ("host before", &c.before),
        ("host after the workload", &c.after),
        (model_label.as_str(), &c.model.free),
        ("host after compact_memory", &c.compacted),
    ] {
        let _ = writeln!(
            out,
            "{label:<34} {:>12} {:>16.2} {:>14.3} {:>14.3}",
            f.free_pages,
            f.huge_share * 100.0,
            f.unusable_index,
            f.extfrag_index
        );
    }
    let _ = writeln!(
        out,
        "model against the host at the end: {:.4} of free pages at another zone or order{}",
        c.model.end_state.order_distance,
        c.model
            .end_state
            .type_distance
            .map_or(String::new(), |d| format!(
                ", {d:.4} at another migratetype or order"
            ))
    );
    let _ = writeln!(out, "compact_memory: {:.1} ms", c.compact_ns / 1e6);
    let _ = writeln!(
        out,
        "{:<26} {:>14} {:>16}",
        "counter", "the workload", "compact_memory"
    );
    for name in COMPACTION_COUNTERS {
        let _ = writeln!(
            out,
            "{name:<26} {:>14} {:>16}",
            c.workload_counters.get(name).copied().unwrap_or(0),
            c.compact_counters.get(name).copied().unwrap_or(0)
        );
    }
    out
}

/// The host's memory for the workload: an anonymous private mapping,
/// huge pages off for it.
#[allow(unsafe_code)]
mod region {
    use memmap2::{Advice, MmapMut, UncheckedAdvice};

    use super::WorkPages;

    /// Anonymous memory whose pages a [`super::run_shape`] writes and
    /// drops one at a time.
    pub struct HostRegion {
        map: MmapMut,
        page: usize,
    }

    impl HostRegion {
        /// Maps `pages` host pages (nothing is allocated until written).
        pub fn map(pages: usize) -> std::io::Result<HostRegion> {
            let page = sparsemem::memmap::host_page_size();
            let len = pages
                .checked_mul(page)
                .ok_or_else(|| std::io::Error::other("the region's size overflows"))?;
            let map = MmapMut::map_anon(len)?;
            // Every fault then allocates one base page, as the shape asks.
            map.advise(Advice::NoHugePage)?;
            Ok(HostRegion { map, page })
        }

        /// Whether page `i` holds a page written since its last drop.
        pub fn is_held(&self, i: usize) -> bool {
            self.map.get(i * self.page).is_some_and(|&b| b != 0)
        }
    }

    impl WorkPages for HostRegion {
        fn count(&self) -> usize {
            self.map.len() / self.page
        }

        fn touch(&mut self, i: usize) {
            if let Some(b) = self.map.get_mut(i * self.page) {
                *b = 1;
            }
        }

        fn drop_page(&mut self, i: usize) {
            if i >= self.count() {
                return;
            }
            // SAFETY: the range is one page inside this private anonymous
            // mapping, which only this value reaches, and `&mut self`
            // holds no reference into it across the call. MADV_DONTNEED
            // frees the page; the next access reads a zero-filled page,
            // a valid value for the `u8`s the mapping holds. A failure
            // leaves the page held, which the workload's counts do not
            // notice but `is_held` does.
            let _ = unsafe {
                self.map
                    .unchecked_advise_range(UncheckedAdvice::DontNeed, i * self.page, self.page)
            };
        }
    }
}

#[cfg(test)]
mod tests;
