//! `hole-density`: the question of 2006 as one picture. How much does
//! `pfn_valid` cost per call, and an allocator alloc+free with the
//! `HOLES_IN_ZONE` check, as the fraction of holes grows?
//!
//! The layouts are generated: a span of [`SPAN_SECTIONS`] sections of the
//! `--layout`'s geometry, of which a fraction `1 - h` holds RAM, spread
//! evenly, for `h` in [`HOLE_FRACTIONS`]. The lookups go to pfns drawn
//! uniformly from the span, so a fraction `h` of them are holes. Every
//! model that can be built is measured, one curve each: the table walks
//! cost about the same for a hole as for a page; the fault probe pays a
//! caught fault per hole and stops paying off as `h` grows; userfaultfd's
//! zero page (with `--features uffd`) turns a hole into a plain load after
//! the first touch. The allocator's merges only ever look at buddies inside
//! one max-order block of managed memory, which no layout leaves holey, so
//! its curve shows the check's cost at each density, not faults.

use buddy::{AllocError, KernelHoleCheck, Options};
use serde::Serialize;
use sparsemem::{Layout, MemRange, Pfn, RangeKind};
use vmemmap::VmemmapOptions;

use super::{Ctx, Experiment, ExperimentId, cell};
use crate::error::RunError;
use crate::models::{Buildable, ModelKind, ModelVisitor, build_allocator, with_model_options};
use crate::report::Row;
use crate::spread::{Comparison, Interval, NOISE_MARK, ratio_cell};
use crate::timing::{Measurement, Plan};
use crate::workloads::{XorShift, count_valid, zone_pairs};

/// Sections in a generated layout's span.
pub const SPAN_SECTIONS: u64 = 64;

/// The hole fractions measured.
pub const HOLE_FRACTIONS: [f64; 6] = [0.0, 0.25, 0.5, 0.75, 0.9, 0.97];

/// A span of [`SPAN_SECTIONS`] sections of `geometry` with RAM in a
/// fraction `1 - holes` of them, spread evenly (at least one).
pub fn layout_with_holes(geometry: sparsemem::Geometry, holes: f64) -> Layout {
    let section = 1u64 << geometry.section_size_bits();
    let ram = ((SPAN_SECTIONS as f64 * (1.0 - holes)).round() as u64).clamp(1, SPAN_SECTIONS);
    let ranges = (0..ram)
        .map(|j| {
            let s = j * SPAN_SECTIONS / ram;
            MemRange::new(s * section, (s + 1) * section, RangeKind::Ram, 0)
        })
        .collect();
    Layout::new(geometry, ranges, format!("{:.0} % holes", holes * 100.0))
        .expect("a generated layout is valid")
}

/// One model at one density.
#[derive(Clone, Debug)]
pub struct DensityPoint {
    /// The fraction of holes in the span (and among the pfns looked up).
    pub holes: f64,
    /// `pfn_valid` per call on uniform pfns of the span.
    pub pfn_valid: Measurement,
    /// Zone-path order-0 alloc+free with the hole check.
    pub alloc_free: Measurement,
}

/// Every model's curve.
#[derive(Clone, Debug)]
pub struct DensityResults {
    /// `(model, points by density)`; models that could not be built are
    /// in `refused` instead.
    pub curves: Vec<(ModelKind, Vec<DensityPoint>)>,
    /// Models not built, with why.
    pub refused: Vec<(ModelKind, String)>,
}

struct Visitor {
    plan: Plan,
    holes: f64,
    slow_holes: bool,
    alloc_options: Options,
}

impl ModelVisitor for Visitor {
    type Output = DensityPoint;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<DensityPoint, AllocError> {
        let plan = self.plan;
        let span = SPAN_SECTIONS * layout.geometry().pages_per_section();
        let n = if self.slow_holes && self.holes > 0.0 {
            plan.iters(20_000, 500)
        } else {
            plan.iters(1 << 20, 4096)
        };
        let mut rng = XorShift(0x5eed);
        let pfns: Vec<Pfn> = (0..n).map(|_| Pfn::new(rng.next_u64() % span)).collect();
        let alloc = build_allocator::<M, KernelHoleCheck>(layout, options, self.alloc_options)?;
        let pfn_valid = plan.measure(|| {
            std::hint::black_box(count_valid(alloc.model(), &pfns));
            pfns.len() as u64
        });
        let pairs = plan.iters(200_000, 2_000);
        let node = layout.first_node();
        let alloc_free = plan.measure(|| {
            std::hint::black_box(zone_pairs(&alloc, node, pairs));
            pairs
        });
        Ok(DensityPoint {
            holes: self.holes,
            pfn_valid,
            alloc_free,
        })
    }
}

/// Measures every model at every density on `geometry`.
pub fn measure_hole_density(
    plan: Plan,
    geometry: sparsemem::Geometry,
    alloc_options: Options,
) -> DensityResults {
    let layouts: Vec<(f64, Layout)> = HOLE_FRACTIONS
        .iter()
        .map(|&h| (h, layout_with_holes(geometry, h)))
        .collect();
    let mut results = DensityResults {
        curves: Vec::new(),
        refused: Vec::new(),
    };
    'models: for &kind in ModelKind::ALL {
        let mut points = Vec::new();
        for (holes, layout) in &layouts {
            let visitor = Visitor {
                plan,
                holes: *holes,
                slow_holes: kind.faults_on_holes(),
                alloc_options,
            };
            match with_model_options(kind, layout, VmemmapOptions::default(), visitor) {
                Ok(p) => points.push(p),
                Err(e) => {
                    results.refused.push((kind, e.to_string()));
                    continue 'models;
                }
            }
        }
        results.curves.push((kind, points));
    }
    results
}

