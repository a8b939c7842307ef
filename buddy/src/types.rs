//! The allocator's vocabulary: zone types and ids, the statistics a zone
//! keeps, and the limits every layer checks against.
//!
//! A leaf: it imports nothing of the crate, so the GFP decoding, the
//! watermark formulas, the errors and the zones can all name a zone type
//! or a limit without importing the code that uses them.

use sparsemem::{BuddyPage, MIGRATE_PCPTYPES, MemoryModel, NR_PAGE_ORDERS};

/// A memory model the allocator can run on: one whose `struct page` holds
/// the free-list links, the order and the counts itself ([`BuddyPage`]:
/// the 64- and 32-byte layouts). Every model is one at those sizes; the
/// same models built at 16 or 8 bytes are not, so an allocator of them
/// does not compile. The one place the allocator names the layouts it
/// needs; `Allocator<M, V>` with `M::Page = P` is the allocator at layout
/// `P`.
pub trait BuddyModel: MemoryModel<Page: BuddyPage> {}

impl<M: MemoryModel<Page: BuddyPage> + ?Sized> BuddyModel for M {}

/// `MAX_NR_ZONES`: the number of zone types ([`ZoneType::ALL`]), the
/// length of a zone's `lowmem_reserve[]`.
pub const MAX_NR_ZONES: usize = ZoneType::ALL.len();

/// `PAGE_ALLOC_COSTLY_ORDER` (include/linux/mmzone.h): the highest order
/// the allocator tries hard for (its retries) and, in 6.x, of the
/// low-order per-CPU lists.
pub const PAGE_ALLOC_COSTLY_ORDER: u8 = 3;

/// Zone types, lowest first (`enum zone_type`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub enum ZoneType {
    /// Below 16 MiB.
    Dma,
    /// Below 4 GiB.
    Dma32,
    /// Everything else that booted.
    Normal,
    /// Hot-added memory onlined movable, and the top of each node's boot
    /// memory with `kernelcore=` or `movablecore=`.
    Movable,
}

impl ZoneType {
    /// Every zone type, lowest first.
    pub const ALL: [ZoneType; 4] = [
        ZoneType::Dma,
        ZoneType::Dma32,
        ZoneType::Normal,
        ZoneType::Movable,
    ];

    /// The kernel's name.
    pub fn name(self) -> &'static str {
        match self {
            ZoneType::Dma => "DMA",
            ZoneType::Dma32 => "DMA32",
            ZoneType::Normal => "Normal",
            ZoneType::Movable => "Movable",
        }
    }
}

/// Zone statistics. Plain counters: the buddy-path ones live in the free
/// area and change only under the zone lock; the per-CPU path counts in its
/// handle and folds in when it next takes the lock (as the kernel's per-CPU
/// vm events are folded), so no counter costs an atomic operation.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct ZoneStats {
    /// Blocks allocated, per order.
    pub allocs: [u64; NR_PAGE_ORDERS],
    /// Blocks freed, per order.
    pub frees: [u64; NR_PAGE_ORDERS],
    /// Buddy merges.
    pub merges: u64,
    /// Block splits in `expand`.
    pub splits: u64,
    /// `rmqueue_bulk` calls (pcp refills).
    pub pcp_refills: u64,
    /// `free_pcppages_bulk` calls (pcp drains).
    pub pcp_drains: u64,
    /// Blocks moved from the zone to per-CPU lists by refills (one
    /// `mm_page_alloc_zone_locked` event with `percpu_refill=1` each in
    /// the kernel).
    pub pcp_refill_blocks: u64,
    /// Blocks moved back by drains (one `mm_page_pcpu_drain` event each).
    pub pcp_drain_blocks: u64,
    /// `pfn_valid` calls made by the hole check.
    pub hole_checks: u64,
    /// Allocations served from another migratetype's lists
    /// (`__rmqueue_fallback`).
    pub fallbacks: u64,
    /// Pageblocks claimed for another migratetype (`move_freepages_block`)
    /// from a free block smaller than a pageblock.
    pub steals: u64,
    /// Fallbacks that took a free block of a pageblock or more and
    /// claimed all of it (`change_pageblock_range`): the only kind that
    /// `mm_page_alloc_extfrag` does not call fragmenting.
    pub whole_block_claims: u64,
    /// Fallbacks that used a block smaller than a pageblock where it was,
    /// leaving another migratetype's page in its pageblock (the kind
    /// `mm_page_alloc_extfrag` reports with `change_ownership=0`), by the
    /// request's migratetype and then the pageblock's: `stolen[Movable]
    /// [Unmovable]` counts "movable from unmovable" fallbacks. Indexed by
    /// [`Migratetype::index`](sparsemem::Migratetype::index), the first
    /// `MIGRATE_PCPTYPES` only.
    pub stolen: [[u64; MIGRATE_PCPTYPES]; MIGRATE_PCPTYPES],
    /// Hole checks that said "invalid".
    pub hole_hits: u64,
    /// Freed blocks put at the tail of their list because their buddy one
    /// order up is free (`buddy_merge_likely`).
    pub merge_likely_tails: u64,
    /// `zone_statistics`' NUMA counters (with the entry mechanism).
    pub numa: NumaEvents,
}

