//! `peers`: the three workloads on pfnlab's allocator and on
//! buddy_system_allocator's FrameAllocator.

mod common;

use std::hint::black_box;

use buddy::{Allocator, Kernel, Options};
use buddy_system_allocator::FrameAllocator;
use criterion::{Criterion, criterion_group, criterion_main};
use pfnlab::workloads::{bursts, pcp_pairs, zone_pairs};
use sparsemem::{Layout, NodeId};
use vmemmap::VmemmapTable;

fn peers(c: &mut Criterion) {
    let layout = Layout::preset("x86-pci-hole").unwrap();
    let alloc = Allocator::<_, Kernel>::new(
        VmemmapTable::new(&layout).unwrap(),
        &layout,
        Options::default(),
    )
    .unwrap();
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
    let mut fa = FrameAllocator::<11>::new();
    fa.add_frame(0, 1 << 20);
    g.bench_function("buddy_system_allocator/split-merge-pair", |b| {
        b.iter(|| {
            let f = fa.alloc(1).unwrap();
            fa.dealloc(black_box(f), 1);
        })
    });
    let _pin = fa.alloc(1);
    g.bench_function("buddy_system_allocator/hot-pair", |b| {
        b.iter(|| {
            let f = fa.alloc(1).unwrap();
            fa.dealloc(black_box(f), 1);
        })
    });
    let mut frames = Vec::with_capacity(128);
    g.bench_function("buddy_system_allocator/burst-128", |b| {
        b.iter(|| {
            for _ in 0..128 {
                frames.push(fa.alloc(1).unwrap());
            }
            for f in frames.drain(..) {
                fa.dealloc(f, 1);
            }
        })
    });
    g.finish();
}

criterion_group!(benches, peers);
criterion_main!(benches);
