//! `/proc/zoneinfo` as a value (`zoneinfo_show_print`), and the model's,
//! in the format of its era's release ([`ZoneinfoFormat`]).

use std::fmt;

use crate::alloc::Allocator;
use crate::era::Era;
use crate::pcp::PerCpu;
use crate::types::{BuddyModel, ZoneType};
use crate::variant::Variant;
use crate::watermark::{NR_KERNEL_ZONES, SWAP_CLUSTER_MAX, Watermarks};
use crate::zone::Zone;

/// The zone names of an x86_64 kernel with `CONFIG_ZONE_DEVICE`, in
/// `enum zone_type` order: what `/proc/zoneinfo` lists for every node.
pub const KERNEL_ZONE_NAMES: [&str; NR_KERNEL_ZONES] =
    ["DMA", "DMA32", "Normal", "Movable", "Device"];

/// The layout `zoneinfo_show_print` prints in, by release, and what a
/// pageset's `high` shows in it. The fields, in order (read in
/// `mm/vmstat.c` of a 5.15-line tree, of 6.12 as the context of
/// `f8780515fe91`, and of 6.18):
///
/// - every format: `Node N, zone NAME`, the per-node stats in a node's
///   first populated zone, `pages free`, \[`boost`\], `min`, `low`, `high`,
///   \[`promo`\], `spanned`, `present`, `managed`, `cma`, `protection: (…)`,
///   and for a populated zone its vmstat counters, `pagesets`, per online
///   CPU `cpu:`, `count:`, `high:`, `batch:`, \[`high_min:`, `high_max:`\],
///   `vm stats threshold:`, then `node_unreclaimable:` and `start_pfn:`;
/// - `boost` from 5.16 (not in 5.14 and 5.15);
/// - `promo` from 6.12 (`528afe6b9605` "mm: print the promo watermark in
///   zoneinfo"), in every zone;
/// - `high_min:` and `high_max:` from 6.13 (`f8780515fe91` "mm: add pcp
///   high_min high_max to proc zoneinfo"), which also realigned the
///   pageset labels (`count:    ` where 6.12 printed `count: `).
///
/// [`ZoneinfoFormat::V5_16`] and [`ZoneinfoFormat::V6_7`] print the same
/// lines; they differ in what `high` holds, so a file read back is the
/// first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ZoneinfoFormat {
    /// 5.14 and 5.15 (and pfnlab's older eras, whose layout pfnlab writes
    /// as 5.14's): as [`ZoneinfoFormat::V5_16`] without the `boost` line,
    /// which 5.16 added ("mm: Show watermark_boost of zone in zoneinfo",
    /// posted September 2021). From 5.0 the printed
    /// watermarks include the boost, so in this format a boosted zone's
    /// cannot be told from its computed ones.
    V5_14,
    /// 5.16 to 6.6: `boost`, no `promo`, pagesets without
    /// `high_min`/`high_max`; every CPU's `high` is its zone's, set at
    /// boot for every possible CPU (`zone_pcp_update` from
    /// `setup_per_zone_wmarks`). A file read back in this layout may be
    /// 6.7 to 6.11's too.
    V5_16,
    /// 6.7 to 6.11: the same lines; a CPU's `high` is tuned, 0 until the
    /// CPU first frees to or refills from the zone.
    V6_7,
    /// 6.12: `promo` after `high`.
    V6_12,
    /// 6.13 on: pagesets with `high_min` and `high_max`.
    #[default]
    V6_13,
}

impl ZoneinfoFormat {
    /// The format era `era`'s kernel prints.
    pub fn of_era(era: Era) -> ZoneinfoFormat {
        if era.since(6, 13) {
            ZoneinfoFormat::V6_13
        } else if era.since(6, 12) {
            ZoneinfoFormat::V6_12
        } else if era.pcp_high_tuning() {
            ZoneinfoFormat::V6_7
        } else if era.since(5, 16) {
            ZoneinfoFormat::V5_16
        } else {
            ZoneinfoFormat::V5_14
        }
    }

