//! Real frames: `page_address`, `__GFP_ZERO` clearing what a previous
//! holder wrote, and the limits refused with one clear error.

use buddy::{Allocator, Gfp, InitError, Kernel, MemHotplugError, Options};
use sparsemem::{Geometry, Layout, MemRange, NodeId, Order, Pfn, RangeKind, SparseExtreme};

const MIB: u64 = 1 << 20;

fn layout(ram: u64) -> Layout {
    Layout::new(
        Geometry::X86_64,
        vec![MemRange::new(16 * MIB, 16 * MIB + ram, RangeKind::Ram, 0)],
        "frames",
    )
    .unwrap()
}

fn with_frames(layout: &Layout) -> Result<Allocator<SparseExtreme, Kernel>, InitError> {
    let options = Options {
        frames: true,
        ..Options::default()
    };
    Allocator::new(SparseExtreme::new(layout).unwrap(), layout, options)
}

/// Writes `byte` over the whole block.
fn fill(alloc: &Allocator<SparseExtreme, Kernel>, pfn: Pfn, order: Order, byte: u8) {
    let addr = alloc.page_address(pfn).unwrap();
    // SAFETY: the test holds the block; its frames are contiguous in the
    // mapping and 4 KiB each.
    unsafe { std::ptr::write_bytes(addr.as_ptr(), byte, (4096 << order.get()) as usize) };
}

fn all(alloc: &Allocator<SparseExtreme, Kernel>, pfn: Pfn, order: Order, byte: u8) -> bool {
    let addr = alloc.page_address(pfn).unwrap();
    // SAFETY: as in `fill`.
    let bytes =
        unsafe { std::slice::from_raw_parts(addr.as_ptr(), (4096 << order.get()) as usize) };
    bytes.iter().all(|&b| b == byte)
}

#[test]
fn gfp_zero_clears_what_the_last_holder_wrote() {
    let layout = layout(64 * MIB);
    let alloc = with_frames(&layout).unwrap();
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    for order in [Order::ZERO, Order::new(2), Order::new(5)] {
        let p = cpu.alloc_pages(order, Gfp::KERNEL).unwrap();
        fill(&alloc, p, order, 0xa5);
        cpu.free_pages(p, order).unwrap();
        // The hot block comes back first: without __GFP_ZERO it keeps the
        // old bytes, with it they are gone.
        let q = cpu.alloc_pages(order, Gfp::KERNEL).unwrap();
        assert_eq!(q, p, "order {order}: the same block");
        assert!(all(&alloc, q, order, 0xa5), "order {order}: not cleared");
        cpu.free_pages(q, order).unwrap();
        let r = cpu.alloc_pages(order, Gfp::KERNEL | Gfp::ZERO).unwrap();
        assert_eq!(r, p);
        assert!(all(&alloc, r, order, 0), "order {order}: cleared");
        cpu.free_pages(r, order).unwrap();
    }
    let mut out = Vec::new();
    let p = cpu.alloc(Gfp::KERNEL).unwrap();
    fill(&alloc, p, Order::ZERO, 0x11);
    cpu.free(p).unwrap();
    cpu.alloc_bulk_vec(4, Gfp::KERNEL | Gfp::ZERO, &mut out)
        .unwrap();
    assert!(
        out.iter().all(|&q| all(&alloc, q, Order::ZERO, 0)),
        "bulk too"
    );
    for q in out {
        cpu.free(q).unwrap();
    }
}

#[test]
fn without_frames_there_is_no_address() {
    let layout = layout(64 * MIB);
    let alloc = Allocator::<_, Kernel>::new(
        SparseExtreme::new(&layout).unwrap(),
        &layout,
        Options::default(),
    )
    .unwrap();
    let p = alloc
        .alloc_pages(Order::ZERO, Gfp::KERNEL | Gfp::ZERO, NodeId::ZERO, None)
        .unwrap();
    assert!(alloc.page_address(p).is_none());
    let framed = with_frames(&layout).unwrap();
    assert!(
        framed.page_address(Pfn::new(1)).is_none(),
        "outside the memory span"
    );
    assert!(framed.page_address(Pfn::new((16 * MIB) >> 12)).is_some());
}

#[test]
fn hot_add_outside_the_frames_is_refused() {
    let layout = layout(112 * MIB);
    let mut alloc = with_frames(&layout).unwrap();
    let section = 32768;
    let e = alloc
        .hot_add(Pfn::new(8 * section), section, NodeId::ZERO)
        .unwrap_err();
    assert!(matches!(e, MemHotplugError::Frames(_)), "{e}");
}
