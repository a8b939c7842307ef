//! `frag`: how long each allocator keeps huge frames free under churn.
//!
//! LLFree's fragmentation benchmark shape ([`crate::frag::workload`]) runs
//! on the buddy of 2.6.9 and 2.6.23 (one free list per order: grouping by
//! mobility came in 2.6.24) and 6.18 (free lists per migratetype,
//! pageblock fallback and claiming, HIGHATOMIC), and on LLFree, one fresh
//! allocator per trial,
//! each trial its own request sequence (seed), the allocators of one trial
//! given the same sequence. The reading is the share of huge frames
//! wholly free after the last iteration, with its interval over the
//! trials, beside the paper's published figures; the series behind it
//! (after the free and every iteration) goes into the JSON.
//!
//! Then each recorded trace (the committed recordings unless others are
//! given) is replayed through every allocator once ([`crate::frag::replay`]),
//! the same reading sampled every K events: what a real workload, rather
//! than the benchmark's churn, does to the free huge frames.

mod replays;

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use buddy::llfree::LLFree;
use buddy::{AllocError, Era, Kernel, Options};
use serde::Serialize;
use sparsemem::Layout;
use vmemmap::VmemmapOptions;

use super::{Ctx, Experiment, ExperimentId};
use crate::error::RunError;
use crate::frag::FragSample;
use crate::frag::host::{HostComparison, compare_on_host, render_host};
use crate::frag::recover::{Recovery, RecoverySummary};
use crate::frag::replay::{DEFAULT_SAMPLE_EVERY, TraceRun, check_trace, committed_traces};
use crate::frag::workload::{FragRun, FragShape, run_buddy, run_llfree};
use crate::models::{Buildable, ModelVisitor, build_allocator};
use crate::report::Row;
use crate::spread::Interval;
use crate::timing::Measurement;
use replays::{replay_table, replay_traces};

/// The paper's figures (Wrenger et al., USENIX ATC 2023, fragmentation
/// benchmark: a 128 GiB VM, 8 cores, 100 iterations): huge frames still
/// wholly free, per cent.
const PUBLISHED: [(&str, f64); 2] = [("LLFree", 46.6), ("Linux buddy", 0.14)];

/// The paper's frames for compaction to move at the end of the same run
/// (128 GiB), beside which the recovery's measure is printed.
const PUBLISHED_TO_MOVE: [(&str, u64); 2] = [("LLFree", 266_503), ("Linux buddy", 6_634_775)];

/// The paper's machine, GiB.
const PUBLISHED_GIB: u64 = 128;

/// The experiment `bench frag`.
pub struct Frag;

/// An allocator under the workload (in the JSON: `buddy-6.18`,
/// `buddy-6.18-defrag`, `llfree`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FragAllocator {
    /// pfnlab's buddy in an era.
    Buddy(Era),
    /// pfnlab's buddy in an era with `vm.defrag_mode` (6.15 on).
    BuddyDefrag(Era),
    /// LLFree.
    Llfree,
    /// This host's kernel ([`FragParams::host_kernel`]; not a model's
    /// allocator, so not one to list in [`FragParams::allocators`]).
    HostKernel,
}

impl Serialize for FragAllocator {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            FragAllocator::Buddy(era) => s.serialize_str(&format!("buddy-{era}")),
            FragAllocator::BuddyDefrag(era) => s.serialize_str(&format!("buddy-{era}-defrag")),
            FragAllocator::Llfree => s.serialize_str("llfree"),
            FragAllocator::HostKernel => s.serialize_str("host-kernel"),
        }
    }
}

impl FragAllocator {
    /// The default set: the buddy before and after grouping by mobility,
    /// today's without and with `vm.defrag_mode`, and LLFree.
    pub const DEFAULT: [FragAllocator; 5] = [
        FragAllocator::Buddy(Era::V2_6_9),
        FragAllocator::Buddy(Era::V2_6_23),
        FragAllocator::Buddy(Era::V6_18),
        FragAllocator::BuddyDefrag(Era::V6_18),
        FragAllocator::Llfree,
    ];
}

