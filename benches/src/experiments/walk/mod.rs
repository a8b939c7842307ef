//! `walk`: what a walk over a span of pfns costs, walker by walker and
//! model by model, and the three published changes to the
//! kernel's walkers reproduced as before/after.
//!
//! The sweep times each walker — the model's own `for_each_valid_pfn`,
//! the generic per-pfn loop, and pfnlab's bulk-skip variant — over the
//! whole span of each layout: the hole-density layouts and
//! `preset:sparse-52bit` (4 PiB), or the `--layout` alone. Where a walk
//! asks `pfn_valid` of every pfn of a span too large to walk (the per-pfn
//! loop on `sparse-52bit`), or pays a caught fault per hole pfn (the probe
//! models, whose kernel walk is the per-pfn loop), it is timed over a
//! slice — chunks spread evenly over the span — and reported per pfn of
//! the slice, standing for the per-pfn cost of the whole span; the row
//! says so (`timed_pfns`).
//!
//! The reproductions, on the chosen model (`vmemmap-table` instead for a
//! model that faults on holes):
//! - 2016, compaction with `zone->contiguous` off and on, over a
//!   fragmented zone: the scanners of `/proc/sys/vm/compact_memory`, no
//!   migration (Joonsoo Kim's workload measured the whole hugepage
//!   allocation: 899 → 1194 MB/s);
//! - 2017, `memmap_init` over a sparse span: per pfn, skipping to the next
//!   memblock region, and over memblock ranges (Paul Burton: boot 109 s →
//!   62 s; Jia He on arm64: 27,956 → 13,537 µs);
//! - 2025, `reserve_bootmem_region` over large reserved (NOMAP) ranges:
//!   per pfn against `for_each_valid_pfn` (no figure published).

use buddy::{BuddyModel, MemmapInitForm};
use serde::Serialize;
use sparsemem::walk::{BulkSkipWalk, KernelWalk, PerPfnWalk, WalkStrategy};
use sparsemem::{Geometry, Layout, Pfn, PfnRange};
use vmemmap::VmemmapOptions;

use super::hole_density::{SPAN_SECTIONS, layout_with_holes};
use super::{Ctx, Experiment, ExperimentId};
use crate::error::RunError;
use crate::host_kernel::{HostError, HostPaths, compact_memory, is_root, kpageflags_walk};
use crate::layout_spec::LayoutSpec;
use crate::models::{Buildable, ModelKind, ModelVisitor, with_model_options};
use crate::report::Measured;
use crate::spread::Comparison;
use crate::timing::{Measurement, Plan};
use crate::workloads::walk_valid;

mod render;
mod repro;

use repro::ReproVisitor;

/// The hole fractions of the sweep's generated layouts.
pub const WALK_HOLE_FRACTIONS: [f64; 4] = [0.0, 0.5, 0.9, 0.97];

/// The experiment `bench walk`.
pub struct Walk;

/// A walker of the sweep.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Walker {
    /// The model's own `for_each_valid_pfn`.
    ForEachValidPfn,
    /// `pfn_valid` on every pfn.
    PerPfn,
    /// pfnlab's variant: absent EXTREME roots skipped whole.
    BulkSkip,
}

impl Walker {
    const ALL: [Walker; 3] = [Walker::ForEachValidPfn, Walker::PerPfn, Walker::BulkSkip];

    fn name(self) -> &'static str {
        match self {
            Walker::ForEachValidPfn => KernelWalk::NAME,
            Walker::PerPfn => PerPfnWalk::NAME,
            Walker::BulkSkip => BulkSkipWalk::NAME,
        }
    }
}

/// What a row measured; serialised as its name (`walk/per-pfn`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Case {
    /// A walk of the sweep.
    Walk(Walker),
    /// Compaction's scanners, `zone->contiguous` on or off.
    Compaction {
        /// Whether `zone->contiguous` was used.
        contiguous: bool,
        /// Which run.
        shape: CompactShape,
    },
    /// `memmap_init` in one form.
    MemmapInit(MemmapInitForm),
    /// `reserve_bootmem_region`'s loop by one walker.
    ReserveBootmem(Walker),
    /// This host's kernel (`--host-kernel` with `--layout host`).
    Kernel(HostWalk),
}

/// The compaction runs of the reproduction.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CompactShape {
    /// `/proc/sys/vm/compact_memory`'s whole-zone sync scan, ignoring the
    /// skip hints, over a zone of movable allocations; per pfn scanned.
    Whole,
    /// The same zone, honouring the hints an earlier run set; per
    /// pageblock checked.
    Hinted,
    /// A THP fault's direct async compaction over a zone of kernel
    /// (unmovable) allocations: every pageblock checked, then passed over
    /// by `suitable_migration_source`, the shape in which the 2016 workload
    /// spent its time in `pageblock_pfn_to_page`; per pageblock checked.
    AsyncThp,
}

