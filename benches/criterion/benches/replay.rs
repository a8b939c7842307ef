//! `replay`: the committed kernel recording (tests/data) read alone and
//! replayed through vmemmap-table and sparse-extreme on
//! `preset:x86-pci-hole`, per event, as `pfnlab replay` runs it: the model
//! and allocator built, the timed pass and the counting pass.

mod common;

use std::path::PathBuf;

use criterion::{Throughput, criterion_group, criterion_main};
use pfnlab::models::ModelKind;
use pfnlab::trace::format::TraceReader;
use pfnlab::trace::replay::{ReplayOptions, replay_models};
use sparsemem::Layout;

fn replay(c: &mut criterion::Criterion<common::TscCycles>) {
    let path: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "../tests/data/gzip-dd.trace.zst",
    ]
    .iter()
    .collect();
    let events = TraceReader::open(&path).unwrap().count() as u64;
    let layout = Layout::preset("x86-pci-hole").unwrap();
    let open = || TraceReader::open(&path);
    let mut g = c.benchmark_group("replay");
    g.sample_size(10);
    g.throughput(Throughput::Elements(events));
    g.bench_function("read", |b| {
        b.iter(|| {
            TraceReader::open(&path)
                .unwrap()
                .map(|e| e.unwrap().order as u64)
                .sum::<u64>()
        })
    });
    for kind in [ModelKind::VmemmapTable, ModelKind::SparseExtreme] {
        g.bench_function(kind.name(), |b| {
            b.iter(|| {
                replay_models(
                    &open,
                    &layout,
                    &[kind],
                    ReplayOptions::default(),
                    &|_, _| {},
                )
                .unwrap()
            })
        });
    }
    g.finish();
}

criterion_group! { name = cycles; config = common::cycles(); targets = replay }
criterion_main!(cycles);
