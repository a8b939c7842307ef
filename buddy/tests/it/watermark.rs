//! Watermarks on the allocation path (`zone_watermark_fast` in
//! `get_page_from_freelist`), `lowmem_reserve`, the `NR_FREE_PAGES` counter
//! with its per-CPU deltas, and invalid GFP masks.

use buddy::{Allocator, Gfp, GfpError, Kernel, Options, RequestError, ZoneType};
use sparsemem::{Geometry, Layout, MemRange, NodeId, Order, Pfn, RangeKind, SparseExtreme};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn allocator(ranges: &[(u64, u64)]) -> Allocator<SparseExtreme, Kernel> {
    let ranges = ranges
        .iter()
        .map(|&(a, b)| MemRange::new(a, b, RangeKind::Ram, 0))
        .collect();
    let layout = Layout::new(Geometry::X86_64, ranges, "watermarks").unwrap();
    let options = Options {
        cpus: Some(2),
        ..Options::default()
    };
    Allocator::new(SparseExtreme::new(&layout).unwrap(), &layout, options).unwrap()
}

/// Takes order-0 pages on the zone path until refused; returns them.
fn drain(alloc: &Allocator<SparseExtreme, Kernel>, gfp: Gfp) -> Vec<Pfn> {
    let mut held = Vec::new();
    loop {
        match alloc.alloc_pages(Order::ZERO, gfp, NodeId::ZERO, None) {
            Ok(p) => held.push(p),
            Err(RequestError::NoMemory { .. }) => return held,
            Err(e) => panic!("{e}"),
        }
    }
}

/// GFP_KERNEL stops at `min` (the slow path's mark), GFP_ATOMIC digs into
/// the reserve (`min` halved for `__GFP_HIGH`, less a quarter for not
/// blocking), `__GFP_MEMALLOC` takes the rest; nothing is lost.
#[test]
fn each_request_stops_at_its_own_watermark() {
    let alloc = allocator(&[(4 * GIB, 4 * GIB + 512 * MIB)]);
    let zone = &alloc.zones()[0];
    assert_eq!(zone.kind, ZoneType::Normal);
    let marks = zone.watermarks();
    assert!(0 < marks.min && marks.min < marks.low && marks.low < marks.high);
    let mut held = drain(&alloc, Gfp::KERNEL);
    assert_eq!(zone.nr_free_pages(), marks.min, "GFP_KERNEL keeps min free");
    assert_eq!(zone.nr_free_pages_state(), marks.min);
    held.extend(drain(&alloc, Gfp::ATOMIC));
    let mut atomic_min = marks.min - marks.min / 2;
    atomic_min -= atomic_min / 4;
    assert_eq!(zone.nr_free_pages(), atomic_min, "GFP_ATOMIC's reserve");
    assert!(matches!(
        alloc.alloc_pages(Order::new(3), Gfp::ATOMIC, NodeId::ZERO, None),
        Err(RequestError::NoMemory { .. })
    ));
    held.extend(drain(&alloc, Gfp::KERNEL | Gfp::MEMALLOC));
    assert_eq!(zone.nr_free_pages(), 0, "__GFP_MEMALLOC ignores the marks");
    assert!(
        drain(&alloc, Gfp::ATOMIC | Gfp::MEMALLOC | Gfp::NOMEMALLOC).is_empty(),
        "__GFP_NOMEMALLOC wins"
    );
    assert_eq!(held.len() as u64, zone.managed_pages());
    for p in held {
        alloc.free_pages(p, Order::ZERO).unwrap();
    }
    assert_eq!(zone.nr_free_pages(), zone.managed_pages());
    assert_eq!(zone.nr_free_pages_state(), zone.managed_pages());
}

/// A lower zone keeps `lowmem_reserve` back from requests that could have
/// used a higher zone, and not from requests limited to it.
#[test]
fn lowmem_reserve_protects_dma32_from_normal_requests() {
    // A GiB each side of 4 GiB: DMA32 and Normal, both drained below.
    let alloc = allocator(&[(3 * GIB, 4 * GIB), (4 * GIB, 5 * GIB)]);
    let dma32 = alloc
        .zones()
        .iter()
        .find(|z| z.kind == ZoneType::Dma32)
        .unwrap();
    let normal = alloc
        .zones()
        .iter()
        .find(|z| z.kind == ZoneType::Normal)
        .unwrap();
    let reserve = dma32.lowmem_reserve();
    assert_eq!(
        reserve[ZoneType::Normal as usize],
        normal.managed_pages() / 256
    );
    assert_eq!(reserve[ZoneType::Dma32 as usize], 0);
    let mut held = drain(&alloc, Gfp::KERNEL);
    assert_eq!(normal.nr_free_pages(), normal.watermarks().min);
    assert_eq!(
        dma32.nr_free_pages(),
        dma32.watermarks().min + reserve[ZoneType::Normal as usize],
        "GFP_KERNEL leaves DMA32 its reserve"
    );
    let more = drain(&alloc, Gfp::KERNEL | Gfp::DMA32);
    assert_eq!(
        more.len() as u64,
        reserve[ZoneType::Normal as usize],
        "a DMA32 request may use it"
    );
    held.extend(more);
    for p in held {
        alloc.free_pages(p, Order::ZERO).unwrap();
    }
}

