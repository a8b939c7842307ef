//! Reading a real `/proc/zoneinfo` back into [`Zoneinfo`], in the format
//! of any release from 5.14 ([`ZoneinfoFormat`]): with or without `promo`
//! (6.12 on), with or without the pagesets' `high_min` and `high_max`
//! (6.13 on). The first zone decides the format, and every later zone
//! must follow it.
//!
//! The reader is strict, because a comparison with a half-read file would
//! be wrong without saying so: every line must be the one the kernel
//! prints next, each zone's fields in `zoneinfo_show_print`'s order, each
//! node's zones in `zone_type` order and the same zones on every node. A
//! file that stops early (or whose last line has no newline) is
//! [`ZoneinfoError::Truncated`]; a known line in the wrong place is
//! [`ZoneinfoError::OutOfOrder`]; a file in the format of a release
//! pfnlab does not read is [`ZoneinfoError::Unsupported`]; anything else
//! is [`ZoneinfoError::Malformed`]. Each names its line.

use std::fmt;

use super::zoneinfo::{KERNEL_ZONE_NAMES, Pageset, Populated, ZoneInfo, Zoneinfo, ZoneinfoFormat};
use crate::watermark::Watermarks;

/// Why a zoneinfo file could not be read; each names its 1-based line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZoneinfoError {
    /// The input ends where the kernel prints more.
    Truncated {
        /// The line after the last one read.
        line: usize,
        /// What was still to come.
        expected: String,
    },
    /// A line the kernel prints, but not here.
    OutOfOrder {
        /// The line.
        line: usize,
        /// What it is.
        found: String,
        /// What the kernel prints at this point.
        expected: String,
    },
    /// A zoneinfo in a format no release pfnlab reads prints.
    Unsupported {
        /// The line where it parts from the formats pfnlab reads.
        line: usize,
        /// The release it looks like.
        looks_like: String,
    },
    /// A line that is not zoneinfo at all.
    Malformed {
        /// The line.
        line: usize,
        /// Its text.
        text: String,
        /// What was expected.
        expected: String,
    },
}

impl fmt::Display for ZoneinfoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ZoneinfoError::Truncated { line, expected } => {
                write!(
                    f,
                    "zoneinfo is truncated at line {line}: expected {expected}"
                )
            }
            ZoneinfoError::OutOfOrder {
                line,
                found,
                expected,
            } => write!(
                f,
                "zoneinfo line {line}: `{found}` is out of order (expected {expected})"
            ),
            ZoneinfoError::Malformed {
                line,
                text,
                expected,
            } => write!(f, "zoneinfo line {line}: `{text}` is not {expected}"),
            ZoneinfoError::Unsupported { line, looks_like } => write!(
                f,
                "zoneinfo line {line}: this looks like {looks_like}; pfnlab reads the formats of Linux 5.14 to 6.18"
            ),
        }
    }
}

impl std::error::Error for ZoneinfoError {}

/// The watermark block's labels, in `zoneinfo_show_print`'s order.
const ZONE_FIELDS: [&str; 10] = [
    "pages free",
    "boost",
    "min",
    "low",
    "high",
    "promo",
    "spanned",
    "present",
    "managed",
    "cma",
];

/// A pageset's labels, in order.
const PAGESET_FIELDS: [&str; 5] = ["count:", "high:", "batch:", "high_min:", "high_max:"];

/// The lines of a file, with the position of the next.
struct Lines<'a> {
    lines: Vec<&'a str>,
    at: usize,
}

