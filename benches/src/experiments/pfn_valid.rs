//! `pfn-valid`: fault-probed `pfn_valid` for SPARSEMEM_VMEMMAP (KAMEZAWA
//! Hiroyuki, 2006) against SPARSEMEM_EXTREME and stock VMEMMAP: the cost
//! of one call (valid, hole, random mix, sequential) and an allocation
//! workload like AIM9 `page_test` with the hole check on every merge.

use buddy::AllocError;
use buddy::{Gfp, KernelHoleCheck, Options};
use serde_json::json;
use sparsemem::{Layout, Order, Pfn};
use vmemmap::VmemmapOptions;

use super::{Ctx, Outcome, cell};
use crate::CliError;
use crate::models::{Buildable, ModelKind, ModelVisitor, build_allocator, with_model_options};
use crate::report::Row;
use crate::timing::{Measurement, Plan, measure};
use crate::workloads::{XorShift, count_valid, count_valid_sequential, hole_pfns, valid_pfns};

struct Visitor {
    plan: Plan,
    slow_holes: bool,
}

/// (workload, measurement, extra: pages per second for page_test)
type Results = Vec<(&'static str, Measurement)>;

impl ModelVisitor for Visitor {
    type Output = Results;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<Results, AllocError> {
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
        let first = layout.pfn_span().0;
        let mut out = Vec::new();
        for (name, set) in [("valid", &valid), ("hole", &holes), ("random", &mix)] {
            out.push((
                name,
                measure(plan.trials, || {
                    std::hint::black_box(count_valid(&model, set));
                    set.len() as u64
                }),
            ));
        }
        out.push((
            "sequential",
            measure(plan.trials, || {
                std::hint::black_box(count_valid_sequential(&model, first, n as u64));
                n as u64
            }),
        ));
        drop(model);
        let alloc = build_allocator::<M, KernelHoleCheck>(layout, options, Options::default())?;
        let node = layout.first_node();
        let rounds = plan.iters(4000, 40);
        let mut held = Vec::with_capacity(512);
        out.push((
            "page_test",
            measure(plan.trials, || {
                for _ in 0..rounds {
                    for _ in 0..512 {
                        held.push(
                            alloc
                                .alloc_pages(Order::ZERO, Gfp::MOVABLE, node, None)
                                .expect("memory"),
                        );
                    }
                    for pfn in held.drain(..) {
                        alloc.free_pages(pfn, Order::ZERO).expect("free");
                    }
                }
                rounds * 512
            }),
        ));
        Ok(out)
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
    let mut table = String::from(
        "median ns per op (TSC cycles); page_test: zone-path alloc of 512 pages then free, hole check on\n",
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
                slow_holes: matches!(kind.name(), "vmemmap-probe" | "vmemmap-uffd-sigbus"),
            };
            let results = match with_model_options(kind, layout, VmemmapOptions::default(), visitor)
            {
                Ok(r) => r,
                Err(e) => {
                    table += &format!("{:<21} not built: {e}\n", kind.name());
                    continue;
                }
            };
            let cells: Vec<String> = results.iter().map(|(_, m)| cell(m)).collect();
            let page_test = &results.last().expect("page_test").1;
            let pages_per_sec = 1e9 / page_test.ns_per_op.median;
            table += &format!(
                "{:<21} {:>15} {:>15} {:>15} {:>15} {:>15} {:>12.0}\n",
                kind.name(),
                cells[0],
                cells[1],
                cells[2],
                cells[3],
                cells[4],
                pages_per_sec
            );
            for (workload, m) in results {
                let mut row = Row::new(
                    workload,
                    kind.name(),
                    json!({"layout": layout.source(), "workload": workload}),
                    m.clone(),
                );
                if workload == "page_test" {
                    row = row.with("pages_per_second", 1e9 / m.ns_per_op.median);
                }
                rows.push(row);
            }
        }
    }
    table += "\nSeed (2006): AIM9 page_test 1,042,187 (EXTREME+VMEMMAP table) vs 1,076,976 (VMEMMAP + probe); \
              reaim max 804,000 / 804,844 / 811,181 - \"within noise\".\n";
    let layout_names: Vec<&str> = layouts.iter().map(|l| l.source()).collect();
    Ok(Outcome {
        rows,
        table,
        layout: layout_names.join(","),
    })
}
