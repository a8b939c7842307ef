//! `pfnlab zoneinfo`, `buddyinfo` and `pagetypeinfo` end to end: the
//! model's files parse as the kernel's, a machine's managed pages and
//! sysctls reproduce its computed fields through `--managed-from` and
//! `--compare`, and bad input is one line and exit status 2.

use std::path::PathBuf;
use std::process::{Command, Output};

fn pfnlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pfnlab"))
        .args(args)
        .output()
        .expect("run pfnlab")
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// A scratch directory with the small layout (1 GiB: DMA and DMA32).
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("pfnlab-views-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("small.toml"),
            "[[range]]\nstart = 0x0\nend = 0x9fc00\nkind = \"ram\"\n\
             [[range]]\nstart = 0x100000\nend = 0x40000000\nkind = \"ram\"\n",
        )
        .unwrap();
        Scratch(dir)
    }

    fn path(&self, file: &str) -> String {
        self.0.join(file).to_str().unwrap().to_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn fixture_zoneinfo(name: &str) -> String {
    fixture(name, "zoneinfo")
}

fn fixture(name: &str, file: &str) -> String {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../buddy/tests/data/zoneinfo")
        .join(name);
    dir.join(file).to_str().unwrap().to_owned()
}

#[test]
fn the_models_views_are_the_kernels_files() {
    let s = Scratch::new("files");
    let layout = s.path("small.toml");
    let args = ["--layout", &layout, "--cpus", "2"];
    let text = stdout(&pfnlab(&[&["zoneinfo"], &args[..]].concat()));
    let info = buddy::views::parse_zoneinfo(&text).unwrap();
    assert_eq!(info.zones.len(), 5, "every zone type of node 0");
    assert_eq!(info.nr_cpus(), 2);
    let buddyinfo = stdout(&pfnlab(&[&["buddyinfo"], &args[..]].concat()));
    let zones: Vec<&str> = buddyinfo.lines().map(|l| l[13..21].trim()).collect();
    assert_eq!(zones, ["DMA", "DMA32"], "populated zones only");
    let pagetypes = stdout(&pfnlab(&[&["pagetypeinfo"], &args[..]].concat()));
    assert!(pagetypes.starts_with("Page block order: 9\nPages per block:  512\n"));
    assert_eq!(pagetypes.matches(", type ").count(), 2 * 5);
}

/// With the machine's managed pages, CPUs and sysctls, only live state
/// and the layout differ: every computed field is the machine's.
#[test]
fn a_machines_computed_fields_come_out_exactly() {
    let s = Scratch::new("exact");
    let layout = s.path("small.toml");
    for (name, wsf, fraction) in [
        ("host-6.18-2cpu", "10", "0"),
        ("host-6.18-2cpu-wsf50", "50", "0"),
        ("host-6.18-2cpu-fraction8", "10", "8"),
    ] {
        let file = fixture(name, "zoneinfo");
        let out = stdout(&pfnlab(&[
            "zoneinfo",
            "--layout",
            &layout,
            "--cpus",
            "2",
            "--watermark-scale-factor",
            wsf,
            "--percpu-pagelist-high-fraction",
            fraction,
            "--managed-from",
            &file,
            "--compare",
            &file,
        ]));
        let lines: Vec<&str> = out.lines().collect();
        let (summary, diffs) = lines.split_last().unwrap();
        assert!(summary.ends_with("fields differ"), "{name}: {summary}");
        for d in diffs {
            assert!(
                d.ends_with("(live state)") || d.contains("(the layout's RAM"),
                "{name}: {d}"
            );
        }
        assert!(diffs.iter().any(|d| d.contains("pages free")), "{name}");
    }
}

/// A zoneinfo in 6.1's format (no `promo`, pagesets without `high_min`
/// and `high_max`) is read by `--managed-from` and `--compare`: in era
/// 6.1 every computed field comes out exactly, each CPU's `high` (the
/// zone's in 6.1) among them; in 6.18 `high` is live state, and the
/// empty Movable zone has 6.18's 32 pages where 6.1 has none.
#[test]
fn a_6_1_zoneinfo_is_compared() {
    let s = Scratch::new("v6-1");
    let layout = s.path("small.toml");
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../buddy/tests/data/zoneinfo-formats/6.1/zoneinfo");
    let file = file.to_str().unwrap();
    for era in ["6.1", "6.18"] {
        let out = stdout(&pfnlab(&[
            "zoneinfo",
            "--layout",
            &layout,
            "--cpus",
            "2",
            "--era",
            era,
            "--managed-from",
            file,
            "--compare",
            file,
        ]));
        let lines: Vec<&str> = out.lines().collect();
        let (summary, diffs) = lines.split_last().unwrap();
        assert!(summary.ends_with("fields differ"), "{era}: {summary}");
        let (movable, diffs): (Vec<&str>, Vec<&str>) =
            diffs.iter().partition(|d| d.contains(" Movable "));
        let want = if era == "6.18" { 3 } else { 0 };
        assert_eq!(movable.len(), want, "{era}: {movable:?}");
        for d in movable {
            assert!(
                d.contains("pfnlab 32 machine 0 (the machine's sysctls"),
                "{d}"
            );
        }
        for d in &diffs {
            assert!(
                d.ends_with("(live state)") || d.contains("(the layout's RAM"),
                "{era}: {d}"
            );
            assert!(!d.contains("promo") && !d.contains("high_m"), "{era}: {d}");
        }
        let high = diffs.iter().any(|d| d.contains(" high: "));
        assert_eq!(high, era == "6.18", "{era}: {diffs:?}");
    }
    let model = stdout(&pfnlab(&[
        "zoneinfo", "--layout", &layout, "--cpus", "2", "--era", "6.1",
    ]));
    assert!(!model.contains("promo") && !model.contains("high_min"));
    assert!(model.contains("\n              high:  "), "6.1's labels");
}

/// Given the wrong sysctl, the watermarks differ and say why.
#[test]
fn a_difference_names_its_cause() {
    let s = Scratch::new("cause");
    let file = fixture("host-6.18-2cpu-wsf50", "zoneinfo");
    let out = stdout(&pfnlab(&[
        "zoneinfo",
        "--layout",
        &s.path("small.toml"),
        "--cpus",
        "2",
        "--managed-from",
        &file,
        "--compare",
        &file,
    ]));
    let low = out
        .lines()
        .find(|l| l.starts_with("node 0 Normal low:"))
        .expect("Normal's low differs at the default scale factor");
    assert!(
        low.contains("sysctls or CPUs are not the ones given"),
        "{low}"
    );
    // Without --managed-from the model's own (smaller) zones differ, and
    // the machine's managed pages explain its values.
    let out = stdout(&pfnlab(&[
        "zoneinfo",
        "--layout",
        &s.path("small.toml"),
        "--cpus",
        "2",
        "--watermark-scale-factor",
        "50",
        "--compare",
        &file,
    ]));
    let min = out
        .lines()
        .find(|l| l.starts_with("node 0 DMA32 min:"))
        .unwrap();
    assert!(min.contains("follows managed"), "{min}");
}

fn fails_with(args: &[&str], needle: &str) {
    let out = pfnlab(args);
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains(needle), "{err}");
    assert!(out.stdout.is_empty(), "nothing printed");
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let s = Scratch::new("bad");
    let layout = s.path("small.toml");
    let text = std::fs::read_to_string(fixture("host-6.18-2cpu", "zoneinfo")).unwrap();
    let cut = s.path("truncated");
    std::fs::write(&cut, &text[..text.len() / 2]).unwrap();
    let swapped = s.path("reordered");
    let min = text.find("        min").unwrap();
    let low = text.find("        low").unwrap();
    let high = text.find("        high").unwrap();
    let reordered = format!(
        "{}{}{}{}",
        &text[..min],
        &text[low..high],
        &text[min..low],
        &text[high..]
    );
    std::fs::write(&swapped, reordered).unwrap();
    let base = ["zoneinfo", "--layout", layout.as_str(), "--cpus", "2"];
    fails_with(&[&base[..], &["--compare", &cut]].concat(), "truncated");
    fails_with(
        &[&base[..], &["--managed-from", &swapped]].concat(),
        "out of order",
    );
    fails_with(
        &[&base[..], &["--compare", "/nonexistent/zoneinfo"]].concat(),
        "/nonexistent",
    );
    fails_with(
        &[&base[..], &["--lowmem-reserve-ratio", "256 32"]].concat(),
        "2 ratios",
    );
    fails_with(&[&base[..], &["--sysctls", "elsewhere"]].concat(), "host");
    fails_with(
        &[&base[..], &["--node-cpus", "3,1"]].concat(),
        "node 0: 3 CPUs, more than the 2 online",
    );
    fails_with(
        &[&base[..], &["--node-cpus", "2,x"]].concat(),
        "`x` is not a CPU count",
    );
    let old = s.path("old-format");
    let no_managed: String = text
        .lines()
        .filter(|l| !l.starts_with("        managed"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&old, no_managed).unwrap();
    fails_with(
        &[&base[..], &["--compare", &old]].concat(),
        "looks like a kernel older than 5.14",
    );
    fails_with(&[&base[..], &["--era", "6.2"]].concat(), "6.1, 6.6, 6.8");
    fails_with(
        &[&base[..], &["--movablecore", "101%"]].concat(),
        "a percentage above 100",
    );
    fails_with(
        &[&base[..], &["--kernelcore", "mirror"]].concat(),
        "mirrored memory",
    );
    fails_with(
        &[&base[..], &["--era", "2.6.9", "--movablecore", "1G"]].concat(),
        "arrived with ZONE_MOVABLE in Linux 2.6.23",
    );
    fails_with(
        &[&base[..], &["--era", "2.6.23", "--kernelcore", "50%"]].concat(),
        "take a percentage from Linux 4.17",
    );
}

/// `--sysctls snapshot:FILE` sizes the zones from the snapshot's machine.
/// The shipped snapshot with its `watermark_scale_factor` set to 50
/// stands for the machine of the `host-6.18-2cpu-wsf50` zoneinfo (the
/// same host, that sysctl changed): every computed field comes out
/// exactly, where the defaults miss the watermarks. On the snapshot's own
/// zoneinfo the watermarks differ by a page or so, each named as deferred
/// init's (the host's lazy init grew `managed` after its kernel last
/// sized the zones).
#[test]
fn a_snapshots_sysctls_size_the_zones_as_its_machine() {
    let s = Scratch::new("snapshot-sysctls");
    let layout = s.path("small.toml");
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/snapshot-host.json");
    let mut snapshot = pfnlab::snapshot::Snapshot::load(std::path::Path::new(fixture)).unwrap();
    snapshot.sysctls.watermark_scale_factor = Some("50".into());
    let wsf50 = s.path("wsf50.json");
    snapshot.save(std::path::Path::new(&wsf50)).unwrap();
    let zoneinfo = fixture_zoneinfo("host-6.18-2cpu-wsf50");
    let compare = |layout: &str, zoneinfo: &str, sysctls: &[&str]| {
        let base = ["zoneinfo", "--layout", layout, "--managed-from", zoneinfo];
        let out = stdout(&pfnlab(
            &[&base[..], sysctls, &["--compare", zoneinfo]].concat(),
        ));
        out.lines().map(str::to_owned).collect::<Vec<_>>()
    };
    let computed = |d: &String| !(d.ends_with("(live state)") || d.contains("(the layout's RAM"));
    let lines = compare(
        &layout,
        &zoneinfo,
        &["--sysctls", &format!("snapshot:{wsf50}")],
    );
    assert!(lines.last().unwrap().ends_with("fields differ"));
    assert!(!lines[..lines.len() - 1].iter().any(computed), "{lines:?}");
    let defaults = compare(&layout, &zoneinfo, &["--cpus", "2"]);
    assert!(
        defaults.iter().any(|d| d.contains(" low: ")),
        "{defaults:?}"
    );

    let own = s.path("zoneinfo");
    std::fs::write(&own, snapshot.proc.zoneinfo.as_deref().unwrap()).unwrap();
    let spec = format!("snapshot:{fixture}");
    let lines = compare(&spec, &own, &["--sysctls", &spec]);
    for d in lines[..lines.len() - 1].iter().filter(|d| computed(d)) {
        assert!(
            d.contains("(deferred init, or pages freed after boot"),
            "{d}"
        );
        let n: Vec<f64> = d
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        let [ours, theirs] = n[n.len() - 2..] else {
            unreachable!("a difference names two values: {d}")
        };
        assert!(
            (ours - theirs).abs() <= theirs / 1000.0,
            "within 0.1 %: {d}"
        );
    }

    let mut cut = snapshot.clone();
    cut.sysctls.watermark_scale_factor = None;
    let other = s.path("other.json");
    cut.save(std::path::Path::new(&other)).unwrap();
    fails_with(
        &[
            "zoneinfo",
            "--layout",
            &layout,
            "--sysctls",
            &format!("snapshot:{other}"),
        ],
        "vm.watermark_scale_factor: not read",
    );
}

/// Without `--era`, a snapshot's kernel picks the era: the newest at or
/// below its release (a 6.3 kernel models as 6.1), said on standard
/// error; `--era` still wins.
#[test]
fn a_snapshots_kernel_picks_the_era() {
    let s = Scratch::new("snapshot-era");
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/snapshot-host.json");
    let mut snapshot = pfnlab::snapshot::Snapshot::load(std::path::Path::new(fixture)).unwrap();
    snapshot.kernel.version = Some("Linux version 6.3.7-200.fc38.x86_64 (mockbuild@)".into());
    snapshot.kernel.release = Some("6.3.7-200.fc38.x86_64".into());
    let path = s.path("v6_3.json");
    snapshot.save(std::path::Path::new(&path)).unwrap();
    let spec = format!("snapshot:{path}");
    let out = pfnlab(&["zoneinfo", "--layout", &spec, "--cpus", "2"]);
    let text = stdout(&out);
    assert!(
        !text.contains("promo") && !text.contains("high_min"),
        "6.1's format"
    );
    let note = String::from_utf8(out.stderr).unwrap();
    assert!(note.contains("era 6.1") && note.contains("6.3.7"), "{note}");
    let out = pfnlab(&[
        "zoneinfo", "--layout", &spec, "--cpus", "2", "--era", "6.18",
    ]);
    assert!(stdout(&out).contains("high_min"));
    assert!(out.stderr.is_empty());
}

/// `--sysctls snapshot:FILE` takes `movablecore=` from the machine's
/// command line; a machine booted with `movable_node` takes ZONE_MOVABLE
/// from its firmware instead, which pfnlab does not model: its sizes are
/// not applied, the run says why, and goes on.
#[test]
fn a_machines_movablecore_applies_unless_its_firmware_decides() {
    let s = Scratch::new("snapshot-movablecore");
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/snapshot-host.json");
    let run = |extra: &str| {
        let mut snapshot = pfnlab::snapshot::Snapshot::load(std::path::Path::new(fixture)).unwrap();
        let line = snapshot.kernel.cmdline.clone().unwrap_or_default();
        snapshot.kernel.cmdline = Some(format!("{line}{extra}"));
        let path = s.path(&format!("cmdline{}.json", extra.len()));
        snapshot.save(std::path::Path::new(&path)).unwrap();
        let spec = format!("snapshot:{path}");
        let out = pfnlab(&["zoneinfo", "--layout", &spec, "--sysctls", &spec]);
        assert!(out.status.success(), "{extra}: {out:?}");
        (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let (plain, _) = run("");
    let (movable, _) = run(" movablecore=4G");
    let (firmware, said) = run(" movablecore=4G movable_node");
    assert_ne!(movable, plain, "movablecore=4G makes a ZONE_MOVABLE");
    assert_eq!(firmware, plain);
    assert!(
        said.contains("no ZONE_MOVABLE from the machine's command line: movable_node"),
        "{said}"
    );
}
