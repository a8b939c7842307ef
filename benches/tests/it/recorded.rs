//! `trace record --snapshot`'s recordings: the machine's snapshots from
//! both ends inside the recording, and a replay that starts from the first
//! and ends beside the second (`--start-state recorded --end-state
//! recorded`), exactly as from the same snapshots in their own files.

use std::path::{Path, PathBuf};

use pfnlab::snapshot::Snapshot;
use pfnlab::trace::format::{Header, TraceReader, write_recording};

use crate::snapshot::{pfnlab, refused, stdout};

const TEXT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/ls-gzip.trace.txt");
const RECORDING: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/gzip-dd.trace.zst");
const GUEST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/guests/6.1/plain");

/// The Debian 12 guest's snapshot, written under `dir`.
fn guest_snapshot(dir: &Path) -> PathBuf {
    let guest = dir.join("guest.json");
    let made = pfnlab(&[
        "snapshot",
        "--root",
        GUEST,
        "--out",
        guest.to_str().unwrap(),
    ]);
    assert!(made.status.success(), "{made:?}");
    guest
}

/// `pfnlab replay TRACE --model flat --trials 1 ARGS… --json JSON`'s
/// output.
fn replay_flat(trace: &str, args: &[&str], json: &Path) -> String {
    let head = ["replay", trace, "--model", "flat", "--trials", "1"];
    let tail = ["--json", json.to_str().unwrap()];
    stdout(&pfnlab(&[&head[..], args, &tail].concat()))
}

/// The end-state part of a replay's JSON report, every model's.
fn end_states(json: &Path) -> Vec<serde_json::Value> {
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let mut end = row["end_state"].clone();
            // Where the snapshot came from differs by design.
            end.as_object_mut().unwrap().remove("snapshot");
            end
        })
        .collect()
}

