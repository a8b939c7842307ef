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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use buddy::{AllocError, Allocator, Era, Kernel, Options, PerCpu, RequestError, Variant};
use serde::Serialize;
use sparsemem::{Layout, MemoryModel, NodeId, Order, Pfn};
use vmemmap::VmemmapOptions;

use super::format::{Header, ReadCounts, TraceReader};
use super::{Event, EventKind, TraceError};
use crate::counting::{Counted, ModelOp};
use crate::layout_spec::{LayoutSpec, LoadError, Loaded};
use crate::models::{Buildable, ModelKind, ModelVisitor, with_model};
use crate::report::JsonRow;
use crate::timing::{Measurement, Stat, measure, tsc_hz, tsc_now};
use serde_json::{Value, json};

/// How to replay (default: the 6.18 era, no checks, stop at a bad line).
#[derive(Clone, Copy, Debug, Default)]
pub struct ReplayOptions {
    /// The kernel era the allocator models.
    pub era: Era,
    /// Check every operation: blocks inside RAM, valid, never overlapping.
    pub verify: bool,
    /// Skip malformed lines instead of stopping at the first.
    pub skip_bad: bool,
    /// Also time the trace's own pfns through each model's lookups
    /// ([`ExactResult`]).
    pub exact: bool,
}

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

/// The pfns of the allocations and frees of the trace `open` reads, up to
/// [`EXACT_MAX_PFNS`].
pub fn trace_pfns(open: OpenTrace<'_>, skip_bad: bool) -> Result<Vec<Pfn>, TraceError> {
    let mut pfns = Vec::new();
    for event in open()?.skip_bad(skip_bad) {
        let event = event?;
        if matches!(event.kind, EventKind::Alloc | EventKind::Free)
            && let Some(p) = event.pfn
        {
            pfns.push(Pfn::new(p));
            if pfns.len() == EXACT_MAX_PFNS {
                break;
            }
        }
    }
    Ok(pfns)
}

/// One pass of the exact stream: valid pfns' descriptors read.
#[inline(never)]
fn exact_pass<M: MemoryModel>(model: &M, pfns: &[Pfn]) -> u64 {
    let mut acc = 0;
    for &p in pfns {
        if let Some(page) = model.pfn_to_page(p) {
            acc ^= page.flags();
        }
    }
    acc
}

fn exact<M: MemoryModel>(model: &M, pfns: &[Pfn], trials: usize) -> ExactResult {
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

/// Counts of what the replay did with the trace's events.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct EventCounts {
    /// Events replayed (all five kinds).
    pub events: u64,
    /// `mm_page_alloc` events that allocated.
    pub allocs: u64,
    /// Of those, allocations the replay's allocator refused, by reason.
    pub alloc_failures: BTreeMap<String, u64>,
    /// `mm_page_alloc` events of allocations the kernel failed.
    pub kernel_failed_allocs: u64,
    /// `mm_page_free` events that freed a block.
    pub frees: u64,
    /// Frees of pfns not allocated during the recording.
    pub unknown_frees: u64,
    /// Frees of another order than the allocation's (skipped).
    pub order_mismatch_frees: u64,
    /// Allocations of a trace pfn the replay still held (its free was not
    /// traced): the old block was freed first.
    pub untraced_frees: u64,
    /// `mm_page_free_batched` events after the same page's `mm_page_free`.
    pub batched_paired: u64,
    /// `mm_page_free_batched` events with no `mm_page_free` before them.
    pub batched_unpaired: u64,
    /// `mm_page_alloc_zone_locked` events.
    pub zone_locked: u64,
    /// Of those, per-CPU refills (`percpu_refill=1`).
    pub zone_locked_refills: u64,
    /// `mm_page_pcpu_drain` events.
    pub pcpu_drains: u64,
    /// Lines of other events and malformed lines skipped while reading.
    pub read: ReadCounts,
}