impl CompactShape {
    /// Every shape, in the table's order.
    pub const ALL: [CompactShape; 3] = [
        CompactShape::Whole,
        CompactShape::Hinted,
        CompactShape::AsyncThp,
    ];

    /// The shape's name in rows.
    pub fn name(self) -> &'static str {
        match self {
            CompactShape::Whole => "whole",
            CompactShape::Hinted => "hinted",
            CompactShape::AsyncThp => "async-thp",
        }
    }

    /// What one unit of the shape's cost is.
    pub fn per(self) -> &'static str {
        match self {
            CompactShape::Whole => "pfn scanned, whole sync scan",
            CompactShape::Hinted => "pageblock checked, hinted run",
            CompactShape::AsyncThp => "pageblock checked, async THP run over unmovable blocks",
        }
    }
}

/// What a host-kernel row timed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum HostWalk {
    /// `echo 1 > /proc/sys/vm/compact_memory`, per pfn either scanner
    /// looked at (`compact_*_scanned`), migration included.
    CompactMemory,
    /// A read of `/proc/kpageflags` to its end, per pfn: the kernel's own
    /// walk (`pfn_to_online_page`, `stable_page_flags`, `put_user`,
    /// `cond_resched` per pfn), not a validity check.
    Kpageflags,
}

impl Case {
    /// The row's variant name.
    pub fn name(self) -> String {
        match self {
            Case::Walk(w) => format!("walk/{}", w.name()),
            Case::Compaction { contiguous, shape } => format!(
                "compaction/{}/contiguous-{}",
                shape.name(),
                if contiguous { "on" } else { "off" }
            ),
            Case::MemmapInit(f) => format!("memmap-init/{}", f.name()),
            Case::ReserveBootmem(w) => format!("reserve-bootmem/{}", w.name()),
            Case::Kernel(HostWalk::CompactMemory) => "kernel/compact_memory".into(),
            Case::Kernel(HostWalk::Kpageflags) => "kernel/kpageflags".into(),
        }
    }
}

impl Serialize for Case {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

/// A row's parameters: what was walked.
#[derive(Clone, Debug, Serialize)]
pub struct WalkParams {
    /// The layout's name.
    pub layout: String,
    /// Pfns in the span walked.
    pub span_pfns: u64,
    /// Pfns actually timed (fewer than the span when timed over a slice);
    /// for compaction, pfns scanned.
    pub timed_pfns: u64,
    /// Valid pfns among the timed ones; for `memmap_init`, pages written.
    pub valid_pfns: u64,
}

/// One row of `bench walk`'s report.
#[derive(Clone, Debug, Serialize)]
pub struct WalkRow {
    /// What was timed.
    pub variant: Case,
    /// The memory model.
    pub model: ModelKind,
    /// What was walked.
    pub params: WalkParams,
    /// Per pfn timed (per pfn of span); for compaction, per pfn scanned.
    #[serde(flatten)]
    pub measurement: Measurement,
    /// Nanoseconds per valid pfn timed (median).
    pub ns_per_valid_pfn: f64,
}

impl Measured for WalkRow {
    fn measurement(&self) -> &Measurement {
        &self.measurement
    }

