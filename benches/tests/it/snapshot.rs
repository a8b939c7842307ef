//! `pfnlab snapshot`, `--layout snapshot:FILE` and `--start-state
//! snapshot:FILE` end to end: a saved tree becomes a snapshot, this
//! host's snapshot becomes a layout and an allocator whose buddyinfo and
//! pagetypeinfo are the snapshot's byte for byte, and bad snapshots are
//! one line and exit status 2.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pfnlab::snapshot::Snapshot;

pub(crate) fn pfnlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pfnlab"))
        .args(args)
        .output()
        .expect("run pfnlab")
}

pub(crate) fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// One line on stderr and exit status 2.
pub(crate) fn refused(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8(out.stderr.clone()).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    err
}

fn host_fixture() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/snapshot-host.json")
        .to_str()
        .unwrap()
        .to_owned()
}

fn write(root: &Path, machine_path: &str, text: &str) {
    let path = root.join(machine_path.trim_start_matches('/'));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn snapshot_writes_a_saved_tree_and_names_what_it_could_not_read() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    write(&root, "/sys/firmware/memmap/0/start", "0x100000\n");
    write(&root, "/sys/firmware/memmap/0/end", "0x3fffffff\n");
    write(&root, "/sys/firmware/memmap/0/type", "System RAM\n");
    write(&root, "/proc/version", "Linux version 6.18.0\n");
    let out_file = tmp.path().join("s.json");
    let out = stdout(&pfnlab(&[
        "snapshot",
        "--root",
        root.to_str().unwrap(),
        "--out",
        out_file.to_str().unwrap(),
    ]));
    assert!(out.starts_with("wrote "), "{out}");
    assert!(out.contains("could not read /proc/pagetypeinfo: "), "{out}");
    let snap = Snapshot::load(&out_file).unwrap();
    assert_eq!(snap.kernel.version.as_deref(), Some("Linux version 6.18.0"));
    assert_eq!(snap.arch, std::env::consts::ARCH);
    // The layout is the firmware map's one RAM range.
    let spec = format!("snapshot:{}", out_file.display());
    let layout = stdout(&pfnlab(&["layout", "--layout", &spec]));
    assert!(layout.contains("0x100000"), "{layout}");
}

/// The host's snapshot: its allocator's buddyinfo and pagetypeinfo are
/// the machine's files, byte for byte.
#[test]
fn the_host_fixture_starts_an_allocator_with_its_free_lists() {
    let fixture = host_fixture();
    let snap = Snapshot::load(Path::new(&fixture)).unwrap();
    let spec = format!("snapshot:{fixture}");
    let args = ["--layout", &spec, "--start-state", &spec, "--seed", "3"];
    let types = stdout(&pfnlab(&[&["pagetypeinfo"], &args[..]].concat()));
    assert_eq!(Some(types), snap.proc.pagetypeinfo);
    let buddy = stdout(&pfnlab(&[&["buddyinfo"], &args[..]].concat()));
    assert_eq!(Some(buddy), snap.proc.buddyinfo);
}

