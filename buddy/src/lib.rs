//! # buddy — one zoned buddy allocator for every memory model
//!
//! The Linux page allocator, in the shape that decides its cost: nodes of
//! zones (DMA, DMA32, Normal, Movable), each with `free_area[order]` lists
//! threaded through the pages' own `lru` links, the buddy found at
//! `pfn ^ (1 << order)`, per-CPU lists refilled and drained in batches
//! under a spinning zone lock, bulk allocation, zonelists with fallback, a
//! cpuset node filter, and memory hotplug. It allocates *simulated*
//! physical pages: it touches `struct page`s in the memory model's memmap,
//! and frame contents only with [`Options::frames`] (real frames, cleared
//! for `__GFP_ZERO`).
//!
//! Movable pages can have owners ([`Owners`]), which [`migrate_pages`]
//! repoints and [`compact_zone`] uses to compact a zone.
//!
//! What the kernel does and pfnlab does not model: reclaim, compaction
//! inside the slow path (a caller that holds owners calls
//! [`alloc_pages_direct_compact`] or, for the slow path's retries,
//! [`alloc_pages_direct_compact_retry`] instead) and kswapd (below its watermark an ordinary request fails with
//! [`RequestError::NoMemory`]; where direct reclaim would run, only its
//! giving back of the HIGHATOMIC reserve is modelled); `ZONE_RECLAIM_ACTIVE` and
//! the NUMA expiry of remote per-CPU lists in 6.7's tuning of `pcp->high`
//! (the rest of it is modelled); and the per-call work that does not touch the memory model (`local_lock` with
//! interrupts disabled, memory-cgroup charging, memory-policy lookups, the
//! `page_owner`/KASAN hooks).
//!
//! [`Allocator`] is generic over the memory model ([`BuddyModel`]: a
//! `MemoryModel` whose `struct page` is a `BuddyPage`, any of the four
//! sizes: 64 and 32 bytes hold the buddy's links and order in the page, 16
//! and 8 bytes in separately allocated descriptors) and
//! over a compile-time [`Variant`] (bitmap or no-bitmap buddy, atomic or
//! non-atomic flag operations, hole check on or off), so each combination
//! is its own monomorphised hot path.
//!
//! ```
//! use buddy::{Allocator, Gfp, Kernel, Options};
//! use sparsemem::{Layout, NodeId, Order, SparseExtreme};
//!
//! let layout = Layout::from_toml("[[range]]\nstart = 0x0\nend = 0x40000000\nkind = \"ram\"\n")?; // 1 GiB
//! let alloc = Allocator::<_, Kernel>::new(SparseExtreme::new(&layout)?, &layout, Options::default())?;
//! let mut cpu = alloc.cpu_on(NodeId::ZERO)?;
//! let page = cpu.alloc(Gfp::KERNEL)?;
//! let block = cpu.alloc_pages(Order::new(3), Gfp::KERNEL)?;
//! cpu.free(page)?;
//! cpu.free_pages(block, Order::new(3))?;
//! assert!(cpu.free(page).is_err(), "double free is refused");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Module order
//!
//! Bottom to top: a module imports only modules of lower numbers (and,
//! where an item says "then", those before it in the item), so none
//! imports a module that imports it back:
//!
//! 1. `types` (zone types and ids, statistics, limits), `lock` (the zone
//!    lock), `variant` (the compile-time variants), `list` (the intrusive
//!    lists and the owned-block token), `llfree` (LLFree, the lock-free
//!    allocator measured beside the buddy): nothing of the crate;
//! 2. `era` (each kernel's mechanisms), `gfp` (GFP masks), `frames`
//!    (real frames), `memory_notify` (the memory hotplug notifier chain),
//!    then `watermark` (the kernel's formulas, by era) and
//!    `memmap_on_memory` (its gate, by era);
//! 3. `error` (one enum per domain, and their join), `node` (nodes,
//!    zonelists, node masks), `memmap_init` (the boot memmap walk's
//!    forms, over a model, and deferred init's boot half: each node's
//!    `first_deferred_pfn` and the poison past it);
//! 4. `zone`: `zone::free_area` (the buddy algorithm), then
//!    `zone::fallback` and `zone` itself (the zone, its memory, the claim
//!    of a free), `zone::highatomic` (the `MIGRATE_HIGHATOMIC` reserve:
//!    `reserve_highatomic_pageblock`, `unreserve_highatomic_pageblock`),
//!    `zone::rebuild` (free lists rebuilt to a plan);
//! 5. `alloc` (the allocator and its zone path), then `slowpath`
//!    (`__alloc_pages_slowpath` and `vm.defrag_mode`), `walk`
//!    (`pageblock_pfn_to_page`, `zone->contiguous`, over a zone); the
//!    zone path's miss calls `deferred`'s grow
//!    (`Allocator::deferred_grow_zone`, as `get_page_from_freelist` calls
//!    mm_init.c's), the one call up this order, with no import;
//! 6. `chain` (a chain of allocated pages), `deferred` (deferred struct
//!    page init, over the allocator), `migrate` (owners and
//!    `migrate_pages`), then `init` (construction), `hotplug`,
//!    `compaction` (the scanners and `compact_zone`, over `migrate`),
//!    `hugetlb` (the hugetlb pool), each over the allocator;
//! 7. `pcp` (the per-CPU handle), then `pcp::refill`, `pcp::drain` (and
//!    its order of lists), `pcp::bulk`, `pcp::tune` (6.7's tuning of
//!    `high`) and `pcp::nolock` (6.15's `alloc_pages_nolock` and
//!    `free_pages_nolock`, which only try their locks);
//! 8. `views` (the kernel's `/proc` views of the zones, the zoneinfo
//!    reader and the sizing from the sysctls), over the allocator and its
//!    per-CPU handles;
//! 9. `start_state` (an allocator's free lists rebuilt to a machine's
//!    pagetypeinfo counts, through `zone`'s rebuild), over `views`;
//! 10. `testing` (feature `testing`: the reference and whole-allocator
//!     checks).

