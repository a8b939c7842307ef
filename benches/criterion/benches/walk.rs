//! `walk` experiment: the model's `for_each_valid_pfn` against the
//! per-pfn loop (and the bulk-skip variant) over whole spans, per pfn of
//! span: a layout with no holes, one with 97 % holes, and `sparse-52bit`
//! (its per-pfn loop over a 2^22-pfn slice at the start: 1 GiB of memory
//! and 15 GiB of holes).

mod common;

use buddy::BuddyModel;
use criterion::{Throughput, criterion_group, criterion_main};
use pfnlab::experiments::hole_density::{SPAN_SECTIONS, layout_with_holes};
use pfnlab::workloads::walk_valid;
use sparsemem::walk::{BulkSkipWalk, KernelWalk, PerPfnWalk};
use sparsemem::{Geometry, Layout, Pfn, PfnRange, SparseExtreme};
use vmemmap::VmemmapTable;

fn group<M: BuddyModel>(
    c: &mut criterion::Criterion<common::TscCycles>,
    name: &str,
    model: &M,
    span: PfnRange,
    per_pfn_slice: PfnRange,
) {
    let mut g = c.benchmark_group(format!("walk/{name}/{}", model.name()));
    g.throughput(Throughput::Elements(span.nr_pages()));
    g.bench_function("for_each_valid_pfn", |b| {
        b.iter(|| walk_valid::<M, KernelWalk>(model, span))
    });
    g.bench_function("bulk-skip", |b| {
        b.iter(|| walk_valid::<M, BulkSkipWalk>(model, span))
    });
    g.throughput(Throughput::Elements(per_pfn_slice.nr_pages()));
    g.bench_function("per-pfn", |b| {
        b.iter(|| walk_valid::<M, PerPfnWalk>(model, per_pfn_slice))
    });
    g.finish();
}

fn walk(c: &mut criterion::Criterion<common::TscCycles>) {
    for holes in [0.0, 0.97] {
        let layout = layout_with_holes(Geometry::X86_64, holes);
        let g = layout.geometry();
        let end = Pfn::new(SPAN_SECTIONS * g.pages_per_section());
        let span = PfnRange::new(g, Pfn::new(0), end).unwrap();
        let name = format!("{:.0}pct-holes", holes * 100.0);
        group(c, &name, &SparseExtreme::new(&layout).unwrap(), span, span);
        group(c, &name, &VmemmapTable::new(&layout).unwrap(), span, span);
    }
    let layout = Layout::preset("sparse-52bit").unwrap();
    let whole = PfnRange::whole(layout.geometry());
    let slice = whole.prefix(1 << 22);
    group(
        c,
        "sparse-52bit",
        &SparseExtreme::new(&layout).unwrap(),
        whole,
        slice,
    );
    group(
        c,
        "sparse-52bit",
        &VmemmapTable::new(&layout).unwrap(),
        whole,
        slice,
    );
}

criterion_group! { name = cycles; config = common::cycles(); targets = walk }
criterion_main!(cycles);
