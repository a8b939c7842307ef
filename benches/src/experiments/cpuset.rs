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

use std::sync::Mutex;
use std::time::{Duration, Instant};

use buddy::{AllocError, RequestError};
use buddy::{Allocator, Era, Gfp, Kernel, NodeMask, Options, PerCpu, ZoneId, ZoneType};
use serde_json::json;
use sparsemem::{Layout, MemoryModel, NodeId, Order, Pfn};
use vmemmap::VmemmapOptions;

use super::legacy::{Outcome, legacy_experiment};
use super::{Ctx, Knobs, cell};
use crate::error::RunError;
use crate::models::{Buildable, ModelKind, ModelVisitor, build_allocator, with_model};
use crate::report::Row;
use crate::timing::{Measurement, Plan, measure_interleaved};

/// The seed's system time without and with the cpuset, in seconds.
pub const SEED_SYSTEM_SECONDS: (f64, f64) = (32.0, 75.0);
/// readprofile ticks in `__cpuset_zone_allowed` in the seed's profile.
pub const SEED_CHECK_TICKS: f64 = 10_599.0;
/// The seed kernel's timer frequency (a tick is 4 ms).
pub const SEED_HZ: f64 = 250.0;

/// The seed's check time: its ticks at `HZ` (about 42 s).
pub fn seed_check_seconds() -> f64 {
    SEED_CHECK_TICKS / SEED_HZ
}

/// The seed's share of system time in the check (42.4 s of 75 s).
pub fn seed_check_share() -> f64 {
    seed_check_seconds() / SEED_SYSTEM_SECONDS.1
}

/// The seed's slowdown of the restricted run (75 s / 32 s).
pub fn seed_slowdown() -> f64 {
    SEED_SYSTEM_SECONDS.1 / SEED_SYSTEM_SECONDS.0
}

/// A cpuset: its nodes, whether it is mem_exclusive, its parent.
struct CpusetNode {
    mems_allowed: NodeMask,
    mem_exclusive: bool,
    parent: Option<usize>,
}

/// The cpuset hierarchy and the task, as `__cpuset_zone_allowed` sees
/// them: root (every node, exclusive) → the job (the allowed nodes,
/// exclusive) → the task's cpuset (the same nodes, not exclusive).
pub struct Cpusets {
    sets: Vec<CpusetNode>,
    task_cpuset: usize,
    task_mems_allowed: NodeMask,
    callback_mutex: Mutex<()>,
}

