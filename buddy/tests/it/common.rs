//! What more than one of buddy's test suites builds on.

use sparsemem::{Geometry, Layout, MemRange, RangeKind};

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
