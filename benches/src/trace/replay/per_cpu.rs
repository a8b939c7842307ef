//! Per-CPU refills and drains, CPU by CPU: the trace's events beside the
//! replay's handles.

use std::collections::BTreeMap;

use buddy::{BuddyModel, PerCpu, Variant};
use serde::Serialize;

/// One CPU's per-CPU refills and drains, the trace's and the replay's.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct CpuCounts {
    /// The trace's CPU (the replay's handle of the same number).
    pub cpu: u16,
    /// The trace's `mm_page_alloc_zone_locked` events with
    /// `percpu_refill=1` on this CPU.
    pub trace_refills: u64,
    /// The trace's `mm_page_pcpu_drain` events on this CPU (the CPU that
    /// ran the drain, whichever CPU's lists it drained).
    pub trace_drains: u64,
    /// Blocks this CPU's refills took in the replay, up to the trace's
    /// last event.
    pub refill_blocks: u64,
    /// Blocks this CPU's drains gave back in the replay, up to the trace's
    /// last event.
    pub drain_blocks: u64,
}

/// Every CPU's refills and drains: the trace's (`trace`) beside its
/// handle's (`cpus`, indexed by trace CPU).
pub(super) fn per_cpu_counts<M: BuddyModel, V: Variant>(
    cpus: &[Option<PerCpu<'_, M, V>>],
    trace: &BTreeMap<u16, (u64, u64)>,
) -> Vec<CpuCounts> {
    let mut out: BTreeMap<u16, CpuCounts> = trace
        .iter()
        .map(|(&cpu, &(trace_refills, trace_drains))| {
            let c = CpuCounts {
                cpu,
                trace_refills,
                trace_drains,
                ..CpuCounts::default()
            };
            (cpu, c)
        })
        .collect();
    for (i, handle) in cpus.iter().enumerate() {
        let (Some(handle), Ok(cpu)) = (handle, u16::try_from(i)) else {
            continue;
        };
        let c = out.entry(cpu).or_insert_with(|| CpuCounts {
            cpu,
            ..CpuCounts::default()
        });
        (c.refill_blocks, c.drain_blocks) = handle.pcp_blocks();
    }
    out.into_values().collect()
}
