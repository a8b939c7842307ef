//! `memmap-lifecycle`: when the memmap is written and where it lives
//! — deferred struct page init and memmap_on_memory, measured
//! on the library's own paths.
//!
//! Deferred init (`Options::deferred_init`, 6.18's rules):
//! - `deferred_init_memmap` on 1 and 2 threads, a fresh deferred build
//!   per trial: ns per page and GB of memmap (64-byte `struct page`s)
//!   written per second, the speedup, and beyond two threads a
//!   *projection* (Amdahl's law with the serial share the 1→2 speedup
//!   implies), set beside Daniel Jordan's 2020 figure for the merged
//!   series: the slowest node's init 1785.7 ms → 138.0 ms with 52 threads
//!   per node, 12.9×;
//! - the allocation that misses and grows the zone (`deferred_grow_zone`
//!   on the watermark miss of the per-CPU path, one section per grow),
//!   each timed on its own until the init is complete: p50, p99 and max,
//!   beside the other allocations of the window;
//! - the per-CPU alloc+free pair after completion: a build without
//!   deferred init, a deferred one after `page_alloc_init_late` turned
//!   the `deferred_pages` key off (the grow's compiled form is gone: the
//!   ratio should be 1 within the spread), and one whose init is done
//!   with the key still on.
//!
//! memmap_on_memory (a 2 GiB hot-add of 16 memory blocks after the
//! layout's last range; one block in 5.13):
//! - `add_memory` + `online_pages` per block, its memmap in the block
//!   (`MHP_MEMMAP_ON_MEMORY`) against in boot memory;
//! - the pfns each block loses, and its free blocks by order;
//! - random-pfn `pfn_to_page` + flags reads over each range. The run
//!   uses real frames here: a block added with its memmap on the memory
//!   has that memmap mapped on its own first frames (pages of a memfd,
//!   shared with the frames), the other's memmap is the vmemmap
//!   reservation's own memory. Both are this host's DRAM, so the pair
//!   shows what the placement changes in user space (page size of the
//!   mapping, shmem against anonymous memory), not the far-memory (CXL)
//!   locality price the kernel pays. The userfaultfd detectors cannot map
//!   a memmap on frames; there both memmaps are the reservation's and the
//!   rows say so (`memmap_on_frames: false`).

mod measure;

use serde::Serialize;
use sparsemem::LayoutError;

use super::{Ctx, Experiment, ExperimentId, cell};
use crate::error::RunError;
use crate::report::Row;
use crate::spread::{Comparison, Interval, ratio_cell};
use crate::timing::Measurement;
use crate::units::fmt_ns;
use measure::{INIT_THREADS, Visitor};

/// The experiment `bench memmap-lifecycle`.
pub struct MemmapLifecycle;

/// Jordan 2020 ("padata: parallelize deferred page init", v3, the version
/// merged as `e44431498f5f`): the slowest node's init, ms, with one thread
/// and with 52 threads per node.
pub const JORDAN_MS: (f64, f64) = (1785.7, 138.0);
/// The thread count of [`JORDAN_MS`].
pub const JORDAN_THREADS: usize = 52;

/// What a row measured.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LifecycleVariant {
    /// `deferred_init_memmap`, ns per page.
    DeferredInit,
    /// An allocation that grew the zone.
    GrowOnMiss,
    /// Another allocation of the deferred window.
    AllocInWindow,
    /// A per-CPU alloc+free pair after (or without) deferred init.
    AllocFree,
    /// `add_memory` + `online_pages`, per memory block.
    HotAdd,
    /// `pfn_to_page` + a flags read on a random hot-added pfn.
    PfnToPageFlags,
}

/// Which allocation path the alloc+free pair ran on.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BranchForm {
    /// A build without deferred init.
    NeverDeferred,
    /// A deferred build after `page_alloc_init_late`.
    KeyOff,
    /// A deferred build, init done, the key still on.
    KeyOn,
}

/// The forms, in report order (the first is the baseline).
pub const BRANCH_FORMS: [BranchForm; 3] = [
    BranchForm::NeverDeferred,
    BranchForm::KeyOff,
    BranchForm::KeyOn,
];

/// Where a hot-added block's memmap lives.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemmapIn {
    /// In the block's own first pfns (memmap_on_memory).
    TheBlock,
    /// In boot memory.
    BootMemory,
}

