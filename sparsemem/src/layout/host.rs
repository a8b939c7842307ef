//! Reading the live host's physical memory map.
//!
//! The top level of `/proc/iomem` is the kernel's own memory map: on x86
//! the e820 table after the kernel's edits (`trim_bios_range` reserves page
//! 0, `memmap=` reserves ranges, `mem=` cuts the top), so its "System RAM"
//! is the RAM memblock was given. It needs root (every address reads as
//! zero otherwise); without it, `/sys/firmware/memmap/N/{start,end,type}`
//! serves, the map as the firmware handed it over (`e820_table_firmware`),
//! `end` inclusive. Either way "System RAM" becomes RAM and every other
//! type reserved. Node ids come from the memory-block links in
//! `/sys/devices/system/node/nodeN/memoryM` (block `M` covers
//! `[M * block_size_bytes, (M + 1) * block_size_bytes)`); RAM ranges that
//! straddle nodes are split. Overlapping firmware entries are clipped so
//! the first one wins, and entries beyond the geometry's physical address
//! width are dropped, since no model can describe them.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use super::{Layout, LayoutError, MemRange, RangeKind};
use crate::geometry::Geometry;

/// Where the host loader looks; tests point it at saved samples.
#[derive(Clone, Debug)]
pub struct HostSources {
    /// `/sys/firmware/memmap`.
    pub firmware_memmap: PathBuf,
    /// `/proc/iomem`.
    pub iomem: PathBuf,
    /// `/sys/devices/system/node`.
    pub node_dir: PathBuf,
    /// `/sys/devices/system/memory`.
    pub memory_dir: PathBuf,
    /// `/proc/zoneinfo`: each node's span.
    pub zoneinfo: PathBuf,
}

impl HostSources {
    /// The live system's files.
    pub fn system() -> HostSources {
        HostSources {
            firmware_memmap: "/sys/firmware/memmap".into(),
            iomem: "/proc/iomem".into(),
            node_dir: "/sys/devices/system/node".into(),
            memory_dir: "/sys/devices/system/memory".into(),
            zoneinfo: "/proc/zoneinfo".into(),
        }
    }
}

/// One firmware entry: `[start, end)` and its type string.
pub type FirmwareEntry = (u64, u64, String);

fn read_trimmed(path: &Path) -> Result<String, String> {
    fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn parse_hex(s: &str, what: &str) -> Result<u64, String> {
    let digits = s.trim().trim_start_matches("0x");
    u64::from_str_radix(digits, 16).map_err(|_| format!("{what}: `{s}` is not a hex number"))
}

/// Parses one `/sys/firmware/memmap/N` entry from the texts of its
/// `start`, `end` (inclusive) and `type` files.
pub fn parse_firmware_entry(start: &str, end: &str, kind: &str) -> Result<FirmwareEntry, String> {
    let start = parse_hex(start.trim(), "start")?;
    let end_incl = parse_hex(end.trim(), "end")?;
    if end_incl < start {
        return Err(format!("end {end_incl:#x} below start {start:#x}"));
    }
    Ok((start, end_incl.saturating_add(1), kind.trim().to_owned()))
}

/// Parses a `/sys/firmware/memmap` directory into entries with exclusive
/// ends, sorted by start.
pub fn parse_firmware_memmap(dir: &Path) -> Result<Vec<FirmwareEntry>, String> {
    let mut entries = Vec::new();
    let listing = fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for item in listing {
        let path = item.map_err(|e| format!("{}: {e}", dir.display()))?.path();
        let entry = parse_firmware_entry(
            &read_trimmed(&path.join("start"))?,
            &read_trimmed(&path.join("end"))?,
            &read_trimmed(&path.join("type"))?,
        )
        .map_err(|e| format!("{}: {e}", path.display()))?;
        entries.push(entry);
    }
    if entries.is_empty() {
        return Err(format!("{}: no entries", dir.display()));
    }
    entries.sort();
    Ok(entries)
}

/// Parses the top level of `/proc/iomem` text into entries with exclusive
/// ends, sorted by start.
pub fn parse_iomem(text: &str) -> Result<Vec<FirmwareEntry>, String> {
    let mut entries = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.is_empty() || line.starts_with(char::is_whitespace) {
            continue;
        }
        let (span, name) = line
            .split_once(" : ")
            .ok_or_else(|| format!("line {}: expected `start-end : name`", i + 1))?;
        let (a, b) = span
            .split_once('-')
            .ok_or_else(|| format!("line {}: expected `start-end`", i + 1))?;
        let start = parse_hex(a, &format!("line {}", i + 1))?;
        let end_incl = parse_hex(b, &format!("line {}", i + 1))?;
        entries.push((start, end_incl.saturating_add(1), name.trim().to_owned()));
    }
    if entries.is_empty() {
        return Err("no entries".into());
    }
    if entries.iter().all(|(s, e, _)| *s == 0 && *e == 1) {
        return Err("every address reads as zero (reading /proc/iomem needs root)".into());
    }
    entries.sort();
    Ok(entries)
}