impl std::fmt::Display for FragAllocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FragAllocator::Buddy(era) => write!(f, "buddy {era}"),
            FragAllocator::BuddyDefrag(era) => write!(f, "buddy {era} defrag_mode"),
            FragAllocator::Llfree => f.write_str("LLFree"),
            FragAllocator::HostKernel => f.write_str("host kernel"),
        }
    }
}

/// `bench frag`'s parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct FragParams {
    /// The workload (its seed is the first trial's).
    pub shape: FragShape,
    /// The allocators, in the table's order.
    pub allocators: Vec<FragAllocator>,
    /// Also run the shape on this host's kernel, recorded, and replay the
    /// recording through the model (`None`: not asked for).
    pub host_kernel: Option<HostKernelParams>,
    /// Recorded traces each allocator replays after the shape (empty:
    /// none).
    pub traces: Vec<PathBuf>,
    /// Events between a replay's samples.
    pub trace_sample_every: u64,
}

impl Default for FragParams {
    fn default() -> Self {
        FragParams {
            shape: FragShape::PAPER,
            allocators: FragAllocator::DEFAULT.to_vec(),
            host_kernel: None,
            traces: committed_traces(),
            trace_sample_every: DEFAULT_SAMPLE_EVERY,
        }
    }
}

/// The host kernel's run ([`crate::frag::host`]): root only.
#[derive(Clone, Debug)]
pub struct HostKernelParams {
    /// Pages of anonymous memory the shape runs on.
    pub pages: u64,
    /// Where the recording goes.
    pub recording: PathBuf,
    /// Set to stop the workload between iterations (Ctrl-C).
    pub stop: &'static AtomicBool,
}

impl PartialEq for HostKernelParams {
    fn eq(&self, other: &Self) -> bool {
        self.pages == other.pages
            && self.recording == other.recording
            && std::ptr::eq(self.stop, other.stop)
    }
}

/// What `bench frag` measured.
#[derive(Clone, Debug)]
pub struct FragResults {
    /// The workload (its seed is the first trial's).
    pub shape: FragShape,
    /// Each allocator's runs, in the table's order.
    pub allocators: Vec<AllocatorRuns>,
    /// The host kernel's run beside the model's replay of it (`None`: not
    /// asked for).
    pub host: Option<HostComparison>,
}

/// One allocator's runs, a trial each.
#[derive(Clone, Debug)]
pub struct AllocatorRuns {
    /// The allocator.
    pub allocator: FragAllocator,
    /// Its runs, trial by trial.
    pub runs: Vec<FragRun>,
    /// Its replay of each trace, in [`FragParams::traces`]' order.
    pub replays: Vec<TraceRun>,
}

impl AllocatorRuns {
    fn end(&self, of: impl Fn(&FragSample) -> f64) -> Vec<f64> {
        self.runs
            .iter()
            .filter_map(|r| r.series.last().map(&of))
            .collect()
    }

    /// Wholly free huge frames after the last iteration, per cent of all
    /// huge frames, over the trials.
    pub fn end_share(&self) -> Option<Interval> {
        Interval::of_median(&self.end(|s| s.free_huge_of_all() * 100.0)).ok()
    }

    /// The recoveries, trial by trial.
    pub fn recoveries(&self) -> Vec<Recovery> {
        self.runs
            .iter()
            .filter_map(|r| r.recovery.clone())
            .collect()
    }

    fn measurement(&self) -> Measurement {
        Measurement::from_ns(
            self.runs
                .iter()
                .map(|r| r.elapsed_ns / r.ops.max(1) as f64)
                .collect(),
        )
    }
}

