//! `bench hvo`'s hot path against the share of memory in optimised
//! folios.
//!
//! A fixed number of 2 MiB folios is held in two pools, one plain and one
//! optimised (6.18's fake heads, batched); the share optimised steps
//! 0, 25, 50, 75, 100 % (back and forth, trial after trial, so each step
//! moves a quarter of the folios). At each step, two hot paths: random-pfn
//! `pfn_to_page` plus a flags read over all the layout's memory (an
//! optimised folio's tails are one read-only page, aliased: fewer distinct
//! cache lines, but split memmap PMDs where THP backed it), and order-0
//! alloc+free of the free memory around the folios (the zone path, which
//! splits and merges across their neighbours).

use std::time::Instant;

use buddy::{Allocator, BuddyModel, HugetlbError, HugetlbPool, HvoMode, Kernel};
use sparsemem::hvo::HvoLayout;
use sparsemem::{Layout, Pfn};

use crate::timing::{Measurement, Plan, next_set};
use crate::workloads::{read_flags, valid_pfns, zone_pairs};

/// The shares of the folios optimised, in percent.
pub const OPTIMISED_PERCENT: [u64; 5] = [0, 25, 50, 75, 100];

/// Most folios held: each optimised 2 MiB folio is 7 small VMAs, and
/// `vm.max_map_count` is 65530 by default.
const MAX_FOLIOS: u64 = 4096;

/// One step of the share.
#[derive(Clone, Debug)]
pub struct HotPoint {
    /// Percent of the held folios optimised.
    pub optimised_percent: u64,
    /// Of the node's present memory, the share in optimised folios.
    pub memory_share: f64,
    /// Random-pfn `pfn_to_page` + flags read, per pfn.
    pub read_flags: Measurement,
    /// Order-0 alloc+free on the zone path, per pair.
    pub zone_pairs: Measurement,
}

/// What the hot-path part measured.
#[derive(Clone, Debug)]
pub struct HotPath {
    /// Folios held at every step.
    pub folios: u64,
    /// The steps, in [`OPTIMISED_PERCENT`] order.
    pub points: Vec<HotPoint>,
}

/// Steps the share of `folios` held folios optimised, measuring both hot
/// paths at each step; the pools are emptied after.
pub fn measure<M: BuddyModel>(
    alloc: &Allocator<M, Kernel>,
    plan: Plan,
    layout: &Layout,
    order: u32,
) -> Result<HotPath, HugetlbError> {
    let node = layout.first_node();
    let room = alloc.free_pages_total() >> order;
    let folios = (plan.iters(MAX_FOLIOS, 64).min(room / 2) / 4 * 4).max(4);
    let hvo = HvoMode {
        layout: HvoLayout::FakeHead,
        batched: true,
    };
    let mut plain = HugetlbPool::new(alloc, order, node, None)?;
    let mut optimised = HugetlbPool::new(alloc, order, node, Some(hvo))?;
    let pfns = valid_pfns(layout, plan.iters(1 << 20, 1 << 14) as usize, 26);
    let pairs = plan.iters(200_000, 4_000);
    let n = OPTIMISED_PERCENT.len();
    let (mut reads, mut frees) = (vec![Vec::new(); n], vec![Vec::new(); n]);
    for trial in 0..=plan.trials {
        let steps: Vec<usize> = if trial % 2 == 0 {
            (0..n).collect()
        } else {
            (0..n).rev().collect()
        };
        for i in steps {
            let target = folios * OPTIMISED_PERCENT[i] / 100;
            set_share(alloc, &mut plain, &mut optimised, target, folios)?;
            let (r, p) = time_both(alloc, &pfns, node, pairs);
            if trial > 0 {
                reads[i].push(r);
                frees[i].push(p);
            }
        }
    }
    plain.shrink(alloc, plain.counts().nr_hugepages)?;
    optimised.shrink(alloc, optimised.counts().nr_hugepages)?;
    let present = layout
        .ram_ranges()
        .filter(|(r, _, _)| r.node == node.get())
        .map(|(_, a, b)| b.get() - a.get())
        .sum::<u64>()
        .max(1);
    let (read_set, pair_set) = (next_set(), next_set());
    let points = OPTIMISED_PERCENT
        .iter()
        .zip(reads.into_iter().zip(frees))
        .map(|(&percent, (r, p))| HotPoint {
            optimised_percent: percent,
            memory_share: ((folios * percent / 100) << order) as f64 / present as f64,
            read_flags: Measurement::from_ns(r).in_set(read_set),
            zone_pairs: Measurement::from_ns(p).in_set(pair_set),
        })
        .collect();
    Ok(HotPath { folios, points })
}

/// Moves folios between the pools until `target` of `total` are
/// optimised: the pool that shrinks goes first, so the other can take
/// the memory it gave back.
fn set_share<M: BuddyModel>(
    alloc: &Allocator<M, Kernel>,
    plain: &mut HugetlbPool,
    optimised: &mut HugetlbPool,
    target: u64,
    total: u64,
) -> Result<(), HugetlbError> {
    let have = optimised.counts().nr_hugepages;
    let plain_have = plain.counts().nr_hugepages;
    if have > target {
        optimised.shrink(alloc, have - target)?;
        plain.grow(alloc, (total - target).saturating_sub(plain_have))?;
    } else {
        plain.shrink(alloc, plain_have.saturating_sub(total - target))?;
        optimised.grow(alloc, target - have)?;
    }
    Ok(())
}

/// One trial of each hot path: ns per pfn read and per alloc+free pair.
fn time_both<M: BuddyModel>(
    alloc: &Allocator<M, Kernel>,
    pfns: &[Pfn],
    node: sparsemem::NodeId,
    pairs: u64,
) -> (f64, f64) {
    let t0 = Instant::now();
    std::hint::black_box(read_flags(alloc.model(), std::hint::black_box(pfns)));
    let t1 = Instant::now();
    std::hint::black_box(zone_pairs(alloc, node, pairs));
    let t2 = Instant::now();
    (
        (t1 - t0).as_nanos() as f64 / pfns.len().max(1) as f64,
        (t2 - t1).as_nanos() as f64 / pairs.max(1) as f64,
    )
}
