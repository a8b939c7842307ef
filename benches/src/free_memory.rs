//! An allocator's free memory at one point, as a kernel engineer reads
//! it off a machine to judge fragmentation: the samples `bench frag`
//! ([`crate::frag`]) and a replay ([`crate::trace::replay`]) take.
//!
//! A [`FragSample`] is taken from the model's own state:
//! - free blocks per order and migratetype (`/proc/pagetypeinfo`);
//! - the free memory held in whole free huge frames (blocks of
//!   `pageblock_order` or more), as a share of free memory: what a THP
//!   fault or a hugetlb allocation can have without compaction;
//! - the unusable-free index and the fragmentation index per order
//!   (`/sys/kernel/debug/extfrag/unusable_index` and `extfrag_index`,
//!   mm/vmstat.c: `unusable_free_index` and `__fragmentation_index` over
//!   `fill_contig_page_info`). The kernel prints them per zone; a sample
//!   computes them the same way over the free blocks of every zone
//!   together, so one number describes the machine;
//! - pageblocks holding a live allocation of another migratetype than the
//!   pageblock's (the count `/proc/pagetypeinfo` prints as "mixed" with
//!   `page_owner`, `pagetypeinfo_showmixedcount_print`);
//! - fallbacks by kind, as `mm_page_alloc_extfrag` tells them apart
//!   ([`FallbackKinds`]).

use serde::Serialize;
use sparsemem::{MIGRATE_TYPES, NR_PAGE_ORDERS, Order, Pfn};

/// Fallbacks (`__rmqueue_fallback`) by what they did to the pageblock,
/// the distinctions `mm_page_alloc_extfrag` draws with its
/// `fallback_order < pageblock_order` ("fragmenting") and
/// `change_ownership` fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FallbackKinds {
    /// A free block of a pageblock or more taken and claimed whole: not
    /// fragmenting.
    pub whole_block: u64,
    /// A smaller block whose pageblock was claimed (enough of it was free
    /// to move it to the request's migratetype): fragmenting, with the
    /// ownership changed.
    pub claimed: u64,
    /// A smaller block used where it is, its pageblock keeping its
    /// migratetype: fragmenting, ownership unchanged. These are what mix
    /// pageblocks.
    pub stolen: u64,
}

impl FallbackKinds {
    /// The kinds from a buddy's counters.
    pub fn of(stats: &buddy::ZoneStats) -> FallbackKinds {
        let claimed = stats.steals;
        let whole_block = stats.whole_block_claims;
        FallbackKinds {
            whole_block,
            claimed,
            stolen: stats.fallbacks.saturating_sub(claimed + whole_block),
        }
    }

    /// Every fallback.
    pub fn total(&self) -> u64 {
        self.whole_block + self.claimed + self.stolen
    }
}

/// The allocator's free memory at one point of a workload.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FragSample {
    /// The workload's iteration it was taken after (0: before the
    /// first).
    pub iteration: u32,
    /// Allocations and frees done when it was taken.
    pub ops: u64,
    /// Free base pages.
    pub free_pages: u64,
    /// Free huge frames: free memory in blocks of `pageblock_order` or
    /// more, in pageblocks.
    pub free_huge_frames: u64,
    /// Huge frames the allocator's memory makes (its pages over a
    /// pageblock's).
    pub huge_frames: u64,
    /// [`FragSample::free_huge_frames`]' pages as a share of free pages
    /// (0 when nothing is free).
    pub free_huge_share: f64,
    /// Free blocks per order (outer) and migratetype (inner, by
    /// [`sparsemem::Migratetype::index`]); a buddy without migratetypes
    /// lists them all as Movable. `None` for an allocator without free
    /// lists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub free_blocks: Option<Vec<[u64; MIGRATE_TYPES]>>,
    /// The unusable-free index per order, 0 to 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unusable_index: Option<Vec<f64>>,
    /// The fragmentation index per order: -1 when a block of the order is
    /// free, else 0 (lack of memory) to 1 (fragmentation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extfrag_index: Option<Vec<f64>>,
    /// Pageblocks holding a live allocation of another migratetype (for
    /// LLFree, which has no pageblock types: huge frames holding live
    /// allocations of both classes).
    pub mixed_pageblocks: u64,
    /// Fallbacks so far, by kind (`None` for LLFree, which has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallbacks: Option<FallbackKinds>,
}