/// Which node each physical address is on: `[start, end)` byte ranges,
/// each on one node. Invariants:
/// - the ranges are ascending and disjoint, none empty;
/// - an address no range holds (a hole, or memory no source places) is on
///   the node of the nearest range below it, or above it when none is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeMap {
    ranges: Vec<(u64, u64, u16)>,
}

impl NodeMap {
    /// From the nodes' `memoryN` links: block number → node, each block
    /// `block_size_bytes` long. `None` without a block size or a link.
    pub fn from_blocks(block_size_bytes: u64, blocks: &BTreeMap<u64, u16>) -> Option<NodeMap> {
        let mut ranges: Vec<(u64, u64, u16)> = Vec::new();
        for (&block, &node) in blocks {
            let start = block.checked_mul(block_size_bytes)?;
            let end = start.checked_add(block_size_bytes)?;
            match ranges.last_mut() {
                Some(last) if last.1 == start && last.2 == node => last.1 = end,
                _ => ranges.push((start, end, node)),
            }
        }
        (block_size_bytes > 0 && !ranges.is_empty()).then_some(NodeMap { ranges })
    }

    /// From `/proc/zoneinfo`: each node from its lowest zone's `start_pfn`
    /// to its highest zone's end (`start_pfn + spanned`), in pages of
    /// `page_size` bytes. Exact to the page where a node is smaller than a
    /// memory block, as `numa=fake=` makes them (a block's link names one
    /// node). `None` when no zone spans a page, or when two nodes' spans
    /// overlap (memory interleaved between nodes, which the kernel
    /// allows): the memory blocks' links decide then.
    pub fn from_zoneinfo(text: &str, page_size: u64) -> Option<NodeMap> {
        let mut spans: BTreeMap<u16, (u64, u64)> = BTreeMap::new();
        let (mut node, mut spanned) = (None, 0u64);
        for line in text.lines() {
            let line = line.trim();
            if let Some(rest) = line.strip_prefix("Node ") {
                node = rest.split(',').next()?.trim().parse::<u16>().ok();
                spanned = 0;
            } else if let Some(n) = line.strip_prefix("spanned") {
                spanned = n.trim().parse().ok()?;
            } else if let Some(n) = line.strip_prefix("start_pfn:") {
                let start: u64 = n.trim().parse().ok()?;
                if spanned == 0 {
                    continue;
                }
                let span = (start, start.checked_add(spanned)?);
                let e = spans.entry(node?).or_insert(span);
                *e = (e.0.min(span.0), e.1.max(span.1));
            }
        }
        let mut ranges: Vec<(u64, u64, u16)> = spans
            .into_iter()
            .map(|(node, (start, end))| {
                Some((
                    start.checked_mul(page_size)?,
                    end.checked_mul(page_size)?,
                    node,
                ))
            })
            .collect::<Option<_>>()?;
        ranges.sort_unstable();
        let disjoint = ranges.windows(2).all(|w| w[0].1 <= w[1].0);
        (disjoint && !ranges.is_empty()).then_some(NodeMap { ranges })
    }

