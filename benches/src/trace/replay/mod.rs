//! Replaying a trace through an allocator over any model.
//!
//! Events go in timestamp order; each trace CPU gets its own per-CPU
//! handle (on the layout's first node). What each event does:
//! - `mm_page_alloc` allocates a block of the event's order with its GFP
//!   mask through that CPU's handle, and remembers which block stands for
//!   the trace's pfn (the replay's allocator hands out its own pfns); a
//!   failed kernel allocation (`page=NULL`) is counted, not replayed;
//! - `mm_page_free` frees the block that stands for the trace's pfn; a
//!   pfn allocated before the recording began is counted as unknown and
//!   skipped, and so is a free of another order than the allocation's
//!   (a block split by `split_page` and freed page by page);
//! - `mm_page_free_batched` never frees: it follows the `mm_page_free`
//!   of the same page (counted as paired, or unpaired);
//! - `mm_page_alloc_zone_locked` and `mm_page_pcpu_drain` are the
//!   kernel's own zone-side work: counted and compared with the replay's
//!   refills and drains, never allocated or freed again.

//!
//! Parts, bottom to top: `exact` (the trace's own pfn stream),
//! `end_state` (free lists against a machine's), `engine` (the options,
//! the results and the pass), `report` (the table and the rows); this
//! module runs a replay per model.

pub mod end_state;
mod engine;
mod exact;
mod floor;
mod per_cpu;
mod prior;
mod read;
mod report;
mod sample;
mod vmstat;

pub use engine::{
    AllocatorCounts, EventCounts, ModelCounts, ModelResults, PassTimes, ReplayOptions, ReplayResult,
};
pub use exact::{EXACT_MAX_PFNS, ExactResult, trace_pfns};
pub use per_cpu::CpuCounts;
pub use read::{ReadTrace, TimedReplay, replay_through};

use engine::run;
use exact::exact;
use prior::FromStart;
pub use report::{end_state_table, replay_comparisons, replay_rows, replay_table};

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Instant;

use buddy::{AllocError, Allocator, Kernel, Options};
use sparsemem::Layout;
use vmemmap::VmemmapOptions;

use crate::counting::{Counted, ModelOp};
use crate::layout_spec::{LayoutSpec, LoadError, Loaded};
use crate::models::{Buildable, ModelKind, ModelVisitor, with_model};
use crate::snapshot::StartState;
use crate::timing::next_set;
use crate::trace::TraceError;
use crate::trace::format::Header;
pub use crate::trace::format::OpenTrace;

/// Replays a trace read once into memory through one model type, as a
/// [`ModelVisitor`]: the model is built first (while another thread may
/// still be reading the trace), then a timed pass over it, `--exact`, and
/// with [`ReplayOptions::count_calls`] a counting pass over [`Counted`]
/// for the memory-model calls (its allocator built beside the first).
pub struct Replay<'a> {
    /// The trace, once read (waited for after the model is built).
    pub trace: &'a OnceLock<Result<ReadTrace, TraceError>>,
    /// How.
    pub options: ReplayOptions,
    /// Called with the events done so far, now and then.
    pub progress: &'a dyn Fn(u64),
    /// When this model's turn began, for its end-to-end time.
    pub started: Instant,
    /// The free lists every allocator starts from, if not boot's.
    pub start: Option<&'a StartState>,
}

