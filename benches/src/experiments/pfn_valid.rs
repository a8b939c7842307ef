//! `pfn-valid`: fault-probed `pfn_valid` for SPARSEMEM_VMEMMAP (KAMEZAWA
//! Hiroyuki, 2006) against SPARSEMEM_EXTREME and stock VMEMMAP: the cost
//! of one call (valid, hole, random mix, sequential) and an allocation
//! workload like AIM9 `page_test` with the hole check on every merge.

use buddy::AllocError;
use buddy::KernelHoleCheck;
use serde_json::json;
use sparsemem::{Layout, Pfn};
use vmemmap::VmemmapOptions;

use super::kernel_fixup::measure_kernel_fixup;
use super::{Ctx, Outcome, cell};
use crate::CliError;
use crate::models::{Buildable, ModelKind, ModelVisitor, build_allocator, with_model_options};
use crate::report::Row;
use crate::timing::{Measurement, Plan, measure};
use crate::workloads::{
    PAGE_TEST_BATCH, XorShift, count_valid, count_valid_sequential, hole_pfns, page_test_rounds,
    valid_pfns,
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

    /// Pages a second through `page_test`, the seed's unit.
    pub fn pages_per_second(&self) -> f64 {
        1e9 / self.page_test.ns_per_op.median
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
        Ok(PfnValidResults {
            valid,
            hole,
            random,
            sequential,
            page_test,
        })
    }
}

fn models(ctx: &Ctx) -> Vec<ModelKind> {
    if ctx.args.model.is_some() {
        return vec![ctx.model];
    }
    ModelKind::ALL
        .iter()
        .copied()
        .filter(|k| k.is_vmemmap() || *k == ModelKind::SparseExtreme)
        .collect()
}

pub(super) fn run(ctx: &Ctx) -> Result<Outcome, CliError> {
    let layouts = match ctx.layout_spec {
        Some(_) => vec![ctx.layout.clone()],
        None => vec![ctx.layout.clone(), Layout::preset("ia64-holes")?],
    };
    let mut rows = Vec::new();
    let mut table = format!(
        "median ns per op ({}); page_test: zone-path alloc of 512 pages then free, hole check on\n",
        crate::timing::COUNTER_UNIT
    );
    for layout in &layouts {
        table += &format!(
            "\nlayout {}\n{:<21} {:>15} {:>15} {:>15} {:>15} {:>15} {:>12}\n",
            layout.source(),
            "model",
            "valid",
            "hole",
            "random",
            "sequential",
            "page_test/page",
            "pages/s"
        );
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
            let [valid, hole, random, sequential, page_test] =
                results.workloads().map(|(_, m)| cell(m));
            table += &format!(
                "{:<21} {:>15} {:>15} {:>15} {:>15} {:>15} {:>12.0}\n",
                kind.name(),
                valid,
                hole,
                random,
                sequential,
                page_test,
                results.pages_per_second()
            );
            let row = |workload: &str, m: &Measurement| {
                Row::new(
                    workload,
                    kind.name(),
                    json!({"layout": layout.source(), "workload": workload}),
                    m.clone(),
                )
            };
            let [lookups @ .., (page_test, m)] = results.workloads();
            rows.extend(lookups.into_iter().map(|(w, m)| row(w, m)));
            rows.push(row(page_test, m).with("pages_per_second", results.pages_per_second()));
        }
    }
    let fixup = measure_kernel_fixup(ctx.plan)?;
    table += "\n";
    table += &fixup.text();
    rows.extend(fixup.rows());
    table += "The probe's hole column is a user-space signal round trip; a kernel fault on a vmemmap hole pays the fixup above instead.\n";
    table += "\nSeed (2006): AIM9 page_test 1,042,187 (EXTREME+VMEMMAP table) vs 1,076,976 (VMEMMAP + probe); \
              reaim max 804,000 / 804,844 / 811,181 - \"within noise\".\n";
    let layout_names: Vec<&str> = layouts.iter().map(|l| l.source()).collect();
    Ok(Outcome {
        rows,
        table,
        layout: layout_names.join(","),
    })
}
