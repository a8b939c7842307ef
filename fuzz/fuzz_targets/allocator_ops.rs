//! Structured allocator operation sequences — alloc, free, bulk list and
//! array with generated GFP masks (valid or not), pcp drain, hot add,
//! online with each online type, offline, hot remove, device memory add and
//! remove, hugetlb pools grown and shrunk (HVO off: the fuzzed eras
//! predate it), and misuse — over every memory model at every `struct page`
//! layout the allocator runs at (64 and 32 bytes), in every era that had the
//! hole check and with a generated subset of mechanisms, checked against
//! the reference after each step.
#![no_main]

mod common;

use arbitrary::Arbitrary;
use buddy::testing::{Reference, check_conservation};
use buddy::{
    Allocator, Gfp, HugetlbPool, InitError, KernelHoleCheck, MemHotplugError, OnlineType, Options,
    RequestError,
};
use libfuzzer_sys::fuzz_target;
use sparsemem::table::{Classic, Extreme};
use sparsemem::{Flat, Layout, NodeId, Order, Pfn, Sparse};
use vmemmap::{Probe, Table, Vmemmap, VmemmapOptions};

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Op {
    Alloc(u8, u32),
    Free(u16),
    FreeBad(u64, u8),
    BulkList(u8, u32),
    BulkArray(u8, u32),
    Drain,
    HotAdd(u8, u8),
    Online(u8, u8, u8),
    Offline(u8, u8),
    HotRemove(u8, u8),
    AddDevice(u8, u8),
    RemoveDevice(u8, u8),
    /// Hugetlb: grow (even) or shrink (odd) the PMD (`which` < 128) or PUD
    /// pool by up to `n % 8` folios.
    Hugetlb(u8, u8),
}

#[derive(Arbitrary, Debug)]
struct Input {
    layout: common::FuzzLayout,
    model: u8,
    page_size: u8,
    era: u8,
    mechanisms: u8,
    ops: Vec<Op>,
}

/// A GFP mask from generated bits: one of the kernel's compositions, plus
/// modifier bits (which may make it invalid: two zones, or movable and
/// reclaimable at once).
fn gfp_of(raw: u32) -> Gfp {
    const BASES: [Gfp; 8] = [
        Gfp::KERNEL,
        Gfp::HIGHUSER_MOVABLE,
        Gfp::ATOMIC,
        Gfp::KERNEL.union(Gfp::DMA32),
        Gfp::DMA,
        Gfp::NOWAIT,
        Gfp::KERNEL.union(Gfp::RECLAIMABLE),
        Gfp::TRANSHUGE_LIGHT,
    ];
    let extra = if raw & (1 << 31) != 0 {
        Gfp::from_bits((raw >> 3) & Gfp::KNOWN.bits()).unwrap_or_default()
    } else {
        Gfp::default()
    };
    BASES[(raw % 8) as usize] | extra
}

/// Whether the kernel would refuse the mask outright.
fn invalid(gfp: Gfp) -> bool {
    gfp.gfp_zone().is_err() || gfp.gfp_migratetype().is_err()
}

/// A range in the layout's window or just past it: in whole memory blocks
/// (mostly; one in eight is skewed by a subsection, to be refused), or for
/// device memory in subsections.
fn hot_range(layout: &Layout, at: u8, len: u8, device: bool) -> (Pfn, u64) {
    let g = layout.geometry();
    let (lo, hi) = layout.memory_span();
    let base = lo.get() / g.pages_per_section() * g.pages_per_section();
    let window_end = hi.get().next_multiple_of(g.pages_per_section());
    let (unit, skew) = if device {
        (g.pages_per_subsection(), 0)
    } else {
        let skew = if at % 8 == 7 {
            g.pages_per_subsection()
        } else {
            0
        };
        (g.memory_block_pages(), skew)
    };
    let span = (window_end - base) / unit + 4;
    let start = base + (u64::from(at) % span) * unit + skew;
    let nr = u64::from(len % 4).max(1) * unit;
    (Pfn::new(start.min(g.max_pfn().get() - nr)), nr)
}

