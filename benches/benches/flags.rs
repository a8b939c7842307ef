//! `flags` experiment: one iteration (allocate 16 MiB of order-0 pages,
//! touch their flags, free) per buddy variant.

mod common;

use buddy::{Allocator, Config, Options, Variant};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pfnlab::workloads::flags_iteration;
use sparsemem::{Layout, NodeId, SparseExtreme};

fn variant<V: Variant>(c: &mut Criterion, name: &str, layout: &Layout) {
    let alloc = Allocator::<_, V>::new(
        SparseExtreme::new(layout).unwrap(),
        layout,
        Options::default(),
    )
    .unwrap();
    let mut cpu = alloc.cpu_on(NodeId::ZERO).expect("node 0");
    let mut held = Vec::with_capacity(4096);
    let mut g = c.benchmark_group("flags/16MiB-iteration");
    g.throughput(Throughput::Elements(4096));
    g.bench_function(name, |b| {
        b.iter(|| flags_iteration(&mut cpu, 4096, &mut held))
    });
    g.finish();
}

fn flags(c: &mut Criterion) {
    let layout = Layout::preset("x86-pci-hole").unwrap();
    variant::<Config<false, true, false>>(c, "bitmap", &layout);
    variant::<Config<true, false, false>>(c, "atomic", &layout);
    variant::<Config<false, false, false>>(c, "nonatomic", &layout);
}

criterion_group!(benches, flags);
criterion_main!(benches);
