//! `pfn-valid`: fault-probed `pfn_valid` for SPARSEMEM_VMEMMAP (KAMEZAWA
//! Hiroyuki, 2006) against SPARSEMEM_EXTREME and stock VMEMMAP: the cost
//! of one call (valid, hole, random mix, sequential) and an allocation
//! workload like AIM9 `page_test` with the hole check on every merge.

use buddy::{AllocError, Era, Gfp, Kernel, KernelHoleCheck};
use serde::Serialize;
use sparsemem::{Layout, Pfn};
use vmemmap::VmemmapOptions;

use super::kernel_fixup::{KernelFixup, OrFixup, measure_kernel_fixup, with_fixup};
use super::{Ctx, Experiment, ExperimentId, cell};
use crate::error::RunError;
use crate::models::{Buildable, ModelKind, ModelVisitor, build_allocator, with_model_options};
use crate::report::Row;
use crate::spread::{Comparison, Interval, ratio_cell, ratio_text};
use crate::timing::{Measurement, Plan};
use crate::workloads::{
    PAGE_TEST_BATCH, XorShift, count_valid, count_valid_sequential, hole_pfns, page_test_rounds,
    page_test_rounds_with, valid_pfns,
};

struct Visitor {
    plan: Plan,
    slow_holes: bool,
    alloc_options: buddy::Options,
}

/// One model's measurements.
#[derive(Clone, Debug)]
pub struct PfnValidResults {
    /// `pfn_valid` on random valid pfns.
    pub valid: Measurement,
    /// `pfn_valid` on random holes.
    pub hole: Measurement,
    /// A shuffled mix of the two.
    pub random: Measurement,
    /// Consecutive pfns from the start of the span.
    pub sequential: Measurement,
    /// AIM9 `page_test`-like: 512 zone-path allocations then 512 frees, per
    /// page, with the `HOLES_IN_ZONE` check.
    pub page_test: Measurement,
    /// The same with 2.6.20's per-page touchpoints on the unmap path
    /// (`vm_normal_page`: `pfn_valid` + `pfn_to_page`) before each free.
    pub page_test_2620: Measurement,
    /// The same again with every page backed by a real frame and cleared
    /// on allocation (`__GFP_ZERO`: the `clear_page` the seed's AIM9 run
    /// paid), or why it could not run on the layout.
    pub page_test_clear: Result<Measurement, String>,
    /// Today's path (6.18, no hole check): `get_pfnblock_migratetype` on
    /// every free, through the section's usage map under SPARSEMEM.
    pub page_test_618: Measurement,
}

impl PfnValidResults {
    /// Each workload's measurement, in table order (`None`: it could not
    /// run on the layout).
    pub fn workloads(&self) -> [(Workload, Option<&Measurement>); 8] {
        [
            (Workload::Valid, Some(&self.valid)),
            (Workload::Hole, Some(&self.hole)),
            (Workload::Random, Some(&self.random)),
            (Workload::Sequential, Some(&self.sequential)),
            (Workload::PageTest, Some(&self.page_test)),
            (Workload::PageTest2620, Some(&self.page_test_2620)),
            (Workload::PageTestClear, self.page_test_clear.as_ref().ok()),
            (Workload::PageTest618, Some(&self.page_test_618)),
        ]
    }
}

/// What a row of `bench pfn-valid` timed.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub enum Workload {
    /// `pfn_valid` on random valid pfns.
    #[serde(rename = "valid")]
    Valid,
    /// `pfn_valid` on random holes.
    #[serde(rename = "hole")]
    Hole,
    /// A shuffled mix of the two.
    #[serde(rename = "random")]
    Random,
    /// Consecutive pfns.
    #[serde(rename = "sequential")]
    Sequential,
    /// 2.6.23's zone path, `HOLES_IN_ZONE` check per merge step.
    #[serde(rename = "page_test")]
    PageTest,
    /// + `vm_normal_page`'s `pfn_valid` + `pfn_to_page` per page.
    #[serde(rename = "page_test+2.6.20")]
    PageTest2620,
    /// + a real frame cleared per page (`__GFP_ZERO`).
    #[serde(rename = "page_test+2.6.20+clear_page")]
    PageTestClear,
    /// Today: no hole check, `get_pfnblock_migratetype` per free.
    #[serde(rename = "page_test-6.18")]
    PageTest618,
}

impl Workload {
    /// The page_test variants, in table order.
    const PAGE_TESTS: [Workload; 4] = [
        Workload::PageTest,
        Workload::PageTest2620,
        Workload::PageTestClear,
        Workload::PageTest618,
    ];

