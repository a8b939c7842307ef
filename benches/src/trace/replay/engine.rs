//! The replay itself: what a replay is asked and returns, and the pass
//! that feeds every event to an allocator (a per-CPU handle per trace
//! CPU, the trace's pfns mapped to the replay's own blocks).

use std::collections::BTreeMap;
use std::time::Instant;

use rustc_hash::{FxHashMap, FxHashSet};

use buddy::{AllocError, Allocator, BuddyModel, Era, PerCpu, RequestError, Variant, ZoneStats};
use serde::Serialize;
use sparsemem::{Layout, Migratetype, NodeId, Order, Pfn};

use super::end_state::{EndState, FreeState};
use super::exact::ExactResult;
use super::floor::{list_floors, on_lists, work_runs, zone_lists, zone_of};
use super::per_cpu::{CpuCounts, per_cpu_counts};
use super::prior::{FromStart, Prior, list_evidence};
use super::read::ReadTrace;
use super::sample::{Series, sample};
use super::vmstat::{VmstatClock, work_drains};
use crate::free_memory::FragSample;
use crate::models::ModelKind;
use crate::timing::{Measurement, tsc_hz, tsc_now};

use crate::trace::format::ReadCounts;
use crate::trace::{Event, EventKind, TraceError};

/// How to replay (default: the 6.18 era, no checks, stop at a bad line).
#[derive(Clone, Copy, Debug, Default)]
pub struct ReplayOptions {
    /// The kernel era the allocator models.
    pub era: Era,
    /// Start with deferred struct page init ([`buddy::Options::deferred_init`]).
    pub deferred_init: bool,
    /// Check every operation: blocks inside RAM, valid, never overlapping.
    pub verify: bool,
    /// Skip malformed lines instead of stopping at the first.
    pub skip_bad: bool,
    /// Also time the trace's own pfns through each model's lookups
    /// ([`ExactResult`]).
    pub exact: bool,
    /// Timed passes per model, each on an allocator built afresh; the
    /// models' passes are interleaved (pass *i* of every model before
    /// pass *i + 1* of any), so their ratios pair. 0 counts as 1.
    pub trials: usize,
    /// Pages the allocator holds before the first event (a start state's
    /// allocated rest), for the conservation check.
    pub start_state_pages: u64,
    /// Also count the memory-model calls the replay makes, on a second,
    /// untimed pass over a counting model ([`ModelCounts`]): a second
    /// allocator and a second replay, so off by default.
    pub count_calls: bool,
    /// When the command began: the first model's end-to-end time counts
    /// from here (`None`: from the call of the replay).
    pub started: Option<Instant>,
    /// Keep each model's free lists as its first pass ended
    /// ([`ReplayResult::end_free`]), to hold against a machine's.
    pub end_state: bool,
    /// Run the allocator with `vm.defrag_mode` (6.15 on;
    /// [`buddy::Options::defrag_mode`]).
    pub defrag_mode: bool,
    /// From boot, start every CPU with empty per-CPU lists instead of the
    /// pages the trace shows on them (docs/trace.md): the free memory then
    /// holds only what the recorded workload itself did, as `bench frag`
    /// reads it. A start state seeds its lists either way.
    pub empty_lists: bool,
    /// Sample the allocator's free memory ([`FragSample`]) before the
    /// first event, every this many events, and after the last, in the
    /// first pass ([`ReplayResult::series`]). The samples are taken
    /// outside the timed calls. `None` or 0: no series.
    pub sample_every: Option<u64>,
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
    /// Of those, order-0 frees the replay served from the memory a start
    /// state left allocated (`prior`).
    pub prior_frees: u64,
    /// Pages the replay seeded its per-CPU lists with (`prior`): with a
    /// start state, its snapshot's `count`s, those the trace shows there
    /// first; from boot, the pages the trace shows there alone.
    pub seeded_list_pages: u64,
    /// Pages left out of that seeding: no list the trace allows held
    /// them, or the zone held too few pages.
    pub unseeded_list_pages: u64,
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
    /// Blocks those refills took from the zone. The trace's nearest count,
    /// its `percpu_refill=1` events, also marks blocks allocated past the
    /// per-CPU lists and misses the steal path's (docs/trace.md).
    pub pcp_refill_blocks: u64,
    /// Blocks those drains gave back. The trace's nearest count, its
    /// `mm_page_pcpu_drain` events, also counts lists drained for another
    /// CPU (docs/trace.md).
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
    /// Pages a start state left allocated before the replay began
    /// (`--start-state`; 0 from boot).
    pub start_state_pages: u64,
    /// free + held (+ the start state's) == managed at the end.
    pub conserved: bool,
    /// The refill and drain blocks CPU by CPU, the trace's and the
    /// replay's, by trace CPU.
    pub per_cpu: Vec<CpuCounts>,
}

