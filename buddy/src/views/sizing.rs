//! The fields of zoneinfo the kernel computes, from the inputs it computes
//! them from.
//!
//! `init_per_zone_wmark_min` → `setup_per_zone_wmarks` (the watermarks of
//! every zone of every node, from one global `min_free_kbytes`), then
//! `zone_pcp_update` → `zone_set_pageset_high_and_batch` (each zone's
//! `batch`, `high_min` and `high_max`, split over its node's CPUs);
//! `setup_per_zone_lowmem_reserve` per node; `refresh_zone_stat_thresholds`
//! over all online CPUs. The same functions size the allocator's zones, so
//! what matches a machine here matches it in the model.

use super::zoneinfo::{KERNEL_ZONE_NAMES, Zoneinfo};
use crate::era::Era;
use crate::types::ZoneType;
use crate::watermark::{
    MIN_PERCPU_PAGELIST_HIGH_FRACTION, NR_KERNEL_ZONES, Sysctls, Watermarks, node_lowmem_reserve,
    setup_per_zone_wmarks_with, stat_threshold, zone_highsize,
};
use crate::zone::{PCP_HIGH_BATCHES, zone_batchsize_for};

/// What the computed fields depend on, besides each zone's managed pages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizingInputs {
    /// `min_free_kbytes`, `watermark_scale_factor`, `lowmem_reserve_ratio`
    /// and THP.
    pub sysctls: Sysctls,
    /// `vm.percpu_pagelist_high_fraction` (0: the watermark rule).
    pub percpu_pagelist_high_fraction: u32,
    /// CPUs of each node (`cpumask_weight(cpumask_of_node())`), indexed
    /// by node id: a node without CPUs, or beyond the list, splits its
    /// `high` over every online CPU. Under fake NUMA every node lists the
    /// same CPUs.
    pub cpus_per_node: Vec<u32>,
    /// Online CPUs (`num_online_cpus`), which `stat_threshold` and a
    /// CPU-less node's `high` use.
    pub online_cpus: u32,
    /// `PAGE_SHIFT`.
    pub page_shift: u32,
    /// `pageblock_order`.
    pub pageblock_order: u32,
    /// The kernel (`zone_batchsize`'s cap changed after 2.6; a Movable
    /// zone's watermarks at 6.6).
    pub era: Era,
    /// Pages the kernel freed to a zone after it last sized its zones, as
    /// `(node, zone index, pages)`: its init sections and the initrd,
    /// which a zoneinfo read later counts in `managed` and its computed
    /// fields do not. The sizes come from the managed pages less these.
    pub freed_after_sizing: Vec<(u32, usize, u64)>,
}

/// One zone's computed fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneSizes {
    /// Its node.
    pub node: u32,
    /// Its zone type, as an index of [`KERNEL_ZONE_NAMES`].
    pub zone: usize,
    /// `min`, `low`, `high`, `promo`.
    pub watermarks: Watermarks,
    /// `lowmem_reserve[]` (`protection`).
    pub protection: [u64; NR_KERNEL_ZONES],
    /// `pcp->batch`.
    pub batch: u32,
    /// `pcp->high_min`: the zone's `high` before 6.7 (`6 × batch` before
    /// 5.14).
    pub high_min: u32,
    /// `pcp->high_max` (6.7 on; before 6.7 no kernel has it, and this is
    /// what 6.7's rule would give).
    pub high_max: u32,
    /// `stat_threshold`.
    pub stat_threshold: u64,
}

/// The zone type a kernel zone index is sized as: Device manages no pages
/// and is neither Movable nor highmem, so the watermark sums take it as a
/// lowmem zone of none.
fn sized_as(zone: usize) -> ZoneType {
    ZoneType::ALL.get(zone).copied().unwrap_or(ZoneType::Normal)
}

