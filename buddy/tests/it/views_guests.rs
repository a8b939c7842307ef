//! The kernel's views against Linux 6.1 itself: the saved `/proc` and
//! `/sys` of Debian 12's kernel booted under QEMU
//! (`benches/tests/data/guests/6.1/`, whose README says how), each zone
//! sized by 6.1's formulas from its own managed pages, the guest's sysctls
//! and CPUs.
//!
//! The kernel sized the zones before it freed the initrd and its own init
//! sections (the unused parts of the kernel image), so a zone holding
//! either now manages more pages than the kernel sized it from; the
//! fields those pages move are named where they are asserted.

use std::path::{Path, PathBuf};

use buddy::views::{
    Cause, SizingInputs, ZoneSizes, Zoneinfo, compare, kernel_zone_sizes, parse_zoneinfo,
};
use buddy::{Era, Sysctls};

fn guests() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../benches/tests/data/guests/6.1")
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{dir:?}/{file}: {e}"))
}

fn number(dir: &Path, file: &str) -> u64 {
    read(dir, file).trim().parse().unwrap()
}

/// The CPUs of a cpulist (`0-1`, `0,2-3`).
fn cpus_of(list: &str) -> u32 {
    list.trim()
        .split(',')
        .map(|part| match part.split_once('-') {
            Some((a, b)) => b.parse::<u32>().unwrap() - a.parse::<u32>().unwrap() + 1,
            None => 1,
        })
        .sum()
}

/// A guest's inputs in `era`: its four sysctls (`min_free_kbytes` as its
/// file has it), THP, online CPUs and each node's.
fn inputs(dir: &Path, era: Era) -> SizingInputs {
    let vm = |f: &str| number(dir, &format!("proc/sys/vm/{f}"));
    let ratio: Vec<u64> = read(dir, "proc/sys/vm/lowmem_reserve_ratio")
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    let nodes = read(dir, "sys/devices/system/node/online");
    let cpus_per_node = (0..=nodes
        .trim()
        .rsplit(['-', ','])
        .next()
        .unwrap()
        .parse()
        .unwrap())
        .map(|n: u32| {
            cpus_of(&read(
                dir,
                &format!("sys/devices/system/node/node{n}/cpulist"),
            ))
        })
        .collect();
    SizingInputs {
        sysctls: Sysctls {
            min_free_kbytes: Some(vm("min_free_kbytes")),
            watermark_scale_factor: vm("watermark_scale_factor"),
            lowmem_reserve_ratio: ratio.try_into().unwrap(),
            thp: !read(dir, "sys/kernel/mm/transparent_hugepage/enabled").contains("[never]"),
        },
        percpu_pagelist_high_fraction: vm("percpu_pagelist_high_fraction") as u32,
        cpus_per_node,
        online_cpus: cpus_of(&read(dir, "sys/devices/system/cpu/online")),
        page_shift: 12,
        pageblock_order: 9,
        era,
        freed_after_sizing: Vec::new(),
    }
}

/// The computed fields of `info`'s zones that `sizes` does not give, as
/// `zone field`: watermarks, `protection[i]`, and each pageset's `high`
/// (the zone's, in 6.1), `batch` and vmstat threshold.
fn mismatches(info: &Zoneinfo, sizes: &[ZoneSizes]) -> Vec<String> {
    let mut out = Vec::new();
    for (zone, size) in info.zones.iter().zip(sizes) {
        let mut check = |field: &str, ours: u64, theirs: u64| {
            if ours != theirs {
                out.push(format!("{} {field}", zone.zone));
            }
        };
        let (w, s) = (zone.watermarks, size.watermarks);
        check("min", s.min, w.min);
        check("low", s.low, w.low);
        check("high", s.high, w.high);
        for (i, (&ours, &theirs)) in size.protection.iter().zip(&zone.protection).enumerate() {
            check(&format!("protection[{i}]"), ours, theirs);
        }
        // Every CPU's pageset holds the zone's numbers.
        if let Some(p) = zone.populated.as_ref().and_then(|p| p.pagesets.first()) {
            check("pageset high", u64::from(size.high_min), p.high);
            check("pageset batch", u64::from(size.batch), p.batch);
            check("pageset threshold", size.stat_threshold, p.stat_threshold);
        }
    }
    out
}

