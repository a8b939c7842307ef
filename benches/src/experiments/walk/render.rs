//! `bench walk`'s tables: the sweep, models by walker, and the
//! reproductions with the published figures beside ours.

use buddy::MemmapInitForm;

use super::{Case, CompactShape, HostWalk, WalkResults, WalkRow, Walker};
use crate::models::ModelKind;
use crate::spread::{Comparison, Interval, MARKS, ratio_cell};
use crate::timing::Measurement;
use crate::units::fmt_ns;

/// The published figures beside the reproductions: `(what, before,
/// after, unit)`.
const PUBLISHED: [(&str, f64, f64, &str); 3] = [
    (
        "compaction, hugepage workload, zone->contiguous (2016)",
        899.0,
        1194.0,
        "MB/s",
    ),
    (
        "memmap_init skip, Samurai model boot (2017)",
        109.0,
        62.0,
        "s",
    ),
    (
        "memmap_init, arm64 96 GB 64K pages (2018, unmerged)",
        27_956.0,
        13_537.0,
        "us",
    ),
];

fn timed(rows: &[WalkRow], case: Case) -> Option<&Measurement> {
    rows.iter()
        .find(|r| r.variant == case)
        .map(|r| &r.measurement)
}

/// `a` over `b` as a table states it: `x1.52 [1.40, 1.61]` (`~` when it
/// tells no direction).
fn times(a: &Measurement, b: &Measurement) -> String {
    Interval::between(a, b).map_or("x n/a".into(), |i| format!("x{}", ratio_cell(&i)))
}

fn render_sweep(r: &WalkResults) -> String {
    let mut out = format!(
        "Walks over each layout's span: median ns per pfn of span | per valid pfn ({})\n{:<34} {:<15} {:>22} {:>22} {:>22}  {:>10}\n",
        crate::timing::COUNTER_UNIT,
        "layout",
        "model",
        Walker::ForEachValidPfn.name(),
        Walker::PerPfn.name(),
        Walker::BulkSkip.name(),
        "speedup"
    );
    let mut keys: Vec<(String, ModelKind)> = Vec::new();
    for row in &r.sweep {
        if !keys.contains(&(row.params.layout.clone(), row.model)) {
            keys.push((row.params.layout.clone(), row.model));
        }
    }
    for (layout, model) in keys {
        let of = |w: Walker| {
            r.sweep.iter().find(|x| {
                x.params.layout == layout && x.model == model && x.variant == Case::Walk(w)
            })
        };
        out += &format!("{layout:<34} {:<15}", model.name());
        for w in Walker::ALL {
            out += &of(w).map_or(format!(" {:>22}", "-"), |x| {
                let sliced = if x.params.timed_pfns < x.params.span_pfns {
                    "*"
                } else {
                    " "
                };
                format!(
                    " {:>22}",
                    format!(
                        "{}{sliced}| {}",
                        fmt_ns(x.measurement.ns_per_op.median),
                        fmt_ns(x.ns_per_valid_pfn)
                    )
                )
            });
        }
        let speedup = of(Walker::PerPfn)
            .zip(of(Walker::ForEachValidPfn))
            .and_then(|(p, k)| Interval::between(&p.measurement, &k.measurement).ok());
        out += &speedup.map_or(String::new(), |i| format!("  {:>22}", ratio_cell(&i)));
        out += "\n";
    }
    for (model, layout, why) in &r.refused {
        out += &format!("{layout:<34} {:<15} not built: {why}\n", model.name());
    }
    out += &format!(
        "* timed over a slice, 64 chunks spread evenly over the span (a per-pfn walk of a huge span, or one that faults per hole pfn); per pfn of the slice stands for per pfn of the span.\n\
         speedup: per-pfn over for_each_valid_pfn, per pfn of span, median [95 % interval of the interleaved trials] ({MARKS}).\n\n"
    );
    out
}

