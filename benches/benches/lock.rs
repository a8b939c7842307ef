//! `lock` experiment: a single-page zone-path request while another thread
//! refills and drains large per-CPU batches, per zone-lock policy.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use buddy::{Allocator, Gfp, Kernel, LockPolicy, Options};
use criterion::{Criterion, criterion_group, criterion_main};
use sparsemem::{Layout, NodeId, Order, SparseExtreme};

fn lock(c: &mut Criterion) {
    let layout = Layout::preset("x86-pci-hole").unwrap();
    let mut g = c.benchmark_group("lock/small-request-under-batches");
    for (name, policy) in [
        ("per-batch", LockPolicy::PerBatch),
        ("per-page", LockPolicy::PerPage),
    ] {
        let options = Options {
            lock_policy: policy,
            pcp_batch: Some(256),
            era: buddy::Era::V2_6_23,
            ..Options::default()
        };
        let alloc =
            Allocator::<_, Kernel>::new(SparseExtreme::new(&layout).unwrap(), &layout, options)
                .unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut cpu = alloc.cpu_on(NodeId::ZERO).expect("node 0");
                let mut held = Vec::with_capacity(1536);
                // Acquire: pairs with the Release store after the bench.
                while !stop.load(Ordering::Acquire) {
                    for _ in 0..1536 {
                        held.push(cpu.alloc(Gfp::HIGHUSER_MOVABLE).unwrap());
                    }
                    for p in held.drain(..) {
                        cpu.free(p).unwrap();
                    }
                }
            });
            g.bench_function(name, |b| {
                b.iter(|| {
                    let p = alloc
                        .alloc_pages(Order::ZERO, Gfp::HIGHUSER_MOVABLE, NodeId::ZERO, None)
                        .unwrap();
                    alloc.free_pages(p, Order::ZERO).unwrap();
                })
            });
            // Release: the batch thread stops after the measurement.
            stop.store(true, Ordering::Release);
        });
    }
    g.finish();
}

criterion_group!(benches, lock);
criterion_main!(benches);
