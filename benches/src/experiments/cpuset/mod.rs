//! `cpuset`: cpuset checks under fake NUMA (Paul Jackson, David Rientjes,
//! Andrew Morton, 2006). With `numa=fake=64`, a job confined to a cpuset
//! of 43 nodes ran `usemem` until its nodes were nearly full; system time
//! went from 32 s to 75 s and readprofile put `__cpuset_zone_allowed` at
//! the top.
//!
//! The state: [`preset:numa-fake-64`], the cpuset's zones filled
//! usemem-style until each is below its low watermark (between min and
//! low), and the task faulting pages on node 0, outside the cpuset. Every
//! allocation then fails the first pass and runs the second. Four walks
//! over the same state, each its era's `__alloc_pages` for an order-0
//! `GFP_HIGHUSER` page:
//!
//! - **2.6.18**: pass 1 with `__GFP_HARDWALL` and the low mark, where
//!   `__cpuset_zone_allowed` answers every zone from the task's
//!   `mems_allowed`; `wakeup_kswapd` on every zone of the zonelist; pass 2
//!   with the min mark and without `__GFP_HARDWALL`, where every zone
//!   outside the cpuset takes `callback_mutex` and walks up to the nearest
//!   mem-exclusive cpuset before it is refused.
//! - **2.6.19**: the same passes through the zonelist cache
//!   (`zlc_setup`, `zlc_zone_worth_trying`, `zlc_mark_zone_full`): a
//!   full-zones bitmap zapped once a second, `z_to_n` for the node test,
//!   set up after the first zone is tried; a scan that finds nothing is
//!   repeated without the cache.
//! - **6.18**: the zonelist iterator filters by the task's nodemask
//!   (`for_next_zone_zonelist_nodemask`), so zones outside the cpuset are
//!   skipped by a bit test; the slow path's `__cpuset_zone_allowed` only
//!   sees allowed zones.
//! - **unrestricted**: no cpuset, the same state: node 0's own zone
//!   serves the request in pass 1.
//!
//! The check's share is measured by running the 2.6.18 walk once more with
//! `__cpuset_zone_allowed` answered from a table ([`CpusetWalk::V2_6_18Table`]):
//! `1 - table / 2.6.18`.
//!
//! [`preset:numa-fake-64`]: sparsemem::Layout::preset

mod seed;
mod walk;

pub use seed::{
    SEED_CHECK_TICKS, SEED_HZ, SEED_SYSTEM_SECONDS, seed_check_seconds, seed_check_share,
    seed_slowdown,
};
pub use walk::{CpusetWalk, Cpusets, WalkCounts, Walker, fill};

use buddy::AllocError;
use buddy::{Allocator, BuddyModel, Kernel, NodeMask, Options};
use serde::Serialize;
use sparsemem::{Layout, NodeId};
use vmemmap::VmemmapOptions;

use super::{Ctx, Experiment, ExperimentId, cell};
use crate::error::RunError;
use crate::models::{Buildable, ModelKind, ModelVisitor, build_allocator, with_model};
use crate::report::Row;
use crate::spread::{Comparison, Interval, NOISE_MARK, ratio_cell, ratio_text};
use crate::threads::{Placement, on_threads};
use crate::timing::{Measurement, Plan};
use seed::CpusetSeed;

/// What the cpuset experiment measured.
#[derive(Clone, Debug)]
pub struct CpusetResults {
    /// Nodes in the layout.
    pub nodes: usize,
    /// Nodes in the cpuset.
    pub allowed: u16,
    /// Allocations per trial.
    pub pairs: u64,
    /// Per walk, in [`CpusetWalk::ALL`] order: alloc+free time and what
    /// one trial's walks did.
    pub runs: Vec<(CpusetWalk, Measurement, WalkCounts)>,
    /// This host's own anonymous page fault, store and unmap per page
    /// ([`host_fault`]): the system time around each allocation that the
    /// seed's 32 s mostly were.
    pub host_fault: Measurement,
    /// Tasks of the job faulting at once in the contended runs (this
    /// machine's CPUs).
    pub tasks: usize,
    /// Per walk, ns per page with `tasks` tasks faulting at once (wall
    /// time over all their pages): `callback_mutex` and the zone locks
    /// contended.
    pub contended: Vec<(CpusetWalk, Measurement)>,
}

