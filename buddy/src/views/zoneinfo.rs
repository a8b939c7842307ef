//! `/proc/zoneinfo` as a value (`zoneinfo_show_print`), and the model's.

use std::fmt;

use crate::alloc::Allocator;
use crate::pcp::PerCpu;
use crate::types::{BuddyModel, ZoneType};
use crate::variant::Variant;
use crate::watermark::{NR_KERNEL_ZONES, SWAP_CLUSTER_MAX, Watermarks};
use crate::zone::Zone;

/// The zone names of an x86_64 kernel with `CONFIG_ZONE_DEVICE`, in
/// `enum zone_type` order: what `/proc/zoneinfo` lists for every node.
pub const KERNEL_ZONE_NAMES: [&str; NR_KERNEL_ZONES] =
    ["DMA", "DMA32", "Normal", "Movable", "Device"];

/// One CPU's pageset of a zone, as zoneinfo prints it (Linux 6.7 on).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pageset {
    /// The CPU.
    pub cpu: u32,
    /// `pcp->count`: pages on its lists.
    pub count: u64,
    /// `pcp->high`: live, tuned between `high_min` and `high_max` (0 until
    /// the CPU first uses the zone's lists).
    pub high: u64,
    /// `pcp->batch`.
    pub batch: u64,
    /// `pcp->high_min`.
    pub high_min: u64,
    /// `pcp->high_max`.
    pub high_max: u64,
    /// `stat_threshold` of the CPU's `per_cpu_zonestats`.
    pub stat_threshold: u64,
}

/// What zoneinfo prints only for a populated zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Populated {
    /// The zone's vmstat counters, `(name, value)` in the kernel's order
    /// (the model has only `nr_free_pages`).
    pub vm_stats: Vec<(String, u64)>,
    /// One pageset per online CPU.
    pub pagesets: Vec<Pageset>,
    /// `node_unreclaimable`: kswapd gave up on the node.
    pub node_unreclaimable: u32,
    /// `zone_start_pfn`.
    pub start_pfn: u64,
}

/// One zone's entry of `/proc/zoneinfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneInfo {
    /// Its node.
    pub node: u32,
    /// The kernel's zone name (`zone->name`).
    pub zone: String,
    /// `per-node stats`, printed in a node's first populated zone.
    pub node_stats: Option<Vec<(String, u64)>>,
    /// `pages free`: `NR_FREE_PAGES` (per-CPU lists not included).
    pub pages_free: u64,
    /// `watermark_boost`.
    pub boost: u64,
    /// `min`, `low`, `high` and `promo`.
    pub watermarks: Watermarks,
    /// `spanned_pages`.
    pub spanned: u64,
    /// `present_pages`.
    pub present: u64,
    /// `managed_pages`.
    pub managed: u64,
    /// `cma_pages`.
    pub cma: u64,
    /// `lowmem_reserve[]`, one per zone type.
    pub protection: Vec<u64>,
    /// The rest, for a populated zone.
    pub populated: Option<Populated>,
}

/// A whole `/proc/zoneinfo`: every node's zones in order.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Zoneinfo {
    /// The zones, node by node, each node's in `zone_type` order.
    pub zones: Vec<ZoneInfo>,
}

impl Zoneinfo {
    /// The entry of zone `name` on `node`.
    pub fn zone(&self, node: u32, name: &str) -> Option<&ZoneInfo> {
        self.zones.iter().find(|z| z.node == node && z.zone == name)
    }

    /// The online CPUs, as the first populated zone's pagesets count them.
    pub fn nr_cpus(&self) -> u32 {
        self.zones
            .iter()
            .find_map(|z| z.populated.as_ref())
            .map_or(0, |p| p.pagesets.len() as u32)
    }
}

fn write_stats(f: &mut fmt::Formatter<'_>, stats: &[(String, u64)]) -> fmt::Result {
    stats
        .iter()
        .try_for_each(|(name, value)| write!(f, "\n      {name:<12} {value}"))
}

impl fmt::Display for ZoneInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Node {}, zone {:>8}", self.node, self.zone)?;
        if let Some(stats) = &self.node_stats {
            f.write_str("\n  per-node stats")?;
            write_stats(f, stats)?;
        }
        let w = self.watermarks;
        write!(
            f,
            "\n  pages free     {}\n        boost    {}\n        min      {}\
             \n        low      {}\n        high     {}\n        promo    {}\
             \n        spanned  {}\n        present  {}\n        managed  {}\
             \n        cma      {}\n        protection: (",
            self.pages_free,
            self.boost,
            w.min,
            w.low,
            w.high,
            w.promo,
            self.spanned,
            self.present,
            self.managed,
            self.cma
        )?;
        for (i, r) in self.protection.iter().enumerate() {
            write!(f, "{}{r}", if i == 0 { "" } else { ", " })?;
        }
        f.write_str(")")?;
        if let Some(p) = &self.populated {
            write_stats(f, &p.vm_stats)?;
            f.write_str("\n  pagesets")?;
            for s in &p.pagesets {
                write!(
                    f,
                    "\n    cpu: {}\n              count:    {}\n              high:     {}\
                     \n              batch:    {}\n              high_min: {}\
                     \n              high_max: {}\n  vm stats threshold: {}",
                    s.cpu, s.count, s.high, s.batch, s.high_min, s.high_max, s.stat_threshold
                )?;
            }
            write!(
                f,
                "\n  node_unreclaimable:  {}\n  start_pfn:           {}",
                p.node_unreclaimable, p.start_pfn
            )?;
        }
        f.write_str("\n")
    }
}

