//! [`Snapshot::read`]: the machine's files under a root directory.
//!
//! Every file is read whole, as text; one that cannot be read is noted in
//! [`Snapshot::unreadable`] under its path on the machine and left out.
//! The directories (`/sys/firmware/memmap`, the nodes, the memory
//! blocks) are listed in numeric order, so the same machine gives the
//! same file.

use std::fs;
use std::path::{Path, PathBuf};

use buddy::views::{FREECOUNT_CAP, parse_buddyinfo, parse_pagetypeinfo};

use super::{
    FirmwareText, KernelId, MemoryBlockText, NodeText, ProcFiles, SNAPSHOT_FORMAT,
    SNAPSHOT_VERSION, Snapshot, SysctlText, Unreadable,
};

/// The reads of one snapshot: the root and what could not be read.
struct Reader<'a> {
    root: &'a Path,
    unreadable: Vec<Unreadable>,
}

impl Reader<'_> {
    fn path(&self, machine_path: &str) -> PathBuf {
        self.root.join(machine_path.trim_start_matches('/'))
    }

    /// The file at `machine_path`, or `None` noted as unreadable.
    fn text(&mut self, machine_path: &str) -> Option<String> {
        match fs::read_to_string(self.path(machine_path)) {
            Ok(text) => Some(text),
            Err(e) => {
                self.unreadable.push(Unreadable {
                    path: machine_path.to_owned(),
                    error: e.to_string(),
                });
                None
            }
        }
    }

    /// [`Reader::text`] without its trailing newline.
    fn line(&mut self, machine_path: &str) -> Option<String> {
        self.text(machine_path).map(|t| t.trim_end().to_owned())
    }

    /// The numbers `N` of the entries `{prefix}N` of a directory,
    /// ascending; an unreadable directory is noted and lists nothing.
    fn numbered(&mut self, machine_dir: &str, prefix: &str) -> Vec<u64> {
        let listing = match fs::read_dir(self.path(machine_dir)) {
            Ok(listing) => listing,
            Err(e) => {
                self.unreadable.push(Unreadable {
                    path: machine_dir.to_owned(),
                    error: e.to_string(),
                });
                return Vec::new();
            }
        };
        let mut ids: Vec<u64> = listing
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name();
                name.to_str()?.strip_prefix(prefix)?.parse().ok()
            })
            .collect();
        ids.sort_unstable();
        ids
    }
}

impl Snapshot {
    /// Reads the machine whose `/` is `root`, of architecture `arch` with
    /// `page_size`-byte pages (the reading process's own, for the live
    /// machine: neither is in a file every kernel has).
    pub fn read(root: &Path, arch: &str, page_size: u64) -> Snapshot {
        let mut r = Reader {
            root,
            unreadable: Vec::new(),
        };
        let kernel = KernelId {
            release: r.line("/proc/sys/kernel/osrelease"),
            version: r.line("/proc/version"),
            cmdline: r.line("/proc/cmdline"),
        };
        let cpus = r
            .line("/sys/devices/system/cpu/online")
            .and_then(|l| parse_cpulist(&l));
        let firmware_memmap = firmware_memmap(&mut r);
        let iomem = r.text("/proc/iomem");
        let memory_block_size = r.line("/sys/devices/system/memory/block_size_bytes");
        let nodes = nodes(&mut r);
        let memory_blocks = memory_blocks(&mut r);
        let (pagetypeinfo, buddyinfo) = free_pair(&mut r);
        let proc = ProcFiles {
            zoneinfo: r.text("/proc/zoneinfo"),
            buddyinfo,
            pagetypeinfo,
            meminfo: r.text("/proc/meminfo"),
            vmstat: r.text("/proc/vmstat"),
        };
        let sysctls = SysctlText {
            min_free_kbytes: r.line("/proc/sys/vm/min_free_kbytes"),
            watermark_scale_factor: r.line("/proc/sys/vm/watermark_scale_factor"),
            lowmem_reserve_ratio: r.line("/proc/sys/vm/lowmem_reserve_ratio"),
            percpu_pagelist_high_fraction: r.line("/proc/sys/vm/percpu_pagelist_high_fraction"),
            transparent_hugepage: r.line("/sys/kernel/mm/transparent_hugepage/enabled"),
        };
        Snapshot {
            format: SNAPSHOT_FORMAT.to_owned(),
            version: SNAPSHOT_VERSION,
            arch: arch.to_owned(),
            page_size,
            kernel,
            cpus,
            firmware_memmap,
            iomem,
            memory_block_size,
            nodes,
            memory_blocks,
            proc,
            sysctls,
            kernel_log: kernel_log(&mut r),
            unreadable: r.unreadable,
        }
    }
}

/// The kernel log's messages on the memory boot freed (`Freeing …`,
/// `RAMDISK: …`), from `/dev/kmsg` under the root: on a live machine the
/// device, read a record at a time without waiting until none is left
/// (root only), in a saved root a copy of it, or of `dmesg`'s output.
fn kernel_log(r: &mut Reader<'_>) -> Vec<String> {
    use std::io::{ErrorKind, Read};
    use std::os::unix::fs::OpenOptionsExt;
    let machine_path = "/dev/kmsg";
    let opened = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(r.path(machine_path));
    let mut bytes = Vec::new();
    let failed = |r: &mut Reader<'_>, e: std::io::Error| {
        r.unreadable.push(Unreadable {
            path: machine_path.to_owned(),
            error: e.to_string(),
        });
    };
    match opened {
        Ok(mut file) => {
            // A record is at most 8 KiB (`PRINTKRB_RECORD_MAX`).
            let mut buf = vec![0u8; 8192];
            loop {
                match file.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => bytes.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    // Overwritten while read: the next record follows.
                    Err(e) if e.raw_os_error() == Some(nix::libc::EPIPE) => continue,
                    Err(e) => {
                        failed(r, e);
                        break;
                    }
                }
            }
        }
        Err(e) => failed(r, e),
    }
    boot_memory_messages(&String::from_utf8_lossy(&bytes))
}

