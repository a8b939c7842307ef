//! The kernel's views against real machines: each fixture under
//! `tests/data/zoneinfo/` is one moment of a machine — its `/proc/zoneinfo`,
//! `buddyinfo` and `pagetypeinfo`, the four `vm` sysctls, the CPU count,
//! the THP setting — read together (see `docs/kernel-views.md`).

use std::path::{Path, PathBuf};

use buddy::views::{
    BuddyInfo, KERNEL_ZONE_NAMES, PageTypeInfo, SizingInputs, Zoneinfo, ZoneinfoError,
    kernel_zone_sizes, parse_zoneinfo,
};
use buddy::{Era, Kernel, Sysctls, ZoneType, resolve_min_free_kbytes};

fn fixtures() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/zoneinfo");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 3, "the host's fixtures are shipped");
    dirs
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{dir:?}/{file}: {e}"))
}

fn number(dir: &Path, file: &str) -> u64 {
    read(dir, file).trim().parse().unwrap()
}

/// `vm.lowmem_reserve_ratio` as the kernel prints it (tab-separated).
fn ratios(text: &str) -> [u64; buddy::NR_KERNEL_ZONES] {
    let v: Vec<u64> = text
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    v.try_into().unwrap()
}

/// `[always] madvise never` and `always [madvise] never` enable PMD THP.
fn thp_enabled(text: &str) -> bool {
    !text.contains("[never]")
}

/// The inputs of a fixture, with `min_free_kbytes` as the file has it or
/// left to the kernel's default.
fn inputs(dir: &Path, min_free_from_file: bool) -> SizingInputs {
    let cpus = number(dir, "nproc") as u32;
    SizingInputs {
        sysctls: Sysctls {
            min_free_kbytes: min_free_from_file.then(|| number(dir, "min_free_kbytes")),
            watermark_scale_factor: number(dir, "watermark_scale_factor"),
            lowmem_reserve_ratio: ratios(&read(dir, "lowmem_reserve_ratio")),
            thp: thp_enabled(&read(dir, "transparent_hugepage_enabled")),
        },
        percpu_pagelist_high_fraction: number(dir, "percpu_pagelist_high_fraction") as u32,
        cpus_per_node: vec![cpus],
        online_cpus: cpus,
        page_shift: 12,
        pageblock_order: 9,
        era: Era::V6_18,
        freed_after_sizing: Vec::new(),
    }
}

/// Every computed field of every zone equals the machine's.
fn assert_exact_match(dir: &Path, info: &Zoneinfo, inputs: &SizingInputs) {
    let sizes = kernel_zone_sizes(&info.managed_zones(), inputs);
    assert_eq!(
        sizes.len(),
        info.zones.len(),
        "{dir:?}: every zone is named"
    );
    for (want, got) in info.zones.iter().zip(&sizes) {
        let at = format!("{dir:?} node {} zone {}", want.node, want.zone);
        assert_eq!(KERNEL_ZONE_NAMES[got.zone], want.zone);
        assert_eq!(got.watermarks, want.watermarks, "{at}: min/low/high/promo");
        assert_eq!(got.protection.to_vec(), want.protection, "{at}: protection");
        let Some(populated) = &want.populated else {
            continue;
        };
        assert_eq!(populated.pagesets.len() as u32, inputs.online_cpus);
        for p in &populated.pagesets {
            let at = format!("{at} cpu {}", p.cpu);
            assert_eq!(u64::from(got.batch), p.batch, "{at}: batch");
            assert_eq!(Some(u64::from(got.high_min)), p.high_min, "{at}: high_min");
            assert_eq!(Some(u64::from(got.high_max)), p.high_max, "{at}: high_max");
            assert_eq!(got.stat_threshold, p.stat_threshold, "{at}: threshold");
        }
    }
}

#[test]
fn every_fixture_matches_the_machine_exactly() {
    for dir in fixtures() {
        let info = parse_zoneinfo(&read(&dir, "zoneinfo")).unwrap();
        assert_exact_match(&dir, &info, &inputs(&dir, true));
    }
}