impl Cpusets {
    /// The hierarchy over `nodes` with the task confined to `allowed`.
    pub fn new(nodes: &[NodeId], allowed: &NodeMask) -> Cpusets {
        let sets = vec![
            CpusetNode {
                mems_allowed: NodeMask::of(nodes.iter().copied()),
                mem_exclusive: true,
                parent: None,
            },
            CpusetNode {
                mems_allowed: allowed.clone(),
                mem_exclusive: true,
                parent: Some(0),
            },
            CpusetNode {
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

    /// The task's `mems_allowed`.
    pub fn mems_allowed(&self) -> &NodeMask {
        &self.task_mems_allowed
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

    /// `__cpuset_zone_allowed` as of 2.6.18 for a zone on `node`: allowed
    /// if the task's `mems_allowed` has the node; else refused at once for
    /// a `__GFP_HARDWALL` request; else decided under `callback_mutex` by
    /// the nearest mem-exclusive ancestor. Counts what it did.
    #[inline(never)]
    pub fn zone_allowed(&self, node: NodeId, hardwall: bool, counts: &mut WalkCounts) -> bool {
        counts.cpuset_checks += 1;
        if self.task_mems_allowed.test(std::hint::black_box(node)) {
            return true;
        }
        if hardwall {
            return false;
        }
        counts.mutex_acquisitions += 1;
        let _guard = self
            .callback_mutex
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let cs = self.nearest_exclusive_ancestor(self.task_cpuset);
        self.sets[cs].mems_allowed.test(node)
    }
}

/// What the walks did, summed over the allocations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalkCounts {
    /// Allocations served.
    pub allocs: u64,
    /// `__cpuset_zone_allowed` calls.
    pub cpuset_checks: u64,
    /// Of those, the ones that took `callback_mutex`.
    pub mutex_acquisitions: u64,
    /// `zone_watermark_ok` calls in the passes.
    pub watermark_checks: u64,
    /// `wakeup_kswapd` calls.
    pub kswapd_wakeups: u64,
    /// Zones the zonelist cache or the nodemask skipped with a bit test.
    pub zones_skipped: u64,
    /// Scans repeated without the zonelist cache.
    pub zlc_rescans: u64,
}

/// The zonelist cache of 2.6.19 for one zonelist.
struct Zlc {
    /// `fullzones`: one bit per zonelist index.
    fullzones: Vec<u64>,
    /// `z_to_n`: each zonelist entry's node.
    z_to_n: Vec<NodeId>,
    /// `last_full_zap`.
    last_full_zap: Instant,
}

impl Zlc {
    /// `build_zonelist_cache`.
    fn new(nodes: Vec<NodeId>) -> Zlc {
        Zlc {
            fullzones: vec![0; nodes.len().div_ceil(64)],
            z_to_n: nodes,
            last_full_zap: Instant::now(),
        }
    }

    /// `zlc_setup`: zaps the bitmap once a second.
    fn setup(&mut self) {
        if self.last_full_zap.elapsed() > Duration::from_secs(1) {
            self.fullzones.iter_mut().for_each(|w| *w = 0);
            self.last_full_zap = Instant::now();
        }
    }

    /// `zlc_zone_worth_trying`.
    fn worth_trying(&self, i: usize, allowed: &NodeMask) -> bool {
        allowed.test(self.z_to_n[i]) && self.fullzones[i / 64] & (1 << (i % 64)) == 0
    }

    /// `zlc_mark_zone_full`.
    fn mark_full(&mut self, i: usize) {
        self.fullzones[i / 64] |= 1 << (i % 64);
    }
}

/// The walks the experiment compares.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CpusetWalk {
    /// No cpuset.
    Unrestricted,
    /// 2.6.18: hardwall pass, kswapd wakeups, mutex pass.
    V2_6_18,
    /// 2.6.18 with `__cpuset_zone_allowed` answered from a table: what the
    /// walk costs without the check.
    V2_6_18Table,
    /// 2.6.19: the zonelist cache.
    V2_6_19,
    /// 6.18: the nodemask in the zonelist iterator.
    V6_18,
}

impl CpusetWalk {
    /// Report order.
    pub const ALL: [CpusetWalk; 5] = [
        CpusetWalk::Unrestricted,
        CpusetWalk::V2_6_18,
        CpusetWalk::V2_6_18Table,
        CpusetWalk::V2_6_19,
        CpusetWalk::V6_18,
    ];

    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            CpusetWalk::Unrestricted => "unrestricted",
            CpusetWalk::V2_6_18 => "2.6.18",
            CpusetWalk::V2_6_18Table => "2.6.18-table",
            CpusetWalk::V2_6_19 => "2.6.19-zlc",
            CpusetWalk::V6_18 => "6.18-nodemask",
        }
    }

    /// The allocator era under the walk: pfnlab's nearest to 2.6.18 and
    /// 2.6.19 is 2.6.23 (the same order-0 per-CPU and watermark code).
    pub fn era(self) -> Era {
        match self {
            CpusetWalk::V6_18 => Era::V6_18,
            _ => Era::V2_6_23,
        }
    }
}

/// One walk over its allocator's state: the cpuset's zones filled (the
/// pages held until it is dropped), the task's per-CPU handle on its home
/// node, the zonelist and what the walk keeps.
pub struct Walker<'a, M: MemoryModel> {
    walk: CpusetWalk,
    held: Vec<Pfn>,
    alloc: &'a Allocator<M, Kernel>,
    cpu: PerCpu<'a, M, Kernel>,
    zonelist: Vec<ZoneId>,
    nodes: Vec<NodeId>,
    highest: ZoneType,
    cpusets: &'a Cpusets,
    /// The 2.6.18-table answers, per zonelist index.
    table: Vec<bool>,
    zlc: Zlc,
    counts: WalkCounts,
}

/// Which mark a pass tests.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mark {
    Low,
    Min,
}

const GFP: Gfp = Gfp::HIGHUSER;

