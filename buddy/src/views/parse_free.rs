//! Reading a real `/proc/buddyinfo` and `/proc/pagetypeinfo` back into
//! [`BuddyInfo`] and [`PageTypeInfo`].
//!
//! As strict as the zoneinfo reader: every line is the one the kernel
//! prints there, each row has a count per order (the same orders on every
//! row), the migratetypes are pfnlab's five in the kernel's order (a
//! kernel with `CONFIG_CMA` prints a sixth, `CMA`, which no model zone
//! has: refused by name), and `pagetypeinfo`'s per-node headers agree.
//! A capped count (`>100000`) reads as [`FREECOUNT_CAP`]. Errors name
//! their 1-based line.

use std::fmt;

use sparsemem::{MIGRATE_TYPES, Migratetype};

use super::freeinfo::{BuddyInfo, FREECOUNT_CAP, PageTypeInfo, ZoneFree, ZoneTypes};

/// Why a buddyinfo or pagetypeinfo could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FreeinfoError {
    /// Which file (`buddyinfo`, `pagetypeinfo`).
    pub file: &'static str,
    /// The 1-based line (one past the last for a file that stops early).
    pub line: usize,
    /// What was wrong.
    pub why: String,
}

impl fmt::Display for FreeinfoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} line {}: {}", self.file, self.line, self.why)
    }
}

impl std::error::Error for FreeinfoError {}

/// `Node N, zone NAME` (with or without pagetypeinfo's padding) and the
/// rest of the line.
fn node_zone(line: &str) -> Option<(u32, String, &str)> {
    let rest = line.strip_prefix("Node")?;
    let (node, rest) = rest.split_once(',')?;
    let rest = rest.trim_start().strip_prefix("zone")?.trim_start();
    let end = rest.find([',', ' ']).unwrap_or(rest.len());
    Some((
        node.trim().parse().ok()?,
        rest[..end].to_owned(),
        &rest[end..],
    ))
}

/// Counts separated by spaces; `>100000` is the cap.
fn counts(text: &str) -> Option<Vec<u64>> {
    text.split_whitespace()
        .map(|n| match n.strip_prefix('>') {
            Some(capped) => capped.parse().ok().filter(|&c| c == FREECOUNT_CAP),
            None => n.parse().ok(),
        })
        .collect()
}

/// Parses a `/proc/buddyinfo`.
pub fn parse_buddyinfo(text: &str) -> Result<BuddyInfo, FreeinfoError> {
    let err = |line, why: &str| FreeinfoError {
        file: "buddyinfo",
        line,
        why: why.to_owned(),
    };
    let mut zones: Vec<ZoneFree> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let (node, zone, rest) =
            node_zone(line).ok_or_else(|| err(i + 1, "expected `Node N, zone NAME counts`"))?;
        let nr_free = counts(rest).ok_or_else(|| err(i + 1, "a count is not a number"))?;
        if zones
            .first()
            .is_some_and(|z| z.nr_free.len() != nr_free.len())
            || nr_free.is_empty()
        {
            return Err(err(i + 1, "not the same orders as the first zone"));
        }
        zones.push(ZoneFree {
            node,
            zone,
            nr_free,
        });
    }
    if zones.is_empty() || !text.ends_with('\n') {
        return Err(err(
            text.lines().count() + 1,
            "the file is empty or truncated",
        ));
    }
    Ok(BuddyInfo { zones })
}

/// The lines of a pagetypeinfo, numbered, with the error of a line.
struct Lines<'a> {
    lines: std::iter::Peekable<std::iter::Enumerate<std::str::Lines<'a>>>,
    at: usize,
}

impl<'a> Lines<'a> {
    fn err(&self, why: impl Into<String>) -> FreeinfoError {
        FreeinfoError {
            file: "pagetypeinfo",
            line: self.at,
            why: why.into(),
        }
    }

    fn next(&mut self, expected: &str) -> Result<&'a str, FreeinfoError> {
        self.at += 1;
        match self.lines.next() {
            Some((_, line)) => Ok(line),
            None => Err(self.err(format!("truncated: expected {expected}"))),
        }
    }

    /// The number after `label` on the next line.
    fn labelled(&mut self, label: &str) -> Result<u32, FreeinfoError> {
        let line = self.next(label)?;
        line.strip_prefix(label)
            .and_then(|n| n.trim().parse().ok())
            .ok_or_else(|| self.err(format!("expected `{label} N`, found `{line}`")))
    }

    fn is_done(&mut self) -> bool {
        self.lines.peek().is_none()
    }
}

/// Parses a `/proc/pagetypeinfo`.
pub fn parse_pagetypeinfo(text: &str) -> Result<PageTypeInfo, FreeinfoError> {
    let mut l = Lines {
        lines: text.lines().enumerate().peekable(),
        at: 0,
    };
    let mut info = PageTypeInfo::default();
    while !l.is_done() || info.zones.is_empty() {
        let order = l.labelled("Page block order:")?;
        if !info.zones.is_empty() && order != info.pageblock_order {
            return Err(l.err("another pageblock order than the first node's"));
        }
        info.pageblock_order = order;
        if l.labelled("Pages per block:")? != 1 << order {
            return Err(l.err("pages per block is not 2^order"));
        }
        node(&mut l, &mut info)?;
    }
    if !text.ends_with('\n') {
        return Err(l.err("truncated: the last line has no newline"));
    }
    Ok(info)
}

