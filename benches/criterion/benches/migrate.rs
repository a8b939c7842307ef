//! Page migration and compaction that moves pages, on today's allocator
//! (6.18) over one 64 MiB ZONE_DMA32 (16,384 pages, 32 pageblocks):
//! `migrate_pages` of N owned order-0 pages into `alloc_migration_target`
//! (the same zone), and one `compact_zone` run (`compact_memory`'s: sync,
//! order -1) over the zone filled with owned order-0 pages and then
//! fragmented on purpose, every other page freed. Each setup (a fresh
//! allocator, its owners and fragmentation) runs outside the timed part
//! (`iter_batched`); throughput is pages migrated, and for compaction
//! pages of the zone, which the two scanners cover between them.

use std::hint::black_box;

use buddy::{
    Allocator, CompactControl, CompactState, Era, Gfp, Kernel, MigrateCounts, Options, Owners,
    alloc_migration_target, compact_zone, migrate_pages,
};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use sparsemem::{Geometry, Layout, MemRange, NodeId, Order, Pfn, RangeKind, SparseExtreme};

const MIB: u64 = 1 << 20;

type Alloc = Allocator<SparseExtreme, Kernel>;

/// 64 MiB of RAM from 16 MiB: one ZONE_DMA32.
fn layout() -> Layout {
    let ram = MemRange::new(16 * MIB, 80 * MIB, RangeKind::Ram, 0);
    Layout::new(Geometry::X86_64, vec![ram], "64m-dma32").expect("valid layout")
}

fn allocator(layout: &Layout) -> Alloc {
    let model = SparseExtreme::new(layout).expect("builds");
    Allocator::new(model, layout, Options::for_era(Era::V6_18)).expect("boots")
}

/// Allocates and owns up to `n` movable order-0 pages; returns them.
fn own_pages(alloc: &Alloc, owners: &mut Owners, n: usize) -> Vec<Pfn> {
    let gfp = Gfp::HIGHUSER_MOVABLE;
    let mut pfns = Vec::new();
    while pfns.len() < n {
        let Ok(pfn) = alloc.alloc_pages(Order::ZERO, gfp, NodeId::ZERO, None) else {
            break;
        };
        owners.own(alloc, pfn, Order::ZERO, gfp).expect("movable");
        pfns.push(pfn);
    }
    pfns
}

fn migrate(c: &mut Criterion) {
    let layout = layout();
    let mut g = c.benchmark_group("migrate");
    for n in [64, 1024] {
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(format!("migrate-pages-{n}"), |b| {
            b.iter_batched(
                || {
                    let alloc = allocator(&layout);
                    let mut owners = Owners::new();
                    let pfns = own_pages(&alloc, &mut owners, n);
                    assert_eq!(pfns.len(), n, "the zone holds {n} pages");
                    (alloc, owners, pfns)
                },
                |(alloc, mut owners, mut from)| {
                    let mut counts = MigrateCounts::default();
                    let target =
                        alloc_migration_target(&alloc, NodeId::ZERO, Gfp::HIGHUSER_MOVABLE);
                    let left = migrate_pages(
                        &alloc,
                        &mut owners,
                        black_box(&mut from),
                        target,
                        |_| {},
                        &mut counts,
                    );
                    assert_eq!(left.ok(), Some(0), "every page moves");
                    (alloc, owners, counts)
                },
                BatchSize::PerIteration,
            )
        });
    }
    let zone_pages = allocator(&layout).zones()[0].managed_pages();
    g.throughput(Throughput::Elements(zone_pages));
    g.bench_function("compact-zone-fragmented", |b| {
        b.iter_batched(
            || {
                let alloc = allocator(&layout);
                let mut owners = Owners::new();
                for pfn in own_pages(&alloc, &mut owners, usize::MAX) {
                    if pfn.get() % 2 == 1 {
                        let id = owners.owner_of(pfn).expect("owned");
                        let (pfn, order) = owners.disown(id).expect("owned");
                        alloc.free_pages(pfn, order).expect("allocated");
                    }
                }
                let zone = &alloc.zones()[0];
                let block = layout.geometry().pageblock_nr_pages();
                let state = CompactState::new(zone, block);
                (alloc, owners, state)
            },
            |(alloc, mut owners, mut state)| {
                let zid = alloc.zones()[0].id;
                let cc = black_box(CompactControl::PROC);
                let run = compact_zone(&alloc, zid, &mut state, &mut owners, cc).expect("6.18");
                assert!(run.migrate.pgmigrate_success > 0, "{run:?}");
                (alloc, owners, run)
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, migrate);
criterion_main!(benches);
