//! `bench flags`' measurements: the four buddies, the seed's program on
//! one thread and on several, the recording replayed, and the marking
//! operations counted and timed.

use std::path::{Path, PathBuf};

use buddy::AllocError;
use buddy::{Allocator, Bitmap, BuddyModel, Kernel, NoBitmapAtomic, Options, Up, Variant};
use serde::Serialize;
use sparsemem::{Layout, NodeId};
use vmemmap::VmemmapOptions;

use crate::models::{Buildable, ModelKind, ModelVisitor, build_allocator, with_model};
use crate::spread::Interval;
use crate::threads::{Placement, on_threads};
use crate::timing::{Measurement, Plan};
use crate::trace::TraceError;
use crate::trace::format::TraceReader;
use crate::trace::replay::{ReplayOptions, replay_through};
use crate::workloads::{flags_iteration, mark_pairs};

/// The seed's pages per run: 1000 iterations of 16 MiB of 4 KiB pages.
pub const SEED_PAGES: f64 = 1000.0 * 4096.0;

/// The buddies the seed compared.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FlagsVariant {
    /// The 2.6.9 per-order bitmap buddy.
    Bitmap,
    /// The no-bitmap buddy with atomic flag operations.
    Atomic,
    /// The no-bitmap buddy with non-atomic flag operations under the lock.
    NonAtomic,
    /// The no-bitmap buddy built for one CPU: "atomic" operations without
    /// the `lock` prefix, `PG_referenced` included; one thread only.
    Up,
}

impl FlagsVariant {
    /// Report order.
    pub const ALL: [FlagsVariant; 4] = [
        FlagsVariant::Bitmap,
        FlagsVariant::Atomic,
        FlagsVariant::NonAtomic,
        FlagsVariant::Up,
    ];

    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            FlagsVariant::Bitmap => "bitmap",
            FlagsVariant::Atomic => "atomic",
            FlagsVariant::NonAtomic => "nonatomic",
            FlagsVariant::Up => "up",
        }
    }

    /// The seed's whole-run seconds on SMP (2.6.9 reference, no-bitmap,
    /// no-bitmap non-atomic). The seed gave no UP figures, only "no
    /// difference"; `None` for [`FlagsVariant::Up`].
    pub fn seed_seconds(self) -> Option<f64> {
        match self {
            FlagsVariant::Bitmap => Some(35.79),
            FlagsVariant::Atomic => Some(37.58),
            FlagsVariant::NonAtomic => Some(35.28),
            FlagsVariant::Up => None,
        }
    }

    /// The seed's cost relative to the bitmap buddy: its SMP run-time
    /// ratio, and 1 for UP ("no difference").
    pub fn seed_ratio(self) -> f64 {
        match (self.seed_seconds(), FlagsVariant::Bitmap.seed_seconds()) {
            (Some(s), Some(b)) => s / b,
            _ => 1.0,
        }
    }

    /// The seed's per-page difference from the bitmap buddy, in ns: the
    /// run-time difference over its 4.1 M pages (0 on UP).
    pub fn seed_delta_ns(self) -> f64 {
        match (self.seed_seconds(), FlagsVariant::Bitmap.seed_seconds()) {
            (Some(s), Some(b)) => (s - b) * 1e9 / SEED_PAGES,
            _ => 0.0,
        }
    }
}

/// The two workloads.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FlagsWorkload {
    /// The seed's program, as pfnlab's kernel path serves it.
    Program,
    /// The recording of the seed's program, replayed.
    Replay,
}

impl FlagsWorkload {
    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            FlagsWorkload::Program => "program",
            FlagsWorkload::Replay => "replay",
        }
    }
}

/// One run of the flags experiment.
#[derive(Clone, Debug)]
pub struct FlagsRun {
    /// Which workload.
    pub workload: FlagsWorkload,
    /// Which buddy.
    pub variant: FlagsVariant,
    /// Threads running the workload at once.
    pub threads: usize,
    /// Per page allocated, cleared, touched and freed (program), or per
    /// page allocated and freed by the replay (allocator calls alone).
    pub per_page: Measurement,
}