/// What a row carries besides the time per operation.
#[derive(Clone, Debug, Serialize)]
pub struct FragExtra {
    /// Wholly free huge frames after the last iteration, per cent of all
    /// huge frames, median and interval over the trials.
    pub end_free_huge_percent: Option<Interval>,
    /// Pageblocks holding another migratetype's page at the end, over
    /// the trials.
    pub end_mixed_pageblocks: Option<Interval>,
    /// Allocations refused after the fill, every trial together.
    pub refused: u64,
    /// Pages the fill took, per trial.
    pub filled: Vec<u64>,
    /// The samples, trial by trial: after the free and each iteration.
    pub series: Vec<Vec<FragSample>>,
    /// The host kernel's row: its run beside the model's replay of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_kernel: Option<HostComparison>,
    /// The cost to recover huge frames from the end state, over the
    /// trials (`None` with `--recover 0`).
    pub recovery: Option<RecoverySummary>,
    /// The same, trial by trial.
    pub recoveries: Vec<Recovery>,
    /// Its replay of each recorded trace, sampled as it went.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub replays: Vec<TraceRun>,
}

/// One row of `bench frag`'s report.
pub type FragRow = Row<FragAllocator, FragShape, FragExtra>;

struct Visitor<'a> {
    params: &'a FragParams,
    trials: usize,
}

impl Visitor<'_> {
    fn one<M: Buildable>(
        &self,
        layout: &Layout,
        options: VmemmapOptions,
        allocator: FragAllocator,
        shape: &FragShape,
        managed: &mut Option<u64>,
    ) -> Result<Result<FragRun, String>, AllocError> {
        Ok(match allocator {
            FragAllocator::Buddy(era) | FragAllocator::BuddyDefrag(era) => {
                let buddy = Options {
                    defrag_mode: matches!(allocator, FragAllocator::BuddyDefrag(_)),
                    ..Options::for_era(era)
                };
                let alloc = build_allocator::<M, Kernel>(layout, options, buddy)?;
                managed.get_or_insert(alloc.managed_pages_total());
                run_buddy(&alloc, shape).map_err(|why| format!("{allocator}: {why}"))
            }
            FragAllocator::Llfree => {
                let frames = match managed {
                    Some(m) => *m,
                    None => {
                        let a = build_allocator::<M, Kernel>(layout, options, Options::default())?;
                        *managed.insert(a.managed_pages_total())
                    }
                };
                LLFree::new(frames, shape.cpus)
                    .map_err(|e| e.to_string())
                    .and_then(|llfree| run_llfree(&llfree, shape))
                    .map_err(|why| format!("{allocator}: {why}"))
            }
            FragAllocator::HostKernel => Err(format!(
                "{allocator}: runs on the machine with the host-kernel parameter, not on a layout"
            )),
        })
    }
}

impl ModelVisitor for Visitor<'_> {
    type Output = Result<Vec<AllocatorRuns>, String>;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<Self::Output, AllocError> {
        let mut out: Vec<AllocatorRuns> = self
            .params
            .allocators
            .iter()
            .map(|&allocator| AllocatorRuns {
                allocator,
                runs: Vec::new(),
                replays: Vec::new(),
            })
            .collect();
        // LLFree gets as many frames as the buddy manages.
        let mut managed = None;
        for trial in 0..self.trials {
            let shape = FragShape {
                seed: self.params.shape.seed + trial as u64,
                ..self.params.shape
            };
            for a in &mut out {
                match self.one::<M>(layout, options, a.allocator, &shape, &mut managed)? {
                    Ok(run) => a.runs.push(run),
                    Err(why) => return Ok(Err(why)),
                }
            }
        }
        Ok(Ok(out))
    }
}

impl Experiment for Frag {
    const ID: ExperimentId = ExperimentId::Frag;
    type Params = FragParams;
    type Results = FragResults;
    type Row = FragRow;

