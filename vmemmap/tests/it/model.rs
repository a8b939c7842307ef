//! Behaviour of the vmemmap models beyond pfn_valid: the 52-bit span,
//! hotplug residency, and the fault handler's
//! refusal to swallow faults that are not a probe's.

use std::os::unix::process::ExitStatusExt;

use sparsemem::{Geometry, HotplugError, Layout, MemRange, MemoryModel, NodeId, Pfn, RangeKind};
use vmemmap::{VmemmapOptions, VmemmapProbe, VmemmapTable};

#[test]
fn sparse_52bit_span_reserves_64tib_and_stays_proportional() {
    let layout = Layout::preset("sparse-52bit").unwrap();
    let model = VmemmapProbe::new(&layout).unwrap();
    let b = model.memmap_bytes();
    assert_eq!(b.reserved, 64 << 40, "2^40 descriptors of 64 bytes");
    assert!(
        b.resident <= 4 * (16 << 20) + (4 << 20),
        "resident {} for 4 GiB present",
        b.resident
    );
    assert!(b.resident >= 4 * (16 << 20));
    let top = Geometry::X86_64_LA57.max_pfn().get();
    assert!(model.pfn_valid(Pfn::new(top - 1)));
    assert!(!model.pfn_valid(Pfn::new(top)));
    assert!(!model.pfn_valid(Pfn::new(top / 4 * 3)));
}

#[test]
fn hot_add_then_remove_probes_and_gives_memory_back() {
    let layout = Layout::preset("x86-pci-hole").unwrap();
    for thp in [false, true] {
        let mut model = VmemmapProbe::with_options(
            &layout,
            VmemmapOptions {
                thp,
                ..VmemmapOptions::default()
            },
        )
        .unwrap();
        let base = (64u64 << 30) >> 12;
        let before = model.memmap_bytes().resident;
        assert!(!model.pfn_valid(Pfn::new(base)));
        // Device memory comes and goes per subsection.
        model
            .add_device(Pfn::new(base), 32768 * 2, NodeId::ZERO)
            .unwrap();
        assert!(model.pfn_valid(Pfn::new(base)) && model.pfn_valid(Pfn::new(base + 65535)));
        assert!(model.pfn_to_page(Pfn::new(base)).unwrap().is_zone_device());
        assert!(model.pfn_to_online_page(Pfn::new(base)).is_none());
        let added = model.memmap_bytes().resident;
        assert!(
            added >= before + (4 << 20),
            "thp={thp}: {before} -> {added}"
        );
        assert!(matches!(
            model.hot_remove(Pfn::new(base), 32768),
            Err(HotplugError::Device {
                is_device: true,
                ..
            })
        ));
        model.remove_device(Pfn::new(base + 512), 512).unwrap();
        assert!(!model.pfn_valid(Pfn::new(base + 512)) && model.pfn_valid(Pfn::new(base + 1024)));
        model.remove_device(Pfn::new(base), 512).unwrap();
        model
            .remove_device(Pfn::new(base + 1024), 65536 - 1024)
            .unwrap();
        assert!(!model.pfn_valid(Pfn::new(base + 1024)));
        // Ordinary memory comes and goes per memory block.
        model.hot_add(Pfn::new(base), 32768).unwrap();
        assert!(model.pfn_valid(Pfn::new(base + 32767)));
        assert!(!model.pfn_to_page(Pfn::new(base)).unwrap().is_zone_device());
        assert!(matches!(
            model.hot_remove(Pfn::new(base), 512),
            Err(HotplugError::Misaligned { .. })
        ));
        model.hot_remove(Pfn::new(base), 32768).unwrap();
        let after = model.memmap_bytes().resident;
        assert!(
            after <= before + (64 << 10),
            "thp={thp}: resident fell back: {before} -> {added} -> {after}"
        );
    }
}

#[test]
fn sub_page_memmap_holes_are_exact_on_arm64_64k() {
    // 64 KiB pages: a 2 MiB subsection is 32 pages, 2 KiB of memmap, so a
    // present and an absent subsection share one 4 KiB host page.
    let layout = Layout::new(
        Geometry::ARM64_64K,
        vec![
            MemRange::new(0, 1 << 30, RangeKind::Ram, 0),
            MemRange::new(4 << 30, (4 << 30) + (2 << 20), RangeKind::Device, 0),
        ],
        "test",
    )
    .unwrap();
    let model = VmemmapProbe::new(&layout).unwrap();
    let first = (4u64 << 30) >> 16;
    assert!(model.pfn_valid(Pfn::new(first + 31)));
    assert!(
        !model.pfn_valid(Pfn::new(first + 32)),
        "same host page, absent subsection"
    );
    assert!(!model.pfn_valid(Pfn::new(first - 1)));
}

