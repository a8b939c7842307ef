//! Zone watermarks as the kernel computes them at boot and after memory
//! hotplug (`init_per_zone_wmark_min`).
//!
//! `calculate_min_free_kbytes`: `min_free_kbytes = sqrt(16 × lowmem KiB)`,
//! clamped to 128 KiB..256 MiB, where lowmem is the managed memory of every
//! zone up to ZONE_NORMAL (at boot; after hotplug the kernel counts only
//! the pages above each zone's high watermark, which pfnlab does not
//! repeat). With transparent huge pages enabled, khugepaged raises it
//! (`set_recommended_min_free_kbytes`) to eleven pageblocks per populated
//! zone up to ZONE_NORMAL — two free, and `MIGRATE_PCPTYPES²` almost free
//! — at most 5 % of lowmem; a value set with the sysctl replaces both
//! ([`Sysctls`]). `__setup_per_zone_wmarks`: each zone's `min` is its
//! share of `min_free_kbytes` by managed pages, except that from Linux 6.6
//! a Movable zone, like highmem, is left out of the pages shared over and
//! its `min` is `managed / 1024` clamped to 32..128 pages
//! (`SWAP_CLUSTER_MAX`; [`Era::movable_wmarks_like_highmem`]: before 6.6
//! it takes its share, so the other zones' `min` are smaller by its part);
//! the distances `min → low → high → promo` are the
//! larger of `min / 4` and `managed × watermark_scale_factor / 10000` (10
//! by default, 0.1 %; `WMARK_PROMO` is Linux 5.18's, for memory tiering,
//! and 0 in an era before it). `setup_per_zone_lowmem_reserve` keeps part of each lower zone
//! back from requests that could have used a higher one. The allocation
//! path checks them as `zone_watermark_fast` does (see
//! [`Allocator`](crate::Allocator)).

use crate::era::Era;
use crate::types::{MAX_NR_ZONES, ZoneType};

/// `watermark_scale_factor`'s default: 10, in units of 0.01 %.
pub const WATERMARK_SCALE_FACTOR: u64 = 10;

/// `SWAP_CLUSTER_MAX`: the smallest `min` of a Movable zone from Linux
/// 6.6, in pages.
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
    /// `WMARK_PROMO` (Linux 5.18 on; nothing in pfnlab checks it).
    pub promo: u64,
}

impl Watermarks {
    /// These watermarks in an era with `WMARK_PROMO` (`promo` true) or
    /// without it (`promo` 0).
    pub fn in_era(self, promo: bool) -> Watermarks {
        Watermarks {
            promo: if promo { self.promo } else { 0 },
            ..self
        }
    }
}

/// `MAX_NR_ZONES` of an x86_64 kernel with `CONFIG_ZONE_DEVICE`: DMA,
/// DMA32, Normal, Movable and Device, the zones `/proc/zoneinfo` lists per
/// node and `lowmem_reserve_ratio` has a ratio for (the model's zone types
/// stop at Movable: [`MAX_NR_ZONES`](crate::types::MAX_NR_ZONES)).
pub const NR_KERNEL_ZONES: usize = 5;

/// `MIGRATE_PCPTYPES` (Unmovable, Movable, Reclaimable), as
/// `set_recommended_min_free_kbytes` counts them.
const MIGRATE_PCPTYPES: u64 = 3;

/// The `vm` sysctls the zones' watermarks and reserves are computed from.
/// The default is the kernel's default on a kernel without transparent
/// huge pages (or with them `never` enabled); [`Sysctls::thp`] says
/// otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sysctls {
    /// `vm.min_free_kbytes` as set by hand; `None` for the kernel's own
    /// value (`calculate_min_free_kbytes`, raised by khugepaged when
    /// [`Sysctls::thp`]).
    pub min_free_kbytes: Option<u64>,
    /// `vm.watermark_scale_factor`, in units of 0.01 %.
    pub watermark_scale_factor: u64,
    /// `vm.lowmem_reserve_ratio`, one per zone type up to Device.
    pub lowmem_reserve_ratio: [u64; NR_KERNEL_ZONES],
    /// Whether PMD-sized transparent huge pages are enabled
    /// (`/sys/kernel/mm/transparent_hugepage/enabled` is `always` or
    /// `madvise`), so khugepaged's `set_recommended_min_free_kbytes`
    /// decides the default `min_free_kbytes`.
    pub thp: bool,
}

impl Default for Sysctls {
    fn default() -> Sysctls {
        Sysctls {
            min_free_kbytes: None,
            watermark_scale_factor: WATERMARK_SCALE_FACTOR,
            lowmem_reserve_ratio: LOWMEM_RESERVE_RATIO,
            thp: false,
        }
    }
}

/// `calculate_min_free_kbytes` for `lowmem_kbytes` of lowmem.
pub fn min_free_kbytes(lowmem_kbytes: u64) -> u64 {
    (lowmem_kbytes * 16).isqrt().clamp(128, 262_144)
}

