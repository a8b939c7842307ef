//! ZONE_MOVABLE at boot: where each node's movable zone starts, from the
//! `kernelcore=` and `movablecore=` boot parameters
//! (`find_zone_movable_pfns_for_nodes`, mm/mm_init.c; mm/page_alloc.c
//! before 6.4). Both parameters arrived with ZONE_MOVABLE in 2.6.23
//! (`2a1e274acf0b` "Create the ZONE_MOVABLE zone", `7e63efef857`
//! "Add a movablecore= parameter for sizing ZONE_MOVABLE"); their
//! percentage forms in 4.17 (`a5c6d6509342` "mm, page_alloc: extend
//! kernelcore and movablecore for percent").
//!
//! Not modelled: `kernelcore=mirror` (mirrored memory) and
//! `movable_node` (hotpluggable ranges from the firmware), which decide
//! the zone from firmware attributes a layout does not carry.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use sparsemem::{Layout, NodeId};

use crate::Era;

/// The size a `kernelcore=` or `movablecore=` parameter asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoreSize {
    /// `memparse` bytes (`1G`, `512M`, `4096`): rounded down to pages.
    Bytes(u64),
    /// `nn%` of the RAM at boot (4.17 on), at most 100.
    Percent(u8),
}

/// A `kernelcore=` or `movablecore=` value the kernel would refuse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseCoreSizeError(String);

impl fmt::Display for ParseCoreSizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseCoreSizeError {}

impl FromStr for CoreSize {
    type Err = ParseCoreSizeError;

    /// `cmdline_parse_core`: a percentage up to 100, or a size with an
    /// optional `K`, `M`, `G`, `T`, `P` or `E` suffix (`memparse`).
    /// `mirror` is refused: pfnlab has no mirrored memory.
    fn from_str(s: &str) -> Result<CoreSize, ParseCoreSizeError> {
        let bad = |why: &str| ParseCoreSizeError(format!("`{s}`: {why}"));
        if s == "mirror" {
            return Err(bad(
                "kernelcore=mirror needs mirrored memory, which pfnlab does not model",
            ));
        }
        if let Some(p) = s.strip_suffix('%') {
            let p: u8 = p.parse().map_err(|_| bad("not a percentage"))?;
            return match p {
                0..=100 => Ok(CoreSize::Percent(p)),
                _ => Err(bad("a percentage above 100")),
            };
        }
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (digits, suffix) = s.split_at(split);
        let n: u64 = digits.parse().map_err(|_| bad("not a size"))?;
        let shift = match suffix {
            "" => 0,
            "K" | "k" => 10,
            "M" | "m" => 20,
            "G" | "g" => 30,
            "T" | "t" => 40,
            "P" | "p" => 50,
            "E" | "e" => 60,
            _ => return Err(bad("a size ends in K, M, G, T, P or E")),
        };
        n.checked_mul(1 << shift)
            .map(CoreSize::Bytes)
            .ok_or_else(|| bad("too large"))
    }
}

impl fmt::Display for CoreSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CoreSize::Bytes(b) => write!(f, "{b}"),
            CoreSize::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl CoreSize {
    /// The pages it asks for, of `total` boot pages, in pages of
    /// `page_shift` bits.
    fn pages(self, total: u64, page_shift: u32) -> u64 {
        match self {
            CoreSize::Bytes(b) => b >> page_shift,
            CoreSize::Percent(p) => total * 100 * u64::from(p) / 10_000,
        }
    }
}

/// `kernelcore=` and `movablecore=`, as a kernel command line gives them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MovableCore {
    /// `kernelcore=`: memory every allocation may use, spread over the
    /// nodes; the rest of each node is ZONE_MOVABLE.
    pub kernelcore: Option<CoreSize>,
    /// `movablecore=`: memory for ZONE_MOVABLE, turned into the
    /// `kernelcore` it leaves (the larger `kernelcore` wins when both are
    /// given).
    pub movablecore: Option<CoreSize>,
}

impl MovableCore {
    /// The parameters of a kernel command line (`/proc/cmdline`); the
    /// last of each wins, as `early_param` parsing leaves it.
    pub fn from_cmdline(cmdline: &str) -> Result<MovableCore, ParseCoreSizeError> {
        let mut out = MovableCore::default();
        for word in cmdline.split_whitespace() {
            if word == "--" {
                break;
            }
            if let Some(v) = word.strip_prefix("kernelcore=") {
                out.kernelcore = Some(v.parse()?);
            } else if let Some(v) = word.strip_prefix("movablecore=") {
                out.movablecore = Some(v.parse()?);
            }
        }
        Ok(out)
    }

    /// Whether either parameter is given.
    pub fn is_set(&self) -> bool {
        self.kernelcore.is_some() || self.movablecore.is_some()
    }