/// Runs this test binary's `child_entry` in a child process with `mode`.
fn run_child(mode: &str) -> std::process::Output {
    sparsemem::testing::run_child("model::child_entry", "PFNLAB_CHILD_MODE", mode).unwrap()
}

/// The child side of the fault tests; does nothing in a normal run.
#[test]
fn child_entry() {
    let Ok(mode) = std::env::var("PFNLAB_CHILD_MODE") else {
        return;
    };
    let layout = Layout::preset("x86-pci-hole").unwrap();
    let model = VmemmapProbe::new(&layout).unwrap();
    assert!(
        !model.pfn_valid(Pfn::new(1 << 30)),
        "probe handler installed and working"
    );
    match mode.as_str() {
        "null-write" => {
            // SAFETY: deliberately invalid, in a child process: a genuine bug.
            unsafe { std::ptr::write_volatile(std::hint::black_box(8usize) as *mut u8, 1) };
        }
        "hole-read" => {
            // A plain (non-probe) load of a hole in the reservation.
            let hole = model.vmemmap_base().wrapping_add(1 << 30).cast::<u8>();
            // SAFETY: deliberately faulting, in a child process.
            unsafe { std::ptr::read_volatile(std::hint::black_box(hole)) };
        }
        _ => return,
    }
    std::process::exit(0);
}

#[test]
fn a_fault_outside_any_probe_still_kills_with_sigsegv() {
    for mode in ["null-write", "hole-read"] {
        let out = run_child(mode);
        // Under AddressSanitizer the handler installed before ours is ASan's,
        // which reports the SEGV and exits 1: still not swallowed.
        let asan = out.status.code() == Some(1)
            && String::from_utf8_lossy(&out.stderr).contains("AddressSanitizer: SEGV");
        assert!(
            out.status.signal() == Some(libc::SIGSEGV) || asan,
            "{mode}: {:?}",
            out.status
        );
    }
}

#[test]
fn building_64gib_of_present_memory_is_fast() {
    let layout = Layout::new(
        Geometry::X86_64,
        vec![MemRange::new(0, 64 << 30, RangeKind::Ram, 0)],
        "64g",
    )
    .unwrap();
    let t = std::time::Instant::now();
    let model = VmemmapTable::new(&layout).unwrap();
    let elapsed = t.elapsed();
    assert!(model.pfn_valid(Pfn::new((64 << 18) - 1)));
    // Not a performance target (that is in the benches), a sanity bound.
    assert!(elapsed.as_secs() < 20, "{elapsed:?}");
    println!("built 64 GiB vmemmap in {elapsed:?}");
}

/// Regression: with 64 KiB pages two subsections share one host page of
/// memmap; removing both in one call must zero both before giving the page
/// back (it once zeroed the second after the page was gone: SIGSEGV).
#[test]
fn removing_subsections_that_share_a_host_page_in_one_call() {
    let layout = Layout::new(
        Geometry::ARM64_64K,
        vec![MemRange::new(0, 1 << 29, RangeKind::Ram, 0)],
        "test",
    )
    .unwrap();
    let mut model = VmemmapProbe::new(&layout).unwrap();
    let base = (8u64 << 30) >> 16;
    let before = model.memmap_bytes().resident;
    model.add_device(Pfn::new(base), 64, NodeId::ZERO).unwrap();
    assert!(model.pfn_valid(Pfn::new(base + 63)));
    model.remove_device(Pfn::new(base), 64).unwrap();
    assert!(!model.pfn_valid(Pfn::new(base)) && !model.pfn_valid(Pfn::new(base + 33)));
    assert_eq!(model.memmap_bytes().resident, before);
    model
        .add_device(Pfn::new(base + 32), 32, NodeId::ZERO)
        .unwrap();
    assert!(model.pfn_valid(Pfn::new(base + 32)) && !model.pfn_valid(Pfn::new(base + 31)));
}
