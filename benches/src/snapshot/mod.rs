//! A machine's memory state in one file: what `pfnlab snapshot` writes and
//! `--layout snapshot:FILE` reads.
//!
//! A [`Snapshot`] holds, as the kernel wrote them, the files the model can
//! be held against: the firmware memory map (`/sys/firmware/memmap`) and
//! `/proc/iomem`, the nodes and memory blocks of `/sys/devices/system`
//! with each block's zones, `/proc/zoneinfo`, `buddyinfo`,
//! `pagetypeinfo`, `meminfo` and `vmstat`, the four `vm` sysctls the
//! zones are sized from (and whether THP is on, which moves the default
//! `min_free_kbytes`), the kernel's release, version and command line,
//! the online CPUs, the architecture and the page size. The kernel's own
//! text is kept, not a digest of it, so a later pfnlab reads more from
//! the same file than this one does.
//!
//! [`Snapshot::read`] takes them from under a root directory (`/` for the
//! live machine, a saved copy in the tests). A file it cannot read (a
//! kernel without the option, or one that needs root) is recorded in
//! [`Snapshot::unreadable`] with why, and the snapshot goes on without it.
//!
//! [`Snapshot::from_json`] is strict: a file of another format version or
//! of an architecture pfnlab has no geometry for is refused, and so is a
//! zoneinfo the kernel could not have printed (truncated, or its lines
//! out of order), so that nothing is built from a half-read file.

mod read;
mod start;

use std::fmt;
use std::path::{Path, PathBuf};

use buddy::views::{
    BuddyInfo, FreeinfoError, KERNEL_ZONE_NAMES, PageTypeInfo, Zoneinfo, ZoneinfoError,
    parse_buddyinfo, parse_pagetypeinfo, parse_zoneinfo,
};
use buddy::{Allocator, BuddyModel, Era, StartStateError, Variant};
use serde::{Deserialize, Serialize};
use sparsemem::layout::{
    FirmwareEntry, NodeMap, entries_to_layout_with, host_geometry_for, parse_firmware_entry,
    parse_iomem, ram_end,
};
use sparsemem::{Layout, LayoutError, MemRange, RangeKind};
use sparsemem::{Order, Pfn};

pub use read::parse_cpulist;
pub use start::{DeferredZone, SnapshotPageset, StartState, StartStateRecord};

/// The `format` field of every snapshot.
pub const SNAPSHOT_FORMAT: &str = "pfnlab-snapshot";

/// The format version this pfnlab writes and reads.
pub const SNAPSHOT_VERSION: u32 = 1;

/// The architectures a snapshot may be of: those pfnlab has a geometry
/// for (`std::env::consts::ARCH` spelling).
pub const SNAPSHOT_ARCHES: [&str; 2] = ["x86_64", "aarch64"];

/// One machine's memory state (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Always [`SNAPSHOT_FORMAT`].
    pub format: String,
    /// [`SNAPSHOT_VERSION`] when written.
    pub version: u32,
    /// The architecture (`x86_64`, `aarch64`).
    pub arch: String,
    /// The kernel's page size in bytes.
    pub page_size: u64,
    /// Which kernel, and how it was booted.
    pub kernel: KernelId,
    /// Online CPUs (`/sys/devices/system/cpu/online`).
    pub cpus: Option<u32>,
    /// `/sys/firmware/memmap`, entry by entry in index order.
    pub firmware_memmap: Vec<FirmwareText>,
    /// `/proc/iomem` (every address reads as zero without root).
    pub iomem: Option<String>,
    /// `/sys/devices/system/memory/block_size_bytes`, as printed (hex).
    pub memory_block_size: Option<String>,
    /// `/sys/devices/system/node/nodeN`, by id.
    pub nodes: Vec<NodeText>,
    /// `/sys/devices/system/memory/memoryN`, by id.
    pub memory_blocks: Vec<MemoryBlockText>,
    /// The `/proc` files.
    pub proc: ProcFiles,
    /// The sysctls the zones are sized from.
    pub sysctls: SysctlText,
    /// Files that could not be read, with why.
    pub unreadable: Vec<Unreadable>,
    /// The kernel log's messages on the memory it freed at boot
    /// (`Freeing …`, `RAMDISK: …`), from `/dev/kmsg` (root only); empty
    /// in a snapshot taken without them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel_log: Vec<String>,
}

