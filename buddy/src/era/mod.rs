//! Kernel eras: which of the allocator's mechanisms exist, so a question can
//! be asked of the kernel it belongs to and answered beside today's.
//!
//! An era is a kernel release ([`Era::version`]), and each mechanism is
//! switched on at the release that merged it ([`Era::since`]), its commit
//! cited beside the switch. The four seeds' eras:
//!
//! | era | free lists | per-CPU `high` | buddy tracking (the seed's) |
//! |---|---|---|---|
//! | 2.6.9 | one per order | `6 × batch` (`pageset_set_batch`) | per-order bitmap ([`Bitmap`](crate::Bitmap)) |
//! | 2.6.23 | one per order | `6 × batch` | no bitmap |
//! | 5.13 | per order and migratetype, fallback and stealing; a pageblock lookup per free | `6 × batch` (the last release before `zone_highsize`) | no bitmap |
//! | 6.18 | as 5.13 | `zone_highsize`: the zone's low watermark (or its managed pages over `percpu_pagelist_high_fraction`) split over the node's CPUs, at least `4 × batch`, tuned between `high_min` and `high_max` | no bitmap |
//!
//! and between 5.13 and 6.18 the releases people run, with what pfnlab
//! models of each (upstream `.0` releases; "=" is the column to the left):
//!
//! | mechanism | 5.14 | 5.15 | 6.1 | 6.6 | 6.8 | 6.12 |
//! |---|---|---|---|---|---|---|
//! | `pcp->high` | `zone_highsize` | = | = | = | tuned (6.7) | = |
//! | per-CPU lists (with THP) | 15 | 15 | 13 (6.0) | 13 | 13 | 14 (6.10) |
//! | drain | `batch << free_factor`, round-robin | = | + `free_high`, each list in turn (5.18) | = | `free_count` (6.7) | = |
//! | `pcp->lock` | — | — | yes (6.0) | = | = | = |
//! | `WMARK_PROMO` | — | — | yes (5.18) | = | = | = |
//! | Movable's `min` | its share of `min_free_kbytes` | = | = | 32..128 pages, like highmem | = | = |
//! | bulk allocator grows a deferred zone | — | — | — | — | — | yes |
//! | HIGHATOMIC rules | 5.13's | = | = | = | = | 6.18's |
//!
//! The per-CPU list shape follows the era too (see [`PerCpu`](crate::PerCpu)):
//! one order-0 list, one per migratetype (2.6.25 to 5.13), or one per
//! migratetype and order (5.14 on) with a `pcp->lock` (6.0 on). A freed
//! block whose next-order buddy is free goes to the tail of its list from
//! 2.6.35 (`buddy_merge_likely`). A Movable zone's watermarks follow the
//! era ([`Era::movable_wmarks_like_highmem`]): the seeds' 2.6 and 5.13
//! eras give it its share of `min_free_kbytes`, 6.18 the small clamp.
//! Watermark checks, the GFP mask (6.18's bits) and page preparation with
//! its checks on free are the same in every era.
//!
//! The buddy-tracking variant stays a type parameter
//! ([`Variant`](crate::Variant)), and an era refuses a variant it did not
//! have ([`Era::check_variant`]): the bitmap and atomic flag operations
//! exist in 2.6.9 only, the hole check up to 5.13. Memory models and
//! hotplug are accepted in every era on purpose: what a memory model would
//! have cost in an older allocator is the lab's question (the 2006 thread
//! asked it of a virtual memmap that 2.6.17 did not have).

use std::fmt;

pub use not_in_era::{Gone, NotInEra};

use crate::variant::{Variant, VariantName};

