//! Two zoneinfos side by side — the model's and a machine's — field by
//! field, each difference with its cause where one can be known.
//!
//! What can match: every field the kernel computes (watermarks,
//! `protection`, `batch`, `high_min`, `high_max`, the vmstat threshold,
//! and before 6.7 each CPU's `high`), once the managed pages, CPUs and
//! sysctls are the machine's
//! ([`kernel_zone_sizes`](super::kernel_zone_sizes)); a field only one of
//! the two formats prints is not compared. What cannot: live state
//! (`pages free`, a pageset's `count` and, from 6.7, `high`), and `managed`
//! itself unless it is taken from the machine — the kernel's excludes
//! what memblock kept at boot (the memmap among it) and, with deferred
//! struct page init, pages not yet initialised.

use std::fmt;

use super::sizing::{SizingInputs, ZoneSizes, kernel_zone_sizes};
use super::zoneinfo::{KERNEL_ZONE_NAMES, Populated, ZoneInfo, Zoneinfo};
use crate::Watermarks;

/// Why a field differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// Live state (free pages, a pageset's `count` and `high`): it moves
    /// with the workload.
    LiveState,
    /// The zone's present pages differ: the layout's RAM is not the
    /// machine's.
    Layout,
    /// The machine's `managed` is below its `present`: memblock
    /// reservations (the memmap among them) and pages deferred init has
    /// not freed yet come out of it, and pfnlab reserves none.
    Reserved,
    /// A field computed from `managed`, which differs: the machine's own
    /// managed pages, with the inputs given, give the machine's value.
    FollowsManaged,
    /// The machine's managed pages, with the inputs given, do not give its
    /// value: its sysctls (`min_free_kbytes`, `watermark_scale_factor`,
    /// `lowmem_reserve_ratio`, `percpu_pagelist_high_fraction`) or CPU
    /// count are not the ones given, or its managed pages changed since
    /// its kernel computed the value: deferred init grows a zone after
    /// boot (`protection` follows at once, the watermarks and pagesets
    /// wait for the next `setup_per_zone_wmarks`), and so does each page
    /// the kernel frees after sizing its zones, its init sections and the
    /// initrd among them (`free_reserved_page`, which adds to the zone's
    /// managed pages and recomputes nothing).
    Inputs,
    /// The zone is missing from one side.
    Missing,
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Cause::LiveState => "live state",
            Cause::Layout => "the layout's RAM is not the machine's (present pages)",
            Cause::Reserved => {
                "memblock reservations (the memmap among them) and pages deferred init has not freed come out of the machine's managed"
            }
            Cause::FollowsManaged => "follows managed, which differs",
            Cause::Inputs => {
                "the machine's sysctls or CPUs are not the ones given, or its managed changed since its kernel computed this (deferred init, or pages freed after boot: init sections, the initrd)"
            }
            Cause::Missing => "zone missing on one side",
        })
    }
}

/// One field that differs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    /// The node.
    pub node: u32,
    /// The zone's name.
    pub zone: String,
    /// The field (`min`, `protection[2]`, `cpu 0 high_max`, …).
    pub field: String,
    /// The model's value.
    pub ours: u64,
    /// The machine's value.
    pub theirs: u64,
    /// Why, where known.
    pub cause: Option<Cause>,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "node {} {} {}: pfnlab {} machine {}",
            self.node, self.zone, self.field, self.ours, self.theirs
        )?;
        match self.cause {
            Some(c) => write!(f, " ({c})"),
            None => Ok(()),
        }
    }
}

/// The fields of `ours` (the model's) that differ from `theirs` (a
/// machine's), in file order; `inputs` are what the model's computed
/// fields came from, used to tell a changed `managed` from other inputs.
pub fn compare(ours: &Zoneinfo, theirs: &Zoneinfo, inputs: &SizingInputs) -> Vec<Difference> {
    let managed = theirs.managed_zones();
    let sizes = kernel_zone_sizes(&managed, inputs);
    let mut out = Vec::new();
    for t in &theirs.zones {
        let mut diff = ZoneDiff {
            node: t.node,
            zone: &t.zone,
            out: &mut out,
        };
        let Some(o) = ours.zone(t.node, &t.zone) else {
            diff.field("managed".into(), 0, t.managed, Some(Cause::Missing));
            continue;
        };
        // What the machine's own managed pages give with these inputs.
        let own = sizes
            .iter()
            .find(|s| s.node == t.node && KERNEL_ZONE_NAMES[s.zone] == t.zone);
        compare_counts(&mut diff, o, t);
        let promo = ours.format.has_promo() && theirs.format.has_promo();
        compare_watermarks(&mut diff, o, t, own, promo);
        if let (Some(op), Some(tp)) = (&o.populated, &t.populated) {
            // Before 6.7 every CPU's `high` is the zone's, computed like
            // `high_min`; a file with `high_min` (6.13 on) tunes it.
            let fixed_high = ours.format.high_is_the_zones() && !theirs.format.has_high_min_max();
            compare_pagesets(&mut diff, op, tp, own, fixed_high);
        }
    }
    out
}

/// The differences of one zone, recorded in the order they are found.
struct ZoneDiff<'a> {
    node: u32,
    zone: &'a str,
    out: &'a mut Vec<Difference>,
}