/// This host's cost per page of what surrounds an allocation in the
/// seed's `usemem`: map 16 MiB anonymous, store to every page (a fault,
/// the kernel's allocation and `clear_page`), unmap; `rounds` times.
/// Returns the pages touched.
pub fn host_fault(rounds: u64) -> u64 {
    const LEN: usize = 16 << 20;
    const PAGE: usize = 4096;
    for _ in 0..rounds {
        let Ok(mut map) = memmap2::MmapMut::map_anon(LEN) else {
            return 0;
        };
        for offset in (0..LEN).step_by(PAGE) {
            map[offset] = 1;
        }
        std::hint::black_box(&map);
    }
    rounds * (LEN / PAGE) as u64
}

impl CpusetResults {
    fn of(&self, walk: CpusetWalk) -> Option<&(CpusetWalk, Measurement, WalkCounts)> {
        self.runs.iter().find(|r| r.0 == walk)
    }

    fn ns(&self, walk: CpusetWalk) -> f64 {
        self.of(walk).map_or(f64::NAN, |r| r.1.ns_per_op.median)
    }

    /// Share of the 2.6.18 allocation spent in `__cpuset_zone_allowed`
    /// beyond a table lookup: `1 - table / 2.6.18`.
    pub fn check_share(&self) -> f64 {
        (1.0 - self.ns(CpusetWalk::V2_6_18Table) / self.ns(CpusetWalk::V2_6_18)).max(0.0)
    }

    /// The host's fault cost per page, ns.
    fn fault_ns(&self) -> f64 {
        self.host_fault.ns_per_op.median
    }

    /// System-time-like cost per page: the host's fault, with the
    /// unrestricted allocation in it replaced by this walk's.
    pub fn system_ns(&self, walk: CpusetWalk) -> f64 {
        self.fault_ns() + self.ns(walk) - self.ns(CpusetWalk::Unrestricted)
    }

    /// A walk's system-time-like cost over the unrestricted one's (the
    /// seed: 75 s / 32 s).
    pub fn slowdown(&self, walk: CpusetWalk) -> f64 {
        self.system_ns(walk) / self.system_ns(CpusetWalk::Unrestricted)
    }

    /// [`CpusetResults::slowdown`] with its interval: per trial of the
    /// interleaved walks, `(fault + walk - unrestricted) / fault`, the
    /// host's fault held at its median (it is timed on its own).
    pub fn slowdown_interval(&self, walk: CpusetWalk) -> Option<Interval> {
        let (w, u) = (&self.of(walk)?.1, &self.of(CpusetWalk::Unrestricted)?.1);
        let (w, u) = (&w.ns_per_op.trials, &u.ns_per_op.trials);
        if w.len() != u.len() {
            return None;
        }
        let fault = self.fault_ns();
        let per_trial: Vec<f64> = w
            .iter()
            .zip(u)
            .map(|(w, u)| (fault + w - u) / fault)
            .collect();
        Interval::of_median(&per_trial).ok()
    }

    /// [`CpusetResults::contention`] with its interval (the contended runs
    /// are timed apart from the single-task ones: unpaired).
    pub fn contention_interval(&self, walk: CpusetWalk) -> Option<Interval> {
        let (_, contended) = self.contended.iter().find(|(w, _)| *w == walk)?;
        let alone = &self.of(walk)?.1;
        Interval::between(contended, alone)
            .ok()
            .map(|i| i.scaled(self.tasks as f64))
    }

    /// The check's share of the 2.6.18 system-time-like cost (the seed:
    /// 42.4 s of 75 s).
    pub fn check_share_of_system(&self) -> f64 {
        (self.ns(CpusetWalk::V2_6_18) - self.ns(CpusetWalk::V2_6_18Table)).max(0.0)
            / self.system_ns(CpusetWalk::V2_6_18)
    }

    /// Seconds for the seed's job at this walk's cost: the unrestricted
    /// run scaled to the seed's 32 s.
    pub fn system_seconds(&self, walk: CpusetWalk) -> f64 {
        SEED_SYSTEM_SECONDS.0 * self.slowdown(walk)
    }

    fn contended_ns(&self, walk: CpusetWalk) -> f64 {
        self.contended
            .iter()
            .find(|(w, _)| *w == walk)
            .map_or(f64::NAN, |(_, m)| m.ns_per_op.median)
    }

    /// With `tasks` tasks at once: a walk's cost per page of one task
    /// (wall time per page times the tasks) over the same walk's with one.
    pub fn contention(&self, walk: CpusetWalk) -> f64 {
        self.contended_ns(walk) * self.tasks as f64 / self.ns(walk)
    }