/// A kernel release whose allocator pfnlab can model.
///
/// The variants are in release order, so eras compare as their versions
/// do. The four oldest are the seeds' eras ([`Era::SEEDS`]), each chosen
/// for a question; the others are the releases people run: RHEL 9 (5.14),
/// Ubuntu 22.04 (5.15), Debian 12 (6.1), the 6.6 LTS, Ubuntu 24.04 (6.8)
/// and Debian 13 (6.12). An era means the upstream `.0` release:
/// distribution kernels carry backports (RHEL 9's 5.14 many later mm
/// changes, Debian 12 from 6.1.57 the 6.2 per-CPU path with interrupts
/// on), which no era models.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Era {
    /// Linux 2.6.9 (2004): the bitmap buddy's last release.
    V2_6_9,
    /// Linux 2.6.23 (2007): the zone-lock discussion's kernel.
    V2_6_23,
    /// Linux 5.13 (2021): the bulk page allocator's first release.
    V5_13,
    /// Linux 5.14 (RHEL 9): `pcp->high` from the low watermark, high-order
    /// per-CPU lists.
    V5_14,
    /// Linux 5.15 (Ubuntu 22.04).
    V5_15,
    /// Linux 6.1 (Debian 12): `pcp->lock`, `free_high`, the promo
    /// watermark (not printed).
    V6_1,
    /// Linux 6.6 (LTS).
    V6_6,
    /// Linux 6.8 (Ubuntu 24.04): `pcp->high` tuned at run time.
    V6_8,
    /// Linux 6.12 (Debian 13): the bulk allocator grows a deferred zone,
    /// zoneinfo prints `promo`.
    V6_12,
    /// Linux 6.18: today's.
    #[default]
    V6_18,
}

impl Era {
    /// Every era, oldest first.
    pub const ALL: [Era; 10] = [
        Era::V2_6_9,
        Era::V2_6_23,
        Era::V5_13,
        Era::V5_14,
        Era::V5_15,
        Era::V6_1,
        Era::V6_6,
        Era::V6_8,
        Era::V6_12,
        Era::V6_18,
    ];

    /// The seeds' four eras, oldest first: the ones each experiment and
    /// the expensive tests sweep, so their results stay comparable.
    pub const SEEDS: [Era; 4] = [Era::V2_6_9, Era::V2_6_23, Era::V5_13, Era::V6_18];

