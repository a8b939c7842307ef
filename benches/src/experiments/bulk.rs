//! `bulk`: the bulk page allocator (Mel Gorman, 2021). Single alloc+free
//! through the per-CPU list as the baseline, then the list and array bulk
//! interfaces at 1, 2, 3, 4, 8, 16, 32, 64, 128 pages, per page, like
//! Jesper Brouer's `page_bench04_bulk`.

use buddy::AllocError;
use buddy::{Kernel, Options};
use serde_json::json;
use sparsemem::Layout;
use vmemmap::VmemmapOptions;

use super::{Ctx, Outcome, cell};
use crate::CliError;
use crate::models::{Buildable, ModelVisitor, build_allocator};
use crate::report::Row;
use crate::timing::{Measurement, Plan, measure};
use crate::workloads::{bulk_arrays, bulk_lists, pcp_pairs};

/// Bulk sizes, as in the seed.
pub const SIZES: [usize; 9] = [1, 2, 3, 4, 8, 16, 32, 64, 128];
/// The seed's kernel figures: (size, array cycles, list cycles) per page.
const SEED: [(usize, u32, u32); 2] = [(1, 202, 206), (128, 110, 133)];

struct Visitor {
    plan: Plan,
    alloc_options: Options,
}

type Results = (Measurement, Vec<(usize, Measurement, Measurement)>);

impl ModelVisitor for Visitor {
    type Output = Results;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<Results, AllocError> {
        let alloc = build_allocator::<M, Kernel>(layout, options, self.alloc_options)?;
        let mut cpu = alloc.cpu_on(layout.first_node())?;
        let plan = self.plan;
        let pairs = plan.iters(2_000_000, 20_000);
        let single = measure(plan.trials, || {
            std::hint::black_box(pcp_pairs(&mut cpu, pairs));
            pairs
        });
        let mut list = Vec::with_capacity(128);
        let mut slots = vec![None; 128];
        let per_size = SIZES
            .iter()
            .map(|&size| {
                let rounds = plan.iters(2_000_000, 20_000) / size as u64;
                let l = measure(plan.trials, || {
                    std::hint::black_box(bulk_lists(&mut cpu, rounds, size, &mut list));
                    rounds * size as u64
                });
                let a = measure(plan.trials, || {
                    std::hint::black_box(bulk_arrays(&mut cpu, rounds, &mut slots[..size]));
                    rounds * size as u64
                });
                (size, l, a)
            })
            .collect();
        Ok((single, per_size))
    }
}

pub(super) fn run(ctx: &Ctx) -> Result<Outcome, CliError> {
    let (single, per_size) = ctx.visit(Visitor {
        plan: ctx.plan,
        alloc_options: ctx.options(),
    })?;
    let model = ctx.model.name();
    let mut rows = vec![Row::new(
        "single",
        model,
        json!({"bulk": 1}),
        single.clone(),
    )];
    let mut table = format!(
        "single alloc+free (pcp): {} per page   [seed kernel: 199 cycles]\n\n\
         {:>5}  {:>22}  {:>22}  {:>24}\n",
        cell(&single),
        "bulk",
        "list ns (cycles)/page",
        "array ns (cycles)/page",
        "seed kernel list/array"
    );
    for (size, l, a) in per_size {
        let seed = SEED
            .iter()
            .find(|s| s.0 == size)
            .map_or("-".into(), |s| format!("{} / {} cycles", s.2, s.1));
        table += &format!(
            "{:>5}  {:>22}  {:>22}  {:>24}\n",
            size,
            cell(&l),
            cell(&a),
            seed
        );
        rows.push(Row::new("list", model, json!({"bulk": size}), l));
        rows.push(Row::new("array", model, json!({"bulk": size}), a));
    }
    table += &format!(
        "\nCycles are {}, as the kernel's time_bench (get_cycles) reports them.\n",
        crate::timing::COUNTER_UNIT
    );
    Ok(Outcome {
        rows,
        table,
        layout: ctx.layout.source().into(),
    })
}