    /// The releases that print it.
    pub fn releases(self) -> &'static str {
        match self {
            ZoneinfoFormat::V5_14 => "5.14 and 5.15",
            ZoneinfoFormat::V5_16 => "5.16 to 6.6",
            ZoneinfoFormat::V6_7 => "6.7 to 6.11",
            ZoneinfoFormat::V6_12 => "6.12",
            ZoneinfoFormat::V6_13 => "6.13 on",
        }
    }

    /// Whether the watermark block has a `promo` line.
    pub fn has_promo(self) -> bool {
        matches!(self, ZoneinfoFormat::V6_12 | ZoneinfoFormat::V6_13)
    }

    /// Whether the watermark block has a `boost` line.
    pub fn has_boost(self) -> bool {
        self != ZoneinfoFormat::V5_14
    }

    /// Whether each pageset has `high_min` and `high_max` lines.
    pub fn has_high_min_max(self) -> bool {
        self == ZoneinfoFormat::V6_13
    }

    /// Whether every CPU's `high` is its zone's value, set at boot,
    /// rather than tuned per CPU.
    pub fn high_is_the_zones(self) -> bool {
        matches!(self, ZoneinfoFormat::V5_14 | ZoneinfoFormat::V5_16)
    }
}

/// One CPU's pageset of a zone, as zoneinfo prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pageset {
    /// The CPU.
    pub cpu: u32,
    /// `pcp->count`: pages on its lists.
    pub count: u64,
    /// `pcp->high`: from 6.7 live, tuned between `high_min` and
    /// `high_max` (0 until the CPU first uses the zone's lists); before,
    /// the zone's.
    pub high: u64,
    /// `pcp->batch`.
    pub batch: u64,
    /// `pcp->high_min`; `None` in a format that does not print it
    /// (before 6.13).
    pub high_min: Option<u64>,
    /// `pcp->high_max`; `None` in a format that does not print it.
    pub high_max: Option<u64>,
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
    /// `min`, `low`, `high` and `promo` (`promo` 0 in a format that does
    /// not print it).
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
    /// The layout it is printed in.
    pub format: ZoneinfoFormat,
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