/// Through a per-CPU handle the counter lags the free lists by at most the
/// zone's stat threshold, and is exact again once the handle is gone.
#[test]
fn per_cpu_deltas_fold_at_the_threshold() {
    let alloc = allocator(&[(4 * GIB, 4 * GIB + 256 * MIB)]);
    let zone = &alloc.zones()[0];
    let threshold = buddy::stat_threshold(zone.managed_pages(), 12, 2);
    assert!(threshold > 0);
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let mut held = Vec::new();
    for i in 0..5000u64 {
        if i % 3 == 2 {
            let p = held.swap_remove((i as usize * 7) % held.len());
            cpu.free(p).unwrap();
        } else {
            held.push(cpu.alloc(Gfp::KERNEL).unwrap());
        }
        let lag = zone.nr_free_pages_state().abs_diff(zone.nr_free_pages());
        assert!(lag as i64 <= threshold, "lag {lag} > threshold {threshold}");
    }
    for p in held {
        cpu.free(p).unwrap();
    }
    drop(cpu);
    assert_eq!(zone.nr_free_pages_state(), zone.nr_free_pages());
    assert_eq!(zone.nr_free_pages(), zone.managed_pages());
}

/// Invalid masks are refused on every path before anything changes.
#[test]
fn invalid_gfp_masks_are_refused() {
    let alloc = allocator(&[(16 * MIB, 512 * MIB)]);
    let free = alloc.free_pages_total();
    let two_zones = Gfp::KERNEL | Gfp::DMA | Gfp::DMA32;
    let both = Gfp::KERNEL | Gfp::MOVABLE | Gfp::RECLAIMABLE;
    for gfp in [two_zones, both] {
        let e = alloc
            .alloc_pages(Order::new(2), gfp, NodeId::ZERO, None)
            .unwrap_err();
        assert!(matches!(e, RequestError::Gfp(_)), "{e}");
        let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
        assert!(matches!(cpu.alloc(gfp), Err(RequestError::Gfp(_))));
        let mut out = Vec::new();
        assert!(matches!(
            cpu.alloc_bulk_vec(8, gfp, &mut out),
            Err(RequestError::Gfp(_))
        ));
        assert!(out.is_empty());
    }
    assert_eq!(
        alloc
            .alloc_pages(Order::ZERO, two_zones, NodeId::ZERO, None)
            .unwrap_err()
            .to_string(),
        GfpError::ZoneModifiers(two_zones).to_string()
    );
    assert!(
        GfpError::ZoneModifiers(two_zones)
            .to_string()
            .contains("GFP_KERNEL|GFP_DMA|GFP_DMA32")
    );
    assert_eq!(alloc.free_pages_total(), free);
}

/// With the watermark mechanism off (`Mechanisms`, as `bench breakdown`
/// runs it) a GFP_KERNEL request takes the last page; with page
/// preparation off a `__GFP_COMP` block is left plain and a mapped page is
/// not checked on free.
#[test]
fn mechanisms_turn_off_one_at_a_time() {
    use buddy::Mechanisms;
    let layout = Layout::new(
        Geometry::X86_64,
        vec![MemRange::new(
            4 * GIB,
            4 * GIB + 128 * MIB,
            RangeKind::Ram,
            0,
        )],
        "one zone",
    )
    .unwrap();
    let options = Options {
        mechanisms: Mechanisms::BOOKKEEPING,
        ..Options::default()
    };
    let alloc = Allocator::<_, Kernel>::new(SparseExtreme::new(&layout).unwrap(), &layout, options)
        .unwrap();
    let model = alloc.model();
    let big = alloc
        .alloc_pages(Order::new(3), Gfp::KERNEL | Gfp::COMP, NodeId::ZERO, None)
        .unwrap();
    let head = sparsemem::MemoryModel::pfn_to_page(model, big).unwrap();
    assert!(!head.test(sparsemem::PageFlag::Head), "no compound prep");
    head.set_mapping(0xbad);
    alloc.free_pages(big, Order::new(3)).unwrap();
    head.set_mapping(0);
    let held = drain(&alloc, Gfp::KERNEL);
    assert_eq!(
        held.len() as u64,
        alloc.managed_pages_total(),
        "no watermark"
    );
    for p in held {
        alloc.free_pages(p, Order::ZERO).unwrap();
    }
}