/// The memory model's side: calls during the replay (a second pass over a
/// counting model, with [`ReplayOptions::count_calls`]).
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
    /// Wall time of the first timed pass over the events read
    /// beforehand, in ns.
    pub elapsed_ns: f64,
    /// Events per second of the timed passes (the replay loop): the
    /// events over the median pass.
    pub events_per_second: f64,
    /// ns per event, the median of the timed passes.
    pub ns_per_event: f64,
    /// Every timed pass, in the order they ran.
    pub passes: Vec<PassTimes>,
    /// The interleaved set the passes of every model of one replay
    /// belong to ([`crate::timing::next_set`]).
    #[serde(skip)]
    pub interleaved_with: u64,
    /// This model's whole wall time, in ns: from the command's start
    /// ([`ReplayOptions::started`]; the first model: reading the trace,
    /// overlapped with building the model) or the previous model's end,
    /// through building, the first timed pass, `--exact`, the counting
    /// pass when asked for, and freeing the allocators (the further
    /// trials are measurement, not replay, and stay out).
    pub wall_ns: f64,
    /// Events per second end to end: the events over [`ReplayResult::wall_ns`].
    pub wall_events_per_second: f64,
    /// ns per replayed allocation (the call alone), the passes' median.
    pub ns_per_alloc: f64,
    /// ns per replayed free (the call alone), the passes' median.
    pub ns_per_free: f64,
    /// What happened to the events.
    pub events: EventCounts,
    /// The allocator's counts.
    pub allocator: AllocatorCounts,
    /// Memory-model calls, when counted
    /// ([`ReplayOptions::count_calls`]; `None`: not counted).
    pub model_ops: Option<ModelCounts>,
    /// Operations `--verify` found wrong (0 without it), with the first.
    pub verify_failures: u64,
    /// The first failure `--verify` found.
    pub first_verify_failure: Option<String>,
    /// The model's free lists as the first pass's last event left them,
    /// its per-CPU lists still holding their pages (as a machine's
    /// buddyinfo leaves its lists out), with [`ReplayOptions::end_state`] (for
    /// [`super::end_state::compare_end_state`]).
    #[serde(skip)]
    pub end_free: Option<FreeState>,
    /// Those free lists against a machine's at the end of its recording
    /// (`replay --end-state`; `None`: not asked for).
    pub end_state: Option<EndState>,
    /// With `--exact`: the trace's own pfn stream through the model.
    pub exact: Option<ExactResult>,
    /// With [`ReplayOptions::sample_every`]: the first pass's free memory
    /// as it went, `ops` counting the events replayed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub series: Vec<FragSample>,
}

/// One timed pass's times, per event and per call.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct PassTimes {
    /// ns per event over the pass.
    pub ns_per_event: f64,
    /// ns per allocation call.
    pub ns_per_alloc: f64,
    /// ns per free call.
    pub ns_per_free: f64,
}

impl PassTimes {
    /// The times of `pass`, which replayed `events`.
    pub(super) fn of(pass: &Pass) -> PassTimes {
        PassTimes {
            ns_per_event: pass.elapsed_ns / pass.events.events.max(1) as f64,
            ns_per_alloc: pass.alloc_ns / pass.events.allocs.max(1) as f64,
            ns_per_free: pass.free_ns / pass.events.frees.max(1) as f64,
        }
    }
}

