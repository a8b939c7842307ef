//! userfaultfd detectors. The test runs in a process of its own, so no
//! other test's thread or file descriptor disturbs the counts it checks.

use sparsemem::{Layout, MemoryModel, Pfn};
use vmemmap::{VmemmapTable, VmemmapUffd, VmemmapUffdSigbus};

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

#[test]
fn uffd_holes_become_loads_drop_joins_and_sigbus_agrees() -> Result<(), String> {
    if let Some(outcome) =
        sparsemem::testing::run_alone("uffd::uffd_holes_become_loads_drop_joins_and_sigbus_agrees")
    {
        return outcome;
    }
    let layout = Layout::preset("ia64-holes").unwrap();
    let table = VmemmapTable::new(&layout).unwrap();
    let span = layout.memory_span().1.get() + 65536;
    let pfns: Vec<Pfn> = (0..50_000u64)
        .map(|i| Pfn::new(i.wrapping_mul(0x9e37_79b9_7f4a) % span))
        .collect();
    let (threads, fds) = (count("/proc/self/task"), count("/proc/self/fd"));
    {
        let model = match VmemmapUffd::new(&layout) {
            Ok(m) => m,
            Err(e) => panic!("userfaultfd must work as root here: {e}"),
        };
        assert!(model.detector().thread_alive());
        assert_eq!(count("/proc/self/task"), threads + 1, "one handler thread");
        for &p in &pfns {
            assert_eq!(model.pfn_valid(p), table.pfn_valid(p), "{p:?}");
        }
        let faults = model.detector().faults();
        assert!(faults > 0, "holes were resolved by the handler thread");
        for &p in &pfns {
            assert_eq!(model.pfn_valid(p), table.pfn_valid(p), "{p:?}");
        }
        assert_eq!(
            model.detector().faults(),
            faults,
            "after first touch, probes are plain loads"
        );
    }
    assert_eq!(
        count("/proc/self/task"),
        threads,
        "drop joined the handler thread"
    );
    assert_eq!(
        count("/proc/self/fd"),
        fds,
        "drop closed the userfaultfd and eventfd"
    );

    let before = vmemmap::fixup::fixup_count();
    let sigbus = VmemmapUffdSigbus::new(&layout).unwrap();
    for &p in &pfns {
        assert_eq!(sigbus.pfn_valid(p), table.pfn_valid(p), "{p:?}");
    }
    assert!(
        vmemmap::fixup::fixup_count() > before,
        "SIGBUS faults were fixed up"
    );
    let hole = Pfn::new((3u64 << 30) >> 14);
    assert!(
        !sigbus.pfn_valid(hole) && !sigbus.pfn_valid(hole),
        "a SIGBUS hole stays a hole"
    );
    Ok(())
}
