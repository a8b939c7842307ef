//! `pfnlab bench memdesc` and `bench breakdown --page-size` end to end, in
//! quick mode on a small layout and a short sweep: a row for every size
//! and model with its interval, the allocator's rows only where it runs,
//! and refusals as one line and exit 2.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn pfnlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pfnlab"))
        .args(args)
        .output()
        .expect("run pfnlab")
}

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("pfnlab-memdesc-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
    fn file(&self, name: &str, text: &str) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_owned()
    }
    fn path(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// 1 GiB of RAM above 1 MiB: every model holds it, and runs stay short.
const SMALL: &str = r#"
[[range]]
start = 0x100000
end = 0x40000000
kind = "ram"
"#;

/// A quarter of [`SMALL`], for the runs that build an allocator per row
/// (or per step and path) at each size.
const QUARTER: &str = r#"
[[range]]
start = 0x100000
end = 0x10000000
kind = "ram"
"#;

/// [`SMALL`] plus device memory, which FLATMEM cannot hold.
const DEVICE: &str = r#"
[[range]]
start = 0x100000
end = 0x40000000
kind = "ram"
[[range]]
start = 0x100000000
end = 0x100600000
kind = "device"
"#;

const MODELS: [&str; 5] = [
    "flat",
    "sparse",
    "sparse-extreme",
    "vmemmap-table",
    "vmemmap-probe",
];
const SIZES: [u64; 4] = [64, 32, 16, 8];

/// A file of the suite's data, as an argument.
fn data(name: &str) -> String {
    format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn run_json(args: &[&str], json: &str) -> Value {
    let out = pfnlab(args);
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{args:?}: {stderr}\n{stdout}");
    serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap()
}

fn interval_ok(v: &Value, what: &str) {
    let (lo, med, hi) = (v["lo"].as_f64(), v["median"].as_f64(), v["hi"].as_f64());
    let (lo, med, hi) = (lo.unwrap(), med.unwrap(), hi.unwrap());
    assert!(lo > 0.0 && lo <= med && med <= hi, "{what}: {v}");
}

#[test]
fn memdesc_quick_has_every_size_and_model_with_intervals() {
    let s = Scratch::new("rows");
    // Every allocator row builds its allocators at every size on this
    // layout: the quarter layout keeps them small.
    let layout = s.file("quarter.toml", QUARTER);
    let json = s.path("memdesc.json");
    // The short text recording: the replay row's code is the same for any
    // recording, and the shipped one is replayed by the LLC test below.
    let trace = data("ls-gzip.trace.txt");
    let args = [
        "bench",
        "memdesc",
        "--quick",
        "--layout",
        &layout,
        "--max-span-mib",
        "256",
        "--trace",
        &trace,
        "--json",
        &json,
    ];
    let report = run_json(&args, &json);
    assert_eq!(report["experiment"], "memdesc");
    let rows = report["results"].as_array().unwrap();
    let of = |model: &str, size: u64, variant: &str| -> Vec<&Value> {
        rows.iter()
            .filter(|r| {
                r["model"] == model && r["params"]["page_size"] == size && r["variant"] == variant
            })
            .collect()
    };
    for model in MODELS {
        for size in SIZES {
            let valid = of(model, size, "pfn_valid");
            assert_eq!(valid.len(), 1, "{model} {size}");
            assert!(
                valid[0]["memmap_resident"].as_u64().unwrap() > 0,
                "{model} {size}"
            );
            interval_ok(&valid[0]["ns_per_op_interval"], "pfn_valid");
            let sweep = of(model, size, "pfn_to_page");
            // From the span that fits this machine's L2 up to --max-span-mib.
            assert!(sweep.len() >= 2, "{model} {size}: {} spans", sweep.len());
            for r in &sweep {
                interval_ok(&r["ns_per_op_interval"], "pfn_to_page");
                assert_eq!(
                    r["span_memmap_bytes"].as_u64(),
                    Some(r["params"]["span_pages"].as_u64().unwrap() * size)
                );
                if size != 64 {
                    interval_ok(&r["ratio_to_64_interval"], "pfn_to_page / 64 B");
                }
            }
            // The allocator runs at every size: each of its rows once.
            for work in ["pcp_alloc_free", "split_merge", "bulk_128", "replay"] {
                let n = of(model, size, work).len();
                assert_eq!(n, 1, "{model} {size} {work}");
            }
            assert_eq!(of(model, size, "replay")[0]["trace"], "ls-gzip.trace.txt");
        }
        // Memmap halves with each size.
        let resident = |size| {
            of(model, size, "pfn_valid")[0]["memmap_reserved"]
                .as_u64()
                .unwrap()
        };
        assert!(
            resident(8) < resident(16) && resident(16) < resident(64),
            "{model}"
        );
    }
    let comparisons = report["comparisons"].as_array().unwrap();
    assert!(
        comparisons
            .iter()
            .any(|c| c["what"].as_str().unwrap().contains("8 B / 64 B"))
    );
}

/// `bench breakdown --page-size N` on one model in quick mode: the rows.
fn breakdown_at(s: &Scratch, layout: &str, size: u64) -> Vec<Value> {
    let json = s.path(&format!("breakdown-{size}.json"));
    let size = size.to_string();
    let args = [
        "bench",
        "breakdown",
        "--quick",
        "--model",
        "vmemmap-table",
        "--page-size",
        &size,
        "--layout",
        layout,
        "--json",
        &json,
    ];
    let report = run_json(&args, &json);
    report["results"].as_array().unwrap().clone()
}

/// Six steps on two paths: the model-calls rows every size has.
fn assert_model_call_rows(rows: &[Value], size: u64) {
    let calls: Vec<&Value> = rows
        .iter()
        .filter(|r| !r["variant"].as_str().unwrap().ends_with("-pair"))
        .collect();
    assert_eq!(calls.len(), 12, "{size} B");
    for r in calls {
        assert_eq!(r["params"]["page_size"], size);
        assert!(r["model_ns_per_pair_at_64"].as_f64().unwrap() > 0.0, "{r}");
        interval_ok(&r["ratio_to_64_interval"], "model time / 64 B");
    }
}

#[test]
fn breakdown_below_64_bytes_times_the_pair_at_every_size() {
    let s = Scratch::new("breakdown");
    let layout = s.file("quarter.toml", QUARTER);
    for size in [32, 16, 8] {
        let rows = breakdown_at(&s, &layout, size);
        assert_model_call_rows(&rows, size);
        let pairs: Vec<&Value> = rows
            .iter()
            .filter(|r| r["variant"].as_str().unwrap().ends_with("-pair"))
            .collect();
        assert_eq!(pairs.len(), 12, "a pair row per step and path at {size} B");
        for r in pairs {
            assert_eq!(r["params"]["page_size"], size);
            interval_ok(&r["ns_per_op_interval"], "pair at N");
            assert!(r["pair_ns_per_op_at_64"].as_f64().unwrap() > 0.0, "{r}");
            interval_ok(&r["pair_ratio_to_64_interval"], "pair N / 64 B");
            assert_eq!(r["pair_ratio_to_64_interval"]["method"], "paired", "{r}");
            for share in ["model_share", "model_share_at_64"] {
                let v = r[share].as_f64().unwrap();
                assert!(v > 0.0 && v <= 1.0, "{share}: {r}");
            }
        }
    }
}

fn assert_refused(args: &[&str], needle: &str) {
    let out = pfnlab(args);
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "one line for {args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: {err}");
}

#[test]
fn a_refused_size_or_model_is_one_line_and_exit_2() {
    let s = Scratch::new("refused");
    let device = s.file("device.toml", DEVICE);
    let page_size = "struct page size 48 is not a layout pfnlab has";
    assert_refused(
        &["bench", "memdesc", "--quick", "--page-size", "48"],
        page_size,
    );
    assert_refused(
        &["bench", "breakdown", "--quick", "--page-size", "48"],
        page_size,
    );
    // FLATMEM cannot hold device memory, at any size: the chosen model's
    // refusal is the run's.
    let args = [
        "bench",
        "memdesc",
        "--quick",
        "--model",
        "flat",
        "--page-size",
        "8",
        "--layout",
        &device,
    ];
    assert_refused(&args, "cannot hold");
    // A recording that cannot be read is refused before anything runs.
    let bad = s.file(
        "bad.txt",
        "a-1 [000] ..... 1.0: mm_page_free: page=1 pfn=0x10\n",
    );
    for (trace, needle) in [
        ("/nonexistent/trace", "cannot open /nonexistent/trace"),
        (bad.as_str(), "line 1: no order"),
    ] {
        assert_refused(&["bench", "memdesc", "--quick", "--trace", trace], needle);
    }
}

/// A machine whose LLC is 1 GiB, with 64 MiB for the sweep's memmaps: the
/// sweep stops at the budget, says so in the table and the JSON, and says
/// that no size's memmap passed the LLC.
#[test]
fn a_large_llc_is_swept_to_the_budget_and_says_the_llc_was_not_exceeded() {
    let s = Scratch::new("big-llc");
    let layout = s.file("small.toml", SMALL);
    let json = s.path("memdesc.json");
    let args = [
        "bench",
        "memdesc",
        "--quick",
        "--model",
        "flat",
        "--layout",
        &layout,
        "--cache-sizes",
        "2M,1G",
        "--memmap-budget-mib",
        "64",
        "--json",
        &json,
    ];
    let out = pfnlab(&args);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("caches (cpu0, given: --cache-sizes): L2 2.0 MiB, LLC 1.0 GiB"),
        "{text}"
    );
    assert!(
        text.contains("sweep stops at 512 Ki pages, short of the caches' top")
            && text.contains("memmap budget of 64.0 MiB"),
        "{text}"
    );
    for size in [64, 32, 16, 8] {
        assert!(
            text.contains(&format!("{size} B never exceeds the LLC")),
            "{text}"
        );
    }
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let sweep: Vec<&Value> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["variant"] == "pfn_to_page")
        .collect();
    assert!(!sweep.is_empty());
    assert!(
        text.contains("replaying gzip-dd.trace.zst"),
        "the shipped recording by default: {text}"
    );
    for r in sweep {
        assert!(
            r["params"]["span_pages"].as_u64().unwrap() <= 512 << 10,
            "{r}"
        );
        assert_eq!(r["sweep_cap"]["budget"]["budget_bytes"], 64u64 << 20, "{r}");
        assert_eq!(r["llc_bytes"], 1u64 << 30, "{r}");
    }
}

