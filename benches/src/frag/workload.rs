//! LLFree's fragmentation benchmark shape (Wrenger et al., "LLFree:
//! Scalable and Optionally-Persistent Page-Frame Allocation", USENIX ATC
//! 2023, and its published benchmark): fill memory with single frames
//! until the allocator refuses, free a random share of them, then,
//! iteration after iteration, free a random held frame and allocate one in
//! its place, as many times per iteration as a tenth of the frames freed.
//! The free memory is sampled after the free and after every iteration
//! ([`FragSample`]); the reading is how many huge frames are wholly free.
//!
//! The same sequence of requests (one seed) runs on the buddy of any era,
//! through per-CPU handles, and on LLFree, through its per-CPU
//! reservations; requests go to the CPUs in turn. A buddy allocation asks
//! `GFP_HIGHUSER_MOVABLE` or, for the immovable share, `GFP_KERNEL`
//! (Unmovable); LLFree's the movable or immovable class. The published
//! run has no immovable share; [`FragShape::immovable`] adds one.
//!
//! Where it differs from the published run, said: the buddy's fill stops
//! at its min watermark, where it first refuses, and LLFree's when memory
//! is full; frees and allocations alternate CPUs in one thread rather than
//! running on every core at once, so the order of requests, not their
//! timing, is what the allocators see.

use std::time::Instant;

use buddy::llfree::{Class, LLFree};
use buddy::{Allocator, BuddyModel, Gfp, PerCpu, Variant};
use sparsemem::{Migratetype, NodeId, Order, Pfn};

use super::recover::{Occupancy, Recovery, recover_buddy, wanted};
use super::{FragSample, Live, sample_buddy, sample_llfree};
use crate::workloads::xorshift;

/// The workload's shape.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct FragShape {
    /// The share of the frames held after the fill that is freed at
    /// random before the iterations (0 to 1).
    pub free: f64,
    /// Frees-and-allocations per iteration, as a share of the frames
    /// freed (0 to 1).
    pub churn: f64,
    /// Iterations after the free.
    pub iterations: u32,
    /// The share of allocations that are immovable (0 to 1).
    pub immovable: f64,
    /// CPUs the requests go to in turn.
    pub cpus: usize,
    /// Iterations between samples (the last iteration is always sampled).
    pub sample_every: u32,
    /// The request sequence's seed.
    pub seed: u64,
    /// Huge frames to recover from the end state ([`super::recover`]);
    /// `None` for the default, 1 % of the huge frames; 0 for none.
    pub recover: Option<u64>,
}

impl FragShape {
    /// The published benchmark's shape: half of memory freed, 100
    /// iterations of a tenth of that; every allocation movable; here on
    /// two CPUs.
    pub const PAPER: FragShape = FragShape {
        free: 0.5,
        churn: 0.10,
        iterations: 100,
        immovable: 0.0,
        cpus: 2,
        sample_every: 10,
        seed: 1,
        recover: None,
    };

    /// Whether every share is within 0 to 1 and there is a CPU.
    pub fn check(&self) -> Result<(), String> {
        for (what, v) in [
            ("free", self.free),
            ("churn", self.churn),
            ("immovable", self.immovable),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("{what} {v} is not a share from 0 to 1"));
            }
        }
        if self.cpus == 0 {
            return Err("no CPU to run the requests on".into());
        }
        if self.sample_every == 0 {
            return Err("a sample every 0 iterations".into());
        }
        Ok(())
    }
}

/// What one run did.
#[derive(Clone, Debug, PartialEq)]
pub struct FragRun {
    /// After the free, then every [`FragShape::sample_every`] iterations
    /// and after the last.
    pub series: Vec<FragSample>,
    /// Allocations and frees made.
    pub ops: u64,
    /// Time in the allocator's calls (sampling left out), ns.
    pub elapsed_ns: f64,
    /// Pages the fill took.
    pub filled: u64,
    /// Allocations refused after the fill.
    pub refused: u64,
    /// The cost to recover huge frames from the end state (`None` with
    /// recovery off).
    pub recovery: Option<Recovery>,
}

