//! The allocator's rows of `bench memdesc`, written once over the page
//! layout: an order-0 alloc+free through the per-CPU lists, the zone
//! path's split+merge pair (an order-0 request splits a `MAX_PAGE_ORDER`
//! block down and its free merges it back, reading each buddy's
//! descriptor), a 128-page bulk array, and a replay of a recording (by
//! default the one that ships with the repository,
//! `benches/tests/data/gzip-dd.trace.zst`).
//!
//! The allocator runs at every size: `buddy::BuddyModel` asks for a
//! `BuddyPage` layout, and all four are one (64 and 32 bytes hold the
//! allocator's state in the page, 16 bytes a listed page's in a
//! `struct buddy` from a slab cache, 8 bytes that and an allocated page's
//! in a memdesc from a second one).

use std::path::{Path, PathBuf};

use buddy::{AllocError, Allocator, BuddyModel, Gfp, Kernel, Options};
use sparsemem::{Layout, Page8, Page16, Pfn};
use vmemmap::VmemmapOptions;

use super::build::BuildAt;
use crate::trace::TraceError;
use crate::trace::format::TraceReader;
use crate::trace::replay::{ReplayOptions, replay_through};
use crate::workloads::{bulk_arrays, pcp_pairs, pcp_pairs_gfp, zone_pairs, zone_pairs_gfp};

/// Pages per bulk request: the 2021 series' largest array.
pub const BULK_PAGES: usize = 128;

/// The recording the replay row replays unless told another.
pub fn shipped_trace() -> PathBuf {
    [env!("CARGO_MANIFEST_DIR"), "tests/data/gzip-dd.trace.zst"]
        .iter()
        .collect()
}

/// The `struct buddy` cache's bytes right after boot at `size`, counted,
/// not measured: one object per `MAX_PAGE_ORDER` block of present memory
/// (all of it free, in the largest blocks), in whole slabs of as many
/// objects as fit; 0 where the page holds its own links (64 and 32
/// bytes). At 8 bytes the allocated pages' memdesc cache adds nothing at
/// boot (nothing is allocated yet). It is a floor: the cache's worst case,
/// every other page allocated so that no two free pages merge, is one
/// object per two pages (and at 8 bytes one memdesc per allocated head).
pub fn boot_descriptor_bytes(layout: &Layout, size: sparsemem::PageSize) -> u64 {
    use sparsemem::{BuddyPage, PageSize, SLAB_BYTES};
    let cache = match size {
        PageSize::B16 => <Page16 as BuddyPage>::buddy_cache_info(),
        PageSize::B8 => <Page8 as BuddyPage>::buddy_cache_info(),
        PageSize::B64 | PageSize::B32 => None,
    };
    cache.map_or(0, |c| {
        let blocks = layout
            .present_pages()
            .div_ceil(layout.geometry().max_order_nr_pages());
        blocks.div_ceil(SLAB_BYTES / c.objsize) * SLAB_BYTES
    })
}

/// What an allocator row times.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AllocWork {
    /// Order-0 alloc+free through a per-CPU list.
    Pcp,
    /// Order-0 alloc+free on the zone path: a split and the merges back.
    SplitMerge,
    /// One 128-page bulk array allocation and its frees.
    Bulk,
}

/// Where an order-0 pair of `bench breakdown --page-size` runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PairPath {
    /// Through a per-CPU list (a fresh handle, warmed by one pair).
    Pcp,
    /// On the zone path: a split and the merges back.
    Zone,
}

/// One size's allocator: what a trial of each row calls.
pub trait SizedAllocator {
    /// `n` operations of `work` (pairs, or bulk requests); returns a fold
    /// of the pfns for `black_box`.
    fn run(&self, work: AllocWork, n: u64) -> u64;
    /// `n` order-0 pairs of `gfp` on `path`; returns a fold of the pfns.
    fn pairs(&self, path: PairPath, n: u64, gfp: Gfp) -> u64;
    /// Replays the recording at `trace` through a fresh allocator of the
    /// same type; returns ns per event of the replay loop.
    fn replay(&self, trace: &Path) -> Result<f64, TraceError>;
}

/// An allocator over a model of type `M`, with what it was built from so
/// that a replay can build another.
struct Rig<M: BuddyModel> {
    alloc: Allocator<M, Kernel>,
    layout: Layout,
    options: VmemmapOptions,
    alloc_options: Options,
}

impl<M: BuddyModel + BuildAt> Rig<M> {
    fn new(
        layout: &Layout,
        options: VmemmapOptions,
        alloc_options: Options,
    ) -> Result<Self, AllocError> {
        let alloc = Allocator::new(M::build_at(layout, options)?, layout, alloc_options)?;
        Ok(Rig {
            alloc,
            layout: layout.clone(),
            options,
            alloc_options,
        })
    }
}

impl<M: BuddyModel + BuildAt> SizedAllocator for Rig<M> {
    fn run(&self, work: AllocWork, n: u64) -> u64 {
        let node = self.alloc.nodes()[0].id;
        match work {
            AllocWork::SplitMerge => zone_pairs(&self.alloc, node, n),
            AllocWork::Pcp => {
                // A fresh handle per trial, warmed by one pair.
                let mut cpu = self.alloc.cpu_on(node).expect("a node with memory");
                pcp_pairs(&mut cpu, 1);
                pcp_pairs(&mut cpu, n)
            }
            AllocWork::Bulk => {
                let mut cpu = self.alloc.cpu_on(node).expect("a node with memory");
                let mut slots: Vec<Option<Pfn>> = vec![None; BULK_PAGES];
                bulk_arrays(&mut cpu, 1, &mut slots);
                bulk_arrays(&mut cpu, n, &mut slots)
            }
        }
    }

    fn pairs(&self, path: PairPath, n: u64, gfp: Gfp) -> u64 {
        let node = self.alloc.nodes()[0].id;
        match path {
            PairPath::Zone => zone_pairs_gfp(&self.alloc, node, n, gfp),
            PairPath::Pcp => {
                let mut cpu = self.alloc.cpu_on(node).expect("a node with memory");
                pcp_pairs_gfp(&mut cpu, 1, gfp);
                pcp_pairs_gfp(&mut cpu, n, gfp)
            }
        }
    }

    fn replay(&self, trace: &Path) -> Result<f64, TraceError> {
        let built = M::build_at(&self.layout, self.options).map_err(AllocError::from);
        let alloc = built
            .and_then(|m| {
                Ok(Allocator::<M, Kernel>::new(
                    m,
                    &self.layout,
                    self.alloc_options,
                )?)
            })
            .map_err(|e| TraceError::file(format!("replay allocator: {e}")))?;
        let open = || TraceReader::open(trace);
        let options = ReplayOptions {
            era: self.alloc_options.era,
            ..ReplayOptions::default()
        };
        let timed = replay_through(&alloc, &self.layout, &open, options)?;
        Ok(timed.elapsed_ns / timed.events.events.max(1) as f64)
    }
}

/// The allocator over a fresh model of type `M` (at its page size) on
/// `layout`.
pub fn sized_allocator<M: BuddyModel + BuildAt>(
    layout: &Layout,
    options: VmemmapOptions,
    alloc_options: Options,
) -> Result<Box<dyn SizedAllocator>, AllocError> {
    Ok(Box::new(Rig::<M>::new(layout, options, alloc_options)?))
}