impl ModelVisitor for Replay<'_> {
    type Output = Result<ReplayResult, TraceError>;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<Self::Output, AllocError> {
        let alloc_options = self.options.allocator_options();
        let mut alloc =
            Allocator::<M, Kernel>::new(M::build(layout, options)?, layout, alloc_options)?;
        // Built before the trace is waited for, so that its construction
        // overlaps the reading too.
        let mut counted = if self.options.count_calls {
            Some(Allocator::<_, Kernel>::new(
                Counted::new(M::build(layout, options)?),
                layout,
                alloc_options,
            )?)
        } else {
            None
        };
        let mut options_run = self.options;
        let (mut prior, mut counted_prior) = (FromStart::default(), FromStart::default());
        if let Some(start) = self.start {
            prior = FromStart::apply(start, &mut alloc)?;
            options_run.start_state_pages = prior.pages();
            if let Some(counted) = counted.as_mut() {
                counted_prior = FromStart::apply(start, counted)?;
            }
        }
        let trace = match self.trace.wait() {
            Ok(t) => t,
            Err(e) => return Ok(Err(e.clone())),
        };
        let timed = match run(&alloc, layout, trace, options_run, &prior, self.progress) {
            Ok(t) => t,
            Err(e) => return Ok(Err(e)),
        };
        let exact = self
            .options
            .exact
            .then(|| exact(alloc.model(), &trace_pfns(&trace.events), 5));
        drop(alloc);
        let model_ops =
            match counted.map(|c| count_calls(c, layout, trace, options_run, &counted_prior)) {
                Some(Ok(counts)) => Some(counts),
                Some(Err(e)) => return Ok(Err(e)),
                None => None,
            };
        Ok(Ok(ReplayResult::of_first_pass(
            timed,
            model_ops,
            exact,
            self.started,
        )))
    }
}

/// The memory-model calls of a replay of `trace`, counted on a pass over
/// `counted` (untimed); the allocator is freed before the answer.
fn count_calls<M: Buildable>(
    counted: Allocator<Counted<M>, Kernel>,
    layout: &Layout,
    trace: &ReadTrace,
    options: ReplayOptions,
    prior: &FromStart,
) -> Result<ModelCounts, TraceError> {
    // Count the replay's calls only, not the allocator's construction.
    counted.model().reset();
    run(&counted, layout, trace, options, prior, &|_| {})?;
    let model = counted.model();
    let ops = model.ops();
    let calls = ModelOp::ALL
        .into_iter()
        .map(|op| (op.name(), ops.count(op)))
        .collect::<BTreeMap<_, _>>();
    Ok(ModelCounts {
        calls,
        hole_hits: model.hole_hits(),
    })
}

/// A later trial of one model: a timed pass on an allocator built afresh
/// (the first pass left the last one's free lists behind).
struct Retime<'a> {
    trace: &'a ReadTrace,
    options: ReplayOptions,
    start: Option<&'a StartState>,
}

impl ModelVisitor for Retime<'_> {
    type Output = Result<PassTimes, TraceError>;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<Self::Output, AllocError> {
        let mut alloc = Allocator::<M, Kernel>::new(
            M::build(layout, options)?,
            layout,
            self.options.allocator_options(),
        )?;
        let mut options_run = self.options;
        let mut prior = FromStart::default();
        if let Some(start) = self.start {
            prior = FromStart::apply(start, &mut alloc)?;
            options_run.start_state_pages = prior.pages();
        }
        Ok(
            run(&alloc, layout, self.trace, options_run, &prior, &|_| {})
                .map(|p| PassTimes::of(&p)),
        )
    }
}

impl ReplayOptions {
    /// The options of the allocator a replay builds: the era's, with
    /// deferred init and `vm.defrag_mode` as asked, and the kernel's
    /// default sysctls with THP enabled from 5.13 as the `zoneinfo` view
    /// assumes, so that `min_free_kbytes` is khugepaged's
    /// (`set_recommended_min_free_kbytes`), as on the machines recordings
    /// come from; the watermarks, and with them the per-CPU `high_min`
    /// (`zone_highsize`), follow from it. [`replay_through`] over an
    /// allocator built with these replays as [`replay_models`] does.
    pub fn allocator_options(self) -> Options {
        Options {
            deferred_init: self.deferred_init,
            defrag_mode: self.defrag_mode,
            sysctls: buddy::Sysctls {
                thp: self.era >= buddy::Era::V5_13,
                ..buddy::Sysctls::default()
            },
            ..Options::for_era(self.era)
        }
    }
}