/// A budget that cannot hold even the smallest span measures nothing:
/// one line and exit status 2, no report written.
#[test]
fn a_budget_below_the_smallest_span_measures_nothing_and_exits_2() {
    let s = Scratch::new("no-budget");
    let layout = s.file("small.toml", SMALL);
    let json = s.path("memdesc.json");
    assert_refused(
        &[
            "bench",
            "memdesc",
            "--quick",
            "--layout",
            &layout,
            "--cache-sizes",
            "2M,1G",
            "--memmap-budget-mib",
            "1",
            "--json",
            &json,
        ],
        "bench memdesc measured nothing on this machine: the smallest span, 16384 pages, needs 1.9 MiB",
    );
    assert!(!PathBuf::from(&json).exists());
    for (bad, needle) in [
        ("2M", "give L2,LLC"),
        ("2M,lots", "`lots` is not a cache size"),
        ("1G,2M", "the LLC is smaller than the L2"),
        ("0,2M", "`0` is not a cache size"),
    ] {
        assert_refused(
            &["bench", "memdesc", "--quick", "--cache-sizes", bad],
            needle,
        );
    }
}

/// 16 TiB of RAM: no model's memmap fits this machine's budget, so an
/// experiment on it measures nothing (the host kernel's fixup, timed
/// beside the models, answers nothing alone): one line, exit status 2.
#[test]
fn every_model_refused_measures_nothing_and_exits_2() {
    let s = Scratch::new("huge");
    let huge = s.file(
        "huge.toml",
        "[[range]]\nstart = 0x100000\nend = 0x100000000000\nkind = \"ram\"\n",
    );
    for experiment in ["memdesc", "pfn-valid"] {
        assert_refused(
            &["bench", experiment, "--quick", "--layout", &huge],
            &format!(
                "bench {experiment} measured nothing on this machine: cannot build the memory model: memmap needs"
            ),
        );
    }
}
