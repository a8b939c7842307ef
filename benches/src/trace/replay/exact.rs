//! `replay --exact`: the trace's own pfn stream through a model's
//! `pfn_valid` + `pfn_to_page` + a descriptor read, in the trace's order
//! (its real locality).

use buddy::BuddyModel;
use serde::Serialize;
use sparsemem::{BuddyPage, Pfn};

use crate::timing::measure;
use crate::trace::{Event, EventKind};

/// Pfns `--exact` keeps from a trace (the first this many allocations and
/// frees): 128 MiB of pfns, whatever the trace's size.
pub const EXACT_MAX_PFNS: usize = 16 << 20;

/// The trace's own pfn stream — every allocated and freed block's pfn, in
/// trace order — through the model: `pfn_valid`, then `pfn_to_page` and a
/// read of the descriptor's flags for a valid pfn, as the kernel's paths do
/// for the pfns they are handed. The pfns are the recording host's, so
/// this is meaningful on the recorded (or host) layout.
#[derive(Clone, Debug, Serialize)]
pub struct ExactResult {
    /// Pfns timed.
    pub pfns: u64,
    /// Of those, valid on the layout.
    pub valid: u64,
    /// Median ns per pfn over the trials.
    pub ns_per_pfn: f64,
    /// Median TSC cycles per pfn.
    pub cycles_per_pfn: f64,
}

/// The pfns of the allocations and frees among `events`, up to
/// [`EXACT_MAX_PFNS`].
pub fn trace_pfns(events: &[Event]) -> Vec<Pfn> {
    events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Alloc | EventKind::Free))
        .filter_map(|e| e.pfn.map(Pfn::new))
        .take(EXACT_MAX_PFNS)
        .collect()
}

/// One pass of the exact stream: valid pfns' descriptors read.
#[inline(never)]
fn exact_pass<M: BuddyModel>(model: &M, pfns: &[Pfn]) -> u64 {
    let mut acc = 0;
    for &p in pfns {
        if let Some(page) = model.pfn_to_page(p) {
            acc ^= page.flags();
        }
    }
    acc
}

pub(super) fn exact<M: BuddyModel>(model: &M, pfns: &[Pfn], trials: usize) -> ExactResult {
    let valid = pfns.iter().filter(|&&p| model.pfn_valid(p)).count() as u64;
    let m = measure(trials, || {
        std::hint::black_box(exact_pass(model, pfns));
        pfns.len() as u64
    });
    ExactResult {
        pfns: pfns.len() as u64,
        valid,
        ns_per_pfn: m.ns_per_op.median,
        cycles_per_pfn: m.cycles_per_op.median,
    }
}
