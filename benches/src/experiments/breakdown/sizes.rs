//! `bench breakdown --page-size N` below 64 bytes: the hot path at another
//! `struct page` size, beside 64 bytes.
//!
//! Two measurements per model:
//! - every step's full order-0 pair on both paths at `N` and at 64 bytes,
//!   interleaved ([`pairs`]), with the paired per-trial ratio and its
//!   interval;
//! - at every size, the memory model's side: each step's path runs once
//!   over a counting model at 64 bytes ([`Counted`](crate::counting::Counted)),
//!   and its sampled calls are replayed on the model built at 64 bytes and
//!   at `N` bytes alike, both monomorphised (the two replays run apart:
//!   unpaired).
//!
//! The model's share at `N` is the replayed model time at `N` over the
//! pair at `N`, as the 64-byte breakdown's share is at 64. The calls are
//! the 64-byte path's: the allocator makes the same memory-model calls at
//! every size (its descriptor accesses at 16 bytes go through the page's
//! memdesc word, not through the model: one generic path, only the
//! layout's `BuddyPage` accessors differ), so the counts carry over; what
//! the replay cannot see is the allocator's own extra work at `N`, which
//! is in the pair and not in the share.
//!
//! [`pairs`]: super::pairs

use buddy::{AllocError, Options};
use serde::Serialize;
use sparsemem::{BuildError, Layout, PageSize};
use vmemmap::VmemmapOptions;

use super::pairs::{PairAt, StepPairs, measure_pairs};
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

/// One model at the size: the replayed model calls, and the allocator's
/// pairs.
#[derive(Clone, Debug)]
pub struct ModelAt {
    /// Each step's model time at both sizes.
    pub steps: Vec<SizedStep>,
    /// Each step's pairs at both sizes.
    pub pairs: Vec<StepPairs>,
}

/// Every model's steps at the size, or why it was not built.
#[derive(Clone, Debug)]
pub struct SizedResults {
    /// The size.
    pub size: PageSize,
    /// In report order.
    pub models: Vec<(ModelKind, Result<ModelAt, String>)>,
}

/// A row's parameters.
#[derive(Clone, Debug, Serialize)]
pub struct SizedParams {
    /// The era.
    pub era: &'static str,
    /// `struct page` bytes.
    pub page_size: u64,
}

/// What a row times.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Timed {
    /// The 64-byte path's model calls, replayed at the size.
    ModelCalls,
    /// The allocator's full pair at the size.
    Pair,
}

/// A row's variant: the path, the step and what was timed
/// (`pcp-bookkeeping` for the model calls, `pcp-bookkeeping-pair` for the
/// pair).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SizedVariant {
    /// The path and step.
    pub of: BreakdownVariant,
    /// What was timed.
    pub timed: Timed,
}

impl std::fmt::Display for SizedVariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.timed {
            Timed::ModelCalls => write!(f, "{}", self.of),
            Timed::Pair => write!(f, "{}-pair", self.of),
        }
    }
}

impl Serialize for SizedVariant {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A pair row's extra fields: the pair at 64 bytes, the paired ratio, and
/// the model's share at both sizes.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct PairExtra {
    /// The same step's pair at 64 bytes, median ns.
    pub pair_ns_per_op_at_64: f64,
    /// This row's pair over 64 bytes' (paired: one interleaved set).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pair_ratio_to_64_interval: Option<Interval>,
    /// The replayed model time per pair at the size.
    pub model_ns_per_pair: f64,
    /// That over this row's pair, 0 to 1 (capped: overlap is not seen).
    pub model_share: f64,
    /// The same share at 64 bytes.
    pub model_share_at_64: f64,
}

/// A row's extra fields, by what it timed.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(untagged)]
pub enum SizedExtra {
    /// A model-calls row.
    ModelCalls(ModelCallsExtra),
    /// A pair row.
    Pair(PairExtra),
}

/// A model-calls row's extra fields.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct ModelCallsExtra {
    /// Calls per pair, counted at 64 bytes.
    pub model_ops_per_pair: OpsPerPair,
    /// The same calls' time per pair at 64 bytes.
    pub model_ns_per_pair_at_64: f64,
    /// This row's model time over 64 bytes' (unpaired).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_64_interval: Option<Interval>,
}