impl ZoneInfo {
    /// Writes the zone's entry in `format`.
    fn write(&self, f: &mut fmt::Formatter<'_>, format: ZoneinfoFormat) -> fmt::Result {
        write!(f, "Node {}, zone {:>8}", self.node, self.zone)?;
        if let Some(stats) = &self.node_stats {
            f.write_str("\n  per-node stats")?;
            write_stats(f, stats)?;
        }
        let w = self.watermarks;
        write!(f, "\n  pages free     {}", self.pages_free)?;
        if format.has_boost() {
            write!(f, "\n        boost    {}", self.boost)?;
        }
        write!(
            f,
            "\n        min      {}\n        low      {}\n        high     {}",
            w.min, w.low, w.high,
        )?;
        if format.has_promo() {
            write!(f, "\n        promo    {}", w.promo)?;
        }
        write!(
            f,
            "\n        spanned  {}\n        present  {}\n        managed  {}\
             \n        cma      {}\n        protection: (",
            self.spanned, self.present, self.managed, self.cma
        )?;
        for (i, r) in self.protection.iter().enumerate() {
            write!(f, "{}{r}", if i == 0 { "" } else { ", " })?;
        }
        f.write_str(")")?;
        if let Some(p) = &self.populated {
            write_stats(f, &p.vm_stats)?;
            f.write_str("\n  pagesets")?;
            for s in &p.pagesets {
                if format.has_high_min_max() {
                    write!(
                        f,
                        "\n    cpu: {}\n              count:    {}\n              high:     {}\
                         \n              batch:    {}\n              high_min: {}\
                         \n              high_max: {}",
                        s.cpu,
                        s.count,
                        s.high,
                        s.batch,
                        s.high_min.unwrap_or(0),
                        s.high_max.unwrap_or(0)
                    )?;
                } else {
                    write!(
                        f,
                        "\n    cpu: {}\n              count: {}\n              high:  {}\
                         \n              batch: {}",
                        s.cpu, s.count, s.high, s.batch
                    )?;
                }
                write!(f, "\n  vm stats threshold: {}", s.stat_threshold)?;
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
        self.zones.iter().try_for_each(|z| z.write(f, self.format))
    }
}

/// The watermarks `__setup_per_zone_wmarks` of `era` gives a zone type
/// that has no pages: from 6.6 a Movable zone's `min` is clamped up to
/// `SWAP_CLUSTER_MAX` ([`Era::movable_wmarks_like_highmem`]); every other
/// mark is 0, and every distance.
fn empty_zone_watermarks(index: usize, era: Era) -> Watermarks {
    let mark = if index == ZoneType::Movable as usize && era.movable_wmarks_like_highmem() {
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
    /// The model's `/proc/zoneinfo` in its era's format, with every CPU's
    /// lists empty (no per-CPU handle is asked about): each pageset's
    /// `high` is a CPU's starting `high` (the zone's before 6.7; from 6.7
    /// 0, as the kernel shows a CPU that has not used the zone).
    pub fn zoneinfo(&self) -> Zoneinfo {
        self.zoneinfo_with(&[])
    }

    /// The model's `/proc/zoneinfo` with the live `count` and `high` of
    /// `cpus` as CPUs 0, 1, …; the allocator's other CPUs (up to
    /// [`Allocator::nr_cpus`]) show empty lists.
    pub fn zoneinfo_with(&self, cpus: &[&PerCpu<'_, M, V>]) -> Zoneinfo {
        let nr_cpus = (self.nr_cpus() as usize).max(cpus.len());
        let format = ZoneinfoFormat::of_era(self.options.era);
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
                    watermarks: empty_zone_watermarks(index, self.options.era),
                    spanned: 0,
                    present: 0,
                    managed: 0,
                    cma: 0,
                    protection: vec![0; NR_KERNEL_ZONES],
                    populated: None,
                };
                if let Some(zone) = zone.filter(|z| z.managed_pages() > 0) {
                    self.fill_zone(&mut info, zone, cpus, nr_cpus, format);
                }
                if !format.has_promo() {
                    info.watermarks.promo = 0;
                }
                zones.push(info);
            }
        }
        Zoneinfo { format, zones }
    }

    /// Fills a populated zone's entry from the model's zone.
    fn fill_zone(
        &self,
        info: &mut ZoneInfo,
        zone: &Zone<V, M::Page>,
        cpus: &[&PerCpu<'_, M, V>],
        nr_cpus: usize,
        format: ZoneinfoFormat,
    ) {
        info.pages_free = zone.nr_free_pages_state();
        info.watermarks = zone.watermarks;
        info.spanned = zone.end.get() - zone.start.get();
        info.present = zone.managed_pages();
        info.managed = zone.managed_pages();
        // Device is above Movable and manages nothing, so a request that
        // may use it sees the Movable reserve.
        let r = zone.lowmem_reserve;
        info.protection = vec![r[0], r[1], r[2], r[3], r[3]];
        let idle_high = if self.path.pcp_high_tuning {
            0
        } else {
            u64::from(zone.high)
        };
        let min_max = |value: u32| format.has_high_min_max().then_some(u64::from(value));
        let pageset = |cpu: usize| {
            let live = cpus.get(cpu);
            Pageset {
                cpu: cpu as u32,
                count: live.map_or(0, |c| c.count(zone.id)),
                // An idle CPU's `high` is its starting one: from 6.7
                // `BOOT_PAGESET_HIGH` (0) until it first uses the zone.
                high: live.map_or(idle_high, |c| c.high(zone.id)),
                batch: u64::from(zone.batch),
                high_min: min_max(zone.high),
                high_max: min_max(zone.high_max),
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
