//! `pfn-valid` experiment: per-call cost (valid, hole, sequential) for
//! SPARSEMEM_EXTREME, stock VMEMMAP and the fault probe on `ia64-holes`.

mod common;

use buddy::BuddyModel;
use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pfnlab::workloads::{count_valid, count_valid_sequential, hole_pfns, valid_pfns};
use sparsemem::{Layout, Pfn, SparseExtreme};
use vmemmap::{VmemmapProbe, VmemmapTable};

fn model<M: BuddyModel>(c: &mut Criterion, m: &M, layout: &Layout) {
    let valid = valid_pfns(layout, 1 << 16, 9);
    let holes = hole_pfns(layout, 256, 9);
    let mut g = c.benchmark_group(format!("pfn-valid/{}", m.name()));
    g.throughput(Throughput::Elements(valid.len() as u64));
    g.bench_function("valid", |b| b.iter(|| count_valid(m, black_box(&valid))));
    g.bench_function("sequential", |b| {
        b.iter(|| count_valid_sequential(m, black_box(Pfn::new(0)), 1 << 16))
    });
    g.throughput(Throughput::Elements(holes.len() as u64));
    g.bench_function("hole", |b| b.iter(|| count_valid(m, black_box(&holes))));
    g.finish();
}

fn pfn_valid(c: &mut Criterion) {
    let layout = Layout::preset("ia64-holes").unwrap();
    model(c, &SparseExtreme::new(&layout).unwrap(), &layout);
    model(c, &VmemmapTable::new(&layout).unwrap(), &layout);
    model(c, &VmemmapProbe::new(&layout).unwrap(), &layout);
}

criterion_group!(benches, pfn_valid);
criterion_main!(benches);