/// The allocator's side of a replay.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct AllocatorCounts {
    /// Buddy merges.
    pub merges: u64,
    /// Block splits.
    pub splits: u64,
    /// Per-CPU refills (`rmqueue_bulk` calls).
    pub pcp_refills: u64,
    /// Per-CPU drains (`free_pcppages_bulk`).
    pub pcp_drains: u64,
    /// Blocks those refills took from the zone (the trace's
    /// `percpu_refill=1` events count the same).
    pub pcp_refill_blocks: u64,
    /// Blocks those drains gave back (the trace's `mm_page_pcpu_drain`
    /// events count the same).
    pub pcp_drain_blocks: u64,
    /// Zone-lock acquisitions.
    pub zone_lock_acquisitions: u64,
    /// Free blocks per order at the end (per-CPU lists drained).
    pub free_blocks: Vec<u64>,
    /// The kernel's `fragmentation_index` at `pageblock_order` over all
    /// zones, in thousandths (-1000: a free block of that order exists).
    pub fragmentation_index: i64,
    /// Pages the replay still holds at the end.
    pub held_pages: u64,
    /// free + held == managed at the end.
    pub conserved: bool,
}

/// The memory model's side: calls during the replay (a second pass over a
/// counting model).
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct ModelCounts {
    /// Calls per operation, by the kernel function's name.
    pub calls: BTreeMap<&'static str, u64>,
    /// `pfn_valid` calls that said "hole".
    pub hole_hits: u64,
}

/// One model's replay.
#[derive(Clone, Debug, Serialize)]
pub struct ReplayResult {
    /// The model.
    pub model: String,
    /// Wall time of the timed pass, reading and parsing included, in ns.
    pub elapsed_ns: f64,
    /// Events per second of the timed pass.
    pub events_per_second: f64,
    /// ns per event, parsing included.
    pub ns_per_event: f64,
    /// ns per replayed allocation (the call alone).
    pub ns_per_alloc: f64,
    /// ns per replayed free (the call alone).
    pub ns_per_free: f64,
    /// What happened to the events.
    pub events: EventCounts,
    /// The allocator's counts.
    pub allocator: AllocatorCounts,
    /// Memory-model calls.
    pub model_ops: ModelCounts,
    /// Operations `--verify` found wrong (0 without it), with the first.
    pub verify_failures: u64,
    /// The first failure `--verify` found.
    pub first_verify_failure: Option<String>,
    /// With `--exact`: the trace's own pfn stream through the model.
    pub exact: Option<ExactResult>,
}

/// Each model's replay, or why it could not run on the layout.
pub type ModelResults = Vec<(ModelKind, Result<ReplayResult, String>)>;

/// Opens the trace afresh for each pass.
pub type OpenTrace<'a> = &'a dyn Fn() -> Result<TraceReader, TraceError>;

/// Replays the trace `open` reads through one model type, as a
/// [`ModelVisitor`]: a timed pass over the model, then a counting pass
/// over [`Counted`] for the memory-model calls.
pub struct Replay<'a> {
    /// Opens the trace.
    pub open: OpenTrace<'a>,
    /// How.
    pub options: ReplayOptions,
    /// Called with the events done so far, now and then.
    pub progress: &'a dyn Fn(u64),
    /// With `--exact`: the trace's pfns ([`trace_pfns`]).
    pub exact_pfns: Option<&'a [Pfn]>,
}

impl ModelVisitor for Replay<'_> {
    type Output = Result<ReplayResult, TraceError>;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<Self::Output, AllocError> {
        let alloc_options = Options::for_era(self.options.era);
        let alloc = Allocator::<M, Kernel>::new(M::build(layout, options)?, layout, alloc_options)?;
        let timed = match run(&alloc, layout, self.open, self.options, self.progress) {
            Ok(t) => t,
            Err(e) => return Ok(Err(e)),
        };
        drop(alloc);
        let counted = Allocator::<_, Kernel>::new(
            Counted::new(M::build(layout, options)?),
            layout,
            alloc_options,
        )?;
        // Count the replay's calls only, not the allocator's construction.
        counted.model().reset();
        let pass = match run(&counted, layout, self.open, self.options, &|_| {}) {
            Ok(p) => p,
            Err(e) => return Ok(Err(e)),
        };
        let exact = self
            .exact_pfns
            .map(|pfns| exact(counted.model().inner(), pfns, 5));
        let model = counted.model();
        let ops = model.ops();
        let mut calls = BTreeMap::new();
        for op in ModelOp::ALL {
            calls.insert(op.name(), ops.count(op));
        }
        let model_ops = ModelCounts {
            calls,
            hole_hits: model.hole_hits(),
        };
        debug_assert_eq!(pass.events.allocs, timed.events.allocs);
        let events = timed.events.events.max(1) as f64;
        Ok(Ok(ReplayResult {
            model: timed.model,
            elapsed_ns: timed.elapsed_ns,
            events_per_second: events / (timed.elapsed_ns / 1e9),
            ns_per_event: timed.elapsed_ns / events,
            ns_per_alloc: timed.alloc_ns / timed.events.allocs.max(1) as f64,
            ns_per_free: timed.free_ns / timed.events.frees.max(1) as f64,
            events: timed.events,
            allocator: timed.allocator,
            model_ops,
            verify_failures: timed.verify_failures,
            first_verify_failure: timed.first_verify_failure,
            exact,
        }))
    }
}