    /// Refuses parameters `era` did not have: both before 2.6.23, the
    /// percentages before 4.17.
    pub(crate) fn check_era(&self, era: Era) -> Result<(), crate::NotInEra> {
        let given = [self.kernelcore, self.movablecore];
        if self.is_set() && era.release() < (2, 6, 23) {
            return Err(crate::NotInEra::MovableCore {
                era,
                percent: false,
            });
        }
        let percent = given
            .iter()
            .flatten()
            .any(|c| matches!(c, CoreSize::Percent(_)));
        if percent && !era.since(4, 17) {
            return Err(crate::NotInEra::MovableCore { era, percent: true });
        }
        Ok(())
    }
}

/// Each node's first ZONE_MOVABLE pfn, for the nodes that have one:
/// `find_zone_movable_pfns_for_nodes`. `ram` is each node's boot RAM as
/// `[start, end)` pfn ranges, ascending; `movable_zone_start` the lowest
/// pfn of the highest zone below ZONE_MOVABLE that has memory
/// (`arch_zone_lowest_possible_pfn[movable_zone]`): memory below it is
/// kernelcore whatever is asked.
pub(crate) fn zone_movable_pfns(
    params: MovableCore,
    ram: &BTreeMap<NodeId, Vec<(u64, u64)>>,
    movable_zone_start: u64,
    layout: &Layout,
) -> BTreeMap<NodeId, u64> {
    let g = layout.geometry();
    let max_order_pages = g.max_order_nr_pages();
    let total: u64 = ram.values().flatten().map(|(a, b)| b - a).sum();
    let mut required_kernelcore = params
        .kernelcore
        .map_or(0, |c| c.pages(total, g.page_shift()));
    if let Some(m) = params.movablecore {
        // ZONE_MOVABLE at least as large as asked: rounded up to whole
        // MAX_ORDER blocks, and never more than all of memory.
        let movable = m
            .pages(total, g.page_shift())
            .next_multiple_of(max_order_pages)
            .min(total);
        required_kernelcore = required_kernelcore.max(total - movable);
    }
    let mut start: BTreeMap<NodeId, u64> = ram.keys().map(|&n| (n, 0)).collect();
    if required_kernelcore == 0 || required_kernelcore >= total {
        return BTreeMap::new();
    }
    // Spread kernelcore over the nodes as evenly as their memory allows;
    // what a node cannot hold is spread again over one node fewer.
    let mut usable_nodes = ram.len() as u64;
    loop {
        let mut per_node = required_kernelcore / usable_nodes;
        for (node, ranges) in ram {
            if required_kernelcore < per_node {
                per_node = required_kernelcore / usable_nodes;
            }
            let mut remaining = per_node;
            let movable_pfn = start.get_mut(node).expect("every node has an entry");
            for &(first, end) in ranges {
                let mut first = first.max(*movable_pfn);
                if first >= end {
                    continue;
                }
                // Memory below the movable zone's start is kernelcore
                // however it is counted.
                if first < movable_zone_start {
                    let kernel = end.min(movable_zone_start) - first;
                    remaining -= kernel.min(remaining);
                    required_kernelcore -= kernel.min(required_kernelcore);
                    if end <= movable_zone_start {
                        *movable_pfn = end;
                        continue;
                    }
                    first = movable_zone_start;
                }
                let size = (end - first).min(remaining);
                *movable_pfn = first + size;
                required_kernelcore -= size.min(required_kernelcore);
                remaining -= size;
                if remaining == 0 {
                    break;
                }
            }
        }
        usable_nodes -= 1;
        if usable_nodes == 0 || required_kernelcore <= usable_nodes {
            break;
        }
    }
    // Aligned up to a MAX_ORDER block; a start at or past the node's end
    // leaves the node without ZONE_MOVABLE.
    start
        .into_iter()
        .filter_map(|(node, pfn)| {
            let pfn = pfn.next_multiple_of(max_order_pages);
            let end = ram[&node].last().map_or(0, |r| r.1);
            // 0: the walk never reached the node (the kernel's "none").
            (pfn > 0 && pfn < end).then_some((node, pfn))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_the_kernel_reads_them() {
        assert_eq!("1G".parse(), Ok(CoreSize::Bytes(1 << 30)));
        assert_eq!("512m".parse(), Ok(CoreSize::Bytes(512 << 20)));
        assert_eq!("4096".parse(), Ok(CoreSize::Bytes(4096)));
        assert_eq!("25%".parse(), Ok(CoreSize::Percent(25)));
        for bad in ["101%", "x%", "1Q", "", "G", "mirror"] {
            assert!(bad.parse::<CoreSize>().is_err(), "{bad}");
        }
        let m = MovableCore::from_cmdline(
            "console=ttyS0 movablecore=1G kernelcore=2G movablecore=2G -- movablecore=9G",
        )
        .unwrap();
        assert_eq!(m.movablecore, Some(CoreSize::Bytes(2 << 30)));
        assert_eq!(m.kernelcore, Some(CoreSize::Bytes(2 << 30)));
        assert!(MovableCore::from_cmdline("movablecore=200%").is_err());
        assert!(!MovableCore::from_cmdline("quiet").unwrap().is_set());
    }

    #[test]
    fn eras_without_the_parameters_refuse_them() {
        let m = MovableCore {
            kernelcore: None,
            movablecore: Some(CoreSize::Percent(10)),
        };
        assert!(m.check_era(Era::V2_6_9).is_err());
        assert!(m.check_era(Era::V2_6_23).is_err());
        assert!(m.check_era(Era::V5_13).is_ok());
        let m = MovableCore {
            kernelcore: Some(CoreSize::Bytes(1 << 30)),
            movablecore: None,
        };
        assert!(m.check_era(Era::V2_6_23).is_ok());
        assert!(MovableCore::default().check_era(Era::V2_6_9).is_ok());
    }

    const GIB: u64 = 1 << 30;
    /// Pages of 4 KiB.
    const fn pfn(bytes: u64) -> u64 {
        bytes >> 12
    }

    /// The guest booted with `movablecore=1G`: RAM 0-3 GiB and 4-5 GiB on
    /// one node. The kernel's image and everything below 4 GiB is
    /// kernelcore, and ZONE_MOVABLE is the whole of the RAM above 4 GiB.
    #[test]
    fn movablecore_takes_the_top_of_a_node() {
        let layout = Layout::from_toml(
            "[[range]]\nstart = 0x1000\nend = 0xc0000000\nkind = \"ram\"\n\
             [[range]]\nstart = 0x100000000\nend = 0x140000000\nkind = \"ram\"\n",
        )
        .unwrap();
        let ram = BTreeMap::from([(
            NodeId::ZERO,
            vec![(1, pfn(3 * GIB)), (pfn(4 * GIB), pfn(5 * GIB))],
        )]);
        let m = MovableCore::from_cmdline("movablecore=1G").unwrap();
        let starts = zone_movable_pfns(m, &ram, pfn(4 * GIB), &layout);
        assert_eq!(starts, BTreeMap::from([(NodeId::ZERO, pfn(4 * GIB))]));
        // Half of it: the top 512 MiB.
        let m = MovableCore::from_cmdline("movablecore=512M").unwrap();
        let starts = zone_movable_pfns(m, &ram, pfn(4 * GIB), &layout);
        assert_eq!(starts[&NodeId::ZERO], pfn(4 * GIB + GIB / 2));
        // More than the memory above 4 GiB cannot reach below it.
        let m = MovableCore::from_cmdline("movablecore=2G").unwrap();
        assert_eq!(
            zone_movable_pfns(m, &ram, pfn(4 * GIB), &layout)[&NodeId::ZERO],
            pfn(4 * GIB)
        );
        // kernelcore= larger than memory, or 0: no ZONE_MOVABLE.
        for line in ["kernelcore=8G", "kernelcore=0", "movablecore=0"] {
            let m = MovableCore::from_cmdline(line).unwrap();
            assert!(
                zone_movable_pfns(m, &ram, pfn(4 * GIB), &layout).is_empty(),
                "{line}"
            );
        }
    }

    /// `kernelcore=` spreads over the nodes evenly; a node too small for
    /// its share gives all it has, and what it lacks goes to the others
    /// on the next pass.
    #[test]
    fn kernelcore_spreads_over_the_nodes_and_moves_what_a_node_lacks() {
        let layout = Layout::preset("x86-pci-hole").unwrap();
        let two = |a: (u64, u64), b: (u64, u64)| {
            BTreeMap::from([
                (NodeId::ZERO, vec![(pfn(a.0), pfn(a.1))]),
                (NodeId::try_new(1).unwrap(), vec![(pfn(b.0), pfn(b.1))]),
            ])
        };
        let even = two((4 * GIB, 8 * GIB), (8 * GIB, 12 * GIB));
        let m = MovableCore::from_cmdline("kernelcore=2G").unwrap();
        let starts = zone_movable_pfns(m, &even, pfn(4 * GIB), &layout);
        assert_eq!(
            starts.values().copied().collect::<Vec<_>>(),
            [pfn(5 * GIB), pfn(9 * GIB)]
        );
        // Half of all memory as a percentage: the same split.
        let m = MovableCore::from_cmdline("kernelcore=25%").unwrap();
        let starts = zone_movable_pfns(m, &even, pfn(4 * GIB), &layout);
        assert_eq!(
            starts.values().copied().collect::<Vec<_>>(),
            [pfn(5 * GIB), pfn(9 * GIB)]
        );

        // Node 0 has 512 MiB: it is all kernelcore, and node 1 gives the
        // other 3.5 GiB of the 4 asked for.
        let uneven = two((4 * GIB, 4 * GIB + GIB / 2), (8 * GIB, 12 * GIB));
        let m = MovableCore::from_cmdline("kernelcore=4G").unwrap();
        let starts = zone_movable_pfns(m, &uneven, pfn(4 * GIB), &layout);
        assert_eq!(
            starts,
            BTreeMap::from([(
                NodeId::try_new(1).unwrap(),
                pfn(8 * GIB + 3 * GIB + GIB / 2)
            )])
        );
    }
}
