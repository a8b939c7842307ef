//! `pageblock_pfn_to_page` and `zone->contiguous`: the pageblock walkers'
//! validity check, and the flag that lets them skip it.
//!
//! Compaction, `alloc_contig_range` and friends walk a zone pageblock by
//! pageblock, and before touching a block ask `__pageblock_pfn_to_page`
//! (mm/page_alloc.c) whether its first and last pfn are valid, its first
//! pfn online, and both in this zone: a zone's span can contain holes and
//! other zones' pages. In 2016 (Joonsoo Kim, "mm/compaction: speed up
//! pageblock_pfn_to_page() when zone is contiguous") that check was half
//! the CPU time of a hugepage allocation workload; since then
//! `set_zone_contiguous` (mm/mm_init.c) runs the check once over the whole
//! zone, and where every pageblock passes `zone->contiguous` is set and
//! `pageblock_pfn_to_page` (mm/internal.h) becomes `pfn_to_page`.
//!
//! When the flag is recomputed follows the kernel's source order:
//! - at boot, for every populated zone (`page_alloc_init_late`);
//! - on online, in `move_pfn_range_to_zone`: cleared, the zone resized and
//!   the memmap initialised, then recomputed — before `online_pages_range`
//!   marks the new sections online (`online_mem_sections`), so the new
//!   range fails `pfn_to_online_page` and the zone reads non-contiguous
//!   until a later recompute (pfnlab's reading of the 6.x order; it is
//!   modelled by treating the range being onlined as not yet online);
//! - on offline, in `remove_pfn_range_from_zone`: cleared, the span shrunk
//!   at its edges, recomputed.
//!
//! One deviation, to stay safe Rust: on a contiguous zone pfnlab's
//! `pageblock_pfn_to_page` is the checked `pfn_to_page` (one `pfn_valid`
//! more than the kernel's bare `pfn_to_page`).

use sparsemem::{PageLayout, Pfn};

use crate::types::BuddyModel;
use crate::zone::Zone;

/// `__pageblock_pfn_to_page`: the page of `start` when `end - 1` is valid,
/// `start` is an online page of `zone`, and the page of `end - 1` has the
/// same zone; `None` otherwise (and for an empty range).
#[inline]
pub fn __pageblock_pfn_to_page<'m, M: BuddyModel, V>(
    model: &'m M,
    zone: &Zone<V, M::Page>,
    start: Pfn,
    end: Pfn,
) -> Option<&'m M::Page> {
    if end <= start {
        return None;
    }
    let last = model.pfn_to_page(end - 1)?;
    let first = model.pfn_to_online_page(start)?;
    if first.zone_id() != zone.id.get() || first.node_id() != zone.node.get() {
        return None;
    }
    (last.zone_id() == first.zone_id() && last.node_id() == first.node_id()).then_some(first)
}

/// `pageblock_pfn_to_page`: on a contiguous zone the page of `start`
/// (checked, see the module doc), else the full check
/// ([`__pageblock_pfn_to_page`]).
#[inline]
pub fn pageblock_pfn_to_page<'m, M: BuddyModel, V>(
    model: &'m M,
    zone: &Zone<V, M::Page>,
    start: Pfn,
    end: Pfn,
) -> Option<&'m M::Page> {
    if zone.contiguous {
        model.pfn_to_page(start)
    } else {
        __pageblock_pfn_to_page(model, zone, start, end)
    }
}

/// `set_zone_contiguous`'s test: every pageblock of the zone's span (the
/// first and last clamped to it) passes [`__pageblock_pfn_to_page`];
/// pfns of `not_yet_online` fail its online test, as a range being
/// onlined does when `move_pfn_range_to_zone` recomputes.
pub(crate) fn zone_is_contiguous<M: BuddyModel, V>(
    model: &M,
    zone: &Zone<V, M::Page>,
    not_yet_online: Option<[Pfn; 2]>,
) -> bool {
    let pageblock = model.geometry().pageblock_nr_pages();
    let (zone_start, zone_end) = (zone.start, zone.end);
    let mut block_start = zone_start;
    while block_start < zone_end {
        let block_end = Pfn::new((block_start.get() | (pageblock - 1)) + 1).min(zone_end);
        if not_yet_online.is_some_and(|[s, e]| s <= block_start && block_start < e)
            || __pageblock_pfn_to_page(model, zone, block_start, block_end).is_none()
        {
            return false;
        }
        block_start = block_end;
    }
    true
}

/// `set_zone_contiguous` (and `clear_zone_contiguous` before it): sets
/// the zone's flag from [`zone_is_contiguous`].
pub(crate) fn set_zone_contiguous<M: BuddyModel, V>(
    model: &M,
    zone: &mut Zone<V, M::Page>,
    not_yet_online: Option<[Pfn; 2]>,
) {
    zone.contiguous = false;
    zone.contiguous = zone_is_contiguous(model, zone, not_yet_online);
}

impl<V, P> Zone<V, P> {
    /// `zone->contiguous`: every pageblock of the span was found valid,
    /// online and in this zone at the last recompute.
    pub fn contiguous(&self) -> bool {
        self.contiguous
    }
}
