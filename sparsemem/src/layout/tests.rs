use std::fs;

use super::host::entries_to_layout;
use super::*;

fn err(text: &str) -> String {
    Layout::from_toml(text).unwrap_err().to_string()
}

const GOOD: &str = r#"
geometry = "x86_64"
[[range]]
start = 0x100000
end = 0xc0000000
kind = "ram"
[[range]]
start = 0x100000000
end = 0x140000000
kind = "hotplug"
node = 1
"#;

#[test]
fn parses_the_documented_format() {
    let l = Layout::from_toml(GOOD).unwrap();
    assert_eq!(l.geometry(), &Geometry::X86_64);
    assert_eq!(l.ranges().len(), 2);
    assert_eq!(l.ranges()[1].node, 1);
    assert_eq!(
        l.pfn_span(),
        (Pfn::new(0x100), Pfn::new(0xc0000)),
        "boot memory"
    );
    assert_eq!(l.memory_span(), (Pfn::new(0x100), Pfn::new(0x140000)));
    assert_eq!(
        l.nodes(),
        vec![crate::NodeId::new(0), crate::NodeId::new(1)]
    );
}

#[test]
fn custom_geometry_table_is_validated() {
    let ok = "geometry = { page_shift = 12, section_size_bits = 28, max_physmem_bits = 40 }\n[[range]]\nstart = 0\nend = 0x10000000\nkind = \"ram\"\n";
    assert_eq!(
        Layout::from_toml(ok)
            .unwrap()
            .geometry()
            .section_size_bits(),
        28
    );
    let bad = ok.replace("28", "21");
    assert!(
        err(&bad).starts_with("impossible geometry: a MAX_PAGE_ORDER block"),
        "{}",
        err(&bad)
    );
    let orders = ok.replace(
        "max_physmem_bits = 40 }",
        "max_physmem_bits = 40, max_page_order = 16, pageblock_order = 12, zone_dma_bytes = 0, zone_dma32_bytes = 0x40000000 }",
    );
    let g = *Layout::from_toml(&orders).unwrap().geometry();
    assert_eq!((g.max_order().get(), g.pageblock_order().get()), (16, 12));
    assert_eq!(
        g.zone_limits(),
        crate::ZoneLimits {
            dma: None,
            dma32: Some(1 << 30)
        }
    );
    assert!(
        err(&orders.replace("16,", "17,")).contains("MAX_PAGE_ORDER 17 is above 16"),
        "{}",
        err(&orders.replace("16,", "17,"))
    );
    assert!(err(&orders.replace("0x40000000", "0x40000001")).contains("page-aligned"));
    let default_orders = Layout::from_toml(ok).unwrap();
    assert_eq!(default_orders.geometry().max_order().get(), 10);
    assert_eq!(
        err("geometry = \"pdp11\"\n"),
        "unknown geometry `pdp11` (known: x86_64, x86_64-la57, arm64-4k, arm64-16k, arm64-64k, ia64)"
    );
    assert_eq!(
        err("geometry = 3\n"),
        "line 1: geometry must be a preset name or a table, not integer"
    );
}

