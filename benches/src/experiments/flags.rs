//! `flags`: the no-bitmap buddy and atomic page-flag operations (Dave
//! Hansen / Hiroyuki Kamezawa, 2004). The seed's program mapped 16 MiB,
//! stored to every page and unmapped it, 1000 times, on the 2.6.9 bitmap
//! buddy, the no-bitmap buddy with atomic flag operations and with
//! non-atomic ones; SMP and UP.
//!
//! Two workloads, each through the four buddies (the three SMP builds and
//! [`buddy::Up`]):
//! - **program**: the seed's program as its kernel served it
//!   ([`flags_iteration`]): a `__GFP_ZERO` order-0 page per fault, cleared
//!   on a real frame, `PG_referenced` set and cleared, freed through the
//!   `munmap` gather; on one thread and on several.
//! - **replay**: a recording of that program on this machine's kernel
//!   (`benches/data/seed-flags.trace.zst`, made with
//!   `examples/seed_flags.rs`) replayed through each buddy, frames cleared
//!   for the trace's `__GFP_ZERO` allocations.

use std::path::{Path, PathBuf};

use buddy::AllocError;
use buddy::{Allocator, Bitmap, Kernel, NoBitmapAtomic, Options, Up, Variant};
use serde::Serialize;
use sparsemem::{Layout, MemoryModel, NodeId};
use vmemmap::VmemmapOptions;

use super::{Ctx, Experiment, ExperimentId, cell};
use crate::error::RunError;
use crate::models::{Buildable, ModelKind, ModelVisitor, build_allocator, with_model};
use crate::report::Row;
use crate::threads::{Placement, on_threads};
use crate::timing::{Measurement, Plan, measure, measure_interleaved};
use crate::trace::format::TraceReader;
use crate::trace::replay::{ReplayOptions, replay_through};
use crate::workloads::{flags_iteration, mark_pairs};

/// The seed's pages per run: 1000 iterations of 16 MiB of 4 KiB pages.
pub const SEED_PAGES: f64 = 1000.0 * 4096.0;

/// The buddies the seed compared.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FlagsVariant {
    /// The 2.6.9 per-order bitmap buddy.
    Bitmap,
    /// The no-bitmap buddy with atomic flag operations.
    Atomic,
    /// The no-bitmap buddy with non-atomic flag operations under the lock.
    NonAtomic,
    /// The no-bitmap buddy built for one CPU: "atomic" operations without
    /// the `lock` prefix, `PG_referenced` included; one thread only.
    Up,
}

impl FlagsVariant {
    /// Report order.
    pub const ALL: [FlagsVariant; 4] = [
        FlagsVariant::Bitmap,
        FlagsVariant::Atomic,
        FlagsVariant::NonAtomic,
        FlagsVariant::Up,
    ];

    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            FlagsVariant::Bitmap => "bitmap",
            FlagsVariant::Atomic => "atomic",
            FlagsVariant::NonAtomic => "nonatomic",
            FlagsVariant::Up => "up",
        }
    }

    /// The seed's whole-run seconds on SMP (2.6.9 reference, no-bitmap,
    /// no-bitmap non-atomic). The seed gave no UP figures, only "no
    /// difference"; `None` for [`FlagsVariant::Up`].
    pub fn seed_seconds(self) -> Option<f64> {
        match self {
            FlagsVariant::Bitmap => Some(35.79),
            FlagsVariant::Atomic => Some(37.58),
            FlagsVariant::NonAtomic => Some(35.28),
            FlagsVariant::Up => None,
        }
    }

    /// The seed's cost relative to the bitmap buddy: its SMP run-time
    /// ratio, and 1 for UP ("no difference").
    pub fn seed_ratio(self) -> f64 {
        match (self.seed_seconds(), FlagsVariant::Bitmap.seed_seconds()) {
            (Some(s), Some(b)) => s / b,
            _ => 1.0,
        }
    }

    /// The seed's per-page difference from the bitmap buddy, in ns: the
    /// run-time difference over its 4.1 M pages (0 on UP).
    pub fn seed_delta_ns(self) -> f64 {
        match (self.seed_seconds(), FlagsVariant::Bitmap.seed_seconds()) {
            (Some(s), Some(b)) => (s - b) * 1e9 / SEED_PAGES,
            _ => 0.0,
        }
    }
}

