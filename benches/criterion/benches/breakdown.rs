//! `breakdown` experiment: an order-0 GFP_KERNEL alloc+free through the
//! per-CPU lists and on the zone path in the 6.18 era, with the era's
//! mechanisms added one at a time (`bench breakdown`'s steps), over
//! vmemmap-table on `preset:x86-pci-hole`.

mod common;

use buddy::{Allocator, Era, Gfp, Kernel, Options};
use criterion::{Throughput, criterion_group, criterion_main};
use pfnlab::experiments::breakdown::STEPS;
use pfnlab::workloads::{pcp_pairs_gfp, zone_pairs_gfp};
use sparsemem::{Layout, NodeId};
use vmemmap::VmemmapTable;

fn breakdown(c: &mut criterion::Criterion<common::TscCycles>) {
    let layout = Layout::preset("x86-pci-hole").unwrap();
    let mut g = c.benchmark_group("breakdown");
    g.throughput(Throughput::Elements(256));
    for (i, step) in STEPS.into_iter().enumerate() {
        let (name, zero) = (step.label(), step.zero());
        let options = Options {
            mechanisms: step.mechanisms(),
            frames: zero,
            ..Options::for_era(Era::V6_18)
        };
        let alloc =
            Allocator::<_, Kernel>::new(VmemmapTable::new(&layout).unwrap(), &layout, options)
                .unwrap();
        let gfp = if zero {
            Gfp::KERNEL | Gfp::ZERO
        } else {
            Gfp::KERNEL
        };
        let mut cpu = alloc.cpu_on(NodeId::ZERO).expect("node 0");
        g.bench_function(format!("pcp/{i}: {name}"), |b| {
            b.iter(|| pcp_pairs_gfp(&mut cpu, 256, gfp))
        });
        drop(cpu);
        g.bench_function(format!("zone/{i}: {name}"), |b| {
            b.iter(|| zone_pairs_gfp(&alloc, NodeId::ZERO, 256, gfp))
        });
    }
    g.finish();
}

criterion_group! { name = cycles; config = common::cycles(); targets = breakdown }
criterion_main!(cycles);
