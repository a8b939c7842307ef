//! The `pfnlab` binary end to end: the default run and every experiment in
//! quick mode (structure, finite positive numbers, the JSON schema), and
//! every bad input (one line on stderr, exit status 2, nothing written).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn pfnlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pfnlab"))
        .args(args)
        .output()
        .expect("run pfnlab")
}

struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("pfnlab-cli-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
    fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A small layout with holes below 1 MiB and above 1 GiB, so runs stay
/// short; every model can hold it.
const SMALL: &str = r#"
[[range]]
start = 0x0
end = 0x9fc00
kind = "ram"
[[range]]
start = 0x100000
end = 0x40000000
kind = "ram"
"#;

/// [`SMALL`] plus device memory with a sub-section hole: only the vmemmap
/// models can hold it.
const DEVICE: &str = r#"
[[range]]
start = 0x100000000
end = 0x100600000
kind = "device"
"#;

fn small_layout(s: &Scratch) -> String {
    let p = s.path("small.toml");
    std::fs::write(&p, SMALL).unwrap();
    p.display().to_string()
}

/// `numa=fake=64` on a 512 MiB machine: the cpuset experiment's 64 nodes,
/// each small enough that filling 43 of them is quick.
fn fake_numa_layout(s: &Scratch) -> String {
    let p = s.path("fake-numa-64.toml");
    std::fs::write(&p, crate::cpuset::fake_numa_64_toml()).unwrap();
    p.display().to_string()
}

fn device_layout(s: &Scratch) -> String {
    let p = s.path("device.toml");
    std::fs::write(&p, format!("{SMALL}{DEVICE}")).unwrap();
    p.display().to_string()
}

fn positive(v: &Value, what: &str) -> f64 {
    let x = v
        .as_f64()
        .unwrap_or_else(|| panic!("{what} is not a number: {v}"));
    assert!(x.is_finite() && x > 0.0, "{what} = {x}");
    x
}

/// The golden schema of every `--json` file.
fn check_schema(path: &Path, experiment: &str) -> Vec<Value> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let obj = v.as_object().unwrap();
    let mut keys: Vec<&str> = obj
        .keys()
        .map(String::as_str)
        .filter(|k| !["trials", "comparisons"].contains(k))
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["experiment", "layout", "machine", "results"]);
    if let Some(t) = obj.get("trials") {
        let ran = positive(&t["ran"], "trials.ran");
        assert!(ran >= positive(&t["asked"], "trials.asked"), "{t}");
        assert!(
            ran <= positive(&t["max_trials"], "trials.max_trials"),
            "{t}"
        );
        assert!(t["extended"].is_array(), "{t}");
    }
    for c in obj
        .get("comparisons")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let (lo, med, hi) = (
            c["lo"].as_f64().unwrap(),
            c["median"].as_f64().unwrap(),
            c["hi"].as_f64().unwrap(),
        );
        assert!(lo <= med && med <= hi, "{c}");
        assert!(
            c["what"].is_string() && c["verdict"].is_string() || c["verdict"].is_object(),
            "{c}"
        );
        let noise = c["verdict"].get("within-noise").is_some();
        assert_eq!(
            noise,
            lo <= 1.0 && 1.0 <= hi,
            "a verdict only outside the noise: {c}"
        );
    }
    assert_eq!(v["experiment"], experiment);
    assert!(v["layout"].is_string());
    let m = v["machine"].as_object().unwrap();
    let mut mkeys: Vec<&str> = m.keys().map(String::as_str).collect();
    mkeys.sort_unstable();
    assert_eq!(
        mkeys,
        ["cores", "cpu", "kernel", "memory_bytes", "thp", "tsc_hz"]
    );
    positive(&v["machine"]["tsc_hz"], "tsc_hz");
    positive(&v["machine"]["cores"], "cores");
    let results = v["results"].as_array().unwrap().clone();
    assert!(!results.is_empty());
    for r in &results {
        assert!(r["variant"].is_string() && r["model"].is_string(), "{r}");
        assert!(r["params"].is_object(), "{r}");
        for key in ["ns_per_op", "cycles_per_op"] {
            let s = &r[key];
            let (min, med, max) = (
                positive(&s["min"], key),
                positive(&s["median"], key),
                positive(&s["max"], key),
            );
            assert!(min <= med && med <= max, "{r}");
            let trials = s["trials"].as_array().unwrap();
            assert!(!trials.is_empty());
            for t in trials {
                positive(t, "trial");
            }
        }
    }
    results
}

