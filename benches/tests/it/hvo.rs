//! `pfnlab bench hvo --quick`: every mode's pool and toucher rows, the
//! three `compound_head` rows, the hot path at each optimised share, and
//! the memmap each HVO mode leaves resident (read from the kernel: the
//! memfd's blocks) below HVO off's by exactly the folios times the bytes
//! the geometry says HVO frees per folio. `pfnlab layout --hugetlb`: the
//! same drop per model, n/a where HVO does not apply, and bad specs
//! refused with one line and exit status 2.

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
    // Grow, shrink and toucher per mode at 2 MiB (and at 1 GiB where the
    // host layout had a free contiguous range), three compound_head rows,
    // two hot paths at five shares.
    // (The toucher's rows are left out for a mode whose windows it was
    // never scheduled in: the text says so instead.)
    let gigantic = !text.contains("gigantic folios: left out");
    let sizes = 1 + usize::from(gigantic);
    let touchers: Vec<&Value> = rows.iter().filter(|r| r["variant"] == "toucher").collect();
    assert_eq!(rows.len() - touchers.len(), 5 * 2 * sizes + 3 + 5 * 2);
    let toucher_lines = text
        .lines()
        .skip_while(|l| !l.starts_with("the toucher on the other CPU"))
        .skip(1)
        .take(5)
        .filter(|l| l.contains(" ns") || l.contains("not scheduled") || l.contains('('))
        .count();
    assert_eq!(toucher_lines, 5, "{text}");
    for t in touchers {
        assert!(t["ns_per_op"]["median"].as_f64().unwrap() > 0.0, "{t}");
        assert!(t["toucher_pinned"].is_boolean(), "{t}");
    }
    let hot: Vec<&Value> = rows
        .iter()
        .filter(|r| r["variant"] == "hot-read-flags")
        .collect();
    let percents: Vec<u64> = hot
        .iter()
        .map(|r| r["params"]["optimised_percent"].as_u64().unwrap())
        .collect();
    assert_eq!(percents, [0, 25, 50, 75, 100]);
    let shares: Vec<f64> = hot
        .iter()
        .map(|r| r["memory_share"].as_f64().unwrap())
        .collect();
    assert!(
        shares[0] == 0.0 && shares.windows(2).all(|w| w[0] < w[1]),
        "{shares:?}"
    );
    let grow = |mode: &str| {
        rows.iter()
            .find(|r| {
                r["variant"] == "grow"
                    && r["params"]["mode"] == mode
                    && r["params"]["folio_kib"] == 2048
            })
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

fn pfnlab(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pfnlab"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn layout_hugetlb_reports_the_resident_drop_per_model_and_refuses_bad_specs() {
    let dir = std::env::temp_dir().join(format!("pfnlab-hvo-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let layout = dir.join("two-gib.toml");
    std::fs::write(
        &layout,
        "[[range]]\nstart = 0\nend = 0x80000000\nkind = \"ram\"\n",
    )
    .unwrap();
    let (layout, json) = (layout.to_str().unwrap(), dir.join("layout.json"));
    let out = pfnlab(&[
        "layout",
        "--layout",
        layout,
        "--hugetlb",
        "2M:16,1G:1",
        "--json",
        json.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("hugetlb pools, optimised"), "{text}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let pools = v["hugetlb"]["pools"].as_array().unwrap();
    let freed = |bytes: u64| {
        pools.iter().find(|p| p["folio_bytes"] == bytes).unwrap()["hvo_freed_bytes"]
            .as_u64()
            .unwrap()
    };
    assert_eq!((freed(2 << 20), freed(1 << 30)), (28 << 10, 16380 << 10));
    let expected = 16 * (28 << 10) + (16380 << 10);
    for row in v["models"].as_array().unwrap() {
        let hvo = &row["hvo"];
        match row["model"].as_str().unwrap() {
            "vmemmap-table" | "vmemmap-probe" => {
                assert_eq!(hvo["freed"], expected, "{row}");
                let (before, after) = (hvo["resident"].as_u64(), hvo["resident_with_hvo"].as_u64());
                assert_eq!(before.unwrap() - after.unwrap(), expected, "{row}");
            }
            "flat" | "sparse" | "sparse-extreme" => {
                let why = hvo["not_applicable"].as_str().unwrap();
                assert!(why.contains("needs SPARSEMEM_VMEMMAP"), "{why}");
            }
            _ => assert!(hvo["not_applicable"].is_string(), "{row}"),
        }
    }
    assert!(
        text.contains("flat") && text.contains("n/a: HugeTLB vmemmap"),
        "{text}"
    );
    for (spec, why) in [
        ("2M:x", "not a whole number"),
        ("3M:1", "not a power of two"),
        ("4M:1", "no hugetlb size of 4.0 MiB"),
        ("2M:1025", "more hugetlb folios than fit"),
        ("1G:2", "more hugetlb folios than fit"),
    ] {
        let out = pfnlab(&["layout", "--layout", layout, "--hugetlb", spec]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{spec}: {err}");
        assert_eq!(err.lines().count(), 1, "{spec}: {err}");
        assert!(err.contains(why), "{spec}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
