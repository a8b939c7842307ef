//! ZONE_MOVABLE at boot: where each node's movable zone starts, from the
//! `kernelcore=` and `movablecore=` boot parameters
//! (`find_zone_movable_pfns_for_nodes`, mm/mm_init.c; mm/page_alloc.c
//! before 6.4). Both parameters arrived with ZONE_MOVABLE in 2.6.23
//! (`2a1e274acf0b` "Create the ZONE_MOVABLE zone", and `movablecore=` in
//! the same series); their percentage forms in 4.17 (`a5c6d6509342` "mm,
//! page_alloc: extend kernelcore and movablecore for percent").
//!
//! Every era gets today's placement, with two later fixes the older eras
//! lacked: a `movablecore=` larger than memory is clamped to it (2015;
//! before, the kernelcore it left underflowed), and a ZONE_MOVABLE whose
//! rounded start is past the node's end is none (5.18, "don't create
//! ZONE_MOVABLE beyond the end of a node"). 2.6.23 also counted the
//! online nodes rather than the nodes with memory when spreading
//! `kernelcore`; pfnlab counts the nodes with memory in every era.
//!
//! Not modelled: `kernelcore=mirror` (mirrored memory) and
//! `movable_node` (hotpluggable ranges from the firmware), which take the
//! zone from firmware attributes a layout does not carry; with either the
//! kernel ignores the sizes, and [`MovableCore::from_cmdline`] says so.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use sparsemem::{Geometry, NodeId, Pfn};

use crate::Era;

/// The size a `kernelcore=` or `movablecore=` parameter asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoreSize {
    /// `memparse` bytes (`1G`, `512M`, `4096`): rounded down to pages.
    Bytes(u64),
    /// `nn%` of the RAM at boot (4.17 on). The kernel only warns above
    /// 100; [`str::parse`] refuses it, [`MovableCore::from_cmdline`]
    /// takes it as the kernel does.
    Percent(u64),
}

/// A `--kernelcore` or `--movablecore` value that is not a size or a
/// percentage up to 100 (stricter than the kernel, which reads a prefix
/// of anything and only warns above 100%).
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

    /// A percentage up to 100 (`25%`), or a size with an optional `K`,
    /// `M`, `G`, `T`, `P` or `E` suffix and nothing after it (`1G`,
    /// `0x40000000`). `mirror` is refused: pfnlab has no mirrored memory.
    fn from_str(s: &str) -> Result<CoreSize, ParseCoreSizeError> {
        let bad = |why: &str| ParseCoreSizeError(format!("`{s}`: {why}"));
        if s == "mirror" {
            return Err(bad(
                "kernelcore=mirror needs mirrored memory, which pfnlab does not model",
            ));
        }
        match cmdline_parse_core(s) {
            Some((CoreSize::Percent(p), "")) if p > 100 => Err(bad("a percentage above 100")),
            Some((size, "")) => Ok(size),
            _ => Err(bad("not a size (`1G`, `512M`) or a percentage (`25%`)")),
        }
    }
}

/// `simple_strtoull(s, &end, 0)`: a decimal, `0x` hex or `0` octal number
/// at the start of `s`, and the rest; `None` without a digit.
fn strtoull(s: &str) -> Option<(u64, &str)> {
    let (radix, digits) = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => (16, hex),
        None if s.len() > 1 && s.starts_with('0') => (8, &s[1..]),
        None => (10, s),
    };
    let end = digits
        .find(|c: char| !c.is_digit(radix))
        .unwrap_or(digits.len());
    if end == 0 {
        return (radix == 8).then_some((0, digits));
    }
    let n = u64::from_str_radix(&digits[..end], radix).ok()?;
    Some((n, &digits[end..]))
}