/// The two workloads.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FlagsWorkload {
    /// The seed's program, as pfnlab's kernel path serves it.
    Program,
    /// The recording of the seed's program, replayed.
    Replay,
}

impl FlagsWorkload {
    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            FlagsWorkload::Program => "program",
            FlagsWorkload::Replay => "replay",
        }
    }
}

/// One run of the flags experiment.
#[derive(Clone, Debug)]
pub struct FlagsRun {
    /// Which workload.
    pub workload: FlagsWorkload,
    /// Which buddy.
    pub variant: FlagsVariant,
    /// Threads running the workload at once.
    pub threads: usize,
    /// Per page allocated, cleared, touched and freed (program), or per
    /// page allocated and freed by the replay (allocator calls alone).
    pub per_page: Measurement,
}

/// What the flags experiment measured.
#[derive(Clone, Debug)]
pub struct FlagsResults {
    /// Iterations of the program.
    pub iterations: u64,
    /// Order-0 pages per iteration (16 MiB).
    pub pages: usize,
    /// Every variant on each workload and thread count.
    pub runs: Vec<FlagsRun>,
    /// Why the replay did not run, when it did not.
    pub replay_skipped: Option<String>,
    /// Per variant: the buddy-marking operations (the ones the variant
    /// decides) per page of the program, counted over one iteration.
    pub marks_per_page: Vec<(FlagsVariant, f64)>,
    /// Per variant: one marking set and clear on a held page's flags
    /// word, in a loop (the operation's own cost, line in L1).
    pub mark_cost: Vec<(FlagsVariant, Measurement)>,
}

impl FlagsResults {
    /// The bitmap buddy's run on the same workload and thread count.
    fn bitmap_for(&self, r: &FlagsRun) -> Option<f64> {
        self.runs
            .iter()
            .find(|b| {
                b.variant == FlagsVariant::Bitmap
                    && b.workload == r.workload
                    && b.threads == r.threads
            })
            .map(|b| b.per_page.ns_per_op.median)
    }

    /// Seconds the seed's whole run (4.1 M pages per thread) would take at
    /// the measured per-page cost.
    pub fn run_seconds(r: &FlagsRun) -> f64 {
        r.per_page.ns_per_op.median * SEED_PAGES * r.threads as f64 / 1e9
    }

    /// Per-page cost relative to the bitmap buddy.
    pub fn ratio_vs_bitmap(&self, r: &FlagsRun) -> f64 {
        let per_page = r.per_page.ns_per_op.median;
        per_page / self.bitmap_for(r).unwrap_or(per_page)
    }

    /// Per-page difference from the bitmap buddy, in ns.
    pub fn delta_ns(&self, r: &FlagsRun) -> f64 {
        let per_page = r.per_page.ns_per_op.median;
        per_page - self.bitmap_for(r).unwrap_or(per_page)
    }

    /// The variant's marking operations per page and the cost of one (half
    /// a set + clear pair), if measured.
    fn marks(&self, v: FlagsVariant) -> Option<(f64, f64)> {
        let n = self.marks_per_page.iter().find(|(x, _)| *x == v)?.1;
        let c = self
            .mark_cost
            .iter()
            .find(|(x, _)| *x == v)?
            .1
            .ns_per_op
            .median
            / 2.0;
        Some((n, c))
    }

    /// The per-page difference from the bitmap buddy that the marking
    /// operations alone account for: marks per page times the cost of one,
    /// less the bitmap buddy's.
    pub fn predicted_delta_ns(&self, v: FlagsVariant) -> Option<f64> {
        let (n, c) = self.marks(v)?;
        let (nb, cb) = self.marks(FlagsVariant::Bitmap)?;
        Some(n * c - nb * cb)
    }

