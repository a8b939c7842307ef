//! The three scalability workloads of LLFree's evaluation (Wrenger et al.,
//! USENIX ATC 2023; the kernel module of its artifact,
//! `linux-alloc-bench`), written once over [`ScaleAllocator`] so that the
//! buddy's per-CPU path, its zone path, LLFree and a thread-safe peer run
//! the same loops:
//!
//! - [`bulk`]: every thread allocates its share of the blocks, all wait,
//!   then every thread frees its blocks in the order it got them (the
//!   paper's `bulk`, whose allocation phase it quotes);
//! - [`repeat`]: every thread allocates one block and frees it at once,
//!   over and over (`repeat`);
//! - [`rand`]: every thread allocates its share, the blocks are shuffled
//!   between all threads (as the artifact's `rand` does, so a thread frees
//!   blocks another CPU allocated), then every thread frees a random block
//!   of the ones it holds and allocates one in its place, over and over.
//!   The paper's `rand` frees each shuffled block once and times only the
//!   frees; here a free is paired with its replacement, so the held set
//!   stays the same size and one figure covers both.
//!
//! Each thread is pinned to its own CPU, and each workload returns the
//! mean over threads of each thread's nanoseconds per operation, as the
//! artifact averages its threads' times. Every block a workload allocated
//! is freed before it returns, so the allocator ends as it started.

use std::hint::black_box;
use std::sync::{Barrier, Mutex, PoisonError};
use std::time::Instant;

use buddy::llfree::{Class, LLFree};
use buddy::{Allocator, BuddyModel, Gfp, Kernel, PerCpu};
use sparsemem::{NodeId, Order, Pfn};

use super::ScaleError;
use crate::threads::on_cpus;
use crate::workloads::XorShift;

/// An allocator the workloads can drive from several threads at once,
/// each through a handle of its own.
pub trait ScaleAllocator: Sync {
    /// One thread's handle (a per-CPU handle, a CPU index, or a plain
    /// reference for an allocator without per-CPU state).
    type Cpu<'a>: FrameCpu
    where
        Self: 'a;

    /// The handle of thread `thread` (built on that thread).
    fn cpu(&self, thread: usize) -> Result<Self::Cpu<'_>, ScaleError>;

    /// Free base pages, where the allocator counts them (after every
    /// handle is dropped: per-CPU lists are drained back then).
    fn nr_free_pages(&self) -> Option<u64>;
}

/// One thread's handle: a block out, a block back.
pub trait FrameCpu {
    /// A block of `1 << order` pages: its first frame.
    fn get(&mut self, order: Order) -> Result<u64, ScaleError>;
    /// Gives back a block [`FrameCpu::get`] returned with this order.
    fn put(&mut self, frame: u64, order: Order) -> Result<(), ScaleError>;
}

/// The buddy through the per-CPU lists: one [`PerCpu`] handle per thread,
/// `alloc_pages` and `free_unref_page` as the kernel's order-0 and (since
/// 5.14) THP-order requests take them.
pub struct PcpPath<'a, M: BuddyModel> {
    /// The allocator.
    pub alloc: &'a Allocator<M, Kernel>,
    /// The node every thread allocates on.
    pub node: NodeId,
}

/// The buddy's zone path: `__alloc_pages` and `__free_pages` with no
/// per-CPU list, the zone lock taken on every call.
pub struct ZonePath<'a, M: BuddyModel> {
    /// The allocator.
    pub alloc: &'a Allocator<M, Kernel>,
    /// The node every thread allocates on.
    pub node: NodeId,
}

/// A thread's handle on the zone path.
pub struct ZoneCpu<'a, M: BuddyModel> {
    alloc: &'a Allocator<M, Kernel>,
    node: NodeId,
}

/// A thread's handle on LLFree: its CPU index (its own reservations).
pub struct LlfreeCpu<'a> {
    llfree: &'a LLFree,
    cpu: usize,
}

/// The request every workload makes: a user page, as the artifact's
/// `GFP_HIGHUSER_MOVABLE`.
const GFP: Gfp = Gfp::HIGHUSER_MOVABLE;

fn refused(allocator: &'static str, what: impl std::fmt::Display) -> ScaleError {
    ScaleError::Refused {
        allocator,
        why: what.to_string(),
    }
}

