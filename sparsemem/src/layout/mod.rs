//! Physical memory layouts: which byte ranges are RAM, hot-pluggable or
//! reserved, on which node.
//!
//! A layout comes from a TOML file ([`Layout::from_toml`]), the live host
//! ([`Layout::from_host`]) or a named preset ([`Layout::preset`]) (the
//! lab's `--layout` names one of them as `host`, `preset:NAME` or a path).
//! All three go through [`Layout::new`], which enforces the rules every model
//! relies on, and report bad input as a [`LayoutError`] that names the range
//! and the problem.
//!
//! Page rounding follows the kernel: RAM ranges are rounded inward to whole
//! pages (as e820 RAM is), and reserved ranges only matter for display (they
//! never make a pfn valid). What may be added where follows the kernel too:
//! hot-added memory (`hotplug`) comes in whole memory blocks
//! (`check_hotplug_memory_range`; a block is one section here, see
//! [`Geometry::memory_block_pages`]), and only device memory (`device`,
//! ZONE_DEVICE) comes in 2 MiB subsections — which only the vmemmap models
//! can hold.

mod file;
mod host;
mod presets;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::Deserialize;

use crate::geometry::{Geometry, GeometryError, SUBSECTION_SHIFT};
use crate::subsection::SubsectionMap;
use crate::types::{NodeId, Pfn, PhysAddr, SectionNr};

pub use host::{
    FirmwareEntry, HostSources, NodeMap, entries_to_layout, entries_to_layout_with,
    host_geometry_for, parse_firmware_entry, parse_firmware_memmap, parse_iomem, ram_end,
};
pub use presets::PRESET_NAMES;

pub use crate::types::MAX_NUMNODES;

/// What a physical range holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Deserialize, Hash, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum RangeKind {
    /// Boot memory (e820 "System RAM").
    Ram,
    /// Memory hot-added after boot (`add_memory`), in whole memory blocks;
    /// present but offline until onlined.
    Hotplug,
    /// Device memory (ZONE_DEVICE: pmem, `devm_memremap_pages`), 2 MiB
    /// aligned: it has a memmap and valid pfns, is never online and never
    /// in the buddy. Only the vmemmap models can hold it.
    Device,
    /// Firmware-reserved or device memory: never valid on its own.
    Reserved,
}

impl fmt::Display for RangeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RangeKind::Ram => "ram",
            RangeKind::Hotplug => "hotplug",
            RangeKind::Device => "device",
            RangeKind::Reserved => "reserved",
        })
    }
}

/// One physical range `[start, end)` in bytes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MemRange {
    /// First byte.
    pub start: PhysAddr,
    /// One past the last byte.
    pub end: PhysAddr,
    /// What it holds.
    pub kind: RangeKind,
    /// NUMA node.
    pub node: u16,
    /// A `hotplug` range's memory blocks carry their own memmap
    /// (`MHP_MEMMAP_ON_MEMORY`); only hot-added memory can.
    pub memmap_on_memory: bool,
}

impl MemRange {
    /// A range; checked when it goes into a [`Layout`].
    pub const fn new(start: u64, end: u64, kind: RangeKind, node: u16) -> MemRange {
        MemRange {
            start: PhysAddr::new(start),
            end: PhysAddr::new(end),
            kind,
            node,
            memmap_on_memory: false,
        }
    }

    /// The range with its memory blocks' memmap on the memory itself.
    pub const fn with_memmap_on_memory(self) -> MemRange {
        MemRange {
            memmap_on_memory: true,
            ..self
        }
    }

    /// Whole pages of the range as `[first, end)` pfns, or `None` when it
    /// holds no whole page. Memory rounds inward; reserved outward.
    pub fn pfns(&self, g: &Geometry) -> Option<(Pfn, Pfn)> {
        let ps = g.page_size();
        let (first, end) = match self.kind {
            RangeKind::Reserved => (self.start.get() / ps, self.end.get().div_ceil(ps)),
            _ => (self.start.get().div_ceil(ps), self.end.get() / ps),
        };
        (first < end).then_some((Pfn::new(first), Pfn::new(end)))
    }

    /// Size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.end.get() - self.start.get()
    }
}

