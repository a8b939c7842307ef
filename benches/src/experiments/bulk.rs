//! `bulk`: the bulk page allocator (Mel Gorman, 2021). Single alloc+free
//! through the per-CPU list as the baseline, then the list and array bulk
//! interfaces at 1, 2, 3, 4, 8, 16, 32, 64, 128 pages, per page, like
//! Jesper Brouer's `page_bench04_bulk`.

use buddy::AllocError;
use buddy::{Kernel, Options};
use serde::Serialize;
use sparsemem::Layout;
use vmemmap::VmemmapOptions;

use super::{Ctx, Experiment, ExperimentId, cell};
use crate::error::RunError;
use crate::models::{Buildable, ModelVisitor, build_allocator};
use crate::report::Row;
use crate::snapshot::StartState;
use crate::spread::{Comparison, Interval, Verdict};
use crate::timing::{Measurement, Plan};
use crate::workloads::{bulk_arrays, bulk_lists, pcp_pairs};

/// Bulk sizes, as in the seed.
pub const SIZES: [usize; 9] = [1, 2, 3, 4, 8, 16, 32, 64, 128];

/// The seed's kernel figures at one bulk size, cycles per page.
#[derive(Clone, Copy, Debug)]
struct SeedBulk {
    bulk: usize,
    array_cycles: u32,
    list_cycles: u32,
}

impl SeedBulk {
    fn cycles(self, variant: BulkVariant) -> Option<f64> {
        match variant {
            BulkVariant::Single => None,
            BulkVariant::List => Some(f64::from(self.list_cycles)),
            BulkVariant::Array => Some(f64::from(self.array_cycles)),
        }
    }
}

/// The seed at one page per call.
const SEED_1: SeedBulk = SeedBulk {
    bulk: 1,
    array_cycles: 202,
    list_cycles: 206,
};
/// The seed at 128 pages per call.
const SEED_128: SeedBulk = SeedBulk {
    bulk: 128,
    array_cycles: 110,
    list_cycles: 133,
};
/// The seed's single-page alloc+put, in cycles.
const SEED_SINGLE: f64 = 199.0;

/// The experiment `bench bulk`.
pub struct Bulk;

/// How pages were taken and given back.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BulkVariant {
    /// One page per call through the per-CPU list (the baseline).
    Single,
    /// `alloc_pages_bulk` onto a list threaded through the pages.
    List,
    /// `alloc_pages_bulk` into an array, filling empty slots.
    Array,
}

/// One bulk size's two interfaces, per page.
#[derive(Clone, Debug)]
pub struct SizeResult {
    /// Pages per call.
    pub bulk: usize,
    /// The list interface.
    pub list: Measurement,
    /// The array interface.
    pub array: Measurement,
}

/// What `bench bulk` measures.
#[derive(Clone, Debug)]
pub struct BulkResults {
    /// The single-page baseline, per page.
    pub single: Measurement,
    /// Each of [`SIZES`], in order.
    pub sizes: Vec<SizeResult>,
}

impl BulkResults {
    /// The share of a page's cost that calls of 128 pages save over calls
    /// of one, ours and the seed's.
    /// The ratio of the last size's per-page cost to the first's, ours
    /// and the seed's (`1 - ratio` is the share saved).
    fn over_1(&self, variant: BulkVariant) -> Option<(Interval, f64)> {
        let (first, last) = (self.sizes.first()?, self.sizes.last()?);
        let of = |s: &'_ SizeResult| match variant {
            BulkVariant::Single => None,
            BulkVariant::List => Some(s.list.clone()),
            BulkVariant::Array => Some(s.array.clone()),
        };
        let ours = Interval::between(&of(last)?, &of(first)?).ok()?;
        let seed = SEED_128.cycles(variant)? / SEED_1.cycles(variant)?;
        Some((ours, seed))
    }

    /// The share of a page's cost that calls of 128 pages save over calls
    /// of one, with its interval, and the seed's.
    fn gain_from_1(&self, variant: BulkVariant) -> Option<(Interval, f64)> {
        let (ratio, seed) = self.over_1(variant)?;
        let saved = Interval {
            median: 1.0 - ratio.median,
            lo: 1.0 - ratio.hi,
            hi: 1.0 - ratio.lo,
            ..ratio
        };
        Some((saved, 1.0 - seed))
    }

    /// What threading pages through their links costs over the array at
    /// 128 pages, per page, in cycles: ours (paired per-trial differences)
    /// and the seed's.
    fn list_over_array(&self) -> Option<(Interval, f64)> {
        let last = self.sizes.last()?;
        let ours = Interval::of_difference(
            &last.list.cycles_per_op.trials,
            &last.array.cycles_per_op.trials,
        )
        .ok()?;
        let seed = f64::from(SEED_128.list_cycles) - f64::from(SEED_128.array_cycles);
        Some((ours, seed))
    }
}