    /// The release as written (`6.18`).
    pub const fn name(self) -> &'static str {
        match self {
            Era::V2_6_9 => "2.6.9",
            Era::V2_6_23 => "2.6.23",
            Era::V5_13 => "5.13",
            Era::V5_14 => "5.14",
            Era::V5_15 => "5.15",
            Era::V6_1 => "6.1",
            Era::V6_6 => "6.6",
            Era::V6_8 => "6.8",
            Era::V6_12 => "6.12",
            Era::V6_18 => "6.18",
        }
    }

    /// The release as `(version, patchlevel, sublevel)`: `(2, 6, 23)`,
    /// `(6, 18, 0)`.
    pub const fn release(self) -> (u32, u32, u32) {
        match self {
            Era::V2_6_9 => (2, 6, 9),
            Era::V2_6_23 => (2, 6, 23),
            _ => {
                let (major, minor) = self.version();
                (major, minor, 0)
            }
        }
    }

    /// The release as `(version, patchlevel)`: `(6, 18)`. Both 2.6 eras
    /// are `(2, 6)`; [`Era::release`] tells them apart.
    pub const fn version(self) -> (u32, u32) {
        match self {
            Era::V2_6_9 | Era::V2_6_23 => (2, 6),
            Era::V5_13 => (5, 13),
            Era::V5_14 => (5, 14),
            Era::V5_15 => (5, 15),
            Era::V6_1 => (6, 1),
            Era::V6_6 => (6, 6),
            Era::V6_8 => (6, 8),
            Era::V6_12 => (6, 12),
            Era::V6_18 => (6, 18),
        }
    }

    /// Whether this era is release `major.minor` or later: how each
    /// mechanism below is switched on, at the release that merged it.
    pub const fn since(self, major: u32, minor: u32) -> bool {
        let (a, b) = self.version();
        a > major || (a == major && b >= minor)
    }

    /// Whether this era is release 2.6.`sublevel` or later (the 2.6
    /// series numbered its releases in the third place).
    const fn since_2_6(self, sublevel: u32) -> bool {
        let (a, b, c) = self.release();
        a > 2 || (a == 2 && (b > 6 || (b == 6 && c >= sublevel)))
    }

    /// The era of kernel release `major.minor.sublevel`: the newest era at
    /// or below it, or `None` for a release older than every era.
    pub fn at_or_below(major: u32, minor: u32, sublevel: u32) -> Option<Era> {
        Era::ALL
            .into_iter()
            .rev()
            .find(|e| e.release() <= (major, minor, sublevel))
    }

    /// Parses a release name, or says which exist.
    pub fn parse(s: &str) -> Result<Era, String> {
        Era::ALL
            .into_iter()
            .find(|e| e.name() == s)
            .ok_or_else(|| format!("unknown era `{s}` (known: {})", Era::names()))
    }

    /// Every era's name, comma-separated, oldest first.
    pub fn names() -> String {
        let names: Vec<&str> = Era::ALL.iter().map(|e| e.name()).collect();
        names.join(", ")
    }

    /// Whether pages are grouped by mobility: free lists per migratetype and
    /// a pageblock lookup on every free (Linux 2.6.24 on, "Group pages by
    /// mobility").
    pub const fn has_migratetypes(self) -> bool {
        self.since_2_6(24)
    }

    /// Whether `pcp->high` comes from the zone's low watermark
    /// (`zone_highsize`) rather than `6 × batch`: 5.14, `b92ca18e8ca5`
    /// "mm/page_alloc: disassociate the pcp->high from pcp->batch".
    pub const fn pcp_high_from_watermark(self) -> bool {
        self.since(5, 14)
    }

    /// Whether the per-CPU lists hold blocks of orders up to
    /// `PAGE_ALLOC_COSTLY_ORDER` and of `pageblock_order` (THP), one list per
    /// migratetype and order, rather than order-0 pages only: 5.14,
    /// `44042b449872` "mm/page_alloc: allow high-order pages to be stored
    /// on the per-cpu lists". How many THP lists there are changes with
    /// the release too (one per migratetype in 5.14 and 5.15, one in 6.1
    /// to 6.8, two from 6.12).
    pub const fn pcp_high_orders(self) -> bool {
        self.since(5, 14)
    }

    /// The per-CPU THP lists (`NR_PCP_THP`) of an era with high-order
    /// lists: one per migratetype in 5.14 (15 lists in all); one shared
    /// from 6.0, `5d0a661d808f` "mm/page_alloc: use only one PCP list for
    /// THP-sized allocations" (13); movable and the rest from 6.10,
    /// `bf14ed81f571` "mm/page_alloc: Separate THP PCP into movable and
    /// non-movable categories" (14).
    pub(crate) const fn pcp_thp_lists(self) -> PcpThpLists {
        if self.since(6, 10) {
            PcpThpLists::MovableOrNot
        } else if self.since(6, 0) {
            PcpThpLists::Shared
        } else {
            PcpThpLists::PerMigratetype
        }
    }

    /// Whether a CPU's `pcp->high` is tuned between `high_min` and
    /// `high_max` at run time: raised on refill, lowered while the zone is
    /// below its high watermark, decayed by the vmstat work, with
    /// `free_count`, `alloc_factor` and `PCPF_PREV_FREE_HIGH_ORDER`: 6.7,
    /// `90b41691b988` "mm: add framework for PCP high auto-tuning",
    /// `51a755c56dc0` "mm: tune PCP high automatically", `6ccdcb6d3a74`
    /// "mm, pcp: reduce detecting time of consecutive high order page
    /// freeing", `ca71fe1ad922` "mm, pcp: avoid to drain PCP when process
    /// exit".
    pub const fn pcp_high_tuning(self) -> bool {
        self.since(6, 7)
    }

    /// Whether a drain at `high` frees `batch << free_factor` pages, the
    /// factor growing with each drain and halved by each allocation: 5.14,
    /// `3b12e7e97938` "mm/page_alloc: scale the number of pages that are
    /// batch freed", until 6.7's `free_count` replaced it
    /// ([`Era::pcp_high_tuning`]).
    pub const fn pcp_free_factor(self) -> bool {
        self.since(5, 14) && !self.pcp_high_tuning()
    }

    /// Whether a high-order free while frees dominate empties the lists
    /// (`free_high`): 5.18, `f26b3fa04611` "mm/page_alloc: limit number of
    /// high-order pages on PCP during bulk free".
    pub const fn pcp_free_high(self) -> bool {
        self.since(5, 18)
    }

    /// Whether `free_high` waits for `free_count` to reach `batch +
    /// high_min / 2` rather than `batch`: 6.16, `c544a952ba61` "mm: pcp:
    /// increase pcp->free_count threshold to trigger free_high".
    pub const fn pcp_free_high_above_high_min(self) -> bool {
        self.since(6, 16)
    }

    /// Whether `free_pcppages_bulk` empties each list in turn from the one
    /// just freed to, rather than round-robin with `batch_free`: 5.18,
    /// `fd56eef258a1` "mm/page_alloc: simplify how many pages are selected
    /// per pcp list during bulk free" and `d61372bc41cf` "mm/page_alloc:
    /// drain the requested list first during bulk free".
    pub const fn pcp_drain_in_turn(self) -> bool {
        self.since(5, 18)
    }

    /// Whether the per-CPU lists are guarded by `pcp->lock`, tried with a
    /// trylock, rather than by disabling interrupts: 6.0, `4b23a68f9536`
    /// "mm/page_alloc: protect PCP lists with a spinlock" and
    /// `01b44456a7aa` "mm/page_alloc: replace local_lock with normal
    /// spinlock". (6.0 and 6.1 take it with interrupts saved; 6.2 left
    /// them on, which pfnlab, with no interrupts, does not tell apart.)
    pub const fn pcp_lock(self) -> bool {
        self.since(6, 0)
    }

    /// Whether the per-CPU lists are guarded with interrupts disabled
    /// (`local_irq_save`): every release before 6.2, whose
    /// `5749077415994` "mm/page_alloc: leave IRQs enabled for per-cpu page
    /// allocations" left them on under the pcp trylock. 6.0 and 6.1 take
    /// `pcp->lock` with `spin_lock_irqsave`; before, interrupts alone
    /// guard the lists (5.14's `local_lock_irqsave` is the same save).
    /// pfnlab runs the flags save (`buddy/src/pcp/irqflags.rs`), not the
    /// `cli`, nor the restore's test and `sti`.
    pub const fn pcp_irq_save(self) -> bool {
        !self.since(6, 2)
    }

    /// Whether the kernel has `alloc_pages_nolock` and `free_pages_nolock`,
    /// the allocation and free for any context that only ever try a lock:
    /// 6.15, `97769a53f117` "mm, bpf: Introduce try_alloc_pages() for
    /// opportunistic page allocation" (renamed `alloc_pages_nolock` in
    /// 6.16) and `8c57b687e833` "mm, bpf: Introduce free_pages_nolock()".
    pub const fn has_alloc_nolock(self) -> bool {
        self.since(6, 15)
    }

    /// Whether the kernel has `vm.defrag_mode`: 6.15, `e3aa7df331bc` "mm:
    /// page_alloc: defrag_mode" (its fix `7a95a05f15d5` "mm: page_alloc:
    /// fix defrag_mode's retry & OOM path" in the same release).
    pub const fn has_defrag_mode(self) -> bool {
        self.since(6, 15)
    }

    /// Whether the zone has the `WMARK_PROMO` watermark, `high` plus the
    /// low-to-high step: 5.18, `c574bbe91703` "NUMA balancing: optimize
    /// page placement for memory tiering system", whose
    /// `__setup_per_zone_wmarks` hunk sets it.
    /// Zoneinfo prints it only from 6.12 ([`ZoneinfoFormat`]).
    ///
    /// [`ZoneinfoFormat`]: crate::views::ZoneinfoFormat
    pub const fn has_wmark_promo(self) -> bool {
        self.since(5, 18)
    }

    /// Whether `__setup_per_zone_wmarks` treats ZONE_MOVABLE as it treats
    /// highmem: its managed pages left out of the lowmem pages that
    /// `min_free_kbytes` is shared over, and its `min` `managed / 1024`
    /// clamped to `SWAP_CLUSTER_MAX`..128, so an empty Movable zone has
    /// 32; before, on a kernel without highmem, Movable is one more
    /// lowmem zone with its share (an empty one 0): 6.6, liuq's
    /// "mm/page_alloc: fix min_free_kbytes calculation regarding
    /// ZONE_MOVABLE" (its mainline id is unsure). `min_free_kbytes`
    /// itself never counted Movable (`nr_free_buffer_pages`, and
    /// khugepaged's count of zones up to `gfp_zone(GFP_USER)`).
    pub const fn movable_wmarks_like_highmem(self) -> bool {
        self.since(6, 6)
    }

    /// Whether the bulk allocator grows a deferred zone short of its
    /// watermark in its own zone loop (`_deferred_grow_zone(zone, 0)` and
    /// `goto retry_this_zone`), rather than moving on: 6.12,
    /// `4be9064baac0` "mm: accept memory in __alloc_pages_bulk()".
    pub const fn bulk_grows_deferred_zone(self) -> bool {
        self.since(6, 12)
    }

    /// Whether the `MIGRATE_HIGHATOMIC` reserve follows 6.18's rules
    /// rather than 5.13's ([`HighatomicRules`]). They changed in steps:
    /// 6.3's `ALLOC_HIGHATOMIC` and `ALLOC_RESERVES`; 6.8's limit
    /// rounded to pageblocks and the minimum zone size (Charan Teja
    /// Kalla's "mm: page_alloc: correct high atomic reserve calculations"
    /// and "…enforce minimum zone size to do high atomic reserves"; their
    /// mainline ids are unsure); 6.10's typing of multi-block buddies
    /// (probably `7cc5a5d65011`); and 6.12's `c928807f6f6b`
    /// "mm/page_alloc: keep track of free highatomic" and `281dd25c1a01`
    /// "mm/page_alloc: let GFP_ATOMIC order-0 allocs access highatomic
    /// reserves" (both merged during 6.12's release candidates; stable
    /// kernels back to 5.15 carry the second). pfnlab models the two ends
    /// only, and switches at 6.12, the first era with all of them; 6.6 and
    /// 6.8 keep 5.13's rules, which is wrong for 6.3's flags (and 6.8's
    /// limit) and said here.
    ///
    /// [`HighatomicRules`]: crate::HighatomicRules
    pub const fn highatomic_6_18_rules(self) -> bool {
        self.since(6, 12)
    }

    /// Whether the NUMA counters are 16-bit per-CPU diffs folded at
    /// `NUMA_STATS_THRESHOLD` rather than plain event counters (5.14 made
    /// them events, "mm/vmstat: convert NUMA statistics to basic NUMA
    /// counters").
    pub const fn numa_stat_diffs(self) -> bool {
        !self.since(5, 14)
    }

    /// Whether pfnlab models this era's per-call entry of the single-page
    /// path ([`Mechanisms::entry`]): 5.13's and later. The 2.6 eras'
    /// entry (no scoped GFP constraints, a different `zone_statistics`) is
    /// not modelled: their questions are the buddy's own.
    pub const fn models_entry(self) -> bool {
        self.since(5, 13)
    }

    /// Whether a freed block whose next-order buddy is free goes to the
    /// tail of its list (`buddy_merge_likely`; the check came with 2.6.35).
    pub const fn has_buddy_merge_likely(self) -> bool {
        self.since_2_6(35)
    }

    /// Whether deferred struct page init exists (Linux 4.2 on).
    pub const fn has_deferred_init(self) -> bool {
        self.since(4, 2)
    }

    /// Whether memory compaction exists (Linux 2.6.35 on).
    pub const fn has_compaction(self) -> bool {
        self.since_2_6(35)
    }

    /// Whether variant `V`'s mechanisms existed in this era, or why not.
    ///
    /// - The per-order buddy bitmap and atomic flag operations under the
    ///   zone lock are 2.6.9's and the 2004 no-bitmap patch's variants of
    ///   it; the no-bitmap buddy was merged with non-atomic flag operations,
    ///   so every later era refuses both.
    /// - The hole check (`CONFIG_HOLES_IN_ZONE`'s `pfn_valid` on the buddy)
    ///   existed until 5.13 and was removed in 5.14.
    pub fn check_variant<V: Variant>(self) -> Result<(), NotInEra> {
        let gone = if V::BITMAP && self > Era::V2_6_9 {
            Some(Gone::BuddyBitmap)
        } else if V::ATOMIC_FLAGS && self > Era::V2_6_9 {
            Some(Gone::AtomicBuddyFlags)
        } else if V::HOLE_CHECK && self.since(5, 14) {
            Some(Gone::HolesInZone)
        } else {
            None
        };
        match gone {
            Some(gone) => Err(NotInEra::Variant {
                variant: VariantName::of::<V>(),
                era: self,
                gone,
            }),
            None => Ok(()),
        }
    }
}

