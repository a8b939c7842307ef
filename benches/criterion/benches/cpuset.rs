//! `cpuset` experiment: 64 fake nodes, a cpuset of the last 43 filled below
//! their low watermark, a task on node 0 faulting and freeing pages: each
//! era's `__alloc_pages` walk (2.6.18, 2.6.19's zonelist cache, 6.18's
//! nodemask) and the unrestricted baseline.

mod common;

use buddy::{Allocator, Kernel, NodeMask, Options};
use criterion::{Criterion, criterion_group, criterion_main};
use pfnlab::experiments::cpuset::{CpusetWalk, Cpusets, Walker};
use sparsemem::{Layout, NodeId, SparseExtreme};

fn cpuset(c: &mut Criterion) {
    let layout = Layout::preset("numa-fake-64").unwrap();
    let nodes = layout.nodes();
    let allowed = NodeMask::of(nodes[21..].iter().copied());
    let cpusets = Cpusets::new(&nodes, &allowed);
    let mut g = c.benchmark_group("cpuset");
    for walk in CpusetWalk::ALL {
        let alloc = Allocator::<_, Kernel>::new(
            SparseExtreme::new(&layout).unwrap(),
            &layout,
            Options::for_era(walk.era()),
        )
        .unwrap();
        let mut walker = Walker::new(walk, &alloc, &cpusets, NodeId::ZERO).unwrap();
        g.bench_function(walk.name(), |b| b.iter(|| walker.pairs(1)));
    }
    g.finish();
}

criterion_group!(benches, cpuset);
criterion_main!(benches);