/// `movablecore=1G`: DMA and DMA32 below 3 GiB, the 1 GiB above 4 GiB
/// all Movable, no Normal. 6.1 shares `min_free_kbytes` (45,056 KiB,
/// khugepaged's) over all three zones, Movable included, as every
/// release before 6.6 does: DMA's `min` is 43, not 6.6's 57.
///
/// Sized from the guest's managed pages as it shows them, every field
/// the freed pages do not move is the guest's: DMA's watermarks and
/// pageset `high`, every `batch` and vmstat threshold, and each reserve
/// that counts no DMA32 page. The rest are named: DMA32's and
/// Movable's watermarks and pageset `high`, and the reserves that count
/// DMA32's pages. This guest's kernel image was loaded at 16 MiB
/// (`/proc/iomem`), so its init sections and the initrd were freed into
/// DMA32 after the zones were sized. Sized from 2,240 fewer DMA32 pages,
/// every field is the guest's (any count from 2,219 to 2,314 gives them
/// all: the saved files do not record the pages freed).
#[test]
fn movablecore_1g_matches_6_1_s_watermarks() {
    let dir = guests().join("movablecore-1g");
    let info = parse_zoneinfo(&read(&dir, "proc/zoneinfo")).unwrap();
    let managed = info.managed_zones();
    let given = inputs(&dir, Era::V6_1);
    assert_eq!(
        (given.online_cpus, given.cpus_per_node.as_slice()),
        (2, &[2][..])
    );
    let sizes = kernel_zone_sizes(&managed, &given);
    let moved: Vec<String> = [
        "DMA protection[1]",
        "DMA protection[2]",
        "DMA protection[3]",
        "DMA protection[4]",
        "DMA32 min",
        "DMA32 low",
        "DMA32 high",
        "DMA32 pageset high",
        "Movable min",
        "Movable low",
        "Movable high",
        "Movable pageset high",
    ]
    .map(String::from)
    .into();
    assert_eq!(mismatches(&info, &sizes), moved);

    let before_freeing: Vec<(u32, usize, u64)> = managed
        .iter()
        .map(|&(node, zone, pages)| match zone {
            1 => (node, zone, pages - 2_240),
            _ => (node, zone, pages),
        })
        .collect();
    let sizes = kernel_zone_sizes(&before_freeing, &given);
    assert_eq!(mismatches(&info, &sizes), Vec::<String>::new());

    let dma_min = |era| {
        kernel_zone_sizes(&before_freeing, &inputs(&dir, era))[0]
            .watermarks
            .min
    };
    assert_eq!(dma_min(Era::V6_1), 43);
    assert_eq!(dma_min(Era::V6_6), 57, "6.6 leaves Movable out");
}

/// Every guest's empty zones, Movable among them, have watermarks of 0 in
/// 6.1 (6.6 gave an empty Movable zone 32 pages), and no reserves.
#[test]
fn every_6_1_guests_empty_zones_have_no_watermarks() {
    let mut movable = 0;
    for entry in std::fs::read_dir(guests()).unwrap() {
        let dir = entry.unwrap().path();
        let info = parse_zoneinfo(&read(&dir, "proc/zoneinfo")).unwrap();
        let sizes = kernel_zone_sizes(&info.managed_zones(), &inputs(&dir, Era::V6_1));
        for (zone, size) in info.zones.iter().zip(&sizes) {
            if zone.managed > 0 {
                continue;
            }
            let at = format!("{dir:?} node {} {}", zone.node, zone.zone);
            assert_eq!(zone.watermarks, buddy::Watermarks::default(), "{at}");
            assert_eq!(size.watermarks, buddy::Watermarks::default(), "{at}");
            assert_eq!(size.protection.to_vec(), zone.protection, "{at}");
            movable += usize::from(zone.zone == "Movable");
        }
    }
    // Every node but movablecore-1g's: 4 + 2 + 1 + 64 + 1 + 1.
    assert_eq!(movable, 73, "the empty Movable zones checked");
}

/// `numa=fake=64`: a capture of this guest once found node 0's DMA zone
/// boosted (`boost 512`, after a fallback stole a pageblock), and
/// zoneinfo prints each watermark with the boost added; the guest's file
/// is given that boost here. The comparison holds the model's watermarks
/// (never boosted) against the printed ones less the boost, and names
/// the boost itself as live state.
#[test]
fn a_boosted_zone_is_compared_without_its_boost() {
    let dir = guests().join("numa-fake-64");
    let mut ours = parse_zoneinfo(&read(&dir, "proc/zoneinfo")).unwrap();
    let mut theirs = ours.clone();
    let dma = theirs
        .zones
        .iter_mut()
        .find(|z| z.node == 0 && z.zone == "DMA")
        .unwrap();
    assert_eq!((dma.boost, dma.watermarks.min), (0, 163));
    dma.boost = 512;
    dma.watermarks.min += 512;
    dma.watermarks.low += 512;
    dma.watermarks.high += 512;
    let theirs = theirs;
    let given = inputs(&dir, Era::V6_1);
    let named = |ours: &Zoneinfo| -> Vec<(String, u64, u64, Option<Cause>)> {
        compare(ours, &theirs, &given)
            .into_iter()
            .map(|d| {
                (
                    format!("{} {} {}", d.node, d.zone, d.field),
                    d.ours,
                    d.theirs,
                    d.cause,
                )
            })
            .collect()
    };
    let boost = ("0 DMA boost".to_owned(), 0, 512, Some(Cause::LiveState));
    assert_eq!(named(&ours), std::slice::from_ref(&boost));

    // A watermark of the model's that is off is named against the
    // computed value, 163, not the printed 675.
    let zone = ours
        .zones
        .iter_mut()
        .find(|z| z.node == 0 && z.zone == "DMA")
        .unwrap();
    zone.watermarks.min -= 1;
    let diffs = named(&ours);
    assert_eq!(diffs.len(), 2, "{diffs:?}");
    assert_eq!(diffs[0], boost);
    assert_eq!(
        (diffs[1].0.as_str(), diffs[1].1, diffs[1].2),
        ("0 DMA min less boost", 162, 163)
    );
}
