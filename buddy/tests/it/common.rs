//! What more than one of buddy's test suites builds on.

use buddy::testing::{Reference, check_conservation};
use buddy::{Allocator, Gfp, Kernel, OwnerId, Owners};
use sparsemem::{
    Geometry, Layout, MemRange, MemoryModel, NodeId, Order, Pfn, RangeKind, SparseExtreme,
};

/// Pages in a pageblock (order 9).
pub const PAGEBLOCK: u64 = 512;

/// The allocator the compaction and `defrag_mode` suites build.
pub type SmallAlloc = Allocator<SparseExtreme, Kernel>;

/// 16 MiB of RAM from 16 MiB: one ZONE_DMA32 of 4,096 pages, eight
/// pageblocks, whose min watermark is 128 pages.
pub fn zone_16m() -> Layout {
    Layout::new(
        Geometry::X86_64,
        vec![MemRange::new(16 << 20, 32 << 20, RangeKind::Ram, 0)],
        "16m",
    )
    .expect("a valid layout")
}

/// 3 GiB of RAM from 1 MiB, a hole, and 2 GiB from 4 GiB: DMA, DMA32 and
/// Normal, the last of which defers its init past its first section.
pub fn two_zone_layout() -> Layout {
    Layout::new(
        Geometry::X86_64,
        vec![
            MemRange::new(1 << 20, 3 << 30, RangeKind::Ram, 0),
            MemRange::new(4 << 30, 6 << 30, RangeKind::Ram, 0),
        ],
        "two zones",
    )
    .expect("a valid layout")
}

/// One order-0 page of `gfp` from node 0.
pub fn alloc0(alloc: &SmallAlloc, gfp: Gfp) -> Option<Pfn> {
    alloc.alloc_pages(Order::ZERO, gfp, NodeId::ZERO, None).ok()
}

/// The whole-allocator checks with the owners' blocks and `others` as the
/// allocated ones; every owner resolves to an allocated block.
pub fn check(alloc: &SmallAlloc, layout: &Layout, owners: &Owners, others: &[(Pfn, Order)]) {
    let mut reference = Reference::default();
    for (_, pfn, order) in owners.iter() {
        let page = alloc.model().pfn_to_page(pfn).unwrap();
        assert!(page.refcount() > 0, "owner at {pfn} holds a free page");
        reference.record(layout, pfn, order).unwrap();
    }
    for &(pfn, order) in others {
        reference.record(layout, pfn, order).unwrap();
    }
    check_conservation(alloc, 0, &reference).unwrap();
}

/// The zone filled with order-0 pages (every `kernel_every`-th a
/// GFP_KERNEL one, the rest owned movable ones) until the allocator
/// refuses; returns the kernel pages.
pub fn fill_zone(alloc: &SmallAlloc, owners: &mut Owners, kernel_every: usize) -> Vec<Pfn> {
    let mut kernel = Vec::new();
    for i in 0.. {
        let gfp = if kernel_every > 0 && i % kernel_every == 0 {
            Gfp::KERNEL
        } else {
            Gfp::HIGHUSER_MOVABLE
        };
        let Some(pfn) = alloc0(alloc, gfp) else {
            break;
        };
        if gfp == Gfp::KERNEL {
            kernel.push(pfn);
        } else {
            owners.own(alloc, pfn, Order::ZERO, gfp).unwrap();
        }
    }
    kernel
}

/// Frees the owned, unpinned pages `free` picks, in ppub fn order.
pub fn free_owned(alloc: &SmallAlloc, owners: &mut Owners, mut free: impl FnMut(Pfn) -> bool) {
    let mut all: Vec<(OwnerId, Pfn)> = owners.iter().map(|(id, p, _)| (id, p)).collect();
    all.sort_by_key(|&(_, p)| p);
    for (id, pfn) in all {
        if !owners.is_pinned(id) && free(pfn) {
            let (pfn, order) = owners.disown(id).unwrap();
            alloc.free_pages(pfn, order).unwrap();
        }
    }
}