/// The per-CPU THP lists of an era with high-order per-CPU lists
/// (`NR_PCP_THP` and `order_to_pindex`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PcpThpLists {
    /// 5.14 to 5.19: one per migratetype, after the low-order lists.
    PerMigratetype,
    /// 6.0 to 6.9: one for every migratetype.
    Shared,
    /// 6.10 on: one for Movable, one for the others.
    MovableOrNot,
}

/// Which of the era's allocation-path mechanisms run. All of them by
/// default; `pfnlab bench breakdown` turns them off one at a time to see
/// what each costs. Turning one off never turns on something the era did
/// not have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Mechanisms {
    /// Grouping by mobility: free and per-CPU lists per migratetype and the
    /// pageblock lookup (`get_pfnblock_migratetype`) on every free.
    pub pageblock: bool,
    /// `prepare_alloc_pages`' alloc flags, `zone_watermark_fast` on every
    /// allocation, `lowmem_reserve`, and the `NR_FREE_PAGES` counter with
    /// its per-CPU deltas. Without it the zone limit and migratetype still
    /// come from the GFP mask, and [`crate::Zone::nr_free_pages_state`] is
    /// not kept.
    pub watermarks: bool,
    /// Page preparation: `prep_compound_page` for `__GFP_COMP`, the
    /// bad-page checks and flag clearing of `free_pages_prepare`, and
    /// `buddy_merge_likely`. The refcount and order pfnlab keeps in every
    /// allocated head (its double-free detection) stay.
    pub page_prep: bool,
    /// The kernel's per-call entry of the single-page path, in the eras
    /// that model it ([`Era::models_entry`]): `current_gfp_context`, the
    /// preferred zone, `zone_statistics`' NUMA counters, and the entry
    /// functions as calls the kernel does not inline (`__alloc_pages`,
    /// `get_page_from_freelist`, `__free_pages`, `free_unref_page` or
    /// `__free_frozen_pages`). See [`PerCpu`](crate::PerCpu)'s `entry`
    /// module documentation.
    pub entry: bool,
}

