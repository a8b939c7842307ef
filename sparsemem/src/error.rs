//! The crate's errors, in one module that depends on nothing but the
//! vocabulary, so the models, the tables and the memmap blocks can all
//! return them without importing each other.

use std::fmt;

use crate::types::{Pfn, PhysAddr};

/// The unit a hotplug request must come in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granule {
    /// A 2 MiB subsection: device memory (`memremap_pages`) under VMEMMAP.
    Subsection,
    /// A memory block (one section here): ordinary memory
    /// (`check_hotplug_memory_range`), and anything without VMEMMAP
    /// (`check_pfn_span`).
    MemoryBlock,
}

impl fmt::Display for Granule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Granule::Subsection => "a 2 MiB subsection",
            Granule::MemoryBlock => "a memory block (one section)",
        })
    }
}

/// The models with memory hotplug, as one literal (for `concat!`).
macro_rules! hotplug_models {
    () => {
        "sparse, sparse-extreme, vmemmap-table, vmemmap-probe, vmemmap-uffd, vmemmap-uffd-sigbus"
    };
}

/// Names of the models that can hold hot-added memory, for error messages.
pub const HOTPLUG_MODELS: &str = hotplug_models!();

/// Why FLATMEM refuses every hotplug request.
pub(crate) const NO_HOTPLUG: &str = concat!(
    "FLATMEM has no memory hotplug; models that can: ",
    hotplug_models!()
);

/// Names of the models that can hold device memory, for error messages.
pub const VMEMMAP_MODELS: &str = "vmemmap-table, vmemmap-probe, vmemmap-uffd, vmemmap-uffd-sigbus";

/// Why a hot add, hot remove or online/offline request was refused. The
/// model is unchanged after any of these.
#[derive(Debug)]
pub enum HotplugError {
    /// The range is empty or not aligned to the unit it must come in.
    Misaligned {
        /// First pfn asked for.
        start: Pfn,
        /// Pages asked for.
        nr_pages: u64,
        /// The unit.
        granule: Granule,
        /// Pages in one unit.
        unit_pages: u64,
    },
    /// The range reaches past `2^MAX_PHYSMEM_BITS`.
    OutOfRange {
        /// One past the last pfn asked for.
        end: Pfn,
        /// The geometry's limit.
        max_pfn: Pfn,
    },
    /// Part of the range is already present (the kernel's `-EEXIST`).
    AlreadyPresent {
        /// First pfn of the offending subsection.
        pfn: Pfn,
    },
    /// Part of the range is not present, so it cannot be removed or onlined.
    NotPresent {
        /// First pfn of the offending subsection.
        pfn: Pfn,
    },
    /// The model cannot do this at all (FLATMEM has no hotplug).
    Unsupported(&'static str),
    /// Device memory (ZONE_DEVICE) needs SPARSEMEM_VMEMMAP, and this model
    /// is not one.
    NeedsVmemmap {
        /// The model asked.
        model: &'static str,
    },
    /// The range holds device memory, which is never onlined, offlined or
    /// removed as ordinary memory (or, for a device removal, it holds
    /// something else).
    Device {
        /// First pfn of the offending subsection.
        pfn: Pfn,
        /// Whether that pfn is device memory (false: a device removal found
        /// ordinary memory or a hole there).
        is_device: bool,
    },
    /// The memmap could not be mapped or populated.
    Memmap(std::io::Error),
    /// The memmap for the added memory would not fit this machine (checked
    /// before anything is mapped).
    TooLarge(MemmapTooLarge),
}

impl fmt::Display for HotplugError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HotplugError::Misaligned {
                start,
                nr_pages,
                granule,
                unit_pages,
            } => {
                write!(
                    f,
                    "range at pfn {start} of {nr_pages} pages is empty or not aligned to {granule} ({unit_pages} pages)"
                )?;
                if *granule == Granule::MemoryBlock {
                    write!(
                        f,
                        "; only device memory (ZONE_DEVICE, models {VMEMMAP_MODELS}) may be added per 2 MiB subsection"
                    )?;
                }
                Ok(())
            }
            HotplugError::OutOfRange { end, max_pfn } => write!(
                f,
                "range ends at pfn {end}, beyond MAX_PHYSMEM_BITS (max pfn {max_pfn})"
            ),
            HotplugError::AlreadyPresent { pfn } => {
                write!(f, "subsection at pfn {pfn} is already present")
            }
            HotplugError::NotPresent { pfn } => {
                write!(f, "subsection at pfn {pfn} is not present")
            }
            HotplugError::Unsupported(why) => write!(f, "{why}"),
            HotplugError::NeedsVmemmap { model } => write!(
                f,
                "device memory (ZONE_DEVICE) needs SPARSEMEM_VMEMMAP, which `{model}` is not; models that can hold it: {VMEMMAP_MODELS}"
            ),
            HotplugError::Device {
                pfn,
                is_device: true,
            } => write!(
                f,
                "pfn {pfn} is device memory (ZONE_DEVICE): it is never online and never in the buddy; remove it as device memory"
            ),
            HotplugError::Device {
                pfn,
                is_device: false,
            } => write!(f, "pfn {pfn} is not device memory"),
            HotplugError::Memmap(e) => write!(f, "memmap mapping failed: {e}"),
            HotplugError::TooLarge(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for HotplugError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HotplugError::Memmap(e) => Some(e),
            HotplugError::TooLarge(e) => Some(e),
            _ => None,
        }
    }
}