    /// The JSON rows: `seed` and `ratio_to_seed` (pfnlab's ratio to the
    /// bitmap buddy over the seed's) beside the results.
    pub fn rows(&self, model: ModelKind) -> Vec<FlagsRow> {
        self.runs
            .iter()
            .map(|r| {
                let ratio = self.ratio_vs_bitmap(r);
                let marks = self.marks(r.variant);
                let params = FlagsParams {
                    workload: r.workload,
                    threads: r.threads,
                    iterations: self.iterations,
                    pages: self.pages,
                };
                let extra = FlagsExtra {
                    run_seconds: Self::run_seconds(r),
                    ratio_vs_bitmap: ratio,
                    delta_ns_per_page: self.delta_ns(r),
                    seed: FlagsSeed {
                        seconds: r.variant.seed_seconds(),
                        ratio_vs_bitmap: r.variant.seed_ratio(),
                        delta_ns_per_page: r.variant.seed_delta_ns(),
                        smp: r.variant != FlagsVariant::Up,
                    },
                    ratio_to_seed: ratio / r.variant.seed_ratio(),
                    marks_per_page: marks.map(|(n, _)| n),
                    ns_per_mark: marks.map(|(_, c)| c),
                    predicted_delta_ns_per_page: self.predicted_delta_ns(r.variant),
                };
                let variant = RunVariant {
                    workload: r.workload,
                    variant: r.variant,
                };
                Row::new(variant, model, params, r.per_page.clone(), extra)
            })
            .collect()
    }

    /// The printed table, with the seed's figures.
    pub fn render(&self) -> String {
        let mut table = format!(
            "program: {} x (map 16 MiB = {} order-0 __GFP_ZERO pages on real frames, store to each, munmap);\n\
             replay: the recorded seed program through each buddy (allocator calls only). Per page; run = 4.1 M pages per thread.\n\n\
             {:<8} {:<10} {:>3}  {:>16}  {:>8}  {:>9}  {:>9}   {:>8}  {:>9}  {:>9}  {:>8}\n",
            self.iterations,
            self.pages,
            "workload",
            "variant",
            "thr",
            "ns (cycles)/page",
            "run (s)",
            "vs bitmap",
            "delta ns",
            "seed (s)",
            "seed vs b",
            "seed dns",
            "/seed"
        );
        for r in &self.runs {
            let ratio = self.ratio_vs_bitmap(r);
            let seed_s = r
                .variant
                .seed_seconds()
                .map_or("UP: =".to_string(), |s| format!("{s:.2}"));
            table += &format!(
                "{:<8} {:<10} {:>3}  {:>16}  {:>8.3}  {:>8.3}x  {:>+9.1}   {:>8}  {:>8.3}x  {:>+9.1}  {:>7.3}x\n",
                r.workload.name(),
                r.variant.name(),
                r.threads,
                cell(&r.per_page),
                Self::run_seconds(r),
                ratio,
                self.delta_ns(r),
                seed_s,
                r.variant.seed_ratio(),
                r.variant.seed_delta_ns(),
                ratio / r.variant.seed_ratio()
            );
        }
        table += "\nbuddy marking (the operations the variant decides): per page of the program, ns each, and the difference from bitmap they predict\n";
        for v in FlagsVariant::ALL {
            if let Some((n, c)) = self.marks(v) {
                table += &format!(
                    "  {:<10} {:>6.3} marks/page  x {:>6.2} ns  -> {:>+6.1} ns/page vs bitmap\n",
                    v.name(),
                    n,
                    c,
                    self.predicted_delta_ns(v).unwrap_or(0.0)
                );
            }
        }
        if let Some((n, _)) = self.marks(FlagsVariant::Atomic) {
            table += &format!(
                "  the seed's +437 ns/page at this many marks would be {:.0} ns per locked operation on its machine\n",
                FlagsVariant::Atomic.seed_delta_ns() / n.max(f64::MIN_POSITIVE)
            );
        }
        if let Some(why) = &self.replay_skipped {
            table += &format!("\nreplay not run: {why}\n");
        }
        table += "\nSeed (2.6.9, SMP): bitmap 35.79 s, no-bitmap atomic 37.58 s (+437 ns/page), non-atomic 35.28 s (-125 ns/page) for 4.1 M pages, \
                  about 8.3 us of system time per page; no difference on UP.\n";
        table += "Only the buddy marking in __free_pages_bulk, expand and __rmqueue follows the variant; per-CPU marks are plain, PG_referenced is atomic on SMP.\n";
        table
    }
}

/// A row's variant: the workload and the buddy (`program/atomic`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct RunVariant {
    /// The workload.
    pub workload: FlagsWorkload,
    /// The buddy.
    pub variant: FlagsVariant,
}

impl Serialize for RunVariant {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!(
            "{}/{}",
            self.workload.name(),
            self.variant.name()
        ))
    }
}