impl Mechanisms {
    /// Everything the era had.
    pub const ALL: Mechanisms = Mechanisms {
        pageblock: true,
        watermarks: true,
        page_prep: true,
        entry: true,
    };

    /// Bookkeeping only: lists, splits and merges, per-CPU batching, and
    /// pfnlab's misuse checks.
    pub const BOOKKEEPING: Mechanisms = Mechanisms {
        pageblock: false,
        watermarks: false,
        page_prep: false,
        entry: false,
    };
}

impl Default for Mechanisms {
    fn default() -> Mechanisms {
        Mechanisms::ALL
    }
}

/// What the allocation path does, resolved once from the era and the
/// mechanisms asked for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Path {
    pub(crate) migratetypes: bool,
    /// `!page_group_by_mobility_disabled`: requests carry their own
    /// migratetype (else every one is Movable, the type memmap init gives
    /// every pageblock, so all memory behaves as one type).
    pub(crate) mobility: bool,
    pub(crate) watermarks: bool,
    pub(crate) page_prep: bool,
    pub(crate) merge_likely: bool,
    pub(crate) pcp_high_orders: bool,
    /// The THP lists ([`Era::pcp_thp_lists`]).
    pub(crate) pcp_thp_lists: PcpThpLists,
    pub(crate) pcp_lock: bool,
    /// `local_irq_save` around the per-CPU lists ([`Era::pcp_irq_save`]).
    pub(crate) pcp_irq_save: bool,
    pub(crate) pcp_high_tuning: bool,
    /// `alloc_pages_nolock` and `free_pages_nolock` exist (6.15 on).
    pub(crate) alloc_nolock: bool,
    /// 5.14's `free_factor` on the untuned path ([`Era::pcp_free_factor`]).
    pub(crate) pcp_free_factor: bool,
    /// 5.18's `free_high` on the untuned path: with `free_factor`
    /// ([`Era::pcp_free_high`]); the tuned path always has it.
    pub(crate) pcp_free_high: bool,
    /// 6.16's `free_high` threshold on the tuned path
    /// ([`Era::pcp_free_high_above_high_min`]).
    pub(crate) free_high_above_high_min: bool,
    /// 5.18's drain order ([`Era::pcp_drain_in_turn`]).
    pub(crate) pcp_drain_in_turn: bool,
    /// `drain_pages_zone` in chunks of `batch << PCP_BATCH_SCALE_MAX`
    /// pages: 6.10, "mm: page_alloc: control latency caused by zone PCP
    /// draining" (Lucas Stach; its mainline id is unsure, several appear).
    pub(crate) pcp_drain_chunked: bool,
    /// The per-call entry ([`Mechanisms::entry`]).
    pub(crate) entry: bool,
    /// 5.13's NUMA counters: 16-bit per-CPU diffs folded at
    /// `NUMA_STATS_THRESHOLD` (5.14 made them plain event counters).
    pub(crate) numa_stat_diffs: bool,
    /// The zone lock's kind ([`Options::zone_lock`](crate::Options::zone_lock)).
    pub(crate) zone_lock: crate::ZoneLockKind,
    /// The `MIGRATE_HIGHATOMIC` reserve's rules (`zone::highatomic`).
    pub(crate) highatomic: crate::types::HighatomicRules,
}

