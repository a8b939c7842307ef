//! `memdesc`: `struct page` at 64, 32, 16 and 8 bytes, on every
//! memory model, the sizes' trials interleaved so that each size pairs
//! with 64 bytes:
//! - `pfn_valid` on random valid pfns of the run's layout, and the
//!   memmap each size leaves resident there (the models' counters; for
//!   the vmemmap models the kernel's `Rss` of the reservation);
//! - a random `pfn_to_page` plus a `page_zonenum` read, one dependent chain,
//!   over spans of pfns swept from a 64-byte memmap that fits in the L2
//!   to an 8-byte one four times the LLC (on a layout of one RAM range
//!   made for the sweep), and the span at which each size starts missing
//!   the LLC ([`sweep`]);
//! - the allocator's rows ([`alloc`]) at the sizes the allocator runs at:
//!   order-0 pcp alloc+free, the zone path's split+merge pair, bulk-128,
//!   and a replay of a recording (the shipped one by default). Sizes it
//!   does not run at yet say so in one line and give no rows.
//!
//! Every ratio to 64 bytes carries its paired interval (the runner's
//! [`Comparison`]s), and the table calls one a direction only outside it.
//!
//! Modules, bottom to top: `build` (any model at any size), `sweep`,
//! `alloc` (the allocator's rows), `sized` (the sized models and the
//! visitor over model and size), `render`; this file runs them.

pub mod alloc;
pub mod build;
mod render;
pub mod sized;
pub mod sweep;

use std::path::{Path, PathBuf};

use buddy::AllocError;
use sparsemem::{Layout, MemRange, MemmapBytes, PageSize, Pfn, RangeKind};
use vmemmap::VmemmapOptions;

use self::alloc::{AllocWork, SizedAllocator, sized_allocator};
use self::sized::{BuildableAt, SizedModel, SizedVisitor, build_sized, with_model_at};
use self::sweep::starts_missing;
pub use self::sweep::{CacheSizes, SweepCap, parse_cache_size};
use super::{Ctx, Experiment, ExperimentId};
use crate::error::RunError;
use crate::models::ModelKind;
use crate::spread::{Comparison, Interval};
use crate::timing::{Measurement, Plan, next_set};
use crate::trace::format::TraceReader;
use crate::workloads::valid_pfns;

pub use render::{MemdescExtra, MemdescParams, MemdescRow, MemdescWork};

/// `bench memdesc`'s own options.
#[derive(Clone, Debug, Default)]
pub struct MemdescOptions {
    /// `--page-size`: this size beside 64 bytes (default: all four).
    pub size: Option<PageSize>,
    /// `--max-span-mib`: the largest span swept, in MiB of RAM (default:
    /// an 8-byte memmap four times the LLC).
    pub max_span_mib: Option<u64>,
    /// `--cache-sizes`: size the sweep for these caches rather than this
    /// machine's sysfs (another machine's, or a test's).
    pub caches: Option<CacheSizes>,
    /// `--memmap-budget-mib`: the memmap bytes the sizes' sweep models may
    /// hold at once, if less than this machine's budget (half its memory).
    pub memmap_budget_bytes: Option<u64>,
    /// `--trace`: the recording the replay row replays (default
    /// [`alloc::shipped_trace`]).
    pub trace: Option<PathBuf>,
}

impl MemdescOptions {
    /// The sizes to run, 64 bytes first (the reference).
    pub fn sizes(&self) -> Vec<PageSize> {
        match self.size {
            None => PageSize::ALL.to_vec(),
            Some(PageSize::B64) => vec![PageSize::B64],
            Some(s) => vec![PageSize::B64, s],
        }
    }
}

/// One size on one model.
#[derive(Clone, Debug)]
pub struct SizeRun {
    /// The size.
    pub size: PageSize,
    /// The memmap on the run's layout.
    pub memmap: MemmapBytes,
    /// `pfn_valid` on random valid pfns.
    pub pfn_valid: Measurement,
    /// The chase at each span of [`MemdescResults::spans`].
    pub sweep: Vec<Measurement>,
    /// The allocator's rows.
    pub alloc: AllocRun,
}