impl<M: BuddyModel> ScaleAllocator for PcpPath<'_, M> {
    type Cpu<'b>
        = PerCpu<'b, M, Kernel>
    where
        Self: 'b;

    fn cpu(&self, _: usize) -> Result<Self::Cpu<'_>, ScaleError> {
        self.alloc
            .cpu_on(self.node)
            .map_err(|e| refused("buddy-pcp", e))
    }

    fn nr_free_pages(&self) -> Option<u64> {
        Some(self.alloc.free_pages_total())
    }
}

impl<M: BuddyModel> FrameCpu for PerCpu<'_, M, Kernel> {
    #[inline]
    fn get(&mut self, order: Order) -> Result<u64, ScaleError> {
        self.alloc_pages(order, GFP)
            .map(Pfn::get)
            .map_err(|_| ScaleError::NoMemory {
                allocator: "buddy-pcp",
                order: order.get(),
            })
    }

    #[inline]
    fn put(&mut self, frame: u64, order: Order) -> Result<(), ScaleError> {
        self.free_pages(Pfn::new(frame), order)
            .map_err(|e| refused("buddy-pcp", e))
    }
}

impl<M: BuddyModel> ScaleAllocator for ZonePath<'_, M> {
    type Cpu<'b>
        = ZoneCpu<'b, M>
    where
        Self: 'b;

    fn cpu(&self, _: usize) -> Result<Self::Cpu<'_>, ScaleError> {
        Ok(ZoneCpu {
            alloc: self.alloc,
            node: self.node,
        })
    }

    fn nr_free_pages(&self) -> Option<u64> {
        Some(self.alloc.free_pages_total())
    }
}

impl<M: BuddyModel> FrameCpu for ZoneCpu<'_, M> {
    #[inline]
    fn get(&mut self, order: Order) -> Result<u64, ScaleError> {
        self.alloc
            .alloc_pages(order, GFP, self.node, None)
            .map(Pfn::get)
            .map_err(|_| ScaleError::NoMemory {
                allocator: "buddy-zone",
                order: order.get(),
            })
    }

    #[inline]
    fn put(&mut self, frame: u64, order: Order) -> Result<(), ScaleError> {
        self.alloc
            .free_pages(Pfn::new(frame), order)
            .map_err(|e| refused("buddy-zone", e))
    }
}

impl ScaleAllocator for LLFree {
    type Cpu<'a> = LlfreeCpu<'a>;

    fn cpu(&self, thread: usize) -> Result<Self::Cpu<'_>, ScaleError> {
        if thread >= self.nr_cpus() {
            return Err(refused(
                "llfree",
                format!("thread {thread} but {} CPUs", self.nr_cpus()),
            ));
        }
        Ok(LlfreeCpu {
            llfree: self,
            cpu: thread,
        })
    }

    fn nr_free_pages(&self) -> Option<u64> {
        Some(self.free_frames())
    }
}

impl FrameCpu for LlfreeCpu<'_> {
    #[inline]
    fn get(&mut self, order: Order) -> Result<u64, ScaleError> {
        self.llfree
            .get(self.cpu, order, Class::Movable)
            .map(Pfn::get)
            .map_err(|_| ScaleError::NoMemory {
                allocator: "llfree",
                order: order.get(),
            })
    }

    #[inline]
    fn put(&mut self, frame: u64, order: Order) -> Result<(), ScaleError> {
        self.llfree
            .put(self.cpu, Pfn::new(frame), order)
            .map_err(|e| refused("llfree", e))
    }
}

#[cfg(feature = "peers")]
use crate::experiments::peers::crates::CheckedSummaryBuddy;

/// `frame-alloc`: every thread shares the one lock-free allocator.
#[cfg(feature = "peers")]
impl ScaleAllocator for CheckedSummaryBuddy {
    type Cpu<'a> = &'a CheckedSummaryBuddy;

    fn cpu(&self, _: usize) -> Result<Self::Cpu<'_>, ScaleError> {
        Ok(self)
    }

    fn nr_free_pages(&self) -> Option<u64> {
        None
    }
}

#[cfg(feature = "peers")]
impl FrameCpu for &CheckedSummaryBuddy {
    #[inline]
    fn get(&mut self, order: Order) -> Result<u64, ScaleError> {
        self.alloc_block(order.get()).ok_or(ScaleError::NoMemory {
            allocator: "frame-alloc",
            order: order.get(),
        })
    }

