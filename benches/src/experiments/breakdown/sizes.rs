//! `bench breakdown --page-size N` below 64 bytes: the memory model's part
//! of the hot path at another `struct page` size.
//!
//! The allocator runs at 64 bytes only today (`buddy::BuddyModel` pins
//! `Page64`), so at 32, 16 and 8 bytes no pair can be timed and no share
//! computed: the run says so in one line per model. What can be measured
//! at every size is the model's side — the same calls at the same pfns:
//! each step's path runs once over a counting model at 64 bytes
//! ([`Counted`](crate::counting::Counted)), and its sampled calls are
//! replayed on the model built at 64 bytes and at `N` bytes alike, both
//! monomorphised. A row is the model time per pair at `N` bytes, its ratio
//! to 64 bytes beside it (the two replays run apart: unpaired). The
//! allocator's own accesses at `N` bytes (at 16 and 8 bytes its links and
//! order move into a descriptor) are not in it.

use buddy::{AllocError, Options};
use serde::Serialize;
use sparsemem::{BuildError, Layout, PageSize};
use vmemmap::VmemmapOptions;

use super::{BreakdownVariant, OpsPerPair, PathKind, STEPS, Step, Which, model_cost};
use crate::counting::ModelOps;
use crate::error::RunError;
use crate::experiments::memdesc::sized::{BuildableAt, SizedVisitor, with_model_at};
use crate::experiments::{Ctx, Experiment, ExperimentId};
use crate::models::{Buildable, ModelKind, ModelVisitor, with_model_options};
use crate::report::Row;
use crate::spread::{Comparison, Interval, NOISE_MARK, ratio_cell};
use crate::timing::{Measurement, Plan};
use crate::units::fmt_ns;

/// One path of one step: the model time per pair at both sizes.
#[derive(Clone, Debug)]
pub struct SizedPath {
    /// Memory-model calls per pair (counted at 64 bytes).
    pub ops_per_pair: [f64; 6],
    /// Model time per pair at 64 bytes.
    pub at_64: Measurement,
    /// Model time per pair at the run's size.
    pub at_size: Measurement,
}

/// One step's two paths.
#[derive(Clone, Debug)]
pub struct SizedStep {
    /// The step.
    pub step: Step,
    /// Through the per-CPU lists.
    pub pcp: SizedPath,
    /// On the zone path.
    pub zone: SizedPath,
}

/// Model time per pair from each call's replayed trials: trial `t` is
/// the calls per pair times each operation's trial `t`.
fn per_pair(ops: &ModelOps, pairs: u64, costs: &[Option<Measurement>; 6]) -> Measurement {
    let trials = costs
        .iter()
        .flatten()
        .map(|m| m.ns_per_op.trials.len())
        .min()
        .unwrap_or(0);
    let ns = (0..trials)
        .map(|t| {
            ops.counts
                .iter()
                .zip(costs)
                .filter_map(|(&n, c)| {
                    c.as_ref()
                        .map(|m| n as f64 / pairs as f64 * m.ns_per_op.trials[t])
                })
                .sum()
        })
        .collect();
    Measurement::from_ns(ns)
}

/// The sampled calls replayed on a model of type `M`.
struct Replay<'a> {
    ops: &'a ModelOps,
    trials: usize,
}

impl SizedVisitor for Replay<'_> {
    type Output = Result<[Option<Measurement>; 6], BuildError>;
    fn visit<M: BuildableAt>(self, layout: &Layout, options: VmemmapOptions) -> Self::Output {
        Ok(self
            .ops
            .replay_ns(&M::build_at(layout, options)?, self.trials))
    }
}

/// Counts each step's path at 64 bytes, and prices its calls at 64 bytes
/// and at `size`.
struct Visitor {
    kind: ModelKind,
    size: PageSize,
    plan: Plan,
    era: buddy::Era,
}

impl Visitor {
    fn path<M: Buildable>(
        &self,
        layout: &Layout,
        options: VmemmapOptions,
        step: Step,
        which: Which,
    ) -> Result<SizedPath, AllocError> {
        let alloc_options = Options {
            era: self.era,
            mechanisms: step.mechanisms(),
            frames: step.zero(),
            ..Options::default()
        };
        let pairs = self.plan.iters(20_000, 2_000);
        let trials = self.plan.trials;
        let (ops, at_64) = model_cost::<M>(layout, options, alloc_options, which, pairs, trials)?;
        let replay = Replay { ops: &ops, trials };
        let at_size = with_model_at(self.kind, self.size, layout, options, replay)?;
        Ok(SizedPath {
            ops_per_pair: std::array::from_fn(|i| ops.counts[i] as f64 / pairs as f64),
            at_64: per_pair(&ops, pairs, &at_64),
            at_size: per_pair(&ops, pairs, &at_size),
        })
    }
}

impl ModelVisitor for Visitor {
    type Output = Vec<SizedStep>;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<Vec<SizedStep>, AllocError> {
        STEPS
            .iter()
            .map(|&step| {
                Ok(SizedStep {
                    step,
                    pcp: self.path::<M>(layout, options, step, Which::Pcp)?,
                    zone: self.path::<M>(layout, options, step, Which::Zone)?,
                })
            })
            .collect()
    }
}

