//! `alloc_pages_nolock` + `free_pages_nolock` beside the ordinary per-CPU
//! pair, in the eras that have them (6.15 on): the breakdown's full path
//! step prices them, their trials interleaved.

use buddy::{AllocError, Allocator, BuddyModel, Kernel, PerCpu, Variant};
use sparsemem::{Layout, Order};
use vmemmap::VmemmapOptions;

use super::{GFP, PathCost, Step, Visitor, Which, iters, pairs, priced};
use crate::models::Buildable;
use crate::spread::Interval;
use crate::timing::Measurement;

/// An `alloc_pages_nolock` + `free_pages_nolock` pair of order 0 and the
/// ordinary per-CPU pair (`alloc_pages` + `free_pages`, GFP_KERNEL) it was
/// timed beside, trial by trial.
#[derive(Clone, Debug)]
pub struct NolockCost {
    /// The nolock pair, with its memory-model share.
    pub nolock: PathCost,
    /// The ordinary pair, in the same trials.
    pub pcp: Measurement,
}

impl NolockCost {
    /// The nolock pair over the ordinary one, paired by trial.
    pub fn ratio(&self) -> Option<Interval> {
        Interval::between(&self.nolock.pair, &self.pcp).ok()
    }
}

/// `n` order-0 `alloc_pages_nolock` + `free_pages_nolock` pairs on `cpu`.
/// The era must have them and the zone memory to spare, as every path
/// here assumes.
pub(super) fn nolock_pairs<M: BuddyModel, V: Variant>(cpu: &mut PerCpu<'_, M, V>, n: u64) -> u64 {
    let mut acc = 0;
    for _ in 0..n {
        let pfn = cpu
            .alloc_pages_nolock(Order::ZERO)
            .expect("an era with alloc_pages_nolock")
            .expect("memory");
        acc ^= pfn.get();
        cpu.free_pages_nolock(pfn, Order::ZERO).expect("free");
    }
    acc
}

impl Visitor {
    /// The nolock pair and the ordinary per-CPU pair with every mechanism
    /// of the era (the per-call entry's step), their trials interleaved,
    /// and the nolock pair's model calls counted and priced.
    pub(super) fn nolock<M: Buildable>(
        &self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<NolockCost, AllocError> {
        let plan = self.plan;
        let n = iters(plan, Which::Nolock);
        let o = self.step_options(Step::Entry);
        let mut allocs = [Which::Pcp, Which::Nolock]
            .into_iter()
            .map(|which| {
                Ok((
                    Allocator::<M, Kernel>::new(M::build(layout, options)?, layout, o)?,
                    which,
                ))
            })
            .collect::<Result<Vec<_>, AllocError>>()?;
        let mut timed = plan.measure_interleaved(&mut allocs, |(alloc, which)| {
            std::hint::black_box(pairs(alloc, *which, n, GFP));
            n
        });
        drop(allocs);
        let nolock_pair = timed.pop().expect("two variants");
        let pcp = timed.pop().expect("two variants");
        let nolock = priced::<M>(
            layout,
            options,
            o,
            Which::Nolock,
            n,
            nolock_pair,
            plan.trials,
        )?;
        Ok(NolockCost { nolock, pcp })
    }
}