impl SizeRun {
    /// The index of the span it starts missing the LLC at.
    pub fn starts_missing(&self, spans: &[u64], caches: &CacheSizes) -> Option<usize> {
        let costs: Option<Vec<Interval>> = self
            .sweep
            .iter()
            .map(|m| Interval::of_median(&m.ns_per_op.trials).ok())
            .collect();
        starts_missing(spans, &costs?, self.size.bytes(), caches.llc_bytes)
    }
}

/// The allocator's rows at one size.
#[derive(Clone, Debug)]
pub struct AllocRun {
    /// Order-0 alloc+free through a per-CPU list.
    pub pcp: Measurement,
    /// Order-0 alloc+free on the zone path (split and merges).
    pub split_merge: Measurement,
    /// Per page of a 128-page bulk array and its frees.
    pub bulk: Measurement,
    /// Per event of the recording's replay, or why it could not replay.
    pub replay: Result<Measurement, String>,
}

/// One model's sizes.
#[derive(Clone, Debug)]
pub struct ModelRun {
    /// In [`MemdescOptions::sizes`] order, 64 bytes first.
    pub sizes: Vec<SizeRun>,
}

/// What `bench memdesc` measures.
#[derive(Clone, Debug)]
pub struct MemdescResults {
    /// The caches the sweep was sized for: this machine's, or those given
    /// ([`MemdescOptions::caches`]).
    pub caches: CacheSizes,
    /// Whether [`MemdescResults::caches`] were given rather than read.
    pub caches_given: bool,
    /// The spans swept, in pages, ascending.
    pub spans: Vec<u64>,
    /// Why the sweep stops where it does, when not where the caches put
    /// its top ([`SweepCap`]).
    pub cap: Option<SweepCap>,
    /// The sweep layout's page size in bytes.
    pub page_bytes: u64,
    /// RAM bytes of the run's layout (for bytes per TiB).
    pub ram_bytes: u64,
    /// The file name of the recording the replay rows replayed.
    pub trace: String,
    /// Each model's run, or why it was not built.
    pub models: Vec<(ModelKind, Result<ModelRun, String>)>,
}

/// The layout the sweep runs on: one RAM range of `top` pages from pfn
/// 0, in `like`'s geometry, rounded up to whole sections.
pub fn sweep_layout(like: &Layout, top: u64) -> Result<Layout, sparsemem::LayoutError> {
    let g = *like.geometry();
    let section_bytes = g.pages_per_section() << g.page_shift();
    let bytes = (top << g.page_shift()).next_multiple_of(section_bytes);
    let range = MemRange::new(0, bytes, RangeKind::Ram, 0);
    Layout::new(g, vec![range], "memdesc-sweep")
}

/// What a size needs built to be measured.
struct Rigs {
    models: Vec<Box<dyn SizedModel>>,
}

impl Rigs {
    fn build(kind: ModelKind, sizes: &[PageSize], layout: &Layout) -> Result<Rigs, AllocError> {
        let models = sizes
            .iter()
            .map(|&s| build_sized(kind, s, layout, VmemmapOptions::default()))
            .collect::<Result<_, _>>()?;
        Ok(Rigs { models })
    }
}