    #[inline]
    fn put(&mut self, frame: u64, order: Order) -> Result<(), ScaleError> {
        if self.free_block(frame, order.get()) {
            Ok(())
        } else {
            Err(refused(
                "frame-alloc",
                format!(
                    "pfn {frame:#x} is not a live block of order {}",
                    order.get()
                ),
            ))
        }
    }
}

/// What one run of a workload measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Run {
    /// The threads' mean of their ns per operation: an allocation
    /// (`bulk`), an allocation and its free (`repeat`), a free and its
    /// replacement (`rand`).
    pub ns_per_op: f64,
    /// `bulk`'s free phase, the same way; `None` for the others.
    pub free_ns_per_op: Option<f64>,
    /// Whether every thread was pinned to its CPU.
    pub pinned: bool,
}

/// The threads' per-thread results as one [`Run`], or the first error.
fn joined(
    joined: crate::threads::Joined<Result<(f64, Option<f64>), ScaleError>>,
) -> Result<Run, ScaleError> {
    let n = joined.results.len().max(1) as f64;
    let mut ns = 0.0;
    let mut free: Option<f64> = None;
    for r in joined.results {
        let (a, f) = r?;
        ns += a / n;
        free = f.map(|f| free.unwrap_or(0.0) + f / n);
    }
    Ok(Run {
        ns_per_op: ns,
        free_ns_per_op: free,
        pinned: joined.pinned,
    })
}

fn per_op(started: Instant, ops: u64) -> f64 {
    started.elapsed().as_nanos() as f64 / ops.max(1) as f64
}

/// `bulk`: thread `t` on CPU `cpus[t]` allocates `blocks_each` blocks of
/// `order`, every thread waits for the others, then frees them in order.
pub fn bulk<A: ScaleAllocator>(
    alloc: &A,
    cpus: &[usize],
    order: Order,
    blocks_each: u64,
) -> Result<Run, ScaleError> {
    let phase = Barrier::new(cpus.len());
    let work = |_, cpu: Result<A::Cpu<'_>, ScaleError>| {
        // Every thread reaches the barrier, failed or not.
        let mut cpu = match cpu {
            Ok(cpu) => cpu,
            Err(e) => {
                phase.wait();
                return Err(e);
            }
        };
        let mut held = Vec::with_capacity(blocks_each as usize);
        let mut got = Ok(());
        let started = Instant::now();
        for _ in 0..blocks_each {
            match cpu.get(order) {
                Ok(frame) => held.push(frame),
                Err(e) => {
                    got = Err(e);
                    break;
                }
            }
        }
        let alloc_ns = per_op(started, blocks_each);
        phase.wait();
        let started = Instant::now();
        for &frame in &held {
            cpu.put(black_box(frame), order)?;
        }
        got.map(|()| (alloc_ns, Some(per_op(started, blocks_each))))
    };
    joined(on_cpus(cpus, |t| alloc.cpu(t), work))
}

/// `repeat`: thread `t` on CPU `cpus[t]` allocates a block of `order` and
/// frees it, `ops_each` times.
pub fn repeat<A: ScaleAllocator>(
    alloc: &A,
    cpus: &[usize],
    order: Order,
    ops_each: u64,
) -> Result<Run, ScaleError> {
    let work = |_, cpu: Result<A::Cpu<'_>, ScaleError>| {
        let mut cpu = cpu?;
        let started = Instant::now();
        for _ in 0..ops_each {
            let frame = cpu.get(order)?;
            cpu.put(black_box(frame), order)?;
        }
        Ok((per_op(started, ops_each), None))
    };
    joined(on_cpus(cpus, |t| alloc.cpu(t), work))
}

/// `rand`'s shape: blocks each thread holds, free-and-replace operations
/// each thread does, and the seed of the shuffle and the picks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RandShape {
    /// Blocks each thread holds.
    pub blocks_each: u64,
    /// Frees (each with its replacement) per thread.
    pub ops_each: u64,
    /// Seed of the shuffle and of each thread's picks.
    pub seed: u64,
}