/// A layout was refused; every variant names the range and the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutError {
    /// The file could not be read.
    Io {
        /// The path.
        path: String,
        /// The OS error text.
        error: String,
    },
    /// The TOML is malformed or has an unknown key or kind.
    Syntax {
        /// Index of the `[[range]]` the problem is in, when it is in one.
        range: Option<usize>,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The geometry is unknown or impossible.
    Geometry(GeometryError),
    /// One range breaks a rule.
    Range {
        /// Index of the range as given.
        index: usize,
        /// What is wrong.
        problem: String,
    },
    /// Two ranges overlap.
    Overlap {
        /// Index of the range that starts first.
        first: usize,
        /// Index of the other.
        second: usize,
        /// First byte in both.
        at: PhysAddr,
    },
    /// No range holds a whole page of RAM.
    NoMemory,
    /// The host's memory map could not be read.
    Host(String),
    /// No preset has this name.
    UnknownPreset(String),
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::Io { path, error } => write!(f, "cannot read layout file {path}: {error}"),
            LayoutError::Syntax {
                range: Some(i),
                line,
                message,
            } => write!(f, "range[{i}] (line {line}): {message}"),
            LayoutError::Syntax {
                range: None,
                line,
                message,
            } => write!(f, "line {line}: {message}"),
            LayoutError::Geometry(e) => write!(f, "{e}"),
            LayoutError::Range { index, problem } => write!(f, "range[{index}]: {problem}"),
            LayoutError::Overlap { first, second, at } => {
                write!(f, "range[{first}] and range[{second}] overlap at {at}")
            }
            LayoutError::NoMemory => write!(f, "the layout has no ram range of at least one page"),
            LayoutError::Host(why) => write!(f, "cannot read the host memory map: {why}"),
            LayoutError::UnknownPreset(name) => write!(
                f,
                "unknown preset `{name}` (known: {})",
                PRESET_NAMES.join(", ")
            ),
        }
    }
}

impl std::error::Error for LayoutError {}

impl From<GeometryError> for LayoutError {
    fn from(e: GeometryError) -> Self {
        LayoutError::Geometry(e)
    }
}

/// What the boot-time memmap of one section looks like, derived from a
/// layout: whether it is early (so online) and which subsections are
/// present.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SectionPlan {
    /// At least one whole RAM page lies in it: boot memory, online.
    pub early: bool,
    /// Subsections holding RAM pages, hotplug or device memory.
    pub subsections: SubsectionMap,
    /// Of those, the subsections of device memory.
    pub device: SubsectionMap,
}

/// A validated physical memory layout.
///
/// Invariants:
/// - ranges are sorted by start and do not overlap;
/// - every range has `start < end <= 2^MAX_PHYSMEM_BITS` and a node below
///   [`MAX_NUMNODES`]; hotplug ranges are memory-block aligned, device
///   ranges 2 MiB aligned;
/// - at least one RAM range holds a whole page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    geometry: Geometry,
    ranges: Vec<MemRange>,
    source: String,
}

impl Layout {
    /// Validates `ranges` (indices in errors are positions in this vector)
    /// and sorts them.
    pub fn new(
        geometry: Geometry,
        ranges: Vec<MemRange>,
        source: impl Into<String>,
    ) -> Result<Layout, LayoutError> {
        let max = geometry.max_phys_addr().get();
        let sub_bytes = 1u64 << SUBSECTION_SHIFT;
        let block_bytes = geometry.memory_block_pages() << geometry.page_shift();
        let misaligned = |r: &MemRange, align: u64| {
            !r.start.get().is_multiple_of(align) || !r.end.get().is_multiple_of(align)
        };
        for (index, r) in ranges.iter().enumerate() {
            let problem = if r.start >= r.end {
                Some(format!("start {} is not below end {}", r.start, r.end))
            } else if r.end.get() > max {
                Some(format!(
                    "end {} is beyond 2^MAX_PHYSMEM_BITS ({:#x}) of geometry {}",
                    r.end,
                    max,
                    geometry.name()
                ))
            } else if r.kind == RangeKind::Hotplug && misaligned(r, block_bytes) {
                Some(format!(
                    "hotplug range {}..{} is not aligned to a {} MiB memory block (one section): hot-added memory comes in whole blocks; use kind = \"device\" for ZONE_DEVICE memory at 2 MiB granularity",
                    r.start,
                    r.end,
                    block_bytes >> 20
                ))
            } else if r.memmap_on_memory && r.kind != RangeKind::Hotplug {
                Some(format!(
                    "memmap_on_memory is for hot-added memory (kind = \"hotplug\"), not a {} range: boot memory's memmap is allocated at boot",
                    r.kind
                ))
            } else if r.kind == RangeKind::Device && misaligned(r, sub_bytes) {
                Some(format!(
                    "device range {}..{} is not aligned to a 2 MiB subsection",
                    r.start, r.end
                ))
            } else if r.node >= MAX_NUMNODES {
                Some(format!(
                    "node {} is not below MAX_NUMNODES ({MAX_NUMNODES})",
                    r.node
                ))
            } else {
                None
            };
            if let Some(problem) = problem {
                return Err(LayoutError::Range { index, problem });
            }
        }
        let mut order: Vec<usize> = (0..ranges.len()).collect();
        order.sort_by_key(|&i| (ranges[i].start, ranges[i].end));
        for w in order.windows(2) {
            let (a, b) = (&ranges[w[0]], &ranges[w[1]]);
            if b.start < a.end {
                return Err(LayoutError::Overlap {
                    first: w[0],
                    second: w[1],
                    at: b.start,
                });
            }
        }
        let sorted: Vec<MemRange> = order.iter().map(|&i| ranges[i]).collect();
        let layout = Layout {
            geometry,
            ranges: sorted,
            source: source.into(),
        };
        if layout.ram_ranges().next().is_none() {
            return Err(LayoutError::NoMemory);
        }
        Ok(layout)
    }