impl fmt::Display for Zoneinfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.zones.iter().try_for_each(|z| z.fmt(f))
    }
}

/// The watermarks `__setup_per_zone_wmarks` gives a zone type that has no
/// pages: a Movable zone's `min` is clamped up to `SWAP_CLUSTER_MAX`, and
/// every distance is 0.
fn empty_zone_watermarks(index: usize) -> Watermarks {
    let mark = if index == ZoneType::Movable as usize {
        SWAP_CLUSTER_MAX
    } else {
        0
    };
    Watermarks {
        min: mark,
        low: mark,
        high: mark,
        promo: mark,
    }
}

impl<M: BuddyModel, V: Variant> Allocator<M, V> {
    /// The model's `/proc/zoneinfo`, with every CPU's lists empty (no
    /// per-CPU handle is asked about): each pageset's `high` is a CPU's
    /// starting `high` (0 from 6.7, as the kernel shows a CPU that has
    /// not used the zone).
    pub fn zoneinfo(&self) -> Zoneinfo {
        self.zoneinfo_with(&[])
    }

    /// The model's `/proc/zoneinfo` with the live `count` and `high` of
    /// `cpus` as CPUs 0, 1, …; the allocator's other CPUs (up to
    /// [`Allocator::nr_cpus`]) show empty lists.
    pub fn zoneinfo_with(&self, cpus: &[&PerCpu<'_, M, V>]) -> Zoneinfo {
        let nr_cpus = (self.nr_cpus() as usize).max(cpus.len());
        let mut zones = Vec::new();
        for node in &self.nodes {
            for (index, name) in KERNEL_ZONE_NAMES.iter().enumerate() {
                let zone = node
                    .zones
                    .iter()
                    .map(|z| &self.zones[z.index()])
                    .find(|z| z.kind as usize == index);
                let mut info = ZoneInfo {
                    node: u32::from(node.id.get()),
                    zone: (*name).to_owned(),
                    node_stats: None,
                    pages_free: 0,
                    boost: 0,
                    watermarks: empty_zone_watermarks(index),
                    spanned: 0,
                    present: 0,
                    managed: 0,
                    cma: 0,
                    protection: vec![0; NR_KERNEL_ZONES],
                    populated: None,
                };
                if let Some(zone) = zone.filter(|z| z.managed > 0) {
                    self.fill_zone(&mut info, zone, cpus, nr_cpus);
                }
                zones.push(info);
            }
        }
        Zoneinfo { zones }
    }

    /// Fills a populated zone's entry from the model's zone.
    fn fill_zone(
        &self,
        info: &mut ZoneInfo,
        zone: &Zone<V, M::Page>,
        cpus: &[&PerCpu<'_, M, V>],
        nr_cpus: usize,
    ) {
        info.pages_free = zone.nr_free_pages_state();
        info.watermarks = zone.watermarks;
        info.spanned = zone.end.get() - zone.start.get();
        info.present = zone.managed;
        info.managed = zone.managed;
        // Device is above Movable and manages nothing, so a request that
        // may use it sees the Movable reserve.
        let r = zone.lowmem_reserve;
        info.protection = vec![r[0], r[1], r[2], r[3], r[3]];
        let idle_high = if self.path.pcp_high_tuning {
            0
        } else {
            u64::from(zone.high)
        };
        let pageset = |cpu: usize| {
            let live = cpus.get(cpu);
            Pageset {
                cpu: cpu as u32,
                count: live.map_or(0, |c| c.count(zone.id)),
                // An idle CPU's `high` is its starting one: from 6.7
                // `BOOT_PAGESET_HIGH` (0) until it first uses the zone.
                high: live.map_or(idle_high, |c| c.high(zone.id)),
                batch: u64::from(zone.batch),
                high_min: u64::from(zone.high),
                high_max: u64::from(zone.high_max),
                stat_threshold: zone.stat_threshold as u64,
            }
        };
        info.populated = Some(Populated {
            vm_stats: vec![("nr_free_pages".to_owned(), info.pages_free)],
            pagesets: (0..nr_cpus).map(pageset).collect(),
            node_unreclaimable: 0,
            start_pfn: zone.start.get(),
        });
    }
}