/// `unusable_free_index`: the share of free memory that cannot serve a
/// request of `order`, 0 to 1 (1 when nothing is free, as the kernel
/// prints 1.000).
pub fn unusable_free_index(nr_free: &[u64], order: usize) -> f64 {
    let info = buddy::fill_contig_page_info(nr_free, order);
    let pages = info.free_pages;
    if pages == 0 {
        return 1.0;
    }
    // The kernel's integer thousandths, printed `%d.%03d`.
    let thousandths = (pages - (info.free_blocks_suitable << order)) * 1000 / pages;
    thousandths as f64 / 1000.0
}

/// `__fragmentation_index`: -1 when a block of `order` is free, 0 when
/// nothing is free, else how much of the failure is fragmentation (near 1)
/// rather than lack of memory (near 0). An order above
/// `MAX_PAGE_ORDER_LIMIT` reads as that order.
pub fn fragmentation_index(nr_free: &[u64], order: usize) -> f64 {
    let order = Order::saturating(u8::try_from(order).unwrap_or(u8::MAX));
    // The kernel's integer thousandths (`buddy::fragmentation_index`).
    f64::from(buddy::fragmentation_index(nr_free, order)) / 1000.0
}

impl FragSample {
    /// Wholly free huge frames as a share of all the allocator's huge
    /// frames (0 when it has none).
    pub fn free_huge_of_all(&self) -> f64 {
        share(self.free_huge_frames, self.huge_frames)
    }
}

/// A live allocation of a workload: where, how big, of which migratetype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Live {
    /// Its first page.
    pub pfn: Pfn,
    /// Its order.
    pub order: Order,
    /// The migratetype it was asked for.
    pub migratetype: sparsemem::Migratetype,
}

impl From<(Pfn, Order, sparsemem::Migratetype)> for Live {
    /// A replay's held block: its first page, order and migratetype.
    fn from((pfn, order, migratetype): (Pfn, Order, sparsemem::Migratetype)) -> Live {
        Live {
            pfn,
            order,
            migratetype,
        }
    }
}

/// A sample of a buddy allocator after `ops` operations, with `live` the
/// allocations the workload holds (for the mixed pageblocks).
pub fn sample_buddy<M: buddy::BuddyModel, V: buddy::Variant>(
    alloc: &buddy::Allocator<M, V>,
    ops: u64,
    live: &[Live],
) -> FragSample {
    let pageblock_order = alloc.model().geometry().pageblock_order().index();
    let info = alloc.pagetypeinfo();
    let mut free_blocks = vec![[0u64; MIGRATE_TYPES]; NR_PAGE_ORDERS];
    for zone in &info.zones {
        for (mt, per_order) in zone.free.iter().enumerate() {
            for (o, &n) in per_order.iter().enumerate() {
                free_blocks[o][mt] += n;
            }
        }
    }
    let nr_free: Vec<u64> = free_blocks.iter().map(|m| m.iter().sum()).collect();
    let free_pages: u64 = nr_free.iter().enumerate().map(|(o, n)| n << o).sum();
    let free_huge_frames: u64 = nr_free
        .iter()
        .enumerate()
        .skip(pageblock_order)
        .map(|(o, n)| n << (o - pageblock_order))
        .sum();
    let orders = 0..nr_free.len();
    let mixed = mixed_pageblocks(live, pageblock_order, |pfn| {
        alloc.model().get_pfnblock_migratetype(pfn)
    });
    FragSample {
        iteration: 0,
        ops,
        free_pages,
        free_huge_frames,
        huge_frames: alloc.managed_pages_total() >> pageblock_order,
        free_huge_share: share(free_huge_frames << pageblock_order, free_pages),
        unusable_index: Some(
            orders
                .clone()
                .map(|o| unusable_free_index(&nr_free, o))
                .collect(),
        ),
        extfrag_index: Some(orders.map(|o| fragmentation_index(&nr_free, o)).collect()),
        free_blocks: Some(free_blocks),
        mixed_pageblocks: mixed,
        fallbacks: Some(FallbackKinds::of(&alloc.stats_total())),
    }
}

