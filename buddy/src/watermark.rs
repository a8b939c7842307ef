//! Zone watermarks as the kernel computes them at boot and after memory
//! hotplug (`init_per_zone_wmark_min`).
//!
//! `calculate_min_free_kbytes`: `min_free_kbytes = sqrt(16 × lowmem KiB)`,
//! clamped to 128 KiB..256 MiB, where lowmem is the managed memory of every
//! zone up to ZONE_NORMAL. `__setup_per_zone_wmarks`: each such zone's
//! `min` is its share of `min_free_kbytes` by managed pages; a Movable
//! zone's `min` is `managed / 1024` clamped to 32..128 pages
//! (`SWAP_CLUSTER_MAX`); the distances `min → low → high` are the larger of
//! `min / 4` and `managed × watermark_scale_factor / 10000` (10 by default,
//! 0.1 %). `setup_per_zone_lowmem_reserve` keeps part of each lower zone
//! back from requests that could have used a higher one. The allocation
//! path checks them as `zone_watermark_fast` does (see
//! [`Allocator`](crate::Allocator)).

use crate::types::{MAX_NR_ZONES, ZoneType};

/// `watermark_scale_factor`'s default: 10, in units of 0.01 %.
pub const WATERMARK_SCALE_FACTOR: u64 = 10;

/// `SWAP_CLUSTER_MAX`: the smallest `min` of a Movable zone, in pages.
pub const SWAP_CLUSTER_MAX: u64 = 32;

/// One zone's watermarks, in pages (`_watermark[WMARK_MIN/LOW/HIGH]`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Watermarks {
    /// `WMARK_MIN`.
    pub min: u64,
    /// `WMARK_LOW`.
    pub low: u64,
    /// `WMARK_HIGH`.
    pub high: u64,
}

/// `calculate_min_free_kbytes` for `lowmem_kbytes` of lowmem.
pub fn min_free_kbytes(lowmem_kbytes: u64) -> u64 {
    (lowmem_kbytes * 16).isqrt().clamp(128, 262_144)
}

/// `__setup_per_zone_wmarks` over `(type, managed pages)` of every zone,
/// for pages of `page_size` bytes; the watermarks in the same order.
pub fn setup_per_zone_wmarks(zones: &[(ZoneType, u64)], page_size: u64) -> Vec<Watermarks> {
    let lowmem_pages: u64 = zones
        .iter()
        .filter(|(kind, _)| *kind != ZoneType::Movable)
        .map(|(_, managed)| managed)
        .sum();
    let pages_min = min_free_kbytes(lowmem_pages * page_size / 1024) * 1024 / page_size;
    zones
        .iter()
        .map(|&(kind, managed)| {
            let share = (pages_min * managed).checked_div(lowmem_pages).unwrap_or(0);
            let min = if kind == ZoneType::Movable {
                (managed / 1024).clamp(SWAP_CLUSTER_MAX, 128)
            } else {
                share
            };
            let distance = (share / 4).max(managed * WATERMARK_SCALE_FACTOR / 10_000);
            Watermarks {
                min,
                low: min + distance,
                high: min + 2 * distance,
            }
        })
        .collect()
}

/// `sysctl_lowmem_reserve_ratio`'s defaults per zone type (DMA, DMA32,
/// Normal, Movable): a zone keeps `1/ratio` of the memory above it back from
/// requests that could have used that memory.
pub const LOWMEM_RESERVE_RATIO: [u64; MAX_NR_ZONES] = [256, 256, 32, 0];

/// `setup_per_zone_lowmem_reserve` for one node's zones, given as
/// `(type, managed pages)`: each zone's `lowmem_reserve[]`, indexed by the
/// highest zone type of a request, in the same order.
pub fn lowmem_reserve(zones: &[(ZoneType, u64)]) -> Vec<[u64; MAX_NR_ZONES]> {
    zones
        .iter()
        .map(|&(kind, managed)| {
            let ratio = LOWMEM_RESERVE_RATIO[kind as usize];
            let mut reserve = [0; MAX_NR_ZONES];
            if ratio == 0 || managed == 0 {
                return reserve;
            }
            for upper in ZoneType::ALL.into_iter().filter(|&t| t > kind) {
                let above: u64 = zones
                    .iter()
                    .filter(|(t, _)| *t > kind && *t <= upper)
                    .map(|(_, m)| m)
                    .sum();
                reserve[upper as usize] = above / ratio;
            }
            reserve
        })
        .collect()
}