#[test]
fn every_range_error_names_the_range() {
    let one = |body: &str| {
        format!("[[range]]\nstart = 0\nend = 0x1000000\nkind = \"ram\"\n[[range]]\n{body}")
    };
    assert_eq!(
        err(&one("start = 0x3000000\nend = 0x2000000\nkind = \"ram\"\n")),
        "range[1]: start 0x3000000 is not below end 0x2000000"
    );
    assert_eq!(
        err(&one(
            "start = 0x3000000\nend = 0x400000000000001\nkind = \"ram\"\n"
        )),
        "range[1]: end 0x400000000000001 is beyond 2^MAX_PHYSMEM_BITS (0x400000000000) of geometry x86_64"
    );
    assert_eq!(
        err(&one(
            "start = 0x3000000\nend = 0x3100000\nkind = \"hotplug\"\n"
        )),
        "range[1]: hotplug range 0x3000000..0x3100000 is not aligned to a 128 MiB memory block (one section): hot-added memory comes in whole blocks; use kind = \"device\" for ZONE_DEVICE memory at 2 MiB granularity"
    );
    assert_eq!(
        err(&one(
            "start = 0x3000000\nend = 0x3100000\nkind = \"device\"\n"
        )),
        "range[1]: device range 0x3000000..0x3100000 is not aligned to a 2 MiB subsection"
    );
    assert_eq!(
        err(&one(
            "start = 0x800000\nend = 0x2000000\nkind = \"reserved\"\n"
        )),
        "range[0] and range[1] overlap at 0x800000"
    );
    assert_eq!(
        err(&one(
            "start = 0x3000000\nend = 0x4000000\nkind = \"ram\"\nnode = 5000\n"
        )),
        "range[1]: node 5000 is not below MAX_NUMNODES (1024)"
    );
    let unknown_kind = err(&one("start = 0x3000000\nend = 0x4000000\nkind = \"rom\"\n"));
    assert!(
        unknown_kind.starts_with("range[1] (line 8): unknown variant `rom`"),
        "{unknown_kind}"
    );
    let unknown_key = err(&one(
        "start = 0x3000000\nend = 0x4000000\nkind = \"ram\"\nsize = 4\n",
    ));
    assert!(
        unknown_key.starts_with("range[1] (line 9): unknown field `size`"),
        "{unknown_key}"
    );
    let missing = err(&one("start = 0x3000000\nkind = \"ram\"\n"));
    assert!(
        missing.contains("missing field `end`") && missing.starts_with("range[1]"),
        "{missing}"
    );
    let negative = err(&one("start = -4\nend = 0x4000000\nkind = \"ram\"\n"));
    assert!(negative.starts_with("range[1] (line 6):"), "{negative}");
}

#[test]
fn top_level_errors() {
    assert!(err("speed = 3\n").starts_with("line 1: unknown field `speed`"));
    assert!(err("[[range]\n").starts_with("line 1:"));
    assert_eq!(err(""), "the layout has no ram range of at least one page");
    assert_eq!(
        err("[[range]]\nstart = 0x100\nend = 0x200\nkind = \"ram\"\n"),
        "the layout has no ram range of at least one page"
    );
    let missing = Layout::from_toml_file(std::path::Path::new("/nonexistent/layout.toml"));
    assert!(
        missing
            .unwrap_err()
            .to_string()
            .starts_with("cannot read layout file /nonexistent/layout.toml")
    );
    assert_eq!(
        Layout::preset("cray").unwrap_err().to_string(),
        "unknown preset `cray` (known: x86-pci-hole, ia64-holes, numa-fake-64, zone-device, sparse-52bit)"
    );
}

#[test]
fn ram_rounds_inward_reserved_outward() {
    let g = Geometry::X86_64;
    let ram = MemRange::new(0x9fc00, 0x1ff000 + 0x10, RangeKind::Ram, 0);
    assert_eq!(ram.pfns(&g), Some((Pfn::new(0xa0), Pfn::new(0x1ff))));
    let res = MemRange::new(0x9fc00, 0x100000, RangeKind::Reserved, 0);
    assert_eq!(res.pfns(&g), Some((Pfn::new(0x9f), Pfn::new(0x100))));
    assert_eq!(
        MemRange::new(0x100, 0x200, RangeKind::Ram, 0).pfns(&g),
        None
    );
}