/// The seed's cycles beside a row.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct SeedCycles {
    /// The seed kernel's cycles per page.
    pub cycles_per_page: f64,
}

/// The row's parameters.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct BulkParams {
    /// Pages per call.
    pub bulk: usize,
}

/// One row of `bench bulk`'s report.
pub type BulkRow = Row<BulkVariant, BulkParams, BulkExtra>;

/// The seed's figures beside a row, and the gains at the largest size.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct BulkExtra {
    /// The seed's figure at this size, where it published one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<SeedCycles>,
    /// Our cycles over the seed's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_seed: Option<f64>,
    /// The same with the interval of our median.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_seed_interval: Option<Interval>,
    /// At 128 pages: the share of the per-page cost saved over one page
    /// per call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gain_from_1: Option<f64>,
    /// The same with its interval (from the paired ratio 128 / 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gain_from_1_interval: Option<Interval>,
    /// The seed's [`BulkExtra::gain_from_1`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed_gain_from_1: Option<f64>,
    /// The list at 128 pages: cycles per page over the array's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cycles_over_array: Option<f64>,
    /// The same with its interval (paired per-trial differences).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cycles_over_array_interval: Option<Interval>,
    /// The seed's [`BulkExtra::cycles_over_array`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed_cycles_over_array: Option<f64>,
}

/// A row with the seed's cycles beside ours, where the seed has a figure.
fn row(
    ctx: &Ctx,
    variant: BulkVariant,
    bulk: usize,
    m: &Measurement,
    seed: Option<f64>,
) -> BulkRow {
    let extra = BulkExtra {
        seed: seed.map(|cycles_per_page| SeedCycles { cycles_per_page }),
        ratio_to_seed: seed.map(|seed| m.cycles_per_op.median / seed),
        ratio_to_seed_interval: seed.and_then(|seed| {
            Interval::of_median(&m.cycles_per_op.trials)
                .ok()
                .map(|i| i.scaled(1.0 / seed))
        }),
        ..BulkExtra::default()
    };
    Row::new(variant, ctx.model, BulkParams { bulk }, m.clone(), extra)
}

struct Visitor {
    plan: Plan,
    alloc_options: Options,
    start_state: Option<StartState>,
}

impl ModelVisitor for Visitor {
    type Output = BulkResults;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<BulkResults, AllocError> {
        let mut alloc = build_allocator::<M, Kernel>(layout, options, self.alloc_options)?;
        if let Some(start) = &self.start_state {
            start.apply(&mut alloc)?;
        }
        let mut cpu = alloc.cpu_on(layout.first_node())?;
        let plan = self.plan;
        let pairs = plan.iters(2_000_000, 20_000);
        let single = plan.measure(|| {
            std::hint::black_box(pcp_pairs(&mut cpu, pairs));
            pairs
        });
        let mut list = buddy::PageChain::new(&alloc);
        let mut slots = vec![None; 128];
        // Every size's list and array trials interleaved: the machine's
        // drift falls on all alike, and a size pairs with any other.
        let mut variants: Vec<(usize, BulkVariant)> = SIZES
            .iter()
            .flat_map(|&bulk| [(bulk, BulkVariant::List), (bulk, BulkVariant::Array)])
            .collect();
        let m = plan.measure_interleaved(&mut variants, |&mut (bulk, v)| {
            let rounds = plan.iters(2_000_000, 20_000) / bulk as u64;
            match v {
                BulkVariant::List => {
                    std::hint::black_box(bulk_lists(&mut cpu, rounds, bulk, &mut list))
                }
                _ => std::hint::black_box(bulk_arrays(&mut cpu, rounds, &mut slots[..bulk])),
            };
            rounds * bulk as u64
        });
        let sizes = SIZES
            .iter()
            .zip(m.chunks_exact(2))
            .map(|(&bulk, pair)| SizeResult {
                bulk,
                list: pair[0].clone(),
                array: pair[1].clone(),
            })
            .collect();
        Ok(BulkResults { single, sizes })
    }
}

impl Experiment for Bulk {
    const ID: ExperimentId = ExperimentId::Bulk;
    type Params = ();
    type Results = BulkResults;
    type Row = BulkRow;
    const TAKES_START_STATE: bool = true;

    fn measure(ctx: &Ctx, _: &()) -> Result<BulkResults, RunError> {
        ctx.visit(Visitor {
            plan: ctx.plan,
            alloc_options: ctx.options(),
            start_state: ctx.start_state.clone(),
        })
    }

