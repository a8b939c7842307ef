//! `cpuset` experiment: zone-path allocation from a node outside a cpuset
//! of 43 of 64 fake nodes: unrestricted, the 2006 per-zone check, and the
//! precomputed allowed zonelist.

mod common;

use buddy::{Allocator, Gfp, Kernel, NodeMask, Options, ZoneId};
use criterion::{Criterion, criterion_group, criterion_main};
use pfnlab::experiments::cpuset::Cpusets;
use sparsemem::{Layout, NodeId, Order, SparseExtreme};

fn cpuset(c: &mut Criterion) {
    let layout = Layout::preset("numa-fake-64").unwrap();
    let alloc = Allocator::<_, Kernel>::new(
        SparseExtreme::new(&layout).unwrap(),
        &layout,
        Options::default(),
    )
    .unwrap();
    let nodes = layout.nodes();
    let allowed = NodeMask::of(nodes[21..].iter().copied());
    let cs = Cpusets::new(&nodes, &allowed);
    let gfp = Gfp::KERNEL;
    let fixed: Vec<ZoneId> = alloc
        .zonelist(NodeId::ZERO, gfp)
        .expect("node 0")
        .iter()
        .copied()
        .filter(|&z| alloc.zone(z).is_some_and(|zone| cs.zone_allowed(zone)))
        .collect();
    let mut g = c.benchmark_group("cpuset");
    let pair = |pfn: sparsemem::Pfn| alloc.free_pages(pfn, Order::ZERO).unwrap();
    g.bench_function("unrestricted", |b| {
        b.iter(|| {
            pair(
                alloc
                    .alloc_pages_with(Order::ZERO, gfp, NodeId::ZERO, |_| true)
                    .unwrap(),
            )
        })
    });
    g.bench_function("restricted", |b| {
        b.iter(|| {
            pair(
                alloc
                    .alloc_pages_with(Order::ZERO, gfp, NodeId::ZERO, |z| cs.zone_allowed(z))
                    .unwrap(),
            )
        })
    });
    g.bench_function("restricted-fixed", |b| {
        b.iter(|| pair(alloc.alloc_pages_from(Order::ZERO, &fixed).unwrap()))
    });
    g.finish();
}

criterion_group!(benches, cpuset);
criterion_main!(benches);
