//! Snapshots read from a saved tree, written, read back and refused.

use std::fs;
use std::path::Path;

use super::*;

/// This host's snapshot (`pfnlab snapshot`, see tests/data/README.md).
const HOST: &str = include_str!("../../tests/data/snapshot-host.json");

fn write(root: &Path, machine_path: &str, text: &str) {
    let path = root.join(machine_path.trim_start_matches('/'));
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

/// A small machine: 3 firmware entries (the third numbered 10, so a
/// text sort would put it second), two 128 MiB memory blocks on two
/// nodes, no pagetypeinfo and no THP.
fn small_tree(root: &Path) {
    write(root, "/proc/sys/kernel/osrelease", "6.18.1\n");
    write(root, "/proc/version", "Linux version 6.18.1 (test)\n");
    write(root, "/proc/cmdline", "quiet\n");
    write(root, "/sys/devices/system/cpu/online", "0-2,5\n");
    let entries = [
        (0, "0x0", "0x9fbff", "System RAM"),
        (1, "0x100000", "0x7ffffff", "System RAM"),
        (10, "0x8000000", "0xfffffff", "System RAM"),
    ];
    for (n, start, end, kind) in entries {
        let dir = format!("/sys/firmware/memmap/{n}");
        write(root, &format!("{dir}/start"), &format!("{start}\n"));
        write(root, &format!("{dir}/end"), &format!("{end}\n"));
        write(root, &format!("{dir}/type"), &format!("{kind}\n"));
    }
    write(
        root,
        "/sys/devices/system/memory/block_size_bytes",
        "8000000\n",
    );
    for m in 0..2 {
        let dir = format!("/sys/devices/system/memory/memory{m}");
        write(root, &format!("{dir}/state"), "online\n");
        write(root, &format!("{dir}/valid_zones"), "DMA32\n");
        let node = format!("/sys/devices/system/node/node{m}");
        write(root, &format!("{node}/cpulist"), "0-1\n");
        fs::create_dir_all(root.join(format!("{}/memory{m}", &node[1..]))).unwrap();
    }
    write(root, "/proc/buddyinfo", "Node 0, zone    DMA32      1 \n");
    write(root, "/proc/meminfo", "MemTotal: 262144 kB\n");
    write(root, "/proc/vmstat", "nr_free_pages 1\n");
    write(root, "/proc/iomem", "00000000-00000000 : System RAM\n");
    for name in ["min_free_kbytes", "watermark_scale_factor"] {
        write(root, &format!("/proc/sys/vm/{name}"), "10\n");
    }
    write(
        root,
        "/proc/sys/vm/lowmem_reserve_ratio",
        "256\t256\t32\t0\t0\n",
    );
    write(root, "/proc/sys/vm/percpu_pagelist_high_fraction", "0\n");
}

#[test]
fn read_takes_each_file_under_the_root_and_notes_the_missing() {
    let tmp = tempfile::tempdir().unwrap();
    small_tree(tmp.path());
    let snap = Snapshot::read(tmp.path(), "x86_64", 4096);
    assert_eq!(snap.kernel.release.as_deref(), Some("6.18.1"));
    assert_eq!(snap.kernel.cmdline.as_deref(), Some("quiet"));
    assert_eq!(snap.cpus, Some(4));
    let order: Vec<u32> = snap.firmware_memmap.iter().map(|e| e.index).collect();
    assert_eq!(order, [0, 1, 10], "numeric order");
    assert_eq!(snap.firmware_memmap[2].end, "0xfffffff");
    assert_eq!(snap.nodes.len(), 2);
    assert_eq!(snap.nodes[1].memory_blocks, [1]);
    assert_eq!(snap.memory_blocks[0].valid_zones.as_deref(), Some("DMA32"));
    assert_eq!(
        snap.sysctls.lowmem_reserve_ratio.as_deref(),
        Some("256\t256\t32\t0\t0")
    );
    assert_eq!(snap.proc.vmstat.as_deref(), Some("nr_free_pages 1\n"));
    let missing: Vec<&str> = snap.unreadable.iter().map(|u| u.path.as_str()).collect();
    assert_eq!(
        missing,
        [
            "/proc/pagetypeinfo",
            "/proc/zoneinfo",
            "/sys/kernel/mm/transparent_hugepage/enabled",
            "/dev/kmsg"
        ]
    );
    // Written and read back, the same snapshot; its layout splits the
    // RAM at the block boundary between the two nodes.
    let back = Snapshot::from_json(&snap.to_json()).unwrap();
    assert_eq!(back, snap);
    let layout = back.layout("snapshot:small").unwrap();
    let nodes: Vec<(u64, u64, u16)> = layout
        .ram_ranges()
        .map(|(r, _, _)| (r.start.get(), r.end.get(), r.node))
        .collect();
    assert_eq!(
        nodes,
        [
            (0, 0x9fc00, 0),
            (0x100000, 0x8000000, 0),
            (0x8000000, 0x10000000, 1)
        ]
    );
    assert_eq!(layout.source(), "snapshot:small");
}

#[test]
fn cpulists_count_their_cpus() {
    assert_eq!(parse_cpulist("0"), Some(1));
    assert_eq!(parse_cpulist("0-3,8,10-11\n"), Some(7));
    assert_eq!(parse_cpulist(""), Some(0));
    assert_eq!(parse_cpulist("3-1"), None);
    assert_eq!(parse_cpulist("x"), None);
}

#[test]
fn without_a_firmware_map_iomem_serves_unless_it_reads_as_zero() {
    let tmp = tempfile::tempdir().unwrap();
    small_tree(tmp.path());
    let mut snap = Snapshot::read(tmp.path(), "x86_64", 4096);
    snap.firmware_memmap.clear();
    assert!(matches!(snap.layout("s"), Err(SnapshotError::NoMemoryMap)));
    snap.iomem = Some("00001000-0009fbff : System RAM\n00100000-0fffffff : System RAM\n".into());
    let layout = snap.layout("s").unwrap();
    assert_eq!(layout.ram_ranges().count(), 3, "split by node");
    snap.iomem = Some("garbage\n".into());
    assert!(matches!(snap.layout("s"), Err(SnapshotError::MemoryMap(_))));
}

#[test]
fn the_host_fixture_loads_and_its_layout_holds_every_zone() {
    let snap = Snapshot::from_json(HOST).unwrap();
    assert_eq!(snap.arch, "x86_64");
    assert!(snap.unreadable.is_empty(), "{:?}", snap.unreadable);
    let info = snap.zoneinfo().unwrap().expect("the host's zoneinfo");
    let layout = snap.layout("snapshot:host").unwrap();
    let present: u64 = info.zones.iter().map(|z| z.present).sum();
    assert!(present > 0);
    assert!(
        layout.present_pages() >= present,
        "the firmware's RAM holds every present page"
    );
    assert_eq!(info.nr_cpus(), snap.cpus.unwrap());
}

#[test]
fn another_format_version_or_architecture_is_refused() {
    let with = |from: &str, to: &str| {
        assert!(HOST.contains(from), "{from}");
        Snapshot::from_json(&HOST.replacen(from, to, 1)).unwrap_err()
    };
    let v = with("\"version\": 1,", "\"version\": 2,");
    assert!(matches!(v, SnapshotError::Version(2)));
    assert_eq!(
        v.to_string(),
        "snapshot format version 2; this pfnlab reads version 1"
    );
    let a = with("\"arch\": \"x86_64\"", "\"arch\": \"riscv64\"");
    assert!(matches!(a, SnapshotError::Arch(ref s) if s == "riscv64"));
    let f = with("\"format\": \"pfnlab-snapshot\"", "\"format\": \"other\"");
    assert!(matches!(f, SnapshotError::NotASnapshot(_)));
    assert!(matches!(
        Snapshot::from_json("{\"format\": 1}"),
        Err(SnapshotError::Json(_))
    ));
}

#[test]
fn a_truncated_or_reordered_zoneinfo_is_refused() {
    let mut snap = Snapshot::from_json(HOST).unwrap();
    let zoneinfo = snap.proc.zoneinfo.clone().unwrap();
    // Cut after a whole line, half way: the kernel prints more.
    let half = zoneinfo[..zoneinfo.len() / 2].rfind('\n').unwrap() + 1;
    snap.proc.zoneinfo = Some(zoneinfo[..half].to_owned());
    let cut = Snapshot::from_json(&snap.to_json()).unwrap_err();
    assert!(
        matches!(
            cut,
            SnapshotError::Zoneinfo(ZoneinfoError::Truncated { .. })
        ),
        "{cut}"
    );
    // The same zones, DMA32 first: out of zone_type order.
    let dma32 = zoneinfo.find("Node 0, zone    DMA32").unwrap();
    let normal = zoneinfo.find("Node 0, zone   Normal").unwrap();
    let swapped = format!(
        "{}{}{}",
        &zoneinfo[dma32..normal],
        &zoneinfo[..dma32],
        &zoneinfo[normal..]
    );
    snap.proc.zoneinfo = Some(swapped);
    let moved = Snapshot::from_json(&snap.to_json()).unwrap_err();
    assert!(matches!(moved, SnapshotError::Zoneinfo(_)), "{moved}");
    assert!(moved.to_string().starts_with("the snapshot's zoneinfo"));
}

/// A 6.1 machine's snapshot: its zoneinfo has no `promo` and pagesets
/// without `high_min` and `high_max`, and is read as 6.1 prints it.
#[test]
fn a_zoneinfo_in_6_1s_format_is_read() {
    let mut snap = Snapshot::from_json(HOST).unwrap();
    let v6_1 = include_str!("../../../buddy/tests/data/zoneinfo-formats/6.1/zoneinfo");
    snap.proc.zoneinfo = Some(v6_1.to_owned());
    let snap = Snapshot::from_json(&snap.to_json()).unwrap();
    let info = snap.zoneinfo().unwrap().expect("the 6.1 zoneinfo");
    assert_eq!(info.format, buddy::views::ZoneinfoFormat::V5_16);
    assert_eq!(info.to_string(), v6_1);
}

#[test]
fn offline_blocks_split_ram_into_hotplug_ranges() {
    let ram = MemRange::new(1 << 20, 1 << 30, RangeKind::Ram, 1);
    let mib = |n: u64| n << 20;
    // One block inside, one at the end, one past the range.
    let offline = [
        (mib(256), mib(384)),
        (mib(896), mib(1024)),
        (mib(2048), mib(2176)),
    ];
    let kinds: Vec<_> = split_off(&ram, &offline)
        .iter()
        .map(|r| (r.start.get(), r.end.get(), r.kind, r.node))
        .collect();
    assert_eq!(
        kinds,
        [
            (mib(1), mib(256), RangeKind::Ram, 1),
            (mib(256), mib(384), RangeKind::Hotplug, 1),
            (mib(384), mib(896), RangeKind::Ram, 1),
            (mib(896), mib(1024), RangeKind::Hotplug, 1),
        ]
    );
    // Only RAM is split.
    let reserved = MemRange::new(0, mib(512), RangeKind::Reserved, 0);
    assert_eq!(split_off(&reserved, &offline), [reserved]);
}

#[test]
fn the_kernel_log_gives_the_memory_freed_after_sizing() {
    let log = "6,19,0,-;RAMDISK: [mem 0x7fee4000-0x7ffdffff]\n \
               SUBSYSTEM=x\n\
               6,113,199661,-;Freeing SMP alternatives memory: 36K\n\
               [    1.653572] Freeing initrd memory: 1008K\n\
               6,353,2481388,-;Freeing unused decrypted memory: 2036K\n\
               6,354,2590754,-;Freeing unused kernel image (initmem) memory: 2824K\n\
               6,355,2590800,-;Write protecting the kernel read-only data: 26624k\n";
    let messages = read::boot_memory_messages(log);
    assert_eq!(messages.len(), 5, "{messages:?}");
    assert_eq!(messages[2], "Freeing initrd memory: 1008K");
    let image = KernelImage::of(
        "00100000-7ffdffff : System RAM\n  01000000-01e01d31 : Kernel code\n  \
         02a00000-02c4897f : Kernel data\n  03310000-043fffff : Kernel bss\n",
    );
    let ramdisk = Some(0x7fee_4000);
    let region = |m: &str| freed_region(m, &image, ramdisk);
    assert_eq!(region(&messages[1]), None, "before the zones were sized");
    assert_eq!(
        region(&messages[2]),
        Some((0x7fee_4000, 0x7fee_4000 + (1008 << 10)))
    );
    assert_eq!(
        region(&messages[3]),
        Some((0x440_0000 - (2036 << 10), 0x440_0000))
    );
    assert_eq!(
        region(&messages[4]),
        Some((0x2c4_9000, 0x2c4_9000 + (2824 << 10)))
    );
    // Without root every address reads as zero: nothing is placed.
    let blind = KernelImage::of("00000000-00000000 : Kernel code\n");
    assert_eq!(freed_region(&messages[4], &blind, None), None);
}
