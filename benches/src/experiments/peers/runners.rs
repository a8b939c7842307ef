//! The contenders as runners: each holds its state for every workload and
//! runs one trial at a time, so that [`measure_all`] can interleave every
//! contender's trials of one workload (one trial of each in turn) and the
//! ratios between contenders pair trial by trial.
//!
//! The workloads run one after another, split-merge first: pfnlab's
//! split-merge pair runs on the zone path while its per-CPU lists are still
//! empty, so no per-CPU list holds pages of the block the pair splits (a
//! refill would leave order-0 pages free and the pair would split nothing).

use buddy::llfree::{LLFree, LlfreeError};
use buddy::{AllocError, Allocator, Kernel, PerCpu};
use sparsemem::{NodeId, Order, Pfn};

use super::{Contender, THREADS, Workload};
use crate::models::Buildable;
use crate::timing::{Measurement, Plan};
use crate::workloads::{
    Frames, SharedFrames, bursts, frame_bursts, frame_pairs, llfree_bursts, llfree_bursts_threads,
    llfree_pairs, pcp_bursts_threads, pcp_pairs, shared_bursts, zone_pairs,
};

/// Pages per burst.
const BURST: usize = 128;

/// One contender's state for every workload.
pub(super) trait Runner {
    /// Who it is.
    fn contender(&self) -> Contender;

    /// One run of `workload` sized by `n` (the plan's iteration count):
    /// the pages or pairs it did.
    fn run(&mut self, workload: Workload, n: u64) -> u64;
}

/// Each workload in the order it is measured, and the contenders' results
/// per workload in [`Workload::ALL`] order: every contender that can do a
/// workload runs it, their trials interleaved.
pub(super) fn measure_all(
    plan: Plan,
    runners: &mut [&mut dyn Runner],
) -> Vec<(Workload, Vec<(Contender, Measurement)>)> {
    const ORDER: [Workload; 4] = [
        Workload::SplitMergePair,
        Workload::HotPair,
        Workload::Burst,
        Workload::BurstTwoThreads,
    ];
    let n = plan.iters(2_000_000, 20_000);
    let mut out = Vec::with_capacity(ORDER.len());
    for workload in ORDER {
        let mut taking: Vec<&mut dyn Runner> = runners
            .iter_mut()
            .filter(|r| r.contender().does(workload))
            .map(|r| &mut **r)
            .collect();
        let who: Vec<Contender> = taking.iter().map(|r| r.contender()).collect();
        let measured = plan.measure_interleaved(&mut taking, |r| r.run(workload, n));
        out.push((workload, who.into_iter().zip(measured).collect()));
    }
    out.sort_by_key(|(w, _)| Workload::ALL.iter().position(|a| a == w));
    out
}

/// pfnlab's allocator, bookkeeping only.
pub(super) struct Ours<'a, M: Buildable> {
    alloc: &'a Allocator<M, Kernel>,
    node: NodeId,
    cpu: PerCpu<'a, M, Kernel>,
    held: Vec<Pfn>,
    /// Split-merge pairs done so far, warm-up included (the zone
    /// statistics count them too).
    pub(super) split_pairs: u64,
}

impl<'a, M: Buildable> Ours<'a, M> {
    /// A runner over `alloc`'s `node`, with one per-CPU handle for the
    /// hot pair and the bursts (its lists stay empty until the first).
    pub(super) fn new(
        alloc: &'a Allocator<M, Kernel>,
        node: NodeId,
    ) -> Result<Ours<'a, M>, AllocError> {
        Ok(Ours {
            alloc,
            node,
            cpu: alloc.cpu_on(node)?,
            held: Vec::with_capacity(BURST),
            split_pairs: 0,
        })
    }
}

impl<M: Buildable> Runner for Ours<'_, M> {
    fn contender(&self) -> Contender {
        Contender::Pfnlab
    }

    fn run(&mut self, workload: Workload, n: u64) -> u64 {
        match workload {
            Workload::SplitMergePair => {
                std::hint::black_box(zone_pairs(self.alloc, self.node, n / 10));
                self.split_pairs += n / 10;
                n / 10
            }
            Workload::HotPair => {
                std::hint::black_box(pcp_pairs(&mut self.cpu, n));
                n
            }
            Workload::Burst => {
                let rounds = n / BURST as u64;
                std::hint::black_box(bursts(&mut self.cpu, rounds, BURST, &mut self.held));
                n / BURST as u64 * BURST as u64
            }
            Workload::BurstTwoThreads => {
                pcp_bursts_threads(self.alloc, self.node, THREADS, n / BURST as u64, BURST)
            }
        }
    }
}

