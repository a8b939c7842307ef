//! LLFree's kernels for `bench peers`: the same loops as the peers' and
//! pfnlab's, through LLFree's `get` and `put`.

use std::hint::black_box;

use buddy::llfree::{Class, LLFree};
use sparsemem::{Order, Pfn};

use crate::threads::{Placement, on_threads};

/// `n` alloc+free pairs of `order` on LLFree through `cpu`'s movable
/// reservation (order 0: the hot pair; order 9: a whole huge frame's
/// child entry taken and given back).
#[inline(never)]
pub fn llfree_pairs(llfree: &LLFree, cpu: usize, order: Order, n: u64) -> u64 {
    let mut acc = 0;
    for _ in 0..n {
        let pfn = llfree.get(cpu, order, Class::Movable).expect("memory");
        acc ^= pfn.get();
        llfree.put(cpu, black_box(pfn), order).expect("free");
    }
    acc
}

/// `rounds` × (`burst` order-0 gets, then `burst` puts) on LLFree through
/// `cpu`'s movable reservation (what [`bursts`](super::bursts) does on pfnlab's
/// allocator); `held` is scratch space.
#[inline(never)]
pub fn llfree_bursts(
    llfree: &LLFree,
    cpu: usize,
    rounds: u64,
    burst: usize,
    held: &mut Vec<Pfn>,
) -> u64 {
    let mut acc = 0;
    for _ in 0..rounds {
        for _ in 0..burst {
            held.push(
                llfree
                    .get(cpu, Order::ZERO, Class::Movable)
                    .expect("memory"),
            );
        }
        for pfn in held.drain(..) {
            acc ^= pfn.get();
            llfree.put(cpu, pfn, Order::ZERO).expect("free");
        }
    }
    acc
}

/// `threads` threads each doing [`llfree_bursts`] on one shared LLFree,
/// thread `t` as CPU `t` (its own reservation); returns the pages
/// allocated.
pub fn llfree_bursts_threads(llfree: &LLFree, threads: usize, rounds: u64, burst: usize) -> u64 {
    on_threads(
        threads,
        Placement::Free,
        |_| Vec::with_capacity(burst),
        |t, mut held| black_box(llfree_bursts(llfree, t, rounds, burst, &mut held)),
    );
    threads as u64 * rounds * burst as u64
}
