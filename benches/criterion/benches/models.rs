//! Model micro-benchmarks: `pfn_valid` on 4M random valid pfns of a 64 GiB
//! span with 75 % of sections present, per model, in ns
//! and TSC cycles.

mod common;

use buddy::BuddyModel;
use std::hint::black_box;

use criterion::measurement::Measurement;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pfnlab::workloads::{count_valid, valid_pfns};
use sparsemem::{Flat, SparseClassic, SparseExtreme};
use vmemmap::{VmemmapProbe, VmemmapTable};

const N: usize = 4 << 20;

fn one<T: Measurement, M: BuddyModel>(c: &mut Criterion<T>, model: &M, pfns: &[sparsemem::Pfn]) {
    let unit = if std::any::type_name::<T>().contains("TscCycles") {
        "cycles"
    } else {
        "ns"
    };
    let mut g = c.benchmark_group(format!("pfn_valid/64g-75pct-random/{unit}"));
    g.throughput(Throughput::Elements(pfns.len() as u64));
    g.sample_size(20);
    g.bench_function(model.name(), |b| {
        b.iter(|| count_valid(model, black_box(pfns)))
    });
    g.finish();
}

fn all<T: Measurement>(c: &mut Criterion<T>) {
    let layout = common::span_64g_75pct();
    let pfns = valid_pfns(&layout, N, 42);
    one(c, &Flat::new(&layout).unwrap(), &pfns);
    one(c, &SparseClassic::new(&layout).unwrap(), &pfns);
    one(c, &SparseExtreme::new(&layout).unwrap(), &pfns);
    one(c, &VmemmapTable::new(&layout).unwrap(), &pfns);
    one(c, &VmemmapProbe::new(&layout).unwrap(), &pfns);
}

fn ns(c: &mut Criterion) {
    all(c);
}

criterion_group!(time, ns);
criterion_group! { name = tsc; config = common::cycles(); targets = all }
criterion_main!(time, tsc);
