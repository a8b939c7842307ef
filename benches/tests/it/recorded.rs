//! `trace record --snapshot`'s recordings: the machine's snapshots from
//! both ends inside the recording, and a replay that starts from the first
//! and ends beside the second (`--start-state recorded --end-state
//! recorded`), exactly as from the same snapshots in their own files.

use std::path::Path;

use pfnlab::snapshot::Snapshot;
use pfnlab::trace::format::{Header, TraceReader, write_recording};

use crate::snapshot::{pfnlab, refused, stdout};

const TEXT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/ls-gzip.trace.txt");
const RECORDING: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/gzip-dd.trace.zst");
const GUEST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/guests/6.1/plain");

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
    let guest = tmp.path().join("guest.json");
    let made = pfnlab(&[
        "snapshot",
        "--root",
        GUEST,
        "--out",
        guest.to_str().unwrap(),
    ]);
    assert!(made.status.success(), "{made:?}");
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

    let replay = |trace: &str, states: [&str; 4], more: &[&str], json: &Path| {
        let j = json.to_str().unwrap();
        let args = ["replay", trace, "--model", "flat", "--trials", "1"];
        stdout(&pfnlab(
            &[&args[..], &states, more, &["--json", j]].concat(),
        ))
    };
    let (a, b) = (tmp.path().join("a.json"), tmp.path().join("b.json"));
    let state = format!("snapshot:{}", guest.display());
    let own = replay(
        TEXT,
        ["--start-state", &state, "--end-state", &state],
        &["--layout", &state],
        &a,
    );
    let rec = recording.to_str().unwrap();
    let recorded = replay(
        rec,
        ["--start-state", "recorded", "--end-state", "recorded"],
        &[],
        &b,
    );
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
