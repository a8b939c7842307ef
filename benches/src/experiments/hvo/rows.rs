//! `bench hvo`'s rows and text for the pool, toucher and hot-path parts.

use sparsemem::PAGE_STRUCT_SIZE;
use sparsemem::hvo::hvo_freed_bytes;

use super::hot::HotPath;
use super::{HvoExtra, HvoModeId, HvoParams, HvoRow, HvoVariant, ModeResult};
use crate::experiments::{Ctx, cell};
use crate::report::Row;
use crate::spread::{Interval, ratio_cell};
use crate::timing::Measurement;

/// The median ratio of `m` to `base` and its interval.
fn ratio(m: &Measurement, base: &Measurement) -> (Option<f64>, Option<Interval>) {
    (
        Some(m.ns_per_op.median / base.ns_per_op.median),
        Interval::between(m, base).ok(),
    )
}

/// Folio size in KiB for `order`.
fn folio_kib(ctx: &Ctx, order: u32) -> u64 {
    (ctx.layout.geometry().page_size() << order) >> 10
}

/// Grow, shrink and toucher rows of every mode for folios of `order`.
pub(super) fn mode_rows(
    ctx: &Ctx,
    order: u32,
    folios: u64,
    modes: &[ModeResult],
    pinned: bool,
) -> Vec<HvoRow> {
    let page_size = sparsemem::memmap::host_page_size() as u64;
    let freed = hvo_freed_bytes(order, page_size, PAGE_STRUCT_SIZE);
    let off = modes.iter().find(|m| m.mode == HvoModeId::Off);
    let mut rows = Vec::new();
    for m in modes {
        let params = HvoParams {
            mode: m.mode,
            folio_kib: folio_kib(ctx, order),
            folios,
            optimised_percent: None,
        };
        let toucher = m.toucher.as_ref().map(|t| {
            let base = off.and_then(|o| o.toucher.as_ref());
            (HvoVariant::Toucher, t, base)
        });
        let pool = [
            (HvoVariant::Grow, &m.grow, off.map(|o| &o.grow)),
            (HvoVariant::Shrink, &m.shrink, off.map(|o| &o.shrink)),
        ];
        for (variant, measured, base) in pool.into_iter().chain(toucher) {
            let (r, interval) = base
                .filter(|_| m.mode != HvoModeId::Off)
                .map_or((None, None), |b| ratio(measured, b));
            let pool_row = variant != HvoVariant::Toucher;
            let extra = HvoExtra {
                ratio_to_off: r,
                ratio_to_off_interval: interval,
                published_ratio: m
                    .mode
                    .published_ratio(variant == HvoVariant::Grow)
                    .filter(|_| pool_row),
                memmap_resident_bytes: pool_row.then_some(m.resident_bytes),
                hvo_freed_bytes: m.mode.mode().filter(|_| pool_row).map(|_| freed),
                toucher_pinned: (!pool_row).then_some(pinned),
                ..HvoExtra::default()
            };
            rows.push(Row::new(
                variant,
                ctx.model,
                params,
                measured.clone(),
                extra,
            ));
        }
    }
    rows
}

/// The hot-path rows: each share's two paths, with the ratio to 0 %.
pub(super) fn hot_rows(ctx: &Ctx, order: u32, hot: &HotPath) -> Vec<HvoRow> {
    let Some(base) = hot.points.first() else {
        return Vec::new();
    };
    let mut rows = Vec::new();
    for p in &hot.points {
        let params = HvoParams {
            mode: HvoModeId::FakeHeadBatched,
            folio_kib: folio_kib(ctx, order),
            folios: hot.folios,
            optimised_percent: Some(p.optimised_percent),
        };
        for (variant, m, b) in [
            (HvoVariant::HotReadFlags, &p.read_flags, &base.read_flags),
            (HvoVariant::HotZonePairs, &p.zone_pairs, &base.zone_pairs),
        ] {
            let (r, interval) = ratio(m, b);
            let extra = HvoExtra {
                ratio_to_off: r,
                ratio_to_off_interval: interval,
                memory_share: Some(p.memory_share),
                ..HvoExtra::default()
            };
            rows.push(Row::new(variant, ctx.model, params, m.clone(), extra));
        }
    }
    rows
}