    fn label(&self) -> String {
        format!(
            "{} / {} / {}",
            self.variant.name(),
            self.model,
            self.params.layout
        )
    }
}

/// What `bench walk` measured.
#[derive(Debug, Default)]
pub struct WalkResults {
    /// The sweep's rows.
    pub sweep: Vec<WalkRow>,
    /// The reproductions' rows.
    pub repro: Vec<WalkRow>,
    /// `(model, layout, why)` of the models a layout could not build.
    pub refused: Vec<(ModelKind, String, String)>,
    /// This host's kernel's rows, when asked for, or why they are absent.
    pub host: Option<Result<Vec<WalkRow>, HostError>>,
}

/// `bench walk`'s options.
#[derive(Clone, Copy, Debug, Default)]
pub struct WalkOptions {
    /// Also time this host's kernel (root, `--layout host`): one
    /// `compact_memory` and one `/proc/kpageflags` read per trial.
    pub host_kernel: bool,
}

/// The host kernel's walks, one warm-up and `plan.trials` timed rounds,
/// as rows of the host layout (`model` names the layout's reference).
fn measure_host(ctx: &Ctx) -> Result<Vec<WalkRow>, HostError> {
    // The live map, not the preset a `host` layout falls back to.
    if ctx.layout_spec != Some(LayoutSpec::Host) || ctx.layout.source() != "host" {
        return Err(HostError::NotHostLayout);
    }
    if !is_root() {
        return Err(HostError::NotRoot);
    }
    let paths = HostPaths::live();
    let (mut compact, mut kpf) = (Vec::new(), Vec::new());
    let (mut scanned, mut pfns) = (0, 0);
    for trial in 0..=ctx.plan.trials {
        let c = compact_memory(&paths)?;
        let k = kpageflags_walk(&paths)?;
        if trial > 0 {
            if let Some(ns) = c.ns_per_scanned_pfn() {
                compact.push(ns);
                scanned = c.scanned.migrate_scanned + c.scanned.free_scanned;
            }
            kpf.extend(k.ns_per_pfn());
            pfns = k.pfns;
        }
    }
    let span = ctx.layout.pfn_span().1.get();
    let mut rows = Vec::new();
    for (what, ns, timed) in [
        (HostWalk::CompactMemory, compact, scanned),
        (HostWalk::Kpageflags, kpf, pfns),
    ] {
        if !ns.is_empty() {
            let m = Measurement::from_ns(ns);
            rows.push(row(
                Case::Kernel(what),
                ctx.model,
                &ctx.layout,
                span,
                timed,
                timed,
                m,
            ));
        }
    }
    Ok(rows)
}

fn row(
    case: Case,
    model: ModelKind,
    layout: &Layout,
    span: u64,
    timed: u64,
    valid: u64,
    m: Measurement,
) -> WalkRow {
    let ns_per_valid_pfn = m.ns_per_op.median * timed as f64 / valid.max(1) as f64;
    WalkRow {
        variant: case,
        model,
        params: WalkParams {
            layout: layout.source().into(),
            span_pfns: span,
            timed_pfns: timed,
            valid_pfns: valid,
        },
        measurement: m,
        ns_per_valid_pfn,
    }
}

/// Chunks a sliced walk is timed over, spread evenly over the span.
const SLICE_CHUNKS: u64 = 64;

/// The ranges a walker is timed over: the span, or [`SLICE_CHUNKS`]
/// chunks spread evenly over it when the walk asks `pfn_valid` per pfn of
/// a huge span or faults per hole pfn (so the chunks meet holes and
/// memory in about the span's proportion).
fn timed_ranges(
    g: &Geometry,
    span: PfnRange,
    per_pfn: bool,
    faults: bool,
    plan: Plan,
) -> Vec<PfnRange> {
    let limit = if faults {
        plan.iters(1 << 14, 1 << 12)
    } else if per_pfn {
        plan.iters(1 << 26, 1 << 22)
    } else {
        u64::MAX
    };
    if limit >= span.nr_pages() {
        return vec![span];
    }
    let each = (limit / SLICE_CHUNKS).max(1);
    let stride = span.nr_pages() / SLICE_CHUNKS;
    (0..SLICE_CHUNKS)
        .map(|i| {
            let start = span.start() + i * stride;
            PfnRange::new(g, start, start + each.min(stride)).expect("a chunk of the span")
        })
        .collect()
}

/// Pfns in `ranges`.
fn nr_pfns(ranges: &[PfnRange]) -> u64 {
    ranges.iter().map(PfnRange::nr_pages).sum()
}

/// Valid pfns in `ranges`, by the model's walk, over each range.
fn count<M: BuddyModel, W: WalkStrategy>(model: &M, ranges: &[PfnRange]) -> u64 {
    ranges.iter().map(|&r| walk_valid::<M, W>(model, r)).sum()
}

struct SweepVisitor {
    kind: ModelKind,
    plan: Plan,
    span: PfnRange,
}

impl ModelVisitor for SweepVisitor {
    type Output = Vec<WalkRow>;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        o: VmemmapOptions,
    ) -> Result<Vec<WalkRow>, buddy::AllocError> {
        let model = M::build(layout, o)?;
        let span = self.span;
        let faults = self.kind.faults_on_holes();
        let own_per_pfn = model.pfn_walker() == sparsemem::PfnWalker::PerPfn;
        // The three walkers' trials interleaved, so the machine's drift
        // falls on all alike.
        let g = *layout.geometry();
        let mut walkers: Vec<(Walker, Vec<PfnRange>)> = Walker::ALL
            .into_iter()
            .map(|w| {
                let per_pfn = w == Walker::PerPfn || own_per_pfn;
                (w, timed_ranges(&g, span, per_pfn, faults, self.plan))
            })
            .collect();
        // Short walks repeated, so each trial lasts long enough to rise
        // above the scheduler's noise on a shared machine.
        let floor = self.plan.iters(1 << 25, 1 << 21);
        let ms = self.plan.measure_interleaved(&mut walkers, |(w, ranges)| {
            let reps = if faults {
                1
            } else {
                (floor / nr_pfns(ranges)).max(1)
            };
            for _ in 0..reps {
                std::hint::black_box(match w {
                    Walker::ForEachValidPfn => count::<M, KernelWalk>(&model, ranges),
                    Walker::PerPfn => count::<M, PerPfnWalk>(&model, ranges),
                    Walker::BulkSkip => count::<M, BulkSkipWalk>(&model, ranges),
                });
            }
            nr_pfns(ranges) * reps
        });
        Ok(walkers
            .into_iter()
            .zip(ms)
            .map(|((w, ranges), m)| {
                let valid = count::<M, KernelWalk>(&model, &ranges);
                let timed = nr_pfns(&ranges);
                row(
                    Case::Walk(w),
                    self.kind,
                    layout,
                    span.nr_pages(),
                    timed,
                    valid,
                    m,
                )
            })
            .collect())
    }
}

