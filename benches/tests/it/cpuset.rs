//! The cpuset experiment's walks, counted on the seed's shape of layout
//! (`numa=fake=64`, the cpuset on nodes 21 to 63): each era's
//! `__alloc_pages` asks the questions its code asks, serves the request
//! from the cpuset, and the zonelist cache forgets full zones after a
//! second.

use buddy::{Allocator, Kernel, NodeMask, Options};
use pfnlab::experiments::cpuset::{CpusetWalk, Cpusets, Walker};
use sparsemem::{Layout, NodeId, SparseExtreme};

/// `numa=fake=64` on 512 MiB instead of the preset's 3 GiB, as a layout
/// file: the walker fills the nodes outside the cpuset page by page, and
/// the counts depend on the number of nodes and zones, not on their size.
pub(crate) fn fake_numa_64_toml() -> String {
    (0..64u64)
        .map(|n| {
            format!(
                "[[range]]\nstart = {:#x}\nend = {:#x}\nkind = \"ram\"\nnode = {n}\n",
                n << 23,
                (n + 1) << 23
            )
        })
        .collect()
}

fn walk_counts(walk: CpusetWalk) -> (pfnlab::experiments::cpuset::WalkCounts, usize, usize) {
    let layout = Layout::from_toml(&fake_numa_64_toml()).unwrap();
    let nodes = layout.nodes();
    let allowed = NodeMask::of(nodes[21..].iter().copied());
    let cpusets = Cpusets::new(&nodes, &allowed);
    let alloc = Allocator::<_, Kernel>::new(
        SparseExtreme::new(&layout).unwrap(),
        &layout,
        Options::for_era(walk.era()),
    )
    .unwrap();
    let zonelist = alloc.zonelist(NodeId::ZERO, buddy::Gfp::HIGHUSER).unwrap();
    let outside = zonelist
        .iter()
        .take_while(|&&z| !allowed.test(alloc.zone(z).unwrap().node))
        .count();
    let len = zonelist.len();
    let mut walker = Walker::new(walk, &alloc, &cpusets, NodeId::ZERO).unwrap();
    for _ in 0..10 {
        let pfn = walker.alloc_page().expect("served");
        let node = alloc
            .zones()
            .iter()
            .find(|z| z.spans(pfn))
            .map(|z| z.node)
            .unwrap();
        if walk != CpusetWalk::Unrestricted {
            assert!(
                allowed.test(node),
                "{walk:?}: page from node {node}, outside the cpuset"
            );
        }
        walker.free_page(pfn).unwrap();
    }
    (walker.counts(), outside, len)
}

#[test]
fn each_era_asks_what_its_code_asks() {
    let (c, outside, len) = walk_counts(CpusetWalk::V2_6_18);
    assert_eq!(c.allocs, 10);
    // Pass 2 takes callback_mutex once per zone outside the cpuset before
    // the first allowed one.
    assert_eq!(c.mutex_acquisitions, 10 * outside as u64);
    // Pass 1 asks about every zone, pass 2 up to the first allowed one,
    // and wakeup_kswapd about every zone below its low mark.
    assert!(c.cpuset_checks > 10 * len as u64, "{c:?}");

    let (t, ..) = walk_counts(CpusetWalk::V2_6_18Table);
    assert_eq!(
        (t.cpuset_checks, t.mutex_acquisitions),
        (c.cpuset_checks, 0)
    );

    // The zonelist cache: the full zones of pass 1 make pass 2's cached
    // scan empty, so both passes scan again without it, and the uncached
    // rescan of pass 2 takes the mutex as 2.6.18 did, plus once for the
    // first zone before the cache is set up.
    let (z, ..) = walk_counts(CpusetWalk::V2_6_19);
    assert_eq!(z.zlc_rescans, 20);
    assert_eq!(z.mutex_acquisitions, 10 * (outside as u64 + 1));
    assert!(z.zones_skipped > 0);

    // Today: zones outside the nodemask are skipped by the iterator.
    let (n, ..) = walk_counts(CpusetWalk::V6_18);
    assert_eq!(n.mutex_acquisitions, 0);
    // Pass 1, the kswapd wakeups and pass 2 each skip them.
    assert_eq!(n.zones_skipped, 10 * 3 * outside as u64, "{n:?}");

    let (u, ..) = walk_counts(CpusetWalk::Unrestricted);
    assert_eq!((u.cpuset_checks, u.watermark_checks), (0, 10));
}
