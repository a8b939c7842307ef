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