/// What [`replay_through`] measured.
#[derive(Clone, Debug)]
pub struct TimedReplay {
    /// Wall time of the whole replay.
    pub elapsed_ns: f64,
    /// Time inside the allocator's allocation calls.
    pub alloc_ns: f64,
    /// Time inside its free calls.
    pub free_ns: f64,
    /// What was replayed.
    pub events: EventCounts,
}

/// Replays the trace `open` reads through `alloc`, an allocator of any
/// variant the caller built (the flags experiment replays one trace through
/// each of its buddies): the timed pass of [`Replay`] without the counting
/// pass.
pub fn replay_through<M: MemoryModel, V: Variant>(
    alloc: &Allocator<M, V>,
    layout: &Layout,
    open: OpenTrace<'_>,
    options: ReplayOptions,
) -> Result<TimedReplay, TraceError> {
    let pass = run(alloc, layout, open, options, &|_| {})?;
    Ok(TimedReplay {
        elapsed_ns: pass.elapsed_ns,
        alloc_ns: pass.alloc_ns,
        free_ns: pass.free_ns,
        events: pass.events,
    })
}

/// One pass's results.
struct Pass {
    model: String,
    elapsed_ns: f64,
    alloc_ns: f64,
    free_ns: f64,
    events: EventCounts,
    allocator: AllocatorCounts,
    verify_failures: u64,
    first_verify_failure: Option<String>,
}

/// The replay's state over one allocator.
struct State<'a, M: MemoryModel, V: Variant> {
    alloc: &'a Allocator<M, V>,
    layout: &'a Layout,
    node: NodeId,
    cpus: Vec<Option<PerCpu<'a, M, V>>>,
    /// Trace pfn → the replay's block.
    held: HashMap<u64, (Pfn, Order)>,
    /// Trace pfns freed by `mm_page_free` and not yet batched.
    freed: HashSet<u64>,
    /// `--verify`: the replay's blocks, start → end.
    blocks: BTreeMap<u64, u64>,
    verify: bool,
    verify_failures: u64,
    first_verify_failure: Option<String>,
    events: EventCounts,
    alloc_cycles: u64,
    free_cycles: u64,
    /// The `vm.stat_interval` period of the last event, in trace time.
    last_vmstat_period: Option<u64>,
}

/// `vm.stat_interval`'s default (`HZ`, one second): how often each CPU's
/// vmstat work runs (`vmstat_update`).
const STAT_INTERVAL_NS: u64 = 1_000_000_000;

impl<'a, M: MemoryModel, V: Variant> State<'a, M, V> {
    /// The vmstat work on every CPU once per `vm.stat_interval` of trace
    /// time: per-CPU deltas folded and, from 6.7, `pcp->high` decayed
    /// (`PerCpu::vmstat_update`). Not timed: it is the kernel's work
    /// queue, not the allocation path.
    fn vmstat_ticks(&mut self, ts_ns: u64) {
        let period = ts_ns / STAT_INTERVAL_NS;
        if self.last_vmstat_period.is_some_and(|last| period > last) {
            for cpu in self.cpus.iter_mut().flatten() {
                cpu.vmstat_update();
            }
        }
        self.last_vmstat_period = Some(period);
    }