/// What a row of `bench hole-density` measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum DensityVariant {
    /// `pfn_valid` per call.
    #[serde(rename = "pfn_valid")]
    PfnValid,
    /// Zone-path alloc+free with the hole check.
    #[serde(rename = "alloc-free-holecheck")]
    AllocFree,
}

/// The density a row was measured at.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct DensityParams {
    /// The fraction of holes in the span.
    pub hole_fraction: f64,
}

/// A row's ratio to the same model with no holes (its median's interval,
/// for error bars, is every row's `ns_per_op_interval`).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct DensityExtra {
    /// This density over no holes, same model and variant (unpaired: the
    /// densities run one after the other).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_no_holes: Option<Interval>,
}

/// One row of `bench hole-density`'s report.
pub type DensityRow = Row<DensityVariant, DensityParams, DensityExtra>;

/// The measurement of `variant` at a point.
fn pick(p: &DensityPoint, variant: DensityVariant) -> &Measurement {
    match variant {
        DensityVariant::PfnValid => &p.pfn_valid,
        DensityVariant::AllocFree => &p.alloc_free,
    }
}

/// A point's `variant` over the same model's at no holes (`None` at no
/// holes itself).
fn over_no_holes(
    points: &[DensityPoint],
    p: &DensityPoint,
    variant: DensityVariant,
) -> Option<Interval> {
    let none = points.iter().find(|q| q.holes == 0.0 && p.holes != 0.0)?;
    Interval::between(pick(p, variant), pick(none, variant)).ok()
}

/// The JSON rows: per model and density, the lookup and the alloc+free.
pub fn rows(results: &DensityResults) -> Vec<DensityRow> {
    let mut rows = Vec::new();
    for (kind, points) in &results.curves {
        for p in points {
            let params = DensityParams {
                hole_fraction: p.holes,
            };
            for variant in [DensityVariant::PfnValid, DensityVariant::AllocFree] {
                let m = pick(p, variant);
                let extra = DensityExtra {
                    ratio_to_no_holes: over_no_holes(points, p, variant),
                };
                rows.push(Row::new(variant, *kind, params, m.clone(), extra));
            }
        }
    }
    rows
}

/// Two tables, models by density.
pub fn render(results: &DensityResults) -> String {
    let mut out = String::new();
    for (title, pick) in [
        (
            "pfn_valid per call (uniform pfns of the span)",
            (|p: &DensityPoint| &p.pfn_valid) as fn(&DensityPoint) -> &Measurement,
        ),
        (
            "zone-path alloc+free with the hole check",
            |p: &DensityPoint| &p.alloc_free,
        ),
    ] {
        out += &format!(
            "{title}: median ns ({}) by fraction of holes\n{:<21}",
            crate::timing::COUNTER_UNIT,
            "model"
        );
        for h in HOLE_FRACTIONS {
            out += &format!(" {:>14}", format!("{:.0} %", h * 100.0));
        }
        out += "\n";
        for (kind, points) in &results.curves {
            out += &format!("{:<21}", kind.name());
            for p in points {
                out += &format!(" {:>14}", cell(pick(p)));
            }
            out += "\n";
        }
        out += "\n";
    }
    out += &format!(
        "Densest over no holes ({:.0} % / 0 %), per model; {NOISE_MARK}:\n",
        HOLE_FRACTIONS[HOLE_FRACTIONS.len() - 1] * 100.0
    );
    for c in comparisons(results) {
        out += &format!("  {:<58} {}\n", c.what, ratio_cell(&c.interval));
    }
    for (kind, why) in &results.refused {
        out += &format!("{:<21} not built: {why}\n", kind.name());
    }
    out += &format!(
        "Layouts: {SPAN_SECTIONS} sections, RAM in an even spread of the others. The allocator's merges only \
         look at buddies inside one max-order block of managed memory, which no layout leaves holey, so the \
         hole check never finds a hole there.\n"
    );
    out
}

/// Per model, the densest layout over the one with no holes, for both
/// variants: the sweep's claim, with its interval.
pub fn comparisons(results: &DensityResults) -> Vec<Comparison> {
    let mut out = Vec::new();
    for (kind, points) in &results.curves {
        let Some(densest) = points.last() else {
            continue;
        };
        for (variant, name) in [
            (DensityVariant::PfnValid, "pfn_valid"),
            (DensityVariant::AllocFree, "alloc+free"),
        ] {
            if let Some(i) = over_no_holes(points, densest, variant) {
                let what = format!(
                    "{kind}: {name} at {:.0} % holes / 0 %",
                    densest.holes * 100.0
                );
                out.push(Comparison::from_interval(what, i));
            }
        }
    }
    out
}

/// The experiment `bench hole-density`.
pub struct HoleDensity;

impl Experiment for HoleDensity {
    const ID: ExperimentId = ExperimentId::HoleDensity;
    type Params = ();
    type Results = DensityResults;
    type Row = DensityRow;

    fn measure(ctx: &Ctx, _: &()) -> Result<DensityResults, RunError> {
        Ok(measure_hole_density(
            ctx.plan,
            *ctx.layout.geometry(),
            ctx.options(),
        ))
    }

    fn rows(_: &Ctx, results: &DensityResults) -> Vec<DensityRow> {
        rows(results)
    }

    fn render(_: &Ctx, results: &DensityResults) -> String {
        render(results)
    }

    fn comparisons(_: &Ctx, results: &DensityResults) -> Vec<Comparison> {
        comparisons(results)
    }

    fn layout_label(ctx: &Ctx, _: &DensityResults) -> String {
        format!("generated ({} geometry)", ctx.layout.geometry().name())
    }
}