    fn rows(ctx: &Ctx, r: &BulkResults) -> Vec<BulkRow> {
        let mut rows = vec![row(
            ctx,
            BulkVariant::Single,
            1,
            &r.single,
            Some(SEED_SINGLE),
        )];
        let last = r.sizes.last().map(|s| s.bulk);
        for s in &r.sizes {
            let seed = [SEED_1, SEED_128]
                .into_iter()
                .find(|seed| seed.bulk == s.bulk);
            for (variant, m) in [(BulkVariant::List, &s.list), (BulkVariant::Array, &s.array)] {
                let mut row = row(
                    ctx,
                    variant,
                    s.bulk,
                    m,
                    seed.and_then(|s| s.cycles(variant)),
                );
                if Some(s.bulk) == last {
                    let gain = r.gain_from_1(variant);
                    row.extra.gain_from_1 = gain.map(|g| g.0.median);
                    row.extra.gain_from_1_interval = gain.map(|g| g.0);
                    row.extra.seed_gain_from_1 = gain.map(|g| g.1);
                    if variant == BulkVariant::List {
                        let over = r.list_over_array();
                        row.extra.cycles_over_array = over.map(|o| o.0.median);
                        row.extra.cycles_over_array_interval = over.map(|o| o.0);
                        row.extra.seed_cycles_over_array = over.map(|o| o.1);
                    }
                }
                rows.push(row);
            }
        }
        rows
    }

    fn comparisons(_: &Ctx, r: &BulkResults) -> Vec<Comparison> {
        let mut out = Vec::new();
        for (name, variant) in [("list", BulkVariant::List), ("array", BulkVariant::Array)] {
            if let Some((ratio, _)) = r.over_1(variant) {
                out.push(Comparison::from_interval(
                    format!("{name}: 128 / 1 pages per call"),
                    ratio,
                ));
            }
        }
        if let Some(last) = r.sizes.last() {
            out.extend(Comparison::of(
                format!("list / array at {}", last.bulk),
                &last.list,
                &last.array,
            ));
        }
        out
    }

    fn render(_: &Ctx, r: &BulkResults) -> String {
        let mut table = format!(
            "single alloc+free (pcp): {} per page   [seed kernel: {SEED_SINGLE} cycles]\n\n\
             {:>5}  {:>22}  {:>22}  {:>24}\n",
            cell(&r.single),
            "bulk",
            "list ns (cycles)/page",
            "array ns (cycles)/page",
            "seed kernel list/array"
        );
        for s in &r.sizes {
            let seed = [SEED_1, SEED_128]
                .into_iter()
                .find(|seed| seed.bulk == s.bulk)
                .map_or("-".into(), |seed| {
                    format!("{} / {} cycles", seed.list_cycles, seed.array_cycles)
                });
            table += &format!(
                "{:>5}  {:>22}  {:>22}  {:>24}\n",
                s.bulk,
                cell(&s.list),
                cell(&s.array),
                seed
            );
        }
        table += &gains_text(r);
        table += &format!(
            "\nCycles are {}, as the kernel's time_bench (get_cycles) reports them.\n",
            crate::timing::COUNTER_UNIT
        );
        table
    }
}

/// The lines on what 128 pages per call save, and on the list's cost over
/// the array, each with its interval, beside the seed's.
fn gains_text(r: &BulkResults) -> String {
    let mut out = String::new();
    for (name, variant, seed) in [
        (
            "list",
            BulkVariant::List,
            (SEED_1.list_cycles, SEED_128.list_cycles),
        ),
        (
            "array",
            BulkVariant::Array,
            (SEED_1.array_cycles, SEED_128.array_cycles),
        ),
    ] {
        if let (Some((ours, seed_gain)), Some((ratio, _))) =
            (r.gain_from_1(variant), r.over_1(variant))
        {
            let said = match ratio.ratio_verdict() {
                Verdict::Lower => format!(
                    "saves {:.0} % [{:.0}, {:.0}] per page",
                    ours.median * 100.0,
                    ours.lo * 100.0,
                    ours.hi * 100.0
                ),
                Verdict::Higher => format!(
                    "costs {:.0} % [{:.0}, {:.0}] more per page",
                    -ours.median * 100.0,
                    -ours.hi * 100.0,
                    -ours.lo * 100.0
                ),
                v => format!(
                    "changes the cost per page by {:+.0} % [{:+.0}, {:+.0}]: {v}",
                    -ours.median * 100.0,
                    -ours.hi * 100.0,
                    -ours.lo * 100.0
                ),
            };
            out += &format!(
                "{name}: 1 -> 128 pages per call {said}; the seed's kernel saved {:.0} % ({} -> {} cycles)\n",
                seed_gain * 100.0,
                seed.0,
                seed.1
            );
        }
    }
    if let Some((ours, seed)) = r.list_over_array() {
        let verdict = match ours.difference_verdict() {
            v @ (Verdict::WithinNoise { .. } | Verdict::TooFewTrials { .. }) => format!(", {v}"),
            _ => String::new(),
        };
        out += &format!(
            "list - array at 128: {:+.0} [{:+.0}, {:+.0}] cycles per page{verdict}; the seed's kernel {seed:+.0} ({} - {}): the list's link writes on allocation and its walk (one dependent load per page) on free\n",
            ours.median, ours.lo, ours.hi, SEED_128.list_cycles, SEED_128.array_cycles
        );
    }
    out
}
