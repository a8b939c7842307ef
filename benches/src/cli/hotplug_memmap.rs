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
use serde::Serialize;
use sparsemem::{Layout, PAGE_STRUCT_SIZE, RangeKind};

/// Where a hot-added block's memmap lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemmapPlace {
    /// In the block's own first pfns (memmap_on_memory).
    TheBlock,
    /// Allocated from boot memory.
    BootMemory,
    /// memmap_on_memory was asked for and the gate refuses it.
    Refused,
}

impl MemmapPlace {
    fn text(self) -> &'static str {
        match self {
            MemmapPlace::TheBlock => "the block",
            MemmapPlace::BootMemory => "boot memory",
            MemmapPlace::Refused => "refused",
        }
    }
}

/// One hot-added memory block: where its memmap lives and what it costs
/// (`pfnlab layout --json`'s `hotplug_blocks`), at 64-byte `struct page`s.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HotplugBlock {
    /// The block's first pfn.
    pub start_pfn: u64,
    /// Its first byte.
    pub start: u64,
    /// Pages in the block.
    pub block_pages: u64,
    /// Where its memmap lives.
    pub memmap_in: MemmapPlace,
    /// Pages of memmap the block needs, wherever they live.
    pub memmap_pages: u64,
    /// Of the block's own pfns, how many its memmap takes (never in the
    /// buddy).
    pub pages_lost: u64,
    /// Boot memory pages its memmap takes instead.
    pub boot_memory_pages: u64,
    /// The gate's rule, where it refuses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// Every hot-added block of `layout`, in address order.
pub fn blocks(layout: &Layout) -> Vec<HotplugBlock> {
    let g = layout.geometry();
    let per = g.memory_block_pages();
    let memmap_pages = per * PAGE_STRUCT_SIZE / g.page_size();
    let mut out = Vec::new();
    for (r, first, end) in layout.ranges_of(RangeKind::Hotplug) {
        let gate = r
            .memmap_on_memory
            .then(|| memmap_on_memory_pages(g, Era::V6_18, MemmapOnMemory::On, end - first));
        for pfn in (first.get()..end.get()).step_by(per as usize) {
            let (memmap_in, pages_lost, refused) = match &gate {
                None => (MemmapPlace::BootMemory, 0, None),
                Some(Ok(v)) => (MemmapPlace::TheBlock, *v, None),
                Some(Err(e)) => (MemmapPlace::Refused, 0, Some(e.to_string())),
            };
            out.push(HotplugBlock {
                start_pfn: pfn,
                start: pfn * g.page_size(),
                block_pages: per,
                memmap_in,
                memmap_pages,
                pages_lost,
                boot_memory_pages: if memmap_in == MemmapPlace::BootMemory {
                    memmap_pages
                } else {
                    0
                },
                refused,
            });
        }
    }
    out
}

/// The section, or nothing for a layout without hot-added memory: one
/// line per run of blocks of one range that share their figures.
pub fn report(layout: &Layout) -> String {
    let mut out = String::new();
    let all = blocks(layout);
    if all.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "\nhot-added memory: where each memory block's memmap lives (6.18)\n{:>20} {:>7} {:>14} {:>13} {:>16}",
        "start", "blocks", "memmap in", "pages/block", "pages lost"
    );
    let mut runs: Vec<(&HotplugBlock, u64)> = Vec::new();
    for b in &all {
        match runs.last_mut() {
            Some((first, n))
                if first.memmap_in == b.memmap_in
                    && first.start_pfn + *n * first.block_pages == b.start_pfn =>
            {
                *n += 1;
            }
            _ => runs.push((b, 1)),
        }
    }
    for (b, n) in runs {
        let lost = match (&b.refused, b.memmap_in) {
            (Some(why), _) => why.clone(),
            (None, MemmapPlace::TheBlock) => {
                format!("{} of {}", b.pages_lost * n, b.block_pages * n)
            }
            (None, _) => "0".to_owned(),
        };
        let _ = writeln!(
            out,
            "{:>20} {n:>7} {:>14} {:>13} {lost:>16}",
            format!("{:#x}", b.start),
            b.memmap_in.text(),
            b.memmap_pages,
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

    #[test]
    fn each_block_says_where_its_memmap_lives_and_what_it_costs() {
        let layout = Layout::new(
            Geometry::X86_64,
            vec![
                MemRange::new(0, 1 << 30, RangeKind::Ram, 0),
                MemRange::new(4 << 30, 6 << 30, RangeKind::Hotplug, 0).with_memmap_on_memory(),
                MemRange::new(8 << 30, 8 << 30 | 1 << 28, RangeKind::Hotplug, 0),
            ],
            "test",
        )
        .unwrap();
        let all = blocks(&layout);
        assert_eq!(all.len(), 18);
        let hosted: Vec<_> = all
            .iter()
            .filter(|b| b.memmap_in == MemmapPlace::TheBlock)
            .collect();
        assert_eq!(hosted.len(), 16);
        assert_eq!(hosted.iter().map(|b| b.pages_lost).sum::<u64>(), 8192);
        assert!(hosted.iter().all(|b| b.boot_memory_pages == 0));
        assert_eq!(hosted[1].start_pfn, ((4u64 << 30) >> 12) + 32768);
        let boot = &all[16];
        assert_eq!(
            (
                boot.memmap_in,
                boot.start,
                boot.pages_lost,
                boot.boot_memory_pages
            ),
            (MemmapPlace::BootMemory, 8 << 30, 0, 512)
        );
    }
}
