//! `breakdown`: where the time of the allocator's hot path goes. An order-0
//! GFP_KERNEL alloc+free through the per-CPU lists and one on the zone path
//! (a split of a `MAX_PAGE_ORDER` block and the merges back), with the
//! era's mechanisms added one at a time, per model: bookkeeping, the
//! pageblock lookups, watermarks with the GFP flags and counters, page
//! preparation and checks, the kernel's per-call entry (5.13 on), and
//! last `__GFP_ZERO` on real frames. Each row also carries the share spent
//! in memory-model operations. In an era with `alloc_pages_nolock` (6.15
//! on), the full path's step also prices an `alloc_pages_nolock` +
//! `free_pages_nolock` pair beside an ordinary per-CPU pair, their trials
//! interleaved.
//!
//! The share is measured by counting, not by subtraction: the same path
//! runs once over [`Counted`], which records how many `pfn_valid`,
//! `pfn_to_page`, `page_to_pfn` and pageblock calls a pair makes and at
//! which pfns; each operation is then timed alone, replaying those pfns in
//! the path's order (so as cache-warm as on the path). The share is
//! calls × replayed cost over the pair's time. It cannot see overlap —
//! an out-of-order core may hide part of a lookup behind other work — so
//! it is the model's cost if nothing overlapped it, an upper estimate.
//! Replacing the model's lookups by precomputed answers would need a
//! second allocator whose descriptors live elsewhere, which changes the
//! path's cache behaviour; counting leaves the path as it is.
//!
//! At another `struct page` size (`--page-size`), [`sizes`] prices the
//! same counted calls on the model built at that size, and [`pairs`] times
//! the allocator's own pair there beside 64 bytes where it runs.

mod nolock;
pub mod pairs;
pub mod sizes;

pub use nolock::NolockCost;
use nolock::nolock_pairs;

use buddy::{AllocError, Allocator, Gfp, Kernel, Mechanisms, Options};
use std::fmt;

use serde::Serialize;
use sparsemem::Layout;
use vmemmap::VmemmapOptions;

use super::{Ctx, Experiment, ExperimentId, cell};
use crate::counting::{Counted, ModelOp, ModelOps};
use crate::error::RunError;
use crate::models::{Buildable, ModelKind, ModelVisitor, with_model_options};
use crate::report::Row;
use crate::spread::{Comparison, Interval, NOISE_MARK, ratio_cell};
use crate::timing::{Measurement, Plan};
use crate::units::fmt_ns;
use crate::workloads::{pcp_pairs_gfp, zone_pairs_gfp};

/// A step of the breakdown, each adding mechanisms to the one before;
/// the last also backs the pages with real frames and asks for
/// `__GFP_ZERO`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Step {
    /// The free lists alone.
    Bookkeeping,
    /// + the pageblock migratetype lookups.
    Pageblock,
    /// + watermarks, the GFP flags and the counters.
    Watermarks,
    /// + page preparation and the checks.
    PagePrep,
    /// With the kernel's per-call entry: `current_gfp_context`, the
    /// preferred zone, `zone_statistics`, the entry functions as calls.
    Entry,
    /// + `__GFP_ZERO` on real frames.
    Zero,
}

/// The steps, in order.
pub const STEPS: [Step; 6] = [
    Step::Bookkeeping,
    Step::Pageblock,
    Step::Watermarks,
    Step::PagePrep,
    Step::Entry,
    Step::Zero,
];

impl Step {
    /// The step's name in the rows (`pageblock lookups`).
    pub fn name(self) -> &'static str {
        match self {
            Step::Bookkeeping => "bookkeeping",
            Step::Pageblock => "pageblock lookups",
            Step::Watermarks => "watermarks, GFP, counters",
            Step::PagePrep => "page prep and checks",
            Step::Entry => "per-call entry",
            Step::Zero => "__GFP_ZERO on real frames",
        }
    }

    /// The step's line in the table: what it adds (`+ pageblock lookups`).
    pub fn label(self) -> String {
        match self {
            Step::Bookkeeping => self.name().into(),
            _ => format!("+ {}", self.name()),
        }
    }

    /// The mechanisms the step runs.
    pub fn mechanisms(self) -> Mechanisms {
        let upto = |pageblock, watermarks, page_prep| Mechanisms {
            pageblock,
            watermarks,
            page_prep,
            entry: false,
        };
        match self {
            Step::Bookkeeping => Mechanisms::BOOKKEEPING,
            Step::Pageblock => upto(true, false, false),
            Step::Watermarks => upto(true, true, false),
            Step::PagePrep => upto(true, true, true),
            Step::Entry | Step::Zero => Mechanisms::ALL,
        }
    }

    /// Whether the step backs pages with real frames and asks for
    /// `__GFP_ZERO`.
    pub fn zero(self) -> bool {
        self == Step::Zero
    }
}

