//! The TOML layout format.
//!
//! ```toml
//! geometry = "x86_64"      # optional; a preset name, or
//!                          # { page_shift = 12, section_size_bits = 27, max_physmem_bits = 46 }
//! [[range]]
//! start = 0x100000         # byte address, inclusive
//! end   = 0xc0000000       # byte address, exclusive
//! kind  = "ram"            # "ram", "hotplug" or "reserved"
//! node  = 0                # optional, default 0
//! memmap_on_memory = true  # optional, hotplug ranges only: each memory
//!                          # block's memmap in its own first pfns
//! ```
//!
//! Syntax errors are located by line and, when they fall inside a
//! `[[range]]` table, by the range's index (counted from 0 in file order).

use serde::Deserialize;

use super::{Layout, LayoutError, MemRange, RangeKind};
use crate::geometry::{CustomGeometry, Geometry};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLayout {
    geometry: Option<toml::Value>,
    #[serde(default)]
    range: Vec<FileRange>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRange {
    start: u64,
    end: u64,
    kind: RangeKind,
    #[serde(default)]
    node: u16,
    #[serde(default)]
    memmap_on_memory: bool,
}

pub(super) fn parse(text: &str, source: &str) -> Result<Layout, LayoutError> {
    let file: FileLayout = toml::from_str(text).map_err(|e| syntax_error(text, &e))?;
    let geometry = match file.geometry {
        None => Geometry::X86_64,
        Some(toml::Value::String(name)) => Geometry::by_name(&name)?,
        Some(v @ toml::Value::Table(_)) => {
            let custom: CustomGeometry =
                v.try_into()
                    .map_err(|e: toml::de::Error| LayoutError::Syntax {
                        range: None,
                        line: line_of(text, "geometry"),
                        message: format!("geometry: {}", e.message()),
                    })?;
            Geometry::from_custom(custom)?
        }
        Some(other) => {
            return Err(LayoutError::Syntax {
                range: None,
                line: line_of(text, "geometry"),
                message: format!(
                    "geometry must be a preset name or a table, not {}",
                    other.type_str()
                ),
            });
        }
    };
    let ranges = file
        .range
        .into_iter()
        .map(|r| {
            let range = MemRange::new(r.start, r.end, r.kind, r.node);
            if r.memmap_on_memory {
                range.with_memmap_on_memory()
            } else {
                range
            }
        })
        .collect();
    Layout::new(geometry, ranges, source)
}

fn syntax_error(text: &str, e: &toml::de::Error) -> LayoutError {
    let offset = e.span().map_or(0, |s| s.start).min(text.len());
    let line = text[..offset].matches('\n').count() + 1;
    // Count headers through the end of the error's line: an error about a
    // whole table (a missing field) points at its `[[range]]` header.
    let line_end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    let headers = text[..line_end]
        .lines()
        .filter(|l| l.trim_start().starts_with("[[range]]"))
        .count();
    LayoutError::Syntax {
        range: headers.checked_sub(1),
        line,
        message: e.message().trim().to_owned(),
    }
}

fn line_of(text: &str, key: &str) -> usize {
    text.lines()
        .position(|l| l.trim_start().starts_with(key))
        .map_or(1, |i| i + 1)
}
