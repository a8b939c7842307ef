//! Generated layouts for the fuzz targets: up to eight ranges inside a
//! window of 4 sections at the bottom, middle or top of the physical
//! space, on any geometry, with edges at 2 MiB (hotplug ranges snapped to
//! whole memory blocks), RAM jittered off page boundaries, and device
//! memory. Small enough that every model builds in milliseconds.

use arbitrary::Arbitrary;
use sparsemem::{BuildError, Geometry, Layout, MemRange, RangeKind};

#[derive(Arbitrary, Debug)]
pub struct FuzzRange {
    start_sub: u16,
    len_sub: u8,
    kind: u8,
    jitter_kib: u16,
    node: u8,
}

#[derive(Arbitrary, Debug)]
pub struct FuzzLayout {
    geometry: u8,
    place: u8,
    ranges: Vec<FuzzRange>,
}

impl FuzzLayout {
    /// The layout, or `None` when `Layout::new` refuses it (which is itself
    /// exercised: it must refuse with an error, never panic).
    pub fn build(&self) -> Option<Layout> {
        let g = Geometry::PRESETS[usize::from(self.geometry) % Geometry::PRESETS.len()];
        let window_sections = 4u64;
        let base_section = match self.place % 3 {
            0 => 0,
            1 => g.nr_mem_sections() - window_sections,
            _ => g.nr_mem_sections() / 3,
        };
        let base = base_section << g.section_size_bits();
        let limit = window_sections << g.section_size_bits();
        let ranges: Vec<MemRange> = self
            .ranges
            .iter()
            .take(8)
            .map(|r| {
                let start = (u64::from(r.start_sub) << 21) % limit;
                let end = (start + (u64::from(r.len_sub).max(1) << 21)).min(limit);
                let jitter = u64::from(r.jitter_kib % 1024) << 10;
                let block = 1u64 << g.section_size_bits();
                // A jitter of 1023 KiB keeps a hotplug range as it is, so
                // misaligned ones are refused by `Layout::new` sometimes.
                let snap = r.jitter_kib % 1024 != 1023;
                let (kind, start, end) = match r.kind % 5 {
                    0 | 1 => (RangeKind::Ram, start + jitter, end),
                    2 if snap => (
                        RangeKind::Hotplug,
                        start / block * block,
                        end.next_multiple_of(block).min(limit),
                    ),
                    2 => (RangeKind::Hotplug, start, end),
                    3 => (RangeKind::Device, start, end),
                    _ => (RangeKind::Reserved, start, end.saturating_sub(jitter)),
                };
                MemRange::new(base + start, base + end, kind, u16::from(r.node % 4))
            })
            .collect();
        Layout::new(g, ranges, "fuzz").ok()
    }
}

/// Unwraps a model build that must succeed unless the layout holds what the
/// model cannot (hotplug under FLATMEM, device memory without VMEMMAP), in
/// which case it must be refused with `BuildError::CannotHold`.
pub fn built<M>(built: Result<M, BuildError>, layout: &Layout, flat: bool) -> Option<M> {
    let cannot = layout.has(RangeKind::Device) || (flat && layout.has(RangeKind::Hotplug));
    match built {
        Ok(m) => {
            assert!(!cannot, "a model built a layout it cannot hold");
            Some(m)
        }
        Err(BuildError::CannotHold { .. }) => {
            assert!(cannot, "refused a layout it can hold");
            None
        }
        Err(e) => panic!("unexpected build error: {e}"),
    }
}