impl ReplayResult {
    /// The result of a model's first timed pass, `timed`, with its model
    /// calls and `--exact` if taken; its end-to-end time runs from
    /// `started` to now.
    pub(super) fn of_first_pass(
        timed: Pass,
        model_ops: Option<ModelCounts>,
        exact: Option<ExactResult>,
        started: Instant,
    ) -> ReplayResult {
        let events = timed.events.events.max(1) as f64;
        let wall_ns = started.elapsed().as_nanos() as f64;
        let times = PassTimes::of(&timed);
        let mut result = ReplayResult {
            wall_ns,
            wall_events_per_second: events / (wall_ns / 1e9),
            model: timed.model,
            elapsed_ns: timed.elapsed_ns,
            events_per_second: 0.0,
            ns_per_event: 0.0,
            passes: Vec::new(),
            interleaved_with: 0,
            ns_per_alloc: 0.0,
            ns_per_free: 0.0,
            events: timed.events,
            allocator: timed.allocator,
            model_ops,
            verify_failures: timed.verify_failures,
            first_verify_failure: timed.first_verify_failure,
            exact,
            end_free: timed.end_free,
            end_state: None,
            series: timed.series,
        };
        result.add_pass(times);
        result
    }

    /// Adds a further timed pass and sets the medians over every pass.
    pub(super) fn add_pass(&mut self, times: PassTimes) {
        self.passes.push(times);
        let median = |f: fn(&PassTimes) -> f64| {
            let mut v: Vec<f64> = self.passes.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            let n = v.len();
            if n % 2 == 1 {
                v[n / 2]
            } else {
                (v[n / 2 - 1] + v[n / 2]) / 2.0
            }
        };
        self.ns_per_event = median(|p| p.ns_per_event);
        self.ns_per_alloc = median(|p| p.ns_per_alloc);
        self.ns_per_free = median(|p| p.ns_per_free);
        self.events_per_second = 1e9 / self.ns_per_event.max(f64::MIN_POSITIVE);
    }

    /// The timed passes' ns per event as a measurement of the replay's
    /// interleaved set (every model's passes ran in turn).
    pub fn per_event(&self) -> Measurement {
        Measurement::from_ns(self.passes.iter().map(|p| p.ns_per_event).collect())
            .in_set(self.interleaved_with)
    }
}

/// Each model's replay, or why it could not run on the layout.
pub type ModelResults = Vec<(ModelKind, Result<ReplayResult, AllocError>)>;

/// One pass's results.
pub(super) struct Pass {
    pub(super) model: String,
    pub(super) elapsed_ns: f64,
    pub(super) alloc_ns: f64,
    pub(super) free_ns: f64,
    pub(super) events: EventCounts,
    pub(super) allocator: AllocatorCounts,
    pub(super) verify_failures: u64,
    pub(super) first_verify_failure: Option<String>,
    /// With [`ReplayOptions::end_state`]: the free lists before the
    /// handles' final drain.
    pub(super) end_free: Option<FreeState>,
    /// With [`ReplayOptions::sample_every`]: the samples.
    pub(super) series: Vec<FragSample>,
}

/// The replay's state over one allocator.
struct State<'a, M: BuddyModel, V: Variant> {
    alloc: &'a Allocator<M, V>,
    layout: &'a Layout,
    node: NodeId,
    cpus: Vec<Option<PerCpu<'a, M, V>>>,
    /// Trace pfn → the replay's block and the migratetype it was asked
    /// for.
    held: FxHashMap<u64, (Pfn, Order, Migratetype)>,
    /// Trace pfns freed by `mm_page_free` and not yet batched.
    freed: FxHashSet<u64>,
    /// `--verify`: the replay's blocks, start → end.
    blocks: BTreeMap<u64, u64>,
    verify: bool,
    verify_failures: u64,
    first_verify_failure: Option<String>,
    events: EventCounts,
    alloc_cycles: u64,
    free_cycles: u64,
    /// When each CPU's vmstat work runs.
    vmstat: VmstatClock,
    /// What a start state left allocated, for the frees of pages
    /// allocated before the recording.
    prior: Prior,
    /// The trace's refills and drains by CPU: `(percpu_refill=1, drains)`.
    trace_cpus: BTreeMap<u16, (u64, u64)>,
}