/// The kernel's identity.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelId {
    /// `/proc/sys/kernel/osrelease`.
    pub release: Option<String>,
    /// `/proc/version`.
    pub version: Option<String>,
    /// `/proc/cmdline`.
    pub cmdline: Option<String>,
}

/// One `/sys/firmware/memmap/N` entry, its files' texts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirmwareText {
    /// `N`.
    pub index: u32,
    /// `start` (hex).
    pub start: String,
    /// `end`, inclusive (hex).
    pub end: String,
    /// `type` (`System RAM`, `Reserved`, ...).
    pub kind: String,
}

/// One node of `/sys/devices/system/node`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeText {
    /// The node id.
    pub id: u16,
    /// `cpulist`.
    pub cpulist: Option<String>,
    /// The memory blocks linked from the node (`memoryM`), ascending.
    pub memory_blocks: Vec<u64>,
}

/// One memory block of `/sys/devices/system/memory`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryBlockText {
    /// The block number `M` (it covers `[M, M + 1) * block_size_bytes`).
    pub id: u64,
    /// `state` (`online`, `offline`).
    pub state: Option<String>,
    /// `valid_zones`: the zone an online block is in (`none` when it spans
    /// two), or where an offline one could go.
    pub valid_zones: Option<String>,
}

/// The `/proc` files, as the kernel printed them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcFiles {
    /// `/proc/zoneinfo`.
    pub zoneinfo: Option<String>,
    /// `/proc/buddyinfo`.
    pub buddyinfo: Option<String>,
    /// `/proc/pagetypeinfo` (root only).
    pub pagetypeinfo: Option<String>,
    /// `/proc/meminfo`.
    pub meminfo: Option<String>,
    /// `/proc/vmstat`.
    pub vmstat: Option<String>,
}

/// The `vm` sysctls the zones are sized from, as printed, and THP's mode.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SysctlText {
    /// `vm.min_free_kbytes`.
    pub min_free_kbytes: Option<String>,
    /// `vm.watermark_scale_factor`.
    pub watermark_scale_factor: Option<String>,
    /// `vm.lowmem_reserve_ratio`.
    pub lowmem_reserve_ratio: Option<String>,
    /// `vm.percpu_pagelist_high_fraction`.
    pub percpu_pagelist_high_fraction: Option<String>,
    /// `/sys/kernel/mm/transparent_hugepage/enabled`.
    pub transparent_hugepage: Option<String>,
}

/// A file the snapshot could not read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unreadable {
    /// Its path on the machine (under `/`).
    pub path: String,
    /// Why (the OS's error).
    pub error: String,
}

/// Why a snapshot could not be written, read or used.
#[derive(Debug)]
pub enum SnapshotError {
    /// The snapshot file could not be read or written.
    Io(PathBuf, std::io::Error),
    /// The file is not JSON of a snapshot's shape.
    Json(serde_json::Error),
    /// The `format` field is not [`SNAPSHOT_FORMAT`].
    NotASnapshot(String),
    /// Another format version.
    Version(u32),
    /// An architecture pfnlab has no geometry for.
    Arch(String),
    /// The snapshot's zoneinfo is not one the kernel prints.
    Zoneinfo(ZoneinfoError),
    /// Its buddyinfo or pagetypeinfo is not one the kernel prints.
    Freeinfo(FreeinfoError),
    /// A start state needs the snapshot's pagetypeinfo (root only).
    NoPagetypeinfo,
    /// The snapshot's free blocks do not fit the allocator.
    StartState(StartStateError),
    /// The machine was still in deferred struct page init, and the era
    /// asked for has none.
    DeferredInit {
        /// The zone it had not finished.
        zone: DeferredZone,
        /// The era.
        era: Era,
    },
    /// A firmware entry or `/proc/iomem` that does not parse.
    MemoryMap(String),
    /// Neither a firmware memory map nor a readable `/proc/iomem`.
    NoMemoryMap,
    /// The layout built from the map is refused.
    Layout(LayoutError),
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotError::Io(p, e) => write!(f, "{}: {e}", p.display()),
            SnapshotError::Json(e) => write!(f, "not a pfnlab snapshot: {e}"),
            SnapshotError::NotASnapshot(found) => {
                write!(f, "not a pfnlab snapshot (format {found:?})")
            }
            SnapshotError::Version(v) => write!(
                f,
                "snapshot format version {v}; this pfnlab reads version {SNAPSHOT_VERSION}"
            ),
            SnapshotError::Arch(a) => write!(
                f,
                "a snapshot of a {a} machine; pfnlab models {}",
                SNAPSHOT_ARCHES.join(" and ")
            ),
            SnapshotError::Zoneinfo(e) => write!(f, "the snapshot's {e}"),
            SnapshotError::Freeinfo(e) => write!(f, "the snapshot's {e}"),
            SnapshotError::NoPagetypeinfo => f.write_str(
                "the snapshot has no pagetypeinfo (reading /proc/pagetypeinfo needs root)",
            ),
            SnapshotError::StartState(e) => write!(f, "the snapshot's start state: {e}"),
            SnapshotError::DeferredInit { zone, era } => write!(
                f,
                "the snapshot's {}: the machine was still in deferred struct page init, which era {era} does not have (it arrived in Linux 4.2; pfnlab models it from era 5.13)",
                zone.describe()
            ),
            SnapshotError::MemoryMap(e) => write!(f, "the snapshot's memory map: {e}"),
            SnapshotError::NoMemoryMap => f.write_str(
                "the snapshot has no memory map (no /sys/firmware/memmap, and /proc/iomem unread or all zero)",
            ),
            SnapshotError::Layout(e) => write!(f, "the snapshot's layout: {e}"),
        }
    }
}