/// The request the rows make (with `__GFP_ZERO` in the last step).
const GFP: Gfp = Gfp::KERNEL;

/// The request of a step.
fn gfp(zero: bool) -> Gfp {
    if zero { GFP | Gfp::ZERO } else { GFP }
}

/// One path's measurement with its memory-model share.
#[derive(Clone, Debug)]
pub struct PathCost {
    /// One alloc+free pair.
    pub pair: Measurement,
    /// Memory-model calls per pair, per [`ModelOp`].
    pub ops_per_pair: [f64; 6],
    /// ns and cycles per pair spent in them (calls × replayed cost).
    pub model_ns: f64,
    /// As `model_ns`, in TSC cycles.
    pub model_cycles: f64,
}

impl PathCost {
    /// The memory model's share of the pair, 0 to 1 (capped: the estimate
    /// ignores overlap).
    pub fn share(&self) -> f64 {
        (self.model_ns / self.pair.ns_per_op.median).clamp(0.0, 1.0)
    }
}

/// One step's results for one model.
#[derive(Clone, Debug)]
pub struct StepResult {
    /// The step.
    pub step: Step,
    /// Through the per-CPU lists.
    pub pcp: PathCost,
    /// On the zone path.
    pub zone: PathCost,
    /// The per-call entry's step in an era with `alloc_pages_nolock`:
    /// its pair priced beside an ordinary per-CPU pair.
    pub nolock: Option<NolockCost>,
}

/// Which path to time.
#[derive(Clone, Copy)]
enum Which {
    Pcp,
    Zone,
    /// `alloc_pages_nolock` + `free_pages_nolock` through the per-CPU
    /// lists.
    Nolock,
}

/// Runs `n` pairs of `which` on `alloc` (a fresh per-CPU handle for the
/// pcp path, warmed by one pair).
fn pairs<M: buddy::BuddyModel>(
    alloc: &Allocator<M, Kernel>,
    which: Which,
    n: u64,
    gfp: Gfp,
) -> u64 {
    let node = alloc.nodes()[0].id;
    match which {
        Which::Pcp => {
            let mut cpu = alloc.cpu_on(node).expect("a node with memory");
            pcp_pairs_gfp(&mut cpu, n, gfp)
        }
        Which::Zone => zone_pairs_gfp(alloc, node, n, gfp),
        Which::Nolock => {
            let mut cpu = alloc.cpu_on(node).expect("a node with memory");
            nolock_pairs(&mut cpu, n)
        }
    }
}

/// Counts the model calls of `n` pairs of `which` (after a warm-up) and
/// replays them to price them.
fn model_cost<M: Buildable>(
    layout: &Layout,
    options: VmemmapOptions,
    alloc_options: Options,
    which: Which,
    n: u64,
    trials: usize,
) -> Result<(ModelOps, [Option<Measurement>; 6]), AllocError> {
    let model = Counted::new(M::build(layout, options)?);
    let alloc = Allocator::<Counted<M>, Kernel>::new(model, layout, alloc_options)?;
    let node = alloc.nodes()[0].id;
    let gfp = gfp(alloc_options.frames);
    let run = |n| match which {
        Which::Pcp => {
            let mut cpu = alloc.cpu_on(node).expect("a node with memory");
            // Warm the per-CPU list, then count only the pairs.
            pcp_pairs_gfp(&mut cpu, 1, gfp);
            alloc.model().reset();
            pcp_pairs_gfp(&mut cpu, n, gfp);
            alloc.model().ops()
        }
        Which::Zone => {
            zone_pairs_gfp(&alloc, node, 1, gfp);
            alloc.model().reset();
            zone_pairs_gfp(&alloc, node, n, gfp);
            alloc.model().ops()
        }
        Which::Nolock => {
            let mut cpu = alloc.cpu_on(node).expect("a node with memory");
            nolock_pairs(&mut cpu, 1);
            alloc.model().reset();
            nolock_pairs(&mut cpu, n);
            alloc.model().ops()
        }
    };
    let ops = run(n);
    let costs = ops.replay_ns(alloc.model().inner(), trials);
    Ok((ops, costs))
}