/// One row: the model time per pair, or the pair, at the run's size.
pub type SizedRow = Row<SizedVariant, SizedParams, SizedExtra>;

fn paths(s: &SizedStep) -> [(PathKind, &SizedPath); 2] {
    [(PathKind::Pcp, &s.pcp), (PathKind::Zone, &s.zone)]
}

fn pair_paths(p: &StepPairs) -> [(PathKind, &PairAt); 2] {
    [(PathKind::Pcp, &p.pcp), (PathKind::Zone, &p.zone)]
}

/// `model` time over `pair`, 0 to 1 (as the 64-byte breakdown's share).
fn share(model: &Measurement, pair: &Measurement) -> f64 {
    (model.ns_per_op.median / pair.ns_per_op.median).clamp(0.0, 1.0)
}

/// A pair row's extra fields: the pair and its step's model time.
fn pair_extra(pair: &PairAt, model: &SizedPath) -> PairExtra {
    PairExtra {
        pair_ns_per_op_at_64: pair.at_64.ns_per_op.median,
        pair_ratio_to_64_interval: Interval::between(&pair.at_size, &pair.at_64).ok(),
        model_ns_per_pair: model.at_size.ns_per_op.median,
        model_share: share(&model.at_size, &pair.at_size),
        model_share_at_64: share(&model.at_64, &pair.at_64),
    }
}

/// One model at `size`: the replayed calls, then the pairs.
fn measure_model(ctx: &Ctx, kind: ModelKind, size: PageSize) -> Result<ModelAt, String> {
    let visitor = Visitor {
        kind,
        size,
        plan: ctx.plan,
        era: ctx.era,
    };
    let steps = with_model_options(kind, &ctx.layout, VmemmapOptions::default(), visitor)
        .map_err(|e| e.to_string())?;
    let pairs =
        measure_pairs(kind, size, &ctx.layout, ctx.era, ctx.plan).map_err(|e| e.to_string())?;
    Ok(ModelAt { steps, pairs })
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
            .map(|kind| (kind, measure_model(ctx, kind, *size)))
            .collect();
        Ok(SizedResults {
            size: *size,
            models,
        })
    }

    fn rows(ctx: &Ctx, r: &SizedResults) -> Vec<SizedRow> {
        let params = SizedParams {
            era: ctx.era.name(),
            page_size: r.size.bytes(),
        };
        let mut rows = Vec::new();
        for (kind, at) in &r.models {
            let Ok(at) = at else { continue };
            for s in &at.steps {
                for (path, p) in paths(s) {
                    let extra = ModelCallsExtra {
                        model_ops_per_pair: OpsPerPair(p.ops_per_pair),
                        model_ns_per_pair_at_64: p.at_64.ns_per_op.median,
                        ratio_to_64_interval: Interval::between(&p.at_size, &p.at_64).ok(),
                    };
                    let variant = SizedVariant {
                        of: BreakdownVariant { path, step: s.step },
                        timed: Timed::ModelCalls,
                    };
                    let extra = SizedExtra::ModelCalls(extra);
                    rows.push(Row::new(
                        variant,
                        *kind,
                        params.clone(),
                        p.at_size.clone(),
                        extra,
                    ));
                }
            }
            for (pairs, s) in at.pairs.iter().zip(&at.steps) {
                for ((path, pair), (_, model)) in pair_paths(pairs).into_iter().zip(paths(s)) {
                    let variant = SizedVariant {
                        of: BreakdownVariant {
                            path,
                            step: pairs.step,
                        },
                        timed: Timed::Pair,
                    };
                    let extra = SizedExtra::Pair(pair_extra(pair, model));
                    let m = pair.at_size.clone();
                    rows.push(Row::new(variant, *kind, params.clone(), m, extra));
                }
            }
        }
        rows
    }

    fn render(ctx: &Ctx, r: &SizedResults) -> String {
        let mut t = format!(
            "Order-0 {} alloc+free pairs at {} B struct page beside 64 B, era {}: the allocator's pair where it runs at {} B (both sizes interleaved, paired), and each step's memory-model calls counted on the 64 B path and replayed on the model at both sizes\n",
            super::GFP,
            r.size,
            ctx.era,
            r.size
        );
        for (kind, at) in &r.models {
            match at {
                Ok(at) => t += &model_text(*kind, r.size, at),
                Err(e) => t += &format!("\n{kind}: not built: {e}\n"),
            }
        }
        t
    }

    fn comparisons(_: &Ctx, r: &SizedResults) -> Vec<Comparison> {
        let mut out = Vec::new();
        for (kind, at) in &r.models {
            let Ok(at) = at else { continue };
            for s in &at.steps {
                for (path, p) in paths(s) {
                    let what = format!(
                        "{kind} {}: model time at {} B / 64 B",
                        BreakdownVariant { path, step: s.step },
                        r.size
                    );
                    out.extend(Comparison::of(what, &p.at_size, &p.at_64));
                }
            }
            for pairs in &at.pairs {
                for (path, p) in pair_paths(pairs) {
                    let what = format!(
                        "{kind} {}: pair at {} B / 64 B",
                        BreakdownVariant {
                            path,
                            step: pairs.step
                        },
                        r.size
                    );
                    out.extend(Comparison::of(what, &p.at_size, &p.at_64));
                }
            }
        }
        out
    }
}

