//! `flags`: the no-bitmap buddy and atomic page-flag operations (Dave
//! Hansen / Hiroyuki Kamezawa, 2004-2005). 1000 × (allocate 16 MiB of
//! order-0 pages, touch each page's flags, free them) with the 2.6.9 bitmap
//! buddy, the no-bitmap buddy with atomic flag operations, and with
//! non-atomic ones; single-threaded and on several threads.

use buddy::AllocError;
use buddy::{Config, Options, Variant};
use serde_json::json;
use sparsemem::Layout;
use vmemmap::VmemmapOptions;

use super::{Ctx, Outcome, cell};
use crate::CliError;
use crate::models::{Buildable, ModelVisitor, build_allocator};
use crate::report::Row;
use crate::timing::{Measurement, Plan, measure};
use crate::workloads::flags_iteration;

const SEED: [(&str, f64); 3] = [("bitmap", 35.79), ("atomic", 37.58), ("nonatomic", 35.28)];

struct Visitor {
    plan: Plan,
    iterations: u64,
    pages: usize,
    threads: usize,
}

/// (variant, threads, measurement per page)
type Results = Vec<(&'static str, usize, Measurement)>;

fn one<M: Buildable, V: Variant>(
    v: &Visitor,
    layout: &Layout,
    options: VmemmapOptions,
    out: &mut Results,
    name: &'static str,
) -> Result<(), AllocError> {
    let alloc = build_allocator::<M, V>(layout, options, Options::default())?;
    let node = layout.first_node();
    drop(alloc.cpu_on(node)?);
    for threads in [1, v.threads] {
        let m = measure(v.plan.trials, || {
            std::thread::scope(|s| {
                for _ in 0..threads {
                    let alloc = &alloc;
                    s.spawn(move || {
                        let mut cpu = alloc.cpu_on(node).expect("checked above");
                        let mut held = Vec::with_capacity(v.pages);
                        for _ in 0..v.iterations {
                            std::hint::black_box(flags_iteration(&mut cpu, v.pages, &mut held));
                        }
                    });
                }
            });
            v.iterations * v.pages as u64 * threads as u64
        });
        out.push((name, threads, m));
    }
    Ok(())
}

impl ModelVisitor for Visitor {
    type Output = Results;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<Results, AllocError> {
        let mut out = Vec::new();
        one::<M, Config<false, true, false>>(&self, layout, options, &mut out, "bitmap")?;
        one::<M, Config<true, false, false>>(&self, layout, options, &mut out, "atomic")?;
        one::<M, Config<false, false, false>>(&self, layout, options, &mut out, "nonatomic")?;
        Ok(out)
    }
}

pub(super) fn run(ctx: &Ctx) -> Result<Outcome, CliError> {
    let iterations = ctx.args.iterations.unwrap_or(ctx.plan.iters(1000, 5));
    let pages = (16usize << 20) >> ctx.layout.geometry().page_shift();
    let threads = ctx.args.threads.unwrap_or(2).max(1);
    let visitor = Visitor {
        plan: ctx.plan,
        iterations,
        pages,
        threads,
    };
    let results = ctx.visit(visitor)?;
    let model = ctx.model.name();
    let mut table = format!(
        "{iterations} x (allocate {pages} order-0 pages = 16 MiB, touch flags, free); per page and whole run\n\n\
         {:<10} {:>7}  {:>18}  {:>10}  {:>13}  {:>12}  {:>16}\n",
        "variant",
        "threads",
        "ns (cycles)/page",
        "run (s)",
        "per iter (ms)",
        "vs bitmap",
        "seed (SMP) s"
    );
    let bitmap_1 = results
        .iter()
        .find(|r| r.0 == "bitmap" && r.1 == 1)
        .map(|r| r.2.ns_per_op.median);
    let bitmap_n = results
        .iter()
        .find(|r| r.0 == "bitmap" && r.1 == threads)
        .map(|r| r.2.ns_per_op.median);
    let mut rows = Vec::new();
    for (name, t, m) in &results {
        let per_page = m.ns_per_op.median;
        let run_s = per_page * (iterations * pages as u64 * *t as u64) as f64 / 1e9;
        let base = if *t == 1 { bitmap_1 } else { bitmap_n }.unwrap_or(per_page);
        let seed = SEED.iter().find(|s| s.0 == *name).map_or(0.0, |s| s.1);
        table += &format!(
            "{:<10} {:>7}  {:>18}  {:>10.3}  {:>13.3}  {:>11.3}x  {:>9.2} ({:.3}x)\n",
            name,
            t,
            cell(m),
            run_s,
            run_s * 1e3 / iterations as f64,
            per_page / base,
            seed,
            seed / SEED[0].1
        );
        rows.push(
            Row::new(
                *name,
                model,
                json!({"threads": t, "iterations": iterations, "pages": pages}),
                m.clone(),
            )
            .with("run_seconds", run_s)
            .with("ratio_vs_bitmap", per_page / base),
        );
    }
    table += "\nSeed: 2.6.9 bitmap 35.79 s, no-bitmap 37.58 s, no-bitmap non-atomic 35.28 s on SMP; no difference on UP.\n";
    table += "Here the pages come through the per-CPU lists, so buddy flag operations happen in the batched refills and drains.\n";
    Ok(Outcome {
        rows,
        table,
        layout: ctx.layout.source().into(),
    })
}