#[test]
fn presets_build_and_have_their_shape() {
    for name in PRESET_NAMES {
        let l = Layout::preset(name).unwrap();
        assert_eq!(l.source(), format!("preset:{name}"));
        assert!(l.present_pages() > 0, "{name}");
    }
    assert_eq!(Layout::preset("numa-fake-64").unwrap().nodes().len(), 64);
    let ia64 = Layout::preset("ia64-holes").unwrap();
    assert_eq!(ia64.geometry(), &Geometry::IA64);
    let gaps: Vec<u64> = ia64
        .ranges()
        .windows(2)
        .map(|w| w[1].start.get() - w[0].end.get())
        .collect();
    assert!(
        gaps.iter().all(|&g| g > 1 << 30),
        "holes over 1 GiB: {gaps:?}"
    );
    let zd = Layout::preset("zone-device").unwrap();
    let plan = zd.section_plan();
    assert!(
        plan.values()
            .any(|p| !p.early && p.subsections.count() < 64 && p.device == p.subsections),
        "sub-section holes of device memory"
    );
    assert!(zd.has(RangeKind::Device) && zd.has(RangeKind::Hotplug));
    let s52 = Layout::preset("sparse-52bit").unwrap();
    assert_eq!(s52.pfn_span().1, Geometry::X86_64_LA57.max_pfn());
    let only_device = Layout::new(
        Geometry::X86_64,
        vec![MemRange::new(0, 2 << 20, RangeKind::Device, 0)],
        "device only",
    );
    assert_eq!(only_device, Err(LayoutError::NoMemory), "boot needs RAM");
}

#[test]
fn section_plan_marks_early_and_subsections() {
    let l = Layout::preset("zone-device").unwrap();
    let plan = l.section_plan();
    let s64 = plan[&SectionNr::new(64)];
    assert!(!s64.early);
    assert_eq!(
        s64.subsections.iter().collect::<Vec<_>>(),
        [0, 1, 2].into_iter().chain(5..32).collect::<Vec<_>>()
    );
    assert_eq!(s64.device, s64.subsections);
    let hotplug = plan[&SectionNr::new(48)];
    assert!(!hotplug.early && hotplug.device.is_empty());
    assert_eq!(hotplug.subsections.count(), 64, "a whole memory block");
    assert!(plan[&SectionNr::new(0)].early);
    assert_eq!(plan[&SectionNr::new(0)].subsections.count(), 64);
}

const IOMEM_SAMPLE: &str = "\
00000000-00000fff : Reserved
00001000-0009fbff : System RAM
0009fc00-000fffff : Reserved
  000f0000-000fffff : System ROM
00100000-bfffffff : System RAM
  01000000-02277287 : Kernel code
c0001000-eebfffff : PCI Bus 0000:00
eec00000-febfffff : Reserved
100000000-63fffffff : System RAM
4000000000-7fffffffff : PCI Bus 0000:00
";

fn write_firmware(dir: &std::path::Path, entries: &[(&str, &str, &str)]) {
    for (i, (s, e, t)) in entries.iter().enumerate() {
        let d = dir.join(i.to_string());
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("start"), format!("{s}\n")).unwrap();
        fs::write(d.join("end"), format!("{e}\n")).unwrap();
        fs::write(d.join("type"), format!("{t}\n")).unwrap();
    }
}

const FIRMWARE_SAMPLE: [(&str, &str, &str); 5] = [
    ("0x0", "0x9fbff", "System RAM"),
    ("0x9fc00", "0xfffff", "Reserved"),
    ("0x100000", "0xbfffffff", "System RAM"),
    ("0xeec00000", "0xfebfffff", "Reserved"),
    ("0x100000000", "0x63fffffff", "System RAM"),
];

#[test]
fn iomem_sample_parses_top_level_only() {
    let e = parse_iomem(IOMEM_SAMPLE).unwrap();
    assert_eq!(e.len(), 8);
    assert_eq!(e[1], (0x1000, 0x9fc00, "System RAM".to_owned()));
    let l = entries_to_layout(&e, None, "host").unwrap();
    let ram: Vec<_> = l
        .memory_ranges()
        .map(|(_, a, b)| (a.get(), b.get()))
        .collect();
    assert_eq!(
        ram,
        vec![(0x1, 0x9f), (0x100, 0xc0000), (0x100000, 0x640000)]
    );
    assert!(
        parse_iomem("00000000-00000000 : System RAM\n")
            .unwrap_err()
            .contains("needs root")
    );
    assert!(parse_iomem("garbage\n").unwrap_err().contains("line 1"));
}