impl<'a> Lines<'a> {
    fn peek(&self) -> Option<&'a str> {
        self.lines.get(self.at).copied()
    }

    /// The 1-based number of the next line.
    fn line_no(&self) -> usize {
        self.at + 1
    }

    fn next(&mut self, expected: &str) -> Result<&'a str, ZoneinfoError> {
        let line = self.peek().ok_or_else(|| ZoneinfoError::Truncated {
            line: self.line_no(),
            expected: expected.to_owned(),
        })?;
        self.at += 1;
        Ok(line)
    }

    fn malformed(&self, text: &str, expected: &str) -> ZoneinfoError {
        ZoneinfoError::Malformed {
            line: self.at,
            text: text.to_owned(),
            expected: expected.to_owned(),
        }
    }

    /// The next line as `label value`, its label one of `labels` and the
    /// one at `want`; a label of the list found elsewhere is out of order.
    fn field(&mut self, labels: &[&str], want: usize) -> Result<u64, ZoneinfoError> {
        let expected = format!("`{}`", labels[want]);
        let line = self.next(&expected)?;
        let (label, value) = split_field(line).ok_or_else(|| self.malformed(line, &expected))?;
        if label != labels[want] {
            return Err(if labels.contains(&label.as_str()) || is_known(line) {
                ZoneinfoError::OutOfOrder {
                    line: self.at,
                    found: line.trim().to_owned(),
                    expected,
                }
            } else {
                self.malformed(line, &expected)
            });
        }
        value.parse().map_err(|_| self.malformed(line, &expected))
    }

    /// Lines of `      name value` (vmstat counters), as many as follow.
    fn stats(&mut self) -> Result<Vec<(String, u64)>, ZoneinfoError> {
        let mut stats = Vec::new();
        while let Some(line) = self.peek().filter(|l| is_stat(l)) {
            self.at += 1;
            let (name, value) = split_field(line)
                .and_then(|(n, v)| Some((n, v.parse().ok()?)))
                .ok_or_else(|| self.malformed(line, "a vmstat counter"))?;
            stats.push((name, value));
        }
        Ok(stats)
    }
}

/// `label value`: the label's words joined by one space, and the last
/// word.
fn split_field(line: &str) -> Option<(String, &str)> {
    let (label, value) = line.trim().rsplit_once(' ')?;
    let label = label.split_whitespace().collect::<Vec<_>>().join(" ");
    (!label.is_empty()).then_some((label, value))
}

/// A vmstat counter line: six spaces of indent, then a word.
fn is_stat(line: &str) -> bool {
    line.strip_prefix("      ")
        .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_alphabetic()))
}

/// Whether `line` is one zoneinfo prints somewhere (so, misplaced rather
/// than foreign).
fn is_known(line: &str) -> bool {
    let t = line.trim_start();
    line.starts_with("Node ")
        || t.starts_with("protection:")
        || t.starts_with("pagesets")
        || t.starts_with("cpu:")
        || t.starts_with("vm stats threshold:")
        || t.starts_with("node_unreclaimable:")
        || t.starts_with("start_pfn:")
        || ZONE_FIELDS.iter().chain(&PAGESET_FIELDS).any(|f| {
            t.strip_prefix(f)
                .is_some_and(|r| r.starts_with(' ') && !r.trim().contains(' '))
        })
        || is_stat(line)
}

/// What the first zone showed of the file's format: whether it prints
/// `promo` and, from its first pageset, `high_min` and `high_max`.
#[derive(Default)]
struct Layout {
    boost: Option<bool>,
    promo: Option<bool>,
    high_min_max: Option<bool>,
}

impl Layout {
    /// The format, once the file is read.
    fn format(&self) -> ZoneinfoFormat {
        match (self.promo == Some(true), self.high_min_max) {
            (true, Some(false)) => ZoneinfoFormat::V6_12,
            (true, _) => ZoneinfoFormat::V6_13,
            (false, _) if self.boost == Some(false) => ZoneinfoFormat::V5_14,
            (false, _) => ZoneinfoFormat::V5_16,
        }
    }
}

/// Parses a `/proc/zoneinfo` of Linux 5.14 or later; see the module
/// documentation for what is refused.
pub fn parse_zoneinfo(text: &str) -> Result<Zoneinfo, ZoneinfoError> {
    let mut lines = Lines {
        lines: text.lines().collect(),
        at: 0,
    };
    if lines.lines.is_empty() {
        return Err(ZoneinfoError::Truncated {
            line: 1,
            expected: "a `Node N, zone NAME` line".to_owned(),
        });
    }
    let mut layout = Layout::default();
    let mut info = Zoneinfo::default();
    while lines.peek().is_some() {
        let header_line = lines.line_no();
        let zone = parse_zone(&mut lines, &mut layout)?;
        check_zone_order(&info, &zone, header_line)?;
        info.zones.push(zone);
    }
    if !text.ends_with('\n') {
        return Err(ZoneinfoError::Truncated {
            line: lines.lines.len(),
            expected: "a newline at the end of the last line".to_owned(),
        });
    }
    check_complete(&info, lines.lines.len() + 1)?;
    info.format = layout.format();
    Ok(info)
}

