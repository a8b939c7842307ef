//! The replay's table and its rows in the one JSON shape.

use buddy::AllocError;
use serde_json::{Value, json};

use super::end_state::{EndState, ZoneEndState};
use super::engine::{EventCounts, ReplayOptions, ReplayResult};
use crate::models::ModelKind;
use crate::report::JsonRow;
use crate::spread::{Comparison, Interval, ratio_text};
use crate::timing::{Measurement, Stat, tsc_hz};

/// The replay's table: one row per model, then what happened to the
/// trace's events (the same for every model but the allocation failures).
pub fn replay_table(results: &[(ModelKind, Result<ReplayResult, AllocError>)]) -> String {
    let mut t = format!(
        "{:<16} {:>10} {:>10} {:>9} {:>9} {:>9} {:>10} {:>6} {:>10} {:>17} {:>16} {:>8} {:>6} {:>5}\n",
        "model",
        "Mevents/s",
        "end to end",
        "ns/event",
        "ns/alloc",
        "ns/free",
        "pfn_valid",
        "holes",
        "pageblock",
        "refilled (trace)",
        "drained (trace)",
        "merges",
        "frag",
        "cons"
    );
    for (kind, r) in results {
        match r {
            Ok(r) => t += &model_line(r),
            Err(e) => t += &format!("{:<16} cannot replay here: {e}\n", kind.name()),
        }
    }
    t += &spread_lines(results);
    if let Some((_, Ok(r))) = results.iter().find(|(_, r)| r.is_ok()) {
        t += &events_summary(&r.events);
        for (kind, r) in results {
            if let Ok(r) = r {
                t += &model_notes(*kind, r);
            }
        }
    }
    let counted = results
        .iter()
        .any(|(_, r)| r.as_ref().is_ok_and(|r| r.model_ops.is_some()));
    t.push_str(LEGEND);
    t.push_str(if counted { COUNTED } else { NOT_COUNTED });
    t
}

/// What the table's columns mean.
const LEGEND: &str = "ns/alloc and ns/free time the allocator call alone (unserialised TSC reads around it, a few ns of their own included); Mevents/s and ns/event: the replay loop over events parsed beforehand; end to end: Mevents/s over the model's whole wall time (the first model: from the command's start, reading and parsing the trace once, overlapped with building the model; then the first timed pass, --exact, the counting pass when asked for, and freeing the allocators; the further passes, each on an allocator built afresh, are measurement and stay out). Mevents/s, ns/event, ns/alloc and ns/free are medians over the timed passes. refilled/drained: blocks the replay's per-CPU refills took from the zone and its drains gave back (in brackets the trace's own counts, which are not the same mechanism: percpu_refill=1 also marks blocks allocated past the per-CPU lists and misses the steal path's, and mm_page_pcpu_drain also counts lists drained for another CPU; docs/trace.md); frag: fragmentation_index at pageblock_order in thousandths (-1000: a block is free); cons: free + held == managed.\n";

/// Where the model calls come from, when they were counted.
const COUNTED: &str = "pfn_valid, holes (pfn_valid calls that found a hole) and pageblock (pageblock lookups): the memory-model calls of the replay, counted on a second, untimed pass over a counting model (--count-calls).\n";

/// Why the model-call columns are empty, and how to fill them.
const NOT_COUNTED: &str = "pfn_valid, holes and pageblock: not counted (-). --count-calls counts the replay's memory-model calls on a second, untimed pass over a counting model, which costs a second allocator and a second replay.\n";

/// One model's row of the table.
fn model_line(r: &ReplayResult) -> String {
    let calls = |names: &[&str]| match &r.model_ops {
        Some(ops) => names
            .iter()
            .map(|n| ops.calls.get(n).copied().unwrap_or(0))
            .sum::<u64>()
            .to_string(),
        None => "-".into(),
    };
    let holes = r
        .model_ops
        .as_ref()
        .map_or_else(|| "-".into(), |ops| ops.hole_hits.to_string());
    format!(
        "{:<16} {:>10.2} {:>10.2} {:>9.1} {:>9.1} {:>9.1} {:>10} {:>6} {:>10} {:>17} {:>16} {:>8} {:>6} {:>5}\n",
        r.model,
        r.events_per_second / 1e6,
        r.wall_events_per_second / 1e6,
        r.ns_per_event,
        r.ns_per_alloc,
        r.ns_per_free,
        calls(&["pfn_valid"]),
        holes,
        calls(&["get_pfnblock_migratetype", "set_pfnblock_migratetype"]),
        format!(
            "{} ({})",
            r.allocator.pcp_refill_blocks, r.events.zone_locked_refills
        ),
        format!(
            "{} ({})",
            r.allocator.pcp_drain_blocks, r.events.pcpu_drains
        ),
        r.allocator.merges,
        r.allocator.fragmentation_index,
        if r.allocator.conserved { "ok" } else { "LOST" },
    )
}