/// `cmdline_parse_core`: a number followed by `%` is a percentage, else
/// `memparse` (the number, and one `K`…`E` suffix); returns the size and
/// what follows it, which the kernel ignores.
fn cmdline_parse_core(s: &str) -> Option<(CoreSize, &str)> {
    let (n, rest) = strtoull(s)?;
    if let Some(rest) = rest.strip_prefix('%') {
        return Some((CoreSize::Percent(n), rest));
    }
    let shift = match rest.chars().next() {
        Some('K' | 'k') => 10,
        Some('M' | 'm') => 20,
        Some('G' | 'g') => 30,
        Some('T' | 't') => 40,
        Some('P' | 'p') => 50,
        Some('E' | 'e') => 60,
        _ => return Some((CoreSize::Bytes(n), rest)),
    };
    Some((
        CoreSize::Bytes(n.checked_shl(shift).filter(|v| v >> shift == n)?),
        &rest[1..],
    ))
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
            CoreSize::Percent(p) => total.saturating_mul(100).saturating_mul(p) / 10_000,
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
    /// The parameters of a kernel command line (`/proc/cmdline`), read as
    /// the kernel reads them: a value is a prefix (`4GB` is 4 GiB), a
    /// later one replaces an earlier one except that a `0%` leaves an
    /// earlier size, and a percentage above 100 is taken as it is. With
    /// `movable_node` or `kernelcore=mirror`, which decide the zone from
    /// firmware attributes, the kernel ignores both sizes; so does this,
    /// and the second value says why.
    pub fn from_cmdline(cmdline: &str) -> (MovableCore, Option<&'static str>) {
        let mut out = MovableCore::default();
        let mut ignored = None;
        for word in cmdline.split_whitespace() {
            if word == "--" {
                break;
            }
            if word == "movable_node" {
                ignored = Some(
                    "movable_node takes ZONE_MOVABLE from the firmware's hotpluggable memory, which pfnlab does not model",
                );
            } else if word == "kernelcore=mirror" {
                ignored = Some(
                    "kernelcore=mirror takes ZONE_MOVABLE from mirrored memory, which pfnlab does not model",
                );
            } else if let Some(v) = word.strip_prefix("kernelcore=") {
                set_from_cmdline(&mut out.kernelcore, v);
            } else if let Some(v) = word.strip_prefix("movablecore=") {
                set_from_cmdline(&mut out.movablecore, v);
            }
        }
        match ignored {
            Some(why) => (MovableCore::default(), Some(why)),
            None => (out, None),
        }
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

/// One `kernelcore=` or `movablecore=` value into `slot`, as
/// `cmdline_parse_core` stores it: a percentage leaves the size it does
/// not replace (so `0%` after `2G` keeps 2G), a size clears a percentage;
/// a value without a number is 0 bytes.
fn set_from_cmdline(slot: &mut Option<CoreSize>, value: &str) {
    let parsed = cmdline_parse_core(value).map_or(CoreSize::Bytes(0), |(c, _)| c);
    *slot = match (parsed, *slot) {
        (CoreSize::Percent(0), Some(CoreSize::Bytes(b))) => Some(CoreSize::Bytes(b)),
        (c, _) => Some(c),
    };
}

/// Each node's first ZONE_MOVABLE pfn, for the nodes that have one:
/// `find_zone_movable_pfns_for_nodes`. `ram` is each node's boot RAM as
/// `[start, end)` pfn ranges, ascending; `movable_zone_start` the lowest
/// pfn of the highest zone below ZONE_MOVABLE that has memory
/// (`arch_zone_lowest_possible_pfn[movable_zone]`): memory below it is
/// kernelcore whatever is asked.
pub(crate) fn zone_movable_pfns(
    params: MovableCore,
    ram: &BTreeMap<NodeId, Vec<(Pfn, Pfn)>>,
    movable_zone_start: Pfn,
    g: &Geometry,
) -> BTreeMap<NodeId, Pfn> {
    let max_order_pages = g.max_order_nr_pages();
    let total: u64 = ram.values().flatten().map(|(a, b)| b.get() - a.get()).sum();
    let mut required_kernelcore = params
        .kernelcore
        .map_or(0, |c| c.pages(total, g.page_shift()));
    let movable = params
        .movablecore
        .map_or(0, |c| c.pages(total, g.page_shift()));
    // A ZONE_MOVABLE at least as large as asked: whole MAX_ORDER blocks,
    // never more than all of memory; 0 asks for nothing.
    if movable > 0 {
        let movable = movable.next_multiple_of(max_order_pages).min(total);
        required_kernelcore = required_kernelcore.max(total - movable);
    }
    if required_kernelcore == 0 || required_kernelcore >= total {
        return BTreeMap::new();
    }
    // Spread kernelcore over the nodes as evenly as their memory allows;
    // what a node cannot hold is spread again over one node fewer.
    let mut start: BTreeMap<NodeId, u64> = ram.keys().map(|&n| (n, 0)).collect();
    let mut usable_nodes = ram.len() as u64;
    loop {
        let mut per_node = required_kernelcore / usable_nodes;
        for (node, ranges) in ram {
            if required_kernelcore < per_node {
                per_node = required_kernelcore / usable_nodes;
            }
            let movable_pfn = start.get_mut(node).expect("every node has an entry");
            let walk = NodeWalk {
                ranges,
                movable_zone_start: movable_zone_start.get(),
            };
            walk.take_kernelcore(per_node, movable_pfn, &mut required_kernelcore);
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
            let end = ram[&node].last().map_or(0, |r| r.1.get());
            // 0: the walk never reached the node (the kernel's "none").
            (pfn > 0 && pfn < end).then_some((node, Pfn::new(pfn)))
        })
        .collect()
}

/// One node's pass of the walk over its ranges.
struct NodeWalk<'a> {
    ranges: &'a [(Pfn, Pfn)],
    movable_zone_start: u64,
}

impl NodeWalk<'_> {
    /// Takes up to `share` pages of kernelcore from the node, above
    /// `movable_pfn` (where its last pass stopped), moving `movable_pfn`
    /// past them and counting them off `required`. Memory below the
    /// movable zone's start is kernelcore however it is counted.
    fn take_kernelcore(&self, share: u64, movable_pfn: &mut u64, required: &mut u64) {
        let mut remaining = share;
        for &(first, end) in self.ranges {
            let (mut first, end) = (first.get().max(*movable_pfn), end.get());
            if first >= end {
                continue;
            }
            if first < self.movable_zone_start {
                let kernel = end.min(self.movable_zone_start) - first;
                remaining -= kernel.min(remaining);
                *required -= kernel.min(*required);
                if end <= self.movable_zone_start {
                    *movable_pfn = end;
                    continue;
                }
                first = self.movable_zone_start;
            }
            let size = (end - first).min(remaining);
            *movable_pfn = first + size;
            *required -= size.min(*required);
            remaining -= size;
            if remaining == 0 {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_the_kernel_reads_them() {
        assert_eq!("1G".parse(), Ok(CoreSize::Bytes(1 << 30)));
        assert_eq!("512m".parse(), Ok(CoreSize::Bytes(512 << 20)));
        assert_eq!("4096".parse(), Ok(CoreSize::Bytes(4096)));
        assert_eq!("0x1000".parse(), Ok(CoreSize::Bytes(4096)));
        assert_eq!("010".parse(), Ok(CoreSize::Bytes(8)), "octal, as strtoull");
        assert_eq!("25%".parse(), Ok(CoreSize::Percent(25)));
        // The options are strict where the kernel reads a prefix.
        for bad in ["101%", "x%", "1Q", "", "G", "mirror", "4GB"] {
            assert!(bad.parse::<CoreSize>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_command_line_is_read_as_the_kernel_reads_it() {
        let (m, ignored) = MovableCore::from_cmdline(
            "console=ttyS0 movablecore=1G kernelcore=2G movablecore=2G -- movablecore=9G",
        );
        assert_eq!(ignored, None);
        assert_eq!(m.movablecore, Some(CoreSize::Bytes(2 << 30)));
        assert_eq!(m.kernelcore, Some(CoreSize::Bytes(2 << 30)));
        // A prefix, hex, a percentage over 100 (the kernel warns), and a
        // value without a number (0).
        let read = |line: &str| MovableCore::from_cmdline(line).0;
        assert_eq!(
            read("kernelcore=4GB").kernelcore,
            Some(CoreSize::Bytes(4 << 30))
        );
        assert_eq!(
            read("kernelcore=0x1000").kernelcore,
            Some(CoreSize::Bytes(4096))
        );
        assert_eq!(
            read("movablecore=150%").movablecore,
            Some(CoreSize::Percent(150))
        );
        assert_eq!(read("movablecore=x").movablecore, Some(CoreSize::Bytes(0)));
        // `0%` does not clear an earlier size; a size clears a percentage.
        assert_eq!(
            read("kernelcore=2G kernelcore=0%").kernelcore,
            Some(CoreSize::Bytes(2 << 30))
        );
        assert_eq!(
            read("kernelcore=50% kernelcore=2G").kernelcore,
            Some(CoreSize::Bytes(2 << 30))
        );
        assert!(!read("quiet").is_set());
        // Firmware-decided forms: the kernel ignores the sizes.
        for line in [
            "movablecore=1G movable_node",
            "kernelcore=mirror movablecore=1G",
        ] {
            let (m, why) = MovableCore::from_cmdline(line);
            assert!(!m.is_set() && why.is_some(), "{line}");
        }
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
    /// The 4 KiB page holding byte `bytes`.
    const fn pfn(bytes: u64) -> Pfn {
        Pfn::new(bytes >> 12)
    }

    fn place(line: &str, ram: &BTreeMap<NodeId, Vec<(Pfn, Pfn)>>) -> BTreeMap<NodeId, Pfn> {
        let (m, _) = MovableCore::from_cmdline(line);
        zone_movable_pfns(m, ram, pfn(4 * GIB), &Geometry::X86_64)
    }

    /// The guest booted with `movablecore=1G`: RAM 0-3 GiB and 4-5 GiB on
    /// one node. Everything below 4 GiB is kernelcore, and ZONE_MOVABLE is
    /// the whole of the RAM above it.
    #[test]
    fn movablecore_takes_the_top_of_a_node() {
        let ram = BTreeMap::from([(
            NodeId::ZERO,
            vec![(Pfn::new(1), pfn(3 * GIB)), (pfn(4 * GIB), pfn(5 * GIB))],
        )]);
        let zero = |line| place(line, &ram).get(&NodeId::ZERO).copied();
        assert_eq!(zero("movablecore=1G"), Some(pfn(4 * GIB)));
        assert_eq!(zero("movablecore=512M"), Some(pfn(4 * GIB + GIB / 2)));
        // More than the memory above 4 GiB cannot reach below it.
        assert_eq!(zero("movablecore=2G"), Some(pfn(4 * GIB)));
        // `movablecore=0` asks for nothing and leaves `kernelcore=` be.
        // (3 GiB less page 0, and 512 MiB.)
        assert_eq!(
            zero("kernelcore=3670012K movablecore=0"),
            Some(pfn(4 * GIB + GIB / 2))
        );
        // kernelcore= larger than memory, or 0: no ZONE_MOVABLE.
        for line in [
            "kernelcore=8G",
            "kernelcore=0",
            "movablecore=0",
            "movablecore=150%",
        ] {
            assert_eq!(zero(line), None, "{line}");
        }
    }

    /// `kernelcore=` spreads over the nodes evenly; a node too small for
    /// its share gives all it has, and what it lacks goes to the others
    /// on the next pass.
    #[test]
    fn kernelcore_spreads_over_the_nodes_and_moves_what_a_node_lacks() {
        let node1 = NodeId::try_new(1).unwrap();
        let two = |a: (u64, u64), b: (u64, u64)| {
            BTreeMap::from([
                (NodeId::ZERO, vec![(pfn(a.0), pfn(a.1))]),
                (node1, vec![(pfn(b.0), pfn(b.1))]),
            ])
        };
        let even = two((4 * GIB, 8 * GIB), (8 * GIB, 12 * GIB));
        let halves = BTreeMap::from([(NodeId::ZERO, pfn(5 * GIB)), (node1, pfn(9 * GIB))]);
        assert_eq!(place("kernelcore=2G", &even), halves);
        // A quarter of the 8 GiB: the same 2 GiB.
        assert_eq!(place("kernelcore=25%", &even), halves);

        // Node 0 has 512 MiB: it is all kernelcore, and node 1 gives the
        // other 3.5 GiB of the 4 asked for.
        let uneven = two((4 * GIB, 4 * GIB + GIB / 2), (8 * GIB, 12 * GIB));
        assert_eq!(
            place("kernelcore=4G", &uneven),
            BTreeMap::from([(node1, pfn(8 * GIB + 3 * GIB + GIB / 2))])
        );
    }
}