    /// Loads a TOML layout file.
    pub fn from_toml_file(path: &Path) -> Result<Layout, LayoutError> {
        let text = std::fs::read_to_string(path).map_err(|e| LayoutError::Io {
            path: path.display().to_string(),
            error: e.to_string(),
        })?;
        file::parse(&text, &path.display().to_string())
    }

    /// Parses a TOML layout (see the README for the format).
    pub fn from_toml(text: &str) -> Result<Layout, LayoutError> {
        file::parse(text, "toml")
    }

    /// Reads the live host: `/sys/firmware/memmap`, else `/proc/iomem`, with
    /// node ids from `/sys/devices/system/node`.
    pub fn from_host() -> Result<Layout, LayoutError> {
        host::load(&HostSources::system())
    }

    /// The live machine's layout, or the preset `fallback` when the host's
    /// memory map cannot be read; the second value is why the fallback was
    /// taken (the host's error), for the caller to report.
    pub fn from_host_or_preset(
        fallback: &str,
    ) -> Result<(Layout, Option<LayoutError>), LayoutError> {
        Layout::or_preset(Layout::from_host(), fallback)
    }

    /// `host` itself, or the preset `fallback` with the reason.
    fn or_preset(
        host: Result<Layout, LayoutError>,
        fallback: &str,
    ) -> Result<(Layout, Option<LayoutError>), LayoutError> {
        match host {
            Ok(layout) => Ok((layout, None)),
            Err(e) => Ok((Layout::preset(fallback)?, Some(e))),
        }
    }

    /// A named preset (see [`PRESET_NAMES`]).
    pub fn preset(name: &str) -> Result<Layout, LayoutError> {
        presets::build(name)
    }

    /// The layout as a layout file (the TOML format [`Layout::from_toml`]
    /// reads), the geometry by name when it is a preset's and spelled out
    /// in full otherwise, so that reading it back gives the same layout.
    pub fn to_toml(&self) -> String {
        use std::fmt::Write as _;
        let g = &self.geometry;
        let limits = g.zone_limits();
        let named = Geometry::by_name(g.name()).is_ok_and(|n| n == *g);
        let mut out = if named {
            format!("# {}\ngeometry = \"{}\"\n", self.source, g.name())
        } else {
            format!(
                "# {}\ngeometry = {{ page_shift = {}, section_size_bits = {}, max_physmem_bits = {}, max_page_order = {}, pageblock_order = {}, zone_dma_bytes = {:#x}, zone_dma32_bytes = {:#x} }}\n",
                self.source,
                g.page_shift(),
                g.section_size_bits(),
                g.max_physmem_bits(),
                g.max_order().get(),
                g.pageblock_order().get(),
                limits.dma.unwrap_or(0),
                limits.dma32.unwrap_or(0),
            )
        };
        for r in &self.ranges {
            let _ = write!(
                out,
                "\n[[range]]\nstart = {:#x}\nend = {:#x}\nkind = \"{}\"\nnode = {}\n",
                r.start.get(),
                r.end.get(),
                r.kind,
                r.node
            );
        }
        out
    }

    /// The geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// The ranges, sorted by start.
    pub fn ranges(&self) -> &[MemRange] {
        &self.ranges
    }

