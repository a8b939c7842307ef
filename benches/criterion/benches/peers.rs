//! `peers`: the single-thread workloads on pfnlab's allocator, on the floor
//! (the minimal buddy), on LLFree (its split-merge pair an order-9 pair)
//! and on the peer crates (buddy_system_allocator, frame-alloc,
//! bitmap-allocator), all over the same layout (the others over its RAM in
//! whole max-order blocks). Needs the `peers` feature.

mod common;

use buddy::llfree::{HUGE_ORDER, LLFree};
use criterion::{Criterion, criterion_group, criterion_main};
use pfnlab::experiments::peers::crates::{SegmentTree, SummaryBuddy, frame_allocator};
use pfnlab::experiments::peers::floor::FloorBuddy;
use pfnlab::experiments::peers::whole_blocks;
use pfnlab::workloads::{
    Frames, bursts, frame_bursts, frame_pairs, llfree_bursts, llfree_pairs, pcp_pairs, zone_pairs,
};
use sparsemem::{Layout, NodeId, Order};

fn peers(c: &mut Criterion) {
    let layout = Layout::preset("x86-pci-hole").unwrap();
    let alloc = common::pci_hole_allocator();
    let mut g = c.benchmark_group("peers");
    g.bench_function("pfnlab/split-merge-pair", |b| {
        b.iter(|| zone_pairs(&alloc, NodeId::ZERO, 1))
    });
    let mut cpu = alloc.cpu_on(NodeId::ZERO).expect("node 0");
    g.bench_function("pfnlab/hot-pair", |b| b.iter(|| pcp_pairs(&mut cpu, 1)));
    let mut held = Vec::with_capacity(128);
    g.bench_function("pfnlab/burst-128", |b| {
        b.iter(|| bursts(&mut cpu, 1, 128, &mut held))
    });
    let blocks = whole_blocks(&layout).unwrap();
    let llfree = LLFree::new(blocks.present_pages(), 1).unwrap();
    let huge = Order::new(HUGE_ORDER);
    g.bench_function("llfree/split-merge-pair", |b| {
        b.iter(|| llfree_pairs(&llfree, 0, huge, 1))
    });
    g.bench_function("llfree/hot-pair", |b| {
        b.iter(|| llfree_pairs(&llfree, 0, Order::ZERO, 1))
    });
    let mut frames = Vec::with_capacity(128);
    g.bench_function("llfree/burst-128", |b| {
        b.iter(|| llfree_bursts(&llfree, 0, 1, 128, &mut frames))
    });
    peer(&mut g, "floor", || FloorBuddy::new(&blocks).unwrap());
    peer(&mut g, "buddy_system_allocator", || {
        frame_allocator(&blocks)
    });
    peer(&mut g, "frame-alloc", || {
        SummaryBuddy::new(&blocks).unwrap()
    });
    peer(&mut g, "bitmap-allocator", || {
        SegmentTree::new(&blocks).unwrap()
    });
    g.finish();
}

/// The three workloads on one peer, as `bench peers` runs them.
fn peer<F: Frames>(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    mut make: impl FnMut() -> F,
) {
    let mut fresh = make();
    g.bench_function(format!("{name}/split-merge-pair"), |b| {
        b.iter(|| frame_pairs(&mut fresh, 1))
    });
    let mut pinned = make();
    let _pin = pinned.alloc_frame();
    g.bench_function(format!("{name}/hot-pair"), |b| {
        b.iter(|| frame_pairs(&mut pinned, 1))
    });
    let mut held = Vec::with_capacity(128);
    g.bench_function(format!("{name}/burst-128"), |b| {
        b.iter(|| frame_bursts(&mut fresh, 1, 128, &mut held))
    });
}

criterion_group!(benches, peers);
criterion_main!(benches);