/// The layout a replay runs on: `recorded` (the recording's own), `host`,
/// `preset:NAME` or a layout file; by default the recording's layout when
/// it has one, else the host's.
pub fn replay_layout(
    spec: Option<&LayoutSpec>,
    header: Option<&Header>,
) -> Result<Loaded, LoadError> {
    let recorded = || -> Result<Loaded, LoadError> {
        let text = header
            .and_then(|h| h.layout.as_deref())
            .ok_or(LoadError::NotRecorded)?;
        let layout = Layout::from_toml(text).map_err(LoadError::Recorded)?;
        let source = match header.map(|h| h.kernel.as_str()) {
            Some(k) if !k.is_empty() => format!("recorded (kernel {k})"),
            _ => "recorded".to_owned(),
        };
        let layout = Layout::new(*layout.geometry(), layout.ranges().to_vec(), source)
            .map_err(LoadError::Recorded)?;
        Ok(Loaded {
            layout,
            fallback: None,
        })
    };
    match spec {
        Some(LayoutSpec::Recorded) => recorded(),
        Some(other) => other.load(),
        None if header.is_some_and(|h| h.layout.is_some()) => recorded(),
        None => LayoutSpec::Host.load(),
    }
}

/// Replays the trace `open` reads through each model of `kinds`. The trace
/// is read once, on threads of its own, while the first model is built;
/// every pass of every model then runs over the events in memory, which
/// are freed before the answer. A trace that
/// cannot be read stops everything; a model that cannot be built on the
/// layout is reported in its place.
pub fn replay_models(
    open: OpenTrace<'_>,
    layout: &Layout,
    kinds: &[ModelKind],
    options: ReplayOptions,
    progress: &dyn Fn(ModelKind, u64),
) -> Result<ModelResults, TraceError> {
    replay_models_from(open, layout, kinds, options, None, progress)
}

/// [`replay_models`] with every allocator started from `start`'s free
/// lists (a snapshot's) rather than boot's.
pub fn replay_models_from(
    open: OpenTrace<'_>,
    layout: &Layout,
    kinds: &[ModelKind],
    options: ReplayOptions,
    start: Option<&StartState>,
    progress: &dyn Fn(ModelKind, u64),
) -> Result<ModelResults, TraceError> {
    let trace = OnceLock::new();
    std::thread::scope(|s| {
        s.spawn(|| {
            // Set whatever happens, so that no model waits forever.
            let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                ReadTrace::read(open, options.skip_bad)
            }));
            trace.set(read.unwrap_or_else(|_| Err(TraceError::file("reading the trace panicked"))))
        });
        let mut out = Vec::new();
        let mut started = options.started.unwrap_or_else(Instant::now);
        for &kind in kinds {
            let visitor = Replay {
                trace: &trace,
                options,
                progress: &|n| progress(kind, n),
                started,
                start,
            };
            match with_model(kind, layout, visitor) {
                Ok(Ok(result)) => out.push((kind, Ok(result))),
                Ok(Err(trace)) => return Err(trace),
                Err(e) => out.push((kind, Err(e))),
            }
            started = Instant::now();
        }
        if let Some(Ok(trace)) = trace.get() {
            more_passes(&mut out, trace, layout, options, start)?;
        }
        Ok(out)
    })
}

/// Passes 2 to `options.trials` of every model that replayed, model by
/// model within each round, so that pass *i* of every model ran in the
/// same stretch of time; tags every result with one interleaved set.
fn more_passes(
    out: &mut ModelResults,
    trace: &ReadTrace,
    layout: &Layout,
    options: ReplayOptions,
    start: Option<&StartState>,
) -> Result<(), TraceError> {
    for _ in 1..options.trials.max(1) {
        for (kind, result) in out.iter_mut() {
            let Ok(r) = result else { continue };
            let retime = Retime {
                trace,
                options,
                start,
            };
            match with_model(*kind, layout, retime) {
                Ok(Ok(times)) => r.add_pass(times),
                Ok(Err(e)) => return Err(e),
                Err(e) => *result = Err(e),
            }
        }
    }
    let set = next_set();
    for r in out.iter_mut().filter_map(|(_, r)| r.as_mut().ok()) {
        r.interleaved_with = set;
    }
    Ok(())
}