impl std::error::Error for SnapshotError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SnapshotError::Io(_, e) => Some(e),
            SnapshotError::Json(e) => Some(e),
            SnapshotError::Zoneinfo(e) => Some(e),
            SnapshotError::Freeinfo(e) => Some(e),
            SnapshotError::StartState(e) => Some(e),
            SnapshotError::Layout(e) => Some(e),
            _ => None,
        }
    }
}

impl Snapshot {
    /// Parses and checks a snapshot file's text (see the module doc).
    pub fn from_json(text: &str) -> Result<Snapshot, SnapshotError> {
        // The header first, so another version is named as such even when
        // its fields differ from this version's.
        #[derive(Deserialize)]
        struct Header {
            format: String,
            version: u32,
        }
        let header: Header = serde_json::from_str(text).map_err(SnapshotError::Json)?;
        if header.format != SNAPSHOT_FORMAT {
            return Err(SnapshotError::NotASnapshot(header.format));
        }
        if header.version != SNAPSHOT_VERSION {
            return Err(SnapshotError::Version(header.version));
        }
        let snapshot: Snapshot = serde_json::from_str(text).map_err(SnapshotError::Json)?;
        if !SNAPSHOT_ARCHES.contains(&snapshot.arch.as_str()) {
            return Err(SnapshotError::Arch(snapshot.arch));
        }
        snapshot.zoneinfo()?;
        snapshot.buddyinfo()?;
        snapshot.pagetypeinfo()?;
        Ok(snapshot)
    }