/// Without `min_free_kbytes` given, the kernel's default is khugepaged's
/// on a THP kernel (this host's 67,584 KiB: eleven 2 MiB pageblocks for
/// each of DMA, DMA32 and Normal), not `calculate_min_free_kbytes`.
#[test]
fn the_default_min_free_kbytes_is_khugepageds() {
    for dir in fixtures() {
        let info = parse_zoneinfo(&read(&dir, "zoneinfo")).unwrap();
        let inputs = inputs(&dir, false);
        assert!(inputs.sysctls.thp, "{dir:?}: the host enables THP");
        let zones: Vec<(ZoneType, u64)> = info
            .managed_zones()
            .into_iter()
            .filter_map(|(_, z, m)| Some((*ZoneType::ALL.get(z)?, m)))
            .collect();
        let derived = resolve_min_free_kbytes(&zones, 4096, 512, &inputs.sysctls, Era::V6_18);
        assert_eq!(derived, number(&dir, "min_free_kbytes"), "{dir:?}");
        let without_thp = Sysctls {
            thp: false,
            ..inputs.sysctls
        };
        assert!(resolve_min_free_kbytes(&zones, 4096, 512, &without_thp, Era::V6_18) < derived);
        assert_exact_match(&dir, &info, &inputs);
    }
}

/// A parsed file renders back to the same bytes: the renderer writes the
/// kernel's format, line for line.
#[test]
fn a_parsed_zoneinfo_renders_to_the_same_bytes() {
    for dir in fixtures() {
        let text = read(&dir, "zoneinfo");
        assert_eq!(parse_zoneinfo(&text).unwrap().to_string(), text, "{dir:?}");
    }
}

/// buddyinfo and pagetypeinfo values render as the kernel's files.
#[test]
fn buddyinfo_and_pagetypeinfo_render_as_the_kernels() {
    for dir in fixtures() {
        let text = read(&dir, "buddyinfo");
        let zones = text
            .lines()
            .map(|l| {
                let (head, counts) = l.split_at(l.find(" zone ").unwrap() + 15);
                buddy::views::ZoneFree {
                    node: head[5..head.find(',').unwrap()].parse().unwrap(),
                    zone: head[head.find(" zone ").unwrap() + 6..].trim().to_owned(),
                    nr_free: counts
                        .split_whitespace()
                        .map(|n| n.parse().unwrap())
                        .collect(),
                }
            })
            .collect();
        assert_eq!(BuddyInfo { zones }.to_string(), text, "{dir:?}");
        let text = read(&dir, "pagetypeinfo");
        assert_eq!(pagetypeinfo_of(&text).to_string(), text, "{dir:?}");
    }
}

/// The numbers of a one-node pagetypeinfo, back into a value.
fn pagetypeinfo_of(text: &str) -> PageTypeInfo {
    let free_rows: Vec<&str> = text.lines().filter(|l| l.contains(", type ")).collect();
    let block_rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("Number of blocks"))
        .skip(1)
        .collect();
    let nums = |s: &str| -> Vec<u64> { s.split_whitespace().map(|n| n.parse().unwrap()).collect() };
    let zones = block_rows
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let name = row[13..21].trim().to_owned();
            buddy::views::ZoneTypes {
                node: 0,
                zone: name,
                free: std::array::from_fn(|mt| nums(&free_rows[i * 5 + mt][44..])),
                blocks: nums(&row[22..]).try_into().unwrap(),
            }
        })
        .collect();
    PageTypeInfo {
        pageblock_order: 9,
        zones,
    }
}

fn host_text() -> String {
    read(&fixtures()[0], "zoneinfo")
}

/// A file cut anywhere is refused as truncated, never half read.
#[test]
fn a_truncated_zoneinfo_is_refused() {
    let text = host_text();
    let lines: Vec<&str> = text.lines().collect();
    for cut in [1, 60, 100, lines.len() - 1] {
        let partial = lines[..cut].join("\n") + "\n";
        let err = parse_zoneinfo(&partial).unwrap_err();
        assert!(
            matches!(err, ZoneinfoError::Truncated { .. }),
            "cut at {cut}: {err}"
        );
    }
    let no_newline = text.trim_end();
    assert!(matches!(
        parse_zoneinfo(no_newline),
        Err(ZoneinfoError::Truncated { .. })
    ));
    let half_line = &text[..text.find("managed").unwrap() + 3];
    assert!(parse_zoneinfo(half_line).is_err());
    assert!(matches!(
        parse_zoneinfo(""),
        Err(ZoneinfoError::Truncated { line: 1, .. })
    ));
}