    /// The JSON rows, with the seed's figures beside them.
    pub fn rows(&self, model: ModelKind) -> Vec<CpusetRow> {
        self.runs
            .iter()
            .map(|(walk, m, c)| {
                let per = |v: u64| v as f64 / c.allocs.max(1) as f64;
                let seeded = *walk == CpusetWalk::V2_6_18;
                let extra = CpusetExtra {
                    cpuset_checks_per_alloc: per(c.cpuset_checks),
                    mutex_per_alloc: per(c.mutex_acquisitions),
                    watermark_checks_per_alloc: per(c.watermark_checks),
                    kswapd_wakeups_per_alloc: per(c.kswapd_wakeups),
                    zones_skipped_per_alloc: per(c.zones_skipped),
                    zlc_rescans_per_alloc: per(c.zlc_rescans),
                    system_ns_per_page: self.system_ns(*walk),
                    host_fault_ns_per_page: self.fault_ns(),
                    slowdown: self.slowdown(*walk),
                    tasks: self.tasks,
                    tasks_ns_per_page: self.contended_ns(*walk),
                    contention: self.contention(*walk),
                    system_seconds_at_seed_scale: self.system_seconds(*walk),
                    check_share_of_alloc: seeded.then(|| self.check_share()),
                    check_share: seeded.then(|| self.check_share_of_system()),
                    seed: seeded.then(CpusetSeed::figures),
                    ratio_to_seed: seeded.then(|| self.slowdown(*walk) / seed_slowdown()),
                    slowdown_interval: self.slowdown_interval(*walk),
                    contention_interval: self.contention_interval(*walk),
                    ratio_to_seed_interval: self
                        .slowdown_interval(*walk)
                        .filter(|_| seeded)
                        .map(|i| i.scaled(1.0 / seed_slowdown())),
                    check_share_to_seed: seeded
                        .then(|| self.check_share_of_system() / seed_check_share()),
                };
                let params = CpusetParams {
                    nodes: self.nodes,
                    allowed: self.allowed,
                    era: walk.era().name(),
                };
                Row::new(*walk, model, params, m.clone(), extra)
            })
            .collect()
    }

    /// The printed table, with the seed's figures.
    pub fn render(&self) -> String {
        let mut table = format!(
            "{} nodes, a cpuset of the last {} filled below their low watermark; the task on node 0 faults and frees {} GFP_HIGHUSER pages per trial\n\n\
             {:<14} {:>6}  {:>18}  {:>9}  {:>20}  {:>7}  {:>6}  {:>6}  {:>6}  {:>6}  {:>7}\n",
            self.nodes,
            self.allowed,
            self.pairs,
            "walk",
            "era",
            "ns (cycles)/page",
            "system ns",
            "vs unres",
            "checks",
            "mutex",
            "wmark",
            "kswapd",
            "skip",
            "rescan"
        );
        for (walk, m, c) in &self.runs {
            let per = |v: u64| v as f64 / c.allocs.max(1) as f64;
            table += &format!(
                "{:<14} {:>6}  {:>18}  {:>9.0}  {:>20}  {:>7.1}  {:>6.1}  {:>6.1}  {:>6.1}  {:>6.1}  {:>7.2}\n",
                walk.name(),
                walk.era().name(),
                cell(m),
                self.system_ns(*walk),
                self.slowdown_interval(*walk)
                    .map_or("n/a".into(), |i| ratio_cell(&i)),
                per(c.cpuset_checks),
                per(c.mutex_acquisitions),
                per(c.watermark_checks),
                per(c.kswapd_wakeups),
                per(c.zones_skipped),
                per(c.zlc_rescans)
            );
        }
        table += &format!(
            "\nPer allocation: cpuset checks, callback_mutex acquisitions, watermark checks, kswapd wakeups, zones skipped by a bit test, scans repeated without the cache.\n\
             system ns: this host's anonymous fault, store and unmap per page ({}), with its allocation replaced by the walk's.\n\
             {NOISE_MARK}; vs unres holds the host's fault at its median.\n\
             2.6.18 / unrestricted = {} system time; at the seed's scale {:.0} s -> {:.0} s. Seed: {:.0} s -> {:.0} s ({:.2}x).\n\
             __cpuset_zone_allowed beyond a table lookup: {:.0} % of the 2.6.18 allocation, {:.0} % of its system time. \
             Seed: {:.0} readprofile ticks at HZ={:.0} = {:.1} s of the {:.0} s, {:.0} % (its \"50.47\" is readprofile's load, ticks over function size, not a percentage).\n\n\
             With {} tasks faulting at once (wall ns per page over all their pages; per task, over one task alone):\n",
            cell(&self.host_fault),
            self.slowdown_interval(CpusetWalk::V2_6_18)
                .map_or("n/a".into(), |i| ratio_text(&i)),
            SEED_SYSTEM_SECONDS.0,
            self.system_seconds(CpusetWalk::V2_6_18),
            SEED_SYSTEM_SECONDS.0,
            SEED_SYSTEM_SECONDS.1,
            seed_slowdown(),
            self.check_share() * 100.0,
            self.check_share_of_system() * 100.0,
            SEED_CHECK_TICKS,
            SEED_HZ,
            seed_check_seconds(),
            SEED_SYSTEM_SECONDS.1,
            seed_check_share() * 100.0,
            self.tasks
        );
        for (walk, m) in &self.contended {
            table += &format!(
                "  {:<14} {:>18} per page, {} per task\n",
                walk.name(),
                cell(m),
                self.contention_interval(*walk)
                    .map_or("n/a".into(), |i| ratio_text(&i))
            );
        }
        table
    }
}