#[test]
fn bad_snapshots_are_one_line_and_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let fixture = host_fixture();
    let host = std::fs::read_to_string(&fixture).unwrap();
    let save = |name: &str, text: String| {
        let path = tmp.path().join(name);
        std::fs::write(&path, text).unwrap();
        format!("snapshot:{}", path.display())
    };
    let edited = |name: &str, edit: &dyn Fn(&mut Snapshot)| {
        let mut snap = Snapshot::from_json(&host).unwrap();
        edit(&mut snap);
        save(name, snap.to_json())
    };
    let version = save(
        "v2.json",
        host.replacen("\"version\": 1,", "\"version\": 2,", 1),
    );
    let err = refused(&pfnlab(&["layout", "--layout", &version]));
    assert!(err.contains("snapshot format version 2"), "{err}");
    let arch = edited("riscv.json", &|s| s.arch = "riscv64".into());
    let err = refused(&pfnlab(&["buddyinfo", "--layout", &arch]));
    assert!(err.contains("a snapshot of a riscv64 machine"), "{err}");
    let cut = edited("cut.json", &|s| {
        let z = s.proc.zoneinfo.as_mut().unwrap();
        let cut = z[..z.len() / 3].rfind('\n').unwrap() + 1;
        z.truncate(cut);
    });
    let err = refused(&pfnlab(&["layout", "--layout", &cut]));
    assert!(err.contains("zoneinfo is truncated"), "{err}");
    // Nine order-10 Movable blocks in DMA: its 4,096 pages hold three.
    let full = edited("full.json", &|s| {
        let mut types = s.pagetypeinfo().unwrap().unwrap();
        types.zones[0].free[1][10] = 9;
        s.proc.pagetypeinfo = Some(types.to_string());
    });
    let layout = format!("snapshot:{fixture}");
    let err = refused(&pfnlab(&[
        "pagetypeinfo",
        "--layout",
        &layout,
        "--start-state",
        &full,
    ]));
    assert!(err.contains("zone DMA: only "), "{err}");
    let err = refused(&pfnlab(&["buddyinfo", "--start-state", "my.json"]));
    assert!(err.contains("snapshot:FILE"), "{err}");
}

/// A report's `start_state`, read back.
fn start_state_of(json: &Path) -> serde_json::Value {
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    report["start_state"].clone()
}