/// A zone's header line: `Node N, zone NAME`.
fn parse_header(lines: &mut Lines<'_>) -> Result<(u32, String), ZoneinfoError> {
    let expected = "a `Node N, zone NAME` line";
    let line = lines.next(expected)?;
    let parsed = line.strip_prefix("Node ").and_then(|rest| {
        let (node, zone) = rest.split_once(", zone ")?;
        Some((node.parse().ok()?, zone.trim().to_owned()))
    });
    match parsed {
        Some((node, zone)) if !zone.is_empty() => Ok((node, zone)),
        _ if is_known(line) => Err(ZoneinfoError::OutOfOrder {
            line: lines.at,
            found: line.trim().to_owned(),
            expected: expected.to_owned(),
        }),
        _ => Err(lines.malformed(line, expected)),
    }
}

/// The label of line `line`, if it is `label value`.
fn label_of(line: Option<&str>) -> Option<String> {
    split_field(line?).map(|(label, _)| label)
}

/// Why the first zone's watermark block, which is not 5.14's or later's,
/// cannot be read: the release it looks like, from the lines it lacks.
/// `None` for a block that does not end in `protection:` (a truncated or
/// foreign file, which the strict reading reports).
fn older_than_supported(lines: &Lines<'_>) -> Option<ZoneinfoError> {
    let rest = lines.lines.get(lines.at..)?;
    let end = rest
        .iter()
        .take(ZONE_FIELDS.len() + 4)
        .position(|l| l.trim_start().starts_with("protection:"))?;
    let block: Vec<String> = rest[..end]
        .iter()
        .filter_map(|l| label_of(Some(l)))
        .collect();
    let missing = ["managed", "cma"]
        .into_iter()
        .find(|f| !block.iter().any(|l| l == f))?;
    Some(ZoneinfoError::Unsupported {
        line: lines.line_no(),
        looks_like: format!("a kernel older than 5.14 (its zones have no `{missing}` line)"),
    })
}

/// One zone, from its header to its last line.
fn parse_zone(lines: &mut Lines<'_>, layout: &mut Layout) -> Result<ZoneInfo, ZoneinfoError> {
    let (node, zone) = parse_header(lines)?;
    let node_stats = if lines.peek() == Some("  per-node stats") {
        lines.at += 1;
        Some(lines.stats()?)
    } else {
        None
    };
    if layout.promo.is_none()
        && let Some(err) = older_than_supported(lines)
    {
        return Err(err);
    }
    let mut v = [0u64; ZONE_FIELDS.len()];
    for (i, slot) in v.iter_mut().enumerate() {
        // A line only some releases print: the first zone decides.
        let label = ZONE_FIELDS[i];
        let printed = match label {
            "boost" => Some(&mut layout.boost),
            "promo" => Some(&mut layout.promo),
            _ => None,
        };
        if let Some(printed) = printed
            && !*printed.get_or_insert_with(|| label_of(lines.peek()).as_deref() == Some(label))
        {
            continue;
        }
        *slot = lines.field(&ZONE_FIELDS, i)?;
    }
    if layout.promo == Some(true) && layout.boost == Some(false) {
        return Err(ZoneinfoError::Unsupported {
            line: lines.line_no(),
            looks_like: "no release: zones with `promo` (6.12 on) and without `boost` (5.16 on)"
                .to_owned(),
        });
    }
    let protection = parse_protection(lines)?;
    let mut info = ZoneInfo {
        node,
        zone,
        node_stats,
        pages_free: v[0],
        boost: v[1],
        watermarks: Watermarks {
            min: v[2],
            low: v[3],
            high: v[4],
            promo: v[5],
        },
        spanned: v[6],
        present: v[7],
        managed: v[8],
        cma: v[9],
        protection,
        populated: None,
    };
    // `populated_zone`: present pages; the rest is printed only then.
    if info.present > 0 {
        info.populated = Some(parse_populated(lines, layout)?);
    }
    Ok(info)
}

/// `        protection: (a, b, …)`.
fn parse_protection(lines: &mut Lines<'_>) -> Result<Vec<u64>, ZoneinfoError> {
    let expected = "`protection: (…)`";
    let line = lines.next(expected)?;
    let Some(list) = line.trim().strip_prefix("protection: (") else {
        return Err(if is_known(line) {
            ZoneinfoError::OutOfOrder {
                line: lines.at,
                found: line.trim().to_owned(),
                expected: expected.to_owned(),
            }
        } else {
            lines.malformed(line, expected)
        });
    };
    list.strip_suffix(')')
        .and_then(|l| l.split(", ").map(|n| n.parse().ok()).collect())
        .ok_or_else(|| lines.malformed(line, expected))
}