/// A sample of LLFree after `ops` operations.
pub fn sample_llfree(llfree: &buddy::llfree::LLFree, ops: u64, live: &[Live]) -> FragSample {
    let huge_order = u32::from(buddy::llfree::HUGE_ORDER);
    let free_pages = llfree.free_frames();
    let free_huge_frames = llfree.free_huge_frames();
    let mut frames: std::collections::HashMap<u64, u8> = std::collections::HashMap::new();
    for l in live {
        let class = 1u8 << (buddy::llfree::Class::of(l.migratetype) as u8);
        *frames.entry(l.pfn.get() >> huge_order).or_default() |= class;
    }
    FragSample {
        iteration: 0,
        ops,
        free_pages,
        free_huge_frames,
        huge_frames: llfree.nr_frames() >> huge_order,
        free_huge_share: share(free_huge_frames << huge_order, free_pages),
        free_blocks: None,
        unusable_index: None,
        extfrag_index: None,
        mixed_pageblocks: frames.values().filter(|&&c| c == 0b11).count() as u64,
        fallbacks: None,
    }
}

/// Pageblocks with a live allocation whose migratetype is not the
/// pageblock's (`block_type`).
fn mixed_pageblocks(
    live: &[Live],
    pageblock_order: usize,
    block_type: impl Fn(Pfn) -> sparsemem::Migratetype,
) -> u64 {
    let mut mixed = std::collections::BTreeSet::new();
    for l in live {
        let block = l.pfn.get() >> pageblock_order;
        if !mixed.contains(&block) && block_type(l.pfn) != l.migratetype {
            mixed.insert(block);
        }
    }
    mixed.len() as u64
}

/// `part / whole`, 0 when `whole` is 0.
fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_indices_read_as_the_kernels_debugfs_files() {
        // 8 free order-0 pages, 2 free order-2 blocks: 16 pages free.
        let nr_free = [8, 0, 2, 0];
        assert_eq!(unusable_free_index(&nr_free, 0), 0.0);
        // Order 2: the 8 single pages (half the free memory) are unusable.
        assert_eq!(unusable_free_index(&nr_free, 2), 0.5);
        assert_eq!(unusable_free_index(&nr_free, 3), 1.0);
        assert_eq!(fragmentation_index(&nr_free, 2), -1.0);
        // Order 3: 1000 - (1000 + 16 * 1000 / 8) / 10 = 700.
        assert_eq!(fragmentation_index(&nr_free, 3), 0.7);
        assert_eq!(fragmentation_index(&[0, 0], 1), 0.0);
        // One free page asked for as a pair: the kernel's int goes
        // below zero (1000 - 1500).
        assert_eq!(fragmentation_index(&[1, 0], 1), -0.5);
        assert_eq!(unusable_free_index(&[0, 0], 1), 1.0);
    }

    #[test]
    fn a_pageblock_is_mixed_once_whatever_it_holds() {
        let live = |pfn, mt| Live {
            pfn: Pfn::new(pfn),
            order: Order::ZERO,
            migratetype: mt,
        };
        use sparsemem::Migratetype::{Movable, Unmovable};
        let held = [
            live(0, Movable),
            live(1, Unmovable),
            live(2, Unmovable),
            live(512, Movable),
        ];
        // Every pageblock is Movable: block 0 holds two Unmovable pages.
        assert_eq!(mixed_pageblocks(&held, 9, |_| Movable), 1);
        assert_eq!(mixed_pageblocks(&held, 9, |_| Unmovable), 2);
    }
}