impl MemmapIn {
    /// Both, in report order.
    pub const ALL: [MemmapIn; 2] = [MemmapIn::TheBlock, MemmapIn::BootMemory];
}

/// Why the memmap_on_memory part did not run.
#[derive(Debug)]
pub enum HotAddRefused {
    /// No room for the hot-add after the layout's last range.
    NoRoom(LayoutError),
    /// The model or the allocator refused a step.
    Refused(buddy::AllocError),
}

impl std::fmt::Display for HotAddRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HotAddRefused::NoRoom(e) => write!(f, "no room to hot-add after the layout: {e}"),
            HotAddRefused::Refused(e) => e.fmt(f),
        }
    }
}

impl From<buddy::AllocError> for HotAddRefused {
    fn from(e: buddy::AllocError) -> Self {
        HotAddRefused::Refused(e)
    }
}

impl From<buddy::MemHotplugError> for HotAddRefused {
    fn from(e: buddy::MemHotplugError) -> Self {
        HotAddRefused::Refused(e.into())
    }
}

/// Deferred init's throughput.
#[derive(Clone, Debug)]
pub struct InitResults {
    /// Pages each run initialised.
    pub pages: u64,
    /// Their memmap, bytes.
    pub memmap_bytes: u64,
    /// ns per page, by thread count.
    pub by_threads: Vec<(usize, Measurement)>,
}

impl InitResults {
    /// The speedup of `threads` over one thread, with its interval.
    pub fn speedup(&self, threads: usize) -> Option<(f64, Option<Interval>)> {
        let one = &self.by_threads.first()?.1;
        let m = &self.by_threads.iter().find(|(t, _)| *t == threads)?.1;
        let i = Interval::between(one, m).ok();
        Some((one.ns_per_op.median / m.ns_per_op.median, i))
    }

    /// Amdahl's law at `threads` with the serial share the measured
    /// speedup at the second thread count implies (a projection).
    pub fn projected(&self, threads: usize) -> Option<f64> {
        let &(t2, _) = self.by_threads.get(1)?;
        let (s2, _) = self.speedup(t2)?;
        let n2 = t2 as f64;
        // s2 = 1 / (serial + (1 - serial) / n2)
        let serial = ((n2 / s2 - 1.0) / (n2 - 1.0)).clamp(0.0, 1.0);
        Some(1.0 / (serial + (1.0 - serial) / threads as f64))
    }
}

/// The allocations of the deferred window.
#[derive(Clone, Debug)]
pub struct GrowResults {
    /// Those that grew the zone (`None`: nothing was deferred).
    pub grew: Option<Measurement>,
    /// A sample of the others.
    pub plain: Option<Measurement>,
    /// Pages one grow initialises (a section).
    pub section_pages: u64,
}

/// memmap_on_memory against a memmap in boot memory.
#[derive(Clone, Debug)]
pub struct HotAddResults {
    /// Whether the in-block memmap was mapped on the block's own real
    /// frames (`false`: the model cannot, and both memmaps are the
    /// vmemmap reservation's memory).
    pub memmap_on_frames: bool,
    /// Memory blocks per add.
    pub blocks: u64,
    /// Pages per block.
    pub block_pages: u64,
    /// `add_memory` + `online_pages`, ns per block.
    pub add: Vec<(MemmapIn, Measurement)>,
    /// Pfns each block loses to its memmap, in [`MemmapIn::ALL`] order.
    pub lost_per_block: [u64; 2],
    /// The first block's free blocks by order, in the same order.
    pub free_by_order: [Vec<u64>; 2],
    /// Random-pfn `pfn_to_page` + flags, ns per read.
    pub reads: Vec<(MemmapIn, Measurement)>,
}

/// Everything the run measured.
#[derive(Debug)]
pub struct LifecycleResults {
    /// Deferred init's throughput.
    pub init: InitResults,
    /// The window's allocations.
    pub grow: GrowResults,
    /// The pair after completion, by form.
    pub branch: Vec<(BranchForm, Measurement)>,
    /// memmap_on_memory, or why it did not run.
    pub hot_add: Result<HotAddResults, HotAddRefused>,
}

/// A row's parameters.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct LifecycleParams {
    /// Threads of the deferred init.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
    /// The allocation path's form.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub form: Option<BranchForm>,
    /// Where the hot-added memmap lives.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memmap_in: Option<MemmapIn>,
    /// Pages per run (init) or per add.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nr_pages: Option<u64>,
}