impl<'a, M: BuddyModel, V: Variant> State<'a, M, V> {
    /// The vmstat work of `cpu`, at its first event in each of its
    /// intervals of trace time, as many times as the trace shows it ran
    /// there ([`VmstatClock`]): per-CPU deltas folded and, from 6.7,
    /// `pcp->high` decayed (`PerCpu::vmstat_update`). Not timed: it is the
    /// kernel's work queue, not the allocation path.
    fn vmstat_tick(&mut self, cpu: u16, ts_ns: u64) {
        let runs = self.vmstat.due(cpu, ts_ns);
        if let Some(Some(handle)) = self.cpus.get_mut(usize::from(cpu)) {
            for _ in 0..runs {
                handle.vmstat_update();
            }
        }
    }

    fn new(
        alloc: &'a Allocator<M, V>,
        layout: &'a Layout,
        verify: bool,
        empty_lists: bool,
        from_start: &FromStart,
        events: &[Event],
    ) -> Self {
        // What the trace shows of the lists, wanted where they are seeded:
        // from a start state's pagesets, or from boot.
        let evidence = if from_start.has_pagesets() || (from_start.is_boot() && !empty_lists) {
            list_evidence(events)
        } else {
            FxHashMap::default()
        };
        let mut prior = Prior::new(alloc, from_start, evidence);
        if !from_start.is_boot() {
            prior.read_pageblock_types(events);
        }
        let drains = work_drains(events);
        if from_start.is_boot() && !empty_lists {
            let floors = list_floors(
                events,
                &drains,
                |p| zone_of(alloc, p),
                |z| zone_lists(alloc, z),
                |o| on_lists(alloc, o),
            );
            prior.set_list_floors(floors);
        }
        State {
            alloc,
            layout,
            node: layout.first_node(),
            cpus: Vec::new(),
            held: FxHashMap::default(),
            freed: FxHashSet::default(),
            blocks: BTreeMap::new(),
            verify,
            verify_failures: 0,
            first_verify_failure: None,
            events: EventCounts::default(),
            alloc_cycles: 0,
            free_cycles: 0,
            vmstat: VmstatClock::from_trace(&drains, |d| work_runs(alloc, events, d)),
            prior,
            trace_cpus: BTreeMap::new(),
        }
    }

