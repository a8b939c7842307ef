//! The fault probe on a small physical address space (36 bits, a 1 GiB
//! memmap reservation): what runs under user-mode QEMU, whose page tracking
//! cannot hold the multi-TiB reservations of the preset geometries (the
//! other vmemmap tests skip there, saying so). Covers the probe, its
//! handler and fixup count, hotplug, and probes on several threads.

use sparsemem::reference::{Reference, Semantics};
use sparsemem::testing::{check_model, sampled_pfns};
use sparsemem::{Geometry, Layout, MemRange, MemoryModel, NodeId, Pfn, RangeKind};
use vmemmap::{VmemmapProbe, VmemmapTable, fixup};

/// x86_64-like pages and sections, 64 GiB of physical space.
fn small() -> Layout {
    let g = Geometry::new(12, 27, 36).unwrap();
    Layout::new(
        g,
        vec![
            MemRange::new(0, 1 << 30, RangeKind::Ram, 0),
            MemRange::new(3 << 30, 4 << 30, RangeKind::Ram, 0),
            MemRange::new(8 << 30, (8 << 30) + (6 << 20), RangeKind::Device, 0),
        ],
        "small space",
    )
    .unwrap()
}

#[test]
fn the_probe_matches_the_reference_and_counts_its_faults() {
    let layout = small();
    let probe = VmemmapProbe::new(&layout).unwrap();
    assert_eq!(probe.memmap_bytes().reserved, 1 << 30);
    let before = fixup::fixup_count();
    let reference = Reference::new(&layout, Semantics::Vmemmap);
    check_model(&probe, &reference, &sampled_pfns(&layout, 2048)).unwrap();
    assert!(
        fixup::fixup_count() > before,
        "holes were probed by faulting"
    );
    assert!(probe.pfn_valid(Pfn::new(0)));
    assert!(!probe.pfn_valid(Pfn::new((2u64 << 30) >> 12)));
}

#[test]
fn device_memory_comes_and_goes_under_the_probe() {
    let layout = small();
    let mut probe = VmemmapProbe::new(&layout).unwrap();
    let at = Pfn::new((16u64 << 30) >> 12);
    assert!(!probe.pfn_valid(at));
    probe.add_device(at, 512, NodeId::ZERO).unwrap();
    assert!(probe.pfn_valid(at) && probe.pfn_to_page(at).unwrap().is_zone_device());
    probe.remove_device(at, 512).unwrap();
    assert!(
        !probe.pfn_valid(at),
        "the probe faults on the retired memmap again"
    );
}

#[test]
fn probes_from_several_threads_are_exact() {
    let layout = small();
    let probe = VmemmapProbe::new(&layout).unwrap();
    let table = VmemmapTable::new(&layout).unwrap();
    let span = (10u64 << 30) >> 12;
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let (probe, table) = (&probe, &table);
            s.spawn(move || {
                fixup::prepare_thread().unwrap();
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ t;
                for _ in 0..2_000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let pfn = Pfn::new(x % span);
                    assert_eq!(probe.pfn_valid(pfn), table.pfn_valid(pfn), "{pfn:?}");
                }
            });
        }
    });
}