struct Visitor {
    plan: Plan,
    era: buddy::Era,
}

impl Visitor {
    /// The allocator options of `step`.
    fn step_options(&self, step: Step) -> Options {
        Options {
            era: self.era,
            mechanisms: step.mechanisms(),
            frames: step.zero(),
            ..Options::default()
        }
    }

    /// Every step on one path, their trials interleaved (so that a step
    /// pairs with the one before it), then each step's model calls counted
    /// and priced.
    fn path<M: Buildable>(
        &self,
        layout: &Layout,
        options: VmemmapOptions,
        which: Which,
    ) -> Result<Vec<PathCost>, AllocError> {
        let plan = self.plan;
        let n = iters(plan, which);
        let mut allocs = STEPS
            .iter()
            .map(|&step| {
                let o = self.step_options(step);
                let alloc = Allocator::<M, Kernel>::new(M::build(layout, options)?, layout, o)?;
                Ok((alloc, gfp(o.frames)))
            })
            .collect::<Result<Vec<_>, AllocError>>()?;
        let timed = plan.measure_interleaved(&mut allocs, |(alloc, gfp)| {
            std::hint::black_box(pairs(alloc, which, n, *gfp));
            n
        });
        drop(allocs);
        STEPS
            .iter()
            .zip(timed)
            .map(|(&step, pair)| {
                let o = self.step_options(step);
                priced::<M>(layout, options, o, which, n, pair, plan.trials)
            })
            .collect()
    }
}

/// Pairs per trial on `which` path.
fn iters(plan: Plan, which: Which) -> u64 {
    match which {
        Which::Pcp | Which::Nolock => plan.iters(2_000_000, 20_000),
        Which::Zone => plan.iters(200_000, 2_000),
    }
}

/// `pair` (of `n` pairs per trial) with the model calls of up to 20,000
/// pairs counted and priced.
fn priced<M: Buildable>(
    layout: &Layout,
    options: VmemmapOptions,
    alloc_options: Options,
    which: Which,
    n: u64,
    pair: Measurement,
    trials: usize,
) -> Result<PathCost, AllocError> {
    let counted = n.min(20_000);
    let (ops, costs) = model_cost::<M>(layout, options, alloc_options, which, counted, trials)?;
    let (model_ns, model_cycles) = ops.model_ns_per(counted, &costs);
    Ok(PathCost {
        pair,
        ops_per_pair: std::array::from_fn(|i| ops.counts[i] as f64 / counted as f64),
        model_ns,
        model_cycles,
    })
}

impl ModelVisitor for Visitor {
    type Output = Vec<StepResult>;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<Vec<StepResult>, AllocError> {
        let pcp = self.path::<M>(layout, options, Which::Pcp)?;
        let zone = self.path::<M>(layout, options, Which::Zone)?;
        let mut nolock = if self.era.has_alloc_nolock() {
            Some(self.nolock::<M>(layout, options)?)
        } else {
            None
        };
        Ok(STEPS
            .iter()
            .zip(pcp.into_iter().zip(zone))
            .map(|(&step, (pcp, zone))| StepResult {
                step,
                pcp,
                zone,
                nolock: if step == Step::Entry {
                    nolock.take()
                } else {
                    None
                },
            })
            .collect())
    }
}

/// Each step's pair over the step before's on one path (`None` for the
/// first): what the step's mechanisms add, as a paired ratio.
fn over_previous(steps: &[StepResult], path: PathKind) -> Vec<Option<Interval>> {
    fn of(s: &StepResult, path: PathKind) -> &Measurement {
        match path {
            PathKind::Zone => &s.zone.pair,
            PathKind::Pcp | PathKind::Nolock => &s.pcp.pair,
        }
    }
    std::iter::once(None)
        .chain(
            steps
                .windows(2)
                .map(|w| Interval::between(of(&w[1], path), of(&w[0], path)).ok()),
        )
        .take(steps.len())
        .collect()
}

/// Every step for model `kind` on `layout` in `era`.
pub fn measure_model(
    kind: ModelKind,
    layout: &Layout,
    era: buddy::Era,
    plan: Plan,
) -> Result<Vec<StepResult>, AllocError> {
    with_model_options(
        kind,
        layout,
        VmemmapOptions::default(),
        Visitor { plan, era },
    )
}