    fn cpu(&mut self, cpu: u16) -> Result<&mut PerCpu<'a, M, V>, AllocError> {
        let i = usize::from(cpu);
        if self.cpus.len() <= i {
            self.cpus.resize_with(i + 1, || None);
        }
        if self.cpus[i].is_none() {
            self.cpus[i] = Some(self.alloc.cpu_on(self.node)?);
        }
        Ok(self.cpus[i].as_mut().expect("just made"))
    }

    fn fail_verify(&mut self, message: String) {
        self.verify_failures += 1;
        self.first_verify_failure.get_or_insert(message);
    }

    fn check_block(&mut self, pfn: Pfn, order: Order) {
        let (start, end) = (pfn.get(), pfn.get() + order.nr_pages());
        let in_ram = self
            .layout
            .ram_ranges()
            .any(|(_, s, e)| s.get() <= start && end <= e.get());
        if !in_ram || !self.alloc.model().pfn_valid(pfn) {
            self.fail_verify(format!("block {pfn}/{order} is not valid RAM"));
        }
        let before = self.blocks.range(..end).next_back().map(|(&s, &e)| (s, e));
        if before.is_some_and(|(_, e)| e > start) {
            self.fail_verify(format!("block {pfn}/{order} overlaps a held block"));
        }
        self.blocks.insert(start, end);
    }

    fn free(&mut self, cpu: u16, pfn: Pfn, order: Order) -> Result<(), AllocError> {
        if self.verify && self.blocks.remove(&pfn.get()).is_none() {
            self.fail_verify(format!("free of {pfn}/{order}, which is not held"));
        }
        let handle = self.cpu(cpu)?;
        let t0 = tsc_now();
        let freed = handle.free_pages(pfn, order);
        self.free_cycles += tsc_now() - t0;
        freed?;
        self.events.frees += 1;
        Ok(())
    }

    fn event(&mut self, e: &Event) -> Result<(), AllocError> {
        self.events.events += 1;
        self.vmstat_ticks(e.ts_ns);
        match e.kind {
            EventKind::Alloc => {
                let Some(trace_pfn) = e.pfn else {
                    self.events.kernel_failed_allocs += 1;
                    return Ok(());
                };
                if let Some((pfn, order)) = self.held.remove(&trace_pfn) {
                    self.events.untraced_frees += 1;
                    self.free(e.cpu, pfn, order)?;
                    self.events.frees -= 1;
                }
                self.freed.remove(&trace_pfn);
                let order = Order::new(e.order);
                let handle = self.cpu(e.cpu)?;
                let t0 = tsc_now();
                let got = handle.alloc_pages(order, e.gfp);
                self.alloc_cycles += tsc_now() - t0;
                match got {
                    Ok(pfn) => {
                        self.events.allocs += 1;
                        self.held.insert(trace_pfn, (pfn, order));
                        if self.verify {
                            self.check_block(pfn, order);
                        }
                    }
                    Err(err) => {
                        *self
                            .events
                            .alloc_failures
                            .entry(failure_kind(&err))
                            .or_default() += 1;
                    }
                }
            }
            EventKind::Free => {
                let trace_pfn = e.pfn.unwrap_or(u64::MAX);
                self.freed.insert(trace_pfn);
                match self.held.get(&trace_pfn) {
                    None => self.events.unknown_frees += 1,
                    Some(&(_, order)) if order.get() != e.order => {
                        self.events.order_mismatch_frees += 1;
                    }
                    Some(&(pfn, order)) => {
                        self.held.remove(&trace_pfn);
                        self.free(e.cpu, pfn, order)?;
                    }
                }
            }
            EventKind::FreeBatched => {
                if e.pfn.is_some_and(|p| self.freed.remove(&p)) {
                    self.events.batched_paired += 1;
                } else {
                    self.events.batched_unpaired += 1;
                }
            }
            EventKind::AllocZoneLocked => {
                self.events.zone_locked += 1;
                self.events.zone_locked_refills += u64::from(e.percpu_refill);
            }
            EventKind::PcpuDrain => self.events.pcpu_drains += 1,
        }
        Ok(())
    }
}

/// Why an allocation failed, as a short key.
fn failure_kind(e: &RequestError) -> String {
    match e {
        RequestError::NoMemory { .. } => "no memory".into(),
        RequestError::Order(_) => "order above MAX_PAGE_ORDER".into(),
        RequestError::Gfp(_) => "invalid GFP mask".into(),
        other => other.to_string(),
    }
}