impl<'a, M: MemoryModel> Walker<'a, M> {
    /// Fills the cpuset's zones of `alloc` below their low watermark
    /// ([`fill`]) and sets up `walk` for a task on `home`. `alloc` should
    /// model the walk's era ([`CpusetWalk::era`]).
    pub fn new(
        walk: CpusetWalk,
        alloc: &'a Allocator<M, Kernel>,
        cpusets: &'a Cpusets,
        home: NodeId,
    ) -> Result<Walker<'a, M>, AllocError> {
        // The job's filling CPU gives what its lists still hold back when
        // it is done (from 6.7 a refill can take `batch << 5` pages at
        // once), so the zones end exactly where the fill aimed; the walk
        // runs on a CPU of its own.
        let mut filler = alloc.cpu_on(home)?;
        let held = fill(alloc, &mut filler, cpusets.mems_allowed())?;
        drop(filler);
        let cpu = alloc.cpu_on(home)?;
        let zonelist = alloc.zonelist(home, GFP)?.to_vec();
        let nodes: Vec<NodeId> = zonelist
            .iter()
            .map(|&z| alloc.zone(z).map_or(home, |zone| zone.node))
            .collect();
        let table = nodes
            .iter()
            .map(|&n| cpusets.mems_allowed().test(n))
            .collect();
        let mut walker = Walker {
            walk,
            held,
            alloc,
            cpu,
            zlc: Zlc::new(nodes.clone()),
            zonelist,
            nodes,
            highest: GFP.gfp_zone().map_err(RequestError::Gfp)?,
            cpusets,
            table,
            counts: WalkCounts::default(),
        };
        // The state must serve a request, or the run says so.
        let pfn = walker
            .alloc_page()
            .ok_or(RequestError::NoMemory { order: Order::ZERO })?;
        walker.cpu.free(pfn)?;
        walker.counts = WalkCounts::default();
        Ok(walker)
    }

    /// Frees a page [`Walker::alloc_page`] gave (`free_hot_page`).
    pub fn free_page(&mut self, pfn: Pfn) -> Result<(), AllocError> {
        Ok(self.cpu.free(pfn)?)
    }

    /// What the walk did so far.
    pub fn counts(&self) -> WalkCounts {
        self.counts
    }

    fn mark(&self, zid: ZoneId, mark: Mark) -> u64 {
        let w = self
            .alloc
            .zone(zid)
            .map(|z| z.watermarks())
            .unwrap_or_default();
        match mark {
            Mark::Low => w.low,
            Mark::Min => w.min,
        }
    }

    fn watermark_ok(&mut self, zid: ZoneId, mark: Mark) -> bool {
        self.counts.watermark_checks += 1;
        let m = self.mark(zid, mark);
        self.alloc
            .zone(zid)
            .is_some_and(|z| z.zone_watermark_ok(Order::ZERO, m, self.highest))
    }

    /// `cpuset_zone_allowed` for zonelist entry `i`.
    fn allowed(&mut self, i: usize, hardwall: bool) -> bool {
        if self.walk == CpusetWalk::V2_6_18Table {
            self.counts.cpuset_checks += 1;
            return self.table[i];
        }
        match self.walk {
            CpusetWalk::Unrestricted => true,
            _ => self
                .cpusets
                .zone_allowed(self.nodes[i], hardwall, &mut self.counts),
        }
    }

    /// `get_page_from_freelist` of 2.6.18 (and of 2.6.19 with `zlc`).
    fn get_page_from_freelist(&mut self, hardwall: bool, mark: Mark, zlc: bool) -> Option<Pfn> {
        let mut zlc_active = false;
        // `zlc_setup` runs once per call, after the first zone is tried.
        let mut did_zlc_setup = false;
        loop {
            for i in 0..self.zonelist.len() {
                if zlc_active && !self.zlc.worth_trying(i, self.cpusets.mems_allowed()) {
                    self.counts.zones_skipped += 1;
                    continue;
                }
                let zid = self.zonelist[i];
                let mut full = false;
                if self.allowed(i, hardwall) {
                    if self.watermark_ok(zid, mark)
                        && let Ok(Some(pfn)) = self.cpu.buffered_rmqueue(zid, Order::ZERO, GFP)
                    {
                        return Some(pfn);
                    }
                    full = true;
                }
                if zlc {
                    if full {
                        self.zlc.mark_full(i);
                    }
                    if !did_zlc_setup {
                        self.zlc.setup();
                        zlc_active = true;
                        did_zlc_setup = true;
                    }
                }
            }
            if !zlc_active {
                return None;
            }
            self.counts.zlc_rescans += 1;
            zlc_active = false;
        }
    }

    /// `wakeup_kswapd` on every zone of the zonelist: a zone above its low
    /// mark, or outside the cpuset (hardwall), needs no kswapd; kswapd is
    /// already running for the others (its wait queue is not active).
    fn wakeup_kswapds(&mut self, nodemask: bool) {
        for i in 0..self.zonelist.len() {
            if nodemask && !self.cpusets.mems_allowed().test(self.nodes[i]) {
                self.counts.zones_skipped += 1;
                continue;
            }
            self.counts.kswapd_wakeups += 1;
            let zid = self.zonelist[i];
            if self.watermark_ok(zid, Mark::Low) {
                continue;
            }
            if !nodemask {
                self.allowed(i, true);
            }
        }
    }

    /// Today's `get_page_from_freelist` with the nodemask: zones outside
    /// it skipped in the iterator; the slow path's `ALLOC_CPUSET` check
    /// sees only allowed zones (answered from `mems_allowed`).
    fn nodemask_pass(&mut self, mark: Mark, cpuset_check: bool) -> Option<Pfn> {
        for i in 0..self.zonelist.len() {
            if !self.cpusets.mems_allowed().test(self.nodes[i]) {
                self.counts.zones_skipped += 1;
                continue;
            }
            if cpuset_check && !self.allowed(i, false) {
                continue;
            }
            let zid = self.zonelist[i];
            if self.watermark_ok(zid, mark)
                && let Ok(Some(pfn)) = self.cpu.buffered_rmqueue(zid, Order::ZERO, GFP)
            {
                return Some(pfn);
            }
        }
        None
    }

    /// `__alloc_pages` of the walk's era: one order-0 `GFP_HIGHUSER` page,
    /// which the caller frees with [`Walker::free_page`].
    pub fn alloc_page(&mut self) -> Option<Pfn> {
        self.counts.allocs += 1;
        match self.walk {
            CpusetWalk::V6_18 => self.nodemask_pass(Mark::Low, false).or_else(|| {
                self.wakeup_kswapds(true);
                self.nodemask_pass(Mark::Min, true)
            }),
            walk => {
                let zlc = walk == CpusetWalk::V2_6_19;
                self.get_page_from_freelist(true, Mark::Low, zlc)
                    .or_else(|| {
                        self.wakeup_kswapds(false);
                        self.get_page_from_freelist(false, Mark::Min, zlc)
                    })
            }
        }
    }

    /// `n` pages faulted and freed again (`free_hot_page`), one at a
    /// time, so the zones stay where the fill left them; returns how many
    /// were served (all `n` in the state [`Walker::new`] checked).
    pub fn pairs(&mut self, n: u64) -> u64 {
        let mut served = 0;
        for _ in 0..n {
            let Some(pfn) = self.alloc_page() else { break };
            if self.cpu.free(pfn).is_ok() {
                served += 1;
            }
        }
        served
    }
}