/// A row's parameters.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct FlagsParams {
    /// The workload.
    pub workload: FlagsWorkload,
    /// Threads running it at once.
    pub threads: usize,
    /// Iterations of the program.
    pub iterations: u64,
    /// Pages per iteration.
    pub pages: usize,
}

/// The seed's figures for a row's buddy.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct FlagsSeed {
    /// Its whole-run seconds on SMP (`null` for UP).
    pub seconds: Option<f64>,
    /// Its run time over the bitmap buddy's.
    pub ratio_vs_bitmap: f64,
    /// Its per-page difference from the bitmap buddy.
    pub delta_ns_per_page: f64,
    /// Whether the seed measured it on SMP.
    pub smp: bool,
}

/// A row's extra fields.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct FlagsExtra {
    /// Seconds the seed's whole run would take at this cost.
    pub run_seconds: f64,
    /// Per-page cost over the bitmap buddy's.
    pub ratio_vs_bitmap: f64,
    /// Per-page difference from the bitmap buddy, ns.
    pub delta_ns_per_page: f64,
    /// The seed's figures.
    pub seed: FlagsSeed,
    /// Our ratio over the seed's.
    pub ratio_to_seed: f64,
    /// Buddy-marking operations per page (`null` if not counted).
    pub marks_per_page: Option<f64>,
    /// ns per marking operation.
    pub ns_per_mark: Option<f64>,
    /// The difference from bitmap the marks alone predict.
    pub predicted_delta_ns_per_page: Option<f64>,
}

/// One row of `bench flags`' report.
pub type FlagsRow = Row<RunVariant, FlagsParams, FlagsExtra>;

/// The recording of the seed program in the source tree.
pub fn default_trace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/seed-flags.trace.zst")
}

/// Measures the flags experiment with model `kind` on `layout`:
/// `iterations` rounds of the program on one thread and on `threads`, and
/// `trace` (when given) replayed on one. `alloc_options` gets real frames.
pub fn measure_flags(
    kind: ModelKind,
    layout: &Layout,
    plan: Plan,
    iterations: u64,
    threads: usize,
    alloc_options: Options,
    trace: Option<&Path>,
) -> Result<FlagsResults, AllocError> {
    let pages = (16usize << 20) >> layout.geometry().page_shift();
    with_model(
        kind,
        layout,
        Visitor {
            plan,
            iterations,
            pages,
            threads: threads.max(1),
            alloc_options: Options {
                frames: true,
                ..alloc_options
            },
            trace,
        },
    )
}

struct Visitor<'t> {
    plan: Plan,
    iterations: u64,
    pages: usize,
    threads: usize,
    alloc_options: Options,
    trace: Option<&'t Path>,
}

/// One buddy build as the experiment drives it, whatever its variant
/// type: the trials of all four interleave through this (one call per
/// trial; the loops inside are the variant's own, monomorphised).
trait Buddy: Sync {
    /// The program on `threads` threads, `iterations` rounds each;
    /// returns the pages allocated.
    fn program(&self, node: NodeId, pages: usize, iterations: u64, threads: usize) -> u64;
    /// One replay of `trace`: ns per page allocated.
    fn replay(&self, layout: &Layout, trace: &Path, era: buddy::Era) -> Result<f64, String>;
}

impl<M: MemoryModel, V: Variant> Buddy for Allocator<M, V>
where
    Allocator<M, V>: Sync,
{
    fn program(&self, node: NodeId, pages: usize, iterations: u64, threads: usize) -> u64 {
        program(self, node, pages, iterations, threads)
    }

    fn replay(&self, layout: &Layout, trace: &Path, era: buddy::Era) -> Result<f64, String> {
        replay_once(self, layout, trace, era)
    }
}

/// One replay of `trace` through `alloc`: the allocator calls' time over
/// the pages allocated. Each replay starts from the state the previous
/// left: the pages the recording ends holding (about 1,500 in the seed
/// program's) stay allocated.
fn replay_once<M: MemoryModel, V: Variant>(
    alloc: &Allocator<M, V>,
    layout: &Layout,
    trace: &Path,
    era: buddy::Era,
) -> Result<f64, String> {
    let open = || TraceReader::open(trace);
    let options = ReplayOptions {
        era,
        ..ReplayOptions::default()
    };
    let t = replay_through(alloc, layout, &open, options).map_err(|e| e.to_string())?;
    Ok((t.alloc_ns + t.free_ns) / t.events.allocs.max(1) as f64)
}