/// The sweep's layouts and spans: `--layout` alone (from pfn 0 to the end
/// of its memory), or the hole-density layouts (their whole span) and
/// `preset:sparse-52bit`, the runner's default (the whole physical space).
fn sweep_layouts(ctx: &Ctx) -> Vec<(Layout, PfnRange)> {
    let span = |l: &Layout, end: Pfn| {
        let g = l.geometry();
        PfnRange::new(g, Pfn::new(0), end.clamp(Pfn::new(1), g.max_pfn())).expect("a span")
    };
    if ctx.layout_spec.is_some() {
        let end = ctx.layout.memory_span().1;
        return vec![(ctx.layout.clone(), span(&ctx.layout, end))];
    }
    let mut v: Vec<(Layout, PfnRange)> = WALK_HOLE_FRACTIONS
        .iter()
        .map(|&h| {
            let l = layout_with_holes(Geometry::X86_64, h);
            let end = Pfn::new(SPAN_SECTIONS * l.geometry().pages_per_section());
            let s = span(&l, end);
            (l, s)
        })
        .collect();
    v.push((ctx.layout.clone(), PfnRange::whole(ctx.layout.geometry())));
    v
}

impl Experiment for Walk {
    const ID: ExperimentId = ExperimentId::Walk;
    type Params = WalkOptions;
    type Results = WalkResults;
    type Row = WalkRow;

    fn measure(ctx: &Ctx, params: &WalkOptions) -> Result<WalkResults, RunError> {
        let mut r = WalkResults::default();
        for (layout, span) in sweep_layouts(ctx) {
            for kind in ctx.models() {
                ctx.progress.stage(format!("{kind}: {}", layout.source()));
                let v = SweepVisitor {
                    kind,
                    plan: ctx.plan,
                    span,
                };
                match with_model_options(kind, &layout, VmemmapOptions::default(), v) {
                    Ok(rows) => r.sweep.extend(rows),
                    Err(e) => r
                        .refused
                        .push((kind, layout.source().into(), e.to_string())),
                }
                ctx.progress.advance();
            }
        }
        let kind = if ctx.model.faults_on_holes() {
            ModelKind::VmemmapTable
        } else {
            ctx.model
        };
        let v = ReproVisitor {
            kind,
            plan: ctx.plan,
        };
        r.repro = with_model_options(kind, &ctx.layout, VmemmapOptions::default(), v).map_err(
            |source| RunError::Model {
                model: kind,
                source,
            },
        )?;
        if params.host_kernel {
            ctx.progress.stage("the host kernel".into());
            r.host = Some(measure_host(ctx));
        }
        Ok(r)
    }

    fn rows(_: &Ctx, r: &WalkResults) -> Vec<WalkRow> {
        let host = r.host.iter().flat_map(|h| h.iter().flatten());
        r.sweep
            .iter()
            .chain(&r.repro)
            .chain(host)
            .cloned()
            .collect()
    }

    fn render(_: &Ctx, r: &WalkResults) -> String {
        render::render(r)
    }

    fn comparisons(_: &Ctx, r: &WalkResults) -> Vec<Comparison> {
        render::comparisons(r)
    }

    fn layout_label(ctx: &Ctx, _: &WalkResults) -> String {
        if ctx.layout_spec.is_some() {
            ctx.layout.source().into()
        } else {
            format!(
                "generated hole-density layouts (x86_64) and {}",
                ctx.layout.source()
            )
        }
    }
}
