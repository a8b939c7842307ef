//! LLFree's hot paths, single-threaded through one CPU's movable
//! reservation: an order-0 get+put, an order-9 get+put (a whole huge
//! frame's child entry taken and given back), and a burst of 128 order-0
//! gets then 128 puts; the loops `bench peers` runs on LLFree. Throughput
//! in pages.

use std::hint::black_box;

use buddy::llfree::{HUGE_ORDER, LLFree};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pfnlab::workloads::{llfree_bursts, llfree_pairs};
use sparsemem::Order;

/// LLFree over 4 GiB of 4 KiB frames (2,048 huge frames), one CPU.
const NR_FRAMES: u64 = 1 << 20;

fn llfree(c: &mut Criterion) {
    let llfree = LLFree::new(NR_FRAMES, 1).expect("4 GiB of frames");
    let mut g = c.benchmark_group("llfree");
    let pairs = 1000;
    g.throughput(Throughput::Elements(pairs));
    g.bench_function("get-put-order-0", |b| {
        b.iter(|| llfree_pairs(&llfree, 0, Order::ZERO, black_box(pairs)))
    });
    let huge = Order::new(HUGE_ORDER);
    g.throughput(Throughput::Elements(pairs * huge.nr_pages()));
    g.bench_function("get-put-order-9", |b| {
        b.iter(|| llfree_pairs(&llfree, 0, huge, black_box(pairs)))
    });
    let (rounds, burst) = (8, 128);
    let mut held = Vec::with_capacity(burst);
    g.throughput(Throughput::Elements(rounds * burst as u64));
    g.bench_function("burst-128", |b| {
        b.iter(|| llfree_bursts(&llfree, 0, black_box(rounds), burst, &mut held))
    });
    g.finish();
}

criterion_group!(benches, llfree);
criterion_main!(benches);