    /// The `[start, end)` byte ranges and their nodes, ascending.
    pub fn ranges(&self) -> &[(u64, u64, u16)] {
        &self.ranges
    }

    /// This map, and `other`'s ranges for what this one does not cover:
    /// zoneinfo's spans cover only memory online in a zone, and the block
    /// links also place offline memory.
    pub fn or_else(self, other: Option<NodeMap>) -> NodeMap {
        let Some(other) = other else { return self };
        let mut ranges = self.ranges.clone();
        for &(start, end, node) in &other.ranges {
            let mut at = start;
            for &(a, b, _) in &self.ranges {
                if b <= at || a >= end {
                    continue;
                }
                if a > at {
                    ranges.push((at, a, node));
                }
                at = at.max(b);
            }
            if at < end {
                ranges.push((at, end, node));
            }
        }
        ranges.sort_unstable();
        debug_assert!(ranges.windows(2).all(|w| w[0].1 <= w[1].0));
        NodeMap { ranges }
    }

    /// The map a machine's two sources give: zoneinfo's `spans` first,
    /// the memory blocks' links for what they leave; either alone when
    /// the other is missing.
    pub fn from_sources(spans: Option<NodeMap>, blocks: Option<NodeMap>) -> Option<NodeMap> {
        match spans {
            Some(spans) => Some(spans.or_else(blocks)),
            None => blocks,
        }
    }

    /// The node of the range holding `addr`, if one does.
    pub fn node_at(&self, addr: u64) -> Option<u16> {
        let i = self.ranges.partition_point(|r| r.1 <= addr);
        self.ranges.get(i).filter(|r| r.0 <= addr).map(|r| r.2)
    }

    /// The node `addr` is on: its range's, else the nearest range's below
    /// it, else above it (`None` for an empty map).
    pub fn node_near(&self, addr: u64) -> Option<u16> {
        let i = self.ranges.partition_point(|r| r.1 <= addr);
        match self.ranges.get(i) {
            Some(r) if r.0 <= addr => Some(r.2),
            _ => i
                .checked_sub(1)
                .and_then(|below| self.ranges.get(below))
                .or_else(|| self.ranges.get(i))
                .map(|r| r.2),
        }
    }
}

/// Each address's node: from `/proc/zoneinfo`'s node spans where it can
/// be read, and the node directory's `memoryN` links for the rest.
fn read_node_map(sources: &HostSources) -> Option<NodeMap> {
    let blocks = read_block_node_map(sources);
    let page_size = crate::memmap::host_page_size() as u64;
    let spans = fs::read_to_string(&sources.zoneinfo)
        .ok()
        .and_then(|text| NodeMap::from_zoneinfo(&text, page_size));
    NodeMap::from_sources(spans, blocks)
}

/// Memory block → node, from the node directory's `memoryN` links.
fn read_block_node_map(sources: &HostSources) -> Option<NodeMap> {
    let block = parse_hex(
        &read_trimmed(&sources.memory_dir.join("block_size_bytes")).ok()?,
        "block_size_bytes",
    )
    .ok()?;
    let mut map = BTreeMap::new();
    for node in fs::read_dir(&sources.node_dir).ok()?.flatten() {
        let name = node.file_name().to_string_lossy().into_owned();
        let Some(Ok(nid)) = name.strip_prefix("node").map(str::parse::<u16>) else {
            continue;
        };
        for entry in fs::read_dir(node.path()).ok()?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(Ok(id)) = name.strip_prefix("memory").map(str::parse::<u64>) {
                map.insert(id, nid);
            }
        }
    }
    NodeMap::from_blocks(block, &map)
}