/// What the flags experiment measured.
#[derive(Clone, Debug)]
pub struct FlagsResults {
    /// Iterations of the program.
    pub iterations: u64,
    /// Order-0 pages per iteration (16 MiB).
    pub pages: usize,
    /// Every variant on each workload and thread count.
    pub runs: Vec<FlagsRun>,
    /// Why the replay did not run, when it did not.
    pub replay_skipped: Option<String>,
    /// Per variant: the buddy-marking operations (the ones the variant
    /// decides) per page of the program, counted over one iteration.
    pub marks_per_page: Vec<(FlagsVariant, f64)>,
    /// Per variant: one marking set and clear on a held page's flags
    /// word, in a loop (the operation's own cost, line in L1).
    pub mark_cost: Vec<(FlagsVariant, Measurement)>,
}

impl FlagsResults {
    /// The bitmap buddy's run on the same workload and thread count.
    fn bitmap_run(&self, r: &FlagsRun) -> Option<&Measurement> {
        self.runs
            .iter()
            .find(|b| {
                b.variant == FlagsVariant::Bitmap
                    && b.workload == r.workload
                    && b.threads == r.threads
            })
            .map(|b| &b.per_page)
    }

    /// The bitmap buddy's median per page on the same workload and threads.
    fn bitmap_for(&self, r: &FlagsRun) -> Option<f64> {
        self.bitmap_run(r).map(|b| b.ns_per_op.median)
    }

    /// Per-page cost relative to the bitmap buddy, with its interval
    /// (`None` for the bitmap buddy itself).
    pub fn ratio_vs_bitmap_interval(&self, r: &FlagsRun) -> Option<Interval> {
        if r.variant == FlagsVariant::Bitmap {
            return None;
        }
        Interval::between(&r.per_page, self.bitmap_run(r)?).ok()
    }

    /// Seconds the seed's whole run (4.1 M pages per thread) would take at
    /// the measured per-page cost.
    pub fn run_seconds(r: &FlagsRun) -> f64 {
        r.per_page.ns_per_op.median * SEED_PAGES * r.threads as f64 / 1e9
    }

    /// Per-page cost relative to the bitmap buddy.
    pub fn ratio_vs_bitmap(&self, r: &FlagsRun) -> f64 {
        let per_page = r.per_page.ns_per_op.median;
        per_page / self.bitmap_for(r).unwrap_or(per_page)
    }

    /// Per-page difference from the bitmap buddy, in ns.
    pub fn delta_ns(&self, r: &FlagsRun) -> f64 {
        let per_page = r.per_page.ns_per_op.median;
        per_page - self.bitmap_for(r).unwrap_or(per_page)
    }

    /// The variant's marking operations per page and the cost of one (half
    /// a set + clear pair), if measured.
    pub(super) fn marks(&self, v: FlagsVariant) -> Option<(f64, f64)> {
        let n = self.marks_per_page.iter().find(|(x, _)| *x == v)?.1;
        let c = self
            .mark_cost
            .iter()
            .find(|(x, _)| *x == v)?
            .1
            .ns_per_op
            .median
            / 2.0;
        Some((n, c))
    }

    /// The per-page difference from the bitmap buddy that the marking
    /// operations alone account for: marks per page times the cost of one,
    /// less the bitmap buddy's.
    pub fn predicted_delta_ns(&self, v: FlagsVariant) -> Option<f64> {
        let (n, c) = self.marks(v)?;
        let (nb, cb) = self.marks(FlagsVariant::Bitmap)?;
        Some(n * c - nb * cb)
    }
}

/// The recording of the seed program in the source tree.
pub fn default_trace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/seed-flags.trace.zst")
}

/// Measures the flags experiment with model `kind` on `layout`:
/// `iterations` rounds of the program on one thread and on `threads`, and
/// `trace` (when given) replayed on one. `alloc_options` gets real frames.
pub fn measure_flags(
    kind: ModelKind,
    layout: &Layout,
    plan: Plan,
    iterations: u64,
    threads: usize,
    alloc_options: Options,
    trace: Option<&Path>,
) -> Result<FlagsResults, AllocError> {
    let pages = (16usize << 20) >> layout.geometry().page_shift();
    with_model(
        kind,
        layout,
        Visitor {
            plan,
            iterations,
            pages,
            threads: threads.max(1),
            alloc_options: Options {
                frames: true,
                ..alloc_options
            },
            trace,
        },
    )
}

struct Visitor<'t> {
    plan: Plan,
    iterations: u64,
    pages: usize,
    threads: usize,
    alloc_options: Options,
    trace: Option<&'t Path>,
}