#[test]
fn default_run_quick_prints_the_table_and_writes_json() {
    let s = Scratch::new("default");
    let layout = small_layout(&s);
    let json = s.path("compare.json");
    let out = pfnlab(&[
        "--quick",
        "--layout",
        &layout,
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "pfn_valid valid",
        "No alloc+free (hole check) column",
        "Trials: 3",
        "flat",
        "sparse-extreme",
        "vmemmap-probe",
        "cheapest on the allocator path",
    ] {
        assert!(text.contains(needle), "{needle} missing:\n{text}");
    }
    let rows = check_schema(&json, "compare");
    // The pairs' ranking is the comparison's point: every model's trials
    // ran in turn, so every alloc+free ratio is paired.
    assert!(text.contains("every model's trials interleaved"), "{text}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let pair_ratios: Vec<&Value> = doc["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["what"].as_str().unwrap().ends_with("alloc+free"))
        .collect();
    assert!(!pair_ratios.is_empty(), "{doc}");
    assert!(
        pair_ratios.iter().all(|c| c["method"] == "paired"),
        "{pair_ratios:?}"
    );
    let models: std::collections::BTreeSet<&str> =
        rows.iter().map(|r| r["model"].as_str().unwrap()).collect();
    assert!(models.len() >= 6, "five models and the kernel: {models:?}");
    assert!(
        rows.iter()
            .filter(|r| r["model"] != "kernel")
            .all(|r| r["memmap_resident_bytes"].as_u64().is_some())
    );
    let fixup = rows
        .iter()
        .find(|r| r["variant"] == "kernel-fixup-faulting-write")
        .expect("the kernel's fault fixup is measured");
    positive(&fixup["fixup_cycles"].clone(), "fixup_cycles");
    assert!(
        text.contains("Kernel exception-table fixup on this host"),
        "{text}"
    );
}

/// Every experiment runs in quick mode, one test each (so they spread over
/// the test threads), and its report and `--json` hold what it measured.
mod quick_mode {
    macro_rules! quick {
        ($($name:ident: $exp:literal $($arg:literal)*;)*) => {$(
            #[test]
            fn $name() {
                super::run_quick($exp, &[$($arg),*]);
            }
        )*};
    }
    quick! {
        flags: "flags" "--iterations" "2";
        lock: "lock" "--iterations" "4";
        pfn_valid: "pfn-valid";
        bulk: "bulk";
        cpuset: "cpuset";
        peers: "peers";
        hole_density: "hole-density";
        breakdown: "breakdown" "--model" "sparse-extreme";
        walk: "walk" "--model" "sparse-extreme";
        frag: "frag" "--iterations" "4" "--sample-every" "1" "--immovable" "20"
            "--trace-sample-every" "3000";
        scale: "scale" "--threads" "1";
    }
}

fn run_quick(exp: &str, extra: &[&str]) {
    let s = Scratch::new(&format!("quick-{exp}"));
    let layout = if exp == "cpuset" {
        fake_numa_layout(&s)
    } else {
        small_layout(&s)
    };
    let json = s.path(&format!("{exp}.json"));
    let mut args = vec!["bench", exp, "--quick", "--json", json.to_str().unwrap()];
    if !extra.contains(&"--layout") {
        args.extend(["--layout", layout.as_str()]);
    }
    args.extend(extra.iter().copied());
    // The short text recording stands in for the seed's: the replay rows'
    // code is the same for any recording, and the shipped one is read
    // whole by `trace::the_seed_programs_recording_ships_and_reads_whole`.
    let short = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/ls-gzip.trace.txt");
    if exp == "flags" {
        args.extend(["--trace", short]);
    }
    // The smaller of the two committed recordings (8,013 events).
    let recording = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/snapshots.trace.zst"
    );
    if exp == "frag" {
        args.extend(["--trace", recording]);
    }
    let out = pfnlab(&args);
    assert!(
        out.status.success(),
        "{exp}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.contains("machine:"), "{exp}");
    assert!(text.contains("Trials: 3"), "{exp}: {text}");
    let rows = check_schema(&json, exp);
    match exp {
        "bulk" => {
            assert_eq!(rows.len(), 1 + 2 * 9);
            for r in rows.iter().filter(|r| r["params"]["bulk"] == 128) {
                positive(&r["ratio_to_seed"], "ratio_to_seed");
                assert!(r["seed"]["cycles_per_page"].is_number(), "{r}");
                assert!(r["seed_gain_from_1"].is_number(), "{r}");
            }
        }
        "flags" => {
            // The program: three SMP buddies on 1 and 2 threads, UP on
            // one; the recording: all four replayed.
            let count = |w: &str| rows.iter().filter(|r| r["params"]["workload"] == w).count();
            assert_eq!((count("program"), count("replay")), (7, 4));
            for r in &rows {
                positive(&r["ratio_to_seed"], "ratio_to_seed");
                positive(&r["marks_per_page"], "marks_per_page");
                assert!(r["seed"]["ratio_vs_bitmap"].is_number(), "{r}");
            }
            let atomic = rows
                .iter()
                .find(|r| r["variant"] == "program/atomic")
                .unwrap();
            assert_eq!(atomic["seed"]["seconds"], 37.58);
            let up = rows.iter().find(|r| r["variant"] == "program/up").unwrap();
            assert_eq!(up["params"]["threads"], 1);
            assert_eq!(up["seed"]["smp"], false);
        }
        "lock" => {
            // Two policies x three locks, each with its measured
            // completion, the model at the measured CPUs and the
            // projections, and the seed beside the 8-CPU projection.
            assert_eq!(rows.len(), 6);
            for r in &rows {
                positive(&r["completion_ms"], "completion_ms");
                positive(&r["ratio_to_seed"], "ratio_to_seed");
                assert!(r["small_p99_ns"].as_f64().is_some(), "{r}");
                for cpus in ["4", "8", "16"] {
                    positive(&r["model_projection"][cpus]["completion_ns"], "projection");
                }
                assert_eq!(r["seed"]["cpus"], 8);
                assert!(r["model_error_at_measured_cpus"].is_number(), "{r}");
                // The projection's interval, from one projection per
                // trial (3 quick trials), holds its median.
                let i = &r["per_page_speedup_projected_8cpus_interval"];
                assert_eq!(i["trials"], 3, "{r}");
                let (lo, m, hi) = (
                    positive(&i["lo"], "lo"),
                    positive(&i["median"], "median"),
                    positive(&i["hi"], "hi"),
                );
                assert!(lo <= m && m <= hi, "{i}");
                assert!(r["ratio_to_seed_interval"]["median"].is_number(), "{r}");
            }
            // 2.6.23's pcp: high = 6 x batch (31 and 186 on a zone of
            // 128 MiB and up; this layout's zone is smaller).
            let cal = &rows[0]["calibration"];
            assert_eq!(
                cal["high"].as_u64(),
                cal["batch"].as_u64().map(|b| 6 * b),
                "{cal}"
            );
        }
        "peers" => {
            let count = |v: &str| rows.iter().filter(|r| r["variant"] == v).count();
            assert_eq!(count("pfnlab"), 4);
            assert_eq!(count("floor"), 4, "the floor is measured in the same run");
            // LLFree runs without a feature; it neither splits nor
            // merges, so its split-merge pair is not applicable: no row,
            // no rank, no ratio.
            assert_eq!(count("llfree"), 3, "LLFree runs with no feature");
            assert!(
                !rows
                    .iter()
                    .any(|r| r["variant"] == "llfree"
                        && r["params"]["workload"] == "split-merge-pair")
            );
            assert!(text.contains("n/a (no splits)"), "{text}");
            let split_merge = text
                .lines()
                .find(|l| l.starts_with("split-merge-pair:"))
                .unwrap_or_else(|| panic!("a ranking of split-merge-pair: {text}"));
            assert!(!split_merge.contains("llfree"), "{split_merge}");
            if cfg!(feature = "peers") {
                for peer in ["buddy_system_allocator", "frame-alloc"] {
                    assert_eq!(count(peer), 4, "{peer} on every workload");
                }
                // No orders, so no split-merge pair: not applicable,
                // not a plain alloc+free passed off as one.
                assert_eq!(count("bitmap-allocator"), 3);
                assert!(!rows.iter().any(|r| r["variant"] == "bitmap-allocator"
                    && r["params"]["workload"] == "split-merge-pair"));
                assert!(text.contains("n/a (no orders)"), "{text}");
            }
            assert!(
                rows.iter()
                    .filter(|r| r["variant"] != "pfnlab")
                    .all(|r| r["ratio_vs_pfnlab_interval"]["lo"].is_number()),
                "every ratio to pfnlab has its interval"
            );
            // Every contender's trials of a workload are interleaved,
            // so each ratio to pfnlab is a paired one.
            assert!(
                rows.iter()
                    .filter(|r| r["variant"] != "pfnlab")
                    .all(|r| r["ratio_vs_pfnlab_interval"]["method"] == "paired"),
                "every ratio to pfnlab pairs its trials"
            );
            let workloads: std::collections::BTreeSet<&str> = rows
                .iter()
                .map(|r| r["params"]["workload"].as_str().unwrap())
                .collect();
            assert!(workloads.contains("burst-128-2threads"), "{workloads:?}");
            let pair = rows
                .iter()
                .find(|r| r["variant"] == "pfnlab" && r["params"]["workload"] == "split-merge-pair")
                .unwrap();
            positive(&pair["splits_per_pair"].clone(), "splits_per_pair");
        }
        "frag" => {
            // The buddy of three eras, 6.18's with vm.defrag_mode too, and
            // LLFree, each with three trials' series: after the free and
            // after each of the 4 iterations.
            assert_eq!(rows.len(), 5);
            for r in &rows {
                let series = r["series"].as_array().unwrap();
                assert_eq!(series.len(), 3, "{}", r["variant"]);
                for trial in series {
                    let samples = trial.as_array().unwrap();
                    assert_eq!(samples.len(), 5);
                    for s in samples {
                        positive(&s["free_pages"], "free_pages");
                        let share = s["free_huge_share"].as_f64().unwrap();
                        assert!((0.0..=1.0).contains(&share), "{s}");
                    }
                }
                let end = &r["end_free_huge_percent"];
                assert!(end["lo"].as_f64() <= end["median"].as_f64(), "{end}");
                assert!(r["filled"][0].as_u64().unwrap() > 0, "{r}");
            }
            // Only 6.18 groups by mobility: its fallbacks are counted by
            // kind; LLFree has free lists of no kind.
            let last = |v: &str| {
                let r = rows.iter().find(|r| r["variant"] == v).unwrap();
                r["series"][0].as_array().unwrap().last().unwrap().clone()
            };
            assert!(last("llfree")["fallbacks"].is_null());
            assert!(last("llfree")["free_blocks"].is_null());
            let f = &last("buddy-6.18")["fallbacks"];
            assert!(f["whole_block"].as_u64().unwrap() > 0, "{f}");
            let f = &last("buddy-6.18-defrag")["fallbacks"];
            assert!(f["whole_block"].as_u64().unwrap() > 0, "{f}");
            assert!(text.contains("buddy 6.18 defrag_mode"), "{text}");
            assert!(text.contains("published (LLFree paper"), "{text}");
            // Every allocator prices the huge frames its end state could
            // give; only a buddy of an era with compaction runs it.
            let recovery = |v: &str| {
                let r = rows.iter().find(|r| r["variant"] == v).unwrap();
                r["recovery"].clone()
            };
            for r in &rows {
                let rc = &r["recovery"];
                assert!(rc["wanted"].as_u64().unwrap() >= 1, "{rc}");
                assert!(rc["frames_to_move_all"]["median"].is_number(), "{rc}");
                assert_eq!(r["recoveries"].as_array().unwrap().len(), 3, "{rc}");
            }
            assert!(recovery("llfree")["compaction"].is_null());
            assert!(recovery("buddy-2.6.23")["compaction"].is_null());
            let new = recovery("buddy-6.18");
            let got = new["compaction"]["recovered"]["median"].as_f64();
            assert_eq!(got, new["wanted"].as_f64(), "{new}");
            assert!(text.contains("frames for compaction to move"), "{text}");
            // The recorded trace, replayed once by every allocator: sampled
            // before its first event, every 3000 events and after its
            // last; LLFree on as many frames as the buddy managed.
            let boot = rows[0]["replays"][0]["series"][0]["free_pages"].as_u64();
            for r in &rows {
                let replay = &r["replays"][0];
                let events = replay["events"].as_u64().unwrap();
                let ops: Vec<u64> = replay["series"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s["ops"].as_u64().unwrap())
                    .collect();
                let mut want: Vec<u64> = (0..=events).step_by(3000).collect();
                if events % 3000 != 0 {
                    want.push(events);
                }
                assert_eq!(ops, want, "{}", r["variant"]);
                assert!(replay["allocs"].as_u64().unwrap() > 0, "{replay}");
            }
            let llfree = rows.iter().find(|r| r["variant"] == "llfree").unwrap();
            let frames = llfree["replays"][0]["series"][0]["free_pages"].as_u64();
            assert_eq!(frames, boot);
            assert!(text.contains("replay of "), "{text}");
        }
        "scale" => check_scale(&rows, &text),
        "hole-density" => {
            let fractions: std::collections::BTreeSet<String> = rows
                .iter()
                .map(|r| r["params"]["hole_fraction"].to_string())
                .collect();
            assert_eq!(fractions.len(), 6, "{fractions:?}");
        }
        "pfn-valid" => {
            assert!(
                rows.iter()
                    .any(|r| r["variant"] == "kernel-fixup-faulting-write"),
                "the kernel's fixup beside the probe"
            );
            for w in [
                "page_test+2.6.20",
                "page_test+2.6.20+clear_page",
                "page_test-6.18",
            ] {
                assert!(rows.iter().any(|r| r["variant"] == w), "{w}");
            }
            let seeded = rows
                .iter()
                .find(|r| r["ratio_to_seed"].is_number())
                .expect("the seed's figures beside pfnlab's");
            assert_eq!(
                seeded["seed"]["pages_per_second"]["sparse-extreme"],
                1_042_187.0
            );
            positive(&seeded["ratio_to_seed"], "ratio_to_seed");
        }
        "cpuset" => {
            let walk = |v: &str| rows.iter().find(|r| r["variant"] == v).unwrap();
            assert_eq!(rows.len(), 5);
            let old = walk("2.6.18");
            // A share of two timings: a quick run may time the table walk
            // no cheaper than 2.6.18's, so only its range is certain; the
            // mutex counts below show what the check costs.
            let share = old["check_share"].as_f64().expect("check_share");
            assert!((0.0..1.0).contains(&share), "check_share = {share}");
            positive(&old["ratio_to_seed"], "ratio_to_seed");
            assert_eq!(old["seed"]["check_ticks"], 10_599.0);
            // The second pass takes callback_mutex for each zone
            // outside the cpuset before the first allowed one; the
            // table variant asks the same questions without it; today's
            // nodemask never asks about a zone outside the cpuset.
            assert!(old["mutex_per_alloc"].as_f64().unwrap() >= 1.0, "{old}");
            assert_eq!(walk("2.6.18-table")["mutex_per_alloc"], 0.0);
            assert_eq!(walk("6.18-nodemask")["mutex_per_alloc"], 0.0);
            assert_eq!(walk("unrestricted")["cpuset_checks_per_alloc"], 0.0);
            positive(&walk("2.6.19-zlc")["zones_skipped_per_alloc"], "zlc skips");
            // The same walks with the job's tasks faulting at once.
            for r in &rows {
                positive(&r["tasks_ns_per_page"], "tasks_ns_per_page");
                positive(&r["contention"], "contention");
            }
        }
        "breakdown" => {
            // 6.18 has alloc_pages_nolock: its pair is the one row more.
            assert_eq!(
                rows.len(),
                2 * 6 + 1,
                "two paths, six steps, the nolock pair"
            );
            let nolock = rows.iter().find(|r| r["variant"] == "nolock").unwrap();
            assert_eq!(nolock["params"]["mechanisms"]["entry"], true, "{nolock}");
            for r in &rows {
                let share = r["model_share"].as_f64().unwrap();
                assert!((0.0..=1.0).contains(&share), "{r}");
                let ops = &r["model_ops_per_pair"];
                // Every free looks its pfn up (pfnlab's API takes pfns).
                assert!(ops["pfn_to_page"].as_f64().unwrap() >= 1.0, "{r}");
            }
            let pageblock = |v: &str| {
                rows.iter().find(|r| r["variant"] == v).unwrap()["model_ops_per_pair"]
                    ["get_pfnblock_migratetype"]
                    .as_f64()
                    .unwrap()
            };
            assert_eq!(pageblock("pcp-bookkeeping"), 0.0);
            assert_eq!(
                pageblock("pcp-pageblock lookups"),
                1.0,
                "one lookup per free"
            );
        }
        "walk" => {
            // Three walkers on the one layout, then compaction off and
            // on (whole, hinted and async THP), memmap_init's three
            // forms, reserve_bootmem's two.
            assert_eq!(rows.len(), 3 + 6 + 3 + 2);
            for r in &rows {
                positive(&r["ns_per_valid_pfn"], "ns_per_valid_pfn");
                positive(&r["params"]["timed_pfns"], "timed_pfns");
            }
            let walk = |v: &str| rows.iter().find(|r| r["variant"] == v).unwrap().clone();
            assert_eq!(
                walk("walk/for_each_valid_pfn")["params"]["valid_pfns"],
                walk("walk/per-pfn")["params"]["valid_pfns"]
            );
            // Every ratio the tables state is one of the run's
            // comparisons: the sweep's per-pfn over the kernel walk,
            // and the six reproduced before/after pairs.
            let doc: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
            let whats: Vec<&str> = doc["comparisons"]
                .as_array()
                .expect("comparisons")
                .iter()
                .map(|c| c["what"].as_str().unwrap())
                .collect();
            assert_eq!(whats.len(), 1 + 6, "{whats:?}");
            assert!(
                whats[0].ends_with("per-pfn / for_each_valid_pfn"),
                "{whats:?}"
            );
            assert!(whats.contains(&"compaction async-thp: contiguous off / on"));
            assert!(whats.contains(&"reserve_bootmem_region: per-pfn / for_each_valid_pfn"));
        }
        _ => {}
    }
}

/// `bench scale --quick`: every workload, order and thread count on
/// every allocator, the bulk rows with their free phase, and the paper's
/// figures beside pfnlab's.
fn check_scale(rows: &[Value], text: &str) {
    positive(&rows[0]["params"]["nr_pages"], "nr_pages");
    let allocators: std::collections::BTreeSet<&str> = rows
        .iter()
        .map(|r| r["variant"].as_str().unwrap())
        .collect();
    assert_eq!(
        allocators.into_iter().collect::<Vec<_>>(),
        ["buddy-pcp", "buddy-zone", "frame-alloc", "llfree"]
    );
    let cells: std::collections::BTreeSet<String> = rows
        .iter()
        .map(|r| {
            let p = &r["params"];
            format!("{} {} {}", p["workload"], p["order"], p["threads"])
        })
        .collect();
    assert_eq!(rows.len(), 4 * cells.len(), "every allocator in every cell");
    for r in rows {
        assert!(r["params"]["threads"].as_u64().unwrap() >= 1, "{r}");
        let bulk = r["params"]["workload"] == "bulk";
        assert_eq!(r["free_ns_per_op"].is_object(), bulk, "{r}");
    }
    let llfree_one = rows
        .iter()
        .find(|r| {
            r["variant"] == "llfree"
                && r["params"]["workload"] == "bulk"
                && r["params"]["order"] == 0
                && r["params"]["threads"] == 1
        })
        .expect("bulk order 0 on one thread");
    assert_eq!(llfree_one["paper"]["ns_per_op"], 82.75);
    assert!(text.contains("bulk order 0, 26 cores, buddy-pcp"), "{text}");
    assert!(text.contains("llfree / buddy-pcp"), "{text}");
}

#[test]
fn bench_scale_refuses_threads_it_cannot_pin_and_unknown_allocators() {
    assert_refused(
        &["bench", "scale", "--quick", "--threads", "1,0"],
        "a thread count must be at least 1",
    );
    assert_refused(
        &["bench", "scale", "--quick", "--threads", "100000"],
        "--threads: 100000 threads, but this process may run on",
    );
    assert_refused(
        &["bench", "scale", "--quick", "--allocators", "llfree,slab"],
        "unknown allocator `slab` (known: buddy-pcp, buddy-zone, llfree, frame-alloc)",
    );
}

fn assert_refused(args: &[&str], needle: &str) {
    let out = pfnlab(args);
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "one line for {args:?}: {err}");
    assert!(
        err.starts_with("pfnlab: ") && err.contains(needle),
        "{args:?}: {err}"
    );
}