    fn measure(ctx: &Ctx, params: &FragParams) -> Result<FragResults, RunError> {
        params
            .shape
            .check()
            .map_err(|why| RunError::NothingMeasured {
                experiment: "frag",
                why,
            })?;
        // A trace that cannot be read is refused before any run.
        for trace in &params.traces {
            check_trace(trace).map_err(|e| RunError::Trace(format!("{}: {e}", trace.display())))?;
        }
        // The host's run first: a refusal (not root, no tracefs, an
        // unwritable recording) then costs no model's run.
        let host = match &params.host_kernel {
            Some(h) => {
                ctx.progress.stage("this host's kernel".into());
                let run = compare_on_host(&params.shape, h.pages, &h.recording, h.stop);
                Some(run.map_err(|e| RunError::HostKernel(e.to_string()))?)
            }
            None => None,
        };
        let allocators = ctx
            .visit(Visitor {
                params,
                trials: ctx.plan.trials.max(1),
            })?
            .map_err(RunError::Workload)?;
        if allocators
            .iter()
            .flat_map(|a| &a.runs)
            .all(|r| r.filled == 0)
        {
            return Err(RunError::NothingMeasured {
                experiment: "frag",
                why: "no allocator could allocate a single page of the fill".into(),
            });
        }
        let mut allocators = allocators;
        replay_traces(ctx, params, &mut allocators)?;
        Ok(FragResults {
            shape: params.shape,
            allocators,
            host,
        })
    }

    fn rows(ctx: &Ctx, results: &FragResults) -> Vec<FragRow> {
        results
            .allocators
            .iter()
            .filter(|a| !a.runs.is_empty())
            .map(|a| {
                let extra = FragExtra {
                    end_free_huge_percent: a.end_share(),
                    end_mixed_pageblocks: Interval::of_median(
                        &a.end(|s| s.mixed_pageblocks as f64),
                    )
                    .ok(),
                    refused: a.runs.iter().map(|r| r.refused).sum(),
                    filled: a.runs.iter().map(|r| r.filled).collect(),
                    series: a.runs.iter().map(|r| r.series.clone()).collect(),
                    host_kernel: None,
                    recovery: RecoverySummary::of(&a.recoveries()),
                    recoveries: a.recoveries(),
                    replays: a.replays.clone(),
                };
                Row::new(
                    a.allocator,
                    ctx.model,
                    results.shape,
                    a.measurement(),
                    extra,
                )
            })
            .chain(results.host.iter().map(|h| host_row(ctx, results, h)))
            .collect()
    }

    fn render(_ctx: &Ctx, results: &FragResults) -> String {
        let mut out = render(&results.allocators);
        out.push_str(&replay_table(&results.allocators));
        if let Some(host) = &results.host {
            out.push_str(&render_host(host));
        }
        out
    }

    fn header(ctx: &Ctx) -> String {
        format!(
            "pfnlab bench frag | model {} | layout {}\nmachine: {}\n\n",
            ctx.model,
            layout_name(ctx),
            ctx.machine.summary()
        )
    }

    fn layout_label(ctx: &Ctx, _results: &FragResults) -> String {
        layout_name(ctx)
    }
}

/// The host kernel's row: ns per page written or dropped, and the run.
fn host_row(ctx: &Ctx, results: &FragResults, host: &HostComparison) -> FragRow {
    let ops = (host.work.touched + host.work.dropped).max(1);
    let extra = FragExtra {
        end_free_huge_percent: None,
        end_mixed_pageblocks: None,
        refused: 0,
        filled: vec![host.work.touched],
        series: Vec::new(),
        host_kernel: Some(host.clone()),
        recovery: None,
        recoveries: Vec::new(),
        replays: Vec::new(),
    };
    Row::new(
        FragAllocator::HostKernel,
        ctx.model,
        results.shape,
        Measurement::from_ns(vec![host.workload_ns / ops as f64]),
        extra,
    )
}

/// The layout as the reader knows it: the default by its place in the
/// source tree, anything else as given.
fn layout_name(ctx: &Ctx) -> String {
    match ctx.layout_spec {
        None => DEFAULT_LAYOUT.to_string(),
        Some(_) => ctx.layout.source().to_string(),
    }
}

/// The default layout's file, from the repository's root.
pub const DEFAULT_LAYOUT: &str = "benches/data/frag-4g.toml";