/// Swapped lines, or zones, are refused as out of order with their line.
#[test]
fn a_reordered_zoneinfo_is_refused() {
    let text = host_text();
    let mut lines: Vec<&str> = text.lines().collect();
    let low = lines
        .iter()
        .position(|l| l.trim_start().starts_with("low "))
        .unwrap();
    lines.swap(low, low + 1);
    let err = parse_zoneinfo(&(lines.join("\n") + "\n")).unwrap_err();
    assert_eq!(
        err,
        ZoneinfoError::OutOfOrder {
            line: low + 1,
            found: lines[low].trim().to_owned(),
            expected: "`low`".to_owned(),
        }
    );
    assert!(err.to_string().contains(&format!("line {}", low + 1)));
    // The DMA32 zone moved in front of DMA.
    let dma32 = text.find("Node 0, zone    DMA32").unwrap();
    let normal = text.find("Node 0, zone   Normal").unwrap();
    let swapped = format!(
        "{}{}{}",
        &text[dma32..normal],
        &text[..dma32],
        &text[normal..]
    );
    assert!(matches!(
        parse_zoneinfo(&swapped),
        Err(ZoneinfoError::OutOfOrder { .. })
    ));
    let foreign = text.replacen("        spanned", "        spunned", 1);
    assert!(matches!(
        parse_zoneinfo(&foreign),
        Err(ZoneinfoError::Malformed { .. })
    ));
}

/// Each node's CPUs split its zones' per-CPU `high` (`zone_highsize`): as
/// given, over every online CPU on a node without any, and under fake NUMA,
/// where every node lists every CPU, over all of them on each node. The
/// model's zoneinfo agrees with [`kernel_zone_sizes`] given the same CPUs,
/// and an empty list spreads the online CPUs over the nodes again.
#[test]
fn a_nodes_cpus_split_its_zones_high() {
    use sparsemem::{Geometry, Layout, MemRange, RangeKind, SparseExtreme};
    let ranges = (0..4u64)
        .map(|n| {
            let start = (4 << 30) + (n << 30);
            MemRange::new(start, start + (1 << 30), RangeKind::Ram, n as u16)
        })
        .collect();
    let layout = Layout::new(Geometry::X86_64, ranges, "four nodes").unwrap();
    let options = buddy::Options {
        cpus: Some(2),
        ..buddy::Options::default()
    };
    let model = SparseExtreme::new(&layout).unwrap();
    let mut alloc = buddy::Allocator::<_, Kernel>::new(model, &layout, options).unwrap();
    let high_mins = |info: &Zoneinfo| -> Vec<u64> {
        info.zones
            .iter()
            .filter_map(|z| z.populated.as_ref())
            .map(|p| p.pagesets[0].high_min.unwrap())
            .collect()
    };
    let spread = high_mins(&alloc.zoneinfo());
    assert_eq!(spread.len(), 4, "one Normal zone per node");
    // Two CPUs over four nodes: one each, so each zone's whole low mark.
    for (node_cpus, splits) in [
        (vec![2, 2, 2, 2], [2, 2, 2, 2]),
        (vec![1, 1, 0, 0], [1, 1, 2, 2]),
        (vec![2], [2, 2, 2, 2]),
    ] {
        alloc.set_node_cpus(&node_cpus);
        let info = alloc.zoneinfo();
        let inputs = SizingInputs {
            sysctls: Sysctls::default(),
            percpu_pagelist_high_fraction: 0,
            cpus_per_node: node_cpus.clone(),
            online_cpus: 2,
            page_shift: 12,
            pageblock_order: 9,
            era: Era::V6_18,
            freed_after_sizing: Vec::new(),
        };
        assert_exact_match(Path::new("four nodes"), &info, &inputs);
        let populated = info.zones.iter().filter(|z| z.populated.is_some());
        for ((zone, high_min), split) in populated.zip(high_mins(&info)).zip(splits) {
            let batch = zone.populated.as_ref().unwrap().pagesets[0].batch as u32;
            let want = buddy::zone_highsize(zone.watermarks.low, batch, split);
            assert_eq!(
                high_min,
                u64::from(want),
                "{node_cpus:?} node {}",
                zone.node
            );
        }
        assert_ne!(
            high_mins(&info),
            spread,
            "{node_cpus:?} changes some zone's high"
        );
    }
    alloc.set_node_cpus(&[]);
    assert_eq!(high_mins(&alloc.zoneinfo()), spread);
}

