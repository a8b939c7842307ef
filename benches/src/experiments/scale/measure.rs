//! The sweep: every workload at every order and thread count, the trials
//! of every allocator interleaved (one run of each in turn, after one
//! warm-up run of each), on one buddy, one LLFree and one peer built once
//! over the same modelled memory.

use buddy::llfree::LLFree;
use buddy::{AllocError, Allocator, Kernel};
use sparsemem::{Layout, MemRange, Order, RangeKind};
use vmemmap::VmemmapOptions;

use super::workloads::{self, PcpPath, RandShape, Run, ScaleAllocator, ZonePath};
use super::{
    FULL_BYTES, Memory, ORDERS, QUICK_BYTES, ScaleAllocatorId, ScaleError, ScaleExtra, ScaleParams,
    ScaleRow, ScaleRowParams, Workload, memory_pages, paper_figure, thread_counts,
};
use crate::error::RunError;
use crate::experiments::Ctx;
use crate::models::{Buildable, ModelKind, ModelVisitor, build_allocator, with_model_options};
use crate::report::Row;
use crate::spread::Comparison;
use crate::threads::online_cpus;
use crate::timing::{Measurement, Plan, next_set};

/// One workload at one order and thread count, on one allocator.
#[derive(Clone, Debug)]
pub struct ScaleCell {
    /// The workload.
    pub workload: Workload,
    /// The order of every block.
    pub order: u8,
    /// The allocator.
    pub allocator: ScaleAllocatorId,
    /// Threads, each on a CPU of its own.
    pub threads: usize,
    /// Blocks or operations per thread ([`ScaleRowParams::per_thread`]).
    pub per_thread: u64,
    /// Whether every pin of every trial held.
    pub pinned: bool,
    /// ns per operation per thread, per trial.
    pub measurement: Measurement,
    /// `bulk`'s free phase.
    pub free: Option<Measurement>,
}

/// What `bench scale` measured.
#[derive(Clone, Debug)]
pub struct ScaleResults {
    /// The CPUs this process may run on (thread `t` ran on the `t`-th).
    pub cpus: Vec<usize>,
    /// The thread counts swept.
    pub counts: Vec<usize>,
    /// The memory modelled.
    pub memory: Memory,
    /// The modelled layout's name.
    pub layout: String,
    /// The buddy's era.
    pub era: buddy::Era,
    /// Every cell, workload by workload, order by order, count by count.
    pub cells: Vec<ScaleCell>,
}

impl ScaleResults {
    /// The cell of `allocator` for `workload` at `order` and `threads`.
    pub fn cell(
        &self,
        workload: Workload,
        order: u8,
        allocator: ScaleAllocatorId,
        threads: usize,
    ) -> Option<&ScaleCell> {
        self.cells.iter().find(|c| {
            (c.workload, c.order, c.allocator, c.threads) == (workload, order, allocator, threads)
        })
    }

    /// The JSON rows, the buddy's on `model`.
    pub fn rows(&self, model: ModelKind) -> Vec<ScaleRow> {
        self.cells
            .iter()
            .map(|c| {
                let params = ScaleRowParams {
                    workload: c.workload,
                    order: c.order,
                    threads: c.threads,
                    pinned: c.pinned,
                    nr_pages: self.memory.nr_pages,
                    per_thread: c.per_thread,
                };
                let extra = ScaleExtra {
                    free_ns_per_op: c.free.clone(),
                    paper: paper_figure(c.workload, c.order, c.allocator, c.threads),
                };
                let subject = c.allocator.subject(model);
                Row::new(c.allocator, subject, params, c.measurement.clone(), extra)
            })
            .collect()
    }

    /// LLFree over the buddy's per-CPU path, every workload and order, on
    /// one thread and on the most: the ratios the reading states.
    pub fn comparisons(&self) -> Vec<Comparison> {
        let (Some(&first), Some(&last)) = (self.counts.first(), self.counts.last()) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for workload in Workload::ALL {
            for order in ORDERS {
                for threads in [first, last]
                    .into_iter()
                    .collect::<std::collections::BTreeSet<_>>()
                {
                    let of = |a| self.cell(workload, order, a, threads);
                    let (Some(l), Some(b)) =
                        (of(ScaleAllocatorId::Llfree), of(ScaleAllocatorId::BuddyPcp))
                    else {
                        continue;
                    };
                    let what = format!(
                        "{} order {order}, {}: llfree / buddy-pcp",
                        workload.name(),
                        super::render::threads_text(threads)
                    );
                    out.extend(Comparison::of(what, &l.measurement, &b.measurement));
                }
            }
        }
        out
    }
}

