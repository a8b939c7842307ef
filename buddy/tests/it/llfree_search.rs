//! LLFree's tree-search heuristics seen from outside: which tree a CPU's
//! next frame comes from, given the trees' free counters, and where whole
//! huge frames collect under the fragmentation benchmark's churn.

use std::collections::BTreeSet;

use buddy::llfree::{Class, HUGE_FRAMES, HUGE_ORDER, LLFree, TREE_CHILDREN, TREE_FRAMES};
use sparsemem::{Order, Pfn};

const HUGE: Order = Order::new(HUGE_ORDER);

/// An instance of one tree per entry of `free_huge` on `nr_cpus` CPUs,
/// tree `t` with its first `free_huge[t]` huge frames free and the rest
/// allocated, and no reservation.
fn with_free_huge(free_huge: &[u64], nr_cpus: usize) -> LLFree {
    let nr_trees = free_huge.len() as u64;
    let llfree = LLFree::new(nr_trees * TREE_FRAMES, nr_cpus).unwrap();
    while llfree.get(0, HUGE, Class::Movable).is_ok() {}
    assert_eq!(llfree.free_frames(), 0);
    for (tree, &n) in free_huge.iter().enumerate() {
        let first = tree as u64 * TREE_CHILDREN as u64;
        for huge in first..first + n {
            llfree.put(0, Pfn::new(huge * HUGE_FRAMES), HUGE).unwrap();
        }
    }
    // The frees into one tree in a row may have reserved it.
    llfree.drain();
    llfree
}

/// The tree CPU `cpu`'s next order-0 movable frame comes from.
fn next_tree(llfree: &LLFree, cpu: usize) -> u64 {
    llfree.get(cpu, Order::ZERO, Class::Movable).unwrap().get() / TREE_FRAMES
}

/// Beyond the near trees, a CPU reserves a partial tree (between a
/// sixteenth and fifteen sixteenths free) before an almost allocated one
/// or a free one, whatever their order in the search.
#[test]
fn llfree_search_prefers_a_partial_tree_over_free_and_almost_allocated_ones() {
    // One CPU, four trees: only tree 0, where its search starts, is near.
    // Tree 0 has one huge frame free of 32 (under a sixteenth), trees 1
    // and 3 are free, tree 2 half free; the search after tree 0 visits
    // 3, 1, 2.
    let llfree = with_free_huge(&[1, 32, 16, 32], 1);
    assert_eq!(next_tree(&llfree, 0), 2);
    // Tree 2 almost free (31 of 32 huge frames): no partial tree is left,
    // and the free search runs up from tree 0: tree 1 comes first.
    let llfree = with_free_huge(&[1, 32, 31, 32], 1);
    assert_eq!(next_tree(&llfree, 0), 1);
    // Nothing but almost allocated trees: any will do.
    let llfree = with_free_huge(&[1, 0, 1, 0], 1);
    assert_eq!(next_tree(&llfree, 0), 0);
}

/// The near trees (a quarter of a CPU's share, around the start of its
/// previous tree's line of entries) come first, even an almost free one;
/// an almost allocated near tree is passed over.
#[test]
fn llfree_search_takes_near_trees_first() {
    // One CPU, 16 trees: its search starts at tree 0 and four trees are
    // near, in the order 0, 15, 1, 14; the others follow in the order 2,
    // 13, 3, 12, ..., 8.
    let mut free = [0u64; 16];
    free[8] = 16; // partial, not near, searched last
    free[14] = 32; // free and near
    assert_eq!(next_tree(&with_free_huge(&free, 1), 0), 14);
    free[15] = 8; // partial and nearer
    assert_eq!(next_tree(&with_free_huge(&free, 1), 0), 15);
    free[15] = 1; // almost allocated: passed over
    assert_eq!(next_tree(&with_free_huge(&free, 1), 0), 14);
    // A free tree that is not near loses to a partial one searched after
    // it.
    free[14] = 0;
    free[2] = 32;
    assert_eq!(next_tree(&with_free_huge(&free, 1), 0), 8);
}

/// A CPU that frees into a tree five times in a row (four before the
/// last) reserves it, and its next frame comes from there; four frees in
/// a row are not enough.
#[test]
fn llfree_search_reserves_a_tree_freed_into() {
    for (frees, expected) in [(5, 3), (4, 0)] {
        // Two CPUs, four trees; tree 0 is partial and is CPU 1's nearest.
        let llfree = with_free_huge(&[8, 0, 0, 0], 2);
        let first = 3 * TREE_CHILDREN as u64;
        for huge in first..first + frees {
            llfree.put(1, Pfn::new(huge * HUGE_FRAMES), HUGE).unwrap();
        }
        assert_eq!(next_tree(&llfree, 1), expected, "after {frees} frees");
    }
}

/// The next number of a xorshift sequence.
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// The fragmentation benchmark's shape on eight trees and one CPU, in
/// blocks of 16 frames to keep it short: fill, free half at random, then
/// rounds of freeing a random held block and allocating one. Uniform
/// frees thin every tree, but allocations refill only the trees the
/// search reaches first (near tree 0: 0 and 7, then 1, 6, 2, 5, 3, 4), so
/// the trees it reaches last drain into whole huge frames while the first
/// ones stay full.
#[test]
fn llfree_search_drains_the_trees_searched_last() {
    const ORDER: Order = Order::new(4);
    let nr_frames = 8 * TREE_FRAMES;
    let llfree = LLFree::new(nr_frames, 1).unwrap();
    let mut live: Vec<Pfn> = Vec::new();
    while let Ok(pfn) = llfree.get(0, ORDER, Class::Movable) {
        live.push(pfn);
    }
    let mut x = 0x5eed_u64;
    let mut pick = |n: usize| (xorshift(&mut x) % n as u64) as usize;
    for _ in 0..live.len() / 2 {
        let pfn = live.swap_remove(pick(live.len()));
        llfree.put(0, pfn, ORDER).unwrap();
    }
    assert_eq!(
        llfree.free_huge_frames(),
        0,
        "random frees leave none whole"
    );
    // Each held block freed and replaced about ten times over.
    for _ in 0..10 * live.len() {
        let slot = pick(live.len());
        llfree.put(0, live[slot], ORDER).unwrap();
        live[slot] = llfree.get(0, ORDER, Class::Movable).unwrap();
    }
    let mut per_tree = [0u64; 8];
    for pfn in &live {
        per_tree[(pfn.get() / TREE_FRAMES) as usize] += 1 << ORDER.get();
    }
    let held_huge: BTreeSet<u64> = live.iter().map(|p| p.get() / HUGE_FRAMES).collect();
    let whole = nr_frames / HUGE_FRAMES - held_huge.len() as u64;
    assert_eq!(llfree.free_huge_frames(), whole);
    assert!(
        whole >= 64,
        "two trees' worth of huge frames whole: {per_tree:?}"
    );
    let drained = per_tree[3] + per_tree[4];
    let packed = per_tree[0] + per_tree[7];
    assert!(
        drained * 16 < packed,
        "trees searched last hold least: {per_tree:?}"
    );
}
