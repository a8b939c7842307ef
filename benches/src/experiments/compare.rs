//! The default comparison: every model this build supports on one layout,
//! side by side, in one table.
//!
//! Columns: `pfn_valid` on random valid pfns and on random holes,
//! `pfn_to_page` + a flags read, an order-0 alloc+free on the zone path
//! with the hole check off and on (on an allocator whose memory sits in
//! `MAX_PAGE_ORDER` blocks, so each pair splits and merges all the way —
//! ten `pfn_valid` calls per free with the check on), and memmap bytes.

use serde_json::json;
use sparsemem::{Layout, MemmapBytes};
use vmemmap::VmemmapOptions;

use buddy::{
    AllocError, Allocator, InitError, Kernel, KernelHoleCheck, Options, RangeError, Variant,
};

use super::Progress;
use super::kernel_fixup::KernelFixup;
use crate::error::RunError;
use crate::human_bytes;
use crate::models::{Buildable, ModelKind, ModelVisitor, with_model_options};
use crate::report::{Row, fmt_ns};
use crate::timing::{Measurement, Plan, measure};
use crate::workloads::{count_valid, hole_pfns, read_flags, valid_pfns, zone_pairs};

/// One model's results.
#[derive(Clone, Debug)]
pub struct ModelResult {
    /// The model.
    pub kind: ModelKind,
    /// `pfn_valid`, random valid pfns.
    pub valid: Measurement,
    /// `pfn_valid`, random holes.
    pub hole: Measurement,
    /// `pfn_to_page` + flags read.
    pub page_read: Measurement,
    /// Zone-path order-0 alloc+free, hole check off (`None`: the layout
    /// has holes inside MAX_PAGE_ORDER blocks, so the kernel would need
    /// HOLES_IN_ZONE).
    pub alloc_off: Option<Measurement>,
    /// The same with the hole check (`None`: the era is 5.14 or later,
    /// which has no `HOLES_IN_ZONE`).
    pub alloc_on: Option<Measurement>,
    /// Memmap bytes.
    pub memmap: MemmapBytes,
    /// The memory model's share of `alloc_off` (calls per pair × their
    /// replayed cost, over the pair's time; see `bench breakdown`).
    pub model_share: Option<f64>,
}

struct CompareVisitor<'a> {
    plan: Plan,
    kind: ModelKind,
    progress: &'a dyn Progress,
    alloc_options: Options,
}

fn alloc_pairs<M: Buildable, V: Variant>(
    layout: &Layout,
    options: VmemmapOptions,
    plan: Plan,
    alloc_options: Options,
) -> Result<Option<Measurement>, AllocError> {
    let model = M::build(layout, options)?;
    let alloc = match Allocator::<M, V>::new(model, layout, alloc_options) {
        Ok(a) => a,
        Err(InitError::Range(RangeError::HolesInBlock { .. })) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let node = layout.first_node();
    let n = plan.iters(200_000, 2_000);
    Ok(Some(measure(plan.trials, || {
        std::hint::black_box(zone_pairs(&alloc, node, n));
        n
    })))
}

impl ModelVisitor for CompareVisitor<'_> {
    type Output = ModelResult;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<ModelResult, AllocError> {
        let name = self.kind.name();
        let plan = self.plan;
        self.progress.stage(format!("{name}: build"));
        let model = M::build(layout, options)?;
        let valid = valid_pfns(layout, plan.iters(1 << 20, 4096) as usize, 11);
        let slow_holes = self.kind.faults_on_holes();
        let holes = hole_pfns(
            layout,
            plan.iters(if slow_holes { 20_000 } else { 1 << 20 }, 1000) as usize,
            13,
        );
        self.progress.stage(format!("{name}: pfn_valid"));
        let valid_m = measure(plan.trials, || {
            std::hint::black_box(count_valid(&model, &valid));
            valid.len() as u64
        });
        let hole_m = measure(plan.trials, || {
            std::hint::black_box(count_valid(&model, &holes));
            holes.len() as u64
        });
        let read_m = measure(plan.trials, || {
            std::hint::black_box(read_flags(&model, &valid));
            valid.len() as u64
        });
        let memmap = model.memmap_bytes();
        drop(model);
        self.progress.stage(format!("{name}: allocator"));
        let alloc_off = alloc_pairs::<M, Kernel>(layout, options, plan, self.alloc_options)?;
        let alloc_on = if self
            .alloc_options
            .era
            .check_variant::<KernelHoleCheck>()
            .is_ok()
        {
            alloc_pairs::<M, KernelHoleCheck>(layout, options, plan, self.alloc_options)?
        } else {
            None
        };
        let model_share = match &alloc_off {
            Some(pair) => {
                let n = plan.iters(20_000, 2_000);
                let (model_ns, _) = crate::experiments::breakdown::zone_model_time::<M>(
                    layout,
                    options,
                    self.alloc_options,
                    n,
                    plan.trials,
                )?;
                Some((model_ns / pair.ns_per_op.median).clamp(0.0, 1.0))
            }
            None => None,
        };
        Ok(ModelResult {
            kind: self.kind,
            valid: valid_m,
            hole: hole_m,
            page_read: read_m,
            alloc_off,
            alloc_on,
            memmap,
            model_share,
        })
    }
}