/// A row's extra fields.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LifecycleExtra {
    /// GB of memmap written per second (deferred init).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memmap_gb_per_s: Option<f64>,
    /// Speedup over one thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speedup: Option<f64>,
    /// Its interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speedup_interval: Option<Interval>,
    /// A projection, not a measurement: Amdahl at [`JORDAN_THREADS`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub projected_speedup_52_threads: Option<f64>,
    /// Jordan's measured 12.9×.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub published_speedup_52_threads: Option<f64>,
    /// Percentiles of the samples (`ns_per_op.trials` holds them all).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50_ns: Option<f64>,
    /// 99th percentile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_ns: Option<f64>,
    /// How many samples.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples: Option<usize>,
    /// Ratio to the baseline form / the boot-memory memmap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_baseline: Option<f64>,
    /// Its interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_interval: Option<Interval>,
    /// Pfns each block loses to its memmap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pages_lost_per_block: Option<u64>,
    /// The first block's free blocks, by order 0..=MAX_PAGE_ORDER.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub free_blocks_by_order: Option<Vec<u64>>,
    /// memmap_on_memory rows: whether the in-block memmap lived on the
    /// block's own real frames.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memmap_on_frames: Option<bool>,
}

/// A row of the report.
pub type LifecycleRow = Row<LifecycleVariant, LifecycleParams, LifecycleExtra>;

/// The `q` quantile (nearest rank) of `values`.
pub fn percentile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len().max(1));
    sorted.get(rank - 1).copied().unwrap_or(f64::NAN)
}

/// Percentile extras of a sampled measurement.
fn samples_extra(m: &Measurement) -> LifecycleExtra {
    let t = &m.ns_per_op.trials;
    LifecycleExtra {
        p50_ns: Some(percentile(t, 0.5)),
        p99_ns: Some(percentile(t, 0.99)),
        samples: Some(t.len()),
        ..LifecycleExtra::default()
    }
}

/// `m` against `base`: the ratio and its interval.
fn ratio_extra(m: &Measurement, base: &Measurement) -> LifecycleExtra {
    LifecycleExtra {
        ratio_to_baseline: Some(m.ns_per_op.median / base.ns_per_op.median),
        ratio_interval: Interval::between(m, base).ok(),
        ..LifecycleExtra::default()
    }
}

impl Experiment for MemmapLifecycle {
    const ID: ExperimentId = ExperimentId::MemmapLifecycle;
    type Params = ();
    type Results = LifecycleResults;
    type Row = LifecycleRow;

    fn measure(ctx: &Ctx, _: &()) -> Result<LifecycleResults, RunError> {
        ctx.progress
            .stage("deferred init and memmap_on_memory".into());
        ctx.visit(Visitor {
            plan: ctx.plan,
            options: ctx.options(),
        })
    }

    fn rows(ctx: &Ctx, r: &LifecycleResults) -> Vec<LifecycleRow> {
        let mut rows = init_rows(ctx, &r.init);
        let grow = [
            (LifecycleVariant::GrowOnMiss, &r.grow.grew),
            (LifecycleVariant::AllocInWindow, &r.grow.plain),
        ];
        for (variant, m) in grow {
            if let Some(m) = m {
                let params = LifecycleParams::default();
                rows.push(Row::new(
                    variant,
                    ctx.model,
                    params,
                    m.clone(),
                    samples_extra(m),
                ));
            }
        }
        let base = &r.branch[0].1;
        for (form, m) in &r.branch {
            let params = LifecycleParams {
                form: Some(*form),
                ..LifecycleParams::default()
            };
            let extra = ratio_extra(m, base);
            rows.push(Row::new(
                LifecycleVariant::AllocFree,
                ctx.model,
                params,
                m.clone(),
                extra,
            ));
        }
        if let Ok(h) = &r.hot_add {
            rows.extend(hot_add_rows(ctx, h));
        }
        rows
    }