    /// The name in rows and tables.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Valid => "valid",
            Workload::Hole => "hole",
            Workload::Random => "random",
            Workload::Sequential => "sequential",
            Workload::PageTest => "page_test",
            Workload::PageTest2620 => "page_test+2.6.20",
            Workload::PageTestClear => "page_test+2.6.20+clear_page",
            Workload::PageTest618 => "page_test-6.18",
        }
    }

    /// Whether it is a page_test variant (reported in pages per second).
    fn is_page_test(self) -> bool {
        Workload::PAGE_TESTS.contains(&self)
    }

    /// What a page_test variant adds, for the table's legend.
    fn what(self) -> &'static str {
        match self {
            Workload::PageTest => "2.6.23 zone path, HOLES_IN_ZONE check per merge step",
            Workload::PageTest2620 => "+ vm_normal_page's pfn_valid + pfn_to_page per page",
            Workload::PageTestClear => "+ a real frame cleared per page (__GFP_ZERO)",
            Workload::PageTest618 => "today: no hole check, get_pfnblock_migratetype per free",
            _ => "",
        }
    }
}

impl ModelVisitor for Visitor {
    type Output = PfnValidResults;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<PfnValidResults, AllocError> {
        let plan = self.plan;
        let model = M::build(layout, options)?;
        let n = plan.iters(1 << 20, 4096) as usize;
        let nh = if self.slow_holes {
            plan.iters(20_000, 500) as usize
        } else {
            n
        };
        let valid = valid_pfns(layout, n, 3);
        let holes = hole_pfns(layout, nh, 5);
        let mut mix: Vec<Pfn> = valid.iter().take(nh).chain(holes.iter()).copied().collect();
        let mut rng = XorShift(99);
        for i in (1..mix.len()).rev() {
            mix.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
        }
        let first = layout.memory_span().0;
        let lookups = |set: &[Pfn]| {
            plan.measure(|| {
                std::hint::black_box(count_valid(&model, set));
                set.len() as u64
            })
        };
        let (valid, hole, random) = (lookups(&valid), lookups(&holes), lookups(&mix));
        let sequential = plan.measure(|| {
            std::hint::black_box(count_valid_sequential(&model, first, n as u64));
            n as u64
        });
        drop(model);
        let alloc = build_allocator::<M, KernelHoleCheck>(layout, options, self.alloc_options)?;
        let node = layout.first_node();
        let rounds = plan.iters(4000, 40);
        let mut held = Vec::with_capacity(PAGE_TEST_BATCH);
        let page_test = plan.measure(|| page_test_rounds(&alloc, node, rounds, &mut held));
        let gfp = Gfp::HIGHUSER_MOVABLE;
        let page_test_2620 =
            plan.measure(|| page_test_rounds_with(&alloc, node, rounds, &mut held, gfp, true));
        drop(alloc);
        let framed = buddy::Options {
            frames: true,
            ..self.alloc_options
        };
        let page_test_clear = build_allocator::<M, KernelHoleCheck>(layout, options, framed)
            .map(|alloc| {
                plan.measure(|| {
                    page_test_rounds_with(&alloc, node, rounds, &mut held, gfp | Gfp::ZERO, true)
                })
            })
            .map_err(|e| e.to_string());
        let today = buddy::Options::for_era(Era::V6_18);
        let alloc = build_allocator::<M, Kernel>(layout, options, today)?;
        let page_test_618 = plan.measure(|| page_test_rounds(&alloc, node, rounds, &mut held));
        Ok(PfnValidResults {
            valid,
            hole,
            random,
            sequential,
            page_test,
            page_test_2620,
            page_test_clear,
            page_test_618,
        })
    }
}

fn models(ctx: &Ctx) -> Vec<ModelKind> {
    if ctx.model_chosen {
        return vec![ctx.model];
    }
    ModelKind::ALL
        .iter()
        .copied()
        .filter(|k| k.is_vmemmap() || *k == ModelKind::SparseExtreme)
        .collect()
}

/// The seed's AIM9 `page_test` pages per second with SPARSEMEM_EXTREME
/// without VMEMMAP (table-based `pfn_valid`, `pfn_to_page` and
/// `page_to_pfn`).
pub const SEED_EXTREME_PPS: f64 = 1_042_187.0;
/// The same with VMEMMAP and the fault probe.
pub const SEED_PROBE_PPS: f64 = 1_076_976.0;

/// One layout's models.
#[derive(Clone, Debug)]
pub struct LayoutRun {
    /// The layout's source.
    pub layout: String,
    /// Each model's measurements, or why it was not built.
    pub models: Vec<(ModelKind, Result<PfnValidResults, String>)>,
}