/// The program on `threads` threads of `alloc`, `iterations` rounds each;
/// returns the pages it allocated.
fn program<M: MemoryModel, V: Variant>(
    alloc: &Allocator<M, V>,
    node: NodeId,
    pages: usize,
    iterations: u64,
    threads: usize,
) -> u64 {
    on_threads(
        threads,
        Placement::Free,
        |_| {
            let cpu = alloc.cpu_on(node).expect("checked when built");
            (cpu, Vec::with_capacity(pages))
        },
        |_, (mut cpu, mut held)| {
            for _ in 0..iterations {
                std::hint::black_box(flags_iteration(&mut cpu, pages, &mut held));
            }
        },
    );
    iterations * pages as u64 * threads as u64
}

impl Visitor<'_> {
    /// The program's allocator for one variant, with its marking counted
    /// over one iteration and the cost of one marking measured.
    fn program_allocator<M: Buildable, V: Variant>(
        &self,
        layout: &Layout,
        options: VmemmapOptions,
        results: &mut FlagsResults,
        variant: FlagsVariant,
    ) -> Result<Allocator<M, V>, AllocError> {
        let alloc = build_allocator::<M, V>(layout, options, self.alloc_options)?;
        let mut cpu = alloc.cpu_on(layout.first_node())?;
        // The marking operations per page are a set per block put on a
        // free list (drained or split off) and a clear per block taken off
        // one (refilled or merged away).
        let mut held = Vec::with_capacity(self.pages);
        flags_iteration(&mut cpu, self.pages, &mut held);
        let before = alloc.stats_total();
        let pages = flags_iteration(&mut cpu, self.pages, &mut held);
        let after = alloc.stats_total();
        let marks = (after.pcp_refill_blocks - before.pcp_refill_blocks)
            + (after.splits - before.splits)
            + (after.merges - before.merges)
            + (after.pcp_drain_blocks - before.pcp_drain_blocks);
        results
            .marks_per_page
            .push((variant, marks as f64 / pages.max(1) as f64));
        let pfn = cpu.alloc(buddy::Gfp::HIGHUSER_MOVABLE)?;
        if let Some(page) = alloc.model().pfn_to_page(pfn) {
            let rounds = self.plan.iters(1 << 22, 1 << 16);
            let m = measure(self.plan.trials, || {
                mark_pairs::<V>(page, rounds);
                rounds
            });
            results.mark_cost.push((variant, m));
        }
        cpu.free(pfn)?;
        drop(cpu);
        Ok(alloc)
    }

    /// The program through the four buddies, trials interleaved.
    fn programs<M: Buildable>(
        &self,
        layout: &Layout,
        options: VmemmapOptions,
        results: &mut FlagsResults,
    ) -> Result<(), AllocError> {
        let bitmap =
            self.program_allocator::<M, Bitmap>(layout, options, results, FlagsVariant::Bitmap)?;
        let atomic = self.program_allocator::<M, NoBitmapAtomic>(
            layout,
            options,
            results,
            FlagsVariant::Atomic,
        )?;
        let nonatomic =
            self.program_allocator::<M, Kernel>(layout, options, results, FlagsVariant::NonAtomic)?;
        let up = self.program_allocator::<M, Up>(layout, options, results, FlagsVariant::Up)?;
        let node = layout.first_node();
        let (pages, iterations, n) = (self.pages, self.iterations, self.threads);
        let buddies: [(FlagsVariant, &dyn Buddy); 4] = [
            (FlagsVariant::Bitmap, &bitmap),
            (FlagsVariant::Atomic, &atomic),
            (FlagsVariant::NonAtomic, &nonatomic),
            (FlagsVariant::Up, &up),
        ];
        // Each SMP buddy on one thread and on `n`; a UP kernel has one CPU.
        let mut runs: Vec<(FlagsVariant, usize, &dyn Buddy)> = buddies
            .into_iter()
            .flat_map(|(v, b)| {
                let counts = if v == FlagsVariant::Up {
                    vec![1]
                } else {
                    vec![1, n]
                };
                counts.into_iter().map(move |t| (v, t, b))
            })
            .collect();
        let measured = measure_interleaved(self.plan.trials, &mut runs, |(_, threads, b)| {
            b.program(node, pages, iterations, *threads)
        });
        for ((variant, threads, _), per_page) in runs.iter().zip(measured) {
            results.runs.push(FlagsRun {
                workload: FlagsWorkload::Program,
                variant: *variant,
                threads: *threads,
                per_page,
            });
        }
        Ok(())
    }

    /// The recording through the four buddies (no frames: the allocator
    /// calls alone), trials interleaved.
    fn replays<M: Buildable>(
        &self,
        layout: &Layout,
        options: VmemmapOptions,
        trace: &Path,
        results: &mut FlagsResults,
    ) -> Result<(), AllocError> {
        let plain = Options {
            frames: false,
            ..self.alloc_options
        };
        let era = plain.era;
        let bitmap = build_allocator::<M, Bitmap>(layout, options, plain)?;
        let atomic = build_allocator::<M, NoBitmapAtomic>(layout, options, plain)?;
        let nonatomic = build_allocator::<M, Kernel>(layout, options, plain)?;
        let up = build_allocator::<M, Up>(layout, options, plain)?;
        let runs: [(FlagsVariant, &dyn Buddy); 4] = [
            (FlagsVariant::Bitmap, &bitmap),
            (FlagsVariant::Atomic, &atomic),
            (FlagsVariant::NonAtomic, &nonatomic),
            (FlagsVariant::Up, &up),
        ];
        let mut ns = vec![Vec::new(); runs.len()];
        // One warm-up replay of each, then the trials in turn.
        for trial in 0..=self.plan.trials.max(1) {
            for (i, (_, buddy)) in runs.iter().enumerate() {
                match buddy.replay(layout, trace, era) {
                    Ok(v) if trial > 0 => ns[i].push(v),
                    Ok(_) => {}
                    Err(e) => {
                        results.replay_skipped = Some(format!("{}: {e}", trace.display()));
                        return Ok(());
                    }
                }
            }
        }
        for ((variant, _), ns) in runs.iter().zip(ns) {
            results.runs.push(FlagsRun {
                workload: FlagsWorkload::Replay,
                variant: *variant,
                threads: 1,
                per_page: Measurement::from_ns(ns),
            });
        }
        Ok(())
    }
}