/// `set_recommended_min_free_kbytes` (khugepaged, 2.6.38 on): eleven
/// pageblocks of `pageblock_nr_pages` for each of `nr_zones` populated
/// zones up to ZONE_NORMAL, at most a twentieth of `free_buffer_pages`
/// (`nr_free_buffer_pages`: those zones' managed pages above their high
/// watermarks), in KiB for pages of `page_size` bytes; never below
/// `current_kbytes`.
pub fn recommended_min_free_kbytes(
    nr_zones: u64,
    pageblock_nr_pages: u64,
    free_buffer_pages: u64,
    page_size: u64,
    current_kbytes: u64,
) -> u64 {
    let pages = pageblock_nr_pages * nr_zones * (2 + MIGRATE_PCPTYPES * MIGRATE_PCPTYPES);
    let kbytes = pages.min(free_buffer_pages / 20) * (page_size / 1024);
    kbytes.max(current_kbytes)
}

/// `min_free_kbytes` as the kernel of `era` settles it for zones `(type,
/// managed pages)` of pages of `page_size` bytes in pageblocks of
/// `pageblock_nr_pages`: the sysctl's value if set, else
/// `calculate_min_free_kbytes`, raised by khugepaged when THP is enabled
/// (khugepaged's cap counts the pages above the high watermarks that
/// value gives, which follow the era).
pub fn resolve_min_free_kbytes(
    zones: &[(ZoneType, u64)],
    page_size: u64,
    pageblock_nr_pages: u64,
    sysctls: &Sysctls,
    era: Era,
) -> u64 {
    if let Some(kbytes) = sysctls.min_free_kbytes {
        return kbytes;
    }
    let lowmem = |(kind, _): &&(ZoneType, u64)| *kind <= ZoneType::Normal;
    let lowmem_pages: u64 = zones.iter().filter(lowmem).map(|(_, m)| m).sum();
    let base = min_free_kbytes(lowmem_pages * page_size / 1024);
    if !sysctls.thp {
        return base;
    }
    let marks = wmarks_for(
        zones,
        base * 1024 / page_size,
        sysctls.watermark_scale_factor,
        era,
    );
    let free_buffer: u64 = zones
        .iter()
        .zip(&marks)
        .filter(|(z, _)| lowmem(z))
        .map(|((_, managed), w)| managed.saturating_sub(w.high))
        .sum();
    let populated = zones.iter().filter(lowmem).filter(|(_, m)| *m > 0).count() as u64;
    recommended_min_free_kbytes(populated, pageblock_nr_pages, free_buffer, page_size, base)
}

/// `__setup_per_zone_wmarks` of today's kernel over `(type, managed
/// pages)` of every zone, for pages of `page_size` bytes, with
/// `min_free_kbytes` and `watermark_scale_factor` at their defaults (no
/// THP); the watermarks in the same order.
pub fn setup_per_zone_wmarks(zones: &[(ZoneType, u64)], page_size: u64) -> Vec<Watermarks> {
    setup_per_zone_wmarks_with(
        zones,
        page_size,
        1 << 9,
        &Sysctls::default(),
        Era::default(),
    )
}

/// `__setup_per_zone_wmarks` of the kernel of `era` with the `sysctls`
/// given (`min_free_kbytes` resolved by [`resolve_min_free_kbytes`]).
pub fn setup_per_zone_wmarks_with(
    zones: &[(ZoneType, u64)],
    page_size: u64,
    pageblock_nr_pages: u64,
    sysctls: &Sysctls,
    era: Era,
) -> Vec<Watermarks> {
    let kbytes = resolve_min_free_kbytes(zones, page_size, pageblock_nr_pages, sysctls, era);
    wmarks_for(
        zones,
        kbytes * 1024 / page_size,
        sysctls.watermark_scale_factor,
        era,
    )
}

/// The watermarks for `pages_min` pages of `min_free_kbytes` and
/// `scale_factor` in `era`.
fn wmarks_for(
    zones: &[(ZoneType, u64)],
    pages_min: u64,
    scale_factor: u64,
    era: Era,
) -> Vec<Watermarks> {
    // `is_highmem(zone) || zone_idx(zone) == ZONE_MOVABLE` from 6.6; an
    // x86_64 kernel has no highmem.
    let like_highmem =
        |kind: ZoneType| kind == ZoneType::Movable && era.movable_wmarks_like_highmem();
    let lowmem_pages: u64 = zones
        .iter()
        .filter(|(kind, _)| !like_highmem(*kind))
        .map(|(_, managed)| managed)
        .sum();
    zones
        .iter()
        .map(|&(kind, managed)| {
            let share = (pages_min * managed).checked_div(lowmem_pages).unwrap_or(0);
            let min = if like_highmem(kind) {
                (managed / 1024).clamp(SWAP_CLUSTER_MAX, 128)
            } else {
                share
            };
            let distance = (share / 4).max(managed * scale_factor / 10_000);
            Watermarks {
                min,
                low: min + distance,
                high: min + 2 * distance,
                promo: min + 3 * distance,
            }
        })
        .collect()
}

