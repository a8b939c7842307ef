//! `scale`: the page allocator on many cores, as LLFree's evaluation
//! measured it (Wrenger, Rommel, Halbuer, Dietrich and Lohmann, "LLFree:
//! Scalable and Optionally-Persistent Page-Frame Allocation", USENIX ATC
//! 2023). The paper ran three workloads in a kernel module on a
//! 26-core machine, 1 to 26 cores, orders 0 and 9, against the Linux
//! buddy and LLFree ported into the kernel, and found the buddy's
//! order-0 allocations ten times slower on 26 cores than on one, LLFree's
//! barely slower.
//!
//! Here the same three workloads ([`workloads`]: `bulk`, `repeat`,
//! `rand`) run at orders 0 and 9 on 1, 2, 4, … and every CPU this process
//! may run on, each thread pinned to a CPU of its own, against:
//! - `buddy-pcp`: pfnlab's buddy (6.18 by default) through the per-CPU
//!   lists, one per-CPU handle per thread: the kernel's `alloc_pages`
//!   path, which since 5.14 takes order 9 (a THP) through the lists too;
//! - `buddy-zone`: the same buddy's zone path, the zone lock taken on
//!   every call;
//! - `llfree`: [`buddy::llfree`], one CPU index (and so one reservation)
//!   per thread;
//! - `frame-alloc` (feature `peers`): the lock-free summary-bitmap buddy
//!   of `bench peers`, shared by every thread, its frees checked as
//!   LLFree's are.
//!
//! The other peers of `bench peers` are left out: they are not
//! thread-safe (`buddy_system_allocator`'s `FrameAllocator` and
//! `bitmap-allocator`'s tree take `&mut self`; the lock-guarded form of
//! the first needs a feature this build leaves off), and behind a mutex
//! they would measure the mutex; `bitmap-allocator` has no order 9, and
//! the floor has no lock at all.
//!
//! Every figure is nanoseconds per operation per thread (the threads'
//! mean, as the artifact averages them), median with its 95 % interval
//! over trials whose runs of every allocator are interleaved.
//!
//! # Where pfnlab differs from the paper
//! The paper ran in the kernel, every allocation through
//! `alloc_pages_node` with real `struct page`s and page preparation;
//! pfnlab's allocators keep the bookkeeping only (the memory model's
//! `struct page`s, no frames touched, no page preparation), in user space,
//! on a memory sized from this machine ([`memory_pages`]). pfnlab's
//! LLFree checks every free (an order byte per frame), which the paper's
//! does not. `rand` pairs each free with its replacement (see
//! [`workloads`]), where the paper frees each shuffled block once.

mod measure;
mod render;
pub mod workloads;

use serde::Serialize;

use super::{Ctx, Experiment, ExperimentId};
use crate::error::RunError;
pub use crate::error::ScaleError;
use crate::report::{Row, Subject};
use crate::spread::Comparison;
use crate::timing::Measurement;
pub use measure::{ScaleCell, ScaleResults};

/// A workload of the paper's evaluation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// Every thread allocates its share of half the memory, then frees it.
    Bulk,
    /// Every thread allocates one block and frees it, over and over.
    Repeat,
    /// Every thread frees a random block of its own (blocks shuffled
    /// between threads) and allocates one in its place, over and over.
    Rand,
}

impl Workload {
    /// Every workload, in table order.
    pub const ALL: [Workload; 3] = [Workload::Bulk, Workload::Repeat, Workload::Rand];

    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Bulk => "bulk",
            Workload::Repeat => "repeat",
            Workload::Rand => "rand",
        }
    }
}

/// The orders every workload runs at: a base page and a 2 MiB huge page.
pub const ORDERS: [u8; 2] = [0, 9];

/// An allocator `bench scale` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScaleAllocatorId {
    /// The buddy through its per-CPU lists.
    BuddyPcp,
    /// The buddy's zone path.
    BuddyZone,
    /// LLFree.
    Llfree,
    /// `frame-alloc`'s lock-free `SummaryBuddyAllocator`.
    #[cfg(feature = "peers")]
    FrameAlloc,
}

