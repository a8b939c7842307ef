//! The allocator's own order-0 pair at `N` bytes beside 64 bytes, for
//! `bench breakdown --page-size N`.
//!
//! Each step's allocator is built at both sizes over the same model kind,
//! and on each path all twelve (six steps × two sizes) run their trials
//! interleaved, so a step's pair at `N` pairs trial by trial with the same
//! step at 64 bytes: the ratio is paired, and its interval
//! (`crate::spread`) says whether the size moved the pair.

use buddy::{AllocError, Options};
use sparsemem::{Layout, PageSize};
use vmemmap::VmemmapOptions;

use super::{STEPS, Step, gfp};
use crate::experiments::memdesc::alloc::{PairPath, SizedAllocator, sized_allocator};
use crate::experiments::memdesc::sized::{BuildableAt, SizedVisitor, with_model_at};
use crate::models::ModelKind;
use crate::timing::{Measurement, Plan};

/// One step's pair on one path at both sizes, from one interleaved set.
#[derive(Clone, Debug)]
pub struct PairAt {
    /// The pair at 64 bytes.
    pub at_64: Measurement,
    /// The pair at the run's size.
    pub at_size: Measurement,
}

/// One step's pairs on both paths.
#[derive(Clone, Debug)]
pub struct StepPairs {
    /// The step.
    pub step: Step,
    /// Through the per-CPU lists.
    pub pcp: PairAt,
    /// On the zone path.
    pub zone: PairAt,
}

/// The allocator options of `step` in `era`.
fn step_options(era: buddy::Era, step: Step) -> Options {
    Options {
        era,
        mechanisms: step.mechanisms(),
        frames: step.zero(),
        ..Options::default()
    }
}

/// Every step's allocator on a model of type `M`.
struct StepAllocators {
    era: buddy::Era,
}

type Built = Result<Vec<Box<dyn SizedAllocator>>, AllocError>;

impl SizedVisitor for StepAllocators {
    type Output = Built;
    fn visit<M: BuildableAt>(self, layout: &Layout, options: VmemmapOptions) -> Built {
        STEPS
            .iter()
            .map(|&step| sized_allocator::<M>(layout, options, step_options(self.era, step)))
            .collect::<Result<Vec<_>, _>>()
    }
}

/// The steps' allocators of `kind` at `size`.
fn build(kind: ModelKind, size: PageSize, layout: &Layout, era: buddy::Era) -> Built {
    with_model_at(
        kind,
        size,
        layout,
        VmemmapOptions::default(),
        StepAllocators { era },
    )
}

/// One path's steps at 64 bytes and at `size`, interleaved.
fn path(
    kind: ModelKind,
    size: PageSize,
    layout: &Layout,
    era: buddy::Era,
    plan: Plan,
    which: PairPath,
) -> Result<Vec<PairAt>, AllocError> {
    let at_size = build(kind, size, layout, era)?;
    let at_64 = build(kind, PageSize::B64, layout, era)?;
    let n = match which {
        PairPath::Pcp => plan.iters(2_000_000, 20_000),
        PairPath::Zone => plan.iters(200_000, 2_000),
    };
    // 64 and `size` alternate step by step: [64 s0, N s0, 64 s1, N s1, …].
    let mut variants: Vec<(&dyn SizedAllocator, buddy::Gfp)> = STEPS
        .iter()
        .zip(at_64.iter().zip(&at_size))
        .flat_map(|(&step, (a, b))| {
            [
                (a.as_ref(), gfp(step.zero())),
                (b.as_ref(), gfp(step.zero())),
            ]
        })
        .collect();
    let timed = plan.measure_interleaved(&mut variants, |(alloc, gfp)| {
        std::hint::black_box(alloc.pairs(which, n, *gfp));
        n
    });
    let mut timed = timed.into_iter();
    Ok(STEPS
        .iter()
        .map(|_| PairAt {
            at_64: timed.next().expect("one per variant"),
            at_size: timed.next().expect("one per variant"),
        })
        .collect())
}

/// Every step's pair of `kind` at `size` beside 64 bytes.
pub fn measure_pairs(
    kind: ModelKind,
    size: PageSize,
    layout: &Layout,
    era: buddy::Era,
    plan: Plan,
) -> Result<Vec<StepPairs>, AllocError> {
    let pcp = path(kind, size, layout, era, plan, PairPath::Pcp)?;
    let zone = path(kind, size, layout, era, plan, PairPath::Zone)?;
    Ok(STEPS
        .iter()
        .zip(pcp.into_iter().zip(zone))
        .map(|(&step, (pcp, zone))| StepPairs { step, pcp, zone })
        .collect())
}
