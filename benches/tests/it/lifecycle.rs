//! The memmap's lifecycle from the command line: `--deferred-init` on the
//! commands that build an allocator, refused in an era before 4.2 with one
//! line and exit status 2.

use std::process::{Command, Output};

fn pfnlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pfnlab"))
        .args(args)
        .output()
        .expect("run pfnlab")
}

/// The `managed` line of each zone of a zoneinfo, in order.
fn managed(out: &Output) -> Vec<u64> {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("managed"))
        .map(|n| n.trim().parse().unwrap())
        .collect()
}

#[test]
fn zoneinfo_with_deferred_init_shows_the_boot_window() {
    let base = ["zoneinfo", "--layout", "preset:x86-pci-hole", "--cpus", "2"];
    let plain = managed(&pfnlab(&base));
    let mut args = base.to_vec();
    args.push("--deferred-init");
    let deferred = managed(&pfnlab(&args));
    // DMA and DMA32 are initialised at boot; Normal keeps one section
    // (32768 pages of 4 KiB) until the deferred init runs.
    assert_eq!(deferred[..2], plain[..2]);
    assert_eq!(deferred[2], 32768);
    assert!(plain[2] > deferred[2]);
}

#[test]
fn deferred_init_before_4_2_is_one_line_and_exit_2() {
    for command in [
        vec!["zoneinfo", "--layout", "preset:x86-pci-hole"],
        vec!["buddyinfo", "--layout", "preset:x86-pci-hole"],
    ] {
        let mut args = command.clone();
        args.extend(["--deferred-init", "--era", "2.6.23"]);
        let out = pfnlab(&args);
        assert_eq!(out.status.code(), Some(2), "{command:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("4.2"), "{err}");
    }
}

/// A layout file with a memmap_on_memory hotplug range.
fn layout_file(name: &str, kind: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!(
        "pfnlab-lifecycle-{name}-{}.toml",
        std::process::id()
    ));
    std::fs::write(
        &path,
        format!(
            "[[range]]\nstart = 0\nend = 0x40000000\nkind = \"ram\"\n\
             [[range]]\nstart = 0x100000000\nend = 0x180000000\nkind = \"{kind}\"\n\
             memmap_on_memory = true\n"
        ),
    )
    .unwrap();
    path
}

#[test]
fn memmap_on_memory_where_the_kernel_refuses_it_is_one_line_and_exit_2() {
    // zoneinfo builds SPARSEMEM_EXTREME, which has no vmemmap_populate to
    // take an altmap; and boot RAM cannot carry it at all.
    for (name, kind, says) in [
        ("extreme", "hotplug", "VMEMMAP"),
        ("ram", "ram", "memmap_on_memory"),
    ] {
        let path = layout_file(name, kind);
        let out = pfnlab(&["zoneinfo", "--layout", path.to_str().unwrap()]);
        let _ = std::fs::remove_file(&path);
        assert_eq!(out.status.code(), Some(2), "{name}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(says), "{err}");
    }
}

/// A small layout: 1 GiB of RAM, the highest zone (DMA32) deferred past
/// its first section.
fn tiny_layout() -> std::path::PathBuf {
    let path =
        std::env::temp_dir().join(format!("pfnlab-lifecycle-tiny-{}.toml", std::process::id()));
    std::fs::write(
        &path,
        "[[range]]\nstart = 0\nend = 0x40000000\nkind = \"ram\"\n",
    )
    .unwrap();
    path
}

/// The rows of `variant` in a report.
fn rows<'a>(v: &'a serde_json::Value, variant: &str) -> Vec<&'a serde_json::Value> {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["variant"] == variant)
        .collect()
}