/// Each model's ns per event against the fastest model's, from the
/// interleaved passes (paired per pass): the replay's every comparison.
pub fn replay_comparisons(
    results: &[(ModelKind, Result<ReplayResult, AllocError>)],
) -> Vec<Comparison> {
    let ok: Vec<&ReplayResult> = results
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok())
        .collect();
    let Some(fastest) = ok
        .iter()
        .min_by(|a, b| a.ns_per_event.total_cmp(&b.ns_per_event))
    else {
        return Vec::new();
    };
    ok.iter()
        .filter(|r| r.model != fastest.model)
        .filter_map(|r| {
            Comparison::of(
                format!("{} / {}: ns per event", r.model, fastest.model),
                &r.per_event(),
                &fastest.per_event(),
            )
        })
        .collect()
}

/// The passes' spread per model and the comparisons, or why there are
/// none (one pass).
fn spread_lines(results: &[(ModelKind, Result<ReplayResult, AllocError>)]) -> String {
    let ok: Vec<&ReplayResult> = results
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok())
        .collect();
    let Some(first) = ok.first() else {
        return String::new();
    };
    let passes = first.passes.len();
    if passes < 2 {
        return "\none timed pass per model: no spread, so no model is ranked (--trials N for more)\n".into();
    }
    let mut t =
        format!("\nns/event over {passes} interleaved passes per model, median [95 % interval]:");
    for r in &ok {
        match Interval::of_median(&r.per_event().ns_per_op.trials) {
            Ok(i) => t += &format!(" {} {:.1} [{:.1}, {:.1}];", r.model, i.median, i.lo, i.hi),
            Err(e) => t += &format!(" {}: {e};", r.model),
        }
    }
    t += "\n";
    for c in replay_comparisons(results) {
        t += &format!("  {} {}\n", c.what, ratio_text(&c.interval));
    }
    t
}

/// What happened to the trace's events (the same for every model).
fn events_summary(e: &EventCounts) -> String {
    let seeded = if e.seeded_list_pages + e.unseeded_list_pages > 0 {
        format!(
            "; per-CPU lists seeded with {} pages, {} left out",
            e.seeded_list_pages, e.unseeded_list_pages
        )
    } else {
        String::new()
    };
    format!(
        "\nevents: {} replayed ({} allocations, {} frees); {} kernel-failed allocations; {} frees of pages allocated before the recording ({} served from the start state's allocated pages), {} of another order, {} untraced{}; mm_page_free_batched {} paired / {} unpaired; {} zone-locked ({} refills); {} pcp drains; {} other events, {} bad lines skipped\n",
        e.events,
        e.allocs,
        e.frees,
        e.kernel_failed_allocs,
        e.unknown_frees,
        e.prior_frees,
        e.order_mismatch_frees,
        e.untraced_frees,
        seeded,
        e.batched_paired,
        e.batched_unpaired,
        e.zone_locked,
        e.zone_locked_refills,
        e.pcpu_drains,
        e.read.unknown_events,
        e.read.bad_lines,
    )
}

/// One model's refills and drains CPU by CPU, refused allocations,
/// `--exact` line and `--verify` failures.
fn model_notes(kind: ModelKind, r: &ReplayResult) -> String {
    let mut t = String::new();
    if r.allocator.per_cpu.len() > 1 {
        let cpus: Vec<String> = r
            .allocator
            .per_cpu
            .iter()
            .map(|c| {
                format!(
                    "cpu {} {} ({}) / {} ({})",
                    c.cpu, c.refill_blocks, c.trace_refills, c.drain_blocks, c.trace_drains
                )
            })
            .collect();
        t += &format!(
            "{}: refilled (trace) / drained (trace) per CPU: {}\n",
            kind.name(),
            cpus.join("; ")
        );
    }
    if !r.events.alloc_failures.is_empty() {
        t += &format!(
            "{}: allocations refused: {:?}\n",
            kind.name(),
            r.events.alloc_failures
        );
    }
    if let Some(x) = &r.exact {
        t += &format!(
            "{}: --exact: the trace's {} pfns ({} valid here) through pfn_valid + pfn_to_page + a flags read: {:.2} ns ({:.1} TSC cycles) per pfn\n",
            kind.name(),
            x.pfns,
            x.valid,
            x.ns_per_pfn,
            x.cycles_per_pfn
        );
    }
    if r.verify_failures > 0 {
        t += &format!(
            "{}: --verify found {} wrong operations; the first: {}\n",
            kind.name(),
            r.verify_failures,
            r.first_verify_failure.as_deref().unwrap_or("")
        );
    }
    t
}

