//! The memory a start state left allocated, as the pages a recording
//! frees without having seen them allocated.
//!
//! A recording begins on a machine whose memory is mostly in use, and its
//! frees of that memory (page cache reclaimed, a process's pages at exit)
//! carry pfns no event allocated. On the machine those frees fill the
//! per-CPU lists that later allocations are served from, so a replay
//! that skips them refills from the zone far more often than the kernel
//! did. With a start state, the model holds the machine's allocated
//! memory too, at other pfns (the kernel does not say which pages are in
//! use): each such free takes one of those pages from the zone the
//! trace's pfn is in (any zone when the pfn is in none of the model's)
//! and frees it, splitting a held block into pages (`split_page`) when
//! no single page is left. Only order-0 frees are served this way (most
//! of them are: 85 % and more in the recordings tried), since a start
//! state's blocks split only into pages.
//!
//! The per-CPU lists start where the snapshot's zoneinfo shows them: as
//! the replay first uses a CPU, its `high` for each zone is restored
//! ([`PerCpu::restore_high`]) and `count` of the held pages of that zone
//! are freed onto its lists, the pages the start state counted as
//! allocated because buddyinfo leaves them out. Which orders and
//! migratetypes the machine's lists held is not printed: they start as
//! order-0 pages of their pageblocks' migratetypes.

use buddy::{AllocError, Allocator, BuddyModel, FreeError, PerCpu, Variant, ZoneId};
use rustc_hash::FxHashMap;
use sparsemem::{Order, PageLayout, Pfn};

use crate::snapshot::StartState;

/// What a start state hands a pass: the blocks it left allocated, and the
/// pagesets its snapshot showed, as `(cpu, zone, count, high)`.
#[derive(Default)]
pub(super) struct FromStart {
    blocks: Vec<(Pfn, Order)>,
    pagesets: Vec<(u16, ZoneId, u64, u64)>,
}

impl FromStart {
    /// Applies `start` to `alloc` ([`StartState::apply_held`]).
    pub(super) fn apply<M: BuddyModel, V: Variant>(
        start: &StartState,
        alloc: &mut Allocator<M, V>,
    ) -> Result<FromStart, AllocError> {
        let blocks = start.apply_held(alloc)?;
        let pagesets = start
            .pagesets()
            .iter()
            .filter_map(|s| {
                let zone = alloc
                    .zones()
                    .iter()
                    .find(|z| u32::from(z.node.get()) == s.node && z.kind.name() == s.zone)?;
                Some((u16::try_from(s.cpu).ok()?, zone.id, s.count, s.high))
            })
            .collect();
        Ok(FromStart { blocks, pagesets })
    }

    /// The pages the start state left allocated.
    pub(super) fn pages(&self) -> u64 {
        self.blocks.iter().map(|(_, o)| o.nr_pages()).sum()
    }
}

/// One zone's held memory: pages ready to free, and blocks not yet split.
#[derive(Default)]
struct Held {
    pages: Vec<Pfn>,
    blocks: Vec<(Pfn, Order)>,
}

/// The start state's allocated memory, by zone id.
#[derive(Default)]
pub(super) struct Prior {
    zones: FxHashMap<u8, Held>,
    pagesets: Vec<(u16, ZoneId, u64, u64)>,
    /// Pages freed from it so far.
    pub(super) freed_pages: u64,
}

impl Prior {
    /// The blocks a start state left allocated (`(head, order)`), each
    /// filed under its zone.
    pub(super) fn new<M: BuddyModel, V: Variant>(
        alloc: &Allocator<M, V>,
        start: &FromStart,
    ) -> Prior {
        let mut zones: FxHashMap<u8, Held> = FxHashMap::default();
        for &(pfn, order) in start.blocks.iter().rev() {
            if let Some(page) = alloc.model().pfn_to_page(pfn) {
                zones
                    .entry(page.zone_id())
                    .or_default()
                    .blocks
                    .push((pfn, order));
            }
        }
        Prior {
            zones,
            pagesets: start.pagesets.clone(),
            freed_pages: 0,
        }
    }