/// The messages of a kernel log (`/dev/kmsg` records, `pri,seq,usec,…;msg`,
/// or `dmesg` lines, `[ seconds] msg`) on the memory boot freed.
pub(super) fn boot_memory_messages(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| !l.starts_with(' '))
        .map(|l| match l.split_once(';') {
            Some((head, msg)) if head.split(',').count() >= 3 => msg,
            _ => l.split_once("] ").map_or(l, |(_, msg)| msg),
        })
        .filter(|m| m.starts_with("Freeing ") || m.starts_with("RAMDISK: "))
        .map(str::to_owned)
        .collect()
}

/// Pairs of `/proc/pagetypeinfo` and `/proc/buddyinfo` read back to back
/// before one is taken as the other's.
const FREE_PAIR_TRIES: usize = 8;

/// `/proc/pagetypeinfo` and `/proc/buddyinfo`: two reads of free lists
/// that change between them, so read in pairs (up to
/// [`FREE_PAIR_TRIES`]) until buddyinfo's counts are pagetypeinfo's sums
/// over the migratetypes, the pair then showing one state; the last pair
/// otherwise.
fn free_pair(r: &mut Reader<'_>) -> (Option<String>, Option<String>) {
    let (types, buddy) = ("/proc/pagetypeinfo", "/proc/buddyinfo");
    for _ in 1..FREE_PAIR_TRIES {
        let pair = (
            fs::read_to_string(r.path(types)),
            fs::read_to_string(r.path(buddy)),
        );
        match pair {
            (Ok(t), Ok(b)) if consistent(&t, &b) => return (Some(t), Some(b)),
            (Ok(_), Ok(_)) => continue,
            _ => break,
        }
    }
    (r.text(types), r.text(buddy))
}

/// Whether buddyinfo's `nr_free` is, zone by zone and order by order,
/// the sum of pagetypeinfo's free counts (a capped count is a lower
/// bound).
fn consistent(types: &str, buddy: &str) -> bool {
    let (Ok(types), Ok(buddy)) = (parse_pagetypeinfo(types), parse_buddyinfo(buddy)) else {
        return false;
    };
    types.zones.len() == buddy.zones.len()
        && types.zones.iter().zip(&buddy.zones).all(|(t, b)| {
            (t.node, &t.zone) == (b.node, &b.zone)
                && b.nr_free.iter().enumerate().all(|(o, &n)| {
                    let sum: u64 = t.free.iter().map(|f| f.get(o).copied().unwrap_or(0)).sum();
                    let capped = t.free.iter().any(|f| f.get(o) == Some(&FREECOUNT_CAP));
                    sum == n || (capped && sum <= n)
                })
        })
}

/// `/sys/firmware/memmap/N/{start,end,type}`, entries with a file
/// missing left out (and noted).
fn firmware_memmap(r: &mut Reader<'_>) -> Vec<FirmwareText> {
    let dir = "/sys/firmware/memmap";
    let mut out = Vec::new();
    for n in r.numbered(dir, "") {
        let file = |name: &str| format!("{dir}/{n}/{name}");
        let (Some(start), Some(end), Some(kind)) = (
            r.line(&file("start")),
            r.line(&file("end")),
            r.line(&file("type")),
        ) else {
            continue;
        };
        out.push(FirmwareText {
            index: n as u32,
            start,
            end,
            kind,
        });
    }
    out
}

/// `/sys/devices/system/node/nodeN`: its CPUs and memory-block links.
fn nodes(r: &mut Reader<'_>) -> Vec<NodeText> {
    let dir = "/sys/devices/system/node";
    r.numbered(dir, "node")
        .into_iter()
        .map(|n| {
            let node_dir = format!("{dir}/node{n}");
            NodeText {
                id: n as u16,
                cpulist: r.line(&format!("{node_dir}/cpulist")),
                memory_blocks: r.numbered(&node_dir, "memory"),
            }
        })
        .collect()
}

/// `/sys/devices/system/memory/memoryN`: state and zones.
fn memory_blocks(r: &mut Reader<'_>) -> Vec<MemoryBlockText> {
    let dir = "/sys/devices/system/memory";
    r.numbered(dir, "memory")
        .into_iter()
        .map(|m| MemoryBlockText {
            id: m,
            state: r.line(&format!("{dir}/memory{m}/state")),
            valid_zones: r.line(&format!("{dir}/memory{m}/valid_zones")),
        })
        .collect()
}

/// How many CPUs a kernel cpulist (`0-3,8,10-11`) names; `None` when it
/// is not one.
pub fn parse_cpulist(text: &str) -> Option<u32> {
    let text = text.trim();
    if text.is_empty() {
        return Some(0);
    }
    text.split(',').try_fold(0u32, |n, part| {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
        (a <= b).then(|| n + (b - a + 1))
    })
}
