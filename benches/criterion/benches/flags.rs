//! `flags` experiment: one iteration of the seed's program (16 MiB of
//! order-0 `__GFP_ZERO` pages on real frames, a store and `PG_referenced`
//! on each, freed through the `munmap` gather) per buddy, in the seed's
//! era (2.6.9), and the seed program's recording replayed through each.

mod common;

use buddy::{Allocator, Bitmap, Era, Kernel, NoBitmapAtomic, Options, Up, Variant};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pfnlab::experiments::flags::default_trace;
use pfnlab::trace::format::TraceReader;
use pfnlab::trace::replay::{ReplayOptions, replay_through};
use pfnlab::workloads::flags_iteration;
use sparsemem::{Layout, NodeId, SparseExtreme};

fn variant<V: Variant>(c: &mut Criterion, name: &str, layout: &Layout) {
    let options = Options {
        frames: true,
        ..Options::for_era(Era::V2_6_9)
    };
    let alloc =
        Allocator::<_, V>::new(SparseExtreme::new(layout).unwrap(), layout, options).unwrap();
    let mut cpu = alloc.cpu_on(NodeId::ZERO).expect("node 0");
    let mut held = Vec::with_capacity(4096);
    let mut g = c.benchmark_group("flags/16MiB-iteration");
    g.throughput(Throughput::Elements(4096));
    g.bench_function(name, |b| {
        b.iter(|| flags_iteration(&mut cpu, 4096, &mut held))
    });
    g.finish();
    drop(cpu);
    drop(alloc);
    let trace = default_trace();
    let plain = Options::for_era(Era::V2_6_9);
    let alloc = Allocator::<_, V>::new(SparseExtreme::new(layout).unwrap(), layout, plain).unwrap();
    let open = || TraceReader::open(&trace);
    let replay = ReplayOptions {
        era: Era::V2_6_9,
        ..ReplayOptions::default()
    };
    let mut g = c.benchmark_group("flags/seed-replay");
    g.sample_size(10);
    g.bench_function(name, |b| {
        b.iter(|| replay_through(&alloc, layout, &open, replay).expect("the recording replays"))
    });
    g.finish();
}

fn flags(c: &mut Criterion) {
    let layout = Layout::preset("x86-pci-hole").unwrap();
    variant::<Bitmap>(c, "bitmap", &layout);
    variant::<NoBitmapAtomic>(c, "atomic", &layout);
    variant::<Kernel>(c, "nonatomic", &layout);
    variant::<Up>(c, "up", &layout);
}

criterion_group!(benches, flags);
criterion_main!(benches);