impl LayoutRun {
    /// AIM9's view (2.6.20 touchpoints and `clear_page`): vmemmap-probe's
    /// pages per second over sparse-extreme's, when both ran.
    fn probe_to_extreme(&self) -> Option<f64> {
        self.probe_to_extreme_interval().map(|i| i.median)
    }

    /// [`LayoutRun::probe_to_extreme`] with its interval: sparse-extreme's
    /// time per page over vmemmap-probe's (the models run one after the
    /// other, so unpaired).
    fn probe_to_extreme_interval(&self) -> Option<Interval> {
        let time = |kind: ModelKind| {
            let (_, r) = self.models.iter().find(|(k, _)| *k == kind)?;
            r.as_ref().ok()?.page_test_clear.as_ref().ok()
        };
        Interval::between(
            time(ModelKind::SparseExtreme)?,
            time(ModelKind::VmemmapProbe)?,
        )
        .ok()
    }
}

/// What `bench pfn-valid` measures.
#[derive(Clone, Debug)]
pub struct PfnValidRun {
    /// The layouts: `--layout`'s, or the host's and ia64-holes.
    pub layouts: Vec<LayoutRun>,
    /// The kernel's own fault fixup, beside the probe.
    pub fixup: KernelFixup,
}

/// A row's parameters.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadParams {
    /// The layout's source.
    pub layout: String,
    /// The workload.
    pub workload: Workload,
}

/// The seed's page_test figures.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct PageTestSeed {
    /// Pages per second by model.
    pub pages_per_second: SeedPps,
    /// vmemmap-probe over sparse-extreme.
    pub ratio_probe_to_extreme: f64,
}

/// The seed's pages per second by model.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct SeedPps {
    /// SPARSEMEM_EXTREME.
    #[serde(rename = "sparse-extreme")]
    pub sparse_extreme: f64,
    /// VMEMMAP with the probe.
    #[serde(rename = "vmemmap-probe")]
    pub vmemmap_probe: f64,
}

/// A row's extra fields.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct WorkloadExtra {
    /// page_test variants: pages per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pages_per_second: Option<f64>,
    /// vmemmap-probe's clear_page row: the seed's figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<PageTestSeed>,
    /// Ours: vmemmap-probe over sparse-extreme.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_probe_to_extreme: Option<f64>,
    /// Our ratio over the seed's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_seed: Option<f64>,
    /// [`WorkloadExtra::ratio_probe_to_extreme`] with its interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_probe_to_extreme_interval: Option<Interval>,
    /// [`WorkloadExtra::ratio_to_seed`] with its interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_seed_interval: Option<Interval>,
}

/// A row of `bench pfn-valid`'s report (before the fixup's rows).
pub type WorkloadRow = Row<Workload, WorkloadParams, WorkloadExtra>;

/// The experiment `bench pfn-valid`.
pub struct PfnValid;

impl Experiment for PfnValid {
    const ID: ExperimentId = ExperimentId::PfnValid;
    type Params = ();
    type Results = PfnValidRun;
    type Row = OrFixup<WorkloadRow>;

    fn measure(ctx: &Ctx, _: &()) -> Result<PfnValidRun, RunError> {
        let layouts = match ctx.layout_spec {
            Some(_) => vec![ctx.layout.clone()],
            None => vec![ctx.layout.clone(), Layout::preset("ia64-holes")?],
        };
        let layouts = layouts
            .iter()
            .map(|layout| LayoutRun {
                layout: layout.source().into(),
                models: models(ctx)
                    .into_iter()
                    .map(|kind| {
                        let visitor = Visitor {
                            plan: ctx.plan,
                            slow_holes: kind.faults_on_holes(),
                            alloc_options: ctx.options(),
                        };
                        let r =
                            with_model_options(kind, layout, VmemmapOptions::default(), visitor);
                        (kind, r.map_err(|e| e.to_string()))
                    })
                    .collect(),
            })
            .collect();
        let fixup = measure_kernel_fixup(ctx.plan)?;
        Ok(PfnValidRun { layouts, fixup })
    }