#[test]
fn frag_recover_takes_a_count_of_huge_frames() {
    for bad in ["many", "-3", "1.5"] {
        assert_refused(
            &["bench", "frag", "--quick", &format!("--recover={bad}")],
            &format!("`{bad}` is not a count of huge frames (0 turns recovery off)"),
        );
    }
}

#[test]
fn bad_input_is_one_line_and_exit_2_with_nothing_written() {
    let s = Scratch::new("bad");
    let layout = small_layout(&s);
    assert_refused(
        &["bench", "sorting", "--quick"],
        "unknown experiment `sorting`",
    );
    assert_refused(
        &["bench", "bulk", "--model", "discontig", "--quick"],
        "unknown model `discontig`",
    );
    assert_refused(
        &["--layout", "preset:cray", "layout"],
        "unknown preset `cray`",
    );
    assert_refused(&["--frobnicate"], "--frobnicate");
    assert_refused(
        &["layout", "--page-size", "48"],
        "struct page size 48 is not a layout pfnlab has (64, 32, 16 or 8 bytes)",
    );
    assert_refused(
        &["--quick", "bench", "bulk"],
        "--quick before a command is the default comparison's",
    );
    assert_refused(
        &["bench", "lock", "--era", "3.0"],
        "unknown era `3.0` (known: 2.6.9, 2.6.23, 5.13, 5.14, 5.15, 6.1, 6.6, 6.8, 6.12, 6.18)",
    );
    assert_refused(
        &[
            "bench", "flags", "--quick", "--era", "6.18", "--model", "flat",
        ],
        "does not exist in era 6.18: the per-order buddy bitmap ended with 2.6.9",
    );
    let bad = s.path("bad.toml");
    std::fs::write(&bad, "[[range]]\nstart = 1\nend = 0\nkind = \"ram\"\n").unwrap();
    assert_refused(
        &["--layout", bad.to_str().unwrap(), "layout"],
        "range[0]: start 0x1 is not below end 0x0",
    );
    assert_refused(
        &["--layout", "/nonexistent/l.toml", "layout"],
        "cannot read layout file",
    );
    let huge = s.path("huge.toml");
    std::fs::write(
        &huge,
        "geometry = \"x86_64-la57\"\n[[range]]\nstart = 0\nend = 0x8000000000000\nkind = \"ram\"\n",
    )
    .unwrap();
    assert_refused(
        &[
            "bench",
            "bulk",
            "--quick",
            "--layout",
            huge.to_str().unwrap(),
        ],
        "memmap needs",
    );
    assert_refused(
        &[
            "bench",
            "frag",
            "--quick",
            "--host-kernel",
            "/nonexistent-dir/host.trace.zst",
        ],
        "--host-kernel: writing /nonexistent-dir/host.trace.zst",
    );
    assert_refused(&["bench", "frag", "--host-mib", "64"], "--host-kernel");
    assert_refused(
        &[
            "bench",
            "frag",
            "--quick",
            "--trace",
            "/nonexistent-dir/t.trace.zst",
        ],
        "/nonexistent-dir/t.trace.zst",
    );
    assert_refused(
        &["bench", "frag", "--quick", "--trace-sample-every", "0"],
        "--trace-sample-every",
    );
    assert_refused(
        &["bench", "frag", "--no-trace", "--trace", "t.trace.zst"],
        "--trace",
    );
    let unwritable = "/nonexistent-dir/out.json";
    assert_refused(
        &["--quick", "--layout", &layout, "--json", unwritable],
        "--json /nonexistent-dir/out.json",
    );
    assert_refused(
        &["bench", "bulk", "--quick", "--json", unwritable],
        "--json",
    );
    assert_refused(
        &["query", "--model", "flat", "--layout", &layout, "12q"],
        "bad pfn `12q`",
    );
    for signed in ["+5", "0x+1f"] {
        assert_refused(
            &["query", "--model", "flat", "--layout", &layout, signed],
            &format!("bad pfn `{signed}`"),
        );
    }
    assert!(
        std::fs::read_dir(&s.0).unwrap().all(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            !name.starts_with('.') && !name.ends_with(".json")
        }),
        "no temporary or partial JSON left behind"
    );
}