/// Measures the cpuset experiment with model `kind` on `layout`: a cpuset
/// of the last `allowed` nodes, `alloc_options` for everything but the
/// era, which each walk sets; the contended runs with `tasks` tasks.
pub fn measure_cpuset(
    kind: ModelKind,
    layout: &Layout,
    plan: Plan,
    allowed: u16,
    tasks: usize,
    alloc_options: Options,
) -> Result<CpusetResults, AllocError> {
    with_model(
        kind,
        layout,
        Visitor {
            plan,
            allowed,
            tasks,
            alloc_options,
        },
    )
}

struct Visitor {
    plan: Plan,
    allowed: u16,
    tasks: usize,
    alloc_options: Options,
}

impl ModelVisitor for Visitor {
    type Output = CpusetResults;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<CpusetResults, AllocError> {
        let nodes = layout.nodes();
        let first_allowed = nodes.len().saturating_sub(usize::from(self.allowed));
        let allowed = NodeMask::of(nodes[first_allowed..].iter().copied());
        let cpusets = Cpusets::new(&nodes, &allowed);
        let home = layout.first_node();
        // One allocator per walk, so each walks its own filled state.
        let mut allocs = Vec::new();
        for walk in CpusetWalk::ALL {
            let options_for = Options {
                era: walk.era(),
                ..self.alloc_options
            };
            allocs.push(build_allocator::<M, Kernel>(layout, options, options_for)?);
        }
        let mut walkers = Vec::new();
        for (walk, alloc) in CpusetWalk::ALL.into_iter().zip(&allocs) {
            walkers.push(Walker::new(walk, alloc, &cpusets, home)?);
        }
        let pairs = self.plan.iters(20_000, 500);
        // Counts of one trial's worth, taken before timing.
        let counts: Vec<WalkCounts> = walkers
            .iter_mut()
            .map(|w| {
                let before = w.counts();
                w.pairs(pairs);
                w.counts().since(before)
            })
            .collect();
        let measured = self
            .plan
            .measure_interleaved(&mut walkers, |w| w.pairs(pairs));
        drop(walkers);
        let rounds = self.plan.iters(40, 2);
        let host = self.plan.measure(|| host_fault(rounds));
        let tasks = self.tasks.max(1);
        let contended = CpusetWalk::ALL
            .into_iter()
            .zip(&allocs)
            .map(|(walk, alloc)| {
                let ns: Vec<f64> = (0..self.plan.trials.max(1))
                    .map(|_| tasks_ns(walk, alloc, &cpusets, home, tasks, pairs))
                    .collect();
                (walk, Measurement::from_ns(ns))
            })
            .collect();
        Ok(CpusetResults {
            nodes: nodes.len(),
            allowed: self.allowed,
            pairs,
            host_fault: host,
            tasks,
            contended,
            runs: CpusetWalk::ALL
                .into_iter()
                .zip(measured)
                .zip(counts)
                .map(|((w, m), c)| (w, m, c))
                .collect(),
        })
    }
}

/// `tasks` tasks of the job, each on its own thread with its own per-CPU
/// handle and walk over the shared allocator and cpusets, faulting and
/// freeing `pairs` pages at once; returns wall ns per page over all
/// their pages (the fill before the start is not timed).
fn tasks_ns<M: BuddyModel>(
    walk: CpusetWalk,
    alloc: &Allocator<M, Kernel>,
    cpusets: &Cpusets,
    home: NodeId,
    tasks: usize,
    pairs: u64,
) -> f64 {
    // A task whose walk could not be set up still joins the start, so
    // none waits for ever.
    let joined = on_threads(
        tasks,
        Placement::Free,
        |_| Walker::new(walk, alloc, cpusets, home).ok(),
        |_, walker| {
            if let Some(mut w) = walker {
                w.pairs(pairs);
            }
        },
    );
    joined.elapsed.as_nanos() as f64 / (tasks as u64 * pairs).max(1) as f64
}