/// A peer (or the floor): the hot pair on one instance with a frame
/// pinned, so that its buddy is the only free order-0 frame; split-merge
/// pairs and then bursts on a fresh one whose partly used max-order blocks
/// are held ([`hold_partial_blocks`]), so that its pair splits a whole
/// block as pfnlab's and the floor's do; the two-thread burst on a shared
/// one.
pub(super) struct Peer<F: Frames, S: SharedFrames> {
    who: Contender,
    hot: F,
    _pinned: Option<u64>,
    fresh: F,
    _partial: Vec<u64>,
    shared: S,
    held: Vec<u64>,
}

impl<F: Frames, S: SharedFrames> Peer<F, S> {
    /// A runner over three instances of one allocator; `hold` keeps the
    /// fresh one's partly used blocks ([`hold_partial_blocks`], or nothing
    /// for the floor, whose free blocks are all whole).
    pub(super) fn new(
        who: Contender,
        [mut hot, mut fresh]: [F; 2],
        shared: S,
        hold: impl FnOnce(&mut F) -> Vec<u64>,
    ) -> Peer<F, S> {
        let pinned = hot.alloc_frame();
        let partial = hold(&mut fresh);
        Peer {
            who,
            hot,
            _pinned: pinned,
            fresh,
            _partial: partial,
            shared,
            held: Vec::with_capacity(BURST),
        }
    }
}

/// Allocates and keeps the free frames of `frames`' partly used max-order
/// blocks (of `block_pages` frames), so that its next order-0 allocation
/// splits a whole block: every buddy allocation takes the smallest free
/// block that fits, so frames come from those blocks until the first frame
/// aligned to a whole block, which is given back (it merges into the
/// block again). Returns the frames kept: none where every free block is
/// whole; for `frame-alloc`, the free rest of the block whose first frames
/// hold its bitmaps (on `x86-pci-hole`, pfns 0x208..0x400: free blocks of
/// orders 3 to 8, from which its pairs would split three times, not ten).
///
/// The floor is never given to it: a call site more of its `alloc` and
/// `free` changes what the compiler inlines into its timed loops.
// Giving a frame back is `Frames`' `unsafe fn` (some peers trust the
// frame); the one given back here was just allocated from the same peer.
#[allow(unsafe_code)]
pub fn hold_partial_blocks<F: Frames>(frames: &mut F, block_pages: u64) -> Vec<u64> {
    let mut kept = Vec::new();
    while let Some(frame) = frames.alloc_frame() {
        if frame.is_multiple_of(block_pages) {
            // SAFETY: just allocated from `frames`, given back once.
            unsafe { frames.free_frame(frame) };
            break;
        }
        kept.push(frame);
    }
    kept
}

impl<F: Frames, S: SharedFrames> Runner for Peer<F, S> {
    fn contender(&self) -> Contender {
        self.who
    }

    fn run(&mut self, workload: Workload, n: u64) -> u64 {
        let rounds = n / BURST as u64;
        match workload {
            Workload::HotPair => {
                std::hint::black_box(frame_pairs(&mut self.hot, n));
                n
            }
            Workload::SplitMergePair => {
                std::hint::black_box(frame_pairs(&mut self.fresh, n / 10));
                n / 10
            }
            Workload::Burst => {
                std::hint::black_box(frame_bursts(&mut self.fresh, rounds, BURST, &mut self.held));
                rounds * BURST as u64
            }
            Workload::BurstTwoThreads => shared_bursts(&self.shared, THREADS, rounds, BURST),
        }
    }
}

/// LLFree: the hot pair and the bursts on an instance with one CPU; the two-thread bursts on one shared instance with a CPU (and
/// so a reservation) per thread.
pub(super) struct Llfree {
    one: LLFree,
    shared: LLFree,
    held: Vec<Pfn>,
}

impl Llfree {
    /// Two instances of `nr_frames` frames.
    pub(super) fn new(nr_frames: u64) -> Result<Llfree, LlfreeError> {
        Ok(Llfree {
            one: LLFree::new(nr_frames, 1)?,
            shared: LLFree::new(nr_frames, THREADS)?,
            held: Vec::with_capacity(BURST),
        })
    }
}

impl Runner for Llfree {
    fn contender(&self) -> Contender {
        Contender::Llfree
    }

    fn run(&mut self, workload: Workload, n: u64) -> u64 {
        let rounds = n / BURST as u64;
        match workload {
            Workload::HotPair => {
                std::hint::black_box(llfree_pairs(&self.one, 0, Order::ZERO, n));
                n
            }
            Workload::SplitMergePair => {
                unreachable!("LLFree has no split-merge pair (`Contender::does`)")
            }
            Workload::Burst => {
                std::hint::black_box(llfree_bursts(&self.one, 0, rounds, BURST, &mut self.held));
                rounds * BURST as u64
            }
            Workload::BurstTwoThreads => {
                llfree_bursts_threads(&self.shared, THREADS, rounds, BURST)
            }
        }
    }
}