/// The table: the end state per allocator, then the series at a few
/// points, then the published figures.
fn render(results: &[AllocatorRuns]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<22} {:>26} {:>16} {:>22} {:>8} {:>9}",
        "allocator",
        "free huge frames, % of all",
        "mixed blocks",
        "fallbacks w/c/s",
        "refused",
        "ns/op"
    );
    for a in results {
        let share = a.end_share().map_or("-".into(), |i| {
            format!("{:.2} [{:.2}, {:.2}]", i.median, i.lo, i.hi)
        });
        let mixed = Interval::of_median(&a.end(|s| s.mixed_pageblocks as f64))
            .map_or("-".into(), |i| format!("{:.0}", i.median));
        let fallbacks = median_run(a)
            .and_then(|r| r.series.last()?.fallbacks)
            .map_or("-".into(), |f| {
                format!("{}/{}/{}", f.whole_block, f.claimed, f.stolen)
            });
        let refused: u64 = a.runs.iter().map(|r| r.refused).sum();
        let _ = writeln!(
            out,
            "{:<22} {share:>26} {mixed:>16} {fallbacks:>22} {refused:>8} {:>9.1}",
            a.allocator.to_string(),
            a.measurement().ns_per_op.median,
        );
    }
    out.push_str(&series_table(results));
    out.push_str(&recovery_table(results));
    out.push_str("\npublished (LLFree paper, a 128 GiB VM on 8 cores, 100 iterations):");
    for (who, pct) in PUBLISHED {
        let _ = write!(out, " {who} {pct} %;");
    }
    out.push_str(
        "\nfallbacks w/c/s: a whole free pageblock claimed / a smaller block whose pageblock was claimed / a smaller block used in another type's pageblock (mm_page_alloc_extfrag's kinds); mixed blocks: pageblocks holding a page of another migratetype (LLFree: huge frames holding both classes).\n",
    );
    out
}

/// The run whose end share is the median's (the lower middle one for an
/// even count).
fn median_run(a: &AllocatorRuns) -> Option<&FragRun> {
    let mut runs: Vec<&FragRun> = a.runs.iter().collect();
    runs.sort_by(|x, y| {
        let share = |r: &FragRun| r.series.last().map_or(0.0, |s| s.free_huge_of_all());
        share(x).total_cmp(&share(y))
    });
    runs.get(runs.len().saturating_sub(1) / 2).copied()
}

/// Wholly free huge frames (% of all) after the free and at quarters of
/// the iterations, medians over the trials.
fn series_table(results: &[AllocatorRuns]) -> String {
    use std::fmt::Write;
    let Some(first) = results.iter().flat_map(|a| a.runs.first()).next() else {
        return String::new();
    };
    let len = first.series.len();
    if len < 2 {
        return String::new();
    }
    let last = len - 1;
    let mut points = vec![0, last / 4, last / 2, 3 * last / 4, last];
    points.dedup();
    let mut out = String::from("\nfree huge frames, % of all, after iteration:\n");
    let _ = write!(out, "{:<22}", "allocator");
    for &p in &points {
        let iteration = first.series[p].iteration;
        let _ = write!(out, " {iteration:>8}");
    }
    out.push('\n');
    for a in results {
        let _ = write!(out, "{:<22}", a.allocator.to_string());
        for &p in &points {
            let at: Vec<f64> = a
                .runs
                .iter()
                .filter_map(|r| r.series.get(p).map(|s| s.free_huge_of_all() * 100.0))
                .collect();
            let cell = Interval::of_median(&at).map_or("-".into(), |i| format!("{:.2}", i.median));
            let _ = write!(out, " {cell:>8}");
        }
        out.push('\n');
    }
    out
}

/// A median and its interval, `-` without one.
fn cell(i: Option<&Interval>, digits: usize) -> String {
    i.map_or("-".into(), |i| {
        if i.lo == i.hi {
            format!("{:.digits$}", i.median)
        } else {
            format!(
                "{:.digits$} [{:.digits$}, {:.digits$}]",
                i.median, i.lo, i.hi
            )
        }
    })
}