/// One model: lookups on the run's layout, the sweep, the allocator.
fn measure_model(
    ctx: &Ctx,
    kind: ModelKind,
    sizes: &[PageSize],
    sweep: (&Layout, &[u64]),
    trace: &Path,
) -> Result<ModelRun, AllocError> {
    let plan = ctx.plan;
    let stage = |what: &str| ctx.progress.stage(format!("{kind}: {what}"));
    stage("pfn_valid and the memmap");
    let mut rigs = Rigs::build(kind, sizes, &ctx.layout)?;
    let memmaps: Vec<MemmapBytes> = rigs.models.iter().map(|m| m.memmap()).collect();
    let pfns = valid_pfns(&ctx.layout, plan.iters(1 << 20, 4096) as usize, 3);
    let pfn_valid = plan.measure_interleaved(&mut rigs.models, |m| {
        std::hint::black_box(m.count_valid(&pfns));
        pfns.len() as u64
    });
    drop(rigs);
    stage("random pfn_to_page over the spans");
    let (sweep_layout, spans) = sweep;
    let mut rigs = Rigs::build(kind, sizes, sweep_layout)?;
    let n = plan.iters(1 << 19, 16_384);
    let by_span: Vec<Vec<Measurement>> = spans
        .iter()
        .map(|&span| {
            plan.measure_interleaved(&mut rigs.models, |m| {
                std::hint::black_box(m.chase(Pfn::new(0), span, n));
                n
            })
        })
        .collect();
    drop(rigs);
    stage("the allocator");
    let allocs = measure_allocators(ctx, kind, sizes, trace)?;
    let sizes = sizes
        .iter()
        .zip(allocs)
        .enumerate()
        .map(|(i, (&size, alloc))| SizeRun {
            size,
            memmap: memmaps[i],
            pfn_valid: pfn_valid[i].clone(),
            sweep: by_span.iter().map(|ms| ms[i].clone()).collect(),
            alloc,
        })
        .collect();
    Ok(ModelRun { sizes })
}

/// Builds `kind`'s allocator at `size`.
struct AllocVisitor {
    alloc_options: buddy::Options,
}

impl SizedVisitor for AllocVisitor {
    type Output = Result<Box<dyn SizedAllocator>, AllocError>;
    fn visit<M: BuildableAt>(self, layout: &Layout, options: VmemmapOptions) -> Self::Output {
        sized_allocator::<M>(layout, options, self.alloc_options)
    }
}

/// The allocator's rows at each size, the sizes' trials interleaved.
fn measure_allocators(
    ctx: &Ctx,
    kind: ModelKind,
    sizes: &[PageSize],
    trace: &Path,
) -> Result<Vec<AllocRun>, AllocError> {
    let plan = ctx.plan;
    let visitor = || AllocVisitor {
        alloc_options: ctx.options(),
    };
    let built: Vec<Box<dyn SizedAllocator>> = sizes
        .iter()
        .map(|&s| with_model_at(kind, s, &ctx.layout, VmemmapOptions::default(), visitor()))
        .collect::<Result<_, _>>()?;
    let mut running: Vec<&dyn SizedAllocator> = built.iter().map(|b| &**b).collect();
    let work = |running: &mut Vec<&dyn SizedAllocator>, work: AllocWork, n: u64, per: u64| {
        plan.measure_interleaved(running, |a| {
            std::hint::black_box(a.run(work, n));
            n * per
        })
    };
    let pcp = work(
        &mut running,
        AllocWork::Pcp,
        plan.iters(2_000_000, 20_000),
        1,
    );
    let split = work(
        &mut running,
        AllocWork::SplitMerge,
        plan.iters(200_000, 2_000),
        1,
    );
    let bulk_rounds = plan.iters(20_000, 200);
    let bulk = work(
        &mut running,
        AllocWork::Bulk,
        bulk_rounds,
        alloc::BULK_PAGES as u64,
    );
    let replay = replays(&running, plan, trace);
    Ok(pcp
        .into_iter()
        .zip(split)
        .zip(bulk)
        .zip(replay)
        .map(|(((pcp, split_merge), bulk), replay)| AllocRun {
            pcp,
            split_merge,
            bulk,
            replay,
        })
        .collect())
}

