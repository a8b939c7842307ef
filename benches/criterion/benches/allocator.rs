//! Allocator suites: order-0 alloc+free through the per-CPU list,
//! bulk array of 128, and the zone path with a full split and merge.

mod common;

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pfnlab::workloads::{bulk_arrays, pcp_pairs, zone_pairs};
use sparsemem::NodeId;

fn allocator(c: &mut Criterion) {
    let alloc = common::pci_hole_allocator();
    let mut g = c.benchmark_group("allocator");
    g.throughput(Throughput::Elements(1000));
    g.bench_function("zone-split-merge-pair", |b| {
        b.iter(|| zone_pairs(&alloc, NodeId::ZERO, black_box(1000)))
    });
    let mut cpu = alloc.cpu_on(NodeId::ZERO).expect("node 0");
    g.bench_function("pcp-pair", |b| {
        b.iter(|| pcp_pairs(&mut cpu, black_box(1000)))
    });
    let mut slots = vec![None; 128];
    g.throughput(Throughput::Elements(128 * 8));
    g.bench_function("bulk-array-128", |b| {
        b.iter(|| bulk_arrays(&mut cpu, black_box(8), &mut slots))
    });
    g.finish();
}

criterion_group!(benches, allocator);
criterion_main!(benches);