/// `calculate_normal_threshold`: how far a CPU's `NR_FREE_PAGES` delta may
/// drift before it is folded into the zone's counter, for a zone of
/// `managed` pages of `1 << page_shift` bytes on `cpus` CPUs (at most 125).
pub fn stat_threshold(managed: u64, page_shift: u32, cpus: u32) -> i64 {
    let fls = |x: u64| 64 - i64::from(x.leading_zeros());
    let mem = managed >> 27u32.saturating_sub(page_shift);
    (2 * fls(u64::from(cpus)) * (1 + fls(mem))).min(125)
}

/// `MIN_PERCPU_PAGELIST_HIGH_FRACTION`: the least
/// `percpu_pagelist_high_fraction` the kernel accepts (0 aside).
pub const MIN_PERCPU_PAGELIST_HIGH_FRACTION: u32 = 8;

/// `zone_highsize`: `total_pages` (the zone's low watermark, or its managed
/// pages over `percpu_pagelist_high_fraction`) split over
/// `nr_split_cpus`, at least `4 × batch`.
pub fn zone_highsize(total_pages: u64, batch: u32, nr_split_cpus: u32) -> u32 {
    let high = total_pages / u64::from(nr_split_cpus.max(1));
    high.max(u64::from(batch) << 2).min(u64::from(u32::MAX)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_formulas() {
        // 16 GiB of lowmem: sqrt(16 × 16 GiB in KiB) = 16384 KiB.
        assert_eq!(min_free_kbytes(16 << 20), 16384);
        assert_eq!(min_free_kbytes(1000), 128, "clamped below");
        assert_eq!(min_free_kbytes(1 << 40), 262_144, "clamped above");
        let zones = [
            (ZoneType::Dma, 3_976),
            (ZoneType::Dma32, 782_336),
            (ZoneType::Normal, 3_407_872),
            (ZoneType::Movable, 1 << 20),
        ];
        let w = setup_per_zone_wmarks(&zones, 4096);
        let lowmem: u64 = 3_976 + 782_336 + 3_407_872;
        let pages_min = min_free_kbytes(lowmem * 4) / 4;
        assert_eq!(w[2].min, pages_min * 3_407_872 / lowmem);
        assert_eq!(w[2].low - w[2].min, (w[2].min / 4).max(3_407));
        assert_eq!(w[2].high - w[2].low, w[2].low - w[2].min);
        assert_eq!(w[3].min, 128, "Movable: managed / 1024 capped at 128");
        assert_eq!(zone_highsize(10_000, 63, 2), 5_000);
        assert_eq!(zone_highsize(100, 63, 2), 252, "at least 4 batches");
    }

    #[test]
    fn lowmem_reserve_and_stat_threshold() {
        let zones = [
            (ZoneType::Dma, 3_976),
            (ZoneType::Dma32, 782_336),
            (ZoneType::Normal, 3_407_872),
        ];
        let r = lowmem_reserve(&zones);
        // An empty Movable zone adds nothing, so a movable request sees the
        // same reserve as a Normal one.
        let both = (782_336 + 3_407_872) / 256;
        assert_eq!(r[0], [0, 782_336 / 256, both, both]);
        assert_eq!(r[1], [0, 0, 3_407_872 / 256, 3_407_872 / 256]);
        assert_eq!(r[2], [0; 4], "nothing above Normal");
        // 13 GiB on 2 CPUs: 2 × fls(2) × (1 + fls(104)) = 2 × 2 × 8.
        assert_eq!(stat_threshold(3_407_872, 12, 2), 32);
        assert_eq!(stat_threshold(1 << 40, 12, 1024), 125, "capped");
    }
}
