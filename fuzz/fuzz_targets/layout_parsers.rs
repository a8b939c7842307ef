//! The layout TOML parser and the host-format parsers on arbitrary text:
//! every input gives a layout or an error, never a panic, and every layout
//! that parses keeps the `Layout` invariants and builds a model that agrees
//! with the reference.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sparsemem::layout::{entries_to_layout, parse_firmware_entry, parse_iomem};
use sparsemem::reference::{Reference, Semantics};
use sparsemem::{Layout, MemoryModel, Pfn, RangeKind, SparseExtreme};
use vmemmap::VmemmapTable;

fn check(layout: &Layout) {
    for w in layout.ranges().windows(2) {
        assert!(w[0].end <= w[1].start, "sorted and disjoint");
    }
    let max = layout.geometry().max_phys_addr();
    assert!(
        layout
            .ranges()
            .iter()
            .all(|r| r.start < r.end && r.end <= max)
    );
    // Build a model only for small layouts: the fuzzer must not spend its
    // time mapping gigabytes (the constructors refuse absurd ones anyway).
    if layout.present_pages() > 1 << 20 || layout.section_plan().len() > 64 {
        return;
    }
    let device = layout.has(RangeKind::Device);
    let model = SparseExtreme::new(layout);
    assert_eq!(
        device,
        model.is_err(),
        "a small valid layout builds unless it has device memory"
    );
    compare(
        layout,
        &VmemmapTable::new(layout).expect("a small valid layout builds"),
    );
    if let Ok(model) = model {
        compare(layout, &model);
    }
}

fn compare<M: MemoryModel>(layout: &Layout, model: &M) {
    let reference = Reference::new(layout, Semantics::of_model(model.name()));
    for (_, first, end) in layout.memory_ranges() {
        for pfn in [
            first.get(),
            end.get() - 1,
            end.get(),
            first.get().wrapping_sub(1),
        ] {
            let pfn = Pfn::new(pfn);
            assert_eq!(model.pfn_valid(pfn), reference.pfn_valid(pfn), "{pfn:?}");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    match selector % 3 {
        0 => {
            if let Ok(layout) = Layout::from_toml(&text) {
                check(&layout);
            }
        }
        1 => {
            if let Ok(entries) = parse_iomem(&text) {
                if let Ok(layout) = entries_to_layout(&entries, None, "iomem") {
                    check(&layout);
                }
            }
        }
        _ => {
            let mut parts = text.splitn(3, '\n');
            let (a, b, c) = (
                parts.next().unwrap_or(""),
                parts.next().unwrap_or(""),
                parts.next().unwrap_or(""),
            );
            if let Ok(entry) = parse_firmware_entry(a, b, c) {
                assert!(entry.0 < entry.1 || entry.1 == u64::MAX);
                if let Ok(layout) = entries_to_layout(&[entry], None, "firmware") {
                    check(&layout);
                }
            }
        }
    }
});