/// `rand`: every thread on CPU `cpus[t]` allocates `blocks_each` blocks of
/// `order`; the blocks are shuffled between the threads; then each frees
/// a random block of its own and allocates one in its place, `ops_each`
/// times (timed), and frees what it holds.
pub fn rand<A: ScaleAllocator>(
    alloc: &A,
    cpus: &[usize],
    order: Order,
    shape: RandShape,
) -> Result<Run, ScaleError> {
    let shares = fill(alloc, cpus, order, shape.blocks_each)?;
    let shares: Vec<Mutex<Vec<u64>>> = shuffle(shares, shape.seed)
        .into_iter()
        .map(Mutex::new)
        .collect();
    let work = |t: usize, cpu: Result<A::Cpu<'_>, ScaleError>| {
        let mut held =
            std::mem::take(&mut *shares[t].lock().unwrap_or_else(PoisonError::into_inner));
        let held = &mut held;
        let mut cpu = cpu?;
        let mut rng = XorShift(shape.seed ^ (t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let started = Instant::now();
        let mut outcome = Ok(());
        for _ in 0..shape.ops_each {
            if held.is_empty() {
                break;
            }
            let i = (rng.next_u64() % held.len() as u64) as usize;
            outcome = replace(&mut cpu, held, i, order);
            if outcome.is_err() {
                break;
            }
        }
        let ns = per_op(started, shape.ops_each);
        for frame in held.drain(..) {
            cpu.put(frame, order)?;
        }
        outcome.map(|()| (ns, None))
    };
    joined(on_cpus(cpus, |t| alloc.cpu(t), work))
}

/// Every thread on CPU `cpus[t]` allocates `blocks_each` blocks of
/// `order`: each thread's blocks, or (everything given back) the first
/// error.
fn fill<A: ScaleAllocator>(
    alloc: &A,
    cpus: &[usize],
    order: Order,
    blocks_each: u64,
) -> Result<Vec<Vec<u64>>, ScaleError> {
    let fill = |_, cpu: Result<A::Cpu<'_>, ScaleError>| {
        let mut cpu = cpu.map_err(|e| (e, Vec::new()))?;
        let mut held = Vec::with_capacity(blocks_each as usize);
        for _ in 0..blocks_each {
            match cpu.get(order) {
                Ok(frame) => held.push(frame),
                Err(e) => return Err((e, held)),
            }
        }
        Ok(held)
    };
    let filled = on_cpus(cpus, |t| alloc.cpu(t), fill);
    let mut shares = Vec::with_capacity(cpus.len());
    let mut failure = None;
    for r in filled.results {
        match r {
            Ok(held) => shares.push(held),
            Err((e, held)) => {
                failure.get_or_insert(e);
                shares.push(held);
            }
        }
    }
    match failure {
        Some(e) => {
            give_back(alloc, cpus, order, shares);
            Err(e)
        }
        None => Ok(shares),
    }
}

/// Frees `held[i]` and allocates its replacement into the same slot (the
/// slot is dropped when no replacement comes).
#[inline]
fn replace<C: FrameCpu>(
    cpu: &mut C,
    held: &mut Vec<u64>,
    i: usize,
    order: Order,
) -> Result<(), ScaleError> {
    cpu.put(held[i], order)?;
    match cpu.get(order) {
        Ok(frame) => {
            held[i] = frame;
            Ok(())
        }
        Err(e) => {
            held.swap_remove(i);
            Err(e)
        }
    }
}

/// Frees every block of `shares` (the fill of a `rand` that failed).
fn give_back<A: ScaleAllocator>(alloc: &A, cpus: &[usize], order: Order, shares: Vec<Vec<u64>>) {
    let shares: Vec<Mutex<Vec<u64>>> = shares.into_iter().map(Mutex::new).collect();
    on_cpus(
        cpus,
        |t| alloc.cpu(t),
        |t, cpu| {
            let Ok(mut cpu) = cpu else {
                return;
            };
            let mut held = shares[t].lock().unwrap_or_else(PoisonError::into_inner);
            for frame in held.drain(..) {
                // A block this run allocated: the free cannot be refused,
                // and a refusal would leave nothing else to do.
                let _ = cpu.put(frame, order);
            }
        },
    );
}

/// The blocks of every share shuffled between all shares (Fisher–Yates
/// over their concatenation), each share keeping its size.
pub fn shuffle(shares: Vec<Vec<u64>>, seed: u64) -> Vec<Vec<u64>> {
    let sizes: Vec<usize> = shares.iter().map(Vec::len).collect();
    let mut all: Vec<u64> = shares.into_iter().flatten().collect();
    let mut rng = XorShift(seed | 1);
    for i in (1..all.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        all.swap(i, j);
    }
    let mut rest = all.into_iter();
    sizes
        .into_iter()
        .map(|n| rest.by_ref().take(n).collect())
        .collect()
}

#[cfg(test)]
#[path = "workloads_tests.rs"]
mod tests;
