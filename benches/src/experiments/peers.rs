//! `peers`: pfnlab's allocator beside `buddy_system_allocator`'s
//! `FrameAllocator` on the same three workloads, in one run:
//! `hot-pair` (order-0 alloc+free with no split or merge), `split-merge-pair`
//! (each pair splits a max-order block and merges it back), `burst-128`
//! (128 allocations, then 128 frees, per page).

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
use crate::workloads::{bursts, pcp_pairs, zone_pairs};

const WORKLOADS: [&str; 3] = ["hot-pair", "split-merge-pair", "burst-128"];

struct Visitor {
    plan: Plan,
}

impl ModelVisitor for Visitor {
    type Output = Vec<Measurement>;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<Vec<Measurement>, AllocError> {
        let plan = self.plan;
        let alloc = build_allocator::<M, Kernel>(layout, options, Options::default())?;
        let node = layout.first_node();
        let n = plan.iters(2_000_000, 20_000);
        let split = measure(plan.trials, || {
            std::hint::black_box(zone_pairs(&alloc, node, n / 10));
            n / 10
        });
        let mut cpu = alloc.cpu_on(node)?;
        let hot = measure(plan.trials, || {
            std::hint::black_box(pcp_pairs(&mut cpu, n));
            n
        });
        let mut held = Vec::with_capacity(128);
        let burst = measure(plan.trials, || {
            std::hint::black_box(bursts(&mut cpu, n / 128, 128, &mut held));
            n / 128 * 128
        });
        Ok(vec![hot, split, burst])
    }
}

#[cfg(feature = "peers")]
fn frame_allocator(plan: Plan) -> Vec<Measurement> {
    use buddy_system_allocator::FrameAllocator;
    let n = plan.iters(2_000_000, 20_000);
    let frames = 1usize << 20;
    // hot-pair: hold one frame so its buddy is the only free order-0 frame.
    let mut fa = FrameAllocator::<11>::new();
    fa.add_frame(0, frames);
    let _held = fa.alloc(1);
    let hot = measure(plan.trials, || {
        for _ in 0..n {
            let f = fa.alloc(1).expect("frame");
            fa.dealloc(std::hint::black_box(f), 1);
        }
        n
    });
    let mut fa = FrameAllocator::<11>::new();
    fa.add_frame(0, frames);
    let split = measure(plan.trials, || {
        for _ in 0..n / 10 {
            let f = fa.alloc(1).expect("frame");
            fa.dealloc(std::hint::black_box(f), 1);
        }
        n / 10
    });
    let mut held = Vec::with_capacity(128);
    let burst = measure(plan.trials, || {
        for _ in 0..n / 128 {
            for _ in 0..128 {
                held.push(fa.alloc(1).expect("frame"));
            }
            for f in held.drain(..) {
                fa.dealloc(f, 1);
            }
        }
        n / 128 * 128
    });
    vec![hot, split, burst]
}

pub(super) fn run(ctx: &Ctx) -> Result<Outcome, CliError> {
    let ours = ctx.visit(Visitor { plan: ctx.plan })?;
    let model = ctx.model.name();
    let mut rows = Vec::new();
    let mut table = format!(
        "{:<17} {:>22} {:>28} {:>8}\n",
        "workload", "pfnlab ns (cycles)", "buddy_system_allocator", "ratio"
    );
    #[cfg(feature = "peers")]
    let theirs: Vec<Option<Measurement>> =
        frame_allocator(ctx.plan).into_iter().map(Some).collect();
    #[cfg(not(feature = "peers"))]
    let theirs: Vec<Option<Measurement>> = vec![None, None, None];
    for ((workload, mine), other) in WORKLOADS.iter().zip(&ours).zip(&theirs) {
        let (other_cell, ratio) = match other {
            Some(o) => (
                cell(o),
                format!("{:.2}x", o.ns_per_op.median / mine.ns_per_op.median),
            ),
            None => ("(build with --features peers)".into(), "-".into()),
        };
        table += &format!(
            "{:<17} {:>22} {:>28} {:>8}\n",
            workload,
            cell(mine),
            other_cell,
            ratio
        );
        rows.push(Row::new(
            "pfnlab",
            model,
            json!({"workload": workload}),
            mine.clone(),
        ));
        if let Some(o) = other {
            rows.push(
                Row::new(
                    "buddy_system_allocator",
                    "none",
                    json!({"workload": workload}),
                    o.clone(),
                )
                .with(
                    "ratio_vs_pfnlab",
                    o.ns_per_op.median / mine.ns_per_op.median,
                ),
            );
        }
    }
    table += "\npfnlab: hot-pair and burst-128 through the per-CPU lists, split-merge-pair on the zone path (zone lock \
              taken); FrameAllocator<11>: BTreeSet free lists, no lock. Ratio = theirs / ours.\n\
              Reference floors here: hand-written buddy 5 / 40 / 8 ns; FrameAllocator 18 / 320 / 52 ns.\n";
    Ok(Outcome {
        rows,
        table,
        layout: ctx.layout.source().into(),
    })
}