fn render_repro(r: &WalkResults) -> String {
    let rows = &r.repro;
    let Some(model) = rows.first().map(|x| x.model) else {
        return String::new();
    };
    let mut out = format!("Published changes reproduced (model {model}), median ns per pfn:\n");
    for shape in CompactShape::ALL {
        let off = timed(
            rows,
            Case::Compaction {
                contiguous: false,
                shape,
            },
        );
        let on = timed(
            rows,
            Case::Compaction {
                contiguous: true,
                shape,
            },
        );
        if let (Some(off), Some(on)) = (off, on) {
            let (what, b, a, unit) = PUBLISHED[0];
            out += &format!(
                "  compaction scanners, per {}: contiguous off {} -> on {}: {}   [{what}: {b} -> {a} {unit}, x{:.2}, whole workload]\n",
                shape.per(),
                fmt_ns(off.ns_per_op.median),
                fmt_ns(on.ns_per_op.median),
                times(off, on),
                a / b
            );
        }
    }
    let form = |f| timed(rows, Case::MemmapInit(f));
    if let (Some(p), Some(s), Some(m)) = (
        form(MemmapInitForm::PerPfn),
        form(MemmapInitForm::SkipToNextRegion),
        form(MemmapInitForm::MemblockRanges),
    ) {
        out += &format!(
            "  memmap_init over 97 % holes, per pfn of span: per-pfn {} | skip {} ({}) | memblock ranges {} ({})\n",
            fmt_ns(p.ns_per_op.median),
            fmt_ns(s.ns_per_op.median),
            times(p, s),
            fmt_ns(m.ns_per_op.median),
            times(p, m)
        );
        for (what, b, a, unit) in &PUBLISHED[1..] {
            out += &format!(
                "      [{what}: {b} -> {a} {unit}, x{:.2}, whole boot or whole memmap_init]\n",
                b / a
            );
        }
    }
    let per_pfn = timed(rows, Case::ReserveBootmem(Walker::PerPfn));
    let walk = timed(rows, Case::ReserveBootmem(Walker::ForEachValidPfn));
    if let (Some(p), Some(w)) = (per_pfn, walk) {
        out += &format!(
            "  reserve_bootmem_region over reserved (NOMAP) memory, per pfn: per-pfn {} -> for_each_valid_pfn {}: {}   [2025: no figure published]\n",
            fmt_ns(p.ns_per_op.median),
            fmt_ns(w.ns_per_op.median),
            times(p, w)
        );
    }
    out += "No migration runs in the compaction rows: the scanners' work only, as /proc/vmstat counts it.\n";
    out
}

pub(super) fn render(r: &WalkResults) -> String {
    render_sweep(r) + &render_repro(r) + &render_host(r)
}

/// The host kernel's lines, or the one line saying why they are absent.
fn render_host(r: &WalkResults) -> String {
    let rows = match &r.host {
        None => return String::new(),
        Some(Err(e)) => return format!("\nhost kernel: left out ({e})\n"),
        Some(Ok(rows)) => rows,
    };
    let mut out = String::from("\nThis host's kernel, median ns per pfn:\n");
    for row in rows {
        let (what, per) = match row.variant {
            Case::Kernel(HostWalk::CompactMemory) => (
                "echo 1 > compact_memory",
                "per pfn scanned (compact_*_scanned), migration included",
            ),
            _ => (
                "read /proc/kpageflags",
                "per pfn read: a walk's cost, not a validity check's",
            ),
        };
        out += &format!(
            "  {what:<26} {:>10}   {} pfns; {per}\n",
            fmt_ns(row.measurement.ns_per_op.median),
            row.params.timed_pfns
        );
    }
    out
}

/// The ratios the tables state, as the runner's comparisons (so their
/// intervals decide whether the run is extended, and the JSON carries
/// them): per-pfn over `for_each_valid_pfn` for each swept layout and
/// model, and each reproduced change's before over after.
pub(super) fn comparisons(r: &WalkResults) -> Vec<Comparison> {
    let mut out = Vec::new();
    for p in r
        .sweep
        .iter()
        .filter(|x| x.variant == Case::Walk(Walker::PerPfn))
    {
        let kernel = r.sweep.iter().find(|x| {
            x.params.layout == p.params.layout
                && x.model == p.model
                && x.variant == Case::Walk(Walker::ForEachValidPfn)
        });
        if let Some(k) = kernel {
            let what = format!(
                "{} {}: per-pfn / for_each_valid_pfn",
                p.params.layout, p.model
            );
            out.extend(Comparison::of(what, &p.measurement, &k.measurement));
        }
    }
    let rows = &r.repro;
    let mut pairs: Vec<(String, Case, Case)> = CompactShape::ALL
        .into_iter()
        .map(|shape| {
            (
                format!("compaction {}: contiguous off / on", shape.name()),
                Case::Compaction {
                    contiguous: false,
                    shape,
                },
                Case::Compaction {
                    contiguous: true,
                    shape,
                },
            )
        })
        .collect();
    pairs.extend([
        (
            "memmap_init: per-pfn / skip to next region".to_string(),
            Case::MemmapInit(MemmapInitForm::PerPfn),
            Case::MemmapInit(MemmapInitForm::SkipToNextRegion),
        ),
        (
            "memmap_init: per-pfn / memblock ranges".to_string(),
            Case::MemmapInit(MemmapInitForm::PerPfn),
            Case::MemmapInit(MemmapInitForm::MemblockRanges),
        ),
        (
            "reserve_bootmem_region: per-pfn / for_each_valid_pfn".to_string(),
            Case::ReserveBootmem(Walker::PerPfn),
            Case::ReserveBootmem(Walker::ForEachValidPfn),
        ),
    ]);
    for (what, before, after) in pairs {
        if let (Some(b), Some(a)) = (timed(rows, before), timed(rows, after)) {
            out.extend(Comparison::of(what, b, a));
        }
    }
    out
}
