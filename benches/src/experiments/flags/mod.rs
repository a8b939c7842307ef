//! `flags`: the no-bitmap buddy and atomic page-flag operations (Dave
//! Hansen / Hiroyuki Kamezawa, 2004). The seed's program mapped 16 MiB,
//! stored to every page and unmapped it, 1000 times, on the 2.6.9 bitmap
//! buddy, the no-bitmap buddy with atomic flag operations and with
//! non-atomic ones; SMP and UP.
//!
//! Two workloads, each through the four buddies (the three SMP builds and
//! [`buddy::Up`]):
//! - **program**: the seed's program as its kernel served it
//!   ([`flags_iteration`](crate::workloads::flags_iteration)): a `__GFP_ZERO` order-0 page per fault, cleared
//!   on a real frame, `PG_referenced` set and cleared, freed through the
//!   `munmap` gather; on one thread and on several.
//! - **replay**: a recording of that program on this machine's kernel
//!   (`benches/data/seed-flags.trace.zst`, made with
//!   `examples/seed_flags.rs`) replayed through each buddy, frames cleared
//!   for the trace's `__GFP_ZERO` allocations.

mod measure;

pub use measure::{
    FlagsResults, FlagsRun, FlagsVariant, FlagsWorkload, SEED_PAGES, default_trace, measure_flags,
};

use std::path::PathBuf;

use serde::Serialize;

use super::{Ctx, Experiment, ExperimentId, cell};
use crate::error::RunError;
use crate::models::ModelKind;
use crate::report::Row;
use crate::spread::{Comparison, Interval, NOISE_MARK, ratio_cell};

impl FlagsResults {
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
                    ratio_vs_bitmap_interval: self.ratio_vs_bitmap_interval(r),
                    ratio_to_seed_interval: self
                        .ratio_vs_bitmap_interval(r)
                        .map(|i| i.scaled(1.0 / r.variant.seed_ratio())),
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
             {:<8} {:<10} {:>3}  {:>16}  {:>8}  {:>20}  {:>9}   {:>8}  {:>9}  {:>9}  {:>20}\n",
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
            let interval = self.ratio_vs_bitmap_interval(r);
            let cell_of = |i: Option<Interval>| i.map_or("1 (itself)".into(), |i| ratio_cell(&i));
            let seed_s = r
                .variant
                .seed_seconds()
                .map_or("UP: =".to_string(), |s| format!("{s:.2}"));
            table += &format!(
                "{:<8} {:<10} {:>3}  {:>16}  {:>8.3}  {:>20}  {:>+9.1}   {:>8}  {:>8.3}x  {:>+9.1}  {:>20}\n",
                r.workload.name(),
                r.variant.name(),
                r.threads,
                cell(&r.per_page),
                Self::run_seconds(r),
                cell_of(interval),
                self.delta_ns(r),
                seed_s,
                r.variant.seed_ratio(),
                r.variant.seed_delta_ns(),
                cell_of(interval.map(|i| i.scaled(1.0 / r.variant.seed_ratio()))),
            );
        }
        table += &format!("{NOISE_MARK}.\n");
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
    /// [`FlagsExtra::ratio_vs_bitmap`] with its interval (`null` for the
    /// bitmap buddy).
    pub ratio_vs_bitmap_interval: Option<Interval>,
    /// [`FlagsExtra::ratio_to_seed`] with its interval.
    pub ratio_to_seed_interval: Option<Interval>,
    /// Buddy-marking operations per page (`null` if not counted).
    pub marks_per_page: Option<f64>,
    /// ns per marking operation.
    pub ns_per_mark: Option<f64>,
    /// The difference from bitmap the marks alone predict.
    pub predicted_delta_ns_per_page: Option<f64>,
}

/// One row of `bench flags`' report.
pub type FlagsRow = Row<RunVariant, FlagsParams, FlagsExtra>;

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

    fn comparisons(_: &Ctx, results: &FlagsResults) -> Vec<Comparison> {
        results
            .runs
            .iter()
            .filter_map(|r| {
                let what = format!(
                    "{} / bitmap: {}, {} threads",
                    r.variant.name(),
                    r.workload.name(),
                    r.threads
                );
                Some(Comparison::from_interval(
                    what,
                    results.ratio_vs_bitmap_interval(r)?,
                ))
            })
            .collect()
    }
}