impl<M: MemoryModel> Drop for Walker<'_, M> {
    fn drop(&mut self) {
        for pfn in self.held.drain(..) {
            let _ = self.cpu.free(pfn);
        }
    }
}

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
    pub fn rows(&self, model: &str) -> Vec<Row> {
        self.runs
            .iter()
            .map(|(walk, m, c)| {
                let per = |v: u64| v as f64 / c.allocs.max(1) as f64;
                let mut row = Row::new(
                    walk.name(),
                    model,
                    json!({"nodes": self.nodes, "allowed": self.allowed, "era": walk.era().name()}),
                    m.clone(),
                )
                .with("cpuset_checks_per_alloc", per(c.cpuset_checks))
                .with("mutex_per_alloc", per(c.mutex_acquisitions))
                .with("watermark_checks_per_alloc", per(c.watermark_checks))
                .with("kswapd_wakeups_per_alloc", per(c.kswapd_wakeups))
                .with("zones_skipped_per_alloc", per(c.zones_skipped))
                .with("zlc_rescans_per_alloc", per(c.zlc_rescans))
                .with("system_ns_per_page", self.system_ns(*walk))
                .with("host_fault_ns_per_page", self.fault_ns())
                .with("slowdown", self.slowdown(*walk))
                .with("tasks", self.tasks)
                .with("tasks_ns_per_page", self.contended_ns(*walk))
                .with("contention", self.contention(*walk))
                .with("system_seconds_at_seed_scale", self.system_seconds(*walk));
                if *walk == CpusetWalk::V2_6_18 {
                    row = row
                        .with("check_share_of_alloc", self.check_share())
                        .with("check_share", self.check_share_of_system())
                        .with(
                            "seed",
                            json!({
                                "system_seconds": {"unrestricted": SEED_SYSTEM_SECONDS.0, "restricted": SEED_SYSTEM_SECONDS.1},
                                "slowdown": seed_slowdown(),
                                "check_ticks": SEED_CHECK_TICKS,
                                "hz": SEED_HZ,
                                "check_seconds": seed_check_seconds(),
                                "check_share": seed_check_share(),
                            }),
                        )
                        .with("ratio_to_seed", self.slowdown(*walk) / seed_slowdown())
                        .with(
                            "check_share_to_seed",
                            self.check_share_of_system() / seed_check_share(),
                        );
                }
                row
            })
            .collect()
    }

    /// The printed table, with the seed's figures.
    pub fn render(&self) -> String {
        let mut table = format!(
            "{} nodes, a cpuset of the last {} filled below their low watermark; the task on node 0 faults and frees {} GFP_HIGHUSER pages per trial\n\n\
             {:<14} {:>6}  {:>18}  {:>9}  {:>8}  {:>7}  {:>6}  {:>6}  {:>6}  {:>6}  {:>7}\n",
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
                "{:<14} {:>6}  {:>18}  {:>9.0}  {:>7.2}x  {:>7.1}  {:>6.1}  {:>6.1}  {:>6.1}  {:>6.1}  {:>7.2}\n",
                walk.name(),
                walk.era().name(),
                cell(m),
                self.system_ns(*walk),
                self.slowdown(*walk),
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
             2.6.18 / unrestricted = {:.2}x system time; at the seed's scale {:.0} s -> {:.0} s. Seed: {:.0} s -> {:.0} s ({:.2}x).\n\
             __cpuset_zone_allowed beyond a table lookup: {:.0} % of the 2.6.18 allocation, {:.0} % of its system time. \
             Seed: {:.0} readprofile ticks at HZ={:.0} = {:.1} s of the {:.0} s, {:.0} % (its \"50.47\" is readprofile's load, ticks over function size, not a percentage).\n\n\
             With {} tasks faulting at once (wall ns per page over all their pages; per task, over one task alone):\n",
            cell(&self.host_fault),
            self.slowdown(CpusetWalk::V2_6_18),
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
                "  {:<14} {:>18} per page, {:.2}x per task\n",
                walk.name(),
                cell(m),
                self.contention(*walk)
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

/// Fills every zone of the cpuset until it is below its low watermark,
/// halfway to min, with pages taken from that zone through `cpu`; returns
/// them (the job's usemem memory, held for the run). Pages on `cpu`'s
/// lists count as free: dropping `cpu` gives them back.
pub fn fill<M: MemoryModel>(
    alloc: &Allocator<M, Kernel>,
    cpu: &mut PerCpu<'_, M, Kernel>,
    allowed: &NodeMask,
) -> Result<Vec<Pfn>, AllocError> {
    let mut held = Vec::new();
    for (i, zone) in alloc.zones().iter().enumerate() {
        if !allowed.test(zone.node) {
            continue;
        }
        let zid = ZoneId::new(i as u8);
        let w = zone.watermarks();
        let target = (w.min + w.low) / 2;
        while zone.nr_free_pages() + cpu.count(zid) > target {
            match cpu.buffered_rmqueue(zid, Order::ZERO, GFP)? {
                Some(pfn) => held.push(pfn),
                None => break,
            }
        }
    }
    Ok(held)
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
        let mut counts = vec![WalkCounts::default(); walkers.len()];
        let measured = {
            let cells: Vec<std::cell::RefCell<&mut Walker<'_, M>>> =
                walkers.iter_mut().map(std::cell::RefCell::new).collect();
            let mut fns: Vec<Box<dyn FnMut() -> u64 + '_>> = cells
                .iter()
                .map(|c| Box::new(move || c.borrow_mut().pairs(pairs)) as Box<dyn FnMut() -> u64>)
                .collect();
            let mut refs: Vec<&mut dyn FnMut() -> u64> = fns
                .iter_mut()
                .map(|f| &mut **f as &mut dyn FnMut() -> u64)
                .collect();
            // Counts of one trial's worth, taken before timing.
            for (c, w) in counts.iter_mut().zip(&cells) {
                let before = w.borrow().counts;
                w.borrow_mut().pairs(pairs);
                let after = w.borrow().counts;
                *c = diff(after, before);
            }
            measure_interleaved(self.plan.trials, &mut refs, |f| f())
        };
        drop(walkers);
        let rounds = self.plan.iters(40, 2);
        let host = crate::timing::measure(self.plan.trials, || host_fault(rounds));
        let tasks = self.tasks.max(1);
        let mut contended = Vec::new();
        for (walk, alloc) in CpusetWalk::ALL.into_iter().zip(&allocs) {
            let ns: Vec<f64> = (0..self.plan.trials.max(1))
                .map(|_| tasks_ns(walk, alloc, &cpusets, home, tasks, pairs))
                .collect();
            contended.push((walk, Measurement::from_ns(ns)));
        }
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
fn tasks_ns<M: MemoryModel>(
    walk: CpusetWalk,
    alloc: &Allocator<M, Kernel>,
    cpusets: &Cpusets,
    home: NodeId,
    tasks: usize,
    pairs: u64,
) -> f64 {
    let barrier = std::sync::Barrier::new(tasks);
    let elapsed = Mutex::new(Duration::ZERO);
    std::thread::scope(|s| {
        for t in 0..tasks {
            let (barrier, elapsed) = (&barrier, &elapsed);
            s.spawn(move || {
                // Every task joins both barriers, even one whose walk could
                // not be set up, so none waits for ever.
                let mut walker = Walker::new(walk, alloc, cpusets, home).ok();
                barrier.wait();
                let start = Instant::now();
                if let Some(w) = walker.as_mut() {
                    w.pairs(pairs);
                }
                barrier.wait();
                if t == 0 {
                    *elapsed.lock().unwrap_or_else(|e| e.into_inner()) = start.elapsed();
                }
            });
        }
    });
    let elapsed = *elapsed.lock().unwrap_or_else(|e| e.into_inner());
    elapsed.as_nanos() as f64 / (tasks as u64 * pairs).max(1) as f64
}

fn diff(a: WalkCounts, b: WalkCounts) -> WalkCounts {
    WalkCounts {
        allocs: a.allocs - b.allocs,
        cpuset_checks: a.cpuset_checks - b.cpuset_checks,
        mutex_acquisitions: a.mutex_acquisitions - b.mutex_acquisitions,
        watermark_checks: a.watermark_checks - b.watermark_checks,
        kswapd_wakeups: a.kswapd_wakeups - b.kswapd_wakeups,
        zones_skipped: a.zones_skipped - b.zones_skipped,
        zlc_rescans: a.zlc_rescans - b.zlc_rescans,
    }
}

legacy_experiment!(
    /// cpuset checks in the zonelist walk under fake NUMA (2006).
    Cpuset = Cpuset,
    run
);

fn run(ctx: &Ctx, knobs: &Knobs) -> Result<Outcome, RunError> {
    let allowed = knobs.allowed.unwrap_or(43);
    let tasks = knobs.threads.unwrap_or(ctx.machine.cores.max(2));
    let results = ctx.named(measure_cpuset(
        ctx.model,
        &ctx.layout,
        ctx.plan,
        allowed,
        tasks,
        ctx.options(),
    ))?;
    Ok(Outcome {
        rows: results.rows(ctx.model.name()),
        table: results.render(),
        layout: ctx.layout.source().into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `zlc_setup` zaps the full-zones bitmap once a second, not before;
    /// `zlc_zone_worth_trying` wants an allowed node and a clear bit.
    #[test]
    fn the_zonelist_cache_forgets_full_zones_after_a_second() {
        let nodes: Vec<NodeId> = (0..70u16).map(NodeId::new).collect();
        let allowed = NodeMask::of(nodes[1..].iter().copied());
        let mut zlc = Zlc::new(nodes);
        assert!(!zlc.worth_trying(0, &allowed), "node 0 is not allowed");
        assert!(zlc.worth_trying(65, &allowed));
        zlc.mark_full(65);
        zlc.setup();
        assert!(!zlc.worth_trying(65, &allowed), "full for up to a second");
        zlc.last_full_zap = Instant::now() - Duration::from_millis(1001);
        zlc.setup();
        assert!(zlc.worth_trying(65, &allowed), "zapped");
    }
}