/// Memory-model time per zone-path order-0 alloc+free pair of `gfp` (the
/// default comparison's allocator column): `n` pairs counted over
/// [`Counted`], each call priced by replaying it alone. Returns ns and TSC
/// cycles per pair.
pub fn zone_model_time<M: Buildable>(
    layout: &Layout,
    options: VmemmapOptions,
    alloc_options: Options,
    n: u64,
    trials: usize,
) -> Result<(f64, f64), AllocError> {
    let (ops, costs) = model_cost::<M>(layout, options, alloc_options, Which::Zone, n, trials)?;
    Ok(ops.model_ns_per(n, &costs))
}

fn ops_text(ops: &[f64; 6]) -> String {
    let parts: Vec<String> = ModelOp::ALL
        .iter()
        .zip(ops)
        .filter(|&(_, &n)| n > 0.005)
        .map(|(op, n)| format!("{n:.2} {}", op.name()))
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

/// Every model's steps, or why it was not built.
#[derive(Clone, Debug)]
pub struct BreakdownResults {
    /// In report order.
    pub models: Vec<(ModelKind, Result<Vec<StepResult>, String>)>,
}

/// Which path a row timed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PathKind {
    /// Through the per-CPU lists.
    Pcp,
    /// On the zone path.
    Zone,
    /// `alloc_pages_nolock` + `free_pages_nolock`, through the per-CPU
    /// lists (the per-call entry's step only).
    Nolock,
}

/// A row's variant: the path and the step (`pcp-pageblock lookups`;
/// `nolock` alone, which has one step).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct BreakdownVariant {
    /// The path.
    pub path: PathKind,
    /// The step.
    pub step: Step,
}

impl fmt::Display for BreakdownVariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.path {
            PathKind::Pcp => write!(f, "pcp-{}", self.step.name()),
            PathKind::Zone => write!(f, "zone-{}", self.step.name()),
            PathKind::Nolock => f.write_str("nolock"),
        }
    }
}

impl Serialize for BreakdownVariant {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The mechanisms a row's step runs.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct MechanismParams {
    /// Pageblock migratetype lookups.
    pub pageblock: bool,
    /// Watermarks, GFP flags and counters.
    pub watermarks: bool,
    /// Page preparation and checks.
    pub page_prep: bool,
    /// The kernel's per-call entry (in the eras that model it).
    pub entry: bool,
}

/// A row's parameters.
#[derive(Clone, Debug, Serialize)]
pub struct BreakdownParams {
    /// The era.
    pub era: &'static str,
    /// The request.
    pub gfp: String,
    /// Real frames.
    pub frames: bool,
    /// The step's mechanisms.
    pub mechanisms: MechanismParams,
}

/// Memory-model calls per pair, by kernel function name.
#[derive(Clone, Copy, Debug)]
pub struct OpsPerPair(pub [f64; 6]);

impl Serialize for OpsPerPair {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(ModelOp::ALL.iter().map(|op| op.name()).zip(self.0))
    }
}

/// A row's memory-model share.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct ModelShare {
    /// Calls per pair.
    pub model_ops_per_pair: OpsPerPair,
    /// ns per pair spent in them.
    pub model_ns_per_pair: f64,
    /// The same in TSC cycles.
    pub model_cycles_per_pair: f64,
    /// The share of the pair, 0 to 1.
    pub model_share: f64,
}

/// One row of `bench breakdown`'s report.
pub type BreakdownRow = Row<BreakdownVariant, BreakdownParams, ModelShare>;

/// The experiment `bench breakdown`.
pub struct Breakdown;

impl Experiment for Breakdown {
    const ID: ExperimentId = ExperimentId::Breakdown;
    type Params = ();
    type Results = BreakdownResults;
    type Row = BreakdownRow;

    fn measure(ctx: &Ctx, _: &()) -> Result<BreakdownResults, RunError> {
        let models = ctx
            .models()
            .into_iter()
            .map(|kind| {
                let steps = measure_model(kind, &ctx.layout, ctx.era, ctx.plan);
                (kind, steps.map_err(|e| e.to_string()))
            })
            .collect();
        Ok(BreakdownResults { models })
    }

