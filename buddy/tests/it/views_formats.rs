//! Zoneinfo in each release's format: the model writes its era's, the
//! reader takes any from 5.14 (`tests/data/zoneinfo-formats/`), and a
//! file of no release pfnlab reads is refused, naming what it looks like.

use std::path::Path;

use buddy::views::{
    SizingInputs, Zoneinfo, ZoneinfoError, ZoneinfoFormat, compare, kernel_zone_sizes,
    parse_zoneinfo,
};
use buddy::{Era, Kernel, Sysctls};

fn data(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

/// 6.1's zoneinfo and the 6.18 machine it was laid out from.
fn v6_1() -> String {
    data("zoneinfo-formats/6.1/zoneinfo")
}

fn v6_18() -> String {
    data("zoneinfo/host-6.18-2cpu/zoneinfo")
}

/// The fixture machine's inputs (2 CPUs, the host's sysctls) in `era`.
fn inputs(era: Era) -> SizingInputs {
    let dir = "zoneinfo/host-6.18-2cpu";
    let number = |f: &str| -> u64 { data(&format!("{dir}/{f}")).trim().parse().unwrap() };
    let ratio: Vec<u64> = data(&format!("{dir}/lowmem_reserve_ratio"))
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    SizingInputs {
        sysctls: Sysctls {
            min_free_kbytes: Some(number("min_free_kbytes")),
            watermark_scale_factor: number("watermark_scale_factor"),
            lowmem_reserve_ratio: ratio.try_into().unwrap(),
            thp: true,
        },
        percpu_pagelist_high_fraction: 0,
        cpus_per_node: vec![2],
        online_cpus: 2,
        page_shift: 12,
        pageblock_order: 9,
        era,
        freed_after_sizing: Vec::new(),
    }
}

/// A 6.1 zoneinfo (no `promo`; pagesets of `count`, `high`, `batch`)
/// reads back, renders to the same bytes, and every field the kernel
/// computes — `high` among them, the zone's in 6.1 — is what 6.1's
/// formulas give for its managed pages.
#[test]
fn a_6_1_zoneinfo_is_read_and_its_computed_fields_match() {
    let text = v6_1();
    let info = parse_zoneinfo(&text).unwrap();
    assert_eq!(info.format, ZoneinfoFormat::V5_16);
    assert_eq!(info.to_string(), text);
    let sizes = kernel_zone_sizes(&info.managed_zones(), &inputs(Era::V6_1));
    let mut pagesets = 0;
    for (zone, size) in info.zones.iter().zip(&sizes) {
        // 6.1 has `WMARK_PROMO` (5.18) but does not print it.
        let printed = buddy::Watermarks {
            promo: 0,
            ..size.watermarks
        };
        assert_eq!(zone.watermarks, printed, "{}", zone.zone);
        for p in zone.populated.iter().flat_map(|p| &p.pagesets) {
            assert_eq!((p.high_min, p.high_max), (None, None));
            assert_eq!(
                p.high,
                u64::from(size.high_min),
                "{} cpu {}",
                zone.zone,
                p.cpu
            );
            assert_eq!(p.batch, u64::from(size.batch));
            pagesets += 1;
        }
    }
    assert!(pagesets > 0, "the file has pagesets");
}

/// Held against the 6.18 file of the same machine, the 6.1 file differs
/// only in live state (each CPU's `high`) and in the empty Movable zone's
/// watermarks, which 6.1 leaves at 0 (named as inputs: the era given is
/// 6.18); `promo`, `high_min` and `high_max`, which 6.1 does not print,
/// are not compared.
#[test]
fn a_6_1_zoneinfo_is_compared_on_the_fields_it_prints() {
    use buddy::views::Cause;
    let old = parse_zoneinfo(&v6_1()).unwrap();
    let new = parse_zoneinfo(&v6_18()).unwrap();
    assert!(compare(&old, &old, &inputs(Era::V6_1)).is_empty());
    let diffs = compare(&new, &old, &inputs(Era::V6_18));
    let (movable, live): (Vec<_>, Vec<_>) = diffs.iter().partition(|d| d.zone == "Movable");
    assert!(!live.is_empty(), "6.18's live high is not 6.1's");
    for d in live {
        assert!(d.field.ends_with(" high"), "{d}");
        assert_eq!(d.cause, Some(Cause::LiveState), "{d}");
    }
    let fields: Vec<_> = movable
        .iter()
        .map(|d| (d.field.as_str(), d.ours, d.theirs))
        .collect();
    assert_eq!(fields, [("min", 32, 0), ("low", 32, 0), ("high", 32, 0)]);
    assert!(movable.iter().all(|d| d.cause == Some(Cause::Inputs)));
    // Before 6.7 `high` is computed: one off is named as such.
    let mut off = old.clone();
    let p = off
        .zones
        .iter_mut()
        .find_map(|z| z.populated.as_mut())
        .unwrap();
    p.pagesets[0].high += 1;
    let diffs = compare(&off, &old, &inputs(Era::V6_1));
    assert_eq!(diffs.len(), 1, "{diffs:?}");
    assert_eq!(diffs[0].field, "cpu 0 high");
    assert_eq!(diffs[0].cause, Some(buddy::views::Cause::FollowsManaged));
}

/// `text` without its lines that start with `label`.
fn without(text: &str, label: &str) -> String {
    text.lines()
        .filter(|l| !l.starts_with(label))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// 5.14 and 5.15 print no `boost` line (5.16 added it): such a file
/// reads as theirs, with every zone's boost 0, and writes back the same.
#[test]
fn a_5_14_zoneinfo_has_no_boost_line() {
    let text = without(&v6_1(), "        boost");
    let info = parse_zoneinfo(&text).unwrap();
    assert_eq!(info.format, ZoneinfoFormat::V5_14);
    assert!(info.zones.iter().all(|z| z.boost == 0));
    assert_eq!(info.to_string(), text);
    let with = parse_zoneinfo(&v6_1()).unwrap();
    assert_eq!(with.format, ZoneinfoFormat::V5_16);
    let watermarks = |i: &Zoneinfo| i.zones.iter().map(|z| z.watermarks).collect::<Vec<_>>();
    assert_eq!(watermarks(&info), watermarks(&with));
}

/// A file whose zones lack a line every release from 5.14 prints, or
/// that mixes 6.13's pagesets with zones without 6.12's `promo`, or
/// 6.12's `promo` without 5.16's `boost`, is refused as unsupported,
/// naming what it looks like.
#[test]
fn a_zoneinfo_of_no_supported_release_is_refused() {
    let err = parse_zoneinfo(&without(&v6_1(), "        managed")).unwrap_err();
    assert!(
        matches!(err, ZoneinfoError::Unsupported { line: 54, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("older than 5.14"), "{err}");
    assert!(err.to_string().contains("no `managed` line"), "{err}");
    let err = parse_zoneinfo(&without(&v6_18(), "        boost")).unwrap_err();
    assert!(err.to_string().contains("without `boost`"), "{err}");
    let no_promo = without(&v6_18(), "        promo");
    let err = parse_zoneinfo(&no_promo).unwrap_err();
    assert!(matches!(err, ZoneinfoError::Unsupported { .. }), "{err}");
    assert!(err.to_string().contains("no release"), "{err}");
    // A later zone in another format than the first is out of order.
    let first_promo = v6_18().find("        promo").unwrap();
    let mut mixed = v6_18();
    let end = first_promo + mixed[first_promo..].find('\n').unwrap() + 1;
    mixed.replace_range(first_promo..end, "");
    assert!(parse_zoneinfo(&mixed).is_err());
}

/// The model writes each era's format: `promo` from 6.12, `high_min` and
/// `high_max` from 6.13 (so 6.18), every CPU's `high` the zone's before
/// 6.7 and 0 from 6.7 until the CPU uses the zone; and what it writes
/// reads back to the same bytes.
#[test]
fn the_model_writes_its_eras_format() {
    use sparsemem::{Geometry, Layout, MemRange, RangeKind, SparseExtreme};
    let layout = Layout::new(
        Geometry::X86_64,
        vec![MemRange::new(1 << 20, 64 << 20, RangeKind::Ram, 0)],
        "formats",
    )
    .unwrap();
    for era in Era::ALL {
        let options = buddy::Options {
            cpus: Some(2),
            ..buddy::Options::for_era(era)
        };
        let model = SparseExtreme::new(&layout).unwrap();
        let alloc = buddy::Allocator::<_, Kernel>::new(model, &layout, options).unwrap();
        let info = alloc.zoneinfo();
        let format = ZoneinfoFormat::of_era(era);
        assert_eq!(info.format, format, "{era}");
        let text = info.to_string();
        assert_eq!(text.contains("promo"), era >= Era::V6_12, "{era}");
        assert_eq!(text.contains("high_min"), era >= Era::V6_18, "{era}");
        let back = parse_zoneinfo(&text).unwrap();
        assert_eq!(back.to_string(), text, "{era}");
        let zone = alloc.zone(buddy::ZoneId::new(0)).unwrap();
        let high = info
            .zones
            .iter()
            .find_map(|z| z.populated.as_ref())
            .map(|p| p.pagesets[1].high)
            .unwrap();
        let want = if era.pcp_high_tuning() {
            0
        } else {
            u64::from(zone.high())
        };
        assert_eq!(high, want, "{era}: an idle CPU's high");
    }
}
