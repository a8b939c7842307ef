//! `pfnlab layout`'s memmap_on_memory section: for each hot-added range,
//! where each memory block's memmap lives and what it costs.
//!
//! A block of a `memmap_on_memory = true` range keeps its memmap in its
//! own first pfns (6.18's gate, `memory_hotplug.memmap_on_memory=y`):
//! those pfns never reach the buddy. Any other block's memmap is
//! allocated from boot memory. The figures are the gate's, so they hold
//! for every VMEMMAP model; the other models refuse the option.

use std::fmt::Write as _;

use buddy::{Era, MemmapOnMemory, memmap_on_memory_pages};
use sparsemem::{Layout, PAGE_STRUCT_SIZE, RangeKind};

/// The section, or nothing for a layout without hot-added memory.
pub fn report(layout: &Layout) -> String {
    let g = layout.geometry();
    let per = g.memory_block_pages();
    let mut out = String::new();
    let ranges: Vec<_> = layout.ranges_of(RangeKind::Hotplug).collect();
    if ranges.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "\nhot-added memory: where each memory block's memmap lives (6.18)\n{:>20} {:>7} {:>14} {:>13} {:>16}",
        "start", "blocks", "memmap in", "pages/block", "pages lost"
    );
    let memmap_pages = per * PAGE_STRUCT_SIZE / g.page_size();
    for (r, first, end) in ranges {
        let (blocks, nr_pages) = ((end - first) / per, end - first);
        let (place, lost) = if r.memmap_on_memory {
            match memmap_on_memory_pages(g, Era::V6_18, MemmapOnMemory::On, nr_pages) {
                Ok(v) => ("the block", format!("{} of {nr_pages}", v * blocks)),
                Err(e) => ("refused", e.to_string()),
            }
        } else {
            ("boot memory", "0".to_owned())
        };
        let _ = writeln!(
            out,
            "{:>20} {blocks:>7} {place:>14} {memmap_pages:>13} {lost:>16}",
            format!("{:#x}", r.start.get()),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sparsemem::{Geometry, MemRange};

    #[test]
    fn a_2_gib_hot_add_loses_8192_of_524288_pages() {
        let layout = Layout::new(
            Geometry::X86_64,
            vec![
                MemRange::new(0, 1 << 30, RangeKind::Ram, 0),
                MemRange::new(4 << 30, 6 << 30, RangeKind::Hotplug, 0).with_memmap_on_memory(),
                MemRange::new(8 << 30, 9 << 30, RangeKind::Hotplug, 0),
            ],
            "test",
        )
        .unwrap();
        let text = report(&layout);
        let rows: Vec<&str> = text.lines().skip(3).collect();
        assert!(
            rows[0].contains(" 16 ") && rows[0].contains("the block"),
            "{text}"
        );
        assert!(rows[0].ends_with("8192 of 524288"), "{text}");
        assert!(
            rows[1].contains("boot memory") && rows[1].ends_with(" 0"),
            "{text}"
        );
    }
}
