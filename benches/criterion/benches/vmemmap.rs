//! vmemmap suites: the probe against a plain flags read on cached
//! pages, the hole probe, `pfn_valid` + page read for every model with THP
//! on and off, and building a 64 GiB vmemmap.

mod common;

use buddy::BuddyModel;
use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use pfnlab::workloads::{
    CheckedPfns, count_valid, hole_pfns, read_flags, read_flags_unchecked, valid_pfns,
};
use sparsemem::{Layout, SparseExtreme};
use vmemmap::{Vmemmap, VmemmapOptions, VmemmapProbe, VmemmapTable};

fn probe_vs_flags(c: &mut Criterion) {
    let layout = common::span_64g_75pct();
    let model = VmemmapProbe::new(&layout).unwrap();
    let hot = valid_pfns(&layout, 4096, 1);
    let checked = CheckedPfns::new(&model, &hot).unwrap();
    let mut g = c.benchmark_group("probe-vs-flags/cached");
    g.throughput(Throughput::Elements(hot.len() as u64));
    g.bench_function("flags-alone", |b| {
        b.iter(|| read_flags_unchecked(black_box(&checked)))
    });
    g.bench_function("probe+flags", |b| {
        b.iter(|| read_flags(&model, black_box(&hot)))
    });
    g.finish();
}

fn holes(c: &mut Criterion) {
    let layout = common::span_64g_75pct();
    let holes = hole_pfns(&layout, 1000, 2);
    let mut g = c.benchmark_group("hole-probe");
    g.throughput(Throughput::Elements(holes.len() as u64));
    g.sample_size(20);
    let probe = VmemmapProbe::new(&layout).unwrap();
    g.bench_function("vmemmap-probe", |b| {
        b.iter(|| count_valid(&probe, black_box(&holes)))
    });
    #[cfg(feature = "uffd")]
    {
        let uffd = vmemmap::VmemmapUffd::new(&layout).unwrap();
        count_valid(&uffd, &holes);
        g.bench_function("vmemmap-uffd-after-touch", |b| {
            b.iter(|| count_valid(&uffd, black_box(&holes)))
        });
    }
    g.finish();
}

fn read_one<M: BuddyModel>(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    model: &M,
    pfns: &[sparsemem::Pfn],
) {
    g.bench_function(name, |b| b.iter(|| read_flags(model, black_box(pfns))));
}

fn valid_then_read(c: &mut Criterion) {
    let layout = common::span_64g_75pct();
    let pfns = valid_pfns(&layout, 1 << 20, 3);
    let mut g = c.benchmark_group("pfn_valid+read/random");
    g.throughput(Throughput::Elements(pfns.len() as u64));
    g.sample_size(10);
    read_one(
        &mut g,
        "sparse-extreme",
        &SparseExtreme::new(&layout).unwrap(),
        &pfns,
    );
    for thp in [true, false] {
        let o = VmemmapOptions {
            thp,
            ..VmemmapOptions::default()
        };
        let tag = if thp { "thp" } else { "4k" };
        read_one(
            &mut g,
            &format!("vmemmap-table/{tag}"),
            &VmemmapTable::with_options(&layout, o).unwrap(),
            &pfns,
        );
        read_one(
            &mut g,
            &format!("vmemmap-probe/{tag}"),
            &VmemmapProbe::with_options(&layout, o).unwrap(),
            &pfns,
        );
    }
    g.finish();
}

fn build_64g(c: &mut Criterion) {
    let layout: Layout = common::ram_64g();
    let mut g = c.benchmark_group("build");
    g.sample_size(10);
    g.bench_function("vmemmap-table/64g", |b| {
        b.iter_batched(
            || (),
            |()| Vmemmap::<vmemmap::Table>::new(&layout).unwrap(),
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, probe_vs_flags, holes, valid_then_read, build_64g);
criterion_main!(benches);
