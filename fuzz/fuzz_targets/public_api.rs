//! The public constructors and operations with mismatched and hostile
//! arguments: a model built from one generated layout handed to an
//! allocator with another (any geometry), in every variant, then arbitrary
//! pfns, orders, node and zone ids, bulk sizes and hotplug ranges. Nothing
//! may panic; a refused call leaves the allocator's pages conserved.
#![no_main]

mod common;

use arbitrary::Arbitrary;
use buddy::testing::{Reference, check_conservation};
use buddy::{
    Allocator, Bitmap, Gfp, Kernel, KernelHoleCheck, NoBitmapAtomic, NodeMask, OnlineType, Options,
    Variant, ZoneId, ZoneType,
};
use libfuzzer_sys::fuzz_target;
use sparsemem::{Layout, NodeId, Order, Pfn, SparseExtreme};

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Op {
    Alloc(u64, u8, u16, bool),
    Free(u64, u64),
    PcpAlloc(u16, u8),
    PcpFree(u64),
    Bulk(u16, u16),
    Query(u8, u16),
    Hotplug(u8, u64, u64, u16),
}

#[derive(Arbitrary, Debug)]
struct Input {
    built_from: common::FuzzLayout,
    given: common::FuzzLayout,
    variant: u8,
    ops: Vec<Op>,
}

/// A GFP mask asking for at most zone type `raw` (`gfp_zone`'s inverse).
fn zone_gfp(raw: u8) -> Gfp {
    match ZoneType::ALL[usize::from(raw) % ZoneType::ALL.len()] {
        ZoneType::Dma => Gfp::KERNEL | Gfp::DMA,
        ZoneType::Dma32 => Gfp::KERNEL | Gfp::DMA32,
        ZoneType::Normal => Gfp::KERNEL,
        ZoneType::Movable => Gfp::HIGHUSER_MOVABLE,
    }
}

fn run<V: Variant>(model: SparseExtreme, layout: &Layout, ops: &[Op]) {
    // The newest era that had the variant (every one had the plain kernel's).
    let era = buddy::Era::ALL
        .into_iter()
        .rev()
        .find(|e| e.check_variant::<V>().is_ok())
        .unwrap_or_default();
    let Ok(mut alloc) = Allocator::<_, V>::new(model, layout, Options::for_era(era)) else {
        return; // refused with an error: the point of the mismatch
    };
    let none = Reference::default();
    for &op in ops.iter().take(64) {
        match op {
            Op::Alloc(order, zone, node, thisnode) => {
                let Ok(order) = Order::try_new(order) else {
                    continue;
                };
                let Ok(node) = NodeId::try_new(u64::from(node)) else {
                    continue;
                };
                let gfp = if thisnode {
                    zone_gfp(zone).thisnode()
                } else {
                    zone_gfp(zone)
                };
                if let Ok(pfn) = alloc.alloc_pages(order, gfp, node, None) {
                    alloc
                        .free_pages(pfn, order)
                        .expect("freeing what was just allocated");
                }
            }
            Op::Free(pfn, order) => {
                if let Ok(order) = Order::try_new(order) {
                    let _ = alloc.free_pages(Pfn::new(pfn), order);
                }
            }
            Op::PcpAlloc(node, mask) => {
                let Ok(node) = NodeId::try_new(u64::from(node)) else {
                    continue;
                };
                let Ok(mut cpu) = alloc.cpu_on(node) else {
                    continue;
                };
                cpu.set_cpuset(Some(NodeMask::of(
                    (0..8).filter(|b| mask & (1 << b) != 0).map(NodeId::new),
                )));
                if let Ok(pfn) = cpu.alloc(Gfp::HIGHUSER_MOVABLE) {
                    cpu.free(pfn).expect("freeing what was just allocated");
                }
            }
            Op::PcpFree(pfn) => {
                if let Some(node) = alloc.nodes().first().map(|n| n.id) {
                    let mut cpu = alloc.cpu_on(node).expect("a listed node");
                    let _ = cpu.free(Pfn::new(pfn));
                }
            }
            Op::Bulk(n, slots) => {
                if let Some(node) = alloc.nodes().first().map(|n| n.id) {
                    let mut cpu = alloc.cpu_on(node).expect("a listed node");
                    let mut out = Vec::new();
                    let _ = cpu.alloc_bulk_vec(usize::from(n), Gfp::HIGHUSER_MOVABLE, &mut out);
                    let mut array = vec![None; usize::from(slots % 5000)];
                    let _ = cpu.alloc_bulk_array(Gfp::HIGHUSER_MOVABLE, &mut array);
                    for pfn in out.into_iter().chain(array.into_iter().flatten()) {
                        cpu.free(pfn).expect("freeing what bulk allocated");
                    }
                }
            }
            Op::Query(zone, node) => {
                let _ = alloc.zone(ZoneId::new(zone)).map(|z| z.nr_free_pages());
                let _ = alloc.free_blocks(ZoneId::new(zone));
                if let Ok(node) = NodeId::try_new(u64::from(node)) {
                    let _ = alloc.zonelist(node, Gfp::KERNEL);
                }
            }
            Op::Hotplug(what, start, nr, node) => {
                let (start, nr) = (Pfn::new(start), nr);
                let Ok(node) = NodeId::try_new(u64::from(node)) else {
                    continue;
                };
                let online = OnlineType::ALL[usize::from(what / 8) % OnlineType::ALL.len()];
                match what % 6 {
                    0 => drop(alloc.hot_add(start, nr, node)),
                    1 => drop(alloc.online_pages(start, nr, online)),
                    2 => drop(alloc.offline_pages(start, nr)),
                    3 => drop(alloc.hot_remove(start, nr)),
                    4 => drop(alloc.add_device(start, nr, node)),
                    _ => drop(alloc.remove_device(start, nr)),
                }
            }
        }
        check_conservation(&alloc, 0, &none).expect("conservation after a hostile call");
    }
}

fuzz_target!(|input: Input| {
    let (Some(built_from), Some(given)) = (input.built_from.build(), input.given.build()) else {
        return;
    };
    let Some(model) = common::built(SparseExtreme::new(&built_from), &built_from, false) else {
        return;
    };
    match input.variant % 4 {
        0 => run::<Kernel>(model, &given, &input.ops),
        1 => run::<KernelHoleCheck>(model, &given, &input.ops),
        2 => run::<NoBitmapAtomic>(model, &given, &input.ops),
        _ => run::<Bitmap>(model, &given, &input.ops),
    }
});