    fn cpu(&mut self, cpu: u16) -> Result<&mut PerCpu<'a, M, V>, AllocError> {
        let i = usize::from(cpu);
        if self.cpus.len() <= i {
            self.cpus.resize_with(i + 1, || None);
        }
        if self.cpus[i].is_none() {
            let mut handle = self.alloc.cpu_on(self.node)?;
            self.prior.seed(self.alloc, &mut handle, cpu)?;
            self.cpus[i] = Some(handle);
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

    /// Frees a block the replay allocated (`--verify` checks it held it),
    /// or with `prior` a page of the start state's allocated memory, which
    /// no event allocated.
    fn free(&mut self, cpu: u16, pfn: Pfn, order: Order, prior: bool) -> Result<(), AllocError> {
        if self.verify && !prior && self.blocks.remove(&pfn.get()).is_none() {
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
        self.vmstat_tick(e.cpu, e.ts_ns);
        match e.kind {
            EventKind::Alloc => {
                let Some(trace_pfn) = e.pfn else {
                    self.events.kernel_failed_allocs += 1;
                    return Ok(());
                };
                if let Some((pfn, order, _)) = self.held.remove(&trace_pfn) {
                    self.events.untraced_frees += 1;
                    self.free(e.cpu, pfn, order, false)?;
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
                        self.held
                            .insert(trace_pfn, (pfn, order, e.gfp.migratetype()));
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
                    None => {
                        self.events.unknown_frees += 1;
                        if e.order == 0
                            && let Some(pfn) = self.prior.take(self.alloc, trace_pfn)?
                        {
                            self.events.prior_frees += 1;
                            self.free(e.cpu, pfn, Order::ZERO, true)?;
                        }
                    }
                    Some(&(_, order, _)) if order.get() != e.order => {
                        self.events.order_mismatch_frees += 1;
                    }
                    Some(&(pfn, order, _)) => {
                        self.held.remove(&trace_pfn);
                        self.free(e.cpu, pfn, order, false)?;
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
                self.trace_cpus.entry(e.cpu).or_default().0 += u64::from(e.percpu_refill);
            }
            EventKind::PcpuDrain => {
                self.events.pcpu_drains += 1;
                self.trace_cpus.entry(e.cpu).or_default().1 += 1;
            }
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

/// One pass of `trace` over `alloc`; `from_start` is what a start state
/// left allocated and its per-CPU lists (empty without one).
pub(super) fn run<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    layout: &Layout,
    trace: &ReadTrace,
    options: ReplayOptions,
    from_start: &FromStart,
    progress: &dyn Fn(u64),
) -> Result<Pass, TraceError> {
    let mut state = State::new(
        alloc,
        layout,
        options.verify,
        options.empty_lists,
        from_start,
        &trace.events,
    );
    let mut series = Series::new(options.sample_every);
    series.start(|| sample(alloc, 0, &state.held));
    let start = Instant::now();
    for event in &trace.events {
        state
            .event(event)
            .map_err(|e| TraceError::at(event.line, format!("{}: {e}", event.kind)))?;
        let events = state.events.events;
        if events.is_multiple_of(1 << 20) {
            progress(events);
        }
        series.after(events, || sample(alloc, events, &state.held));
    }
    let elapsed = start.elapsed().as_nanos();
    let events = state.events.events;
    let (series, sampling_ns) = series.end(events, || sample(alloc, events, &state.held));
    let elapsed_ns = (elapsed - sampling_ns) as f64;
    state.events.read = trace.counts;
    let State {
        cpus,
        held,
        mut events,
        alloc_cycles,
        free_cycles,
        verify_failures,
        first_verify_failure,
        prior,
        trace_cpus,
        ..
    } = state;
    // The per-CPU counts as the trace ends: dropping the handles drains
    // their lists, which the recording has no events for.
    let at_end = alloc.stats_total();
    let per_cpu = per_cpu_counts(&cpus, &trace_cpus);
    let end_free = options.end_state.then(|| FreeState {
        buddyinfo: alloc.buddyinfo(),
        pagetypeinfo: Some(alloc.pagetypeinfo()),
    });
    drop(cpus);
    events.seeded_list_pages = prior.seeded_pages;
    events.unseeded_list_pages = prior.unseeded_pages;
    let held_pages: u64 = held.values().map(|(_, o, _)| o.nr_pages()).sum();
    let ns_per_cycle = 1e9 / tsc_hz() as f64;
    Ok(Pass {
        model: alloc.model().name().to_owned(),
        elapsed_ns,
        alloc_ns: alloc_cycles as f64 * ns_per_cycle,
        free_ns: free_cycles as f64 * ns_per_cycle,
        events,
        allocator: AllocatorCounts {
            per_cpu,
            ..allocator_counts(
                alloc,
                &at_end,
                held_pages,
                options.start_state_pages - prior.freed_pages,
            )
        },
        verify_failures,
        first_verify_failure,
        end_free,
        series,
    })
}

/// The allocator's own counts at the end of a pass, with `held_pages`
/// still held by the replay: the per-CPU refills and drains from `at_end`
/// (read as the last event was replayed, before the handles' final
/// drain), the rest after it.
fn allocator_counts<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    at_end: &ZoneStats,
    held_pages: u64,
    start_state_pages: u64,
) -> AllocatorCounts {
    let stats = alloc.stats_total();
    let max_order = alloc.model().geometry().max_order();
    let mut free_blocks = vec![0u64; max_order.index() + 1];
    for zone in alloc.zones() {
        for (o, n) in zone.nr_free().iter().enumerate().take(free_blocks.len()) {
            free_blocks[o] += n;
        }
    }
    let conserved =
        alloc.free_pages_total() + held_pages + start_state_pages == alloc.managed_pages_total();
    AllocatorCounts {
        merges: stats.merges,
        splits: stats.splits,
        pcp_refills: at_end.pcp_refills,
        pcp_drains: at_end.pcp_drains,
        pcp_refill_blocks: at_end.pcp_refill_blocks,
        pcp_drain_blocks: at_end.pcp_drain_blocks,
        zone_lock_acquisitions: alloc.zones().iter().map(|z| z.lock_acquisitions()).sum(),
        fragmentation_index: i64::from(buddy::fragmentation_index(
            &free_blocks,
            alloc.model().geometry().pageblock_order(),
        )),
        free_blocks,
        held_pages,
        start_state_pages,
        conserved,
        per_cpu: Vec::new(),
    }
}
