//! `bench hvo`'s pool part: each mode's pool grown and shrunk in turn,
//! trials interleaved, while a thread on the other CPU keeps reading the
//! memmap.
//!
//! The remap's `mmap(MAP_FIXED)` and hole punches change this process's
//! page tables, so the host kernel shoots down the TLB entries of every
//! CPU running a thread of it: the toucher, pinned to CPU 1, holds
//! entries for the memmap it reads and takes those flushes. Its read rate
//! over each mode's grow and shrink windows is the cost HVO puts on a
//! bystander, as the toucher's CPU time per read (time the scheduler gave
//! other tasks is not in it); HVO off's windows, in the same trials, are
//! its baseline. A window in which the toucher did fewer than
//! [`MIN_TOUCHES`] reads (it was not scheduled) gives no sample.
//! With gigantic folios the same is done one 1 GiB folio per trial, where
//! the layout has a free contiguous range.

use std::sync::Mutex;
use std::sync::atomic::{
    AtomicBool,
    Ordering::{Acquire, Relaxed},
};
use std::time::{Duration, Instant};

use buddy::{Allocator, BuddyModel, HugetlbError, HugetlbPool, Kernel};
use sparsemem::{NodeId, Pfn};

use super::{HvoModeId, ModeResult};
use crate::threads::{Placement, on_threads};
use crate::timing::{Measurement, Plan, next_set};
use crate::workloads::{hugetlb_grow, hugetlb_shrink, read_flags};

/// Fewest toucher reads in a mode's windows for a sample: four batches.
pub(super) const MIN_TOUCHES: u64 = 4 * 256;

/// One pool per mode, with the resident memmap last read with it grown.
pub(super) type Pools = Vec<(HvoModeId, HugetlbPool, u64)>;

/// An empty pool of folios of `order` for each mode.
pub(super) fn new_pools<M: BuddyModel>(
    alloc: &Allocator<M, Kernel>,
    order: u32,
    node: NodeId,
) -> Result<Pools, HugetlbError> {
    HvoModeId::ALL
        .iter()
        .map(|&m| Ok((m, HugetlbPool::new(alloc, order, node, m.mode())?, 0u64)))
        .collect()
}

/// Sets the stop flag when dropped, so the toucher ends even when the
/// measuring thread unwinds.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        // Relaxed: see `memmap_toucher`.
        self.0.store(true, Relaxed);
    }
}

/// What the pool part measured.
pub(super) struct PoolRun {
    /// Each mode's timings.
    pub modes: Vec<ModeResult>,
    /// Whether both threads ran on their own CPU.
    pub pinned: bool,
}

/// Grows and shrinks each pool by `folios` per trial, the toucher
/// reading `touched` on the other CPU throughout.
pub(super) fn pool_trials<M: BuddyModel>(
    alloc: &Allocator<M, Kernel>,
    plan: Plan,
    pools: &mut Pools,
    folios: u64,
    touched: &[Pfn],
) -> Result<PoolRun, HugetlbError> {
    let touches = ToucherCounts::default();
    let stop = AtomicBool::new(false);
    let pools = Mutex::new(pools);
    let joined = on_threads(
        2,
        Placement::Pinned,
        |_| (),
        |t, ()| {
            if t == 1 {
                std::hint::black_box(memmap_toucher(alloc.model(), touched, &touches, &stop));
                return None;
            }
            let _stop = StopOnDrop(&stop);
            let mut pools = pools.lock().unwrap_or_else(|e| e.into_inner());
            Some(grow_shrink(alloc, plan, &mut pools, folios, &touches))
        },
    );
    let modes = joined
        .results
        .into_iter()
        .flatten()
        .next()
        .expect("thread 0 measures")?;
    Ok(PoolRun {
        modes,
        pinned: joined.pinned,
    })
}

/// Per-trial samples of one mode.
#[derive(Clone, Default)]
struct Samples {
    grow: Vec<f64>,
    shrink: Vec<f64>,
    touch: Vec<f64>,
}