/// The replay's rows in the one JSON shape: one per model, `variant`
/// `replay`, the measurement per event (one trial per timed pass), every
/// count beside.
pub fn replay_rows(
    results: &[(ModelKind, Result<ReplayResult, AllocError>)],
    options: ReplayOptions,
) -> Vec<JsonRow> {
    let ns_per_cycle = 1e9 / tsc_hz() as f64;
    results
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok())
        .map(|r| {
            let ns: Vec<f64> = r.passes.iter().map(|p| p.ns_per_event).collect();
            let measurement = Measurement {
                cycles_per_op: Stat::of(ns.iter().map(|n| n / ns_per_cycle).collect()),
                ns_per_op: Stat::of(ns),
                interleaved_with: Some(r.interleaved_with),
            };
            let mut row = JsonRow::new(
                "replay",
                r.model.clone(),
                json!({ "era": options.era.name(), "verify": options.verify }),
                measurement,
            );
            if let Ok(Value::Object(fields)) = serde_json::to_value(r) {
                for (k, v) in fields {
                    if k != "model" {
                        row = row.with(&k, v);
                    }
                }
            }
            row
        })
        .collect()
}

/// The models' free lists at the end of the replay beside the machine's
/// (`replay --end-state`): per zone the machine's `nr_free` per order,
/// then each model's with its distances, then each model's over the whole
/// machine.
pub fn end_state_table(
    label: &str,
    results: &[(ModelKind, Result<ReplayResult, AllocError>)],
) -> String {
    let ended: Vec<(&str, &EndState)> = results
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok())
        .filter_map(|r| r.end_state.as_ref().map(|e| (r.model.as_str(), e)))
        .collect();
    let Some((_, first)) = ended.first() else {
        return String::new();
    };
    let side = ended.iter().map(|(m, _)| m.len()).max().unwrap_or(0).max(7);
    let zone_width = first
        .zones
        .iter()
        .map(|z| zone_name(z).len())
        .max()
        .unwrap_or(0);
    let mut t = format!(
        "\nend state against {label}: free blocks per order, the machine's where its recording ended and each model's where the replay's first pass ended (its per-CPU lists left out, as buddyinfo leaves them out)\n{:<zone_width$} {:<side$} {:>11} {:>6} {:>7}  nr_free, order 0 up\n",
        "zone", "", "free pages", "order", "type"
    );
    let share = |d: Option<f64>| d.map_or_else(|| "-".to_owned(), |d| format!("{d:.3}"));
    for zone in &first.zones {
        t += &format!(
            "{:<zone_width$} {:<side$} {:>11} {:>6} {:>7}  {}\n",
            zone_name(zone),
            "machine",
            zone.machine_free_pages,
            "",
            "",
            orders_text(&zone.machine_nr_free)
        );
        for (model, end) in &ended {
            let Some(z) = end
                .zones
                .iter()
                .find(|z| (z.node, &z.zone) == (zone.node, &zone.zone))
            else {
                continue;
            };
            t += &format!(
                "{:<zone_width$} {model:<side$} {:>11} {:>6} {:>6}{}  {}\n",
                "",
                z.model_free_pages,
                share(Some(z.order_distance)),
                share(z.type_distance),
                if z.capped { "c" } else { " " },
                orders_text(&z.model_nr_free)
            );
        }
    }
    for (model, end) in &ended {
        t += &format!(
            "{model}: {} of free pages at another zone or order, {} at another zone, migratetype or order\n",
            share(Some(end.order_distance)),
            share(end.type_distance)
        );
    }
    t + "order, type: the share of free pages in another cell (order: a zone's orders; type: its migratetypes' orders), ½ Σ |a/A − b/B| over the cells, a and b each side's free pages in a cell and A and B their sums: 0, the same shape; 1, no cell shared. They compare shapes, not amounts. -: a side has no pagetypeinfo; c: a pagetypeinfo list counted at its cap of 100000.\n"
}

/// `Node N, zone NAME`.
fn zone_name(z: &ZoneEndState) -> String {
    format!("Node {}, zone {}", z.node, z.zone)
}

/// Counts per order, space-separated.
fn orders_text(counts: &[u64]) -> String {
    counts
        .iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}
