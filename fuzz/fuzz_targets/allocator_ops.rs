//! Structured allocator operation sequences — alloc, free, bulk list and
//! array with generated GFP masks (valid or not), pcp drain, hot add,
//! online with each online type, offline, hot remove, device memory add and
//! remove, and misuse — over every memory model, in every era that had the
//! hole check and with a generated subset of mechanisms, checked against
//! the reference after each step.
#![no_main]

mod common;

use arbitrary::Arbitrary;
use buddy::testing::{Reference, check_conservation};
use buddy::{
    Allocator, Gfp, InitError, KernelHoleCheck, MemHotplugError, OnlineType, Options, RequestError,
};
use libfuzzer_sys::fuzz_target;
use sparsemem::{Flat, Layout, NodeId, Order, Pfn, SparseClassic, SparseExtreme};
use vmemmap::{VmemmapProbe, VmemmapTable};

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
}

#[derive(Arbitrary, Debug)]
struct Input {
    layout: common::FuzzLayout,
    model: u8,
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
                run(m, &layout, &input.ops, input.era, input.mechanisms)
            }
        }
        1 => {
            // The classic table refuses geometries whose table is too big.
            if let Ok(m) = SparseClassic::new(&layout) {
                run(m, &layout, &input.ops, input.era, input.mechanisms)
            }
        }
        2 => {
            if let Some(m) = common::built(SparseExtreme::new(&layout), &layout, false) {
                run(m, &layout, &input.ops, input.era, input.mechanisms)
            }
        }
        3 => run(
            VmemmapTable::new(&layout).expect("builds"),
            &layout,
            &input.ops,
            input.era,
            input.mechanisms,
        ),
        _ => run(
            VmemmapProbe::new(&layout).expect("builds"),
            &layout,
            &input.ops,
            input.era,
            input.mechanisms,
        ),
    }
});