#[test]
fn firmware_sample_parses_with_inclusive_ends_and_nodes() {
    let tmp = tempfile::tempdir().unwrap();
    let fw = tmp.path().join("memmap");
    write_firmware(&fw, &FIRMWARE_SAMPLE);
    let e = parse_firmware_memmap(&fw).unwrap();
    assert_eq!(e[0], (0, 0x9fc00, "System RAM".to_owned()));
    // Nodes: blocks of 128 MiB; block 40 (5 GiB) and above on node 1.
    let mem = tmp.path().join("memory");
    fs::create_dir_all(&mem).unwrap();
    fs::write(mem.join("block_size_bytes"), "8000000\n").unwrap();
    for (node, blocks) in [(0, 0..40), (1, 40..200)] {
        let d = tmp.path().join(format!("node/node{node}"));
        fs::create_dir_all(&d).unwrap();
        for b in blocks {
            fs::create_dir_all(d.join(format!("memory{b}"))).unwrap();
        }
    }
    let sources = HostSources {
        firmware_memmap: fw,
        iomem: tmp.path().join("absent"),
        node_dir: tmp.path().join("node"),
        memory_dir: mem,
        zoneinfo: tmp.path().join("absent"),
    };
    let l = host::load(&sources).unwrap();
    let ram: Vec<_> = l
        .memory_ranges()
        .map(|(r, a, b)| (a.get(), b.get(), r.node))
        .collect();
    assert_eq!(
        ram,
        vec![
            (0, 0x9f, 0),
            (0x100, 0xc0000, 0),
            (0x100000, 0x140000, 0),
            (0x140000, 0x640000, 1)
        ]
    );
}

#[test]
fn host_loader_reads_iomem_alone_and_reports_both_failures() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("iomem"), IOMEM_SAMPLE).unwrap();
    let mut sources = HostSources {
        firmware_memmap: tmp.path().join("no-memmap"),
        iomem: tmp.path().join("iomem"),
        node_dir: tmp.path().join("no-node"),
        memory_dir: tmp.path().join("no-memory"),
        zoneinfo: tmp.path().join("no-zoneinfo"),
    };
    assert_eq!(
        host::load(&sources).unwrap().present_pages(),
        0x9e + 0xbff00 + 0x540000
    );
    sources.iomem = tmp.path().join("no-iomem");
    let e = host::load(&sources).unwrap_err().to_string();
    assert!(
        e.starts_with("cannot read the host memory map:")
            && e.contains("no-memmap")
            && e.contains("no-iomem"),
        "{e}"
    );
}

/// With both sources readable, the kernel's own map wins: page 0, which
/// the firmware lists as RAM and x86's `trim_bios_range` reserves, is a
/// hole, as it is in the kernel's zones (`start_pfn 1`). Read without
/// root, `/proc/iomem`'s addresses are all zero and the firmware map
/// serves.
#[test]
fn the_kernels_own_map_wins_over_the_firmwares() {
    let tmp = tempfile::tempdir().unwrap();
    let fw = tmp.path().join("memmap");
    write_firmware(&fw, &FIRMWARE_SAMPLE);
    fs::write(tmp.path().join("iomem"), IOMEM_SAMPLE).unwrap();
    let mut sources = HostSources {
        firmware_memmap: fw,
        iomem: tmp.path().join("iomem"),
        node_dir: tmp.path().join("no-node"),
        memory_dir: tmp.path().join("no-memory"),
        zoneinfo: tmp.path().join("no-zoneinfo"),
    };
    let first_ram = |l: &Layout| l.ram_ranges().next().map(|(_, first, _)| first.get());
    let kernels = host::load(&sources).unwrap();
    assert_eq!(first_ram(&kernels), Some(1));
    assert_eq!(kernels.present_pages(), 0x9e + 0xbff00 + 0x540000);
    fs::write(
        tmp.path().join("iomem"),
        "00000000-00000000 : Reserved\n00000000-00000000 : System RAM\n",
    )
    .unwrap();
    let firmwares = host::load(&sources).unwrap();
    assert_eq!(first_ram(&firmwares), Some(0));
    assert_eq!(firmwares.present_pages(), kernels.present_pages() + 1);
    sources.iomem = tmp.path().join("no-iomem");
    assert_eq!(host::load(&sources).unwrap().ranges(), firmwares.ranges());
}