impl ScaleAllocatorId {
    /// Every allocator this build has, in table order.
    pub const ALL: &'static [ScaleAllocatorId] = &[
        ScaleAllocatorId::BuddyPcp,
        ScaleAllocatorId::BuddyZone,
        ScaleAllocatorId::Llfree,
        #[cfg(feature = "peers")]
        ScaleAllocatorId::FrameAlloc,
    ];

    /// The name `--allocators` takes and reports use.
    pub fn name(self) -> &'static str {
        match self {
            ScaleAllocatorId::BuddyPcp => "buddy-pcp",
            ScaleAllocatorId::BuddyZone => "buddy-zone",
            ScaleAllocatorId::Llfree => "llfree",
            #[cfg(feature = "peers")]
            ScaleAllocatorId::FrameAlloc => "frame-alloc",
        }
    }

    /// Parses a name, or says which names exist.
    pub fn parse(name: &str) -> Result<ScaleAllocatorId, ScaleError> {
        Self::ALL
            .iter()
            .copied()
            .find(|a| a.name() == name)
            .ok_or_else(|| ScaleError::UnknownAllocator {
                name: name.to_owned(),
                known: Self::ALL
                    .iter()
                    .map(|a| a.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Whether it runs on the memory model (the buddy) or keeps its own
    /// frames.
    pub fn subject(self, model: crate::models::ModelKind) -> Subject {
        match self {
            ScaleAllocatorId::BuddyPcp | ScaleAllocatorId::BuddyZone => Subject::Model(model),
            _ => Subject::NoModel,
        }
    }
}

impl std::fmt::Display for ScaleAllocatorId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The thread counts of the sweep: `asked` (sorted, each once), or 1, 2,
/// 4, … below `online` and `online` itself. A count of 0, or one above
/// `online` (each thread needs a CPU of its own), is refused.
pub fn thread_counts(online: usize, asked: Option<&[usize]>) -> Result<Vec<usize>, ScaleError> {
    let mut counts = match asked {
        Some(list) => list.to_vec(),
        None => std::iter::successors(Some(1usize), |n| n.checked_mul(2))
            .take_while(|&n| n < online)
            .chain([online.max(1)])
            .collect(),
    };
    if counts.contains(&0) {
        return Err(ScaleError::NoThreads);
    }
    if let Some(&asked) = counts.iter().find(|&&n| n > online) {
        return Err(ScaleError::TooManyThreads { asked, online });
    }
    counts.sort_unstable();
    counts.dedup();
    Ok(counts)
}

/// Bytes per modelled page the run holds at once: the `struct page` (64),
/// LLFree's order byte and bitfield share, `frame-alloc`'s bitmaps, and the
/// workloads' lists of held blocks, rounded up.
pub const BYTES_PER_PAGE: u64 = 96;

/// Modelled memory of a full run: 4 GiB, or 256 MiB per CPU where that is
/// more, so that every thread's share stays large on a many-core machine.
pub const FULL_BYTES: (u64, u64) = (4 << 30, 256 << 20);
/// Modelled memory of a quick run: 64 MiB, or 8 MiB per CPU (two huge
/// pages per thread in half of it).
pub const QUICK_BYTES: (u64, u64) = (64 << 20, 8 << 20);

/// How much memory a run models, and what chose it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Memory {
    /// Pages modelled (a whole number of sections).
    pub nr_pages: u64,
    /// The bytes the run wanted to model.
    pub wanted_bytes: u64,
    /// The machine's budget: half its memory.
    pub budget_bytes: u64,
    /// Whether the budget cut the memory short of what was wanted.
    pub capped: bool,
}

/// The modelled memory for `online` CPUs, pages of `page_size` bytes in
/// sections of `section_pages`: `wanted` (`(floor, per CPU)`) unless
/// `memory_bytes` overrides it, and no more than `budget_bytes` holds at
/// [`BYTES_PER_PAGE`].
pub fn memory_pages(
    online: usize,
    wanted: (u64, u64),
    memory_bytes: Option<u64>,
    (page_size, section_pages): (u64, u64),
    budget_bytes: u64,
) -> Memory {
    let wanted_bytes =
        memory_bytes.unwrap_or_else(|| wanted.0.max(wanted.1.saturating_mul(online as u64)));
    let budget_pages = budget_bytes / BYTES_PER_PAGE;
    let pages = (wanted_bytes / page_size.max(1)).min(budget_pages);
    let section_pages = section_pages.max(1);
    Memory {
        nr_pages: (pages / section_pages).max(1) * section_pages,
        wanted_bytes,
        budget_bytes,
        capped: wanted_bytes / page_size.max(1) > budget_pages,
    }
}

/// `bench scale`'s parameters.
#[derive(Clone, Debug, Default)]
pub struct ScaleParams {
    /// `--threads`: the thread counts (default: 1, 2, 4, … and every CPU).
    pub threads: Option<Vec<usize>>,
    /// `--allocators`: which (default: every one this build has).
    pub allocators: Option<Vec<ScaleAllocatorId>>,
    /// `--memory-mib`: the memory modelled, if not the machine's default
    /// (still capped by the budget).
    pub memory_mib: Option<u64>,
}

/// A figure the paper reports (its Linux kernel module, 26-core machine).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PaperFigure {
    /// Nanoseconds per operation per core.
    pub ns_per_op: f64,
    /// The cores it ran on.
    pub cores: usize,
}

/// The paper's figures for a row: `bulk` at order 0 on 1 and 26 cores,
/// LLFree against the buddy (the kernel's order-0 path runs through the
/// per-CPU lists: `buddy-pcp`).
pub fn paper_figure(
    workload: Workload,
    order: u8,
    allocator: ScaleAllocatorId,
    threads: usize,
) -> Option<PaperFigure> {
    let ns_per_op = match (workload, order, allocator, threads) {
        (Workload::Bulk, 0, ScaleAllocatorId::Llfree, 1) => 82.75,
        (Workload::Bulk, 0, ScaleAllocatorId::BuddyPcp, 1) => 94.0,
        (Workload::Bulk, 0, ScaleAllocatorId::Llfree, 26) => 118.25,
        (Workload::Bulk, 0, ScaleAllocatorId::BuddyPcp, 26) => 983.75,
        _ => return None,
    };
    Some(PaperFigure {
        ns_per_op,
        cores: threads,
    })
}

/// The paper's `repeat` at order 0: the buddy's per-CPU lists beat LLFree
/// (ns per operation, buddy then LLFree).
pub const PAPER_REPEAT_NS: (f64, f64) = (112.0, 185.0);

/// A row's parameters.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct ScaleRowParams {
    /// The workload.
    pub workload: Workload,
    /// The order of every block.
    pub order: u8,
    /// Threads, each pinned to a CPU of its own.
    pub threads: usize,
    /// Whether every pin held.
    pub pinned: bool,
    /// Pages modelled.
    pub nr_pages: u64,
    /// Blocks (`bulk`, `rand`: held) or operations (`repeat`, `rand`) per
    /// thread.
    pub per_thread: u64,
}

