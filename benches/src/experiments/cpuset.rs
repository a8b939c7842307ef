//! `cpuset`: cpuset checks under fake NUMA (Paul Jackson et al., 2006).
//! With `numa=fake=64` and a task confined to 43 nodes, every allocation
//! from a node outside the cpuset walks the zonelist and asks
//! `__cpuset_zone_allowed` about each zone; for a kernel (non-hardwall)
//! request on a disallowed node that meant taking `callback_mutex` and
//! walking up to the nearest mem-exclusive cpuset. The seed measured the
//! check at 50 % of profile ticks and system time going from 32 s to 75 s.
//!
//! Three variants, each allocating and freeing single pages on the zone
//! path from node 0 (outside the cpuset):
//! - `unrestricted`: no cpuset;
//! - `restricted`: the 2006 check per zone of the walk;
//! - `restricted-fixed`: pfnlab's fix — the zonelist filtered once when
//!   the cpuset is attached (like the zonelist cache that followed), so the
//!   walk starts at the first allowed zone and checks nothing per zone.
//!
//! The share of time in the check is `1 - fixed / restricted`.

use std::sync::Mutex;

use buddy::AllocError;
use buddy::{Gfp, Kernel, NodeMask, Options, Zone, ZoneId};
use serde_json::json;
use sparsemem::{Layout, NodeId, Order};
use vmemmap::VmemmapOptions;

use super::{Ctx, Outcome, cell};
use crate::CliError;
use crate::models::{Buildable, ModelVisitor, build_allocator};
use crate::report::Row;
use crate::timing::{Measurement, Plan, measure};

/// A cpuset: its nodes, whether it is mem_exclusive, its parent.
struct Cpuset {
    mems_allowed: NodeMask,
    mem_exclusive: bool,
    parent: Option<usize>,
}

/// The cpuset hierarchy and the task, as the 2006 check sees them.
pub struct Cpusets {
    sets: Vec<Cpuset>,
    task_cpuset: usize,
    task_mems_allowed: NodeMask,
    callback_mutex: Mutex<()>,
}

impl Cpusets {
    /// root (all nodes, exclusive) -> job (the allowed nodes, exclusive)
    /// -> task's cpuset (same nodes, not exclusive).
    pub fn new(nodes: &[NodeId], allowed: &NodeMask) -> Cpusets {
        let sets = vec![
            Cpuset {
                mems_allowed: NodeMask::of(nodes.iter().copied()),
                mem_exclusive: true,
                parent: None,
            },
            Cpuset {
                mems_allowed: allowed.clone(),
                mem_exclusive: true,
                parent: Some(0),
            },
            Cpuset {
                mems_allowed: allowed.clone(),
                mem_exclusive: false,
                parent: Some(1),
            },
        ];
        Cpusets {
            sets,
            task_cpuset: 2,
            task_mems_allowed: allowed.clone(),
            callback_mutex: Mutex::new(()),
        }
    }

    fn nearest_exclusive_ancestor(&self, mut cs: usize) -> usize {
        while !self.sets[cs].mem_exclusive {
            match self.sets[cs].parent {
                Some(p) => cs = p,
                None => break,
            }
        }
        cs
    }

    /// `__cpuset_zone_allowed` as of 2006, for a non-hardwall request.
    #[inline(never)]
    pub fn zone_allowed<V>(&self, zone: &Zone<V>) -> bool {
        let node = std::hint::black_box(zone.node);
        if self.task_mems_allowed.test(node) {
            return true;
        }
        let _guard = self
            .callback_mutex
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let cs = self.nearest_exclusive_ancestor(self.task_cpuset);
        self.sets[cs].mems_allowed.test(node)
    }
}

struct Visitor {
    plan: Plan,
    allowed: u16,
}

type Results = Vec<(&'static str, Measurement, usize)>;

impl ModelVisitor for Visitor {
    type Output = Results;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<Results, AllocError> {
        let alloc = build_allocator::<M, Kernel>(layout, options, Options::default())?;
        let nodes = layout.nodes();
        let first_allowed = nodes.len().saturating_sub(usize::from(self.allowed));
        let allowed_nodes = NodeMask::of(nodes[first_allowed..].iter().copied());
        let cpusets = Cpusets::new(&nodes, &allowed_nodes);
        let home = layout.first_node();
        let gfp = Gfp::KERNEL;
        let zonelist = alloc.zonelist(home, gfp)?;
        let fixed: Vec<ZoneId> = zonelist
            .iter()
            .copied()
            .filter(|&z| {
                alloc
                    .zone(z)
                    .is_some_and(|zone| zone.kind <= gfp.highest_zone && cpusets.zone_allowed(zone))
            })
            .collect();
        let skipped = zonelist
            .iter()
            .position(|z| fixed.first() == Some(z))
            .unwrap_or(0);
        let n = self.plan.iters(300_000, 3000);
        let pair = |f: &dyn Fn() -> sparsemem::Pfn| {
            measure(self.plan.trials, || {
                for _ in 0..n {
                    let pfn = f();
                    alloc.free_pages(pfn, Order::ZERO).expect("free");
                }
                n
            })
        };
        let unrestricted = pair(&|| {
            alloc
                .alloc_pages_with(Order::ZERO, gfp, home, |_| true)
                .expect("memory")
        });
        let restricted = pair(&|| {
            alloc
                .alloc_pages_with(Order::ZERO, gfp, home, |z| cpusets.zone_allowed(z))
                .expect("memory")
        });
        let fixed_m = pair(&|| alloc.alloc_pages_from(Order::ZERO, &fixed).expect("memory"));
        Ok(vec![
            ("unrestricted", unrestricted, 0),
            ("restricted", restricted, skipped),
            ("restricted-fixed", fixed_m, 0),
        ])
    }
}

pub(super) fn run(ctx: &Ctx) -> Result<Outcome, CliError> {
    let allowed = ctx.args.allowed.unwrap_or(43);
    let results = ctx.visit(Visitor {
        plan: ctx.plan,
        allowed,
    })?;
    let restricted = results[1].1.ns_per_op.median;
    let fixed = results[2].1.ns_per_op.median;
    let share = (1.0 - fixed / restricted).max(0.0);
    let nodes = ctx.layout.nodes().len();
    let mut table = format!(
        "{nodes} nodes, cpuset of {allowed}; zone-path alloc+free of one page from node 0 (outside the cpuset), GFP_KERNEL\n\n\
         {:<17} {:>20} {:>16}\n",
        "variant", "ns (cycles)/alloc+free", "zones checked"
    );
    let mut rows = Vec::new();
    for (name, m, skipped) in &results {
        let checked = if *name == "restricted" {
            format!("{}", skipped + 1)
        } else {
            "0".into()
        };
        table += &format!("{:<17} {:>20} {:>16}\n", name, cell(m), checked);
        rows.push(
            Row::new(
                *name,
                ctx.model.name(),
                json!({"nodes": nodes, "allowed": allowed}),
                m.clone(),
            )
            .with(
                "zones_checked",
                skipped + usize::from(*name == "restricted"),
            )
            .with(
                "check_share",
                if *name == "restricted" { share } else { 0.0 },
            ),
        );
    }
    table += &format!(
        "\nShare of the restricted allocation spent in the allowed check: {:.0} % (1 - fixed/restricted).\n\
         Seed (2006): __cpuset_zone_allowed was 50 % of profile ticks; sys time 32 s -> 75 s.\n",
        share * 100.0
    );
    Ok(Outcome {
        rows,
        table,
        layout: ctx.layout.source().into(),
    })
}