/// The trials: each pool grown by `folios`, its resident memmap read,
/// then shrunk, in turn; the toucher's reads counted over the two timed
/// windows (not over the resident read between them).
fn grow_shrink<M: BuddyModel>(
    alloc: &Allocator<M, Kernel>,
    plan: Plan,
    pools: &mut Pools,
    folios: u64,
    touches: &ToucherCounts,
) -> Result<Vec<ModeResult>, HugetlbError> {
    let mut samples = vec![Samples::default(); pools.len()];
    // Acquire pairs with the toucher's Release add: the CPU time read
    // next is at least the one published with that count.
    let read = || {
        let n = touches.touches.load(Acquire);
        (n, touches.cpu_ns.load(Relaxed))
    };
    let timed = |f: &mut dyn FnMut() -> Result<u64, HugetlbError>| {
        let (c0, t0) = (read(), Instant::now());
        let got = f();
        let (t1, c1) = (Instant::now(), read());
        (got, t1 - t0, (c1.0 - c0.0, c1.1.saturating_sub(c0.1)))
    };
    for trial in 0..=plan.trials {
        for (i, (_, pool, resident)) in pools.iter_mut().enumerate() {
            // One grow and shrink of the pool, repeated until the trial
            // has lasted `--min-time` (at least once).
            let mut t = Rounds::default();
            while t.rounds == 0 || t.grow_t + t.shrink_t < plan.min_time {
                let (got, grow_t, grow_c) = timed(&mut || hugetlb_grow(alloc, pool, folios));
                // Read between the timed steps: smaps is slow to read.
                *resident = alloc.model().memmap_bytes().resident;
                let (freed, shrink_t, shrink_c) =
                    timed(&mut || hugetlb_shrink(alloc, pool, folios));
                t.add(got?, grow_t, freed?, shrink_t, grow_c, shrink_c);
            }
            if trial > 0 {
                let s = &mut samples[i];
                s.grow.push(per(t.grow_t, t.grown));
                s.shrink.push(per(t.shrink_t, t.freed));
                if t.touches >= MIN_TOUCHES {
                    s.touch.push(t.touch_ns as f64 / t.touches as f64);
                }
            }
        }
    }
    // Each trial grew and shrank every pool in turn: the grows pair with
    // each other, the shrinks, and the toucher's windows.
    let (grows, shrinks, touch) = (next_set(), next_set(), next_set());
    Ok(pools
        .iter()
        .zip(samples)
        .map(|((mode, _, resident), s)| ModeResult {
            mode: *mode,
            grow: Measurement::from_ns(s.grow).in_set(grows),
            shrink: Measurement::from_ns(s.shrink).in_set(shrinks),
            toucher: (!s.touch.is_empty()).then(|| Measurement::from_ns(s.touch).in_set(touch)),
            resident_bytes: *resident,
        })
        .collect())
}

/// One trial's grow and shrink rounds of one pool, summed.
#[derive(Default)]
struct Rounds {
    rounds: u64,
    grown: u64,
    grow_t: Duration,
    freed: u64,
    shrink_t: Duration,
    /// The toucher's touches and CPU ns during the timed steps.
    touches: u64,
    touch_ns: u64,
}

impl Rounds {
    fn add(
        &mut self,
        grown: u64,
        grow_t: Duration,
        freed: u64,
        shrink_t: Duration,
        grow_c: (u64, u64),
        shrink_c: (u64, u64),
    ) {
        self.rounds += 1;
        self.grown += grown;
        self.grow_t += grow_t;
        self.freed += freed;
        self.shrink_t += shrink_t;
        self.touches += grow_c.0 + shrink_c.0;
        self.touch_ns += grow_c.1 + shrink_c.1;
    }
}

/// Nanoseconds of `t` per one of `n` (at least one).
fn per(t: Duration, n: u64) -> f64 {
    t.as_nanos() as f64 / n.max(1) as f64
}

/// The pool part with one gigantic folio of `order` per trial, or the
/// notice why not: no free contiguous range of that size.
pub(super) fn gigantic<M: BuddyModel>(
    alloc: &Allocator<M, Kernel>,
    plan: Plan,
    order: u32,
    node: NodeId,
    touched: &[Pfn],
) -> Result<Result<PoolRun, String>, HugetlbError> {
    let mut pools = new_pools(alloc, order, node)?;
    // A probe: one plain folio, grown and given back.
    match pools[0].1.grow(alloc, 1) {
        Err(e @ HugetlbError::NoContiguousRange { .. }) => return Ok(Err(e.to_string())),
        other => {
            other?;
            pools[0].1.shrink(alloc, 1)?;
        }
    }
    pool_trials(alloc, plan, &mut pools, 1, touched).map(Ok)
}

/// What the toucher of `bench hvo` publishes for the measuring thread.
#[derive(Default)]
pub struct ToucherCounts {
    /// Memmap reads done.
    pub touches: std::sync::atomic::AtomicU64,
    /// The toucher's own CPU time (`CLOCK_THREAD_CPUTIME_ID`), ns, at the
    /// last update of `touches`: a window's reads divide its CPU time, so
    /// time the scheduler gave to other tasks is not counted, while TLB
    /// refills and shootdown interrupts taken on its CPU are.
    pub cpu_ns: std::sync::atomic::AtomicU64,
}

/// The toucher of `bench hvo`: reads the flags of `pfns` in turn, round
/// after round, until `stop` is set, publishing its reads and its CPU
/// time every 256 reads; returns a fold of the flags. Run on the other
/// CPU while the vmemmap is remapped, it holds TLB entries for the memmap
/// and so feels each shootdown.
#[inline(never)]
pub fn memmap_toucher<M: BuddyModel>(
    model: &M,
    pfns: &[Pfn],
    counts: &ToucherCounts,
    stop: &std::sync::atomic::AtomicBool,
) -> u64 {
    use std::sync::atomic::Ordering::{Relaxed, Release};
    const BATCH: usize = 256;
    let clock = nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID;
    let cpu_ns = || {
        clock.now().map_or(0, |t| {
            (t.tv_sec() as u64).saturating_mul(1_000_000_000) + t.tv_nsec() as u64
        })
    };
    let mut acc = 0;
    // Relaxed on `stop`: it orders nothing, it only has to be seen.
    while !stop.load(Relaxed) {
        for chunk in pfns.chunks(BATCH) {
            acc ^= read_flags(model, chunk);
            counts.cpu_ns.store(cpu_ns(), Relaxed);
            // Release: pairs with the sampler's Acquire load of `touches`,
            // so the CPU time it then reads is at least this batch's.
            counts.touches.fetch_add(chunk.len() as u64, Release);
        }
    }
    acc
}
