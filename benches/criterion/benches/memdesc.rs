//! `memdesc` experiment: `struct page` at 64, 32, 16 and 8
//! bytes over vmemmap-table and sparse-extreme — `pfn_valid` on random
//! valid pfns of `preset:x86-pci-hole`, and the random `pfn_to_page` +
//! `page_zonenum` chain over a span whose 64-byte memmap fits in the L2,
//! one at the LLC, and one four times past it — then the allocator's
//! rows at the sizes it runs at (`bench memdesc`'s code, through the same
//! trait objects).

mod common;

use criterion::{Throughput, criterion_group, criterion_main};
use pfnlab::experiments::memdesc::alloc::{AllocWork, BULK_PAGES, SizedAllocator};
use pfnlab::experiments::memdesc::sized::{BuildableAt, SizedVisitor, build_sized, with_model_at};
use pfnlab::experiments::memdesc::sweep::CacheSizes;
use pfnlab::experiments::memdesc::{alloc::sized_allocator, sweep_layout};
use pfnlab::models::ModelKind;
use pfnlab::workloads::valid_pfns;
use sparsemem::{Layout, PageSize, Pfn};
use vmemmap::VmemmapOptions;

const MODELS: [ModelKind; 2] = [ModelKind::VmemmapTable, ModelKind::SparseExtreme];

fn lookups(c: &mut criterion::Criterion<common::TscCycles>) {
    let layout = Layout::preset("x86-pci-hole").unwrap();
    let caches = CacheSizes::read();
    // Fits in the L2 at 64 B, the LLC's size at 64 B, 4 x the LLC at 64 B.
    let spans = [
        (caches.l2_bytes / 2 / 64).next_power_of_two(),
        (caches.llc_bytes / 64).next_power_of_two(),
        (4 * caches.llc_bytes / 64).next_power_of_two(),
    ];
    let sweep = sweep_layout(&layout, spans[2]).unwrap();
    let pfns = valid_pfns(&layout, 4096, 3);
    let mut g = c.benchmark_group("memdesc");
    for kind in MODELS {
        for size in PageSize::ALL {
            let options = VmemmapOptions::default();
            let model = build_sized(kind, size, &layout, options).unwrap();
            g.throughput(Throughput::Elements(pfns.len() as u64));
            g.bench_function(format!("{kind}/{size}B/pfn_valid"), |b| {
                b.iter(|| model.count_valid(std::hint::black_box(&pfns)))
            });
            drop(model);
            let model = build_sized(kind, size, &sweep, options).unwrap();
            g.throughput(Throughput::Elements(4096));
            for span in spans {
                g.bench_function(format!("{kind}/{size}B/pfn_to_page/{span}"), |b| {
                    b.iter(|| model.chase(Pfn::new(0), std::hint::black_box(span), 4096))
                });
            }
        }
    }
    g.finish();
}

struct Alloc;

impl SizedVisitor for Alloc {
    type Output = Box<dyn SizedAllocator>;
    fn visit<M: BuildableAt>(self, layout: &Layout, options: VmemmapOptions) -> Self::Output {
        let era = buddy::Options::for_era(buddy::Era::V6_18);
        sized_allocator::<M>(layout, options, era).unwrap()
    }
}

fn allocator(c: &mut criterion::Criterion<common::TscCycles>) {
    let layout = Layout::preset("x86-pci-hole").unwrap();
    let mut g = c.benchmark_group("memdesc-alloc");
    for kind in MODELS {
        for size in PageSize::ALL {
            let options = VmemmapOptions::default();
            let alloc = with_model_at(kind, size, &layout, options, Alloc);
            for (work, name, per) in [
                (AllocWork::Pcp, "pcp", 1),
                (AllocWork::SplitMerge, "split+merge", 1),
                (AllocWork::Bulk, "bulk-128", BULK_PAGES as u64),
            ] {
                g.throughput(Throughput::Elements(256 * per));
                g.bench_function(format!("{kind}/{size}B/{name}"), |b| {
                    b.iter(|| alloc.run(work, 256))
                });
            }
        }
    }
    g.finish();
}

criterion_group! { name = cycles; config = common::cycles(); targets = lookups, allocator }
criterion_main!(cycles);