fn run<M: buddy::BuddyModel>(model: M, layout: &Layout, ops: &[Op], era: u8, mechanisms: u8) {
    // The eras that had the hole check: 2.6.9, 2.6.23 and 5.13 (the last,
    // with migratetypes, so steals and fallbacks are fuzzed too).
    let eras = [buddy::Era::V2_6_9, buddy::Era::V2_6_23, buddy::Era::V5_13];
    let options = Options {
        mechanisms: buddy::Mechanisms {
            pageblock: mechanisms & 1 == 0,
            watermarks: mechanisms & 2 == 0,
            page_prep: mechanisms & 4 == 0,
            entry: mechanisms & 8 == 0,
        },
        ..Options::for_era(eras[usize::from(era) % eras.len()])
    };
    let mut alloc = match Allocator::<M, KernelHoleCheck>::new(model, layout, options) {
        Ok(a) => a,
        Err(InitError::TooManyZones) => return,
        Err(e) => panic!("the hole-check variant accepts every layout: {e}"),
    };
    let mut reference = Reference::default();
    let node = layout.first_node();
    let orders = sparsemem::hvo::hugetlb_orders(layout.geometry());
    let mut pools: Vec<HugetlbPool> = orders
        .iter()
        .filter_map(|&o| HugetlbPool::new(&alloc, o, node, None).ok())
        .collect();
    for &op in ops.iter().take(64) {
        match op {
            Op::HotAdd(at, len) => {
                let (start, nr) = hot_range(layout, at, len, false);
                let _ = alloc.hot_add(start, nr, node);
            }
            Op::Online(at, len, t) => {
                let (start, nr) = hot_range(layout, at, len, false);
                let t = OnlineType::ALL[usize::from(t) % OnlineType::ALL.len()];
                let _ = alloc.online_pages(start, nr, t);
            }
            Op::AddDevice(at, len) => {
                let (start, nr) = hot_range(layout, at, len, true);
                let _ = alloc.add_device(start, nr, NodeId::ZERO);
            }
            Op::RemoveDevice(at, len) => {
                let (start, nr) = hot_range(layout, at, len, true);
                let _ = alloc.remove_device(start, nr);
            }
            Op::Offline(at, len) => {
                let (start, nr) = hot_range(layout, at, len, false);
                let before: Vec<_> = alloc.zones().iter().map(|z| z.nr_free()).collect();
                if let Err(MemHotplugError::InUse { .. }) = alloc.offline_pages(start, nr) {
                    let after: Vec<_> = alloc.zones().iter().map(|z| z.nr_free()).collect();
                    assert_eq!(before, after, "a refused offline changes nothing");
                }
            }
            Op::HotRemove(at, len) => {
                let (start, nr) = hot_range(layout, at, len, false);
                let _ = alloc.hot_remove(start, nr);
            }
            Op::Hugetlb(which, n) => {
                let Some(pool) = pools.get_mut(usize::from(which >> 7) % 2) else {
                    continue;
                };
                let n = u64::from(n % 8);
                let before = pool.counts().nr_hugepages;
                if which % 2 == 0 {
                    let got = pool.grow(&alloc, n).unwrap_or(0);
                    assert_eq!(pool.counts().nr_hugepages, before + got);
                } else {
                    let freed = pool.shrink(&alloc, n).expect("no HVO: nothing to restore");
                    assert_eq!(freed, n.min(before));
                }
            }
            _ => {
                // A layout with no memory yet has no node to run a CPU on.
                let Ok(mut cpu) = alloc.cpu_on(node) else {
                    continue;
                };
                match op {
                    Op::Alloc(o, g) => {
                        let max = cpu.allocator().model().geometry().max_order().get();
                        let order = Order::new(o % (max + 1));
                        let gfp = gfp_of(g);
                        match cpu.alloc_pages(order, gfp) {
                            Ok(pfn) => {
                                assert!(!invalid(gfp), "{gfp} served");
                                reference
                                    .record_model(cpu.allocator().model(), pfn, order)
                                    .expect("fresh block");
                            }
                            Err(RequestError::Gfp(_)) => assert!(invalid(gfp), "{gfp} refused"),
                            Err(_) => {}
                        }
                    }
                    Op::Free(i) => {
                        if let Some((pfn, order)) = reference.take(usize::from(i)) {
                            cpu.free_pages(pfn, order)
                                .expect("freeing an allocated block");
                        }
                    }
                    Op::FreeBad(pfn, o) => {
                        let pfn = Pfn::new(pfn);
                        let allocated = reference.blocks.contains_key(&pfn.get());
                        if !allocated {
                            assert!(
                                cpu.free_pages(pfn, Order::new(o % 17)).is_err(),
                                "{pfn:?} was never allocated"
                            );
                        }
                    }
                    Op::BulkList(n, g) => {
                        let mut out = Vec::new();
                        let gfp = gfp_of(g);
                        if let Err(e) = cpu.alloc_bulk_vec(usize::from(n), gfp, &mut out) {
                            assert!(invalid(gfp) && out.is_empty(), "{gfp}: {e}");
                        }
                        for pfn in out {
                            reference
                                .record_model(cpu.allocator().model(), pfn, Order::ZERO)
                                .expect("fresh page");
                        }
                    }
                    Op::BulkArray(n, g) => {
                        let mut slots = vec![None; usize::from(n)];
                        let gfp = gfp_of(g);
                        let got = match cpu.alloc_bulk_array(gfp, &mut slots) {
                            Ok(got) => got,
                            Err(e) => {
                                assert!(invalid(gfp), "{gfp}: {e}");
                                0
                            }
                        };
                        assert_eq!(got, slots.iter().take_while(|s| s.is_some()).count());
                        for pfn in slots.into_iter().flatten() {
                            reference
                                .record_model(cpu.allocator().model(), pfn, Order::ZERO)
                                .expect("fresh page");
                        }
                    }
                    _ => cpu.drain(),
                }
                drop(cpu);
            }
        }
        // The pools' blocks count as allocated for the check only.
        let held: Vec<_> = pools.iter().flat_map(|p| p.blocks(&alloc)).collect();
        for &(pfn, order) in &held {
            reference
                .record_model(alloc.model(), pfn, order)
                .expect("a pool's block is allocated once");
        }
        check_conservation(&alloc, 0, &reference).expect("conservation");
        for (pfn, _) in held {
            reference.blocks.remove(&pfn.get());
        }
    }
}