/// Runs the comparison; models that cannot be built on this layout are
/// reported with the reason.
pub fn run(
    layout: &Layout,
    plan: Plan,
    alloc_options: Options,
    progress: &dyn Progress,
) -> (Vec<ModelResult>, Vec<(ModelKind, String)>) {
    let mut done = Vec::new();
    let mut refused = Vec::new();
    for &kind in ModelKind::ALL {
        let visitor = CompareVisitor {
            plan,
            kind,
            progress,
            alloc_options,
        };
        match with_model_options(kind, layout, VmemmapOptions::default(), visitor) {
            Ok(r) => done.push(r),
            Err(e) => refused.push((kind, e.to_string())),
        }
        progress.advance();
    }
    (done, refused)
}

fn cell(m: &Measurement) -> String {
    format!(
        "{} ({:.0})",
        fmt_ns(m.ns_per_op.median),
        m.cycles_per_op.median
    )
}

/// The table, the notes on refused models, and a short reading.
pub fn table(
    results: &[ModelResult],
    refused: &[(ModelKind, String)],
    fixup: Option<&KernelFixup>,
) -> String {
    let mut out = format!(
        "median ns per op ({})\n\
         model                 pfn_valid valid   pfn_valid hole     pfn_to_page+flags  alloc+free (no check)  model share  alloc+free (hole check)  memmap reserved  memmap resident\n",
        crate::timing::COUNTER_UNIT
    );
    for r in results {
        out += &format!(
            "{:<21} {:>16}  {:>16}  {:>17}  {:>21}  {:>11}  {:>23}  {:>15}  {:>15}\n",
            r.kind.name(),
            cell(&r.valid),
            cell(&r.hole),
            cell(&r.page_read),
            r.alloc_off.as_ref().map_or("n/a (holes)".into(), cell),
            r.model_share
                .map_or("n/a".into(), |s| format!("{:.0}%", 100.0 * s)),
            r.alloc_on.as_ref().map_or("n/a (5.14+: none)".into(), cell),
            human_bytes(r.memmap.reserved),
            human_bytes(r.memmap.resident),
        );
    }
    for (kind, why) in refused {
        out += &format!("{:<21} not built: {why}\n", kind.name());
    }
    if !cfg!(feature = "uffd") {
        out += "vmemmap-uffd          not in this build: run `cargo run --release --features uffd` (needs libclang-dev)\n";
    }
    out += "\n";
    out += &reading(results);
    if let Some(fixup) = fixup {
        out += "\n";
        out += &fixup.text();
        if let Some(probe) = results.iter().find(|r| r.kind == ModelKind::VmemmapProbe) {
            out += &format!(
                "vmemmap-probe pays a user-space signal round trip per hole instead ({} ns): {:.1}x the kernel's fixup.\n",
                fmt_ns(probe.hole.ns_per_op.median),
                probe.hole.ns_per_op.median / fixup.fixup_ns().max(1.0)
            );
        }
    }
    out
}