fn run<M: MemoryModel, V: Variant>(
    alloc: &Allocator<M, V>,
    layout: &Layout,
    open: OpenTrace<'_>,
    options: ReplayOptions,
    progress: &dyn Fn(u64),
) -> Result<Pass, TraceError> {
    let mut reader = open()?.skip_bad(options.skip_bad);
    let mut state = State {
        alloc,
        layout,
        node: layout.first_node(),
        cpus: Vec::new(),
        held: HashMap::new(),
        freed: HashSet::new(),
        blocks: BTreeMap::new(),
        verify: options.verify,
        verify_failures: 0,
        first_verify_failure: None,
        events: EventCounts::default(),
        alloc_cycles: 0,
        free_cycles: 0,
        last_vmstat_period: None,
    };
    let start = Instant::now();
    for event in reader.by_ref() {
        let event = event?;
        state
            .event(&event)
            .map_err(|e| TraceError::at(event.line, format!("{}: {e}", event.kind)))?;
        if state.events.events.is_multiple_of(1 << 20) {
            progress(state.events.events);
        }
    }
    let elapsed_ns = start.elapsed().as_nanos() as f64;
    state.events.read = reader.counts();
    let State {
        cpus,
        held,
        events,
        alloc_cycles,
        free_cycles,
        verify_failures,
        first_verify_failure,
        ..
    } = state;
    drop(cpus);
    let stats = alloc.stats_total();
    let max_order = alloc.model().geometry().max_order();
    let mut free_blocks = vec![0u64; max_order.index() + 1];
    for zone in alloc.zones() {
        for (o, n) in zone.nr_free().iter().enumerate().take(free_blocks.len()) {
            free_blocks[o] += n;
        }
    }
    let held_pages: u64 = held.values().map(|(_, o)| o.nr_pages()).sum();
    let conserved = alloc.free_pages_total() + held_pages == alloc.managed_pages_total();
    let ns_per_cycle = 1e9 / tsc_hz() as f64;
    Ok(Pass {
        model: alloc.model().name().to_owned(),
        elapsed_ns,
        alloc_ns: alloc_cycles as f64 * ns_per_cycle,
        free_ns: free_cycles as f64 * ns_per_cycle,
        events,
        allocator: AllocatorCounts {
            merges: stats.merges,
            splits: stats.splits,
            pcp_refills: stats.pcp_refills,
            pcp_drains: stats.pcp_drains,
            pcp_refill_blocks: stats.pcp_refill_blocks,
            pcp_drain_blocks: stats.pcp_drain_blocks,
            zone_lock_acquisitions: alloc.zones().iter().map(|z| z.lock_acquisitions()).sum(),
            fragmentation_index: fragmentation_index(
                &free_blocks,
                alloc.model().geometry().pageblock_order(),
            ),
            free_blocks,
            held_pages,
            conserved,
        },
        verify_failures,
        first_verify_failure,
    })
}