/// Builds the model `input.model` picks at `struct page` layout `P` and
/// runs the input on it.
fn run_at<P: sparsemem::BuddyPage>(layout: &Layout, input: &Input) {
    let (ops, era, mechanisms) = (&input.ops[..], input.era, input.mechanisms);
    match input.model % 5 {
        0 => {
            if let Some(m) = common::built(Flat::<P>::build(layout), layout, true) {
                run(m, layout, ops, era, mechanisms)
            }
        }
        1 => {
            // The classic table refuses geometries whose table is too big.
            if let Ok(m) = Sparse::<Classic, P>::build(layout) {
                run(m, layout, ops, era, mechanisms)
            }
        }
        2 => {
            let extreme = Sparse::<Extreme, P>::build(layout);
            if let Some(m) = common::built(extreme, layout, false) {
                run(m, layout, ops, era, mechanisms)
            }
        }
        3 => {
            let table = Vmemmap::<Table, P>::build(layout, VmemmapOptions::default());
            run(table.expect("builds"), layout, ops, era, mechanisms)
        }
        _ => {
            let probe = Vmemmap::<Probe, P>::build(layout, VmemmapOptions::default());
            run(probe.expect("builds"), layout, ops, era, mechanisms)
        }
    }
}

fuzz_target!(|input: Input| {
    let Some(layout) = input.layout.build() else {
        return;
    };
    // The size is drawn too: every layout the allocator runs at.
    match input.page_size % 4 {
        0 => run_at::<sparsemem::Page64>(&layout, &input),
        1 => run_at::<sparsemem::Page32>(&layout, &input),
        2 => run_at::<sparsemem::Page16>(&layout, &input),
        _ => run_at::<sparsemem::Page8>(&layout, &input),
    }
});