/// `sysctl_lowmem_reserve_ratio`'s defaults per zone type (DMA, DMA32,
/// Normal, Movable, Device): a zone keeps `1/ratio` of the memory above it
/// back from requests that could have used that memory.
pub const LOWMEM_RESERVE_RATIO: [u64; NR_KERNEL_ZONES] = [256, 256, 32, 0, 0];

/// `setup_per_zone_lowmem_reserve` for one node's zones, given as
/// `(type, managed pages)`, with the default ratios; see
/// [`lowmem_reserve_with`].
pub fn lowmem_reserve(zones: &[(ZoneType, u64)]) -> Vec<[u64; MAX_NR_ZONES]> {
    lowmem_reserve_with(zones, &LOWMEM_RESERVE_RATIO)
}

/// `setup_per_zone_lowmem_reserve` for one node, given the managed pages
/// of each zone type up to Device: row `i` is zone type `i`'s
/// `lowmem_reserve[]`, entry `j` the managed pages of the types above `i`
/// up to `j` over `ratio[i]` (a row of zeros for a ratio of 0 or a zone
/// with no pages; the highest type keeps none).
pub fn node_lowmem_reserve(
    managed: &[u64; NR_KERNEL_ZONES],
    ratio: &[u64; NR_KERNEL_ZONES],
) -> [[u64; NR_KERNEL_ZONES]; NR_KERNEL_ZONES] {
    let mut reserve = [[0; NR_KERNEL_ZONES]; NR_KERNEL_ZONES];
    for i in (0..NR_KERNEL_ZONES - 1).filter(|&i| ratio[i] != 0 && managed[i] != 0) {
        let mut above = 0;
        for j in i + 1..NR_KERNEL_ZONES {
            above += managed[j];
            reserve[i][j] = above / ratio[i];
        }
    }
    reserve
}

/// `setup_per_zone_lowmem_reserve` for one node's zones, given as
/// `(type, managed pages)`, with `ratio` per zone type: each zone's
/// `lowmem_reserve[]` up to Movable, indexed by the highest zone type of a
/// request, in the same order (the Device zone manages no pages, so it
/// adds nothing).
pub fn lowmem_reserve_with(
    zones: &[(ZoneType, u64)],
    ratio: &[u64; NR_KERNEL_ZONES],
) -> Vec<[u64; MAX_NR_ZONES]> {
    let mut managed = [0; NR_KERNEL_ZONES];
    for &(kind, pages) in zones {
        managed[kind as usize] += pages;
    }
    let reserve = node_lowmem_reserve(&managed, ratio);
    zones
        .iter()
        .map(|&(kind, _)| std::array::from_fn(|j| reserve[kind as usize][j]))
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

    /// Before 6.6 a Movable zone is one more lowmem zone: it takes its
    /// share of `min_free_kbytes`, the others' shares shrink by it, and an
    /// empty one has no watermarks; from 6.6 it is left out and clamped
    /// like highmem.
    #[test]
    fn movable_takes_its_share_until_6_6() {
        let sysctls = Sysctls {
            min_free_kbytes: Some(45_056),
            ..Sysctls::default()
        };
        let pages_min = 45_056 / 4;
        let zones = [
            (ZoneType::Dma, 3_840),
            (ZoneType::Dma32, 765_920),
            (ZoneType::Movable, 232_530),
        ];
        let lowmem: u64 = zones.iter().map(|(_, m)| m).sum();
        let marks = |era| setup_per_zone_wmarks_with(&zones, 4096, 512, &sysctls, era);
        let old = marks(Era::V6_1);
        for ((_, managed), w) in zones.iter().zip(&old) {
            assert_eq!(w.min, pages_min * managed / lowmem);
        }
        assert_eq!((old[0].min, old[1].min, old[2].min), (43, 8_607, 2_613));
        assert_eq!(old[2].low - old[2].min, old[2].min / 4);
        let new = marks(Era::V6_6);
        let lowmem = lowmem - 232_530;
        for ((_, managed), w) in zones.iter().zip(&new).take(2) {
            assert_eq!(w.min, pages_min * managed / lowmem);
        }
        assert_eq!((new[0].min, new[1].min, new[2].min), (56, 11_207, 128));
        // The distances still come from the share over the other zones.
        let share = pages_min * 232_530 / lowmem;
        assert_eq!(new[2].low - new[2].min, share / 4);
        let empty = [(ZoneType::Dma32, 765_920), (ZoneType::Movable, 0)];
        let movable = |era| setup_per_zone_wmarks_with(&empty, 4096, 512, &sysctls, era)[1];
        assert_eq!(movable(Era::V6_1), Watermarks::default());
        assert_eq!(movable(Era::V5_13), Watermarks::default());
        let clamped = Watermarks {
            min: SWAP_CLUSTER_MAX,
            low: SWAP_CLUSTER_MAX,
            high: SWAP_CLUSTER_MAX,
            promo: SWAP_CLUSTER_MAX,
        };
        assert_eq!(movable(Era::V6_6), clamped);
        assert_eq!(movable(Era::V6_18), clamped);
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