/// Runs the sweep `ctx` and `params` ask for.
pub(super) fn measure(ctx: &Ctx, params: &ScaleParams) -> Result<ScaleResults, RunError> {
    let cpus = online_cpus();
    let counts = thread_counts(cpus.len(), params.threads.as_deref())?;
    let allocators = params
        .allocators
        .clone()
        .unwrap_or_else(|| ScaleAllocatorId::ALL.to_vec());
    let g = *ctx.layout.geometry();
    let wanted = if ctx.plan.scale < 1.0 {
        QUICK_BYTES
    } else {
        FULL_BYTES
    };
    let memory = memory_pages(
        cpus.len(),
        wanted,
        params.memory_mib.map(|mib| mib << 20),
        (g.page_size(), g.pages_per_section()),
        sparsemem::memmap::host_memory_bytes() / 2,
    );
    let most = counts.last().copied().unwrap_or(1);
    let huge = Order::new(ORDERS[ORDERS.len() - 1]);
    if (memory.nr_pages / 2) >> huge.get() < most as u64 {
        return Err(ScaleError::TooSmall {
            nr_pages: memory.nr_pages,
            order: huge.get(),
            threads: most,
        }
        .into());
    }
    let name = format!(
        "scale: {} of RAM from pfn 0",
        crate::units::human_bytes(memory.nr_pages << g.page_shift())
    );
    let range = MemRange::new(0, memory.nr_pages << g.page_shift(), RangeKind::Ram, 0);
    let layout = Layout::new(g, vec![range], name.clone())
        .map_err(|e| RunError::Layout(crate::layout_spec::LoadError::Layout(e)))?;
    let sweep = Sweep {
        plan: ctx.plan,
        options: ctx.options(),
        cpus: &cpus,
        counts: &counts,
        allocators: &allocators,
        nr_pages: memory.nr_pages,
        progress: ctx.progress,
    };
    let cells = ctx.named(with_model_options(
        ctx.model,
        &layout,
        VmemmapOptions::default(),
        sweep,
    ))??;
    Ok(ScaleResults {
        cpus,
        counts,
        memory,
        layout: name,
        era: ctx.era,
        cells,
    })
}

/// The sweep over one model type.
struct Sweep<'s> {
    plan: Plan,
    options: buddy::Options,
    cpus: &'s [usize],
    counts: &'s [usize],
    allocators: &'s [ScaleAllocatorId],
    nr_pages: u64,
    progress: &'s dyn crate::experiments::Progress,
}

impl ModelVisitor for Sweep<'_> {
    type Output = Result<Vec<ScaleCell>, ScaleError>;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<Self::Output, AllocError> {
        let alloc = build_allocator::<M, Kernel>(layout, options, self.options)?;
        let most = self.counts.last().copied().unwrap_or(1);
        let runners = match self.runners(&alloc, layout, most) {
            Ok(r) => r,
            Err(e) => return Ok(Err(e)),
        };
        Ok(self.sweep(&runners))
    }
}