/// The toucher's line per mode: ns per memmap read and the ratio to HVO
/// off's windows.
pub(super) fn render_toucher(modes: &[ModeResult], pinned: bool) -> String {
    let Some(off) = modes.iter().find(|m| m.mode == HvoModeId::Off) else {
        return String::new();
    };
    let mut out = format!(
        "\nthe toucher on the other CPU, its CPU ns per memmap read during each mode's grow and shrink{}:\n",
        if pinned {
            ""
        } else {
            " (not pinned: CPUs shared)"
        }
    );
    for m in modes {
        let Some(t) = &m.toucher else {
            out.push_str(&format!(
                "  {:<22} not scheduled long enough\n",
                mode_name(m.mode)
            ));
            continue;
        };
        let r = off
            .toucher
            .as_ref()
            .and_then(|o| Interval::between(t, o).ok())
            .filter(|_| m.mode != HvoModeId::Off)
            .map_or("-".into(), |i| ratio_cell(&i));
        out.push_str(&format!(
            "  {:<22} {:>20} {:>20}\n",
            mode_name(m.mode),
            cell(t),
            r
        ));
    }
    out
}

/// The gigantic part's lines, or its notice.
pub(super) fn render_gigantic(
    ctx: &Ctx,
    gigantic: &Result<(u32, Vec<ModeResult>), String>,
) -> String {
    let (order, modes) = match gigantic {
        Err(why) => return format!("\ngigantic folios: left out ({why})\n"),
        Ok(g) => g,
    };
    let off = modes.iter().find(|m| m.mode == HvoModeId::Off);
    let mut out = format!(
        "\none {} MiB folio per trial, per folio:\n  {:<22} {:>20} {:>20} {:>20} {:>20}\n",
        folio_kib(ctx, *order) >> 10,
        "mode",
        "grow ns (cyc)",
        "x off",
        "shrink ns (cyc)",
        "x off"
    );
    let x = |m: &Measurement, b: Option<&Measurement>| {
        b.and_then(|b| Interval::between(m, b).ok())
            .map_or("-".into(), |i| ratio_cell(&i))
    };
    for m in modes {
        let base = off.filter(|_| m.mode != HvoModeId::Off);
        out.push_str(&format!(
            "  {:<22} {:>20} {:>20} {:>20} {:>20}\n",
            mode_name(m.mode),
            cell(&m.grow),
            x(&m.grow, base.map(|o| &o.grow)),
            cell(&m.shrink),
            x(&m.shrink, base.map(|o| &o.shrink)),
        ));
    }
    out
}

/// The hot-path table.
pub(super) fn render_hot(hot: &HotPath) -> String {
    let Some(base) = hot.points.first() else {
        return String::new();
    };
    let mut out = format!(
        "\nhot path as the share of {} held 2 MiB folios optimised grows (fake heads):\n  {:>9} {:>8} {:>20} {:>20} {:>20} {:>20}\n",
        hot.folios,
        "optimised",
        "of mem",
        "pfn_to_page+flags ns",
        "x 0 %",
        "order-0 pair ns",
        "x 0 %"
    );
    let x = |m: &Measurement, b: &Measurement| {
        Interval::between(m, b)
            .ok()
            .map_or("-".into(), |i| ratio_cell(&i))
    };
    for p in &hot.points {
        out.push_str(&format!(
            "  {:>8}% {:>7.1}% {:>20} {:>20} {:>20} {:>20}\n",
            p.optimised_percent,
            p.memory_share * 100.0,
            cell(&p.read_flags),
            x(&p.read_flags, &base.read_flags),
            cell(&p.zone_pairs),
            x(&p.zone_pairs, &base.zone_pairs),
        ));
    }
    out
}

/// A mode's kebab-case name.
pub(super) fn mode_name(mode: HvoModeId) -> String {
    serde_json::to_value(mode).map_or(String::new(), |v| v.as_str().unwrap_or("").into())
}