/// One node's part: its free counts, then its pageblock counts.
fn node(l: &mut Lines<'_>, info: &mut PageTypeInfo) -> Result<(), FreeinfoError> {
    let header = "Free pages count per migrate type at order";
    if !l.next("a blank line")?.is_empty() {
        return Err(l.err("expected a blank line"));
    }
    let line = l.next(header)?;
    let orders = line
        .strip_prefix(header)
        .and_then(counts)
        .ok_or_else(|| l.err(format!("expected `{header}`")))?
        .len();
    let first = info.zones.len();
    loop {
        let line = l.next("a zone's free counts")?;
        if line.is_empty() {
            break;
        }
        let (node, zone, rest) = node_zone(line).ok_or_else(|| l.err("expected `Node N, zone`"))?;
        let (name, rest) = rest
            .trim_start_matches(',')
            .trim_start()
            .strip_prefix("type")
            .map(str::trim_start)
            .and_then(|r| r.split_once(' '))
            .ok_or_else(|| l.err("expected `, type NAME`"))?;
        let mt = migratetype(name).ok_or_else(|| l.err(format!("unknown migratetype {name}")))?;
        let row = counts(rest)
            .filter(|r| r.len() == orders)
            .ok_or_else(|| l.err(format!("expected {orders} counts")))?;
        let at = match info.zones[first..]
            .iter()
            .position(|z| z.node == node && z.zone == zone)
        {
            Some(at) => first + at,
            None => {
                info.zones.push(ZoneTypes {
                    node,
                    zone,
                    free: std::array::from_fn(|_| Vec::new()),
                    blocks: [0; MIGRATE_TYPES],
                });
                info.zones.len() - 1
            }
        };
        let z = &mut info.zones[at];
        if mt.index() != z.free.iter().filter(|f| !f.is_empty()).count() {
            return Err(l.err(format!("{name} out of the kernel's migratetype order")));
        }
        z.free[mt.index()] = row;
    }
    blocks(l, info, first)
}

/// `Number of blocks type ...` and a row per zone of this node.
fn blocks(l: &mut Lines<'_>, info: &mut PageTypeInfo, first: usize) -> Result<(), FreeinfoError> {
    let line = l.next("`Number of blocks type`")?;
    let names: Vec<&str> = line
        .strip_prefix("Number of blocks type")
        .ok_or_else(|| l.err("expected `Number of blocks type`"))?
        .split_whitespace()
        .collect();
    let wanted: Vec<String> = Migratetype::ALL.iter().map(|m| m.to_string()).collect();
    if names != wanted {
        return Err(l.err(format!("migratetypes {names:?}, not pfnlab's {wanted:?}")));
    }
    for z in first..info.zones.len() {
        let line = l.next("a zone's pageblock counts")?;
        let (node, zone, rest) = node_zone(line).ok_or_else(|| l.err("expected `Node N, zone`"))?;
        let want = &info.zones[z];
        if (node, zone.as_str()) != (want.node, want.zone.as_str()) {
            return Err(l.err(format!(
                "pageblocks of node {node} {zone}, expected node {} {}",
                want.node, want.zone
            )));
        }
        if want.free.iter().any(Vec::is_empty) {
            return Err(l.err("a migratetype's free counts are missing"));
        }
        let row = counts(rest)
            .and_then(|r| <[u64; MIGRATE_TYPES]>::try_from(r).ok())
            .ok_or_else(|| l.err(format!("expected {MIGRATE_TYPES} counts")))?;
        info.zones[z].blocks = row;
    }
    Ok(())
}

fn migratetype(name: &str) -> Option<Migratetype> {
    Migratetype::ALL.into_iter().find(|m| m.to_string() == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGETYPEINFO: &str = include_str!("../../tests/data/pagetypeinfo/host-6.18-2cpu");
    const BUDDYINFO: &str = include_str!("../../tests/data/buddyinfo/host-6.18-2cpu");

    #[test]
    fn the_host_files_parse_and_render_back_byte_for_byte() {
        let types = parse_pagetypeinfo(PAGETYPEINFO).unwrap();
        assert_eq!(types.pageblock_order, 9);
        assert_eq!(types.zones.len(), 3);
        assert_eq!(types.to_string(), PAGETYPEINFO);
        let buddy = parse_buddyinfo(BUDDYINFO).unwrap();
        assert_eq!(buddy.to_string(), BUDDYINFO);
        assert_eq!(buddy.zones[2].zone, "Normal");
    }

    #[test]
    fn truncated_reordered_or_foreign_files_are_refused() {
        let cut = &PAGETYPEINFO[..PAGETYPEINFO.len() / 2];
        let e = parse_pagetypeinfo(cut).unwrap_err();
        assert!(e.to_string().starts_with("pagetypeinfo line "), "{e}");
        let swapped = PAGETYPEINFO.replacen("Unmovable", "Reclaimable", 1);
        assert!(parse_pagetypeinfo(&swapped).is_err());
        let cma = PAGETYPEINFO.replacen("Isolate", "CMA", 1);
        assert!(parse_pagetypeinfo(&cma).unwrap_err().why.contains("CMA"));
        assert!(parse_buddyinfo(&BUDDYINFO[..BUDDYINFO.len() - 1]).is_err());
        assert!(parse_buddyinfo("Node 0, zone DMA 1 x\n").is_err());
    }

    #[test]
    fn a_capped_count_reads_as_the_cap() {
        let row = counts(" >100000      3").unwrap();
        assert_eq!(row, [FREECOUNT_CAP, 3]);
        assert!(counts(">5").is_none());
    }
}