impl Sweep<'_> {
    /// One runner per allocator asked for, over the same memory.
    fn runners<'a, M: Buildable>(
        &self,
        alloc: &'a Allocator<M, Kernel>,
        layout: &Layout,
        most: usize,
    ) -> Result<Vec<Box<dyn Runner + 'a>>, ScaleError> {
        let node = layout.first_node();
        let mut out: Vec<Box<dyn Runner + 'a>> = Vec::new();
        for &id in self.allocators {
            out.push(match id {
                ScaleAllocatorId::BuddyPcp => Box::new(Driven(id, PcpPath { alloc, node })),
                ScaleAllocatorId::BuddyZone => Box::new(Driven(id, ZonePath { alloc, node })),
                ScaleAllocatorId::Llfree => {
                    let llfree =
                        LLFree::new(self.nr_pages, most).map_err(|e| ScaleError::Refused {
                            allocator: "llfree",
                            why: e.to_string(),
                        })?;
                    Box::new(Driven(id, llfree))
                }
                #[cfg(feature = "peers")]
                ScaleAllocatorId::FrameAlloc => {
                    let peer = crate::experiments::peers::crates::CheckedSummaryBuddy::new(layout)
                        .map_err(|e| ScaleError::Refused {
                            allocator: "frame-alloc",
                            why: e.to_string(),
                        })?;
                    Box::new(Driven(id, peer))
                }
            });
        }
        Ok(out)
    }

    /// Every workload, order and count, the runners' trials interleaved.
    fn sweep(&self, runners: &[Box<dyn Runner + '_>]) -> Result<Vec<ScaleCell>, ScaleError> {
        let mut cells = Vec::new();
        for workload in Workload::ALL {
            for order in ORDERS {
                for &threads in self.counts {
                    self.progress.stage(format!(
                        "{} order {order}, {}",
                        workload.name(),
                        super::render::threads_text(threads)
                    ));
                    let shape = self.shape(workload, Order::new(order), threads);
                    cells.extend(self.trials(runners, shape)?);
                }
            }
        }
        Ok(cells)
    }

    /// The shape of one cell: the blocks each thread holds (a share of
    /// half the memory) and the operations it does.
    fn shape(&self, workload: Workload, order: Order, threads: usize) -> Shape<'_> {
        let blocks_each = ((self.nr_pages / 2) >> order.get()) / threads as u64;
        Shape {
            workload,
            order,
            cpus: &self.cpus[..threads],
            blocks_each,
            ops_each: self.plan.iters(200_000, 2_000) >> ops_shift(order),
        }
    }

    /// One warm-up run of each runner, then the plan's trials, one run of
    /// each in turn.
    fn trials(
        &self,
        runners: &[Box<dyn Runner + '_>],
        shape: Shape<'_>,
    ) -> Result<Vec<ScaleCell>, ScaleError> {
        for r in runners {
            r.run(&shape)?;
        }
        let mut runs: Vec<Vec<Run>> = vec![Vec::new(); runners.len()];
        for _ in 0..self.plan.trials.max(1) {
            for (r, out) in runners.iter().zip(&mut runs) {
                out.push(r.run(&shape)?);
            }
        }
        let set = next_set();
        Ok(runners
            .iter()
            .zip(runs)
            .map(|(r, runs)| shape.cell(r.id(), &runs, set))
            .collect())
    }
}

/// How many times fewer operations a thread does at `order` than at order
/// 0: 16 above order 3 (a huge page's operation touches 512 pages'
/// `struct page`s on the buddy's paths, so a sixteenth as many keeps a
/// cell's run short), none below.
fn ops_shift(order: Order) -> u32 {
    if order.get() > 3 { 4 } else { 0 }
}

/// One cell's workload and size.
struct Shape<'c> {
    workload: Workload,
    order: Order,
    cpus: &'c [usize],
    blocks_each: u64,
    ops_each: u64,
}

impl Shape<'_> {
    /// The cell of `id` from its trials' runs, tagged as set `set`.
    fn cell(&self, id: ScaleAllocatorId, runs: &[Run], set: u64) -> ScaleCell {
        let ns = runs.iter().map(|r| r.ns_per_op).collect();
        let free: Vec<f64> = runs.iter().filter_map(|r| r.free_ns_per_op).collect();
        ScaleCell {
            workload: self.workload,
            order: self.order.get(),
            allocator: id,
            threads: self.cpus.len(),
            per_thread: match self.workload {
                Workload::Bulk => self.blocks_each,
                Workload::Repeat | Workload::Rand => self.ops_each,
            },
            pinned: runs.iter().all(|r| r.pinned),
            measurement: Measurement::from_ns(ns).in_set(set),
            free: (!free.is_empty()).then(|| Measurement::from_ns(free).in_set(set)),
        }
    }
}

/// An allocator as the sweep drives it (object-safe over
/// [`ScaleAllocator`]'s handle types).
trait Runner {
    /// Which allocator.
    fn id(&self) -> ScaleAllocatorId;
    /// One run of `shape`'s workload.
    fn run(&self, shape: &Shape<'_>) -> Result<Run, ScaleError>;
}

/// A [`ScaleAllocator`] with its name.
struct Driven<A>(ScaleAllocatorId, A);

impl<A: ScaleAllocator> Runner for Driven<A> {
    fn id(&self) -> ScaleAllocatorId {
        self.0
    }

    fn run(&self, s: &Shape<'_>) -> Result<Run, ScaleError> {
        match s.workload {
            Workload::Bulk => workloads::bulk(&self.1, s.cpus, s.order, s.blocks_each),
            Workload::Repeat => workloads::repeat(&self.1, s.cpus, s.order, s.ops_each),
            Workload::Rand => {
                let shape = RandShape {
                    blocks_each: s.blocks_each,
                    ops_each: s.ops_each,
                    seed: 0x5ca1_e5ee_d000_0001,
                };
                workloads::rand(&self.1, s.cpus, s.order, shape)
            }
        }
    }
}