/// The classic table for this geometry would be too large.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableTooLarge {
    /// Bytes the flat section array would take.
    pub bytes: u64,
    /// The largest classic table pfnlab builds
    /// ([`CLASSIC_TABLE_LIMIT_BYTES`](crate::table::CLASSIC_TABLE_LIMIT_BYTES)).
    pub limit: u64,
}

impl fmt::Display for TableTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a classic section table for this geometry takes {} MiB (limit {} MiB); use `sparse-extreme`",
            self.bytes >> 20,
            self.limit >> 20
        )
    }
}

impl std::error::Error for TableTooLarge {}

/// The memmap would need more than half of this machine's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemmapTooLarge {
    /// Bytes of `struct page`s the model would have to populate.
    pub needed: u64,
    /// The budget: half of physical memory.
    pub budget: u64,
}

impl fmt::Display for MemmapTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "memmap needs {} MiB of struct pages, more than this machine's budget of {} MiB (half its memory)",
            self.needed >> 20,
            self.budget >> 20
        )
    }
}

impl std::error::Error for MemmapTooLarge {}

/// Why a model could not be built. Nothing is left mapped after any of these.
#[derive(Debug)]
pub enum BuildError {
    /// The classic section table would be too large.
    Table(TableTooLarge),
    /// The memmap would not fit this machine.
    TooLarge(MemmapTooLarge),
    /// A mapping failed.
    Map(std::io::Error),
    /// The model cannot be built here; the text says why.
    Unsupported(String),
    /// The layout has a range the model cannot hold: hot-added memory under
    /// FLATMEM, device memory without VMEMMAP.
    CannotHold {
        /// The model.
        model: &'static str,
        /// First byte of the range.
        start: PhysAddr,
        /// One past its last byte.
        end: PhysAddr,
        /// Why, in the kernel's terms.
        why: &'static str,
        /// The models that can.
        models: &'static str,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Table(e) => write!(f, "{e}"),
            BuildError::TooLarge(e) => write!(f, "{e}"),
            BuildError::Map(e) => write!(f, "memmap mapping failed: {e}"),
            BuildError::Unsupported(why) => f.write_str(why),
            BuildError::CannotHold {
                model,
                start,
                end,
                why,
                models,
            } => write!(
                f,
                "`{model}` cannot hold the range {start}..{end}: {why}; models that can: {models}"
            ),
        }
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BuildError::Table(e) => Some(e),
            BuildError::TooLarge(e) => Some(e),
            BuildError::Map(e) => Some(e),
            BuildError::Unsupported(_) | BuildError::CannotHold { .. } => None,
        }
    }
}

impl From<TableTooLarge> for BuildError {
    fn from(e: TableTooLarge) -> Self {
        BuildError::Table(e)
    }
}

impl From<MemmapTooLarge> for BuildError {
    fn from(e: MemmapTooLarge) -> Self {
        BuildError::TooLarge(e)
    }
}

impl From<std::io::Error> for BuildError {
    fn from(e: std::io::Error) -> Self {
        BuildError::Map(e)
    }
}