#![deny(unsafe_code)]

mod alloc;
mod chain;
mod compaction;
// Deferred init writes the descriptors of chunks it alone claimed.
#[allow(unsafe_code)]
mod deferred;
mod era;
mod error;
// Real frames: a mapping written by the allocator for blocks it owns.
#[allow(unsafe_code)]
mod frames;
mod gfp;
mod hotplug;
// The hugetlb pool: a gigantic folio's compound fields over the blocks it
// owns, and the model's HVO calls for folios it owns.
#[allow(unsafe_code)]
mod hugetlb;
mod init;
// The intrusive lists and the owned-block token: the only writers of a
// page's links.
#[allow(unsafe_code)]
mod list;
// LLFree, the lock-free page-frame allocator of the USENIX ATC 2023 paper,
// beside the buddy: atomics only, no unsafe.
pub mod llfree;
// The zone lock hands out `&mut` to the free area through an `UnsafeCell`.
#[allow(unsafe_code)]
mod lock;
// memmap_init writes the descriptors of a model it holds by `&mut`.
#[allow(unsafe_code)]
mod memmap_init;
mod memmap_on_memory;
mod memory_notify;
mod migrate;
mod movable;
mod node;
mod pcp;
mod slowpath;
mod split_page;
mod start_state;
#[cfg(feature = "testing")]
pub mod testing;
mod types;
// Flag operations are the `Page` owners' `unsafe fn`s.
#[allow(unsafe_code)]
mod variant;
pub mod views;
// pageblock_pfn_to_page and zone->contiguous.
mod walk;
mod watermark;
// Zones and the buddy algorithm: merges and splits reach pages as
// `page + offset`; a zone takes and gives back its pages' descriptors.
#[allow(unsafe_code)]
mod zone;

pub use alloc::{Allocator, LockPolicy, Options};
pub use chain::PageChain;
pub use compaction::{
    COMPACT_CLUSTER_MAX, COMPACT_MAX_DEFER_SHIFT, CompactControl, CompactCounts, CompactError,
    CompactPriority, CompactResult, CompactRun, CompactState, CompactTry, CompactVmstat,
    EXTFRAG_THRESHOLD, MAX_COMPACT_RETRIES, alloc_pages_direct_compact,
    alloc_pages_direct_compact_retry, compact_gap, compact_zone, compact_zone_scan,
    compaction_suitable, fragmentation_index, should_compact_retry,
};
pub use compaction::{ContigPageInfo, fill_contig_page_info};
pub use compaction::{
    DEFAULT_COMPACTION_PROACTIVENESS, HPAGE_FRAG_CHECK_INTERVAL_MSEC, Kcompactd, ProactiveError,
    ProactiveRun, compaction_hpage_order, extfrag_for_order, fragmentation_score_node,
    fragmentation_score_wmark, fragmentation_score_zone, proactive_compact_node,
};
pub use era::{Era, Gone, Mechanisms, NotInEra};
pub use error::{
    AllocError, FreeError, InitError, MemHotplugError, ModelMismatch, RangeError, RequestError,
};
pub use frames::{Frames, FramesError, MAX_FRAMES_BYTES};
pub use gfp::{Gfp, GfpError, ParseGfpError};
pub use hotplug::{OnlineType, UnknownOnlineType};
pub use hugetlb::{HugetlbCounts, HugetlbError, HugetlbPool, HvoMode};
pub use lock::ZoneLockKind;
pub use memmap_init::{MemmapInitCounts, MemmapInitForm, MemmapInitZone, memmap_init};
pub use memmap_on_memory::{MemmapOnMemory, MemmapOnMemoryError, memmap_on_memory_pages, pmd_size};
pub use memory_notify::{MemoryAction, MemoryNotifierFn, MemoryNotify, NotifierId, NotifyResult};
pub use migrate::{
    MigrateCounts, MigrateError, MigrateFail, OwnerError, OwnerId, Owners, alloc_migration_target,
    migrate_pages,
};
pub use movable::{CoreSize, MovableCore, ParseCoreSizeError};
pub use node::{Node, NodeMask};
pub use pcp::{
    GFP_NOLOCK, MemallocSaved, MemallocScope, NUMA_STATS_THRESHOLD, PCP_BATCH_SCALE_MAX, PerCpu,
};
pub use start_state::StartStateError;
pub use types::{
    BuddyModel, HighatomicRules, MAX_BULK, MAX_NR_ZONES, MAX_ZONES, NumaEvents,
    PAGE_ALLOC_COSTLY_ORDER, ZoneId, ZoneStats, ZoneType,
};
pub use variant::{
    Bitmap, Config, Kernel, KernelHoleCheck, NoBitmapAtomic, Up, Variant, VariantName,
};
pub use walk::{__pageblock_pfn_to_page, pageblock_pfn_to_page};
pub use watermark::{
    LOWMEM_RESERVE_RATIO, MIN_PERCPU_PAGELIST_HIGH_FRACTION, NR_KERNEL_ZONES, Sysctls, Watermarks,
    lowmem_reserve, lowmem_reserve_with, min_free_kbytes, node_lowmem_reserve,
    recommended_min_free_kbytes, resolve_min_free_kbytes, setup_per_zone_wmarks,
    setup_per_zone_wmarks_with, stat_threshold, zone_highsize,
};
pub use zone::{PCP_HIGH_BATCHES, Zone, zone_batchsize, zone_batchsize_for};