/// One buddy build as the experiment drives it, whatever its variant
/// type: the trials of all four interleave through this (one call per
/// trial; the loops inside are the variant's own, monomorphised).
trait Buddy: Sync {
    /// The program on `threads` threads, `iterations` rounds each;
    /// returns the pages allocated.
    fn program(&self, node: NodeId, pages: usize, iterations: u64, threads: usize) -> u64;
    /// One replay of `trace`: ns per page allocated.
    fn replay(&self, layout: &Layout, trace: &Path, era: buddy::Era) -> Result<f64, TraceError>;
}

impl<M: BuddyModel, V: Variant> Buddy for Allocator<M, V>
where
    Allocator<M, V>: Sync,
{
    fn program(&self, node: NodeId, pages: usize, iterations: u64, threads: usize) -> u64 {
        program(self, node, pages, iterations, threads)
    }

    fn replay(&self, layout: &Layout, trace: &Path, era: buddy::Era) -> Result<f64, TraceError> {
        replay_once(self, layout, trace, era)
    }
}

/// One replay of `trace` through `alloc`: the allocator calls' time over
/// the pages allocated. Each replay starts from the state the previous
/// left: the pages the recording ends holding (about 1,500 in the seed
/// program's) stay allocated.
fn replay_once<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    layout: &Layout,
    trace: &Path,
    era: buddy::Era,
) -> Result<f64, TraceError> {
    let open = || TraceReader::open(trace);
    let options = ReplayOptions {
        era,
        ..ReplayOptions::default()
    };
    let t = replay_through(alloc, layout, &open, options)?;
    Ok((t.alloc_ns + t.free_ns) / t.events.allocs.max(1) as f64)
}

/// The program on `threads` threads of `alloc`, `iterations` rounds each;
/// returns the pages it allocated.
fn program<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    node: NodeId,
    pages: usize,
    iterations: u64,
    threads: usize,
) -> u64 {
    on_threads(
        threads,
        Placement::Free,
        |_| {
            let cpu = alloc.cpu_on(node).expect("checked when built");
            (cpu, Vec::with_capacity(pages))
        },
        |_, (mut cpu, mut held)| {
            for _ in 0..iterations {
                std::hint::black_box(flags_iteration(&mut cpu, pages, &mut held));
            }
        },
    );
    iterations * pages as u64 * threads as u64
}