impl Path {
    pub(crate) fn new(era: Era, m: Mechanisms) -> Path {
        Path {
            migratetypes: era.has_migratetypes() && m.pageblock,
            mobility: era.has_migratetypes() && m.pageblock,
            watermarks: m.watermarks,
            page_prep: m.page_prep,
            merge_likely: era.has_buddy_merge_likely() && m.page_prep,
            pcp_high_orders: era.pcp_high_orders(),
            pcp_thp_lists: era.pcp_thp_lists(),
            pcp_lock: era.pcp_lock(),
            pcp_irq_save: era.pcp_irq_save(),
            pcp_high_tuning: era.pcp_high_tuning() && m.watermarks,
            alloc_nolock: era.has_alloc_nolock(),
            pcp_free_factor: era.pcp_free_factor(),
            pcp_free_high: era.pcp_free_factor() && era.pcp_free_high(),
            free_high_above_high_min: era.pcp_free_high_above_high_min(),
            pcp_drain_in_turn: era.pcp_drain_in_turn(),
            pcp_drain_chunked: era.since(6, 10),
            entry: era.models_entry() && m.entry,
            numa_stat_diffs: era.numa_stat_diffs(),
            zone_lock: crate::ZoneLockKind::Unfair,
            highatomic: if !(era.has_migratetypes() && m.pageblock && m.watermarks) {
                crate::types::HighatomicRules::None
            } else if era.highatomic_6_18_rules() {
                crate::types::HighatomicRules::HighAtomic
            } else {
                crate::types::HighatomicRules::Harder
            },
        }
    }
}

