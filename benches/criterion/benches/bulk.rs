//! `bulk` experiment: list and array bulk allocation per size, and the
//! single-page baseline, per page (like `page_bench04_bulk`), in the
//! 5.13 era.

mod common;

use buddy::{Allocator, Era, Kernel, Options};
use criterion::{Throughput, criterion_group, criterion_main};
use pfnlab::experiments::bulk::SIZES;
use pfnlab::workloads::{bulk_arrays, bulk_lists, pcp_pairs};
use sparsemem::{Layout, NodeId};
use vmemmap::VmemmapTable;

fn bulk(c: &mut criterion::Criterion<common::TscCycles>) {
    let layout = Layout::preset("x86-pci-hole").unwrap();
    let alloc = Allocator::<_, Kernel>::new(
        VmemmapTable::new(&layout).unwrap(),
        &layout,
        Options::for_era(Era::V5_13), // the seed's era, as `bench bulk`
    )
    .unwrap();
    let mut cpu = alloc.cpu_on(NodeId::ZERO).expect("node 0");
    let mut g = c.benchmark_group("bulk");
    g.throughput(Throughput::Elements(256));
    g.bench_function("single", |b| b.iter(|| pcp_pairs(&mut cpu, 256)));
    let mut list = buddy::PageChain::new(&alloc);
    let mut slots = vec![None; 128];
    for size in SIZES {
        let rounds = (256 / size as u64).max(1);
        g.throughput(Throughput::Elements(rounds * size as u64));
        g.bench_function(format!("list/{size}"), |b| {
            b.iter(|| bulk_lists(&mut cpu, rounds, size, &mut list))
        });
        g.bench_function(format!("array/{size}"), |b| {
            b.iter(|| bulk_arrays(&mut cpu, rounds, &mut slots[..size]))
        });
    }
    g.finish();
}

criterion_group! { name = cycles; config = common::cycles(); targets = bulk }
criterion_main!(cycles);
