//! `flags`: the no-bitmap buddy and atomic page-flag operations (Dave
//! Hansen / Hiroyuki Kamezawa, 2004-2005). 1000 × (allocate 16 MiB of
//! order-0 pages, touch each page's flags, free them) with the 2.6.9 bitmap
//! buddy, the no-bitmap buddy with atomic flag operations, and with
//! non-atomic ones; single-threaded and on several threads.

use buddy::AllocError;
use buddy::{Config, Options, Variant};
use serde_json::json;
use sparsemem::Layout;
use vmemmap::VmemmapOptions;

use super::{Ctx, Outcome, cell};
use crate::CliError;
use crate::models::{Buildable, ModelKind, ModelVisitor, build_allocator, with_model};
use crate::report::Row;
use crate::timing::{Measurement, Plan, measure};
use crate::workloads::flags_iteration;

/// The three buddies the seed compared.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FlagsVariant {
    /// The 2.6.9 per-order bitmap buddy.
    Bitmap,
    /// The no-bitmap buddy with atomic flag operations.
    Atomic,
    /// The no-bitmap buddy with non-atomic flag operations under the lock.
    NonAtomic,
}

impl FlagsVariant {
    /// Report order.
    pub const ALL: [FlagsVariant; 3] = [
        FlagsVariant::Bitmap,
        FlagsVariant::Atomic,
        FlagsVariant::NonAtomic,
    ];

    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            FlagsVariant::Bitmap => "bitmap",
            FlagsVariant::Atomic => "atomic",
            FlagsVariant::NonAtomic => "nonatomic",
        }
    }

    /// The seed's whole-run seconds on SMP (2.6.9 reference, no-bitmap,
    /// no-bitmap non-atomic).
    pub fn seed_seconds(self) -> f64 {
        match self {
            FlagsVariant::Bitmap => 35.79,
            FlagsVariant::Atomic => 37.58,
            FlagsVariant::NonAtomic => 35.28,
        }
    }
}

/// One run of the flags experiment.
#[derive(Clone, Debug)]
pub struct FlagsRun {
    /// Which buddy.
    pub variant: FlagsVariant,
    /// Threads running the workload at once.
    pub threads: usize,
    /// Per page allocated, touched and freed.
    pub per_page: Measurement,
}

/// What the flags experiment measured.
#[derive(Clone, Debug)]
pub struct FlagsResults {
    /// Iterations of the workload.
    pub iterations: u64,
    /// Order-0 pages per iteration (16 MiB).
    pub pages: usize,
    /// Every variant on one thread and on the multi-threaded count.
    pub runs: Vec<FlagsRun>,
}

impl FlagsResults {
    /// The bitmap buddy's per-page median at `threads`, the baseline.
    fn bitmap_at(&self, threads: usize) -> Option<f64> {
        self.runs
            .iter()
            .find(|r| r.variant == FlagsVariant::Bitmap && r.threads == threads)
            .map(|r| r.per_page.ns_per_op.median)
    }

    /// Seconds the whole run would take at the measured per-page cost.
    fn run_seconds(&self, r: &FlagsRun) -> f64 {
        r.per_page.ns_per_op.median
            * (self.iterations * self.pages as u64 * r.threads as u64) as f64
            / 1e9
    }

    /// Per-page cost relative to the bitmap buddy at the same thread count.
    fn ratio_vs_bitmap(&self, r: &FlagsRun) -> f64 {
        let per_page = r.per_page.ns_per_op.median;
        per_page / self.bitmap_at(r.threads).unwrap_or(per_page)
    }

    /// The JSON rows.
    pub fn rows(&self, model: &str) -> Vec<Row> {
        self.runs
            .iter()
            .map(|r| {
                Row::new(
                    r.variant.name(),
                    model,
                    json!({"threads": r.threads, "iterations": self.iterations, "pages": self.pages}),
                    r.per_page.clone(),
                )
                .with("run_seconds", self.run_seconds(r))
                .with("ratio_vs_bitmap", self.ratio_vs_bitmap(r))
            })
            .collect()
    }