    /// Reads and checks the snapshot file at `path`.
    pub fn load(path: &Path) -> Result<Snapshot, SnapshotError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| SnapshotError::Io(path.to_owned(), e))?;
        Snapshot::from_json(&text)
    }

    /// The snapshot as a file's text (pretty JSON, ending in a newline).
    pub fn to_json(&self) -> String {
        let mut text =
            serde_json::to_string_pretty(self).expect("a snapshot is plain strings and numbers");
        text.push('\n');
        text
    }

    /// Writes the snapshot to `path`.
    pub fn save(&self, path: &Path) -> Result<(), SnapshotError> {
        std::fs::write(path, self.to_json()).map_err(|e| SnapshotError::Io(path.to_owned(), e))
    }

    /// The kernel's release as `(version, patchlevel, sublevel)`, from
    /// `/proc/version` (`Linux version 6.1.0-18-amd64 …`) or else
    /// `osrelease`; `None` when neither was read or reads as a release.
    pub fn kernel_release(&self) -> Option<(u32, u32, u32)> {
        let from_version = self
            .kernel
            .version
            .as_deref()
            .and_then(|v| v.strip_prefix("Linux version "))
            .and_then(parse_release);
        from_version.or_else(|| self.kernel.release.as_deref().and_then(parse_release))
    }

    /// The era of the snapshot's kernel: the newest era at or below its
    /// release ([`Era::at_or_below`]), with the release as written.
    pub fn era(&self) -> Option<(Era, String)> {
        let (major, minor, sublevel) = self.kernel_release()?;
        let era = Era::at_or_below(major, minor, sublevel)?;
        Some((era, format!("{major}.{minor}.{sublevel}")))
    }

    /// The zoneinfo, parsed; `None` when the machine's could not be read.
    pub fn zoneinfo(&self) -> Result<Option<Zoneinfo>, SnapshotError> {
        self.proc
            .zoneinfo
            .as_deref()
            .map(parse_zoneinfo)
            .transpose()
            .map_err(SnapshotError::Zoneinfo)
    }

    /// The buddyinfo, parsed; `None` when the machine's could not be read.
    pub fn buddyinfo(&self) -> Result<Option<BuddyInfo>, SnapshotError> {
        let text = self.proc.buddyinfo.as_deref();
        text.map(parse_buddyinfo)
            .transpose()
            .map_err(SnapshotError::Freeinfo)
    }

    /// The pagetypeinfo, parsed; `None` when the machine's could not be
    /// read.
    pub fn pagetypeinfo(&self) -> Result<Option<PageTypeInfo>, SnapshotError> {
        let text = self.proc.pagetypeinfo.as_deref();
        text.map(parse_pagetypeinfo)
            .transpose()
            .map_err(SnapshotError::Freeinfo)
    }

    /// Rebuilds a fresh allocator's free lists to the snapshot's
    /// pagetypeinfo ([`Allocator::set_start_state_with`], placed from
    /// `seed`), a count the kernel capped worked out from the snapshot's
    /// buddyinfo (read in one pair with it); returns the allocated blocks.
    /// On error the allocator is unchanged.
    pub fn start_state<M: BuddyModel, V: Variant>(
        &self,
        alloc: &mut Allocator<M, V>,
        seed: u64,
    ) -> Result<Vec<(Pfn, Order)>, SnapshotError> {
        let types = self.start_types()?;
        let buddy = self.buddyinfo()?;
        alloc
            .set_start_state_with(&types, buddy.as_ref(), seed)
            .map_err(SnapshotError::StartState)
    }

    /// The pagetypeinfo a start state takes its free blocks from, refused
    /// when the snapshot has none.
    pub fn start_types(&self) -> Result<PageTypeInfo, SnapshotError> {
        self.pagetypeinfo()?.ok_or(SnapshotError::NoPagetypeinfo)
    }

    /// The first zone its machine was still initialising in deferred
    /// struct page init ([`DeferredZone`]), if any (none without a
    /// pagetypeinfo and a zoneinfo to tell).
    pub fn deferred_zone(&self) -> Result<Option<DeferredZone>, SnapshotError> {
        Ok(match (self.pagetypeinfo()?, self.zoneinfo()?) {
            (Some(types), Some(zones)) => start::deferred_zone(&types, &zones),
            _ => None,
        })
    }

    /// The pages the kernel freed to each zone after it last sized its
    /// zones, as `(node, zone index of KERNEL_ZONE_NAMES, pages)`: the
    /// init sections and the initrd its log says it freed
    /// (`free_initrd_mem`, `free_initmem`, the gaps `mark_rodata_ro`
    /// frees, the unused decrypted section), which come after the boot's
    /// last sizing (`init_per_zone_wmark_min`, and khugepaged's
    /// `set_recommended_min_free_kbytes`, both earlier initcalls); the SMP
    /// alternatives are freed before it. Each lies where x86-64 puts it
    /// (`freed_region`): the initrd where its `RAMDISK:` line says, the
    /// rest around `/proc/iomem`'s `Kernel code`, `Kernel data` and
    /// `Kernel bss`. Empty without the log, the zoneinfo or those ranges;
    /// for a machine still in deferred init, whose zones are sized again
    /// as they grow; and for one with memory offline, since taking it
    /// offline sized them again.
    pub fn freed_after_sizing(&self) -> Result<Vec<(u32, usize, u64)>, SnapshotError> {
        let Some(zones) = self.zoneinfo()? else {
            return Ok(Vec::new());
        };
        if self.deferred_zone()?.is_some() || !self.offline_blocks().is_empty() {
            return Ok(Vec::new());
        }
        let image = KernelImage::of(self.iomem.as_deref().unwrap_or(""));
        let ramdisk = self.kernel_log.iter().find_map(|m| {
            let range = m.strip_prefix("RAMDISK: [mem ")?;
            u64::from_str_radix(range.split('-').next()?.trim_start_matches("0x"), 16).ok()
        });
        let mut out: Vec<(u32, usize, u64)> = Vec::new();
        for m in &self.kernel_log {
            let Some((start, end)) = freed_region(m, &image, ramdisk) else {
                continue;
            };
            let (first, last) = (start.div_ceil(self.page_size), end / self.page_size);
            for pfn in first..last {
                let Some(zone) = zone_holding(&zones, pfn) else {
                    continue;
                };
                match out.iter_mut().find(|(n, z, _)| (*n, *z) == zone) {
                    Some(entry) => entry.2 += 1,
                    None => out.push((zone.0, zone.1, 1)),
                }
            }
        }
        Ok(out)
    }

    /// The memory map's entries: `/proc/iomem`'s top level (the kernel's
    /// own map, with page 0 and `memmap=` ranges reserved) when it was
    /// read as root, else the firmware map, as the live host loader
    /// chooses.
    pub fn memory_map(&self) -> Result<Vec<FirmwareEntry>, SnapshotError> {
        let iomem = match self.iomem.as_deref().map(parse_iomem) {
            Some(Ok(entries)) => return Ok(entries),
            unread_or_bad => unread_or_bad,
        };
        if !self.firmware_memmap.is_empty() {
            let mut entries = self
                .firmware_memmap
                .iter()
                .map(|e| {
                    parse_firmware_entry(&e.start, &e.end, &e.kind)
                        .map_err(|why| format!("firmware entry {}: {why}", e.index))
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(SnapshotError::MemoryMap)?;
            entries.sort();
            return Ok(entries);
        }
        match iomem {
            Some(Err(why)) if why.contains("reads as zero") => Err(SnapshotError::NoMemoryMap),
            Some(Err(why)) => Err(SnapshotError::MemoryMap(format!("/proc/iomem: {why}"))),
            _ => Err(SnapshotError::NoMemoryMap),
        }
    }

    /// Which node each address is on: from the zoneinfo's node spans
    /// where it has them (exact where nodes are smaller than a memory
    /// block, as under fake NUMA), and the nodes' memory block links for
    /// the rest (offline memory is in no zone's span); `None` without
    /// either (one node then).
    pub fn node_map(&self) -> Option<NodeMap> {
        let blocks = self.memory_block_size.as_deref().and_then(|size| {
            let block_size_bytes =
                u64::from_str_radix(size.trim().trim_start_matches("0x"), 16).ok()?;
            let blocks: std::collections::BTreeMap<u64, u16> = self
                .nodes
                .iter()
                .flat_map(|n| n.memory_blocks.iter().map(move |&b| (b, n.id)))
                .collect();
            NodeMap::from_blocks(block_size_bytes, &blocks)
        });
        let spans = self
            .proc
            .zoneinfo
            .as_deref()
            .and_then(|text| NodeMap::from_zoneinfo(text, self.page_size));
        NodeMap::from_sources(spans, blocks)
    }

    /// The machine's layout, in the geometry of its architecture and page
    /// size, named `source`. Memory blocks the machine had offline are
    /// `hotplug` ranges (present, with a memmap, in no zone, as
    /// `offline_pages` leaves them): `/proc/iomem` and the firmware map
    /// still call them System RAM.
    pub fn layout(&self, source: &str) -> Result<Layout, SnapshotError> {
        let entries = self.memory_map()?;
        let geometry = host_geometry_for(&self.arch, self.page_size as usize, ram_end(&entries));
        let layout = entries_to_layout_with(&entries, self.node_map().as_ref(), source, geometry)
            .map_err(SnapshotError::Layout)?;
        let offline = self.offline_blocks();
        if offline.is_empty() {
            return Ok(layout);
        }
        let mut ranges = Vec::new();
        for r in layout.ranges() {
            ranges.extend(split_off(r, &offline));
        }
        Layout::new(geometry, ranges, source).map_err(SnapshotError::Layout)
    }

    /// The memory blocks whose `state` is `offline`, as byte ranges
    /// `[start, end)`, ascending.
    pub fn offline_blocks(&self) -> Vec<(u64, u64)> {
        let Some(size) = self
            .memory_block_size
            .as_deref()
            .and_then(|s| u64::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok())
        else {
            return Vec::new();
        };
        self.memory_blocks
            .iter()
            .filter(|b| b.state.as_deref().map(str::trim) == Some("offline"))
            .filter_map(|b| Some((b.id.checked_mul(size)?, (b.id + 1).checked_mul(size)?)))
            .collect()
    }
}

/// The kernel image's ranges in `/proc/iomem` (`Kernel code`, `Kernel
/// data`, `Kernel bss`), `[start, end)` in bytes.
#[derive(Default)]
struct KernelImage {
    code: Option<(u64, u64)>,
    data: Option<(u64, u64)>,
    bss: Option<(u64, u64)>,
}

impl KernelImage {
    fn of(iomem: &str) -> KernelImage {
        let mut image = KernelImage::default();
        for line in iomem.lines() {
            let Some((range, what)) = line.trim().split_once(" : ") else {
                continue;
            };
            let Some((a, b)) = range.split_once('-') else {
                continue;
            };
            let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else {
                continue;
            };
            let slot = match what {
                "Kernel code" => &mut image.code,
                "Kernel data" => &mut image.data,
                "Kernel bss" => &mut image.bss,
                _ => continue,
            };
            // Without root every address reads as zero.
            if a > 0 {
                *slot = Some((a, b + 1));
            }
        }
        image
    }
}

/// Where the memory a `Freeing … memory: NK` message gave back lies, as
/// x86-64's linker script places it, `[start, end)` in bytes; `None` for
/// other messages, for the SMP alternatives (freed before the zones were
/// sized) and where the ranges it needs are unknown:
/// - the initrd: from the `RAMDISK:` line's start;
/// - the text/rodata gap: from the end of `Kernel code`;
/// - the rodata/data gap: up to the start of `Kernel data`;
/// - the init sections (`initmem`): from the end of `Kernel data`;
/// - the unused decrypted section: up to the end of `Kernel bss`, whose
///   last part it is, padded to 2 MiB.
fn freed_region(message: &str, image: &KernelImage, ramdisk: Option<u64>) -> Option<(u64, u64)> {
    let kib: u64 = message
        .strip_prefix("Freeing ")?
        .rsplit_once(": ")?
        .1
        .trim()
        .strip_suffix('K')?
        .parse()
        .ok()?;
    let bytes = kib * 1024;
    let page = |a: u64| a.next_multiple_of(4096);
    let from = |start: u64| Some((start, start + bytes));
    let upto = |end: u64| Some((end.saturating_sub(bytes), end));
    if message.contains("initrd") {
        from(ramdisk?)
    } else if message.contains("text/rodata gap") {
        from(page(image.code?.1))
    } else if message.contains("rodata/data gap") {
        upto(image.data?.0)
    } else if message.contains("(initmem)") {
        from(page(image.data?.1))
    } else if message.contains("decrypted") {
        upto(image.bss?.1)
    } else {
        None
    }
}

/// The `(node, zone index)` whose span in `zones` holds `pfn`.
fn zone_holding(zones: &Zoneinfo, pfn: u64) -> Option<(u32, usize)> {
    zones.zones.iter().find_map(|z| {
        let start = z.populated.as_ref()?.start_pfn;
        let index = KERNEL_ZONE_NAMES.iter().position(|n| *n == z.zone)?;
        (start <= pfn && pfn < start + z.spanned).then_some((z.node, index))
    })
}

/// `r` with the parts inside `offline` (ascending, disjoint) as `hotplug`
/// ranges when `r` is RAM.
fn split_off(r: &MemRange, offline: &[(u64, u64)]) -> Vec<MemRange> {
    if r.kind != RangeKind::Ram {
        return vec![*r];
    }
    let (mut at, end) = (r.start.get(), r.end.get());
    let mut out = Vec::new();
    let piece = |s: u64, e: u64, kind| MemRange::new(s, e, kind, r.node);
    for &(s, e) in offline {
        let (s, e) = (s.max(at), e.min(end));
        if s >= e {
            continue;
        }
        if at < s {
            out.push(piece(at, s, RangeKind::Ram));
        }
        out.push(piece(s, e, RangeKind::Hotplug));
        at = e;
    }
    if at < end {
        out.push(piece(at, end, RangeKind::Ram));
    }
    out
}

/// `6.1.0-18-amd64 …` as `(6, 1, 0)`: the first word's first three runs
/// of digits, the third 0 when missing.
fn parse_release(text: &str) -> Option<(u32, u32, u32)> {
    let word = text.split_whitespace().next()?;
    let mut numbers = word.split(|c: char| !c.is_ascii_digit());
    let major = numbers.next()?.parse().ok()?;
    let minor = numbers.next()?.parse().ok()?;
    let sublevel = numbers.next().and_then(|n| n.parse().ok()).unwrap_or(0);
    Some((major, minor, sublevel))
}

#[cfg(test)]
mod tests;