/// A row's extra fields.
#[derive(Clone, Debug, Serialize)]
pub struct ScaleExtra {
    /// `bulk`'s free phase, ns per free per thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub free_ns_per_op: Option<Measurement>,
    /// The paper's figure for this row, where it reports one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paper: Option<PaperFigure>,
}

/// One row of `bench scale`'s report.
pub type ScaleRow = Row<ScaleAllocatorId, ScaleRowParams, ScaleExtra>;

/// The experiment `bench scale`.
pub struct Scale;

impl Experiment for Scale {
    const ID: ExperimentId = ExperimentId::Scale;
    type Params = ScaleParams;
    type Results = ScaleResults;
    type Row = ScaleRow;

    fn measure(ctx: &Ctx, params: &ScaleParams) -> Result<ScaleResults, RunError> {
        measure::measure(ctx, params)
    }

    fn rows(ctx: &Ctx, results: &ScaleResults) -> Vec<ScaleRow> {
        results.rows(ctx.model)
    }

    fn render(_: &Ctx, results: &ScaleResults) -> String {
        render::render(results)
    }

    fn comparisons(_: &Ctx, results: &ScaleResults) -> Vec<Comparison> {
        results.comparisons()
    }

    fn layout_label(_: &Ctx, results: &ScaleResults) -> String {
        results.layout.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_doubles_up_to_every_cpu_and_ends_on_it() {
        assert_eq!(thread_counts(1, None).unwrap(), [1]);
        assert_eq!(thread_counts(2, None).unwrap(), [1, 2]);
        assert_eq!(thread_counts(26, None).unwrap(), [1, 2, 4, 8, 16, 26]);
        assert_eq!(thread_counts(4, Some(&[2, 1, 2])).unwrap(), [1, 2]);
    }

    #[test]
    fn zero_threads_and_more_threads_than_cpus_are_refused() {
        assert_eq!(thread_counts(2, Some(&[0])), Err(ScaleError::NoThreads));
        let e = thread_counts(2, Some(&[1, 3])).unwrap_err();
        assert_eq!(
            e,
            ScaleError::TooManyThreads {
                asked: 3,
                online: 2
            }
        );
        assert!(e.to_string().contains("2 CPUs"), "{e}");
    }

    #[test]
    fn an_unknown_allocator_is_refused_with_the_known_names() {
        assert_eq!(
            ScaleAllocatorId::parse("llfree"),
            Ok(ScaleAllocatorId::Llfree)
        );
        let e = ScaleAllocatorId::parse("slab").unwrap_err();
        assert!(
            e.to_string().contains("buddy-pcp, buddy-zone, llfree"),
            "{e}"
        );
    }

    #[test]
    fn memory_grows_with_the_cpus_and_stops_at_the_budget() {
        let geometry = (4096, 32_768);
        let m = memory_pages(2, FULL_BYTES, None, geometry, 64 << 30);
        assert_eq!((m.nr_pages, m.capped), (1 << 20, false));
        let m = memory_pages(64, FULL_BYTES, None, geometry, 64 << 30);
        assert_eq!(m.nr_pages, (16u64 << 30) >> 12);
        // 64 MiB at 96 bytes a page holds 699,050 pages: 21 sections.
        let m = memory_pages(2, FULL_BYTES, None, geometry, 64 << 20);
        assert!(m.capped && m.nr_pages * BYTES_PER_PAGE <= 64 << 20, "{m:?}");
        assert_eq!(m.nr_pages % 32_768, 0);
    }
}
