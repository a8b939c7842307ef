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
use crate::timing::{Measurement, Plan, measure, measure_interleaved};
use crate::workloads::{bulk_arrays, bulk_lists, pcp_pairs};

/// Bulk sizes, as in the seed.
pub const SIZES: [usize; 9] = [1, 2, 3, 4, 8, 16, 32, 64, 128];
/// The seed's kernel figures: (size, array cycles, list cycles) per page.
const SEED: [(usize, u32, u32); 2] = [(1, 202, 206), (128, 110, 133)];
/// The seed's single-page alloc+put, in cycles.
const SEED_SINGLE: f64 = 199.0;

/// `seed` and `ratio_to_seed` (pfnlab's cycles over the seed's) on a row.
fn with_seed(row: Row, seed_cycles: f64) -> Row {
    let ours = row.measurement.cycles_per_op.median;
    row.with("seed", json!({ "cycles_per_page": seed_cycles }))
        .with("ratio_to_seed", ours / seed_cycles)
}

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
        let mut list = buddy::PageChain::new(&alloc);
        let mut slots = vec![None; 128];
        let per_size = SIZES
            .iter()
            .map(|&size| {
                let rounds = plan.iters(2_000_000, 20_000) / size as u64;
                let pages = rounds * size as u64;
                // List and array trials interleaved: the machine's drift
                // falls on both alike.
                let cpu = std::cell::RefCell::new(&mut cpu);
                let mut l = || {
                    std::hint::black_box(bulk_lists(*cpu.borrow_mut(), rounds, size, &mut list));
                    pages
                };
                let mut a = || {
                    std::hint::black_box(bulk_arrays(
                        *cpu.borrow_mut(),
                        rounds,
                        &mut slots[..size],
                    ));
                    pages
                };
                let mut m = measure_interleaved(plan.trials, &mut [&mut l, &mut a]).into_iter();
                let (l, a) = (m.next().expect("two"), m.next().expect("two"));
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
    let mut rows = vec![with_seed(
        Row::new("single", model, json!({"bulk": 1}), single.clone()),
        SEED_SINGLE,
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
        let mut list = Row::new("list", model, json!({"bulk": size}), l);
        let mut array = Row::new("array", model, json!({"bulk": size}), a);
        if let Some(&(_, seed_array, seed_list)) = SEED.iter().find(|s| s.0 == size) {
            list = with_seed(list, f64::from(seed_list));
            array = with_seed(array, f64::from(seed_array));
        }
        rows.push(list);
        rows.push(array);
    }
    // The gain from 1 to 128 pages per call, beside the seed's.
    let cycles = |variant: &str, size: usize| {
        rows.iter()
            .find(|r| r.variant == variant && r.params["bulk"] == size)
            .map(|r| r.measurement.cycles_per_op.median)
    };
    let at_128 = (cycles("list", 128), cycles("array", 128));
    let gains: Vec<(&str, f64, f64, u32, u32)> = [
        ("list", SEED[0].2, SEED[1].2),
        ("array", SEED[0].1, SEED[1].1),
    ]
    .into_iter()
    .filter_map(|(variant, seed_1, seed_128)| {
        let (one, many) = (cycles(variant, 1)?, cycles(variant, 128)?);
        let seed = 1.0 - f64::from(seed_128) / f64::from(seed_1);
        Some((variant, 1.0 - many / one, seed, seed_1, seed_128))
    })
    .collect();
    for (variant, ours, seed, seed_1, seed_128) in gains {
        table += &format!(
            "{variant}: 1 -> 128 pages per call saves {:.0} % per page; the seed's kernel saved {:.0} % ({seed_1} -> {seed_128} cycles)\n",
            ours * 100.0,
            seed * 100.0
        );
        if let Some(r) = rows
            .iter_mut()
            .find(|r| r.variant == variant && r.params["bulk"] == 128)
        {
            r.extra.insert("gain_from_1".into(), json!(ours));
            r.extra.insert("seed_gain_from_1".into(), json!(seed));
        }
    }
    // What threading the pages through their lru links costs over the
    // array, per page at 128, beside the seed's gap.
    if let (Some(list), Some(array)) = at_128 {
        let seed_gap = f64::from(SEED[1].2) - f64::from(SEED[1].1);
        table += &format!(
            "list - array at 128: {:+.0} cycles per page; the seed's kernel {:+.0} ({} - {}): the list's link writes on allocation and its walk (one dependent load per page) on free\n",
            list - array,
            seed_gap,
            SEED[1].2,
            SEED[1].1
        );
        if let Some(r) = rows
            .iter_mut()
            .find(|r| r.variant == "list" && r.params["bulk"] == 128)
        {
            r.extra
                .insert("cycles_over_array".into(), json!(list - array));
            r.extra
                .insert("seed_cycles_over_array".into(), json!(seed_gap));
        }
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