/// A zone's NUMA allocation counters, as `/sys/devices/system/node/node*/numastat`
/// sums them (`interleave_hit`, a memory policy's, is not kept).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct NumaEvents {
    /// `numa_hit`: pages from this zone for a request that preferred its
    /// node.
    pub hit: u64,
    /// `numa_miss`: pages from this zone for a request that preferred
    /// another node.
    pub miss: u64,
    /// `numa_foreign`: pages from another node for a request that
    /// preferred this zone.
    pub foreign: u64,
    /// `local_node`: pages from this zone for a CPU of its node.
    pub local: u64,
    /// `other_node`: pages from this zone for a CPU of another node.
    pub other: u64,
}

impl std::ops::AddAssign for NumaEvents {
    fn add_assign(&mut self, other: NumaEvents) {
        self.hit += other.hit;
        self.miss += other.miss;
        self.foreign += other.foreign;
        self.local += other.local;
        self.other += other.other;
    }
}

impl std::ops::AddAssign for ZoneStats {
    fn add_assign(&mut self, other: ZoneStats) {
        for o in 0..NR_PAGE_ORDERS {
            self.allocs[o] += other.allocs[o];
            self.frees[o] += other.frees[o];
        }
        self.merges += other.merges;
        self.splits += other.splits;
        self.pcp_refills += other.pcp_refills;
        self.pcp_drains += other.pcp_drains;
        self.pcp_refill_blocks += other.pcp_refill_blocks;
        self.pcp_drain_blocks += other.pcp_drain_blocks;
        self.hole_checks += other.hole_checks;
        self.hole_hits += other.hole_hits;
        self.fallbacks += other.fallbacks;
        self.steals += other.steals;
        self.whole_block_claims += other.whole_block_claims;
        for (mine, theirs) in self.stolen.iter_mut().zip(other.stolen) {
            for (m, t) in mine.iter_mut().zip(theirs) {
                *m += t;
            }
        }
        self.merge_likely_tails += other.merge_likely_tails;
        self.numa += other.numa;
    }
}

/// A zone's id: its index in [`crate::Allocator::zones`], stored in each of
/// its pages (`page_zonenum` with the node folded in: pfnlab numbers zones
/// allocator-wide, at most [`MAX_ZONES`]).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct ZoneId(u8);

impl ZoneId {
    /// Wraps a raw id; whether a zone has it is the allocator's question.
    pub const fn new(id: u8) -> ZoneId {
        ZoneId(id)
    }

    /// The raw id.
    pub const fn get(self) -> u8 {
        self.0
    }

    /// The id as an index into per-zone arrays.
    #[inline(always)]
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl std::fmt::Display for ZoneId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Zones a page's 8-bit zone id can name (ids 0 to 254; the kernel packs
/// `ZONES_SHIFT` bits of zone number into `page->flags`).
pub const MAX_ZONES: usize = 255;

/// Largest number of pages one bulk request may ask for: pfnlab's bound
/// (the kernel bounds a request by the caller's array or list, not by a
/// constant), so a bulk request can never ask for an unbounded batch.
pub const MAX_BULK: usize = 4096;

/// Which kernel's rules the `MIGRATE_HIGHATOMIC` reserve follows
/// (`reserve_highatomic_pageblock`, Linux 4.4 on), resolved from the era.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum HighatomicRules {
    /// No reserve: an era before it (or pfnlab's pageblock mechanism off).
    None,
    /// Linux 4.4–6.2 (pfnlab's 5.13 to 6.8; see
    /// [`Era::highatomic_6_18_rules`](crate::Era::highatomic_6_18_rules)
    /// for what 6.6 and 6.8 had of the other rules): `ALLOC_HARDER` (`GFP_ATOMIC`) takes
    /// from the reserve at order > 0 and reserves a pageblock on success,
    /// up to 1 % of the zone plus one pageblock; the watermark hides
    /// `nr_reserved_highatomic` from every request without `ALLOC_HARDER`
    /// or `ALLOC_OOM`.
    Harder,
    /// Linux 6.12 on (pfnlab's 6.12 and 6.18; 6.3's flags, 6.8's limit,
    /// 6.10's typing of larger blocks, 6.12's free count and order-0
    /// fallback): `ALLOC_HIGHATOMIC` (non-blocking,
    /// `__GFP_HIGH`, order > 0) as above, the limit 1 % of the zone
    /// rounded up to a pageblock and none for a zone under 100
    /// pageblocks; a non-blocking request whose own lists failed may take
    /// from the reserve; the watermark hides only the reserve's *free*
    /// pages (`nr_free_highatomic`) from requests without `ALLOC_RESERVES`.
    HighAtomic,
}

/// `pagetypeinfo_showfree_print` stops counting a free list here.
pub const FREECOUNT_CAP: u64 = 100_000;