#[test]
fn the_default_comparison_bulk_and_replay_start_from_a_snapshot() {
    let dir = std::env::temp_dir().join(format!("pfnlab-start-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let start = format!("snapshot:{}", host_fixture());
    // The default comparison builds every model twice over the whole
    // layout: it starts from a snapshot of the 2 GiB Debian 12 guest, the
    // others from this machine's 24 GiB one.
    let guest = dir.join("guest-6.1-plain.json");
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/guests/6.1/plain");
    let made = pfnlab(&["snapshot", "--root", root, "--out", guest.to_str().unwrap()]);
    assert!(made.status.success(), "{made:?}");
    let guest_start = format!("snapshot:{}", guest.display());
    let json = dir.join("r.json");
    let j = json.to_str().unwrap();
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/gzip-dd.trace.zst");
    for (args, what) in [
        (
            vec![
                "--start-state",
                &guest_start,
                "--seed",
                "3",
                "--quick",
                "--json",
                j,
            ],
            "compare",
        ),
        (
            vec![
                "bench",
                "bulk",
                "--quick",
                "--start-state",
                &start,
                "--seed",
                "3",
                "--json",
                j,
            ],
            "bulk",
        ),
        (
            vec![
                "replay",
                trace,
                "--model",
                "flat",
                "--trials",
                "1",
                "--start-state",
                &start,
                "--seed",
                "3",
                "--json",
                j,
            ],
            "replay",
        ),
    ] {
        let out = stdout(&pfnlab(&args));
        // The header says it, the layout is the snapshot's, and the
        // report records the snapshot and the seed.
        assert!(out.contains("start state: snapshot:"), "{what}: {out}");
        let s = start_state_of(&json);
        assert_eq!(s["seed"], 3, "{what}: {s}");
        let file = if what == "compare" {
            "guest-6.1-plain.json"
        } else {
            "snapshot-host.json"
        };
        assert!(
            s["snapshot"].as_str().is_some_and(|p| p.ends_with(file)),
            "{what}: {s}"
        );
        if what == "replay" {
            // No --era: the snapshot's kernel (6.18.44) picks 6.18.
            assert!(
                out.contains("| era 6.18 (the snapshot's kernel 6.18.44) |"),
                "{out}"
            );
            // The snapshot's machine had little free: the replay started
            // with the rest allocated, and conserved it.
            let report: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
            assert_eq!(
                report["results"][0]["allocator"]["conserved"], true,
                "{report}"
            );
        }
    }
    // An experiment whose workload needs boot's free lists refuses it,
    // and so does the default comparison's option before a command.
    let msg = refused(&pfnlab(&[
        "bench",
        "peers",
        "--quick",
        "--start-state",
        &start,
    ]));
    assert!(msg.contains("bench peers takes no --start-state"), "{msg}");
    let msg = refused(&pfnlab(&["--start-state", &start, "layout"]));
    assert!(msg.contains("--start-state before a command"), "{msg}");
    // A snapshot that is not there: one line, nothing run.
    let msg = refused(&pfnlab(&[
        "bench",
        "bulk",
        "--quick",
        "--start-state",
        "snapshot:/nonexistent.json",
    ]));
    assert!(msg.contains("/nonexistent.json"), "{msg}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A snapshot's layout is the RAM the kernel was given: saved as root,
/// `/proc/iomem` holds the kernel's own map, so the Debian 12 guests'
/// zones start where theirs do (page 0 reserved by `trim_bios_range`) and
/// the `memmap=` ranges are holes, and every zone's `start_pfn`,
/// `spanned` and `present` match the guest's zoneinfo. Under
/// `numa=fake=64` the nodes are smaller than a memory block: they come
/// from the zoneinfo's spans, so each fake node holds its own zones; and
/// `movablecore=1G` on the saved kernel command line puts the RAM above
/// 4 GiB in ZONE_MOVABLE, as the guest's kernel did; sized from the
/// guest's managed pages less the init sections and initrd its kernel log
/// says it freed after sizing them, every computed field is its kernel's;
/// a memory block the
/// guest took offline is a `hotplug` range, in no zone, so its zone's
/// `present` and pageblocks leave it out. Started from its own
/// free lists, each guest's buddyinfo and pagetypeinfo come out as its
/// kernel printed them.
#[test]
fn a_guests_snapshot_has_the_ram_its_kernel_was_given() {
    let dir = std::env::temp_dir().join(format!("pfnlab-guest-ram-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let guests = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/guests/6.1");
    for guest in [
        "plain",
        "memmap-holes",
        "four-cpus-two-nodes",
        "cpuless-nodes",
        "numa-fake-64",
        "movablecore-1g",
        "offline-block",
    ] {
        let root = format!("{guests}/{guest}");
        let json = dir.join(format!("{guest}.json"));
        let made = pfnlab(&["snapshot", "--root", &root, "--out", json.to_str().unwrap()]);
        assert!(made.status.success(), "{guest}: {made:?}");
        let spec = format!("snapshot:{}", json.display());
        let theirs = format!("{root}/proc/zoneinfo");
        let out = stdout(&pfnlab(&[
            "zoneinfo",
            "--layout",
            &spec,
            "--sysctls",
            &spec,
            "--compare",
            &theirs,
        ]));
        let layout: Vec<&str> = out
            .lines()
            .filter(|l| {
                [" start_pfn:", " spanned:", " present:", "zone missing"]
                    .iter()
                    .any(|f| l.contains(f))
            })
            .collect();
        assert!(layout.is_empty(), "{guest}: {layout:?}");
        assert!(
            out.contains("fields differ") || out.contains("match"),
            "{guest}: {out}"
        );
        // Sized from the guest's own managed pages less what its log says
        // it freed after sizing them, every computed field (watermarks,
        // protection, each CPU's batch and high) is the kernel's: only
        // live state differs.
        let exact = stdout(&pfnlab(&[
            "zoneinfo",
            "--era",
            "6.1",
            "--layout",
            &spec,
            "--sysctls",
            &spec,
            "--managed-from",
            &theirs,
            "--compare",
            &theirs,
        ]));
        let computed: Vec<&str> = exact
            .lines()
            .filter(|l| !l.ends_with("(live state)") && !l.ends_with("fields differ"))
            .collect();
        assert!(computed.is_empty(), "{guest}: {computed:?}");
        // Started from its own free lists, the model prints the guest's
        // buddyinfo and pagetypeinfo.
        for view in ["buddyinfo", "pagetypeinfo"] {
            let ours = stdout(&pfnlab(&[
                view,
                "--layout",
                &spec,
                "--sysctls",
                &spec,
                "--start-state",
                &spec,
            ]));
            let theirs = std::fs::read_to_string(format!("{root}/proc/{view}")).unwrap();
            let words = |t: &str| -> Vec<String> {
                t.lines()
                    .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                    .filter(|l| !l.is_empty())
                    .collect()
            };
            assert_eq!(words(&ours), words(&theirs), "{guest} {view}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// This machine's snapshot taken while its Normal zone was still in
/// (lazily) deferred struct page init: the model starts in deferred init,
/// grows the zone to the snapshot's pageblocks and rebuilds its free
/// lists exactly, with as many pages managed as the machine had; the
/// default comparison's path and bulk take it too, and an era without
/// deferred init is one line and exit status 2 that says why.
#[test]
fn a_snapshot_in_deferred_init_starts_the_model_in_deferred_init() {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/snapshot-deferred.json")
        .to_str()
        .unwrap()
        .to_owned();
    let snap = Snapshot::load(Path::new(&fixture)).unwrap();
    let zones = snap.zoneinfo().unwrap().unwrap();
    let normal = zones.zone(0, "Normal").unwrap();
    assert!(normal.managed < normal.present, "{normal:?}");
    let deferred = snap
        .deferred_zone()
        .unwrap()
        .expect("a zone in deferred init");
    assert_eq!((deferred.zone.as_str(), deferred.blocks), ("Normal", 7680));
    let spec = format!("snapshot:{fixture}");
    let state = ["--layout", &spec, "--start-state", &spec];
    // The model's buddyinfo is the machine's, zone by zone and order by order.
    let ours = stdout(&pfnlab(&[&["buddyinfo"][..], &state].concat()));
    let theirs = snap.buddyinfo().unwrap().unwrap();
    let model = buddy::views::parse_buddyinfo(&ours).unwrap();
    assert_eq!(model, theirs, "{ours}");
    // The zone was grown, as the machine's, to the pages it had managed.
    let info = stdout(&pfnlab(&[&["zoneinfo"][..], &state].concat()));
    let info = buddy::views::parse_zoneinfo(&info).unwrap();
    assert_eq!(info.zone(0, "Normal").unwrap().managed, normal.managed);
    let bulk = stdout(&pfnlab(&[
        "bench",
        "bulk",
        "--quick",
        "--model",
        "flat",
        "--start-state",
        &spec,
    ]));
    assert!(
        bulk.contains(
            "in deferred init as its machine was: node 0 zone Normal grown to its 7680 pageblocks"
        ),
        "{bulk}"
    );
    for args in [
        vec![
            "buddyinfo",
            "--layout",
            &spec,
            "--start-state",
            &spec,
            "--era",
            "2.6.23",
        ],
        vec!["--start-state", &spec, "--quick", "--era", "2.6.23"],
    ] {
        let err = refused(&pfnlab(&args));
        assert!(
            err.contains("zone Normal counts 7680 pageblocks for 5505024 present pages (3932160 managed): the machine was still in deferred struct page init, which era 2.6.23 does not have"),
            "{args:?}: {err}"
        );
    }
}

/// `replay --end-state`: every model's free lists at the end beside the
/// snapshot's, zone by zone, with the distances in the table and the JSON;
/// a snapshot without a buddyinfo is one line and exit 2, before anything
/// is replayed.
#[test]
fn a_replay_ends_beside_the_machines_free_lists() {
    // Measured at 0.001; the zone's DMA neighbour is about 0.18 away.
    const LARGEST_ZONE_BOUND: f64 = 0.01;
    let tmp = tempfile::tempdir().unwrap();
    let guest = tmp.path().join("guest.json");
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/guests/6.1/plain");
    let made = pfnlab(&["snapshot", "--root", root, "--out", guest.to_str().unwrap()]);
    assert!(made.status.success(), "{made:?}");
    let state = format!("snapshot:{}", guest.display());
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/ls-gzip.trace.txt");
    let json = tmp.path().join("r.json");
    // A replay from the guest's free lists, held against them at the end.
    let replay = |trace: &str, models: &str| {
        let j = json.to_str().unwrap();
        let args = [
            "replay", trace, "--model", models, "--trials", "1", "--verify",
        ];
        let states = ["--start-state", &state, "--end-state", &state];
        stdout(&pfnlab(&[&args[..], &states, &["--json", j]].concat()))
    };
    let out = replay(trace, "flat,sparse-extreme");
    assert!(out.contains("end state against snapshot:"), "{out}");
    let machine = Snapshot::load(&guest)
        .unwrap()
        .buddyinfo()
        .unwrap()
        .unwrap();
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = report["results"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for row in rows {
        // Its frees of the start state's allocated pages are no misuse.
        assert_eq!(row["verify_failures"], 0, "{out}");
        let end = &row["end_state"];
        let whole = end["order_distance"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&whole), "{end}");
        assert!(end["type_distance"].as_f64().is_some(), "{end}");
        let zones = end["zones"].as_array().unwrap();
        assert_eq!(zones.len(), machine.zones.len(), "{end}");
        for (z, m) in zones.iter().zip(&machine.zones) {
            assert!(
                out.contains(&format!("Node {}, zone {}", m.node, m.zone)),
                "{out}"
            );
            assert_eq!(
                (z["node"].as_u64(), z["zone"].as_str()),
                (Some(u64::from(m.node)), Some(m.zone.as_str()))
            );
            let nr_free: Vec<u64> = serde_json::from_value(z["machine_nr_free"].clone()).unwrap();
            assert_eq!(nr_free, m.nr_free, "the snapshot's own counts");
            let pages: u64 = m.nr_free.iter().enumerate().map(|(o, n)| n << o).sum();
            assert_eq!(z["machine_free_pages"], pages);
            let d = z["order_distance"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&d), "{z}");
        }
        // The replay started from these free lists and ran a short
        // recording (683 order-0 allocations): the zone with the most
        // free memory, nearly all of it at order 10, keeps its shape.
        let largest = zones
            .iter()
            .max_by_key(|z| z["machine_free_pages"].as_u64())
            .unwrap();
        let d = largest["order_distance"].as_f64().unwrap();
        assert!(d > 0.0 && d < LARGEST_ZONE_BOUND, "{largest}");
    }
    // One allocation and its free: the model ends on the snapshot's own
    // free lists, at no distance in any zone. In 6.18, whose per-CPU
    // `high` the start state restores from the snapshot, the lists seeded
    // with the snapshot's `count` stay below it; in the guest's 6.1 the
    // model's own `high`, sized without the guest's sysctls, is lower and
    // drains part of them.
    let pair = tmp.path().join("pair.txt");
    std::fs::write(
        &pair,
        concat!(
            "  bash-1 [000] ..... 1.000000: mm_page_alloc: page=0000000000000001 ",
            "pfn=0x2a2b41 order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE\n",
            "  bash-1 [000] ..... 1.000001: mm_page_free: page=0000000000000001 ",
            "pfn=0x2a2b41 order=0\n",
        ),
    )
    .unwrap();
    let j = json.to_str().unwrap();
    let args = [
        "replay",
        pair.to_str().unwrap(),
        "--model",
        "flat",
        "--trials",
        "1",
    ];
    let states = [
        "--start-state",
        &state,
        "--end-state",
        &state,
        "--era",
        "6.18",
    ];
    stdout(&pfnlab(&[&args[..], &states, &["--json", j]].concat()));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let end = &report["results"][0]["end_state"];
    assert_eq!(end["order_distance"], 0.0, "{end}");
    assert_eq!(end["type_distance"], 0.0, "{end}");
    // A snapshot without a buddyinfo: one line naming the option and the
    // file, and nothing replayed.
    let mut snap = Snapshot::load(&guest).unwrap();
    snap.proc.buddyinfo = None;
    let bare = tmp.path().join("bare.json");
    snap.save(&bare).unwrap();
    let bare_state = format!("snapshot:{}", bare.display());
    let out = pfnlab(&[
        "replay",
        trace,
        "--model",
        "flat",
        "--end-state",
        &bare_state,
    ]);
    let err = refused(&out);
    assert!(
        err.contains("--end-state") && err.contains("bare.json"),
        "{err}"
    );
    assert!(err.contains("the snapshot has no buddyinfo"), "{err}");
    assert!(out.stdout.is_empty(), "nothing replayed");
}