    /// The printed table, with the seed's figures.
    pub fn render(&self) -> String {
        let mut table = format!(
            "{} x (allocate {} order-0 pages = 16 MiB, touch flags, free); per page and whole run\n\n\
             {:<10} {:>7}  {:>18}  {:>10}  {:>13}  {:>12}  {:>16}\n",
            self.iterations,
            self.pages,
            "variant",
            "threads",
            "ns (cycles)/page",
            "run (s)",
            "per iter (ms)",
            "vs bitmap",
            "seed (SMP) s"
        );
        for r in &self.runs {
            let run_s = self.run_seconds(r);
            let seed = r.variant.seed_seconds();
            table += &format!(
                "{:<10} {:>7}  {:>18}  {:>10.3}  {:>13.3}  {:>11.3}x  {:>9.2} ({:.3}x)\n",
                r.variant.name(),
                r.threads,
                cell(&r.per_page),
                run_s,
                run_s * 1e3 / self.iterations as f64,
                self.ratio_vs_bitmap(r),
                seed,
                seed / FlagsVariant::Bitmap.seed_seconds()
            );
        }
        table += "\nSeed: 2.6.9 bitmap 35.79 s, no-bitmap 37.58 s, no-bitmap non-atomic 35.28 s on SMP; no difference on UP.\n";
        table += "Here the pages come through the per-CPU lists, so buddy flag operations happen in the batched refills and drains.\n";
        table
    }
}

/// Measures the flags experiment with model `kind` on `layout`:
/// `iterations` rounds of `pages` pages, on one thread and on `threads`.
pub fn measure_flags(
    kind: ModelKind,
    layout: &Layout,
    plan: Plan,
    iterations: u64,
    threads: usize,
    alloc_options: Options,
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
            alloc_options,
        },
    )
}

struct Visitor {
    plan: Plan,
    iterations: u64,
    pages: usize,
    threads: usize,
    alloc_options: Options,
}

fn one<M: Buildable, V: Variant>(
    v: &Visitor,
    layout: &Layout,
    options: VmemmapOptions,
    out: &mut Vec<FlagsRun>,
    variant: FlagsVariant,
) -> Result<(), AllocError> {
    let alloc = build_allocator::<M, V>(layout, options, v.alloc_options)?;
    let node = layout.first_node();
    drop(alloc.cpu_on(node)?);
    for threads in [1, v.threads] {
        let m = measure(v.plan.trials, || {
            std::thread::scope(|s| {
                for _ in 0..threads {
                    let alloc = &alloc;
                    s.spawn(move || {
                        let mut cpu = alloc.cpu_on(node).expect("checked above");
                        let mut held = Vec::with_capacity(v.pages);
                        for _ in 0..v.iterations {
                            std::hint::black_box(flags_iteration(&mut cpu, v.pages, &mut held));
                        }
                    });
                }
            });
            v.iterations * v.pages as u64 * threads as u64
        });
        out.push(FlagsRun {
            variant,
            threads,
            per_page: m,
        });
    }
    Ok(())
}

impl ModelVisitor for Visitor {
    type Output = FlagsResults;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<FlagsResults, AllocError> {
        let mut runs = Vec::new();
        one::<M, Config<false, true, false>>(
            &self,
            layout,
            options,
            &mut runs,
            FlagsVariant::Bitmap,
        )?;
        one::<M, Config<true, false, false>>(
            &self,
            layout,
            options,
            &mut runs,
            FlagsVariant::Atomic,
        )?;
        one::<M, Config<false, false, false>>(
            &self,
            layout,
            options,
            &mut runs,
            FlagsVariant::NonAtomic,
        )?;
        Ok(FlagsResults {
            iterations: self.iterations,
            pages: self.pages,
            runs,
        })
    }
}

pub(super) fn run(ctx: &Ctx) -> Result<Outcome, CliError> {
    let iterations = ctx.args.iterations.unwrap_or(ctx.plan.iters(1000, 5));
    let threads = ctx.args.threads.unwrap_or(2);
    let results = ctx.named(measure_flags(
        ctx.model,
        &ctx.layout,
        ctx.plan,
        iterations,
        threads,
        ctx.options(),
    ))?;
    Ok(Outcome {
        rows: results.rows(ctx.model.name()),
        table: results.render(),
        layout: ctx.layout.source().into(),
    })
}