#[test]
fn bench_memmap_lifecycle_quick_reports_every_part() {
    let layout = tiny_layout();
    let json = std::env::temp_dir().join(format!("pfnlab-lifecycle-{}.json", std::process::id()));
    let out = pfnlab(&[
        "bench",
        "memmap-lifecycle",
        "--quick",
        "--layout",
        layout.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_file(&layout);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("projection, not a measurement"), "{text}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    assert_eq!(v["experiment"], "memmap-lifecycle");

    // Deferred init at 1 and 2 threads over the same pages: 1 GiB less
    // DMA and DMA32's first section.
    let init = rows(&v, "deferred-init");
    let threads: Vec<_> = init
        .iter()
        .map(|r| r["params"]["threads"].as_u64())
        .collect();
    assert_eq!(threads, [Some(1), Some(2)]);
    let pages = init[0]["params"]["nr_pages"].as_u64().unwrap();
    // DMA32 from pfn 4096 keeps its first 32768 pages and the rest of
    // their section: deferral starts at pfn 65536, six sections.
    assert_eq!(pages, (1 << 18) - 65536);
    assert!(
        init.iter()
            .all(|r| r["memmap_gb_per_s"].as_f64().unwrap() > 0.0)
    );
    assert!(init[1]["projected_speedup_52_threads"].as_f64().unwrap() >= 1.0);
    // The merged series' 1785.7 ms → 138.0 ms.
    assert!((init[1]["published_speedup_52_threads"].as_f64().unwrap() - 12.94).abs() < 0.01);

    // One grow per deferred section, every trial: 6 sections, 3 trials.
    let grew = rows(&v, "grow-on-miss");
    assert_eq!(grew[0]["samples"], 3 * 6);
    let (p50, p99) = (
        grew[0]["p50_ns"].as_f64().unwrap(),
        grew[0]["p99_ns"].as_f64().unwrap(),
    );
    assert!(p50 > 0.0 && p99 >= p50);
    assert_eq!(rows(&v, "alloc-in-window").len(), 1);

    let forms: Vec<_> = rows(&v, "alloc-free")
        .iter()
        .map(|r| r["params"]["form"].clone())
        .collect();
    assert_eq!(forms, ["never-deferred", "key-off", "key-on"]);

    // The 2019 add's figures per block: 512 pfns lost, the first max-order
    // block left as one order-9 block.
    let add = rows(&v, "hot-add");
    let place = |r: &serde_json::Value| r["params"]["memmap_in"].clone();
    assert_eq!(place(add[0]), "the-block");
    assert_eq!(add[0]["pages_lost_per_block"], 512);
    assert_eq!(add[1]["pages_lost_per_block"], 0);
    let orders = |r: &serde_json::Value| -> Vec<u64> {
        r["free_blocks_by_order"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_u64().unwrap())
            .collect()
    };
    assert_eq!(orders(add[0])[9..], [1, 31]);
    assert_eq!(orders(add[1])[9..], [0, 32]);
    // vmemmap-table maps the in-block memmap on the block's real frames.
    assert!(add.iter().all(|r| r["memmap_on_frames"] == true));
    let reads = rows(&v, "pfn-to-page-flags");
    assert_eq!(reads.len(), 2);
    assert!(reads.iter().all(|r| r["memmap_on_frames"] == true));
    assert!(v["comparisons"].as_array().unwrap().len() >= 5);
}

#[test]
fn layout_json_says_per_hot_added_block_where_its_memmap_lives() {
    let path = layout_file("json", "hotplug");
    let json = std::env::temp_dir().join(format!("pfnlab-layout-{}.json", std::process::id()));
    let out = pfnlab(&[
        "layout",
        "--layout",
        path.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    // 2 GiB from 4 GiB, memmap_on_memory: 16 blocks, 512 pfns each.
    let blocks = v["hotplug_blocks"].as_array().unwrap();
    assert_eq!(blocks.len(), 16);
    assert!(
        blocks
            .iter()
            .all(|b| b["memmap_in"] == "the-block" && b["pages_lost"] == 512)
    );
    assert_eq!(blocks[0]["start"], 0x1_0000_0000u64);
    assert_eq!(
        blocks[15]["start_pfn"],
        (0x1_0000_0000u64 >> 12) + 15 * 32768
    );
    assert_eq!(blocks[0]["boot_memory_pages"], 0);
}