/// The computed fields of `zones`, given as `(node, zone index, managed
/// pages)` for every zone of every node, in the same order.
pub fn kernel_zone_sizes(zones: &[(u32, usize, u64)], inputs: &SizingInputs) -> Vec<ZoneSizes> {
    let sized: Vec<(u32, usize, u64)> = zones
        .iter()
        .map(|&(node, zone, managed)| {
            let freed = inputs
                .freed_after_sizing
                .iter()
                .filter(|&&(n, z, _)| (n, z) == (node, zone))
                .map(|&(_, _, pages)| pages)
                .sum::<u64>();
            (node, zone, managed.saturating_sub(freed))
        })
        .collect();
    let zones = &sized[..];
    let page_size = 1u64 << inputs.page_shift;
    let typed: Vec<(ZoneType, u64)> = zones.iter().map(|&(_, z, m)| (sized_as(z), m)).collect();
    let marks = setup_per_zone_wmarks_with(
        &typed,
        page_size,
        1 << inputs.pageblock_order,
        &inputs.sysctls,
        inputs.era,
    );
    let online = inputs.online_cpus.max(1);
    zones
        .iter()
        .zip(marks)
        .map(|(&(node, zone, managed), watermarks)| {
            let watermarks = watermarks.in_era(inputs.era.has_wmark_promo());
            let mut per_node = [0; NR_KERNEL_ZONES];
            for &(_, z, m) in zones.iter().filter(|(n, _, _)| *n == node) {
                per_node[z] += m;
            }
            let protection =
                node_lowmem_reserve(&per_node, &inputs.sysctls.lowmem_reserve_ratio)[zone];
            let batch = zone_batchsize_for(managed, inputs.era).max(1);
            // `zone_highsize`: a node without CPUs splits over all of them.
            let split = match inputs.cpus_per_node.get(node as usize) {
                Some(&n) if n > 0 => n,
                _ => online,
            };
            let highsize = |total| zone_highsize(total, batch, split);
            let (high_min, high_max) = match inputs.percpu_pagelist_high_fraction {
                _ if !inputs.era.pcp_high_from_watermark() => {
                    (PCP_HIGH_BATCHES * batch, PCP_HIGH_BATCHES * batch)
                }
                0 => (
                    highsize(watermarks.low),
                    highsize(managed / u64::from(MIN_PERCPU_PAGELIST_HIGH_FRACTION)),
                ),
                f => (
                    highsize(managed / u64::from(f)),
                    highsize(managed / u64::from(f)),
                ),
            };
            ZoneSizes {
                node,
                zone,
                watermarks,
                protection,
                batch,
                high_min,
                high_max,
                stat_threshold: stat_threshold(managed, inputs.page_shift, online) as u64,
            }
        })
        .collect()
}

impl Zoneinfo {
    /// Every zone as `(node, zone index, managed pages)`, for
    /// [`kernel_zone_sizes`]; zones of a name the kernel of
    /// [`KERNEL_ZONE_NAMES`] does not have are left out.
    pub fn managed_zones(&self) -> Vec<(u32, usize, u64)> {
        self.zones
            .iter()
            .filter_map(|z| {
                let index = KERNEL_ZONE_NAMES.iter().position(|n| *n == z.zone)?;
                Some((z.node, index, z.managed))
            })
            .collect()
    }
}

impl Zoneinfo {
    /// Sets each zone's `managed` and computed fields to `sizes`' (from
    /// [`kernel_zone_sizes`] over other managed pages, a machine's):
    /// what the model's zones would show with that memory managed.
    pub fn apply_sizes(&mut self, managed: &[(u32, usize, u64)], sizes: &[ZoneSizes]) {
        for (&(node, zone, pages), size) in managed.iter().zip(sizes) {
            let Some(info) = self
                .zones
                .iter_mut()
                .find(|z| z.node == node && z.zone == KERNEL_ZONE_NAMES[zone])
            else {
                continue;
            };
            info.managed = pages;
            info.watermarks = size.watermarks;
            info.protection = size.protection.to_vec();
            for p in info.populated.iter_mut().flat_map(|p| &mut p.pagesets) {
                p.batch = u64::from(size.batch);
                if self.format.high_is_the_zones() {
                    p.high = u64::from(size.high_min);
                }
                p.high_min = p.high_min.map(|_| u64::from(size.high_min));
                p.high_max = p.high_max.map(|_| u64::from(size.high_max));
                p.stat_threshold = size.stat_threshold;
            }
        }
    }
}