/// The geometry of a machine of architecture `arch` (as
/// `std::env::consts::ARCH` names it) whose kernel uses `page_size`-byte
/// pages, wide enough for RAM ending at `max_end`: arm64 by its page size
/// (4, 16 or 64 KiB), x86_64 with 5-level paging when RAM reaches past 46
/// bits.
pub fn host_geometry_for(arch: &str, page_size: usize, max_end: u64) -> Geometry {
    match (arch, page_size) {
        ("aarch64", 0x10000) => Geometry::ARM64_64K,
        ("aarch64", 0x4000) => Geometry::ARM64_16K,
        ("aarch64", _) => Geometry::ARM64_4K,
        _ if max_end > Geometry::X86_64.max_phys_addr().get() => Geometry::X86_64_LA57,
        _ => Geometry::X86_64,
    }
}

/// The geometry of this machine.
fn host_geometry(max_end: u64) -> Geometry {
    host_geometry_for(
        std::env::consts::ARCH,
        crate::memmap::host_page_size(),
        max_end,
    )
}

/// Turns firmware entries into a layout for this machine's geometry:
/// kinds, clipping, node split.
pub fn entries_to_layout(
    entries: &[FirmwareEntry],
    nodes: Option<&NodeMap>,
    source: &str,
) -> Result<Layout, LayoutError> {
    entries_to_layout_with(entries, nodes, source, host_geometry(ram_end(entries)))
}

/// One past the highest byte of System RAM among `entries` (0 when there
/// is none): what sizes the geometry of the machine they describe.
pub fn ram_end(entries: &[FirmwareEntry]) -> u64 {
    entries
        .iter()
        .filter(|e| e.2 == "System RAM")
        .map(|e| e.1)
        .max()
        .unwrap_or(0)
}

/// [`entries_to_layout`] for a given geometry (another machine's samples).
/// Everything that is not "System RAM" is reserved: on arm64 that includes
/// the memblock NOMAP regions (firmware and UEFI runtime memory), which
/// `/proc/iomem` lists as top-level "reserved".
pub fn entries_to_layout_with(
    entries: &[FirmwareEntry],
    nodes: Option<&NodeMap>,
    source: &str,
    g: Geometry,
) -> Result<Layout, LayoutError> {
    let max = g.max_phys_addr().get();
    let mut ranges: Vec<MemRange> = Vec::new();
    let mut covered = 0u64;
    for (start, end, kind) in entries {
        let start = (*start).max(covered);
        let end = (*end).min(max);
        if start >= end {
            continue;
        }
        covered = end;
        let kind = if kind == "System RAM" {
            RangeKind::Ram
        } else {
            RangeKind::Reserved
        };
        push_split_by_node(&mut ranges, MemRange::new(start, end, kind, 0), nodes);
    }
    Layout::new(g, ranges, source)
}

fn push_split_by_node(out: &mut Vec<MemRange>, r: MemRange, nodes: Option<&NodeMap>) {
    let Some(map) = nodes else {
        out.push(r);
        return;
    };
    let (mut start, end) = (r.start.get(), r.end.get());
    let mut node = map.node_near(start).unwrap_or(0);
    // Where a node's range starts inside `r`, the node may change.
    for &(at, _, n) in map.ranges() {
        if at <= start || at >= end || n == node {
            continue;
        }
        out.push(MemRange::new(start, at, r.kind, node));
        start = at;
        node = n;
    }
    out.push(MemRange::new(start, end, r.kind, node));
}

/// Loads the host layout from `sources`.
pub(super) fn load(sources: &HostSources) -> Result<Layout, LayoutError> {
    let nodes = read_node_map(sources);
    let iomem = fs::read_to_string(&sources.iomem)
        .map_err(|e| format!("{}: {e}", sources.iomem.display()))
        .and_then(|t| parse_iomem(&t));
    if let Ok(entries) = &iomem {
        return entries_to_layout(entries, nodes.as_ref(), "host");
    }
    match parse_firmware_memmap(&sources.firmware_memmap) {
        Ok(entries) => entries_to_layout(&entries, nodes.as_ref(), "host"),
        Err(firmware_err) => Err(LayoutError::Host(format!(
            "{firmware_err}; {}",
            iomem.err().unwrap_or_default()
        ))),
    }
}