    fn rows(ctx: &Ctx, results: &BreakdownResults) -> Vec<BreakdownRow> {
        let mut rows = Vec::new();
        for (kind, steps) in &results.models {
            for s in steps.iter().flatten() {
                let m = s.step.mechanisms();
                let params = BreakdownParams {
                    era: ctx.era.name(),
                    gfp: gfp(s.step.zero()).to_string(),
                    frames: s.step.zero(),
                    mechanisms: MechanismParams {
                        pageblock: m.pageblock,
                        watermarks: m.watermarks,
                        page_prep: m.page_prep,
                        entry: m.entry && ctx.era.models_entry(),
                    },
                };
                let nolock = s.nolock.as_ref().map(|n| (PathKind::Nolock, &n.nolock));
                let paths = [(PathKind::Pcp, &s.pcp), (PathKind::Zone, &s.zone)];
                for (path, p) in paths.into_iter().chain(nolock) {
                    let share = ModelShare {
                        model_ops_per_pair: OpsPerPair(p.ops_per_pair),
                        model_ns_per_pair: p.model_ns,
                        model_cycles_per_pair: p.model_cycles,
                        model_share: p.share(),
                    };
                    let variant = BreakdownVariant { path, step: s.step };
                    rows.push(Row::new(
                        variant,
                        *kind,
                        params.clone(),
                        p.pair.clone(),
                        share,
                    ));
                }
            }
        }
        rows
    }

    fn render(ctx: &Ctx, results: &BreakdownResults) -> String {
        let mut table = format!(
            "Order-0 {GFP} alloc+free pairs, era {}; the last step adds real frames and __GFP_ZERO; model share = memory-model calls per pair x their cost replayed alone (see docs/experiments.md)\n",
            ctx.era
        );
        for (kind, steps) in &results.models {
            match steps {
                Ok(steps) => table += &model_table(*kind, steps),
                Err(e) => table += &format!("\n{kind}: not built: {e}\n"),
            }
        }
        table
    }

    fn comparisons(_: &Ctx, results: &BreakdownResults) -> Vec<Comparison> {
        let mut out = Vec::new();
        for (kind, steps) in &results.models {
            let Ok(steps) = steps else { continue };
            for (path, name) in [(PathKind::Pcp, "pcp"), (PathKind::Zone, "zone")] {
                for (s, i) in steps.iter().zip(over_previous(steps, path)) {
                    if let Some(i) = i {
                        let what = format!("{kind} {name}: {} / step before", s.step.label());
                        out.push(Comparison::from_interval(what, i));
                    }
                }
            }
            for ratio in steps.iter().filter_map(|s| s.nolock.as_ref()?.ratio()) {
                let what = format!("{kind} nolock pair / pcp pair");
                out.push(Comparison::from_interval(what, ratio));
            }
        }
        out
    }
}

/// One model's steps, and where its full path's model time goes.
fn model_table(kind: ModelKind, steps: &[StepResult]) -> String {
    let mut table = format!(
        "\n{kind}\nstep                          pcp alloc+free   model share   vs step before        zone alloc+free   model share   vs step before\n"
    );
    let (pcp_over, zone_over) = (
        over_previous(steps, PathKind::Pcp),
        over_previous(steps, PathKind::Zone),
    );
    let over = |i: &Option<Interval>| i.as_ref().map_or("-".into(), ratio_cell);
    for (i, s) in steps.iter().enumerate() {
        table += &format!(
            "{:<29} {:>14}   {:>11}   {:>20}   {:>15}   {:>11}   {:>20}\n",
            s.step.label(),
            cell(&s.pcp.pair),
            format!("{:.0}%", 100.0 * s.pcp.share()),
            over(&pcp_over[i]),
            cell(&s.zone.pair),
            format!("{:.0}%", 100.0 * s.zone.share()),
            over(&zone_over[i]),
        );
    }
    table +=
        &format!("{NOISE_MARK}; the steps' trials are interleaved, so each ratio is paired.\n");
    if let Some(n) = steps.iter().find_map(|s| s.nolock.as_ref()) {
        table += &format!(
            "alloc_pages_nolock + free_pages_nolock, per pair: {} (model share {:.0}%), the ordinary pcp pair in the same trials {}: {}\n",
            cell(&n.nolock.pair),
            100.0 * n.nolock.share(),
            cell(&n.pcp),
            n.ratio().as_ref().map_or("-".into(), ratio_cell),
        );
    }
    if let Some(last) = steps.last() {
        table += &format!(
            "full path, per pcp pair: {}; model time {} ns ({:.0} cycles)\nfull path, per zone pair: {}; model time {} ns ({:.0} cycles)\n",
            ops_text(&last.pcp.ops_per_pair),
            fmt_ns(last.pcp.model_ns),
            last.pcp.model_cycles,
            ops_text(&last.zone.ops_per_pair),
            fmt_ns(last.zone.model_ns),
            last.zone.model_cycles,
        );
    }
    table
}