impl Visitor<'_> {
    /// The program's allocator for one variant, with its marking counted
    /// over one iteration and the cost of one marking measured.
    fn program_allocator<M: Buildable, V: Variant>(
        &self,
        layout: &Layout,
        options: VmemmapOptions,
        results: &mut FlagsResults,
        variant: FlagsVariant,
    ) -> Result<Allocator<M, V>, AllocError> {
        let alloc = build_allocator::<M, V>(layout, options, self.alloc_options)?;
        let mut cpu = alloc.cpu_on(layout.first_node())?;
        // The marking operations per page are a set per block put on a
        // free list (drained or split off) and a clear per block taken off
        // one (refilled or merged away).
        let mut held = Vec::with_capacity(self.pages);
        flags_iteration(&mut cpu, self.pages, &mut held);
        let before = alloc.stats_total();
        let pages = flags_iteration(&mut cpu, self.pages, &mut held);
        let after = alloc.stats_total();
        let marks = (after.pcp_refill_blocks - before.pcp_refill_blocks)
            + (after.splits - before.splits)
            + (after.merges - before.merges)
            + (after.pcp_drain_blocks - before.pcp_drain_blocks);
        results
            .marks_per_page
            .push((variant, marks as f64 / pages.max(1) as f64));
        let pfn = cpu.alloc(buddy::Gfp::HIGHUSER_MOVABLE)?;
        if let Some(page) = alloc.model().pfn_to_page(pfn) {
            let rounds = self.plan.iters(1 << 22, 1 << 16);
            let m = self.plan.measure(|| {
                mark_pairs::<V, _>(page, rounds);
                rounds
            });
            results.mark_cost.push((variant, m));
        }
        cpu.free(pfn)?;
        drop(cpu);
        Ok(alloc)
    }

    /// The program through the four buddies, trials interleaved.
    fn programs<M: Buildable>(
        &self,
        layout: &Layout,
        options: VmemmapOptions,
        results: &mut FlagsResults,
    ) -> Result<(), AllocError> {
        let bitmap =
            self.program_allocator::<M, Bitmap>(layout, options, results, FlagsVariant::Bitmap)?;
        let atomic = self.program_allocator::<M, NoBitmapAtomic>(
            layout,
            options,
            results,
            FlagsVariant::Atomic,
        )?;
        let nonatomic =
            self.program_allocator::<M, Kernel>(layout, options, results, FlagsVariant::NonAtomic)?;
        let up = self.program_allocator::<M, Up>(layout, options, results, FlagsVariant::Up)?;
        let node = layout.first_node();
        let (pages, iterations, n) = (self.pages, self.iterations, self.threads);
        let buddies: [(FlagsVariant, &dyn Buddy); 4] = [
            (FlagsVariant::Bitmap, &bitmap),
            (FlagsVariant::Atomic, &atomic),
            (FlagsVariant::NonAtomic, &nonatomic),
            (FlagsVariant::Up, &up),
        ];
        // Each SMP buddy on one thread and on `n`; a UP kernel has one CPU.
        let mut runs: Vec<(FlagsVariant, usize, &dyn Buddy)> = buddies
            .into_iter()
            .flat_map(|(v, b)| {
                let counts = if v == FlagsVariant::Up {
                    vec![1]
                } else {
                    vec![1, n]
                };
                counts.into_iter().map(move |t| (v, t, b))
            })
            .collect();
        let measured = self.plan.measure_interleaved(&mut runs, |(_, threads, b)| {
            b.program(node, pages, iterations, *threads)
        });
        for ((variant, threads, _), per_page) in runs.iter().zip(measured) {
            results.runs.push(FlagsRun {
                workload: FlagsWorkload::Program,
                variant: *variant,
                threads: *threads,
                per_page,
            });
        }
        Ok(())
    }

    /// The recording through the four buddies (no frames: the allocator
    /// calls alone), trials interleaved.
    fn replays<M: Buildable>(
        &self,
        layout: &Layout,
        options: VmemmapOptions,
        trace: &Path,
        results: &mut FlagsResults,
    ) -> Result<(), AllocError> {
        let plain = Options {
            frames: false,
            ..self.alloc_options
        };
        let era = plain.era;
        let bitmap = build_allocator::<M, Bitmap>(layout, options, plain)?;
        let atomic = build_allocator::<M, NoBitmapAtomic>(layout, options, plain)?;
        let nonatomic = build_allocator::<M, Kernel>(layout, options, plain)?;
        let up = build_allocator::<M, Up>(layout, options, plain)?;
        let runs: [(FlagsVariant, &dyn Buddy); 4] = [
            (FlagsVariant::Bitmap, &bitmap),
            (FlagsVariant::Atomic, &atomic),
            (FlagsVariant::NonAtomic, &nonatomic),
            (FlagsVariant::Up, &up),
        ];
        let mut ns = vec![Vec::new(); runs.len()];
        // One warm-up replay of each, then the trials in turn.
        for trial in 0..=self.plan.trials.max(1) {
            for (i, (_, buddy)) in runs.iter().enumerate() {
                match buddy.replay(layout, trace, era) {
                    Ok(v) if trial > 0 => ns[i].push(v),
                    Ok(_) => {}
                    Err(e) => {
                        results.replay_skipped = Some(format!("{}: {e}", trace.display()));
                        return Ok(());
                    }
                }
            }
        }
        for ((variant, _), ns) in runs.iter().zip(ns) {
            results.runs.push(FlagsRun {
                workload: FlagsWorkload::Replay,
                variant: *variant,
                threads: 1,
                per_page: Measurement::from_ns(ns),
            });
        }
        Ok(())
    }
}

impl ModelVisitor for Visitor<'_> {
    type Output = FlagsResults;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<FlagsResults, AllocError> {
        let mut results = FlagsResults {
            iterations: self.iterations,
            pages: self.pages,
            runs: Vec::new(),
            marks_per_page: Vec::new(),
            mark_cost: Vec::new(),
            replay_skipped: None,
        };
        self.programs::<M>(layout, options, &mut results)?;
        match self.trace {
            Some(trace) => self.replays::<M>(layout, options, trace, &mut results)?,
            None => results.replay_skipped = Some("no recording given".into()),
        }
        Ok(results)
    }
}