impl ModelVisitor for Visitor<'_> {
    type Output = FlagsResults;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<FlagsResults, AllocError> {
        let mut results = FlagsResults {
            iterations: self.iterations,
            pages: self.pages,
            runs: Vec::new(),
            marks_per_page: Vec::new(),
            mark_cost: Vec::new(),
            replay_skipped: None,
        };
        self.programs::<M>(layout, options, &mut results)?;
        match self.trace {
            Some(trace) => self.replays::<M>(layout, options, trace, &mut results)?,
            None => results.replay_skipped = Some("no recording given".into()),
        }
        Ok(results)
    }
}

/// `bench flags`' parameters.
#[derive(Clone, Debug, Default)]
pub struct FlagsOptions {
    /// Threads of the multi-threaded program run (default 2).
    pub threads: Option<usize>,
    /// Rounds of the program (default 1000, scaled by the plan).
    pub iterations: Option<u64>,
    /// The recording to replay (default [`default_trace`]).
    pub trace: Option<PathBuf>,
}

/// The experiment `bench flags`.
pub struct Flags;

impl Experiment for Flags {
    const ID: ExperimentId = ExperimentId::Flags;
    type Params = FlagsOptions;
    type Results = FlagsResults;
    type Row = FlagsRow;

    fn measure(ctx: &Ctx, p: &FlagsOptions) -> Result<FlagsResults, RunError> {
        let iterations = p.iterations.unwrap_or(ctx.plan.iters(1000, 5));
        let wanted = p.trace.clone().unwrap_or_else(default_trace);
        let trace = wanted.exists().then_some(wanted.as_path());
        let mut results = ctx.named(measure_flags(
            ctx.model,
            &ctx.layout,
            ctx.plan,
            iterations,
            p.threads.unwrap_or(2),
            ctx.options(),
            trace,
        ))?;
        if trace.is_none() {
            results.replay_skipped = Some(format!(
                "no recording at {} (give one with --trace)",
                wanted.display()
            ));
        }
        Ok(results)
    }

    fn rows(ctx: &Ctx, results: &FlagsResults) -> Vec<FlagsRow> {
        results.rows(ctx.model)
    }

    fn render(_: &Ctx, results: &FlagsResults) -> String {
        results.render()
    }
}