/// What an allocator under the workload does: one frame in, one out, and
/// a sample of its free memory.
trait Subject {
    /// Base pages it manages.
    fn managed(&self) -> u64;
    /// An order-0 frame of `mt` through `cpu`.
    fn get(&mut self, cpu: usize, mt: Migratetype) -> Option<Pfn>;
    /// Gives `pfn` back through `cpu`.
    fn put(&mut self, cpu: usize, pfn: Pfn) -> Result<(), String>;
    /// Its free memory now.
    fn sample(&self, ops: u64, live: &[Live]) -> FragSample;
    /// After the last iteration: the cost to recover the huge frames
    /// `recover` asks for ([`super::recover::wanted`]), then every
    /// allocation in `live` given back.
    fn finish(&mut self, live: Vec<Live>, recover: Option<u64>)
    -> Result<Option<Recovery>, String>;
}

/// A buddy allocator through one per-CPU handle per CPU.
struct Buddy<'a, M: BuddyModel, V: Variant> {
    alloc: &'a Allocator<M, V>,
    cpus: Vec<PerCpu<'a, M, V>>,
}

impl<M: BuddyModel, V: Variant> Subject for Buddy<'_, M, V> {
    fn managed(&self) -> u64 {
        self.alloc.managed_pages_total()
    }

    fn get(&mut self, cpu: usize, mt: Migratetype) -> Option<Pfn> {
        let gfp = match mt {
            Migratetype::Movable => Gfp::HIGHUSER_MOVABLE,
            _ => Gfp::KERNEL,
        };
        self.cpus.get_mut(cpu)?.alloc(gfp).ok()
    }

    fn put(&mut self, cpu: usize, pfn: Pfn) -> Result<(), String> {
        let handle = self.cpus.get_mut(cpu).ok_or("no such CPU")?;
        handle.free(pfn).map_err(|e| e.to_string())
    }

    fn sample(&self, ops: u64, live: &[Live]) -> FragSample {
        sample_buddy(self.alloc, ops, live)
    }

    fn finish(
        &mut self,
        mut live: Vec<Live>,
        recover: Option<u64>,
    ) -> Result<Option<Recovery>, String> {
        // `drain_all_pages`: the handles go, their lists drained.
        self.cpus.clear();
        let huge_frames = self.alloc.managed_pages_total()
            >> self.alloc.model().geometry().pageblock_order().get();
        let k = wanted(recover, huge_frames);
        let recovery = match k {
            0 => None,
            k => Some(recover_buddy(self.alloc, &mut live, k)?),
        };
        for held in live {
            self.alloc
                .free_pages(held.pfn, held.order)
                .map_err(|e| e.to_string())?;
        }
        Ok(recovery)
    }
}

/// LLFree, CPU by CPU.
struct Llfree<'a>(&'a LLFree);

impl Subject for Llfree<'_> {
    fn managed(&self) -> u64 {
        self.0.nr_frames()
    }

    fn get(&mut self, cpu: usize, mt: Migratetype) -> Option<Pfn> {
        self.0.get(cpu, Order::ZERO, Class::of(mt)).ok()
    }

    fn put(&mut self, cpu: usize, pfn: Pfn) -> Result<(), String> {
        self.0.put(cpu, pfn, Order::ZERO).map_err(|e| e.to_string())
    }

    fn sample(&self, ops: u64, live: &[Live]) -> FragSample {
        sample_llfree(self.0, ops, live)
    }

    fn finish(
        &mut self,
        live: Vec<Live>,
        recover: Option<u64>,
    ) -> Result<Option<Recovery>, String> {
        let huge_order = u32::from(buddy::llfree::HUGE_ORDER);
        let k = wanted(recover, self.0.nr_frames() >> huge_order);
        let recovery = (k > 0)
            .then(|| Recovery::measure(&Occupancy::of(&live, self.0.nr_frames(), huge_order), k));
        for held in live {
            self.put(0, held.pfn)?;
        }
        Ok(recovery)
    }
}