    /// Seeds a new handle for trace CPU `cpu` with the snapshot's
    /// pagesets of that CPU: `high` restored, `count` held pages of the
    /// zone freed onto its lists (fewer if the zone holds fewer).
    pub(super) fn seed<M: BuddyModel, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        handle: &mut PerCpu<'_, M, V>,
        cpu: u16,
    ) -> Result<(), FreeError> {
        let sets: Vec<_> = self
            .pagesets
            .iter()
            .filter(|s| s.0 == cpu)
            .copied()
            .collect();
        for (_, zid, count, high) in sets {
            handle.restore_high(zid, high);
            for _ in 0..count {
                let Some(pfn) = self.take_in(alloc, zid.get())? else {
                    break;
                };
                handle.free_pages(pfn, Order::ZERO)?;
            }
        }
        Ok(())
    }

    /// A held order-0 page for a free of `trace_pfn`: from the zone of
    /// the model's page at that pfn, else from any zone; `None` when
    /// nothing is held. A block is split to get one.
    pub(super) fn take<M: BuddyModel, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        trace_pfn: u64,
    ) -> Result<Option<Pfn>, FreeError> {
        let zone = alloc
            .model()
            .pfn_to_page(Pfn::new(trace_pfn))
            .map(|p| p.zone_id())
            .filter(|z| self.zones.get(z).is_some_and(Held::any));
        let Some(zone) = zone.or_else(|| self.zones.iter().find(|(_, h)| h.any()).map(|(&z, _)| z))
        else {
            return Ok(None);
        };
        self.take_in(alloc, zone)
    }

    /// A held order-0 page of zone id `zone`, a block split to get one;
    /// `None` when the zone holds nothing.
    fn take_in<M: BuddyModel, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        zone: u8,
    ) -> Result<Option<Pfn>, FreeError> {
        let Some(held) = self.zones.get_mut(&zone) else {
            return Ok(None);
        };
        if held.pages.is_empty() {
            let Some((pfn, order)) = held.blocks.pop() else {
                return Ok(None);
            };
            alloc.split_page(pfn, order)?;
            held.pages
                .extend((0..order.nr_pages()).rev().map(|i| pfn + i));
        }
        self.freed_pages += 1;
        Ok(held.pages.pop())
    }
}

impl Held {
    fn any(&self) -> bool {
        !self.pages.is_empty() || !self.blocks.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use buddy::{Kernel, Options};
    use sparsemem::{MemoryModel, SparseExtreme};

    use super::*;
    use crate::snapshot::Snapshot;

    /// The Debian 12 guest's snapshot (its saved `/proc` and `/sys`).
    fn guest() -> Snapshot {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/guests/6.1/plain");
        Snapshot::read(Path::new(root), "x86_64", 4096)
    }

    /// A handle seeded from the snapshot holds each zone's `count` of the
    /// start state's pages on its lists and the snapshot's `high`; the
    /// pages come out of what the start state held, and a free of a page
    /// the recording never allocated takes one more.
    #[test]
    fn a_seeded_cpu_holds_the_snapshots_count_and_high() {
        let snapshot = guest();
        let layout = snapshot.layout("guest").unwrap();
        let start = StartState::of(&snapshot, Path::new("guest"), false, 0).unwrap();
        let options = Options::for_era(buddy::Era::V6_18);
        let mut alloc = Allocator::<SparseExtreme, Kernel>::new(
            SparseExtreme::new(&layout).unwrap(),
            &layout,
            options,
        )
        .unwrap();
        let from_start = FromStart::apply(&start, &mut alloc).unwrap();
        let held = from_start.pages();
        let mut prior = Prior::new(&alloc, &from_start);
        let dma32 = alloc
            .zones()
            .iter()
            .find(|z| z.kind.name() == "DMA32")
            .unwrap();
        let sets: Vec<_> = start
            .pagesets()
            .iter()
            .filter(|s| s.zone == "DMA32" && s.cpu == 0)
            .collect();
        let [set] = sets.as_slice() else {
            panic!("one DMA32 pageset for CPU 0: {sets:?}");
        };
        assert!(set.count > 0, "{set:?}");
        let mut cpu = alloc.cpu_on(layout.first_node()).unwrap();
        prior.seed(&alloc, &mut cpu, 0).unwrap();
        assert_eq!(cpu.count(dma32.id), set.count);
        assert_eq!(
            cpu.high(dma32.id),
            set.high
                .clamp(u64::from(dma32.high()), u64::from(dma32.high_max()))
        );
        let seeded = prior.freed_pages;
        assert!(seeded >= set.count);
        // A free of a page the recording never allocated, in DMA32.
        let pfn = prior
            .take(&alloc, dma32.start_pfn().get())
            .unwrap()
            .unwrap();
        assert_eq!(
            alloc.model().pfn_to_page(pfn).unwrap().zone_id(),
            dma32.id.get()
        );
        cpu.free_pages(pfn, Order::ZERO).unwrap();
        assert_eq!(prior.freed_pages, seeded + 1);
        assert!(prior.freed_pages < held);
    }
}
