//! `breakdown`: where the time of the allocator's hot path goes. An order-0
//! GFP_KERNEL alloc+free through the per-CPU lists and one on the zone path
//! (a split of a `MAX_PAGE_ORDER` block and the merges back), with the
//! era's mechanisms added one at a time, per model: bookkeeping, the
//! pageblock lookups, watermarks with the GFP flags and counters, page
//! preparation and checks, and last `__GFP_ZERO` on real frames. Each row also carries
//! the share spent in memory-model operations.
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

use buddy::{AllocError, Allocator, Gfp, Kernel, Mechanisms, Options};
use serde_json::{Map, Value, json};
use sparsemem::Layout;
use vmemmap::VmemmapOptions;

use super::legacy::{Outcome, legacy_experiment};
use super::{Ctx, Knobs, cell};
use crate::counting::{Counted, ModelOp, ModelOps};
use crate::error::RunError;
use crate::models::{Buildable, ModelKind, ModelVisitor, with_model_options};
use crate::report::{Row, fmt_ns};
use crate::timing::{Measurement, Plan, measure};
use crate::workloads::{pcp_pairs_gfp, zone_pairs_gfp};

/// The steps, each adding mechanisms to the one before; the last also
/// backs the pages with real frames and asks for `__GFP_ZERO`.
pub const STEPS: [(&str, Mechanisms, bool); 5] = [
    ("bookkeeping", Mechanisms::BOOKKEEPING, false),
    (
        "+ pageblock lookups",
        Mechanisms {
            pageblock: true,
            watermarks: false,
            page_prep: false,
        },
        false,
    ),
    (
        "+ watermarks, GFP, counters",
        Mechanisms {
            pageblock: true,
            watermarks: true,
            page_prep: false,
        },
        false,
    ),
    ("+ page prep and checks", Mechanisms::ALL, false),
    ("+ __GFP_ZERO on real frames", Mechanisms::ALL, true),
];

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
    /// The step's name.
    pub step: &'static str,
    /// Its mechanisms.
    pub mechanisms: Mechanisms,
    /// Real frames and `__GFP_ZERO`.
    pub zero: bool,
    /// Through the per-CPU lists.
    pub pcp: PathCost,
    /// On the zone path.
    pub zone: PathCost,
}

/// Which path to time.
#[derive(Clone, Copy)]
enum Which {
    Pcp,
    Zone,
}

/// Runs `n` pairs of `which` on `alloc` (a fresh per-CPU handle for the
/// pcp path, warmed by one pair).
fn pairs<M: sparsemem::MemoryModel>(
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
    fn path<M: Buildable>(
        &self,
        layout: &Layout,
        options: VmemmapOptions,
        alloc_options: Options,
        which: Which,
    ) -> Result<PathCost, AllocError> {
        let plan = self.plan;
        let n = match which {
            Which::Pcp => plan.iters(2_000_000, 20_000),
            Which::Zone => plan.iters(200_000, 2_000),
        };
        let alloc = Allocator::<M, Kernel>::new(M::build(layout, options)?, layout, alloc_options)?;
        let gfp = gfp(alloc_options.frames);
        let pair = measure(plan.trials, || {
            std::hint::black_box(pairs(&alloc, which, n, gfp));
            n
        });
        drop(alloc);
        let counted = n.min(20_000);
        let (ops, costs) =
            model_cost::<M>(layout, options, alloc_options, which, counted, plan.trials)?;
        let (model_ns, model_cycles) = ops.model_ns_per(counted, &costs);
        Ok(PathCost {
            pair,
            ops_per_pair: std::array::from_fn(|i| ops.counts[i] as f64 / counted as f64),
            model_ns,
            model_cycles,
        })
    }
}

impl ModelVisitor for Visitor {
    type Output = Vec<StepResult>;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<Vec<StepResult>, AllocError> {
        STEPS
            .iter()
            .map(|&(step, mechanisms, zero)| {
                let alloc_options = Options {
                    era: self.era,
                    mechanisms,
                    frames: zero,
                    ..Options::default()
                };
                Ok(StepResult {
                    step,
                    mechanisms,
                    zero,
                    pcp: self.path::<M>(layout, options, alloc_options, Which::Pcp)?,
                    zone: self.path::<M>(layout, options, alloc_options, Which::Zone)?,
                })
            })
            .collect()
    }
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

fn path_json(p: &PathCost) -> Map<String, Value> {
    let ops: Map<String, Value> = ModelOp::ALL
        .iter()
        .zip(&p.ops_per_pair)
        .map(|(op, &n)| (op.name().to_string(), json!(n)))
        .collect();
    let mut m = Map::new();
    m.insert("model_ops_per_pair".into(), Value::Object(ops));
    m.insert("model_ns_per_pair".into(), json!(p.model_ns));
    m.insert("model_cycles_per_pair".into(), json!(p.model_cycles));
    m.insert("model_share".into(), json!(p.share()));
    m
}

legacy_experiment!(
    /// Where the hot path's time goes, mechanism by mechanism.
    Breakdown = Breakdown,
    run
);

fn run(ctx: &Ctx, _: &Knobs) -> Result<Outcome, RunError> {
    let kinds: Vec<ModelKind> = if ctx.model_chosen {
        vec![ctx.model]
    } else {
        ModelKind::ALL.to_vec()
    };
    let mut rows = Vec::new();
    let mut table = format!(
        "Order-0 {GFP} alloc+free pairs, era {}; the last step adds real frames and __GFP_ZERO; model share = memory-model calls per pair x their cost replayed alone (see docs/experiments.md)\n",
        ctx.era
    );
    for kind in kinds {
        let steps = match measure_model(kind, &ctx.layout, ctx.era, ctx.plan) {
            Ok(s) => s,
            Err(e) => {
                table += &format!("\n{kind}: not built: {e}\n");
                continue;
            }
        };
        table += &format!(
            "\n{kind}\nstep                          pcp alloc+free   model share   zone alloc+free   model share\n"
        );
        for s in &steps {
            table += &format!(
                "{:<29} {:>14}   {:>11}   {:>15}   {:>11}\n",
                s.step,
                cell(&s.pcp.pair),
                format!("{:.0}%", 100.0 * s.pcp.share()),
                cell(&s.zone.pair),
                format!("{:.0}%", 100.0 * s.zone.share()),
            );
            for (which, p) in [("pcp", &s.pcp), ("zone", &s.zone)] {
                let mut row = Row::new(
                    format!("{which}-{}", s.step.trim_start_matches("+ ")),
                    kind.name(),
                    json!({"era": ctx.era.name(), "gfp": gfp(s.zero).to_string(), "frames": s.zero, "mechanisms": {
                        "pageblock": s.mechanisms.pageblock,
                        "watermarks": s.mechanisms.watermarks,
                        "page_prep": s.mechanisms.page_prep,
                    }}),
                    p.pair.clone(),
                );
                row.extra.extend(path_json(p));
                rows.push(row);
            }
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
    }
    Ok(Outcome {
        rows,
        table,
        layout: ctx.layout.source().to_string(),
    })
}
