//! What more than one of buddy's test suites builds on.

use buddy::{Allocator, Kernel};
use sparsemem::{Geometry, Layout, MemRange, RangeKind, SparseExtreme};

/// Pages in a pageblock (order 9).
pub const PAGEBLOCK: u64 = 512;

/// The allocator the compaction and `defrag_mode` suites build.
pub type SmallAlloc = Allocator<SparseExtreme, Kernel>;

/// 16 MiB of RAM from 16 MiB: one ZONE_DMA32 of 4,096 pages, eight
/// pageblocks, whose min watermark is 128 pages.
pub fn zone_16m() -> Layout {
    Layout::new(
        Geometry::X86_64,
        vec![MemRange::new(16 << 20, 32 << 20, RangeKind::Ram, 0)],
        "16m",
    )
    .expect("a valid layout")
}

/// 3 GiB of RAM from 1 MiB, a hole, and 2 GiB from 4 GiB: DMA, DMA32 and
/// Normal, the last of which defers its init past its first section.
pub fn two_zone_layout() -> Layout {
    Layout::new(
        Geometry::X86_64,
        vec![
            MemRange::new(1 << 20, 3 << 30, RangeKind::Ram, 0),
            MemRange::new(4 << 30, 6 << 30, RangeKind::Ram, 0),
        ],
        "two zones",
    )
    .expect("a valid layout")
}
