//! `pfnlab bench hvo --quick`: every mode's pool rows and the three
//! `compound_head` rows, and the memmap each HVO mode leaves resident
//! (read from the kernel: the memfd's blocks) below HVO off's by exactly
//! the folios times the bytes the geometry says HVO frees per folio.

use std::process::Command;

use serde_json::Value;

#[test]
fn bench_hvo_quick_reports_every_mode_and_the_resident_drop() {
    let dir = std::env::temp_dir().join(format!("pfnlab-hvo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("hvo.json");
    let out = Command::new(env!("CARGO_BIN_EXE_pfnlab"))
        .args(["bench", "hvo", "--quick", "--json", json.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("HVO frees 28 KiB of vmemmap per folio"),
        "{text}"
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(v["experiment"], "hvo");
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 5 * 2 + 3);
    let grow = |mode: &str| {
        rows.iter()
            .find(|r| r["variant"] == "grow" && r["params"]["mode"] == mode)
            .unwrap_or_else(|| panic!("no grow row for {mode}"))
    };
    let off = grow("off")["memmap_resident_bytes"].as_u64().unwrap();
    for mode in [
        "fake-head",
        "fake-head-batched",
        "shared-tail",
        "shared-tail-batched",
    ] {
        let r = grow(mode);
        let folios = r["params"]["folios"].as_u64().unwrap();
        assert_eq!(r["hvo_freed_bytes"], 28 << 10, "{r}");
        let resident = r["memmap_resident_bytes"].as_u64().unwrap();
        assert_eq!(off - resident, folios * (28 << 10), "{mode}");
        assert!(r["ratio_to_off"].as_f64().unwrap() > 0.0);
    }
    assert!(grow("fake-head")["published_ratio"].as_f64().unwrap() > 7.0);
    for variant in [
        "compound-head-plain",
        "compound-head-fake-head",
        "compound-head-mask",
    ] {
        assert!(rows.iter().any(|r| r["variant"] == variant), "{variant}");
    }
}
