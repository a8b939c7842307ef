//! `pfn-valid`: fault-probed `pfn_valid` for SPARSEMEM_VMEMMAP (KAMEZAWA
//! Hiroyuki, 2006) against SPARSEMEM_EXTREME and stock VMEMMAP: the cost
//! of one call (valid, hole, random mix, sequential) and an allocation
//! workload like AIM9 `page_test` with the hole check on every merge.

use buddy::{AllocError, Era, Gfp, Kernel, KernelHoleCheck};
use serde_json::json;
use sparsemem::{Layout, Pfn};
use vmemmap::VmemmapOptions;

use super::kernel_fixup::measure_kernel_fixup;
use super::legacy::{Outcome, legacy_experiment};
use super::{Ctx, Knobs, cell};
use crate::error::RunError;
use crate::models::{Buildable, ModelKind, ModelVisitor, build_allocator, with_model_options};
use crate::report::Row;
use crate::timing::{Measurement, Plan, measure};
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
    /// The workloads by name, in table order.
    pub fn workloads(&self) -> [(&'static str, &Measurement); 5] {
        [
            ("valid", &self.valid),
            ("hole", &self.hole),
            ("random", &self.random),
            ("sequential", &self.sequential),
            ("page_test", &self.page_test),
        ]
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
            measure(plan.trials, || {
                std::hint::black_box(count_valid(&model, set));
                set.len() as u64
            })
        };
        let (valid, hole, random) = (lookups(&valid), lookups(&holes), lookups(&mix));
        let sequential = measure(plan.trials, || {
            std::hint::black_box(count_valid_sequential(&model, first, n as u64));
            n as u64
        });
        drop(model);
        let alloc = build_allocator::<M, KernelHoleCheck>(layout, options, self.alloc_options)?;
        let node = layout.first_node();
        let rounds = plan.iters(4000, 40);
        let mut held = Vec::with_capacity(PAGE_TEST_BATCH);
        let page_test = measure(plan.trials, || {
            page_test_rounds(&alloc, node, rounds, &mut held)
        });
        let gfp = Gfp::HIGHUSER_MOVABLE;
        let page_test_2620 = measure(plan.trials, || {
            page_test_rounds_with(&alloc, node, rounds, &mut held, gfp, true)
        });
        drop(alloc);
        let framed = buddy::Options {
            frames: true,
            ..self.alloc_options
        };
        let page_test_clear = build_allocator::<M, KernelHoleCheck>(layout, options, framed)
            .map(|alloc| {
                measure(plan.trials, || {
                    page_test_rounds_with(&alloc, node, rounds, &mut held, gfp | Gfp::ZERO, true)
                })
            })
            .map_err(|e| e.to_string());
        let today = buddy::Options::for_era(Era::V6_18);
        let alloc = build_allocator::<M, Kernel>(layout, options, today)?;
        let page_test_618 = measure(plan.trials, || {
            page_test_rounds(&alloc, node, rounds, &mut held)
        });
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

/// The seed's AIM9 `page_test` pages per second: SPARSEMEM_EXTREME
/// without VMEMMAP (table-based `pfn_valid`, `pfn_to_page` and
/// `page_to_pfn`), and VMEMMAP with the fault probe.
pub const SEED_PAGE_TEST: [(&str, f64); 2] = [
    ("sparse-extreme", 1_042_187.0),
    ("vmemmap-probe", 1_076_976.0),
];

/// The page_test variants, in table order: name and what it adds.
const PAGE_TESTS: [(&str, &str); 4] = [
    (
        "page_test",
        "2.6.23 zone path, HOLES_IN_ZONE check per merge step",
    ),
    (
        "page_test+2.6.20",
        "+ vm_normal_page's pfn_valid + pfn_to_page per page",
    ),
    (
        "page_test+2.6.20+clear_page",
        "+ a real frame cleared per page (__GFP_ZERO)",
    ),
    (
        "page_test-6.18",
        "today: no hole check, get_pfnblock_migratetype per free",
    ),
];

fn page_tests(r: &PfnValidResults) -> [(&'static str, Result<&Measurement, &str>); 4] {
    [
        (PAGE_TESTS[0].0, Ok(&r.page_test)),
        (PAGE_TESTS[1].0, Ok(&r.page_test_2620)),
        (
            PAGE_TESTS[2].0,
            r.page_test_clear.as_ref().map_err(String::as_str),
        ),
        (PAGE_TESTS[3].0, Ok(&r.page_test_618)),
    ]
}

legacy_experiment!(
    /// Fault-probed `pfn_valid` for SPARSEMEM_VMEMMAP (2006).
    PfnValid = PfnValid,
    run
);

fn run(ctx: &Ctx, _: &Knobs) -> Result<Outcome, RunError> {
    let layouts = match ctx.layout_spec {
        Some(_) => vec![ctx.layout.clone()],
        None => vec![ctx.layout.clone(), Layout::preset("ia64-holes")?],
    };
    let mut rows = Vec::new();
    let mut table = format!(
        "median ns per op ({}); page_test: zone-path alloc of 512 pages then free, per page\n",
        crate::timing::COUNTER_UNIT
    );
    for layout in &layouts {
        table += &format!(
            "\nlayout {}\n{:<21} {:>15} {:>15} {:>15} {:>15}\n",
            layout.source(),
            "model",
            "valid",
            "hole",
            "random",
            "sequential",
        );
        let mut page_table = format!(
            "{:<21} {:>17} {:>17} {:>17} {:>17}\n",
            "page_test per page", PAGE_TESTS[0].0, PAGE_TESTS[1].0, "+clear_page", PAGE_TESTS[3].0
        );
        let mut aim9: Vec<(ModelKind, f64)> = Vec::new();
        for kind in models(ctx) {
            let visitor = Visitor {
                plan: ctx.plan,
                slow_holes: kind.faults_on_holes(),
                alloc_options: ctx.options(),
            };
            let results = match with_model_options(kind, layout, VmemmapOptions::default(), visitor)
            {
                Ok(r) => r,
                Err(e) => {
                    table += &format!("{:<21} not built: {e}\n", kind.name());
                    continue;
                }
            };
            let [valid, hole, random, sequential, _] = results.workloads().map(|(_, m)| cell(m));
            table += &format!(
                "{:<21} {:>15} {:>15} {:>15} {:>15}\n",
                kind.name(),
                valid,
                hole,
                random,
                sequential,
            );
            let cells =
                page_tests(&results).map(|(_, m)| m.map_or_else(|_| "n/a".to_string(), cell));
            page_table += &format!(
                "{:<21} {:>17} {:>17} {:>17} {:>17}\n",
                kind.name(),
                cells[0],
                cells[1],
                cells[2],
                cells[3]
            );
            let row = |workload: &str, m: &Measurement| {
                Row::new(
                    workload,
                    kind.name(),
                    json!({"layout": layout.source(), "workload": workload}),
                    m.clone(),
                )
            };
            let [lookups @ .., _] = results.workloads();
            rows.extend(lookups.into_iter().map(|(w, m)| row(w, m)));
            for (name, m) in page_tests(&results) {
                if let Ok(m) = m {
                    rows.push(row(name, m).with("pages_per_second", 1e9 / m.ns_per_op.median));
                }
            }
            if let Ok(m) = &results.page_test_clear {
                aim9.push((kind, 1e9 / m.ns_per_op.median));
            }
        }
        table += "\n";
        table += &page_table;
        for (name, what) in PAGE_TESTS {
            table += &format!("  {name}: {what}\n");
        }
        let pps = |k: ModelKind| aim9.iter().find(|(m, _)| *m == k).map(|(_, p)| *p);
        if let (Some(extreme), Some(probe)) =
            (pps(ModelKind::SparseExtreme), pps(ModelKind::VmemmapProbe))
        {
            let seed_ratio = SEED_PAGE_TEST[1].1 / SEED_PAGE_TEST[0].1;
            let ours = probe / extreme;
            table += &format!(
                "page_test as AIM9 saw it (2.6.20 touchpoints + clear_page): vmemmap-probe / sparse-extreme = {ours:.3} pages/s; seed (2006) {:.0} / {:.0} = {seed_ratio:.3}; pfnlab / seed = {:.3}\n",
                SEED_PAGE_TEST[1].1,
                SEED_PAGE_TEST[0].1,
                ours / seed_ratio
            );
            if let Some(r) = rows
                .iter_mut()
                .rev()
                .find(|r| r.variant == PAGE_TESTS[2].0 && r.model == ModelKind::VmemmapProbe.name())
            {
                r.extra.insert(
                    "seed".into(),
                    json!({
                        "pages_per_second": {"sparse-extreme": SEED_PAGE_TEST[0].1, "vmemmap-probe": SEED_PAGE_TEST[1].1},
                        "ratio_probe_to_extreme": seed_ratio,
                    }),
                );
                r.extra.insert("ratio_probe_to_extreme".into(), json!(ours));
                r.extra
                    .insert("ratio_to_seed".into(), json!(ours / seed_ratio));
            }
        }
    }
    let fixup = measure_kernel_fixup(ctx.plan)?;
    table += "\n";
    table += &fixup.text();
    rows.extend(fixup.rows());
    table += "The probe's hole column is a user-space signal round trip; a kernel fault on a vmemmap hole pays the fixup above instead.\n";
    table += "\nSeed (2006): AIM9 page_test 1,042,187 (SPARSEMEM_EXTREME without VMEMMAP: table-based pfn_valid, pfn_to_page and page_to_pfn; pfnlab's sparse-extreme) vs 1,076,976 (VMEMMAP + probe); \
              reaim max 804,000 / 804,844 / 811,181 - \"within noise\".\n";
    let layout_names: Vec<&str> = layouts.iter().map(|l| l.source()).collect();
    Ok(Outcome {
        rows,
        table,
        layout: layout_names.join(","),
    })
}