#[test]
fn query_answers_exactly_and_streams_json() {
    let s = Scratch::new("query");
    let layout = device_layout(&s);
    let out = pfnlab(&[
        "query",
        "--layout",
        &layout,
        "--model",
        "vmemmap-probe",
        "0x9f",
        "0xa0",
        "0x100000",
        "0x100600",
    ]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "0x9f valid\n0xa0 valid\n0x100000 valid\n0x100600 invalid\n"
    );
    let out = pfnlab(&[
        "query",
        "--layout",
        &layout,
        "--model",
        "vmemmap-table",
        "--json",
        "0x100600",
    ]);
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "{\"pfn\": 1050112, \"valid\": false}\n"
    );
    let out = pfnlab(&["query", "--layout", &layout, "--model", "sparse", "0x100"]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(
        err,
        "pfnlab: cannot build the memory model: `sparse` cannot hold the range 0x100000000..0x100600000: device memory (ZONE_DEVICE) needs SPARSEMEM_VMEMMAP; models that can: vmemmap-table, vmemmap-probe, vmemmap-uffd, vmemmap-uffd-sigbus\n"
    );
}

/// A vmemmap reservation larger than the address space the process may map
/// is refused with one line and exit 2, never an abort: run under
/// `ulimit -v` (about 3.8 GiB) in a child shell, the 1 TiB reservation for
/// a 46-bit physical space cannot be made.
#[test]
fn a_vmemmap_reservation_over_the_address_space_limit_is_refused() {
    let out = Command::new("sh")
        .args([
            "-c",
            "ulimit -v 4000000 && exec \"$0\" \"$@\"",
            env!("CARGO_BIN_EXE_pfnlab"),
            "query",
            "--model",
            "vmemmap-table",
            "--layout",
            "preset:x86-pci-hole",
            "0x100",
        ])
        .output()
        .expect("run pfnlab under ulimit");
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("pfnlab: ") && err.contains("cannot reserve 1024 GiB of address space"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "no answer was printed");
}