/// A recording carrying a guest's snapshot at both ends replays as the
/// same snapshot given in its own file: the same start, the same end
/// state and distances; the header and JSON say where the state came from.
#[test]
fn a_recordings_own_snapshots_are_its_start_and_end_state() {
    let tmp = tempfile::tempdir().unwrap();
    let guest = guest_snapshot(tmp.path());
    let snapshot = Snapshot::load(&guest).unwrap();
    let events: Vec<_> = TraceReader::open(Path::new(TEXT))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let header = Header {
        kernel: "6.1.0-57-amd64".into(),
        page_size: 4096,
        cpus: 2,
        layout: Some(snapshot.layout("recorded").unwrap().to_toml()),
        command: Some("ls; gzip".into()),
        seconds: 1.0,
        lost_events: vec![0, 0],
        snapshot_start: Some(snapshot.to_json()),
        snapshot_end: Some(snapshot.to_json()),
    };
    let recording = tmp.path().join("with-snapshots.trace.zst");
    write_recording(&recording, &header, &events).unwrap();
    let read = TraceReader::open(&recording).unwrap();
    assert_eq!(read.header(), Some(&header), "the header reads back whole");

    let (a, b) = (tmp.path().join("a.json"), tmp.path().join("b.json"));
    let state = format!("snapshot:{}", guest.display());
    let own_args = [
        "--start-state",
        &state,
        "--end-state",
        &state,
        "--layout",
        &state,
    ];
    let own = replay_flat(TEXT, &own_args, &a);
    let rec = recording.to_str().unwrap();
    let states = ["--start-state", "recorded", "--end-state", "recorded"];
    let recorded = replay_flat(rec, &states, &b);
    assert_eq!(end_states(&a), end_states(&b), "{own}\n{recorded}");
    assert!(
        recorded.contains(&format!(
            "start state: recorded: the snapshot at the start of {rec}"
        )),
        "{recorded}"
    );
    assert!(
        recorded.contains(&format!(
            "end state against recorded: the snapshot at the end of {rec}"
        )),
        "{recorded}"
    );
    assert!(
        recorded.contains("era 6.1 (the snapshot's kernel 6.1."),
        "{recorded}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&b).unwrap()).unwrap();
    assert_eq!(report["start_state"]["recorded"], true);
}

/// `recorded` of a trace that carries no snapshot is one line and exit 2
/// saying why: the kernel's text, and a recording made without
/// `--snapshot`; and the default comparison has no recording to take one
/// from.
#[test]
fn recorded_without_snapshots_is_one_line_and_exit_2() {
    for (trace, option, why) in [
        (
            TEXT,
            "--start-state",
            "is the kernel's text, which carries no snapshot",
        ),
        (
            RECORDING,
            "--start-state",
            "was recorded without its machine's snapshots",
        ),
        (
            RECORDING,
            "--end-state",
            "was recorded without its machine's snapshots",
        ),
    ] {
        let err = refused(&pfnlab(&[
            "replay", trace, "--model", "flat", option, "recorded",
        ]));
        assert!(err.contains(&format!("{option} recorded: ")), "{err}");
        assert!(err.contains(why), "{err}");
    }
    let out = pfnlab(&["--start-state", "recorded", "--quick"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("snapshot:FILE"), "{err}");
}

/// From a start state, the recording's frees of pages allocated before it
/// began free pages the start state held (those of order 0),
/// conservation holds, and the refills and drains are given
/// CPU by CPU, summing to the totals on both sides.
#[test]
fn a_start_state_serves_earlier_frees_and_counts_per_cpu() {
    let tmp = tempfile::tempdir().unwrap();
    let guest = guest_snapshot(tmp.path());
    let state = format!("snapshot:{}", guest.display());
    let json = tmp.path().join("r.json");
    let out = replay_flat(RECORDING, &["--start-state", &state], &json);
    assert!(out.contains("per CPU: cpu 0 "), "{out}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let row = &report["results"][0];
    let (events, alloc) = (&row["events"], &row["allocator"]);
    let n = |v: &serde_json::Value| v.as_u64().unwrap();
    // 563 frees of earlier pages, 479 of them of order 0.
    assert_eq!(n(&events["unknown_frees"]), 563);
    assert_eq!(n(&events["prior_frees"]), 479, "every one of order 0");
    assert_eq!(alloc["conserved"], true);
    let cpus = alloc["per_cpu"].as_array().unwrap();
    assert_eq!(cpus.len(), 2, "{cpus:?}");
    let sum = |key: &str| cpus.iter().map(|c| n(&c[key])).sum::<u64>();
    assert_eq!(sum("trace_refills"), n(&events["zone_locked_refills"]));
    assert_eq!(sum("trace_drains"), n(&events["pcpu_drains"]));
    assert_eq!(sum("refill_blocks"), n(&alloc["pcp_refill_blocks"]));
    assert_eq!(sum("drain_blocks"), n(&alloc["pcp_drain_blocks"]));
}

/// This machine's own recording with its snapshots (Linux 6.18 in lazy
/// deferred init): the replay starts in deferred init from the first
/// snapshot, ends close to the second, and holds its counts, its per-CPU
/// refills among them.
#[test]
fn this_machines_recording_replays_from_its_own_snapshots() {
    // Measured at 0: the trace takes nothing from the zones and gives
    // nothing back, and the start state restores the lists as they were.
    const DISTANCE_BOUND: f64 = 0.05;
    let trace = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/snapshots.trace.zst"
    );
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("r.json");
    let states = ["--start-state", "recorded", "--end-state", "recorded"];
    let out = replay_flat(trace, &states, &json);
    assert!(
        out.contains("in deferred init as its machine was: node 0 zone Normal"),
        "{out}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let row = &report["results"][0];
    assert_eq!(row["allocator"]["conserved"], true, "{out}");
    let d = row["end_state"]["order_distance"].as_f64().unwrap();
    assert!((0.0..DISTANCE_BOUND).contains(&d), "{d}: {out}");
    assert_eq!(report["start_state"]["deferred_init"], true);
    // The kernel refilled no list while it ran: its lists held what the
    // workload asked for. Seeded with the pages and the order-3 block the
    // trace shows on each CPU's lists, the replay's refill none either.
    let per_cpu = row["allocator"]["per_cpu"].as_array().unwrap();
    assert_eq!(per_cpu.len(), 2, "{out}");
    for cpu in per_cpu {
        assert_eq!(cpu["trace_refills"], 0, "{out}");
        assert_eq!(cpu["refill_blocks"], 0, "{out}");
    }
}

/// From boot, the replay seeds each CPU's lists with what the trace shows
/// on them. The committed recording's first half second, before its
/// first drain (CPU 1's vmstat work at 0.52 s), then needs exactly the
/// kernel's refills on each CPU, and drains nothing, as the kernel did.
/// (Past it, the kernel's lists held pages the recording never names:
/// the next test.)
#[test]
fn from_boot_the_lists_start_with_what_the_trace_shows() {
    let reader = TraceReader::open(Path::new(RECORDING)).unwrap();
    let header = reader.header().unwrap().clone();
    let (events, _) = reader.read_all().unwrap();
    let t0 = events[0].ts_ns;
    let cut: Vec<_> = events
        .into_iter()
        .take_while(|e| e.ts_ns - t0 < 500_000_000)
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("half.trace.zst");
    write_recording(&trace, &header, &cut).unwrap();
    let json = tmp.path().join("r.json");
    let out = replay_flat(trace.to_str().unwrap(), &["--era", "6.18"], &json);
    assert!(out.contains("per-CPU lists seeded with"), "{out}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let row = &report["results"][0];
    assert_eq!(row["allocator"]["conserved"], true, "{out}");
    let n = |v: &serde_json::Value| v.as_u64().unwrap();
    let mut kernel_refills = 0;
    for cpu in row["allocator"]["per_cpu"].as_array().unwrap() {
        let (kernel, model) = (n(&cpu["trace_refills"]), n(&cpu["refill_blocks"]));
        assert!(
            model.abs_diff(kernel) * 100 <= kernel * 15,
            "refills {model} against the kernel's {kernel}: {out}"
        );
        assert_eq!(n(&cpu["trace_drains"]), 0, "{out}");
        assert_eq!(n(&cpu["drain_blocks"]), 0, "{out}");
        kernel_refills += kernel;
    }
    assert!(kernel_refills > 100, "a cut with refills: {out}");
    // With `--empty-lists` the replay refills for the pages it did not
    // seed, well past the kernel's count.
    let out = replay_flat(
        trace.to_str().unwrap(),
        &["--era", "6.18", "--empty-lists"],
        &json,
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let row = &report["results"][0];
    assert_eq!(row["events"]["seeded_list_pages"], 0, "{out}");
    let refills = n(&row["allocator"]["pcp_refill_blocks"]);
    assert!(refills * 100 > kernel_refills * 115, "{refills}: {out}");
    // A start state seeds its lists from its snapshot, so the two are
    // refused together.
    let err = refused(&pfnlab(&[
        "replay",
        RECORDING,
        "--empty-lists",
        "--start-state",
        "recorded",
    ]));
    assert!(err.contains("--empty-lists"), "{err}");
}

/// From boot, the vmstat work's drains show how many pages the lists
/// held as the recording began, pages it never names among them: on the
/// whole committed recording CPU 1's work drained its whole cap (2,016
/// pages) twice, so its lists held at least `8·cap − 7·batch` pages, far
/// more than the trace names. Seeded to that floor, each CPU's refills
/// and drains come within 15 % of the kernel's.
#[test]
fn from_boot_the_work_drains_show_what_the_lists_held() {
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("r.json");
    let out = replay_flat(RECORDING, &["--era", "6.18"], &json);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let row = &report["results"][0];
    assert_eq!(row["allocator"]["conserved"], true, "{out}");
    let n = |v: &serde_json::Value| v.as_u64().unwrap();
    // 8 · (63 << 5) − 7 · 63 on CPU 1 alone.
    assert!(n(&row["events"]["seeded_list_pages"]) >= 15_687, "{out}");
    assert_eq!(row["events"]["unseeded_list_pages"], 0, "{out}");
    let within = |model: u64, kernel: u64| model.abs_diff(kernel) * 100 <= kernel * 15;
    let (mut refills, mut drains) = ((0, 0), (0, 0));
    for cpu in row["allocator"]["per_cpu"].as_array().unwrap() {
        let refill = (n(&cpu["refill_blocks"]), n(&cpu["trace_refills"]));
        let drain = (n(&cpu["drain_blocks"]), n(&cpu["trace_drains"]));
        assert!(within(refill.0, refill.1), "refills {refill:?}: {out}");
        assert!(within(drain.0, drain.1), "drains {drain:?}: {out}");
        refills = (refills.0 + refill.0, refills.1 + refill.1);
        drains = (drains.0 + drain.0, drains.1 + drain.1);
    }
    assert!(within(refills.0, refills.1), "{refills:?}: {out}");
    assert!(
        drains.1 > 5_000 && within(drains.0, drains.1),
        "{drains:?}: {out}"
    );
}