/// Runs `shape` on a buddy allocator, its CPUs on node 0 (or the first
/// node with memory). The allocator should be fresh: the fill counts on
/// its memory being free.
pub fn run_buddy<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    shape: &FragShape,
) -> Result<FragRun, String> {
    shape.check()?;
    let node = alloc.nodes().first().map_or(NodeId::new(0), |n| n.id);
    let cpus = (0..shape.cpus)
        .map(|_| alloc.cpu_on(node).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    run(&mut Buddy { alloc, cpus }, shape)
}

/// Runs `shape` on LLFree (with at least `shape.cpus` CPUs).
pub fn run_llfree(llfree: &LLFree, shape: &FragShape) -> Result<FragRun, String> {
    shape.check()?;
    if llfree.nr_cpus() < shape.cpus {
        return Err(format!(
            "LLFree has {} CPUs, the workload runs on {}",
            llfree.nr_cpus(),
            shape.cpus
        ));
    }
    run(&mut Llfree(llfree), shape)
}

/// The request sequence: which migratetype each allocation asks for.
struct Requests {
    rng: u64,
    immovable_per_mille: u64,
}

impl Requests {
    fn next(&mut self) -> Migratetype {
        if xorshift(&mut self.rng) % 1000 < self.immovable_per_mille {
            Migratetype::Unmovable
        } else {
            Migratetype::Movable
        }
    }

    fn pick(&mut self, n: usize) -> usize {
        (xorshift(&mut self.rng) % n as u64) as usize
    }
}

fn run(subject: &mut impl Subject, shape: &FragShape) -> Result<FragRun, String> {
    let mut req = Requests {
        // xorshift needs a non-zero state.
        rng: shape.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
        immovable_per_mille: (shape.immovable * 1000.0).round() as u64,
    };
    let mut live: Vec<Live> = Vec::with_capacity(subject.managed() as usize);
    let mut cpu = 0;
    let mut ops = 0u64;
    let t = Instant::now();
    loop {
        let mt = req.next();
        let Some(pfn) = subject.get(cpu, mt) else {
            break;
        };
        live.push(Live {
            pfn,
            order: Order::ZERO,
            migratetype: mt,
        });
        cpu = (cpu + 1) % shape.cpus;
    }
    let filled = live.len() as u64;
    let freed = (filled as f64 * shape.free) as usize;
    for _ in 0..freed {
        let held = live.swap_remove(req.pick(live.len()));
        subject.put(cpu, held.pfn)?;
        cpu = (cpu + 1) % shape.cpus;
    }
    let mut elapsed = t.elapsed().as_secs_f64() * 1e9;
    ops += filled + freed as u64;
    let mut series = vec![subject.sample(ops, &live)];
    let pairs = (freed as f64 * shape.churn) as usize;
    let mut refused = 0;
    for iteration in 1..=shape.iterations {
        let t = Instant::now();
        for _ in 0..pairs.min(live.len()) {
            let slot = req.pick(live.len());
            subject.put(cpu, live[slot].pfn)?;
            let mt = req.next();
            match subject.get(cpu, mt) {
                Some(pfn) => {
                    live[slot] = Live {
                        pfn,
                        order: Order::ZERO,
                        migratetype: mt,
                    }
                }
                None => {
                    live.swap_remove(slot);
                    refused += 1;
                }
            }
            cpu = (cpu + 1) % shape.cpus;
            ops += 2;
        }
        elapsed += t.elapsed().as_secs_f64() * 1e9;
        if iteration % shape.sample_every == 0 || iteration == shape.iterations {
            series.push(FragSample {
                iteration,
                ..subject.sample(ops, &live)
            });
        }
    }
    let recovery = subject.finish(live, shape.recover)?;
    Ok(FragRun {
        series,
        ops,
        elapsed_ns: elapsed,
        filled,
        refused,
        recovery,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use buddy::{Era, Kernel, Options};
    use sparsemem::{Flat, Layout};

    /// 64 MiB in one zone: 32 pageblocks.
    const LAYOUT: &str = "[[range]]\nstart = 0x100000000\nend = 0x104000000\nkind = \"ram\"\n";

    fn shape() -> FragShape {
        FragShape {
            iterations: 6,
            sample_every: 2,
            immovable: 0.2,
            ..FragShape::PAPER
        }
    }

    #[test]
    fn a_buddy_run_gives_every_page_back_and_samples_what_the_lists_hold() {
        let layout = Layout::from_toml(LAYOUT).unwrap();
        let alloc: Allocator<Flat, Kernel> = Allocator::new(
            Flat::new(&layout).unwrap(),
            &layout,
            Options::for_era(Era::V6_18),
        )
        .unwrap();
        let fresh = sample_buddy(&alloc, 0, &[]);
        assert_eq!(fresh.free_pages, alloc.free_pages_total());
        assert_eq!(fresh.free_huge_frames, fresh.huge_frames);
        let run = run_buddy(&alloc, &shape()).unwrap();
        // After the free, then iterations 2, 4 and 6.
        let at: Vec<u32> = run.series.iter().map(|s| s.iteration).collect();
        assert_eq!(at, [0, 2, 4, 6]);
        assert!(run.filled > 0 && run.refused == 0);
        // Half of what the fill took is free (less what the per-CPU lists
        // hold, which buddyinfo leaves out as the kernel's does).
        let after_free = &run.series[0];
        let listed: u64 = after_free
            .free_blocks
            .as_ref()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(o, per_mt)| per_mt.iter().sum::<u64>() << o)
            .sum();
        assert_eq!(listed, after_free.free_pages);
        assert!(after_free.free_pages <= alloc.managed_pages_total() - run.filled / 2);
        // Every page came back: the handles are gone, their lists drained.
        assert_eq!(alloc.free_pages_total(), fresh.free_pages);
    }

    /// The same mixed sequence on 6.18 without and with `vm.defrag_mode`:
    /// no refusal after the fill, every page back, and every fallback one
    /// of the three kinds the statistics count (`ALLOC_NOFRAGMENT` changes
    /// which fallbacks happen, not how they are counted).
    #[test]
    fn defrag_mode_runs_the_mixed_sequence_and_loses_no_page() {
        let layout = Layout::from_toml(LAYOUT).unwrap();
        for defrag_mode in [false, true] {
            let options = Options {
                defrag_mode,
                ..Options::for_era(Era::V6_18)
            };
            let model = Flat::new(&layout).unwrap();
            let alloc: Allocator<Flat, Kernel> = Allocator::new(model, &layout, options).unwrap();
            let fresh = alloc.free_pages_total();
            let run = run_buddy(&alloc, &shape()).unwrap();
            assert!(run.filled > 0 && run.refused == 0, "{defrag_mode}");
            assert_eq!(alloc.free_pages_total(), fresh, "a page was lost");
            let stats = alloc.stats_total();
            let stolen: u64 = stats.stolen.iter().flatten().sum();
            assert!(stats.whole_block_claims > 0, "{defrag_mode}");
            assert_eq!(
                stats.fallbacks,
                stats.whole_block_claims + stats.steals + stolen
            );
        }
    }

    #[test]
    fn llfree_and_the_buddy_see_the_same_requests() {
        let llfree = LLFree::new(16_384, 2).unwrap();
        let run = run_llfree(&llfree, &shape()).unwrap();
        assert_eq!(run.filled, 16_384, "LLFree fills every frame");
        assert_eq!(llfree.free_frames(), 16_384, "and gets every one back");
        let again = run_llfree(&llfree, &shape()).unwrap();
        assert_eq!(run.ops, again.ops, "one seed, one sequence");
        let bad = FragShape {
            free: 1.5,
            ..shape()
        };
        assert!(run_llfree(&llfree, &bad).unwrap_err().contains("free 1.5"));
        let one_cpu = LLFree::new(16_384, 1).unwrap();
        assert!(run_llfree(&one_cpu, &shape()).is_err());
    }
}