fn trace_data(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn replay_prints_every_model_and_writes_json() {
    let s = Scratch::new("replay");
    let json = s.path("replay.json");
    let text = trace_data("ls-gzip.trace.txt");
    let layout = s.path("pci-hole-4g.toml");
    std::fs::write(&layout, crate::trace::replay_layout().to_toml()).unwrap();
    let layout = layout.to_str().unwrap();
    let out = pfnlab(&[
        "replay",
        &text,
        "--layout",
        layout,
        "--model",
        "flat,vmemmap-probe",
        "--verify",
        "--trials",
        "3",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for needle in [
        "flat",
        "vmemmap-probe",
        "Mevents/s",
        "events: ",
        "paired",
        "over 3 interleaved passes per model",
    ] {
        assert!(stdout.contains(needle), "{needle}: {stdout}");
    }
    let rows = check_schema(&json, "replay");
    assert_eq!(rows.len(), 2);
    for r in &rows {
        assert_eq!(r["variant"], "replay");
        positive(&r["events_per_second"], "events_per_second");
        assert_eq!(r["allocator"]["conserved"], true, "{r}");
        assert_eq!(r["verify_failures"], 0, "{r}");
        // No --end-state: nothing compared.
        assert!(r["end_state"].is_null(), "{r}");
        // Three timed passes: three trials, their median the row's.
        let passes = r["passes"].as_array().expect("passes");
        assert_eq!(passes.len(), 3, "{r}");
        assert_eq!(
            r["ns_per_op"]["trials"].as_array().map(Vec::len),
            Some(3),
            "{r}"
        );
    }
    // The slower model against the faster, paired over the passes.
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let comparisons = report["comparisons"].as_array().expect("comparisons");
    assert_eq!(comparisons.len(), 1, "{report}");
    assert_eq!(comparisons[0]["method"], "paired", "{report}");
    assert!(comparisons[0]["lo"].as_f64() <= comparisons[0]["hi"].as_f64());
    // One pass ranks nothing, and no pass at all is refused.
    let one = pfnlab(&[
        "replay",
        &text,
        "--layout",
        layout,
        "--model",
        "flat,sparse",
        "--trials",
        "1",
    ]);
    let one_out = String::from_utf8_lossy(&one.stdout);
    assert!(
        one.status.success() && one_out.contains("no model is ranked"),
        "{one_out}"
    );
    assert_refused(&["replay", &text, "--trials", "0"], "--trials");
    // A missing trace and a text trace asked for its recorded layout.
    assert_refused(
        &["replay", "/nonexistent/trace"],
        "cannot open /nonexistent/trace",
    );
    assert_refused(
        &["replay", &text, "--layout", "recorded"],
        "carries no layout",
    );
    let bad = s.path("bad.txt");
    std::fs::write(&bad, "a-1 [000] ..... 1.0: mm_page_free: page=1 pfn=0x10\n").unwrap();
    assert_refused(&["replay", bad.to_str().unwrap()], "line 1: no order");
}

#[test]
fn trace_record_leaves_nothing_behind() {
    let s = Scratch::new("record");
    let out_path = s.path("r.trace.zst");
    let child = Command::new(env!("CARGO_BIN_EXE_pfnlab"))
        .args([
            "trace",
            "record",
            "--snapshot",
            "--out",
            out_path.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "head -c 4M /dev/urandom | gzip -1 > /dev/null",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run pfnlab");
    // The recording's instance is named after its process; other tests of
    // this binary may be recording at the same time under their own names.
    let instance = format!("/sys/kernel/tracing/instances/pfnlab-{}", child.id());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let root = nix_is_root();
    if !root {
        assert_eq!(out.status.code(), Some(2));
        assert!(err.contains("needs root"), "{err}");
        assert!(!out_path.exists());
        return;
    }
    if err.contains("no tracefs") || err.contains("trace event") {
        // A kernel without tracefs or the kmem events: refused, one line.
        eprintln!("skipped: {err}");
        assert_eq!(out.status.code(), Some(2));
        return;
    }
    assert!(out.status.success(), "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("lost events per CPU"), "{stdout}");
    assert!(
        !Path::new(&instance).exists(),
        "the tracing instance {instance} was removed"
    );
    let replayed = pfnlab(&[
        "replay",
        out_path.to_str().unwrap(),
        "--model",
        "vmemmap-table",
        "--layout",
        "preset:x86-pci-hole",
        "--trials",
        "1",
    ]);
    assert!(
        replayed.status.success(),
        "{}",
        String::from_utf8_lossy(&replayed.stderr)
    );
    // The machine's snapshots from both ends are in it: a replay starts
    // from the first, on the layout recorded with it, and ends beside the
    // second.
    let states = pfnlab(&[
        "replay",
        out_path.to_str().unwrap(),
        "--model",
        "flat",
        "--trials",
        "1",
        "--start-state",
        "recorded",
        "--end-state",
        "recorded",
    ]);
    let text = String::from_utf8_lossy(&states.stdout);
    assert!(
        states.status.success(),
        "{}",
        String::from_utf8_lossy(&states.stderr)
    );
    assert!(text.contains("end state against recorded: "), "{text}");
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|u| u.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

#[test]
fn ctrl_c_ends_a_recording_and_removes_its_instance() {
    if !nix_is_root() || !Path::new("/sys/kernel/tracing").is_dir() {
        eprintln!("skipped: needs root and tracefs");
        return;
    }
    let s = Scratch::new("ctrlc");
    let out_path = s.path("c.trace");
    let child = Command::new(env!("CARGO_BIN_EXE_pfnlab"))
        .args([
            "trace",
            "record",
            "--seconds",
            "60",
            "--out",
            out_path.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the instance exists, then interrupt.
    let instance = format!("/sys/kernel/tracing/instances/pfnlab-{}", child.id());
    let start = std::time::Instant::now();
    while !Path::new(&instance).exists() && start.elapsed().as_secs() < 20 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    assert!(
        start.elapsed().as_secs() < 30,
        "Ctrl-C ended the 60 s recording early"
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!Path::new(&instance).exists(), "the instance was removed");
    assert!(out_path.exists(), "what was recorded is written");
}

#[test]
fn trials_and_min_time_reach_every_measurement_and_the_report() {
    let s = Scratch::new("trials");
    let layout = small_layout(&s);
    let json = s.path("bulk.json");
    let out = pfnlab(&[
        "bench",
        "bulk",
        "--quick",
        "--trials",
        "4",
        "--min-time",
        "0.001",
        "--layout",
        &layout,
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let t = &v["trials"];
    assert_eq!(
        (t["asked"].as_u64(), t["max_trials"].as_u64()),
        (Some(4), Some(4))
    );
    assert_eq!(t["min_time_s"].as_f64(), Some(0.001));
    for r in v["results"].as_array().unwrap() {
        assert_eq!(r["ns_per_op"]["trials"].as_array().unwrap().len(), 4, "{r}");
    }
    let c = v["comparisons"].as_array().unwrap();
    assert!(
        c.iter().any(|c| c["what"] == "list / array at 128"),
        "{c:?}"
    );
    // The default comparison's trial options go before no command.
    let out = pfnlab(&["--trials", "5", "bench", "bulk", "--quick"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--trials"));
}

/// Every `--layout` (and `--with-layout`) help lists every form the option
/// takes: `host`, each preset by name, `snapshot:FILE` and a TOML file,
/// and `recorded` where a replay takes it; `--thp` says it takes a boolean.
#[test]
fn every_layout_help_lists_every_form() {
    let commands: [&[&str]; 8] = [
        &[],
        &["layout"],
        &["query"],
        &["zoneinfo"],
        &["bench", "bulk"],
        &["replay"],
        &["trace", "convert"],
        &["bench", "walk"],
    ];
    for command in commands {
        let mut args = command.to_vec();
        args.push("--help");
        let out = pfnlab(&args);
        assert!(out.status.success(), "{args:?}");
        let help = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let option = help
            .split(" --")
            .find(|o| o.starts_with("layout ") || o.starts_with("with-layout "))
            .unwrap_or_else(|| panic!("{args:?}: no --layout in {help}"));
        for form in ["`host`", "`snapshot:FILE`", "TOML file"]
            .into_iter()
            .chain(sparsemem::layout::PRESET_NAMES)
        {
            assert!(
                option.contains(form),
                "{args:?}: --layout omits {form}: {option}"
            );
        }
        if command == ["replay"] {
            assert!(option.contains("`recorded`"), "{option}");
        }
    }
    let help = String::from_utf8_lossy(&pfnlab(&["zoneinfo", "--help"]).stdout).to_string();
    assert!(help.contains("--thp <true|false>"), "{help}");
}

/// Every command that takes `--era` lists every era in its help.
#[test]
fn every_era_help_lists_every_era() {
    for command in [
        &[][..],
        &["zoneinfo"],
        &["buddyinfo"],
        &["pagetypeinfo"],
        &["replay"],
        &["bench", "lock"],
    ] {
        let out = pfnlab(&[command, &["--help"]].concat());
        assert!(out.status.success(), "{command:?}");
        let help = String::from_utf8(out.stdout).unwrap();
        let line = help
            .split("--era")
            .nth(1)
            .unwrap_or_else(|| panic!("{command:?}: no --era"));
        let text: String = line
            .split("\n  -")
            .next()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let words: Vec<&str> = text
            .split(|c: char| c.is_whitespace() || ",:()".contains(c))
            .collect();
        for era in buddy::Era::ALL {
            assert!(
                words.contains(&era.name()),
                "{command:?} lacks {era}: {text}"
            );
        }
    }
}