impl ZoneDiff<'_> {
    /// Records `field` if the model's value is not the machine's.
    fn field(&mut self, field: String, ours: u64, theirs: u64, cause: Option<Cause>) {
        if ours != theirs {
            self.out.push(Difference {
                node: self.node,
                zone: self.zone.to_owned(),
                field,
                ours,
                theirs,
                cause,
            });
        }
    }

    /// Records a field the kernel computes, `own_value` being what the
    /// machine's own managed pages give with the inputs.
    fn computed(&mut self, field: String, ours: u64, theirs: u64, own_value: Option<u64>) {
        self.field(field, ours, theirs, computed_cause(own_value, theirs));
    }
}

/// A computed field's cause: whether the machine's own managed pages
/// give the machine's value.
fn computed_cause(own_value: Option<u64>, theirs: u64) -> Option<Cause> {
    own_value.map(|v| {
        if v == theirs {
            Cause::FollowsManaged
        } else {
            Cause::Inputs
        }
    })
}

/// The zone's page counts: `pages free`, `present` and `managed`.
fn compare_counts(diff: &mut ZoneDiff<'_>, o: &ZoneInfo, t: &ZoneInfo) {
    diff.field(
        "pages free".into(),
        o.pages_free,
        t.pages_free,
        Some(Cause::LiveState),
    );
    diff.field("present".into(), o.present, t.present, Some(Cause::Layout));
    let reserved = (t.managed < t.present).then_some(Cause::Reserved);
    diff.field("managed".into(), o.managed, t.managed, reserved);
}

/// The watermarks (`min`, `low`, `high`, and `promo` when both formats
/// print it) and `protection`.
fn compare_watermarks(
    diff: &mut ZoneDiff<'_>,
    o: &ZoneInfo,
    t: &ZoneInfo,
    own: Option<&ZoneSizes>,
    promo: bool,
) {
    // From 5.0 zoneinfo prints each watermark with the zone's
    // `watermark_boost` added (`min_wmark_pages()` and the others), a
    // boost `boost_watermark()` raised after a fallback stole a pageblock
    // and kswapd lets decay: live state. What `__setup_per_zone_wmarks()`
    // computed is the printed value less the boost.
    diff.field("boost".into(), o.boost, t.boost, Some(Cause::LiveState));
    let boosted = o.boost > 0 || t.boost > 0;
    let name = |w: &str| match boosted {
        true => format!("{w} less boost"),
        false => w.to_owned(),
    };
    let net = |z: &ZoneInfo, w: Watermarks| Watermarks {
        min: w.min.saturating_sub(z.boost),
        low: w.low.saturating_sub(z.boost),
        high: w.high.saturating_sub(z.boost),
        promo: w.promo.saturating_sub(z.boost),
    };
    let (ow, tw) = (net(o, o.watermarks), net(t, t.watermarks));
    let sw = own.map(|s| s.watermarks);
    diff.computed(name("min"), ow.min, tw.min, sw.map(|w| w.min));
    diff.computed(name("low"), ow.low, tw.low, sw.map(|w| w.low));
    diff.computed(name("high"), ow.high, tw.high, sw.map(|w| w.high));
    if promo {
        diff.computed(name("promo"), ow.promo, tw.promo, sw.map(|w| w.promo));
    }
    for (j, (&a, &b)) in o.protection.iter().zip(&t.protection).enumerate() {
        let own_value = own.and_then(|s| s.protection.get(j).copied());
        diff.computed(format!("protection[{j}]"), a, b, own_value);
    }
}

/// A populated zone's pagesets, CPU by CPU, the number of online CPUs,
/// and `start_pfn`; each CPU's `high` is computed with `fixed_high`, else
/// live state.
fn compare_pagesets(
    diff: &mut ZoneDiff<'_>,
    op: &Populated,
    tp: &Populated,
    own: Option<&ZoneSizes>,
    fixed_high: bool,
) {
    for (a, b) in op.pagesets.iter().zip(&tp.pagesets) {
        let cpu = b.cpu;
        let live = Some(Cause::LiveState);
        diff.field(format!("cpu {cpu} count"), a.count, b.count, live);
        if fixed_high {
            let own_high = own.map(|s| u64::from(s.high_min));
            diff.computed(format!("cpu {cpu} high"), a.high, b.high, own_high);
        } else {
            diff.field(format!("cpu {cpu} high"), a.high, b.high, live);
        }
        let own_batch = own.map(|s| u64::from(s.batch));
        diff.computed(format!("cpu {cpu} batch"), a.batch, b.batch, own_batch);
        // Printed from 6.13 only: compared where both files have them.
        if let (Some(am), Some(bm)) = (a.high_min, b.high_min) {
            let own_min = own.map(|s| u64::from(s.high_min));
            diff.computed(format!("cpu {cpu} high_min"), am, bm, own_min);
        }
        if let (Some(am), Some(bm)) = (a.high_max, b.high_max) {
            let own_max = own.map(|s| u64::from(s.high_max));
            diff.computed(format!("cpu {cpu} high_max"), am, bm, own_max);
        }
        let own_t = own.map(|s| s.stat_threshold);
        diff.computed(
            format!("cpu {cpu} vm stats threshold"),
            a.stat_threshold,
            b.stat_threshold,
            own_t,
        );
    }
    if op.pagesets.len() != tp.pagesets.len() {
        diff.field(
            "online CPUs".into(),
            op.pagesets.len() as u64,
            tp.pagesets.len() as u64,
            Some(Cause::Inputs),
        );
    }
    diff.field(
        "start_pfn".into(),
        op.start_pfn,
        tp.start_pfn,
        Some(Cause::Layout),
    );
}