/// Two or three plain sentences on what the table says.
pub fn reading(results: &[ModelResult]) -> String {
    let lookup = |r: &&ModelResult| r.valid.ns_per_op.median;
    let Some(fastest_lookup) = results
        .iter()
        .min_by(|a, b| lookup(a).total_cmp(&lookup(b)))
    else {
        return String::new();
    };
    let smallest = results
        .iter()
        .min_by_key(|r| r.memmap.resident)
        .unwrap_or(fastest_lookup);
    // The era's allocator path: with the hole check where the era has one.
    let hole_check = results.iter().all(|r| r.alloc_on.is_some());
    let path = |r: &ModelResult| {
        if hole_check {
            r.alloc_on.as_ref()
        } else {
            r.alloc_off.as_ref()
        }
        .map(|m| m.ns_per_op.median)
    };
    let timed: Vec<(&ModelResult, f64)> =
        results.iter().filter_map(|r| Some((r, path(r)?))).collect();
    let best = timed.iter().min_by(|a, b| a.1.total_cmp(&b.1));
    let worst = timed.iter().max_by(|a, b| a.1.total_cmp(&b.1));
    let mut s = String::new();
    if let (Some(&(best, best_ns)), Some(&(worst, worst_ns))) = (best, worst) {
        s += &format!(
            "{}, {} is cheapest on the allocator path ({} ns per zone-path alloc+free), {:.2}x faster than {} ({} ns).",
            if hole_check {
                "With the hole check on"
            } else {
                "With no hole check (none exists since 5.14)"
            },
            best.kind.name(),
            fmt_ns(best_ns),
            worst_ns / best_ns,
            worst.kind.name(),
            fmt_ns(worst_ns),
        );
    }
    s += &format!(
        " The cheapest pfn_valid on valid pfns is {} ({} ns).",
        fastest_lookup.kind.name(),
        fmt_ns(fastest_lookup.valid.ns_per_op.median)
    );
    if let Some(probe) = results.iter().find(|r| r.kind == ModelKind::VmemmapProbe) {
        s += &format!(
            " A hole costs vmemmap-probe {} ns (a fault caught by a user-space signal handler) against {} ns for a valid pfn; {} keeps the smallest resident memmap ({}).",
            fmt_ns(probe.hole.ns_per_op.median),
            fmt_ns(probe.valid.ns_per_op.median),
            smallest.kind.name(),
            human_bytes(smallest.memmap.resident)
        );
    }
    s.trim_start().to_string() + "\n"
}

/// The JSON rows: one per model and column.
pub fn rows(results: &[ModelResult]) -> Vec<Row> {
    let mut rows = Vec::new();
    for r in results {
        let name = r.kind.name();
        let bytes = json!({
            "memmap_reserved_bytes": r.memmap.reserved,
            "memmap_resident_bytes": r.memmap.resident,
            "memmap_thp_bytes": r.memmap.huge,
            "table_bytes": r.memmap.tables
        });
        let mut push = |variant: &str, m: &Measurement, share: Option<f64>| {
            let mut row = Row::new(variant, name, json!({}), m.clone());
            if let Some(obj) = bytes.as_object() {
                row.extra.extend(obj.clone());
            }
            if let Some(share) = share {
                row.extra.insert("model_share".into(), json!(share));
            }
            rows.push(row);
        };
        push("pfn_valid-valid", &r.valid, None);
        push("pfn_valid-hole", &r.hole, None);
        push("pfn_to_page-flags", &r.page_read, None);
        if let Some(m) = &r.alloc_off {
            push("alloc-free-nocheck", m, r.model_share);
        }
        if let Some(m) = &r.alloc_on {
            push("alloc-free-holecheck", m, None);
        }
    }
    rows
}

/// Makes sure every number is a finite positive measurement (used by tests
/// and before writing JSON).
pub fn check_finite(results: &[ModelResult]) -> Result<(), RunError> {
    for r in results {
        for m in [&r.valid, &r.hole, &r.page_read]
            .into_iter()
            .chain(r.alloc_off.as_ref())
            .chain(r.alloc_on.as_ref())
        {
            for v in m.ns_per_op.trials.iter().chain(&m.cycles_per_op.trials) {
                if !v.is_finite() || *v <= 0.0 {
                    return Err(RunError::NotPositive {
                        row: r.kind.name().into(),
                    });
                }
            }
        }
    }
    Ok(())
}