/// `bench breakdown --page-size N` for `N` below 64.
pub struct BreakdownAt;

/// Every model's steps at the size, or why it was not built.
#[derive(Clone, Debug)]
pub struct SizedResults {
    /// The size.
    pub size: PageSize,
    /// In report order.
    pub models: Vec<(ModelKind, Result<Vec<SizedStep>, String>)>,
}

/// A row's parameters.
#[derive(Clone, Debug, Serialize)]
pub struct SizedParams {
    /// The era.
    pub era: &'static str,
    /// `struct page` bytes.
    pub page_size: u64,
}

/// A row's extra fields.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct SizedExtra {
    /// Calls per pair, counted at 64 bytes.
    pub model_ops_per_pair: OpsPerPair,
    /// The same calls' time per pair at 64 bytes.
    pub model_ns_per_pair_at_64: f64,
    /// This row's model time over 64 bytes' (unpaired).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_64_interval: Option<Interval>,
}

/// One row: the model time per pair at the run's size.
pub type SizedRow = Row<BreakdownVariant, SizedParams, SizedExtra>;

fn paths(s: &SizedStep) -> [(PathKind, &SizedPath); 2] {
    [(PathKind::Pcp, &s.pcp), (PathKind::Zone, &s.zone)]
}

impl Experiment for BreakdownAt {
    const ID: ExperimentId = ExperimentId::Breakdown;
    type Params = PageSize;
    type Results = SizedResults;
    type Row = SizedRow;

    fn measure(ctx: &Ctx, size: &PageSize) -> Result<SizedResults, RunError> {
        let models = ctx
            .models()
            .into_iter()
            .map(|kind| {
                let visitor = Visitor {
                    kind,
                    size: *size,
                    plan: ctx.plan,
                    era: ctx.era,
                };
                let r = with_model_options(kind, &ctx.layout, VmemmapOptions::default(), visitor);
                (kind, r.map_err(|e| e.to_string()))
            })
            .collect();
        Ok(SizedResults {
            size: *size,
            models,
        })
    }

    fn rows(ctx: &Ctx, r: &SizedResults) -> Vec<SizedRow> {
        let mut rows = Vec::new();
        for (kind, steps) in &r.models {
            for s in steps.iter().flatten() {
                for (path, p) in paths(s) {
                    let params = SizedParams {
                        era: ctx.era.name(),
                        page_size: r.size.bytes(),
                    };
                    let extra = SizedExtra {
                        model_ops_per_pair: OpsPerPair(p.ops_per_pair),
                        model_ns_per_pair_at_64: p.at_64.ns_per_op.median,
                        ratio_to_64_interval: Interval::between(&p.at_size, &p.at_64).ok(),
                    };
                    let variant = BreakdownVariant { path, step: s.step };
                    rows.push(Row::new(variant, *kind, params, p.at_size.clone(), extra));
                }
            }
        }
        rows
    }

    fn render(ctx: &Ctx, r: &SizedResults) -> String {
        let mut t = format!(
            "Memory-model time per order-0 pair at {} B struct page, era {}: each step's calls counted on the 64 B path and replayed on the model at both sizes\n",
            r.size, ctx.era
        );
        for (kind, steps) in &r.models {
            let steps = match steps {
                Ok(s) => s,
                Err(e) => {
                    t += &format!("\n{kind}: not built: {e}\n");
                    continue;
                }
            };
            t += &format!(
                "\n{kind}\nallocator at {} B: not built yet (no pair to time, no share; this run replays the 64 B path's model calls only)\n{:<29} {:>12} {:>12} {:>22}   {:>12} {:>12} {:>22}\n",
                r.size,
                "step",
                "pcp @64",
                "pcp @size",
                "vs 64 B",
                "zone @64",
                "zone @size",
                "vs 64 B"
            );
            for s in steps {
                t += &format!("{:<29}", s.step.label());
                for (_, p) in paths(s) {
                    let ratio = Interval::between(&p.at_size, &p.at_64)
                        .map_or("-".into(), |i| ratio_cell(&i));
                    t += &format!(
                        " {:>12} {:>12} {:>22}  ",
                        fmt_ns(p.at_64.ns_per_op.median),
                        fmt_ns(p.at_size.ns_per_op.median),
                        ratio
                    );
                }
                t += "\n";
            }
        }
        t + NOISE_MARK + "; the two sizes' replays run apart, so each ratio is unpaired.\n"
    }

    fn comparisons(_: &Ctx, r: &SizedResults) -> Vec<Comparison> {
        let mut out = Vec::new();
        for (kind, steps) in &r.models {
            for s in steps.iter().flatten() {
                for (path, p) in paths(s) {
                    let what = format!(
                        "{kind} {}: model time at {} B / 64 B",
                        BreakdownVariant { path, step: s.step },
                        r.size
                    );
                    out.extend(Comparison::of(what, &p.at_size, &p.at_64));
                }
            }
        }
        out
    }
}
