//! `hvo` experiment: the same code paths as `pfnlab bench hvo`
//! on a memfd-backed `vmemmap-table` over 2 GiB of RAM: growing and
//! shrinking a pool of 2 MiB folios per folio in each HVO mode,
//! `compound_head` per tail in both encodings, and the random-pfn flags
//! read with none and with all of the held folios optimised.

mod common;

use buddy::{Allocator, HugetlbPool, HvoMode, Kernel, Options};
use criterion::{Throughput, criterion_group, criterion_main};
use pfnlab::experiments::hvo::HvoModeId;
use pfnlab::workloads::{compound_heads, hugetlb_grow, hugetlb_shrink, read_flags, valid_pfns};
use sparsemem::hvo::HvoLayout;
use sparsemem::{Geometry, Layout, MemRange, MemoryModel, NodeId, Page, RangeKind};
use vmemmap::{Vmemmap, VmemmapOptions, VmemmapTable, compound_head_fake_head, compound_head_mask};

const PMD: u32 = 9;
const FOLIOS: u64 = 64;

fn layout() -> Layout {
    let ram = MemRange::new(0, 2 << 30, RangeKind::Ram, 0);
    Layout::new(Geometry::X86_64, vec![ram], "hvo bench").unwrap()
}

fn allocator(layout: &Layout) -> Allocator<VmemmapTable, Kernel> {
    let options = VmemmapOptions {
        memfd: true,
        ..VmemmapOptions::default()
    };
    let model = Vmemmap::with_options(layout, options).unwrap();
    Allocator::new(model, layout, Options::default()).unwrap()
}

fn pool(c: &mut criterion::Criterion<common::TscCycles>) {
    let layout = layout();
    let alloc = allocator(&layout);
    let mut g = c.benchmark_group("hvo/pool-grow-shrink");
    g.throughput(Throughput::Elements(FOLIOS));
    for mode in HvoModeId::ALL {
        let mut pool = HugetlbPool::new(&alloc, PMD, NodeId::ZERO, mode.mode()).unwrap();
        let name = serde_json::to_value(mode).unwrap();
        g.bench_function(name.as_str().unwrap(), |b| {
            b.iter(|| {
                let got = hugetlb_grow(&alloc, &mut pool, FOLIOS).unwrap();
                hugetlb_shrink(&alloc, &mut pool, got).unwrap()
            })
        });
    }
    g.finish();
}

/// The tails of every folio of a pool grown by `FOLIOS` in `mode`.
fn tails<'a>(alloc: &'a Allocator<VmemmapTable, Kernel>, pool: &HugetlbPool) -> Vec<&'a Page> {
    let heads = pool.blocks(alloc).into_iter().map(|(h, _)| h);
    heads
        .flat_map(|h| (1..1u64 << PMD).filter_map(move |i| alloc.model().pfn_to_page(h + i)))
        .collect()
}

fn heads(c: &mut criterion::Criterion<common::TscCycles>) {
    let layout = layout();
    let alloc = allocator(&layout);
    let mode = |layout| HvoMode {
        layout,
        batched: true,
    };
    let mut g = c.benchmark_group("hvo/compound_head");
    for (name, hvo, mask) in [
        ("plain-fake-head-check", None, false),
        (
            "optimised-fake-head-check",
            Some(mode(HvoLayout::FakeHead)),
            false,
        ),
        ("optimised-mask", Some(mode(HvoLayout::SharedTail)), true),
    ] {
        let mut pool = HugetlbPool::new(&alloc, PMD, NodeId::ZERO, hvo).unwrap();
        pool.grow(&alloc, FOLIOS).unwrap();
        let pages = tails(&alloc, &pool);
        g.throughput(Throughput::Elements(pages.len() as u64));
        g.bench_function(name, |b| {
            b.iter(|| {
                if mask {
                    compound_heads(&pages, compound_head_mask)
                } else {
                    compound_heads(&pages, compound_head_fake_head)
                }
            })
        });
        drop(pages);
        pool.shrink(&alloc, FOLIOS).unwrap();
    }
    g.finish();
}

fn hot(c: &mut criterion::Criterion<common::TscCycles>) {
    let layout = layout();
    let alloc = allocator(&layout);
    let pfns = valid_pfns(&layout, 1 << 16, 26);
    let mut g = c.benchmark_group("hvo/read-flags");
    g.throughput(Throughput::Elements(pfns.len() as u64));
    // Half of memory in folios, none or all of them optimised.
    let held = (1 << 30) >> (12 + PMD);
    for (name, hvo) in [
        ("held-plain", None),
        (
            "held-optimised",
            Some(HvoMode {
                layout: HvoLayout::FakeHead,
                batched: true,
            }),
        ),
    ] {
        let mut pool = HugetlbPool::new(&alloc, PMD, NodeId::ZERO, hvo).unwrap();
        assert_eq!(pool.grow(&alloc, held).unwrap(), held);
        g.bench_function(name, |b| b.iter(|| read_flags(alloc.model(), &pfns)));
        pool.shrink(&alloc, held).unwrap();
    }
    g.finish();
}

criterion_group! { name = cycles; config = common::cycles(); targets = pool, heads, hot }
criterion_main!(cycles);
