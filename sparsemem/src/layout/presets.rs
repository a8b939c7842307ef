//! Named layouts that re-create the machines the seed discussions argued
//! about. Sizes are chosen so every model (FLATMEM included, where it makes
//! sense) can be built on a 24 GiB machine.

use super::{Layout, LayoutError, MemRange, RangeKind};
use crate::geometry::Geometry;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const PIB: u64 = 1 << 50;

/// Names accepted by [`Layout::preset`].
pub const PRESET_NAMES: [&str; 5] = [
    "x86-pci-hole",
    "ia64-holes",
    "numa-fake-64",
    "zone-device",
    "sparse-52bit",
];

pub(super) fn build(name: &str) -> Result<Layout, LayoutError> {
    use RangeKind::{Device, Hotplug, Ram, Reserved};
    let (geometry, ranges) = match name {
        // The classic PC: RAM below the 32-bit PCI hole and above 4 GiB.
        "x86-pci-hole" => (
            Geometry::X86_64,
            vec![
                MemRange::new(0, 3 * GIB, Ram, 0),
                MemRange::new(3 * GIB, 4 * GIB, Reserved, 0),
                MemRange::new(4 * GIB, 32 * GIB, Ram, 0),
            ],
        ),
        // ia64 (16 KiB pages, 1 GiB sections) with banks separated by holes
        // of more than 1 GiB: the machines VIRTUAL_MEM_MAP was written for.
        "ia64-holes" => (
            Geometry::IA64,
            vec![
                MemRange::new(0, 2 * GIB, Ram, 0),
                MemRange::new(6 * GIB, 10 * GIB, Ram, 0),
                MemRange::new(16 * GIB, 20 * GIB, Ram, 1),
                MemRange::new(40 * GIB, 44 * GIB, Ram, 1),
            ],
        ),
        // numa=fake=64 on a 3 GiB machine: 64 nodes of 48 MiB each.
        "numa-fake-64" => (
            Geometry::X86_64,
            (0..64u16)
                .map(|n| {
                    MemRange::new(u64::from(n) * 48 * MIB, u64::from(n + 1) * 48 * MIB, Ram, n)
                })
                .collect(),
        ),
        // Boot RAM, one hot-added memory block (offline until onlined), and
        // device memory (ZONE_DEVICE / pmem) in 2 MiB-aligned pieces that
        // leave sub-section holes inside sections. Only the vmemmap models
        // can hold it.
        "zone-device" => (
            Geometry::X86_64,
            vec![
                MemRange::new(0, 2 * GIB, Ram, 0),
                MemRange::new(4 * GIB, 6 * GIB, Ram, 0),
                MemRange::new(6 * GIB, 6 * GIB + 128 * MIB, Hotplug, 0),
                MemRange::new(8 * GIB, 8 * GIB + 6 * MIB, Device, 0),
                MemRange::new(8 * GIB + 10 * MIB, 8 * GIB + 64 * MIB, Device, 0),
                MemRange::new(8 * GIB + 160 * MIB, 8 * GIB + 224 * MIB, Device, 0),
                MemRange::new(9 * GIB + 2 * MIB, 9 * GIB + 4 * MIB, Device, 1),
            ],
        ),
        // 5-level paging: a few GiB of RAM spread over the whole 4 PiB span.
        "sparse-52bit" => (
            Geometry::X86_64_LA57,
            vec![
                MemRange::new(0, GIB, Ram, 0),
                MemRange::new(PIB, PIB + GIB, Ram, 1),
                MemRange::new(2 * PIB, 2 * PIB + GIB, Ram, 2),
                MemRange::new(4 * PIB - GIB, 4 * PIB, Ram, 3),
            ],
        ),
        _ => return Err(LayoutError::UnknownPreset(name.to_owned())),
    };
    Layout::new(geometry, ranges, format!("preset:{name}"))
}