/// The cost to recover huge frames: the measure for every allocator, the
/// compaction run where there is one, then the published figures.
fn recovery_table(results: &[AllocatorRuns]) -> String {
    let rows: Vec<(FragAllocator, RecoverySummary)> = results
        .iter()
        .filter_map(|a| Some((a.allocator, RecoverySummary::of(&a.recoveries())?)))
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut out = measure_table(&rows);
    out.push_str(&compaction_table(&rows));
    out.push_str(
        "frames to move: allocated frames in the least-occupied huge frames to empty K of them \
         (all: as many as the free memory makes), the least any compaction must copy; \
         frames moved: pgmigrate_success; free huge b/a: before the run / after it, \
         the huge frames taken given back.\n",
    );
    out
}

/// Frames to move, per allocator, beside the published figures.
fn measure_table(rows: &[(FragAllocator, RecoverySummary)]) -> String {
    use std::fmt::Write;
    let wanted = rows.first().map_or(0, |(_, r)| r.wanted);
    let mut out = format!(
        "\nrecovering {wanted} huge frames (order 9) from the end state, \
         median [interval] over the trials:\n"
    );
    let _ = writeln!(
        out,
        "{:<22} {:>20} {:>24} {:>22}",
        "allocator", "frames to move (K)", "frames to move (all)", "per GiB"
    );
    for (who, r) in rows {
        let _ = writeln!(
            out,
            "{:<22} {:>20} {:>24} {:>22}",
            who.to_string(),
            cell(r.frames_to_move.as_ref(), 0),
            cell(r.frames_to_move_all.as_ref(), 0),
            cell(r.frames_to_move_all_per_gib.as_ref(), 0),
        );
    }
    let _ = write!(
        out,
        "published (frames for compaction to move, {PUBLISHED_GIB} GiB):"
    );
    for (who, frames) in PUBLISHED_TO_MOVE {
        let _ = write!(out, " {who} {frames} ({} per GiB);", frames / PUBLISHED_GIB);
    }
    out.push('\n');
    out
}

/// The compaction runs, per allocator that has them.
fn compaction_table(rows: &[(FragAllocator, RecoverySummary)]) -> String {
    use std::fmt::Write;
    let mut out = String::from(
        "\ncompaction (order-9 allocations as a hugetlb pool grows, each through the \
         slow path's compaction loop: async, then sync-light):\n",
    );
    let _ = writeln!(
        out,
        "{:<22} {:>10} {:>18} {:>8} {:>22} {:>18} {:>14} {:>16}",
        "allocator",
        "recovered",
        "frames moved",
        "failed",
        "pfns scanned",
        "isolated",
        "free huge b/a",
        "ms"
    );
    for (who, r) in rows {
        let Some(c) = &r.compaction else {
            let why = match who {
                FragAllocator::Buddy(_) | FragAllocator::BuddyDefrag(_) => {
                    "no compaction before Linux 2.6.35"
                }
                FragAllocator::Llfree => "no compaction in pfnlab's LLFree",
                FragAllocator::HostKernel => "its compact_memory is in its own table",
            };
            let _ = writeln!(out, "{:<22} {why}", who.to_string());
            continue;
        };
        let before_after = format!(
            "{}/{}",
            cell(c.free_huge_before.as_ref(), 0),
            cell(c.free_huge_after.as_ref(), 0)
        );
        let _ = writeln!(
            out,
            "{:<22} {:>10} {:>18} {:>8} {:>22} {:>18} {before_after:>14} {:>16}",
            who.to_string(),
            cell(c.recovered.as_ref(), 0),
            cell(c.pgmigrate_success.as_ref(), 0),
            cell(c.pgmigrate_fail.as_ref(), 0),
            cell(c.pfns_scanned.as_ref(), 0),
            cell(c.compact_isolated.as_ref(), 0),
            cell(c.elapsed_ms.as_ref(), 1),
        );
    }
    out
}
