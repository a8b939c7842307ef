//! Multi-threaded stress: per-thread pcp lists, both lock policies, bounded
//! in time, ending with conservation and full coalescing.

use std::time::{Duration, Instant};

use buddy::testing::{Reference, free_all_and_check, snapshot};
use buddy::{
    Allocator, Bitmap, BuddyModel, Gfp, Kernel, LockPolicy, NoBitmapAtomic, Options, Variant,
};
use sparsemem::table::Classic;
use sparsemem::{Layout, NodeId, Order, Page8, Page16, Page32, Pfn, Sparse, SparseClassic};
use vmemmap::{Probe, Vmemmap, VmemmapOptions, VmemmapProbe};

fn stress<M: BuddyModel, V: Variant>(model: M, layout: &Layout, policy: LockPolicy) {
    let options = Options {
        lock_policy: policy,
        pcp_batch: Some(31),
        // The newest era that had the variant.
        ..Options::for_era(
            buddy::Era::ALL
                .into_iter()
                .rev()
                .find(|e| e.check_variant::<V>().is_ok())
                .unwrap(),
        )
    };
    let alloc = Allocator::<M, V>::new(model, layout, options).unwrap();
    let initial = snapshot(&alloc);
    let deadline = Instant::now() + Duration::from_millis(300);
    let threads = 3;
    let leftovers: Vec<Vec<(Pfn, Order)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let alloc = &alloc;
                s.spawn(move || {
                    let mut cpu = alloc.cpu_on(NodeId::new(0)).unwrap();
                    let mut held: Vec<(Pfn, Order)> = Vec::new();
                    let mut x = 0x9e37_79b9u64 + t;
                    while Instant::now() < deadline {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let order = Order::new(if x.is_multiple_of(8) {
                            (x % 5) as u8
                        } else {
                            0
                        });
                        if held.len() < 2000 && !x.is_multiple_of(3) {
                            if let Ok(p) = cpu.alloc_pages(order, Gfp::KERNEL) {
                                held.push((p, order));
                            }
                        } else if !held.is_empty() {
                            let (p, o) = held.swap_remove((x as usize) % held.len());
                            cpu.free_pages(p, o).unwrap();
                        }
                        if x.is_multiple_of(1000) {
                            let mut slots = [None; 64];
                            let n = cpu.alloc_bulk_array(Gfp::KERNEL, &mut slots).unwrap();
                            held.extend(slots[..n].iter().map(|p| (p.unwrap(), Order::ZERO)));
                        }
                    }
                    held
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut reference = Reference::default();
    for (p, o) in leftovers.into_iter().flatten() {
        reference
            .record(layout, p, o)
            .expect("no page handed out twice across threads");
    }
    free_all_and_check(
        alloc.cpu_on(NodeId::new(0)).unwrap(),
        &mut reference,
        &initial,
    )
    .unwrap();
    let zone_locks: u64 = alloc.zones().iter().map(|z| z.lock_acquisitions()).sum();
    assert!(zone_locks > 0);
}

fn layout_512m() -> Layout {
    Layout::new(
        sparsemem::Geometry::X86_64,
        vec![sparsemem::MemRange::new(
            0,
            512 << 20,
            sparsemem::RangeKind::Ram,
            0,
        )],
        "512m",
    )
    .unwrap()
}

#[test]
fn stress_both_lock_policies() {
    let layout = layout_512m();
    for policy in [LockPolicy::PerBatch, LockPolicy::PerPage] {
        stress::<_, Kernel>(SparseClassic::new(&layout).unwrap(), &layout, policy);
        stress::<_, NoBitmapAtomic>(VmemmapProbe::new(&layout).unwrap(), &layout, policy);
        stress::<_, Bitmap>(VmemmapProbe::new(&layout).unwrap(), &layout, policy);
    }
}

/// The same stress with Wilcox's 32-byte `struct page`, whose links share
/// their words with the count and the memdesc: one variant per lock
/// policy, so the suite stays short.
#[test]
fn stress_at_32_bytes() {
    let layout = layout_512m();
    let classic = Sparse::<Classic, Page32>::build(&layout).unwrap();
    stress::<_, Kernel>(classic, &layout, LockPolicy::PerBatch);
    let probe = Vmemmap::<Probe, Page32>::build(&layout, VmemmapOptions::default()).unwrap();
    stress::<_, NoBitmapAtomic>(probe, &layout, LockPolicy::PerPage);
}

/// The same stress at 16 bytes, where every page going on a free or
/// per-CPU list takes a `struct buddy` from the shared cache (its lock
/// crossed by both threads) and gives it back as it leaves.
#[test]
fn stress_at_16_bytes() {
    let layout = layout_512m();
    let classic = Sparse::<Classic, Page16>::build(&layout).unwrap();
    stress::<_, Kernel>(classic, &layout, LockPolicy::PerPage);
    let probe = Vmemmap::<Probe, Page16>::build(&layout, VmemmapOptions::default()).unwrap();
    stress::<_, Bitmap>(probe, &layout, LockPolicy::PerBatch);
}

/// The same stress at 8 bytes, where a listed page takes a `struct buddy`
/// and an allocated page its memdesc, each from its own shared cache: both
/// caches' locks are crossed by both threads on every pair.
#[test]
fn stress_at_8_bytes() {
    let layout = layout_512m();
    let classic = Sparse::<Classic, Page8>::build(&layout).unwrap();
    stress::<_, Kernel>(classic, &layout, LockPolicy::PerPage);
    let probe = Vmemmap::<Probe, Page8>::build(&layout, VmemmapOptions::default()).unwrap();
    stress::<_, Bitmap>(probe, &layout, LockPolicy::PerBatch);
}
