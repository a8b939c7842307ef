//! The printed tables: per workload and order, ns per operation per
//! thread for every allocator and thread count, then the paper's figures
//! beside pfnlab's and the ratios the reading states.

use super::{
    ORDERS, PAPER_REPEAT_NS, ScaleAllocatorId, ScaleCell, ScaleResults, Workload, paper_figure,
};
use crate::spread::{Interval, MARKS, ratio_cell};
use crate::timing::Measurement;
use crate::units::{fmt_ns, human_bytes};

/// The whole report.
pub(super) fn render(r: &ScaleResults) -> String {
    let mut t = header(r);
    for workload in Workload::ALL {
        for order in ORDERS {
            t += &table(r, workload, order, |c| Some(&c.measurement), "");
            if workload == Workload::Bulk {
                t += &table(r, workload, order, |c| c.free.as_ref(), " (free phase)");
            }
        }
    }
    t + &paper(r) + &ratios(r)
}

fn header(r: &ScaleResults) -> String {
    let m = &r.memory;
    let cap = if m.capped {
        format!(
            ", cut from {} by the budget (half this machine's memory, {})",
            human_bytes(m.wanted_bytes),
            human_bytes(m.budget_bytes)
        )
    } else {
        String::new()
    };
    let pinned = if r.cells.iter().all(|c| c.pinned) {
        "every thread pinned to a CPU of its own"
    } else {
        "NOT every thread pinned: sched_setaffinity refused a CPU"
    };
    format!(
        "{} CPUs ({pinned}); {} pages modelled{cap}; buddy era {}\n\
         ns per operation per thread (the threads' mean), median [95 % interval] over trials; \
         bulk: an allocation (then a free) of each thread's share of half the memory; \
         repeat: an allocation and its free; rand: a free of a random held block (blocks shuffled between threads) and its replacement\n",
        r.cpus.len(),
        m.nr_pages,
        r.era
    )
}

/// One table: an allocator per line, a thread count per column.
fn table(
    r: &ScaleResults,
    workload: Workload,
    order: u8,
    pick: impl Fn(&ScaleCell) -> Option<&Measurement>,
    what: &str,
) -> String {
    let mut t = format!(
        "\n{} order {order}{what}\n{:<12}",
        workload.name(),
        "allocator"
    );
    for n in &r.counts {
        t += &format!(" {:>24}", threads_text(*n));
    }
    t += "\n";
    for id in allocators(r) {
        let mut line = format!("{:<12}", id.name());
        let mut any = false;
        for &n in &r.counts {
            let cell = r.cell(workload, order, id, n).and_then(&pick);
            any |= cell.is_some();
            line += &format!(" {:>24}", cell.map_or("n/a".into(), ns_cell));
        }
        if any {
            t += &line;
            t += "\n";
        }
    }
    t
}

/// The allocators that ran, in table order.
fn allocators(r: &ScaleResults) -> Vec<ScaleAllocatorId> {
    ScaleAllocatorId::ALL
        .iter()
        .copied()
        .filter(|id| r.cells.iter().any(|c| c.allocator == *id))
        .collect()
}

/// `median [lo, hi]` ns.
fn ns_cell(m: &Measurement) -> String {
    match Interval::of_median(&m.ns_per_op.trials) {
        Ok(i) => format!("{} [{}, {}]", fmt_ns(i.median), fmt_ns(i.lo), fmt_ns(i.hi)),
        Err(_) => fmt_ns(m.ns_per_op.median),
    }
}

/// The paper's figures beside pfnlab's, with how the runs differ.
fn paper(r: &ScaleResults) -> String {
    let mut t = String::from(
        "\nThe paper (Wrenger et al., USENIX ATC 2023; its kernel module, 26 cores, Linux's buddy and LLFree in the kernel) beside pfnlab:\n",
    );
    for (id, cores) in [
        (ScaleAllocatorId::Llfree, 1),
        (ScaleAllocatorId::BuddyPcp, 1),
        (ScaleAllocatorId::Llfree, 26),
        (ScaleAllocatorId::BuddyPcp, 26),
    ] {
        let Some(fig) = paper_figure(Workload::Bulk, 0, id, cores) else {
            continue;
        };
        let ours = r.cell(Workload::Bulk, 0, id, cores).map_or(
            format!("not run ({cores} threads not in this sweep)"),
            |c| ns_cell(&c.measurement),
        );
        t += &format!(
            "  bulk order 0, {cores:>2} core{}, {:<10}: paper {:>7} ns, pfnlab {ours}\n",
            if cores == 1 { "" } else { "s" },
            id.name(),
            fmt_ns(fig.ns_per_op)
        );
    }
    let (buddy, llfree) = PAPER_REPEAT_NS;
    t += &format!(
        "  repeat order 0: paper buddy per-CPU lists {} ns, LLFree {} ns (the lists win)\n",
        fmt_ns(buddy),
        fmt_ns(llfree)
    );
    t + "  The runs differ: the paper's allocations go through alloc_pages_node with real struct pages and page preparation; \
         pfnlab's keep the bookkeeping only, in user space, over the memory model, no frame touched; \
         pfnlab's LLFree checks every free; its rand pairs each free with a replacement where the paper frees each shuffled block once.\n"
}

/// LLFree over the buddy's per-CPU path, with its interval.
fn ratios(r: &ScaleResults) -> String {
    let comparisons = r.comparisons();
    if comparisons.is_empty() {
        return String::new();
    }
    let mut t = format!("\nRatios: median [95 % interval] of the paired trials ({MARKS})\n");
    for c in comparisons {
        t += &format!("  {:<48} {}\n", c.what, ratio_cell(&c.interval));
    }
    t
}

/// `1 thread`, `2 threads`.
pub(super) fn threads_text(n: usize) -> String {
    format!("{n} thread{}", if n == 1 { "" } else { "s" })
}