    fn render(ctx: &Ctx, r: &LifecycleResults) -> String {
        let mut t = render_init(&r.init);
        t += &render_grow(&r.grow);
        t += "\nthe per-CPU alloc+free pair once init is complete (interleaved trials)\n";
        let base = &r.branch[0].1;
        for (form, m) in &r.branch {
            let ratio = Interval::between(m, base).map_or("-".into(), |i| ratio_cell(&i));
            t += &format!(
                "  {:<16} {:>18}   x never-deferred {ratio}\n",
                form_name(*form),
                cell(m)
            );
        }
        t += "  (key-off runs the form without the grow: the dead branch is gone, not tested)\n";
        t += &match &r.hot_add {
            Ok(h) => render_hot_add(ctx, h),
            Err(e) => format!("\nmemmap_on_memory: not measured: {e}\n"),
        };
        t
    }

    fn comparisons(_: &Ctx, r: &LifecycleResults) -> Vec<Comparison> {
        let mut out = Vec::new();
        if let [(_, one), (t, two)] = &r.init.by_threads[..] {
            out.extend(Comparison::of(
                format!("deferred init: 1 / {t} threads"),
                one,
                two,
            ));
        }
        let base = &r.branch[0].1;
        for (form, m) in &r.branch[1..] {
            out.extend(Comparison::of(
                format!("alloc+free: {} / never-deferred", form_name(*form)),
                m,
                base,
            ));
        }
        if let Ok(h) = &r.hot_add {
            for (what, pair) in [("hot-add+online", &h.add), ("pfn_to_page+flags", &h.reads)] {
                out.extend(Comparison::of(
                    format!("{what}: memmap in the block / in boot memory"),
                    &pair[0].1,
                    &pair[1].1,
                ));
            }
        }
        out
    }
}

/// The deferred init's rows.
fn init_rows(ctx: &Ctx, init: &InitResults) -> Vec<LifecycleRow> {
    let last = init.by_threads.last().map(|(t, _)| *t);
    init.by_threads
        .iter()
        .map(|(threads, m)| {
            let speedup = init.speedup(*threads);
            let projecting = Some(*threads) == last && *threads > 1;
            let extra = LifecycleExtra {
                memmap_gb_per_s: Some(gb_per_s(m)),
                speedup: speedup.map(|s| s.0),
                speedup_interval: speedup.and_then(|s| s.1),
                projected_speedup_52_threads: init.projected(JORDAN_THREADS).filter(|_| projecting),
                published_speedup_52_threads: projecting.then_some(JORDAN_MS.0 / JORDAN_MS.1),
                ..LifecycleExtra::default()
            };
            let params = LifecycleParams {
                threads: Some(*threads),
                nr_pages: Some(init.pages),
                ..LifecycleParams::default()
            };
            Row::new(
                LifecycleVariant::DeferredInit,
                ctx.model,
                params,
                m.clone(),
                extra,
            )
        })
        .collect()
}

/// memmap_on_memory's rows.
fn hot_add_rows(ctx: &Ctx, h: &HotAddResults) -> Vec<LifecycleRow> {
    let mut rows = Vec::new();
    for (i, (place, m)) in h.add.iter().enumerate() {
        let params = LifecycleParams {
            memmap_in: Some(*place),
            nr_pages: Some(h.blocks * h.block_pages),
            ..LifecycleParams::default()
        };
        let extra = LifecycleExtra {
            pages_lost_per_block: Some(h.lost_per_block[i]),
            free_blocks_by_order: Some(h.free_by_order[i].clone()),
            memmap_on_frames: Some(h.memmap_on_frames),
            ..ratio_extra(m, &h.add[1].1)
        };
        rows.push(Row::new(
            LifecycleVariant::HotAdd,
            ctx.model,
            params,
            m.clone(),
            extra,
        ));
    }
    for (place, m) in &h.reads {
        let params = LifecycleParams {
            memmap_in: Some(*place),
            ..LifecycleParams::default()
        };
        let extra = LifecycleExtra {
            memmap_on_frames: Some(h.memmap_on_frames),
            ..ratio_extra(m, &h.reads[1].1)
        };
        rows.push(Row::new(
            LifecycleVariant::PfnToPageFlags,
            ctx.model,
            params,
            m.clone(),
            extra,
        ));
    }
    rows
}

/// GB of memmap per second from ns per page.
fn gb_per_s(m: &Measurement) -> f64 {
    sparsemem::PAGE_STRUCT_SIZE as f64 / m.ns_per_op.median
}

fn form_name(form: BranchForm) -> &'static str {
    match form {
        BranchForm::NeverDeferred => "never-deferred",
        BranchForm::KeyOff => "key-off",
        BranchForm::KeyOn => "key-on",
    }
}