    /// Where the layout came from (a path, `host`, `preset:NAME`).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Ranges with a memmap (RAM, hotplug and device) that hold at least one
    /// whole page, with their pfns.
    pub fn memory_ranges(&self) -> impl Iterator<Item = (&MemRange, Pfn, Pfn)> + '_ {
        self.ranges
            .iter()
            .filter(|r| r.kind != RangeKind::Reserved)
            .filter_map(|r| r.pfns(&self.geometry).map(|(a, b)| (r, a, b)))
    }

    /// The [`Layout::memory_ranges`] of one kind.
    pub fn ranges_of(&self, kind: RangeKind) -> impl Iterator<Item = (&MemRange, Pfn, Pfn)> + '_ {
        self.memory_ranges().filter(move |(r, _, _)| r.kind == kind)
    }

    /// Boot memory: the RAM ranges with at least one whole page.
    pub fn ram_ranges(&self) -> impl Iterator<Item = (&MemRange, Pfn, Pfn)> + '_ {
        self.ranges_of(RangeKind::Ram)
    }

    /// Whether the layout has a range of `kind` holding a whole page.
    pub fn has(&self, kind: RangeKind) -> bool {
        self.ranges_of(kind).next().is_some()
    }

    /// The span of boot memory: the first RAM pfn and one past the last
    /// (a FLATMEM node's `node_start_pfn` and `node_end_pfn`).
    pub fn pfn_span(&self) -> (Pfn, Pfn) {
        let mut iter = self.ram_ranges().map(|(_, a, b)| (a, b));
        let first = iter.next().unwrap_or_default();
        iter.fold(first, |(lo, hi), (a, b)| (lo.min(a), hi.max(b)))
    }

    /// The span of every range with a memmap (RAM, hotplug, device): the
    /// first pfn and one past the last.
    pub fn memory_span(&self) -> (Pfn, Pfn) {
        let mut iter = self.memory_ranges().map(|(_, a, b)| (a, b));
        let first = iter.next().unwrap_or_default();
        iter.fold(first, |(lo, hi), (a, b)| (lo.min(a), hi.max(b)))
    }

    /// Whole pages of RAM, hotplug and device memory.
    pub fn present_pages(&self) -> u64 {
        self.memory_ranges()
            .map(|(_, a, b)| b.get() - a.get())
            .sum()
    }

    /// Boot-time plan of every present section: early sections (with a whole
    /// RAM page) and the subsections holding RAM, hotplug or device memory.
    pub fn section_plan(&self) -> BTreeMap<SectionNr, SectionPlan> {
        let g = self.geometry;
        let mut plan: BTreeMap<SectionNr, SectionPlan> = BTreeMap::new();
        for (r, first, end) in self.memory_ranges() {
            for chunk in g.section_chunks(first, end) {
                let bits = SubsectionMap::range(chunk.first_subsection, chunk.last_subsection);
                let entry = plan.entry(chunk.nr).or_insert(SectionPlan {
                    early: false,
                    subsections: SubsectionMap::EMPTY,
                    device: SubsectionMap::EMPTY,
                });
                entry.early |= r.kind == RangeKind::Ram;
                entry.subsections = entry.subsections.or(&bits);
                if r.kind == RangeKind::Device {
                    entry.device = entry.device.or(&bits);
                }
            }
        }
        plan
    }

    /// Node of the memory range holding `pfn`, or of the nearest one below
    /// (node 0 for a layout without memory).
    pub fn node_of(&self, pfn: Pfn) -> NodeId {
        self.memory_ranges()
            .take_while(|(_, first, _)| *first <= pfn)
            .last()
            .or_else(|| self.memory_ranges().next())
            .map_or(NodeId::ZERO, |(r, _, _)| Self::node_id(r))
    }

    /// The distinct node ids with RAM or hotplug memory, ascending.
    pub fn nodes(&self) -> Vec<NodeId> {
        let mut nodes: Vec<NodeId> = self
            .memory_ranges()
            .filter(|(r, _, _)| r.kind != RangeKind::Device)
            .map(|(r, _, _)| Self::node_id(r))
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }

    /// The lowest node with boot memory: where a single-node experiment runs
    /// its CPU (hot-added memory starts offline, so its nodes may have no
    /// zone yet).
    pub fn first_node(&self) -> NodeId {
        self.ram_ranges()
            .map(|(r, _, _)| Self::node_id(r))
            .min()
            .unwrap_or(NodeId::ZERO)
    }

    /// A range's node as a [`NodeId`]: [`Layout::new`] refused any range
    /// whose node is not below `MAX_NUMNODES`.
    pub fn node_id(r: &MemRange) -> NodeId {
        NodeId::try_new(u64::from(r.node)).unwrap_or(NodeId::ZERO)
    }
}

#[cfg(test)]
mod tests;
