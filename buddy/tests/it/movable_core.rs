//! ZONE_MOVABLE at boot from `kernelcore=` and `movablecore=`
//! (`find_zone_movable_pfns_for_nodes`), through the allocator.

use buddy::{Allocator, CoreSize, Era, Gfp, InitError, Kernel, MovableCore, Options, ZoneType};
use sparsemem::{Layout, NodeId, Order, SparseExtreme};

/// Node 0: 4 KiB to 3 GiB (DMA, DMA32); node 1: 4 to 8 GiB (Normal).
const TWO_NODES: &str = r#"
[[range]]
start = 0x1000
end = 0xc0000000
kind = "ram"
node = 0

[[range]]
start = 0x100000000
end = 0x200000000
kind = "ram"
node = 1
"#;

const GIB_PAGES: u64 = 1 << 18;

fn with(
    layout: &Layout,
    movable_core: MovableCore,
    era: Era,
) -> Result<Allocator<SparseExtreme, Kernel>, InitError> {
    let options = Options {
        movable_core,
        ..Options::for_era(era)
    };
    Allocator::new(SparseExtreme::new(layout).unwrap(), layout, options)
}

/// `movablecore=2G` on two nodes: node 0 lies wholly below the Normal
/// zone, so it is all kernelcore, and node 1 gives the rest of the
/// kernelcore from its bottom: ZONE_MOVABLE is node 1's top 2 GiB.
/// Movable allocations come from it, kernel allocations never do.
#[test]
fn movablecore_puts_the_top_of_the_nodes_in_zone_movable() {
    let layout = Layout::from_toml(TWO_NODES).unwrap();
    let node1 = NodeId::try_new(1).unwrap();
    let m = MovableCore {
        kernelcore: None,
        movablecore: Some(CoreSize::Bytes(2 << 30)),
    };
    let alloc = with(&layout, m, Era::V6_1).unwrap();
    let spans: Vec<(u16, ZoneType, u64, u64)> = alloc
        .zones()
        .iter()
        .filter(|z| z.managed_pages() > 0)
        .map(|z| (z.node.get(), z.kind, z.start_pfn().get(), z.end_pfn().get()))
        .collect();
    assert!(
        spans.contains(&(1, ZoneType::Normal, 4 * GIB_PAGES, 6 * GIB_PAGES))
            && spans.contains(&(1, ZoneType::Movable, 6 * GIB_PAGES, 8 * GIB_PAGES)),
        "{spans:?}"
    );
    assert!(
        !spans.iter().any(|s| s.0 == 0 && s.1 == ZoneType::Movable),
        "{spans:?}"
    );
    let movable = alloc
        .alloc_pages(Order::ZERO, Gfp::HIGHUSER_MOVABLE, node1, None)
        .unwrap();
    assert!(movable.get() >= 6 * GIB_PAGES, "{movable:?}");
    let kernel = alloc
        .alloc_pages(Order::ZERO, Gfp::KERNEL, node1, None)
        .unwrap();
    assert!(kernel.get() < 6 * GIB_PAGES, "{kernel:?}");

    // Without the parameters, node 1 is one Normal zone.
    let plain = with(&layout, MovableCore::default(), Era::V6_1).unwrap();
    assert!(
        !plain
            .zones()
            .iter()
            .any(|z| z.kind == ZoneType::Movable && z.managed_pages() > 0)
    );
}

/// An era without the parameters refuses them rather than ignore them.
#[test]
fn eras_before_the_parameters_refuse_them() {
    let layout = Layout::from_toml(TWO_NODES).unwrap();
    let size = MovableCore::from_cmdline("movablecore=1G").0;
    let err = with(&layout, size, Era::V2_6_9).err().expect("refused");
    assert!(err.to_string().contains("2.6.23"), "{err}");
    let percent = MovableCore::from_cmdline("kernelcore=50%").0;
    let err = with(&layout, percent, Era::V2_6_23).err().expect("refused");
    assert!(err.to_string().contains("4.17"), "{err}");
    assert!(with(&layout, percent, Era::V5_13).is_ok());
}