fn render_init(init: &InitResults) -> String {
    let mut t = format!(
        "deferred_init_memmap: {} pages, {} MiB of memmap, a fresh deferred build per trial\n\
         {:>8} {:>12} {:>12} {:>20}\n",
        init.pages,
        init.memmap_bytes >> 20,
        "threads",
        "ns/page",
        "GB/s",
        "speedup"
    );
    for (threads, m) in &init.by_threads {
        let speedup = match init.speedup(*threads) {
            _ if *threads == INIT_THREADS[0] => "-".into(),
            Some((_, Some(i))) => ratio_cell(&i),
            Some((s, None)) => format!("{s:.2}x"),
            None => "-".into(),
        };
        t += &format!(
            "{threads:>8} {:>12} {:>12.2} {speedup:>20}\n",
            fmt_ns(m.ns_per_op.median),
            gb_per_s(m)
        );
    }
    if let Some(p) = init.projected(JORDAN_THREADS) {
        t += &format!(
            "projection, not a measurement: {p:.1}x at {JORDAN_THREADS} threads (Amdahl, the serial share \
             the 1->{} speedup implies) | published: {:.1}x ({:.0} ms -> {:.0} ms, Jordan 2020, \
             {JORDAN_THREADS} threads per node)\n",
            INIT_THREADS[1],
            JORDAN_MS.0 / JORDAN_MS.1,
            JORDAN_MS.0,
            JORDAN_MS.1
        );
    }
    t
}

fn render_grow(g: &GrowResults) -> String {
    let line = |what: &str, m: &Measurement| {
        let t = &m.ns_per_op.trials;
        format!(
            "  {what:<34} p50 {:>10}  p99 {:>10}  max {:>10}  ({} samples)\n",
            fmt_ns(percentile(t, 0.5)),
            fmt_ns(percentile(t, 0.99)),
            fmt_ns(m.ns_per_op.max),
            t.len()
        )
    };
    let mut t = format!(
        "\nallocations in the deferred window (order 0, per-CPU path; a grow writes {} pages)\n",
        g.section_pages
    );
    match &g.grew {
        Some(m) => t += &line("that grew the zone", m),
        None => t += "  nothing was deferred on this layout\n",
    }
    if let Some(m) = &g.plain {
        t += &line("the others (a sample)", m);
    }
    t
}

fn render_hot_add(ctx: &Ctx, h: &HotAddResults) -> String {
    let mib = (h.blocks * h.block_pages * ctx.layout.geometry().page_size()) >> 20;
    let mut t = format!(
        "\nmemmap_on_memory: a {mib} MiB hot-add ({} blocks of {} pages), era {}\n\
         {:>12} {:>18} {:>14} {:>22} {:>18}\n",
        h.blocks,
        h.block_pages,
        ctx.era,
        "memmap in",
        "add+online/block",
        "pages lost",
        "free blocks (order:n)",
        "pfn_to_page+flags"
    );
    for (i, place) in MemmapIn::ALL.into_iter().enumerate() {
        let orders: Vec<String> = h.free_by_order[i]
            .iter()
            .enumerate()
            .filter(|&(_, &n)| n > 0)
            .map(|(o, n)| format!("{o}:{n}"))
            .collect();
        t += &format!(
            "{:>12} {:>18} {:>14} {:>22} {:>18}\n",
            match place {
                MemmapIn::TheBlock => "the block",
                MemmapIn::BootMemory => "boot memory",
            },
            cell(&h.add[i].1),
            format!("{} of {}", h.lost_per_block[i], h.block_pages),
            orders.join(" "),
            cell(&h.reads[i].1),
        );
    }
    for (what, pair) in [("add+online", &h.add), ("pfn_to_page+flags", &h.reads)] {
        if let Ok(i) = Interval::between(&pair[0].1, &pair[1].1) {
            t += &format!("  {what}: the block / boot memory {}\n", ratio_cell(&i));
        }
    }
    t += if h.memmap_on_frames {
        "  (the block's memmap is mapped on its own first frames, a memfd's pages; boot memory's \
         is the vmemmap reservation's: both are this host's DRAM, so no far-memory price shows)\n"
    } else {
        "  (this model cannot map a memmap on frames: both memmaps are the reservation's memory, \
         so the read pair shows the lookup unchanged, not where the memmap lives)\n"
    };
    t
}
