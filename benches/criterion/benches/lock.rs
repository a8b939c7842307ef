//! `lock` experiment: the job set of `bench lock` (page faults with
//! `clear_page` and the process's writes, an order-1 zone-path stack,
//! everything freed) on two pinned threads, per zone-lock policy and lock
//! kind, in the 2.6.23 era (batch 31, `high` 186).

mod common;

use std::sync::Mutex;
use std::sync::atomic::AtomicBool;

use buddy::{Allocator, Era, Kernel};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pfnlab::experiments::lock::{LockConfig, job_set};
use sparsemem::{Layout, NodeId, SparseExtreme};

fn lock(c: &mut Criterion) {
    let layout = Layout::preset("x86-pci-hole").unwrap();
    let (threads, jobs, pages) = (2, 4, 512);
    let mut g = c.benchmark_group("lock/job-set");
    g.throughput(Throughput::Elements(threads as u64 * jobs * pages));
    for config in LockConfig::all() {
        let alloc = Allocator::<_, Kernel>::new(
            SparseExtreme::new(&layout).unwrap(),
            &layout,
            config.options(Era::V2_6_23, None),
        )
        .unwrap();
        let (small, pinned) = (Mutex::new(Vec::new()), AtomicBool::new(true));
        g.bench_function(config.name(), |b| {
            b.iter(|| job_set(&alloc, NodeId::ZERO, threads, jobs, pages, &small, &pinned))
        });
    }
    g.finish();
}

criterion_group!(benches, lock);
criterion_main!(benches);
