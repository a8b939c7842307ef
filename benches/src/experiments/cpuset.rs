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
use crate::models::{Buildable, ModelKind, ModelVisitor, build_allocator, with_model};
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

/// The three ways the experiment allocates.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CpusetVariant {
    /// No cpuset.
    Unrestricted,
    /// The 2006 `__cpuset_zone_allowed` check on every zone of the walk.
    Restricted,
    /// The zonelist filtered once, when the cpuset is attached.
    RestrictedFixed,
}

impl CpusetVariant {
    /// Report order.
    pub const ALL: [CpusetVariant; 3] = [
        CpusetVariant::Unrestricted,
        CpusetVariant::Restricted,
        CpusetVariant::RestrictedFixed,
    ];

    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            CpusetVariant::Unrestricted => "unrestricted",
            CpusetVariant::Restricted => "restricted",
            CpusetVariant::RestrictedFixed => "restricted-fixed",
        }
    }
}

/// What the cpuset experiment measured: one zone-path alloc+free per
/// variant, from the layout's first node, outside a cpuset of its last
/// `allowed` nodes.
#[derive(Clone, Debug)]
pub struct CpusetResults {
    /// Nodes in the layout.
    pub nodes: usize,
    /// Nodes in the cpuset.
    pub allowed: u16,
    /// Zones of the walk before the first allowed one (each pays the check).
    pub zones_skipped: usize,
    /// Per variant, in [`CpusetVariant::ALL`] order.
    pub measurements: [Measurement; 3],
}

impl CpusetResults {
    /// The measurement of one variant.
    pub fn of(&self, variant: CpusetVariant) -> &Measurement {
        &self.measurements[variant as usize]
    }

    /// Zones the variant's walk asks about before it allocates.
    pub fn zones_checked(&self, variant: CpusetVariant) -> usize {
        match variant {
            CpusetVariant::Restricted => self.zones_skipped + 1,
            CpusetVariant::Unrestricted | CpusetVariant::RestrictedFixed => 0,
        }
    }

    /// Share of the restricted allocation spent in the check:
    /// `1 - fixed / restricted`.
    pub fn check_share(&self) -> f64 {
        let restricted = self.of(CpusetVariant::Restricted).ns_per_op.median;
        let fixed = self.of(CpusetVariant::RestrictedFixed).ns_per_op.median;
        (1.0 - fixed / restricted).max(0.0)
    }

    /// The JSON rows.
    pub fn rows(&self, model: &str) -> Vec<Row> {
        CpusetVariant::ALL
            .into_iter()
            .map(|v| {
                let share = if v == CpusetVariant::Restricted {
                    self.check_share()
                } else {
                    0.0
                };
                Row::new(
                    v.name(),
                    model,
                    json!({"nodes": self.nodes, "allowed": self.allowed}),
                    self.of(v).clone(),
                )
                .with("zones_checked", self.zones_checked(v))
                .with("check_share", share)
            })
            .collect()
    }

    /// The printed table, with the seed's figures.
    pub fn render(&self) -> String {
        let mut table = format!(
            "{} nodes, cpuset of {}; zone-path alloc+free of one page from node 0 (outside the cpuset), GFP_KERNEL\n\n\
             {:<17} {:>20} {:>16}\n",
            self.nodes, self.allowed, "variant", "ns (cycles)/alloc+free", "zones checked"
        );
        for v in CpusetVariant::ALL {
            table += &format!(
                "{:<17} {:>20} {:>16}\n",
                v.name(),
                cell(self.of(v)),
                self.zones_checked(v)
            );
        }
        table += &format!(
            "\nShare of the restricted allocation spent in the allowed check: {:.0} % (1 - fixed/restricted).\n\
             Seed (2006): __cpuset_zone_allowed was 50 % of profile ticks; sys time 32 s -> 75 s.\n",
            self.check_share() * 100.0
        );
        table
    }
}

/// Measures the cpuset experiment with model `kind` on `layout`.
pub fn measure_cpuset(
    kind: ModelKind,
    layout: &Layout,
    plan: Plan,
    allowed: u16,
    alloc_options: Options,
) -> Result<CpusetResults, AllocError> {
    with_model(
        kind,
        layout,
        Visitor {
            plan,
            allowed,
            alloc_options,
        },
    )
}

struct Visitor {
    plan: Plan,
    allowed: u16,
    alloc_options: Options,
}

impl ModelVisitor for Visitor {
    type Output = CpusetResults;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<CpusetResults, AllocError> {
        let alloc = build_allocator::<M, Kernel>(layout, options, self.alloc_options)?;
        let nodes = layout.nodes();
        let first_allowed = nodes.len().saturating_sub(usize::from(self.allowed));
        let allowed_nodes = NodeMask::of(nodes[first_allowed..].iter().copied());
        let cpusets = Cpusets::new(&nodes, &allowed_nodes);
        let home = layout.first_node();
        let gfp = Gfp::KERNEL;
        let highest = gfp.gfp_zone().map_err(AllocError::Gfp)?;
        let zonelist = alloc.zonelist(home, gfp)?;
        let fixed: Vec<ZoneId> = zonelist
            .iter()
            .copied()
            .filter(|&z| {
                alloc
                    .zone(z)
                    .is_some_and(|zone| zone.kind <= highest && cpusets.zone_allowed(zone))
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
        Ok(CpusetResults {
            nodes: nodes.len(),
            allowed: self.allowed,
            zones_skipped: skipped,
            measurements: [unrestricted, restricted, fixed_m],
        })
    }
}

pub(super) fn run(ctx: &Ctx) -> Result<Outcome, CliError> {
    let allowed = ctx.args.allowed.unwrap_or(43);
    let results = ctx.named(measure_cpuset(
        ctx.model,
        &ctx.layout,
        ctx.plan,
        allowed,
        ctx.options(),
    ))?;
    Ok(Outcome {
        rows: results.rows(ctx.model.name()),
        table: results.render(),
        layout: ctx.layout.source().into(),
    })
}