/// The vmstat counters, pagesets and start pfn of a populated zone.
fn parse_populated(lines: &mut Lines<'_>, layout: &mut Layout) -> Result<Populated, ZoneinfoError> {
    let vm_stats = lines.stats()?;
    let expected = "`pagesets`";
    let line = lines.next(expected)?;
    if line != "  pagesets" {
        return Err(if is_known(line) {
            ZoneinfoError::OutOfOrder {
                line: lines.at,
                found: line.trim().to_owned(),
                expected: expected.to_owned(),
            }
        } else {
            lines.malformed(line, expected)
        });
    }
    let mut pagesets = Vec::new();
    while lines.peek().is_some_and(|l| l.starts_with("    cpu: ")) {
        pagesets.push(parse_pageset(lines, layout)?);
    }
    let node_unreclaimable = lines.field(&["node_unreclaimable:"], 0)? as u32;
    let start_pfn = lines.field(&["start_pfn:"], 0)?;
    Ok(Populated {
        vm_stats,
        pagesets,
        node_unreclaimable,
        start_pfn,
    })
}

/// One CPU's pageset and its vmstat threshold.
fn parse_pageset(lines: &mut Lines<'_>, layout: &mut Layout) -> Result<Pageset, ZoneinfoError> {
    let cpu = lines.field(&["cpu:"], 0)? as u32;
    let mut v = [0u64; PAGESET_FIELDS.len()];
    for (i, slot) in v.iter_mut().enumerate() {
        if PAGESET_FIELDS[i] == "high_min:" {
            let has = *layout
                .high_min_max
                .get_or_insert_with(|| label_of(lines.peek()).as_deref() == Some("high_min:"));
            if !has {
                break;
            }
            if layout.promo == Some(false) {
                return Err(ZoneinfoError::Unsupported {
                    line: lines.line_no(),
                    looks_like: "no release: pagesets with `high_min` (6.13 on) in zones without `promo` (6.12 on)".to_owned(),
                });
            }
        }
        *slot = lines.field(&PAGESET_FIELDS, i)?;
    }
    let printed = layout.high_min_max == Some(true);
    let stat_threshold = lines.field(&["vm stats threshold:"], 0)?;
    Ok(Pageset {
        cpu,
        count: v[0],
        high: v[1],
        batch: v[2],
        high_min: printed.then_some(v[3]),
        high_max: printed.then_some(v[4]),
        stat_threshold,
    })
}

/// Each node's zones come in `zone_type` order, nodes in increasing order.
fn check_zone_order(info: &Zoneinfo, zone: &ZoneInfo, line: usize) -> Result<(), ZoneinfoError> {
    let rank = |name: &str| KERNEL_ZONE_NAMES.iter().position(|n| *n == name);
    let Some(prev) = info.zones.last() else {
        return Ok(());
    };
    let misplaced = if zone.node == prev.node {
        match (rank(&prev.zone), rank(&zone.zone)) {
            (Some(a), Some(b)) => b <= a,
            _ => prev.zone == zone.zone,
        }
    } else {
        zone.node < prev.node
    };
    if misplaced {
        return Err(ZoneinfoError::OutOfOrder {
            line,
            found: format!("Node {}, zone {}", zone.node, zone.zone),
            expected: format!("the zones of node {} in zone_type order", zone.node),
        });
    }
    Ok(())
}

/// Every node lists the zones of the first, and a node's zones all end.
fn check_complete(info: &Zoneinfo, end_line: usize) -> Result<(), ZoneinfoError> {
    let first = info.zones[0].node;
    let names: Vec<&str> = info
        .zones
        .iter()
        .take_while(|z| z.node == first)
        .map(|z| z.zone.as_str())
        .collect();
    let mut node_zones = info.zones.chunk_by(|a, b| a.node == b.node);
    if let Some(short) = node_zones.find(|zones| zones.len() < names.len()) {
        return Err(ZoneinfoError::Truncated {
            line: end_line,
            expected: format!("zone {} of node {}", names[short.len()], short[0].node),
        });
    }
    Ok(())
}
