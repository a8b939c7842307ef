//! Structured allocator operation sequences — alloc, free, bulk list and
//! array, pcp drain, hot add, online with each online type, offline, hot
//! remove, device memory add and remove, and misuse — over every memory
//! model, checked against the reference after each step.
#![no_main]

mod common;

use arbitrary::Arbitrary;
use buddy::testing::{Reference, check_conservation};
use buddy::{AllocError, Allocator, Gfp, KernelHoleCheck, OnlineType, Options};
use libfuzzer_sys::fuzz_target;
use sparsemem::{Flat, Layout, MemoryModel, NodeId, Order, Pfn, SparseClassic, SparseExtreme};
use vmemmap::{VmemmapProbe, VmemmapTable};

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Op {
    Alloc(u8),
    Free(u16),
    FreeBad(u64, u8),
    BulkList(u8),
    BulkArray(u8),
    Drain,
    HotAdd(u8, u8),
    Online(u8, u8, u8),
    Offline(u8, u8),
    HotRemove(u8, u8),
    AddDevice(u8, u8),
    RemoveDevice(u8, u8),
}

#[derive(Arbitrary, Debug)]
struct Input {
    layout: common::FuzzLayout,
    model: u8,
    ops: Vec<Op>,
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

fn run<M: MemoryModel>(model: M, layout: &Layout, ops: &[Op]) {
    // 5.13: the last era with the hole check (and the first here with
    // migratetypes, so steals and fallbacks are fuzzed too).
    let options = Options::for_era(buddy::Era::V5_13);
    let mut alloc = match Allocator::<M, KernelHoleCheck>::new(model, layout, options) {
        Ok(a) => a,
        Err(AllocError::TooManyZones) => return,
        Err(e) => panic!("the hole-check variant accepts every layout: {e}"),
    };
    let mut reference = Reference::default();
    let node = layout.first_node();
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
                if let Err(AllocError::InUse { .. }) = alloc.offline_pages(start, nr) {
                    let after: Vec<_> = alloc.zones().iter().map(|z| z.nr_free()).collect();
                    assert_eq!(before, after, "a refused offline changes nothing");
                }
            }
            Op::HotRemove(at, len) => {
                let (start, nr) = hot_range(layout, at, len, false);
                let _ = alloc.hot_remove(start, nr);
            }
            _ => {
                // A layout with no memory yet has no node to run a CPU on.
                let Ok(mut cpu) = alloc.cpu_on(node) else {
                    continue;
                };
                match op {
                    Op::Alloc(o) => {
                        let max = cpu.allocator().model().geometry().max_order().get();
                        let order = Order::new(o % (max + 1));
                        if let Ok(pfn) = cpu.alloc_pages(order, Gfp::MOVABLE) {
                            reference
                                .record_model(cpu.allocator().model(), pfn, order)
                                .expect("fresh block");
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
                    Op::BulkList(n) => {
                        let mut out = Vec::new();
                        cpu.alloc_bulk_list(usize::from(n), Gfp::MOVABLE, &mut out)
                            .expect("small bulk");
                        for pfn in out {
                            reference
                                .record_model(cpu.allocator().model(), pfn, Order::ZERO)
                                .expect("fresh page");
                        }
                    }
                    Op::BulkArray(n) => {
                        let mut slots = vec![None; usize::from(n)];
                        let got = cpu
                            .alloc_bulk_array(Gfp::MOVABLE, &mut slots)
                            .expect("small bulk");
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
        check_conservation(&alloc, 0, &reference).expect("conservation");
    }
}

fuzz_target!(|input: Input| {
    let Some(layout) = input.layout.build() else {
        return;
    };
    match input.model % 5 {
        0 => {
            if let Some(m) = common::built(Flat::new(&layout), &layout, true) {
                run(m, &layout, &input.ops)
            }
        }
        1 => {
            // The classic table refuses geometries whose table is too big.
            if let Ok(m) = SparseClassic::new(&layout) {
                run(m, &layout, &input.ops)
            }
        }
        2 => {
            if let Some(m) = common::built(SparseExtreme::new(&layout), &layout, false) {
                run(m, &layout, &input.ops)
            }
        }
        3 => run(
            VmemmapTable::new(&layout).expect("builds"),
            &layout,
            &input.ops,
        ),
        _ => run(
            VmemmapProbe::new(&layout).expect("builds"),
            &layout,
            &input.ops,
        ),
    }
});