/// The replay at each size, trial by trial in turn after one warm-up
/// replay each; a fresh allocator per replay, built outside the timing.
fn replays(
    running: &[&dyn SizedAllocator],
    plan: Plan,
    trace: &Path,
) -> Vec<Result<Measurement, String>> {
    let mut ns: Vec<Result<Vec<f64>, String>> = vec![Ok(Vec::new()); running.len()];
    for round in 0..=plan.trials {
        for (a, out) in running.iter().zip(ns.iter_mut()) {
            let Ok(trials) = out else { continue };
            match a.replay(trace) {
                Ok(t) if round > 0 => trials.push(t),
                Ok(_) => {}
                Err(e) => *out = Err(e.to_string()),
            }
        }
    }
    let set = (running.len() > 1).then(next_set);
    ns.into_iter()
        .map(|r| {
            r.map(|t| {
                let m = Measurement::from_ns(t);
                match set {
                    Some(set) => m.in_set(set),
                    None => m,
                }
            })
        })
        .collect()
}

/// The experiment `bench memdesc`.
pub struct Memdesc;

impl Experiment for Memdesc {
    const ID: ExperimentId = ExperimentId::Memdesc;
    type Params = MemdescOptions;
    type Results = MemdescResults;
    type Row = MemdescRow;

    fn measure(ctx: &Ctx, options: &MemdescOptions) -> Result<MemdescResults, RunError> {
        let trace = options.trace.clone().unwrap_or_else(alloc::shipped_trace);
        // A recording that cannot be read is the run's error, not a
        // failed row at every size of every model.
        // Read through as a stream: a recording can be larger than memory.
        let reader = TraceReader::open(&trace).map_err(|e| RunError::Trace(e.to_string()))?;
        for event in reader {
            event.map_err(|e| RunError::Trace(e.to_string()))?;
        }
        let caches = options.caches.unwrap_or_else(CacheSizes::read);
        let page_bytes = ctx.layout.geometry().page_size();
        let sizes = options.sizes();
        let budget = options
            .memmap_budget_bytes
            .unwrap_or(u64::MAX)
            .min(sparsemem::memmap::host_memory_bytes() / 2);
        let step = if ctx.plan.scale < 1.0 { 2 } else { 1 };
        let (spans, cap) = sweep::capped_spans(
            &caches,
            step,
            options.max_span_mib.map(|mib| (mib << 20) / page_bytes),
            (budget, sizes.iter().map(|s| s.bytes()).sum()),
        );
        let top = *spans.last().expect("at least one span");
        let bytes_per_page: u64 = sizes.iter().map(|s| s.bytes()).sum();
        if top.saturating_mul(bytes_per_page) > budget {
            return Err(RunError::NothingMeasured {
                experiment: Self::ID.name(),
                why: format!(
                    "the smallest span, {top} pages, needs {} of memmap at once ({bytes_per_page} B per page), more than the memmap budget of {}",
                    crate::units::human_bytes(top * bytes_per_page),
                    crate::units::human_bytes(budget)
                ),
            });
        }
        let layout = sweep_layout(&ctx.layout, top)?;
        let mut models = Vec::new();
        for kind in ctx.models() {
            match measure_model(ctx, kind, &sizes, (&layout, &spans), &trace) {
                Ok(run) => models.push((kind, Ok(run))),
                // A model the user chose and the layout refuses at a size
                // is the run's error; among every model, one line of the
                // table.
                Err(source) if ctx.model_chosen => {
                    return Err(RunError::Model {
                        model: kind,
                        source,
                    });
                }
                Err(e) => models.push((kind, Err(e.to_string()))),
            }
            ctx.progress.advance();
        }
        Ok(MemdescResults {
            caches,
            caches_given: options.caches.is_some(),
            spans,
            cap,
            page_bytes,
            ram_bytes: ctx.layout.present_pages() * page_bytes,
            trace: trace.file_name().map_or_else(
                || trace.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            ),
            models,
        })
    }

    fn rows(ctx: &Ctx, results: &MemdescResults) -> Vec<MemdescRow> {
        render::rows(ctx, results)
    }

    fn render(ctx: &Ctx, results: &MemdescResults) -> String {
        render::render(ctx, results)
    }

    fn comparisons(_: &Ctx, results: &MemdescResults) -> Vec<Comparison> {
        render::comparisons(results)
    }
}