/// `fragmentation_index(zone, order)` over `free_blocks` (per order), in
/// thousandths: -1000 when a block of `order` or larger is free, else how
/// much of the failure is fragmentation (near 1000) rather than lack of
/// memory (near 0).
pub fn fragmentation_index(free_blocks: &[u64], order: Order) -> i64 {
    let total: u64 = free_blocks.iter().sum();
    if total == 0 {
        return 0;
    }
    if free_blocks.iter().skip(order.index()).any(|&n| n > 0) {
        return -1000;
    }
    let free_pages: u64 = free_blocks.iter().enumerate().map(|(o, n)| n << o).sum();
    let requested = order.nr_pages();
    1000 - ((1000 + free_pages * 1000 / requested) / total) as i64
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

/// Replays the trace `open` reads through each model of `kinds`. A trace
/// that cannot be read stops everything; a model that cannot be built on
/// the layout is reported in its place.
pub fn replay_models(
    open: OpenTrace<'_>,
    layout: &Layout,
    kinds: &[ModelKind],
    options: ReplayOptions,
    progress: &dyn Fn(ModelKind, u64),
) -> Result<ModelResults, TraceError> {
    let pfns = if options.exact {
        Some(trace_pfns(open, options.skip_bad)?)
    } else {
        None
    };
    let mut out = Vec::new();
    for &kind in kinds {
        let visitor = Replay {
            open,
            options,
            progress: &|n| progress(kind, n),
            exact_pfns: pfns.as_deref(),
        };
        match with_model(kind, layout, visitor) {
            Ok(Ok(result)) => out.push((kind, Ok(result))),
            Ok(Err(trace)) => return Err(trace),
            Err(e) => out.push((kind, Err(e.to_string()))),
        }
    }
    Ok(out)
}

/// The replay's table: one row per model, then what happened to the
/// trace's events (the same for every model but the allocation failures).
pub fn replay_table(results: &[(ModelKind, Result<ReplayResult, String>)]) -> String {
    use std::fmt::Write as _;
    let mut t = format!(
        "{:<16} {:>10} {:>9} {:>9} {:>9} {:>10} {:>6} {:>10} {:>17} {:>16} {:>8} {:>6} {:>5}\n",
        "model",
        "Mevents/s",
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
            Ok(r) => {
                let calls = |name: &str| r.model_ops.calls.get(name).copied().unwrap_or(0);
                let _ = writeln!(
                    t,
                    "{:<16} {:>10.2} {:>9.1} {:>9.1} {:>9.1} {:>10} {:>6} {:>10} {:>17} {:>16} {:>8} {:>6} {:>5}",
                    r.model,
                    r.events_per_second / 1e6,
                    r.ns_per_event,
                    r.ns_per_alloc,
                    r.ns_per_free,
                    calls("pfn_valid"),
                    r.model_ops.hole_hits,
                    calls("get_pfnblock_migratetype") + calls("set_pfnblock_migratetype"),
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
                );
            }
            Err(e) => {
                let _ = writeln!(t, "{:<16} cannot replay here: {e}", kind.name());
            }
        }
    }
    if let Some((_, Ok(r))) = results.iter().find(|(_, r)| r.is_ok()) {
        let e = &r.events;
        let _ = writeln!(
            t,
            "\nevents: {} replayed ({} allocations, {} frees); {} kernel-failed allocations; {} frees of pages allocated before the recording, {} of another order, {} untraced; mm_page_free_batched {} paired / {} unpaired; {} zone-locked ({} refills); {} pcp drains; {} other events, {} bad lines skipped",
            e.events,
            e.allocs,
            e.frees,
            e.kernel_failed_allocs,
            e.unknown_frees,
            e.order_mismatch_frees,
            e.untraced_frees,
            e.batched_paired,
            e.batched_unpaired,
            e.zone_locked,
            e.zone_locked_refills,
            e.pcpu_drains,
            e.read.unknown_events,
            e.read.bad_lines,
        );
        for (kind, r) in results {
            if let Ok(r) = r
                && !r.events.alloc_failures.is_empty()
            {
                let _ = writeln!(
                    t,
                    "{}: allocations refused: {:?}",
                    kind.name(),
                    r.events.alloc_failures
                );
            }
            if let Ok(r) = r
                && let Some(x) = &r.exact
            {
                let _ = writeln!(
                    t,
                    "{}: --exact: the trace's {} pfns ({} valid here) through pfn_valid + pfn_to_page + a flags read: {:.2} ns ({:.1} TSC cycles) per pfn",
                    kind.name(),
                    x.pfns,
                    x.valid,
                    x.ns_per_pfn,
                    x.cycles_per_pfn
                );
            }
            if let Ok(r) = r
                && r.verify_failures > 0
            {
                let _ = writeln!(
                    t,
                    "{}: --verify found {} wrong operations; the first: {}",
                    kind.name(),
                    r.verify_failures,
                    r.first_verify_failure.as_deref().unwrap_or("")
                );
            }
        }
    }
    t.push_str("ns/alloc and ns/free time the allocator call alone (unserialised TSC reads around it, a few ns of their own included); Mevents/s and ns/event include reading and parsing. Model calls come from a second, counting pass. refilled/drained: blocks the replay's per-CPU refills took from the zone and its drains gave back (in brackets the trace's percpu_refill and mm_page_pcpu_drain events, which count the same); frag: fragmentation_index at pageblock_order in thousandths (-1000: a block is free); cons: free + held == managed.\n");
    t
}

/// The replay's rows in the one JSON shape: one per model, `variant`
/// `replay`, the measurement per event (one trial), every count beside.
pub fn replay_rows(
    results: &[(ModelKind, Result<ReplayResult, String>)],
    options: ReplayOptions,
) -> Vec<JsonRow> {
    let ns_per_cycle = 1e9 / tsc_hz() as f64;
    results
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok())
        .map(|r| {
            let one = |x: f64| Stat::of(vec![x]);
            let measurement = Measurement {
                ns_per_op: one(r.ns_per_event),
                cycles_per_op: one(r.ns_per_event / ns_per_cycle),
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