/// The per-CPU fast path's compiled form: each run-time choice the path
/// would otherwise test on every call, folded into one byte that the
/// allocator rewrites whenever a choice changes
/// ([`Allocator::update_pcp_form`](crate::Allocator::update_pcp_form)), so that a call
/// reads one byte and jumps to a form compiled without the others' tests,
/// as a kernel patches a static key's jump into its code once.
///
/// The choices are bits: [`PcpForm::TUNED`], 6.7's tuning of `pcp->high`,
/// [`PcpForm::BATCH`], lists without a drain factor, [`PcpForm::ENTRY`],
/// the kernel's per-call entry (the three fixed by the era and the
/// mechanisms), and [`PcpForm::DEFERRED`], deferred init's grow on a miss
/// (the `deferred_pages` key, off after `page_alloc_init_late`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PcpForm(u8);

impl PcpForm {
    /// 6.7's tuning of `pcp->high` is in the path.
    pub(crate) const TUNED: u8 = 1 << 0;
    /// `deferred_grow_zone` on a miss is in the path.
    pub(crate) const DEFERRED: u8 = 1 << 1;
    /// The kernel's per-call entry is in the path.
    pub(crate) const ENTRY: u8 = 1 << 2;
    /// A plain `batch` drains at `high`, no `free_factor` (before 5.14, and
    /// 6.7 on untuned); neither this nor `TUNED` is 5.14 to 6.6's factor.
    pub(crate) const BATCH: u8 = 1 << 3;

    /// The form for `path` with the `deferred_pages` key as given.
    pub(crate) fn new(path: &Path, deferred_pages: bool) -> PcpForm {
        let bit = |on: bool, b: u8| if on { b } else { 0 };
        PcpForm(
            bit(path.pcp_high_tuning, Self::TUNED)
                | bit(!path.pcp_free_factor && !path.pcp_high_tuning, Self::BATCH)
                | bit(deferred_pages, Self::DEFERRED)
                | bit(path.entry, Self::ENTRY),
        )
    }

    /// The byte the path dispatches on.
    #[inline(always)]
    pub(crate) fn bits(self) -> u8 {
        self.0
    }
}

impl fmt::Display for Era {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod not_in_era;
#[cfg(test)]
mod tests;