/// The live host's two sources agree on RAM: the same early sections and
/// page counts within 1 MiB (the kernel trims the first page and a few
/// firmware pages out of "System RAM" in /proc/iomem).
#[test]
#[cfg_attr(miri, ignore = "reads /proc and /sys, outside Miri's abstract machine")]
fn live_host_sources_agree_on_ram() {
    let sys = HostSources::system();
    let fw = match parse_firmware_memmap(&sys.firmware_memmap) {
        Ok(e) => e,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    let io = match fs::read_to_string(&sys.iomem)
        .map_err(|e| e.to_string())
        .and_then(|t| parse_iomem(&t))
    {
        Ok(e) => e,
        Err(why) => {
            println!("skipped: /proc/iomem: {why}");
            return;
        }
    };
    let a = entries_to_layout(&fw, None, "fw").unwrap();
    let b = entries_to_layout(&io, None, "iomem").unwrap();
    let early = |l: &Layout| {
        l.section_plan()
            .into_iter()
            .filter(|(_, p)| p.early)
            .map(|(n, _)| n)
            .collect::<Vec<_>>()
    };
    assert_eq!(early(&a), early(&b));
    assert!(
        a.present_pages().abs_diff(b.present_pages()) <= 256,
        "{} vs {}",
        a.present_pages(),
        b.present_pages()
    );
    let live = Layout::from_host().unwrap();
    assert!(live.present_pages() > 0);
}

#[test]
fn the_host_falls_back_to_a_preset_and_says_why() {
    let unreadable = Err(LayoutError::Host("no /sys/firmware/memmap".into()));
    let (layout, why) = Layout::or_preset(unreadable, "x86-pci-hole").unwrap();
    assert_eq!(layout.source(), "preset:x86-pci-hole");
    assert!(why.unwrap().to_string().contains("no /sys/firmware/memmap"));
    let host = Layout::preset("ia64-holes");
    let (layout, why) = Layout::or_preset(host, "x86-pci-hole").unwrap();
    assert_eq!(
        (layout.source(), why.is_none()),
        ("preset:ia64-holes", true)
    );
    let bad = Layout::or_preset(Err(LayoutError::Host("x".into())), "cray");
    assert!(
        bad.unwrap_err()
            .to_string()
            .contains("unknown preset `cray`")
    );
}

/// `/proc/iomem` of an arm64 QEMU `virt` machine with 2 GiB of RAM at
/// 1 GiB (arm64 has no `/sys/firmware/memmap`).
const ARM64_VIRT_IOMEM: &str = "\
00000000-03ffffff : 0.flash flash@0
04000000-07ffffff : 0.flash flash@0
08000000-0800ffff : GICD
080a0000-08ffffff : GICR
09000000-09000fff : pl011@9000000
  09000000-09000fff : 9000000.pl011 pl011@9000000
09010000-09010fff : pl031@9010000
10000000-3efeffff : pcie@10000000
40000000-bfffffff : System RAM
  40210000-4197ffff : Kernel code
  41980000-41dfffff : reserved
  41e00000-4244ffff : Kernel data
  48000000-483fffff : reserved
8000000000-ffffffffff : pcie@10000000
";

/// `/proc/iomem` of an arm64 server: RAM split by a NOMAP region (UEFI
/// runtime memory, listed as top-level "reserved") and a second bank
/// above 512 GiB.
const ARM64_SERVER_IOMEM: &str = "\
80000000-fc97ffff : System RAM
  80010000-8146ffff : Kernel code
fc980000-fc98ffff : reserved
fc990000-fffeffff : System RAM
ffff0000-ffffffff : reserved
8000000000-87ffffffff : System RAM
";

#[test]
fn arm64_iomem_samples_load_with_the_page_size_geometry() {
    use crate::layout::{entries_to_layout_with, host_geometry_for};
    assert_eq!(
        host_geometry_for("aarch64", 4096, 1 << 40),
        Geometry::ARM64_4K
    );
    assert_eq!(
        host_geometry_for("aarch64", 16384, 1 << 40),
        Geometry::ARM64_16K
    );
    assert_eq!(
        host_geometry_for("aarch64", 65536, 1 << 40),
        Geometry::ARM64_64K
    );
    assert_eq!(host_geometry_for("x86_64", 4096, 1 << 40), Geometry::X86_64);
    assert_eq!(
        host_geometry_for("x86_64", 4096, 1 << 50),
        Geometry::X86_64_LA57
    );

    let virt = parse_iomem(ARM64_VIRT_IOMEM).unwrap();
    let l = entries_to_layout_with(&virt, None, "arm64 virt", Geometry::ARM64_4K).unwrap();
    let ram: Vec<_> = l
        .ram_ranges()
        .map(|(r, _, _)| (r.start.get(), r.end.get()))
        .collect();
    assert_eq!(
        ram,
        [(0x4000_0000, 0xc000_0000)],
        "nested entries are not top-level RAM"
    );
    assert_eq!(l.present_pages(), (2 << 30) >> 12);

    let server = parse_iomem(ARM64_SERVER_IOMEM).unwrap();
    for g in [Geometry::ARM64_4K, Geometry::ARM64_16K, Geometry::ARM64_64K] {
        let l = entries_to_layout_with(&server, None, "arm64 server", g).unwrap();
        assert_eq!(l.ram_ranges().count(), 3, "{}", g.name());
        let nomap = l
            .ranges()
            .iter()
            .find(|r| r.start.get() == 0xfc98_0000)
            .unwrap();
        assert_eq!(nomap.kind, RangeKind::Reserved, "NOMAP stays reserved");
        // Generic SPARSEMEM: the NOMAP hole lies in an early section, so it
        // has struct pages and is valid, as on arm64 since 5.14.
        let sparse = crate::SparseExtreme::new(&l).unwrap();
        use crate::MemoryModel;
        assert!(
            sparse.pfn_valid(g.phys_to_pfn(PhysAddr::new(0xfc98_8000))),
            "{}",
            g.name()
        );
    }
}

#[test]
fn to_toml_reads_back_as_the_same_layout() {
    for name in [
        "x86-pci-hole",
        "zone-device",
        "ia64-holes",
        "numa-fake-64",
        "arm64-64k-nomap",
    ] {
        let Ok(layout) = Layout::preset(name) else {
            continue;
        };
        let back = Layout::from_toml(&layout.to_toml()).unwrap();
        assert_eq!(back.geometry(), layout.geometry(), "{name}");
        assert_eq!(back.ranges(), layout.ranges(), "{name}");
    }
    // A custom geometry is spelled out in full.
    let custom = Layout::from_toml(
        "geometry = { page_shift = 12, section_size_bits = 28, max_physmem_bits = 40, zone_dma32_bytes = 0 }\n[[range]]\nstart = 0\nend = 0x40000000\nkind = \"ram\"\n",
    )
    .unwrap();
    let back = Layout::from_toml(&custom.to_toml()).unwrap();
    assert_eq!(back.geometry(), custom.geometry());
    assert_eq!(back.ranges(), custom.ranges());
}

/// Three fake nodes of 48 MiB, smaller than a 128 MiB memory block: each
/// node spans from its lowest zone's `start_pfn` to its highest zone's
/// end, zones spanning nothing count for nothing, and one RAM range is
/// split where each node starts.
const FAKE_NODES: &str = "\
Node 0, zone      DMA
        spanned  4095
  start_pfn:           1
Node 0, zone    DMA32
        spanned  8192
  start_pfn:           4096
Node 0, zone   Normal
        spanned  0
Node 1, zone      DMA
        spanned  0
Node 1, zone    DMA32
        spanned  12288
  start_pfn:           12288
Node 2, zone    DMA32
        spanned  12288
  start_pfn:           24576
";

#[test]
fn zoneinfo_spans_place_nodes_smaller_than_a_block() {
    let map = NodeMap::from_zoneinfo(FAKE_NODES, 4096).unwrap();
    let mib = 1 << 20;
    assert_eq!(
        map.ranges(),
        [
            (4096, 48 * mib, 0),
            (48 * mib, 96 * mib, 1),
            (96 * mib, 144 * mib, 2)
        ]
    );
    assert_eq!(map.node_at(0), None);
    assert_eq!(map.node_at(48 * mib - 1), Some(0));
    assert_eq!(map.node_at(48 * mib), Some(1));
    assert_eq!(map.node_at(144 * mib), None);

    let entries = vec![(0x1000, 144 * mib, "System RAM".to_owned())];
    let l = crate::layout::entries_to_layout_with(&entries, Some(&map), "fake", Geometry::X86_64)
        .unwrap();
    let ranges: Vec<(u64, u64, u16)> = l
        .ranges()
        .iter()
        .map(|r| (r.start.get(), r.end.get(), r.node))
        .collect();
    assert_eq!(
        ranges,
        [
            (0x1000, 48 * mib, 0),
            (48 * mib, 96 * mib, 1),
            (96 * mib, 144 * mib, 2)
        ]
    );
}

/// Spans that overlap (memory interleaved between nodes) cannot say which
/// node an address is on, and a zoneinfo with no spanned zone says
/// nothing: the memory blocks' links decide then.
#[test]
fn overlapping_or_empty_zoneinfo_spans_give_no_node_map() {
    let overlapping = "Node 0, zone Normal\n spanned 100\n start_pfn: 0\nNode 1, zone Normal\n spanned 100\n start_pfn: 50\n";
    assert_eq!(NodeMap::from_zoneinfo(overlapping, 4096), None);
    assert_eq!(
        NodeMap::from_zoneinfo("Node 0, zone DMA\n spanned 0\n", 4096),
        None
    );
    assert_eq!(NodeMap::from_zoneinfo("", 4096), None);
}

/// Offline memory is in no zone's span, but its block links still name
/// its node: the block links fill what the spans leave, and memory that
/// neither places is on the nearest node below it (above, at the bottom).
#[test]
fn block_links_place_what_the_spans_leave() {
    let mib = 1u64 << 20;
    let spans = NodeMap::from_zoneinfo(FAKE_NODES, 4096).unwrap();
    // 128 MiB blocks: blocks 0 and 1 linked to node 0, block 3 (offline,
    // 384-512 MiB, past every span) to node 2.
    let blocks = NodeMap::from_blocks(
        128 * mib,
        &std::collections::BTreeMap::from([(0, 0), (1, 0), (3, 2)]),
    );
    let map = spans.clone().or_else(blocks);
    // Page 0 (below node 0's span) from block 0, then the spans, then the
    // rest of block 1 and the offline block 3.
    assert_eq!(map.ranges()[0], (0, 4096, 0));
    assert_eq!(&map.ranges()[1..4], spans.ranges());
    assert_eq!(
        &map.ranges()[4..],
        [(144 * mib, 256 * mib, 0), (384 * mib, 512 * mib, 2)]
    );
    assert_eq!(map.node_at(400 * mib), Some(2));
    // Between 256 and 384 MiB nothing places memory: the node below.
    assert_eq!(map.node_at(300 * mib), None);
    assert_eq!(map.node_near(300 * mib), Some(0));
    assert_eq!(map.node_near(600 * mib), Some(2));
    assert_eq!(spans.node_near(0), Some(0), "below every range: the first");
    assert_eq!(spans.clone().or_else(None), spans);
}