    fn rows(_: &Ctx, run: &PfnValidRun) -> Vec<Self::Row> {
        let mut rows = Vec::new();
        for l in &run.layouts {
            let ours = l.probe_to_extreme();
            for (kind, r) in &l.models {
                let Ok(r) = r else { continue };
                for (workload, m) in r.workloads() {
                    let Some(m) = m else { continue };
                    let mut extra = WorkloadExtra {
                        pages_per_second: workload.is_page_test().then(|| 1e9 / m.ns_per_op.median),
                        ..WorkloadExtra::default()
                    };
                    let seeded =
                        workload == Workload::PageTestClear && *kind == ModelKind::VmemmapProbe;
                    if let (true, Some(ours)) = (seeded, ours) {
                        let seed_ratio = SEED_PROBE_PPS / SEED_EXTREME_PPS;
                        extra.seed = Some(PageTestSeed {
                            pages_per_second: SeedPps {
                                sparse_extreme: SEED_EXTREME_PPS,
                                vmemmap_probe: SEED_PROBE_PPS,
                            },
                            ratio_probe_to_extreme: seed_ratio,
                        });
                        extra.ratio_probe_to_extreme = Some(ours);
                        extra.ratio_to_seed = Some(ours / seed_ratio);
                        let interval = l.probe_to_extreme_interval();
                        extra.ratio_probe_to_extreme_interval = interval;
                        extra.ratio_to_seed_interval = interval.map(|i| i.scaled(1.0 / seed_ratio));
                    }
                    let params = WorkloadParams {
                        layout: l.layout.clone(),
                        workload,
                    };
                    rows.push(Row::new(workload, *kind, params, m.clone(), extra));
                }
            }
        }
        with_fixup(rows, &run.fixup)
    }

    fn render(_: &Ctx, run: &PfnValidRun) -> String {
        let mut table = format!(
            "median ns per op ({}); page_test: zone-path alloc of 512 pages then free, per page\n",
            crate::timing::COUNTER_UNIT
        );
        for l in &run.layouts {
            table += &layout_table(l);
        }
        table += "\n";
        table += &run.fixup.text();
        table += "The probe's hole column is a user-space signal round trip; a kernel fault on a vmemmap hole pays the fixup above instead.\n";
        table += "\nSeed (2006): AIM9 page_test 1,042,187 (SPARSEMEM_EXTREME without VMEMMAP: table-based pfn_valid, pfn_to_page and page_to_pfn; pfnlab's sparse-extreme) vs 1,076,976 (VMEMMAP + probe); \
                  reaim max 804,000 / 804,844 / 811,181 - \"within noise\".\n";
        table
    }

    fn comparisons(_: &Ctx, run: &PfnValidRun) -> Vec<Comparison> {
        run.layouts
            .iter()
            .filter_map(|l| {
                let what = format!("vmemmap-probe / sparse-extreme pages/s: {}", l.layout);
                Some(Comparison::from_interval(
                    what,
                    l.probe_to_extreme_interval()?,
                ))
            })
            .collect()
    }

    fn layout_label(_: &Ctx, run: &PfnValidRun) -> String {
        let names: Vec<&str> = run.layouts.iter().map(|l| l.layout.as_str()).collect();
        names.join(",")
    }
}

/// One layout's two tables: the lookups, then page_test, then AIM9's view.
fn layout_table(l: &LayoutRun) -> String {
    let [pt, pt2620, _, pt618] = Workload::PAGE_TESTS.map(Workload::name);
    let mut table = format!(
        "\nlayout {}\n{:<21} {:>15} {:>15} {:>15} {:>15}\n",
        l.layout, "model", "valid", "hole", "random", "sequential",
    );
    let mut page_table = format!(
        "{:<21} {:>17} {:>17} {:>17} {:>17}\n",
        "page_test per page", pt, pt2620, "+clear_page", pt618
    );
    for (kind, r) in &l.models {
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                table += &format!("{:<21} not built: {e}\n", kind.name());
                continue;
            }
        };
        let cells = r
            .workloads()
            .map(|(_, m)| m.map_or_else(|| "n/a".to_string(), cell));
        table += &format!(
            "{:<21} {:>15} {:>15} {:>15} {:>15}\n",
            kind.name(),
            cells[0],
            cells[1],
            cells[2],
            cells[3],
        );
        page_table += &format!(
            "{:<21} {:>17} {:>17} {:>17} {:>17}\n",
            kind.name(),
            cells[4],
            cells[5],
            cells[6],
            cells[7]
        );
    }
    table += "\n";
    table += &page_table;
    for w in Workload::PAGE_TESTS {
        table += &format!("  {}: {}\n", w.name(), w.what());
    }
    if let Some(ours) = l.probe_to_extreme_interval() {
        let seed_ratio = SEED_PROBE_PPS / SEED_EXTREME_PPS;
        table += &format!(
            "page_test as AIM9 saw it (2.6.20 touchpoints + clear_page): vmemmap-probe / sparse-extreme = {} pages/s; seed (2006) {SEED_PROBE_PPS:.0} / {SEED_EXTREME_PPS:.0} = {seed_ratio:.3}; pfnlab / seed = {}\n",
            ratio_text(&ours),
            ratio_cell(&ours.scaled(1.0 / seed_ratio))
        );
    }
    table
}