/// The model's own views: zoneinfo reads back through the parser and
/// agrees with [`kernel_zone_sizes`] on its own managed pages; buddyinfo
/// and pagetypeinfo count what the free lists hold.
#[test]
fn the_models_views_agree_with_its_zones() {
    use sparsemem::{Geometry, Layout, MemRange, RangeKind, SparseExtreme};
    let layout = Layout::new(
        Geometry::X86_64,
        vec![
            MemRange::new(1 << 20, 64 << 20, RangeKind::Ram, 0),
            MemRange::new(4 << 30, (4 << 30) + (256 << 20), RangeKind::Ram, 0),
        ],
        "views",
    )
    .unwrap();
    let sysctls = Sysctls {
        thp: true,
        watermark_scale_factor: 50,
        ..Sysctls::default()
    };
    let options = buddy::Options {
        cpus: Some(2),
        sysctls,
        ..buddy::Options::default()
    };
    let model = SparseExtreme::new(&layout).unwrap();
    let alloc = buddy::Allocator::<_, Kernel>::new(model, &layout, options).unwrap();
    let info = alloc.zoneinfo();
    assert_eq!(info.zones.len(), 5, "every zone type of the node");
    assert_eq!(parse_zoneinfo(&info.to_string()).unwrap(), info);
    let inputs = SizingInputs {
        sysctls,
        percpu_pagelist_high_fraction: 0,
        cpus_per_node: vec![2],
        online_cpus: 2,
        page_shift: 12,
        pageblock_order: 9,
        era: Era::V6_18,
        freed_after_sizing: Vec::new(),
    };
    assert_exact_match(Path::new("model"), &info, &inputs);
    let buddyinfo = alloc.buddyinfo();
    let pagetypes = alloc.pagetypeinfo();
    assert_eq!(
        buddyinfo.zones.len(),
        3,
        "DMA, DMA32 and Normal have memory"
    );
    for ((free, types), zone) in buddyinfo
        .zones
        .iter()
        .zip(&pagetypes.zones)
        .zip(alloc.zones())
    {
        assert_eq!(free.nr_free, zone.nr_free()[..11].to_vec());
        let by_type: Vec<u64> = (0..11)
            .map(|o| types.free.iter().map(|t| t[o]).sum())
            .collect();
        assert_eq!(
            by_type,
            free.nr_free,
            "{}: the types add up",
            zone.kind.name()
        );
        let blocks: u64 = types.blocks.iter().sum();
        assert_eq!(
            blocks,
            zone.managed_pages().div_ceil(512),
            "{}",
            zone.kind.name()
        );
    }
}

/// A machine's zoneinfo against itself differs nowhere; against the
/// same machine at another `watermark_scale_factor`, the watermarks and
/// what follows from them differ, each named as an input the model was
/// not given.
#[test]
fn compare_names_each_difference() {
    use buddy::views::{Cause, compare};
    let dirs = fixtures();
    let at = |name: &str| dirs.iter().find(|d| d.ends_with(name)).unwrap();
    let plain = at("host-6.18-2cpu");
    let wsf50 = at("host-6.18-2cpu-wsf50");
    let ten = parse_zoneinfo(&read(plain, "zoneinfo")).unwrap();
    let fifty = parse_zoneinfo(&read(wsf50, "zoneinfo")).unwrap();
    assert!(compare(&ten, &ten, &inputs(plain, true)).is_empty());
    let diffs = compare(&ten, &fifty, &inputs(plain, true));
    assert!(diffs.iter().any(|d| d.field == "low" && d.zone == "Normal"));
    for d in diffs
        .iter()
        .filter(|d| !d.field.contains("count") && d.field != "pages free")
    {
        assert_eq!(d.cause, Some(Cause::Inputs), "{d}");
    }
}
