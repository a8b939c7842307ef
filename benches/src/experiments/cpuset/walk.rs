//! The walks: the cpuset hierarchy (`__cpuset_zone_allowed` with
//! `callback_mutex`), the 2.6.19 zonelist cache, and one `__alloc_pages`
//! walk per era over a filled state ([`Walker`]).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use buddy::{AllocError, BuddyModel, RequestError};
use buddy::{Allocator, Era, Gfp, Kernel, NodeMask, PerCpu, ZoneId, ZoneType};
use sparsemem::{NodeId, Order, Pfn};

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

/// A walk is reported by its name (`2.6.19-zlc`).
impl serde::Serialize for CpusetWalk {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// One walk over its allocator's state: the cpuset's zones filled (the
/// pages held until it is dropped), the task's per-CPU handle on its home
/// node, the zonelist and what the walk keeps.
pub struct Walker<'a, M: BuddyModel> {
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

impl<'a, M: BuddyModel> Walker<'a, M> {
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

impl<M: BuddyModel> Drop for Walker<'_, M> {
    fn drop(&mut self) {
        for pfn in self.held.drain(..) {
            let _ = self.cpu.free(pfn);
        }
    }
}

/// Fills every zone of the cpuset until it is below its low watermark,
/// halfway to min, with pages taken from that zone through `cpu`; returns
/// them (the job's usemem memory, held for the run). Pages on `cpu`'s
/// lists count as free: dropping `cpu` gives them back.
pub fn fill<M: BuddyModel>(
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
        // Each order-0 allocation from this zone takes one page off the
        // zone's and its per-CPU list's sum (a refill moves pages between
        // them), so the excess is counted once a pass, not once a page.
        'zone: loop {
            let excess = (zone.nr_free_pages() + cpu.count(zid)).saturating_sub(target);
            if excess == 0 {
                break;
            }
            for _ in 0..excess {
                match cpu.buffered_rmqueue(zid, Order::ZERO, GFP)? {
                    Some(pfn) => held.push(pfn),
                    None => break 'zone,
                }
            }
        }
    }
    Ok(held)
}

impl WalkCounts {
    /// What happened between `before` and these counts.
    pub fn since(self, before: WalkCounts) -> WalkCounts {
        WalkCounts {
            allocs: self.allocs - before.allocs,
            cpuset_checks: self.cpuset_checks - before.cpuset_checks,
            mutex_acquisitions: self.mutex_acquisitions - before.mutex_acquisitions,
            watermark_checks: self.watermark_checks - before.watermark_checks,
            kswapd_wakeups: self.kswapd_wakeups - before.kswapd_wakeups,
            zones_skipped: self.zones_skipped - before.zones_skipped,
            zlc_rescans: self.zlc_rescans - before.zlc_rescans,
        }
    }
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
