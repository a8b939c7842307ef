//! The kernel's views of its zones — `/proc/zoneinfo`, `/proc/buddyinfo`
//! and `/proc/pagetypeinfo` — as values, from the model or from a real
//! machine's files, and rendered in the kernel's own formats.
//!
//! `mm/vmstat.c` prints, per node, every zone type the kernel was built
//! with (`zoneinfo_show_print`: populated or not, since the watermarks and
//! `lowmem_reserve` of an empty zone still say something), and only the
//! populated ones in `buddyinfo` (`frag_show_print`: `nr_free` per order)
//! and `pagetypeinfo` (`pagetypeinfo_showfree_print`: free blocks per
//! order and migratetype; `pagetypeinfo_showblockcount_print`: pageblocks
//! per migratetype). [`ZoneInfo`], [`BuddyInfo`] and [`PageTypeInfo`] hold
//! what those print; their `Display` writes it byte for byte as the
//! kernel does, and [`parse_zoneinfo`], [`parse_buddyinfo`] and
//! [`parse_pagetypeinfo`] read a real machine's files back (so a file
//! parsed and rendered again is the same bytes).
//!
//! The numbers the kernel computes rather than counts — the watermarks,
//! `lowmem_reserve` (printed as `protection`), each pageset's `batch`,
//! `high_min` and `high_max`, the vmstat threshold — follow from a few
//! inputs: the managed pages of every zone, the CPUs of each node, and the
//! `vm` sysctls. [`kernel_zone_sizes`] computes them from those inputs
//! alone, with the same formulas the allocator uses, so a machine's
//! zoneinfo can be held against them field by field.
//!
//! What the model's views leave out: the per-node and per-zone vmstat
//! counters other than `nr_free_pages` (pfnlab has no page cache, slab or
//! LRU), watermark boosting (`boost` is 0), CMA (`cma` is 0) and memblock
//! reservations (a model zone's `present` equals its `managed`; the
//! kernel's differs by the memory memblock kept, the memmap included).

mod diff;
mod freeinfo;
mod parse;
mod parse_free;
mod sizing;
mod zoneinfo;

pub use diff::{Cause, Difference, compare};
pub use freeinfo::{BuddyInfo, FREECOUNT_CAP, PageTypeInfo, ZoneFree, ZoneTypes};
pub use parse::{ZoneinfoError, parse_zoneinfo};
pub use parse_free::{FreeinfoError, parse_buddyinfo, parse_pagetypeinfo};
pub use sizing::{SizingInputs, ZoneSizes, kernel_zone_sizes};
pub use zoneinfo::{KERNEL_ZONE_NAMES, Pageset, Populated, ZoneInfo, Zoneinfo, ZoneinfoFormat};