/// A row's parameters.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct CpusetParams {
    /// Nodes in the layout.
    pub nodes: usize,
    /// Nodes in the cpuset.
    pub allowed: u16,
    /// The walk's era.
    pub era: &'static str,
}

/// A row's extra fields.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct CpusetExtra {
    /// `__cpuset_zone_allowed` calls per allocation.
    pub cpuset_checks_per_alloc: f64,
    /// `callback_mutex` acquisitions per allocation.
    pub mutex_per_alloc: f64,
    /// `zone_watermark_ok` calls per allocation.
    pub watermark_checks_per_alloc: f64,
    /// `wakeup_kswapd` calls per allocation.
    pub kswapd_wakeups_per_alloc: f64,
    /// Zones skipped by a bit test per allocation.
    pub zones_skipped_per_alloc: f64,
    /// Scans repeated without the zonelist cache per allocation.
    pub zlc_rescans_per_alloc: f64,
    /// The host's fault with its allocation replaced by the walk's.
    pub system_ns_per_page: f64,
    /// The host's own fault, store and unmap per page.
    pub host_fault_ns_per_page: f64,
    /// System-time-like cost over the unrestricted walk's.
    pub slowdown: f64,
    /// Tasks faulting at once in the contended run.
    pub tasks: usize,
    /// Their wall ns per page.
    pub tasks_ns_per_page: f64,
    /// Per task, over one task alone.
    pub contention: f64,
    /// The seed's job at this cost, s.
    pub system_seconds_at_seed_scale: f64,
    /// 2.6.18: the check's share of the allocation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check_share_of_alloc: Option<f64>,
    /// 2.6.18: the check's share of the system time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check_share: Option<f64>,
    /// 2.6.18: the seed's figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<CpusetSeed>,
    /// 2.6.18: our slowdown over the seed's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_seed: Option<f64>,
    /// [`CpusetExtra::slowdown`] with its interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slowdown_interval: Option<Interval>,
    /// [`CpusetExtra::contention`] with its interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contention_interval: Option<Interval>,
    /// [`CpusetExtra::ratio_to_seed`] with its interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_seed_interval: Option<Interval>,
    /// 2.6.18: our check share over the seed's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check_share_to_seed: Option<f64>,
}

/// One row of `bench cpuset`'s report.
pub type CpusetRow = Row<CpusetWalk, CpusetParams, CpusetExtra>;

/// `bench cpuset`'s parameters.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpusetOptions {
    /// Nodes in the cpuset (default 43).
    pub allowed: Option<u16>,
    /// Tasks faulting at once (default: the machine's CPUs, at least 2).
    pub tasks: Option<usize>,
}

/// The experiment `bench cpuset`.
pub struct Cpuset;

impl Experiment for Cpuset {
    const ID: ExperimentId = ExperimentId::Cpuset;
    type Params = CpusetOptions;
    type Results = CpusetResults;
    type Row = CpusetRow;

    fn measure(ctx: &Ctx, p: &CpusetOptions) -> Result<CpusetResults, RunError> {
        ctx.named(measure_cpuset(
            ctx.model,
            &ctx.layout,
            ctx.plan,
            p.allowed.unwrap_or(43),
            p.tasks.unwrap_or(ctx.machine.cores.max(2)),
            ctx.options(),
        ))
    }

    fn rows(ctx: &Ctx, results: &CpusetResults) -> Vec<CpusetRow> {
        results.rows(ctx.model)
    }

    fn render(_: &Ctx, results: &CpusetResults) -> String {
        results.render()
    }

    fn comparisons(_: &Ctx, results: &CpusetResults) -> Vec<Comparison> {
        let mut out = Vec::new();
        for (walk, _, _) in &results.runs {
            if *walk == CpusetWalk::Unrestricted {
                continue;
            }
            if let Some(i) = results.slowdown_interval(*walk) {
                let what = format!("{} / unrestricted: system time", walk.name());
                out.push(Comparison::from_interval(what, i));
            }
        }
        for (walk, _) in &results.contended {
            if let Some(i) = results.contention_interval(*walk) {
                let what = format!("{}: per task, {} tasks / one", walk.name(), results.tasks);
                out.push(Comparison::from_interval(what, i));
            }
        }
        out
    }
}