/// One model's tables: the pairs, then the replayed model calls.
fn model_text(kind: ModelKind, size: PageSize, at: &ModelAt) -> String {
    format!("\n{kind}\n") + &pairs_table(size, &at.pairs, &at.steps) + &calls_table(&at.steps)
}

/// The pairs at both sizes with the paired ratio and the model's share.
fn pairs_table(size: PageSize, pairs: &[StepPairs], steps: &[SizedStep]) -> String {
    let mut t = format!(
        "{:<29} {:>12} {:>12} {:>22} {:>13}   {:>12} {:>12} {:>22} {:>13}\n",
        "pair",
        "pcp @64",
        format!("pcp @{size}"),
        format!("{size} B / 64 B"),
        "share 64/N",
        "zone @64",
        format!("zone @{size}"),
        format!("{size} B / 64 B"),
        "share 64/N"
    );
    for (p, s) in pairs.iter().zip(steps) {
        t += &format!("{:<29}", p.step.label());
        for ((_, pair), (_, model)) in pair_paths(p).into_iter().zip(paths(s)) {
            let ratio = Interval::between(&pair.at_size, &pair.at_64)
                .map_or("-".into(), |i| ratio_cell(&i));
            let e = pair_extra(pair, model);
            let shares = format!(
                "{:.0}%/{:.0}%",
                100.0 * e.model_share_at_64,
                100.0 * e.model_share
            );
            t += &format!(
                " {:>12} {:>12} {:>22} {:>13}  ",
                fmt_ns(e.pair_ns_per_op_at_64),
                fmt_ns(pair.at_size.ns_per_op.median),
                ratio,
                shares
            );
        }
        t += "\n";
    }
    t + NOISE_MARK + "; both sizes' pairs are interleaved, so each ratio is paired.\n"
}

/// Each step's model calls replayed at both sizes.
fn calls_table(steps: &[SizedStep]) -> String {
    let mut t = format!(
        "{:<29} {:>12} {:>12} {:>22}   {:>12} {:>12} {:>22}\n",
        "model calls", "pcp @64", "pcp @size", "vs 64 B", "zone @64", "zone @size", "vs 64 B"
    );
    for s in steps {
        t += &format!("{:<29}", s.step.label());
        for (_, p) in paths(s) {
            let ratio =
                Interval::between(&p.at_size, &p.at_64).map_or("-".into(), |i| ratio_cell(&i));
            t += &format!(
                " {:>12} {:>12} {:>22}  ",
                fmt_ns(p.at_64.ns_per_op.median),
                fmt_ns(p.at_size.ns_per_op.median),
                ratio
            );
        }
        t += "\n";
    }
    t + NOISE_MARK + "; the two sizes' replays run apart, so each ratio is unpaired.\n"
}
