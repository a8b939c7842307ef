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
//! are put on its lists ([`PerCpu::restore_on_list`]: the free path's
//! tuning and drains do not run, so the lists hold `count` whatever
//! order the pages go back in), the pages the start state counted as
//! allocated because buddyinfo leaves them out. Which orders and
//! migratetypes the machine's lists held is not printed, but the trace
//! shows part of it ([`ListEvidence`]): a page a CPU allocates, or its
//! drain gives back, before any event has named it (no refill took it
//! from the zone, no free put it on a list) was on that CPU's lists when
//! the recording began. Those order-0 pages are seeded first, each on the
//! list of its migratetype (a held page of a pageblock of that type, so
//! that the free files it there). The rest of `count` sat on lists the
//! recording never emptied: a list it refilled was empty at its first
//! refill, so it had held only the pages the trace shows. That rest goes on
//! an order-0 list of a migratetype this CPU's lists were never refilled
//! for, where it counts towards `count` and the drains but serves only
//! allocations the kernel also served from its lists; with none such it
//! is left out. A block of order 1 to 3 the trace shows there is seeded
//! when the start state left a block of that order allocated in a
//! pageblock of its migratetype (its held blocks split into pages only,
//! so a larger one cannot give it).
//!
//! A replay from boot (no start state, every page free) has that evidence,
//! and what the vmstat work's drains show of `count` ([`list_floors`]):
//! each CPU's lists are seeded with the pages and blocks the trace shows
//! on them, taken from their zones, and where the work's drains show the
//! lists held more, order-0 pages the recording never names up to that
//! floor, on a list of a migratetype it never refilled, as for a start
//! state. Without a snapshot nothing more is known of `count`: other pages
//! the lists held stay in the zones.

use buddy::{AllocError, Allocator, BuddyModel, FreeError, Gfp, PerCpu, Variant, ZoneId};
use rustc_hash::{FxHashMap, FxHashSet};
use sparsemem::{MIGRATE_PCPTYPES, MIGRATE_TYPES, Migratetype, Order, PageLayout, Pfn};

use super::floor;
#[cfg(doc)]
use super::floor::list_floors;
use crate::snapshot::StartState;
use crate::trace::{Event, EventKind};

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

    /// Whether the start state shows any CPU's lists (so a pass seeds
    /// them, and wants the trace's [`ListEvidence`]).
    pub(super) fn has_pagesets(&self) -> bool {
        !self.pagesets.is_empty()
    }

    /// Whether there is no start state: the replay starts from boot, every
    /// page free.
    pub(super) fn is_boot(&self) -> bool {
        self.blocks.is_empty() && self.pagesets.is_empty()
    }
}

/// What a trace shows of one CPU's per-CPU lists as it began.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct ListEvidence {
    /// Order-0 pages this CPU allocated or drained before any event named
    /// them: trace pfn, and the list's migratetype (the request's for an
    /// allocation, the printed one for a drain), in trace order.
    pub(super) pages: Vec<(u64, Migratetype)>,
    /// The same for blocks of order 1 to `PAGE_ALLOC_COSTLY_ORDER`, with
    /// their order.
    pub(super) blocks: Vec<(u64, Order, Migratetype)>,
    /// The order-0 migratetypes the recording refilled this CPU's lists
    /// for (`percpu_refill=1` at order 0).
    pub(super) refilled: [bool; MIGRATE_PCPTYPES],
}

/// Each trace CPU's [`ListEvidence`], from every event in trace order. A
/// pfn counts as named once any event carries it (an allocation, a free,
/// a block taken under the zone lock or drained), on any CPU: a later
/// allocation of it may have come from the zone or another list.
pub(super) fn list_evidence(events: &[Event]) -> FxHashMap<u16, ListEvidence> {
    let mut named: FxHashSet<u64> = FxHashSet::default();
    let mut out: FxHashMap<u16, ListEvidence> = FxHashMap::default();
    for e in events {
        let Some(pfn) = e.pfn else { continue };
        let first = named.insert(pfn);
        let mt = match e.kind {
            EventKind::Alloc => Some(e.gfp.migratetype()),
            EventKind::PcpuDrain => usize::try_from(e.migratetype)
                .ok()
                .filter(|&i| i < MIGRATE_PCPTYPES)
                .map(|i| Migratetype::ALL[i]),
            EventKind::AllocZoneLocked => {
                if e.percpu_refill && e.order == 0 {
                    let mt = usize::try_from(e.migratetype).ok();
                    if let Some(i) = mt.filter(|&i| i < MIGRATE_PCPTYPES) {
                        out.entry(e.cpu).or_default().refilled[i] = true;
                    }
                }
                None
            }
            EventKind::Free | EventKind::FreeBatched => None,
        };
        if let Some(mt) = mt
            && first
            && e.order <= buddy::PAGE_ALLOC_COSTLY_ORDER
            && mt.index() < MIGRATE_PCPTYPES
        {
            let cpu = out.entry(e.cpu).or_default();
            if e.order == 0 {
                cpu.pages.push((pfn, mt));
            } else {
                cpu.blocks.push((pfn, Order::new(e.order), mt));
            }
        }
    }
    out
}

/// The migratetype of each pageblock the trace shows free lists of, by
/// trace pfn `>> pageblock_order`: most often among its blocks taken from
/// the zone (`mm_page_alloc_zone_locked` prints the free list's type, the
/// pageblock's but for a steal) and drained from the per-CPU lists
/// (`mm_page_pcpu_drain` prints the list's, which the page's pageblock
/// had when it was freed). A page the recording frees without having seen
/// it allocated is most likely of its pageblock's migratetype, which the
/// kernel does not print in `mm_page_free`.
fn pageblock_types(events: &[Event], pageblock_order: u8) -> FxHashMap<u64, Migratetype> {
    let mut seen: FxHashMap<u64, [u32; MIGRATE_TYPES]> = FxHashMap::default();
    for e in events {
        let (Some(pfn), Ok(mt)) = (e.pfn, usize::try_from(e.migratetype)) else {
            continue;
        };
        if matches!(e.kind, EventKind::AllocZoneLocked | EventKind::PcpuDrain) && mt < MIGRATE_TYPES
        {
            seen.entry(pfn >> pageblock_order).or_default()[mt] += 1;
        }
    }
    seen.into_iter()
        .map(|(block, counts)| {
            // The first of the most seen types, so a tie is always read
            // the same way.
            let best = (0..MIGRATE_TYPES)
                .rev()
                .max_by_key(|&i| counts[i])
                .unwrap_or_default();
            (block, Migratetype::ALL[best])
        })
        .collect()
}

/// The migratetype most of the trace's frees of pages no earlier event
/// named (pages allocated before the recording) had, among those whose
/// pageblock `types` shows; `None` when it shows none of theirs.
fn earlier_free_type(
    events: &[Event],
    types: &FxHashMap<u64, Migratetype>,
    pageblock_order: u8,
) -> Option<Migratetype> {
    let mut named: FxHashSet<u64> = FxHashSet::default();
    let mut counts = [0u64; MIGRATE_TYPES];
    for e in events {
        let Some(pfn) = e.pfn else { continue };
        if named.insert(pfn)
            && e.kind == EventKind::Free
            && let Some(mt) = types.get(&(pfn >> pageblock_order))
        {
            counts[mt.index()] += 1;
        }
    }
    let best = (0..MIGRATE_TYPES).rev().max_by_key(|&i| counts[i])?;
    (counts[best] > 0).then_some(Migratetype::ALL[best])
}

/// One zone's held memory: pages ready to free, and blocks not yet split
/// (`None` once taken), with where each migratetype's search for a block
/// has got to.
#[derive(Default)]
struct Held {
    /// Pages split off for no migratetype in particular.
    pages: Vec<Pfn>,
    /// Pages split off a block taken for a migratetype, by their own
    /// pageblock's.
    typed: [Vec<Pfn>; MIGRATE_TYPES],
    blocks: Vec<Option<(Pfn, Order)>>,
    /// Blocks below this index hold no more of the migratetype's
    /// pageblocks' heads untaken; `None` before its first search.
    cursor: [Option<usize>; MIGRATE_TYPES],
}

/// The start state's allocated memory, by zone id.
#[derive(Default)]
pub(super) struct Prior {
    zones: FxHashMap<u8, Held>,
    pagesets: Vec<(u16, ZoneId, u64, u64)>,
    evidence: FxHashMap<u16, ListEvidence>,
    /// No start state: the lists are seeded from the zones, with the
    /// trace's evidence only.
    boot: bool,
    /// The migratetype the trace shows each pageblock's free lists held
    /// ([`pageblock_types`]), by trace pfn `>>` the pageblock order.
    block_types: FxHashMap<u64, Migratetype>,
    /// The pageblock order the trace's pfns are read in.
    pageblock_order: u8,
    /// The migratetype most of the recording's frees of earlier pages had
    /// where the trace shows their pageblocks' ([`earlier_free_type`]),
    /// for those where it does not.
    earlier_free_type: Option<Migratetype>,
    /// From boot: the least pages each CPU's lists of each zone held as
    /// the recording began ([`list_floors`]), by
    /// `(trace CPU, zone id)`.
    floors: FxHashMap<(u16, u8), u64>,
    /// Pages freed from it so far.
    pub(super) freed_pages: u64,
    /// Pages of the snapshots' `count`s seeded onto the lists, and those
    /// that found no list to go on or no held page.
    pub(super) seeded_pages: u64,
    pub(super) unseeded_pages: u64,
}

impl Prior {
    /// The blocks a start state left allocated (`(head, order)`), each
    /// filed under its zone, and what the trace shows of the CPUs' lists.
    pub(super) fn new<M: BuddyModel, V: Variant>(
        alloc: &Allocator<M, V>,
        start: &FromStart,
        evidence: FxHashMap<u16, ListEvidence>,
    ) -> Prior {
        let mut zones: FxHashMap<u8, Held> = FxHashMap::default();
        for &(pfn, order) in start.blocks.iter().rev() {
            if let Some(page) = alloc.model().pfn_to_page(pfn) {
                zones
                    .entry(page.zone_id())
                    .or_default()
                    .blocks
                    .push(Some((pfn, order)));
            }
        }
        Prior {
            zones,
            pagesets: start.pagesets.clone(),
            evidence,
            boot: start.is_boot(),
            block_types: FxHashMap::default(),
            pageblock_order: alloc.model().geometry().pageblock_order().get(),
            earlier_free_type: None,
            floors: FxHashMap::default(),
            freed_pages: 0,
            seeded_pages: 0,
            unseeded_pages: 0,
        }
    }

    /// Reads from the trace which migratetype each pageblock's pages had
    /// ([`pageblock_types`], [`earlier_free_type`]), for [`Prior::take`].
    pub(super) fn read_pageblock_types(&mut self, events: &[Event]) {
        self.block_types = pageblock_types(events, self.pageblock_order);
        self.earlier_free_type = earlier_free_type(events, &self.block_types, self.pageblock_order);
    }

    /// Sets the floors a replay from boot seeds the lists up to
    /// ([`list_floors`]).
    pub(super) fn set_list_floors(&mut self, floors: FxHashMap<(u16, u8), u64>) {
        self.floors = floors;
    }

    /// Seeds a new handle for trace CPU `cpu` with the snapshot's
    /// pagesets of that CPU: `high` restored, and `count` held pages of
    /// the zone put on its lists — first those the trace shows there,
    /// each on its migratetype's list, then the rest on a list the
    /// recording never refilled (module documentation); fewer if the zone
    /// holds fewer. A page the trace shows at a pfn in none of the CPU's
    /// zones here (a trace replayed on another machine's state) is
    /// seeded in its highest zone.
    pub(super) fn seed<M: BuddyModel, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        handle: &mut PerCpu<'_, M, V>,
        cpu: u16,
    ) -> Result<(), AllocError> {
        if self.boot {
            return self.seed_from_boot(alloc, handle, cpu);
        }
        let sets: Vec<_> = self
            .pagesets
            .iter()
            .filter(|s| s.0 == cpu)
            .copied()
            .collect();
        let evidence = self.evidence.get(&cpu).cloned().unwrap_or_default();
        // Each page the trace shows goes to the zone of the model's page at
        // its pfn; one of a pfn in none of these zones (a trace of another
        // machine) to the CPU's highest, where its requests are served.
        let home = sets.iter().map(|s| s.1).max();
        let zone_of = |trace_pfn: u64| {
            let zone = alloc
                .model()
                .pfn_to_page(Pfn::new(trace_pfn))
                .map(|p| ZoneId::new(p.zone_id()));
            zone.filter(|z| sets.iter().any(|s| s.1 == *z)).or(home)
        };
        let zones: Vec<Option<ZoneId>> = evidence.pages.iter().map(|&(p, _)| zone_of(p)).collect();
        let block_zones: Vec<Option<ZoneId>> = evidence
            .blocks
            .iter()
            .map(|&(p, _, _)| zone_of(p))
            .collect();
        for &(_, zid, count, high) in &sets {
            handle.restore_high(zid, high);
            let mut seeded = 0;
            for (&(_, mt), zone) in evidence.pages.iter().zip(&zones) {
                if *zone == Some(zid)
                    && let Some(pfn) = self.take_in(alloc, zid.get(), Some(mt))?
                {
                    handle.restore_on_list(pfn, Order::ZERO)?;
                    seeded += 1;
                }
            }
            for (&(_, order, mt), zone) in evidence.blocks.iter().zip(&block_zones) {
                if *zone == Some(zid)
                    && let Some(pfn) = self.take_block(alloc, zid.get(), order, mt)
                {
                    handle.restore_on_list(pfn, order)?;
                    seeded += order.nr_pages();
                }
            }
            let unrefilled = (0..MIGRATE_PCPTYPES)
                .filter(|&i| !evidence.refilled[i])
                .map(|i| Migratetype::ALL[i]);
            for mt in unrefilled {
                while seeded < count {
                    let Some(pfn) = self.take_in(alloc, zid.get(), Some(mt))? else {
                        break;
                    };
                    handle.restore_on_list(pfn, Order::ZERO)?;
                    seeded += 1;
                }
            }
            self.seeded_pages += seeded;
            self.unseeded_pages += count.saturating_sub(seeded);
        }
        Ok(())
    }

    /// Seeds a new handle for trace CPU `cpu` on an allocator without a
    /// start state: each page and block the trace shows on the CPU's
    /// lists (module documentation) is allocated from the zone of its
    /// pfn, from a pageblock of its migratetype where one is free (the
    /// zone path, `__rmqueue`), and put on the lists
    /// ([`PerCpu::restore_on_list`]). Where the vmstat work's drains show
    /// the lists held more ([`list_floors`]; in eras that tune `high`),
    /// order-0 pages of a migratetype the recording never refilled this
    /// CPU's lists for make up the floor. Each zone's `high` is first
    /// raised to hold what is seeded there and a `batch` more: a list that
    /// held that many pages at rest had a `high` above them (6.7's tuning;
    /// before it `high` is fixed and the lists keep what fits). A page the
    /// zones cannot give, or a floor with no such migratetype, is left out
    /// and counted.
    fn seed_from_boot<M: BuddyModel, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        handle: &mut PerCpu<'_, M, V>,
        cpu: u16,
    ) -> Result<(), AllocError> {
        let Some(evidence) = self.evidence.get(&cpu) else {
            return Ok(());
        };
        let node = handle.node();
        let zone_of = |trace_pfn: u64| floor::zone_of(alloc, trace_pfn).map(ZoneId::new);
        let shown: Vec<(Option<ZoneId>, Order, Migratetype)> = evidence
            .pages
            .iter()
            .map(|&(pfn, mt)| (zone_of(pfn), Order::ZERO, mt))
            .chain(
                evidence
                    .blocks
                    .iter()
                    .map(|&(pfn, order, mt)| (zone_of(pfn), order, mt)),
            )
            .filter(|&(_, order, _)| handle.pcp_allowed_order(order))
            .collect();
        let mut per_zone: FxHashMap<ZoneId, u64> = FxHashMap::default();
        for &(zone, order, _) in &shown {
            if let Some(zone) = zone {
                *per_zone.entry(zone).or_default() += order.nr_pages();
            }
        }
        let mut below_floor: Vec<(ZoneId, u64)> = Vec::new();
        for (&(_, zone), &floor) in self.floors.iter().filter(|((c, _), _)| *c == cpu) {
            let zid = ZoneId::new(zone);
            let shown = per_zone.entry(zid).or_default();
            if handle.high_min(zid) < handle.high_max(zid) && floor > *shown {
                below_floor.push((zid, floor - *shown));
                *shown = floor;
            }
        }
        for (&zid, &pages) in &per_zone {
            let batch = alloc.zone(zid).map_or(0, |z| u64::from(z.batch()));
            let high = handle.high(zid).max(pages + batch);
            handle.restore_high(zid, high);
        }
        for (zone, order, mt) in shown {
            let taken = alloc.alloc_pages_with(order, gfp_of(mt), node, |z| {
                zone.is_none_or(|id| z.id == id)
            });
            match taken {
                Ok(pfn) => {
                    handle.restore_on_list(pfn, order)?;
                    self.seeded_pages += order.nr_pages();
                }
                Err(_) => self.unseeded_pages += order.nr_pages(),
            }
        }
        below_floor.sort_unstable();
        let refilled = evidence.refilled;
        for (zid, pages) in below_floor {
            self.fill_to_floor(alloc, handle, zid, pages, refilled)?;
        }
        Ok(())
    }

    /// Puts `pages` order-0 pages of zone `zid` on `handle`'s lists, of
    /// the migratetypes the recording never `refilled` this CPU's lists
    /// for, for [`Prior::seed_from_boot`]'s floor; those the zone cannot
    /// give, or all with no such migratetype, are counted as left out.
    fn fill_to_floor<M: BuddyModel, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        handle: &mut PerCpu<'_, M, V>,
        zid: ZoneId,
        mut pages: u64,
        refilled: [bool; MIGRATE_PCPTYPES],
    ) -> Result<(), AllocError> {
        let node = handle.node();
        let unrefilled = (0..MIGRATE_PCPTYPES)
            .filter(|&i| !refilled[i])
            .map(|i| Migratetype::ALL[i]);
        for mt in unrefilled {
            while pages > 0 {
                let Ok(pfn) =
                    alloc.alloc_pages_with(Order::ZERO, gfp_of(mt), node, |z| z.id == zid)
                else {
                    break;
                };
                handle.restore_on_list(pfn, Order::ZERO)?;
                self.seeded_pages += 1;
                pages -= 1;
            }
        }
        self.unseeded_pages += pages;
        Ok(())
    }

    /// A held order-0 page for a free of `trace_pfn`: from the zone of
    /// the model's page at that pfn, else from any zone, and of a
    /// pageblock of the migratetype the trace shows at `trace_pfn`'s
    /// pageblock where it shows one and the zone holds such a page;
    /// `None` when nothing is held. A block is split to get one.
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
        let shown = self
            .block_types
            .get(&(trace_pfn >> self.pageblock_order))
            .copied();
        if let Some(mt) = shown.or(self.earlier_free_type)
            && let Some(pfn) = self.take_in(alloc, zone, Some(mt))?
        {
            return Ok(Some(pfn));
        }
        self.take_in(alloc, zone, None)
    }

    /// A held block of zone id `zone` of exactly `order` in a pageblock of
    /// migratetype `mt`, unsplit; `None` when the zone holds none.
    fn take_block<M: BuddyModel, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        zone: u8,
        order: Order,
        mt: Migratetype,
    ) -> Option<Pfn> {
        let held = self.zones.get_mut(&zone)?;
        let slot = held.blocks.iter_mut().rev().find(|b| {
            b.is_some_and(|(pfn, o)| {
                o == order && alloc.model().get_pfnblock_migratetype(pfn) == mt
            })
        })?;
        let (pfn, _) = slot.take()?;
        self.freed_pages += order.nr_pages();
        Some(pfn)
    }

    /// A held order-0 page of zone id `zone` — with `mt`, one of a
    /// pageblock of that migratetype — a block split to get one; `None`
    /// when the zone holds no such page.
    fn take_in<M: BuddyModel, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        zone: u8,
        mt: Option<Migratetype>,
    ) -> Result<Option<Pfn>, FreeError> {
        let Some(held) = self.zones.get_mut(&zone) else {
            return Ok(None);
        };
        let page = match mt {
            None => held.take_any(alloc)?,
            Some(mt) => held.take_typed(alloc, mt)?,
        };
        self.freed_pages += u64::from(page.is_some());
        Ok(page)
    }
}

/// A request of migratetype `mt`, for taking a page or block of that type
/// from a zone.
fn gfp_of(mt: Migratetype) -> Gfp {
    match mt {
        Migratetype::Movable => Gfp::HIGHUSER_MOVABLE,
        Migratetype::Reclaimable => Gfp::KERNEL | Gfp::RECLAIMABLE,
        _ => Gfp::KERNEL,
    }
}

impl Held {
    fn any(&self) -> bool {
        !self.pages.is_empty()
            || self.typed.iter().any(|p| !p.is_empty())
            || self.blocks.iter().any(Option::is_some)
    }

    /// Any held page: one split off before, else the last untaken block's.
    fn take_any<M: BuddyModel, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
    ) -> Result<Option<Pfn>, FreeError> {
        if let Some(pfn) = self.pages.pop() {
            return Ok(Some(pfn));
        }
        if let Some(pfn) = self.typed.iter_mut().find_map(Vec::pop) {
            return Ok(Some(pfn));
        }
        while let Some(slot) = self.blocks.pop() {
            if let Some((pfn, order)) = slot {
                alloc.split_page(pfn, order)?;
                self.pages
                    .extend((0..order.nr_pages()).rev().map(|i| pfn + i));
                return Ok(self.pages.pop());
            }
        }
        Ok(None)
    }

    /// A held page of a pageblock of migratetype `mt`: one split off
    /// before, else from the last untaken block whose head's pageblock is
    /// of that type, its pages filed by their own pageblocks'.
    fn take_typed<M: BuddyModel, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        mt: Migratetype,
    ) -> Result<Option<Pfn>, FreeError> {
        let m = mt.index();
        loop {
            if let Some(pfn) = self.typed[m].pop() {
                return Ok(Some(pfn));
            }
            // `take_any` may have shortened the blocks since.
            let mut i = self.cursor[m]
                .unwrap_or(self.blocks.len())
                .min(self.blocks.len());
            let found = loop {
                if i == 0 {
                    break None;
                }
                i -= 1;
                if let Some((pfn, order)) = self.blocks[i]
                    && alloc.model().get_pfnblock_migratetype(pfn) == mt
                {
                    self.blocks[i] = None;
                    break Some((pfn, order));
                }
            };
            self.cursor[m] = Some(i);
            let Some((pfn, order)) = found else {
                return Ok(None);
            };
            alloc.split_page(pfn, order)?;
            for page in (0..order.nr_pages()).rev().map(|i| pfn + i) {
                let own = alloc.model().get_pfnblock_migratetype(page);
                self.typed[own.index()].push(page);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use buddy::{Gfp, Kernel, Options};
    use sparsemem::{MemoryModel, SparseExtreme};

    use super::*;
    use crate::snapshot::Snapshot;

    /// A trace event of `kind` on `cpu` at `pfn`.
    fn event(kind: EventKind, cpu: u16, pfn: u64, order: u8, mt: i8) -> Event {
        Event {
            pfn: Some(pfn),
            order,
            migratetype: mt,
            ..Event::new(0, 0, cpu, kind)
        }
    }

    /// An allocation the trace shows first is evidence of the lists (a
    /// block of order 1 to 3 among their blocks), one whose pfn an
    /// earlier event named (a refill, a free, another allocation, on any
    /// CPU) or of an order the lists do not hold below a pageblock is not; a drain of a
    /// page no event named is, on its printed migratetype's list; an
    /// order-0 `percpu_refill=1` marks its migratetype refilled.
    #[test]
    fn the_trace_shows_the_pages_no_event_named_first() {
        let alloc = |cpu, pfn, order, gfp| Event {
            gfp,
            ..event(EventKind::Alloc, cpu, pfn, order, -1)
        };
        let refill = Event {
            percpu_refill: true,
            ..event(EventKind::AllocZoneLocked, 0, 20, 0, 0)
        };
        let events = [
            alloc(0, 10, 0, Gfp::HIGHUSER_MOVABLE),
            refill,
            alloc(0, 20, 0, Gfp::KERNEL),
            event(EventKind::Free, 1, 30, 0, -1),
            alloc(1, 30, 0, Gfp::KERNEL),
            event(EventKind::PcpuDrain, 1, 40, 0, 2),
            event(EventKind::PcpuDrain, 1, 41, 0, 3),
            alloc(1, 50, 2, Gfp::KERNEL),
            alloc(1, 70, 4, Gfp::KERNEL),
            alloc(1, 10, 0, Gfp::KERNEL),
            alloc(1, 60, 0, Gfp::KERNEL),
        ];
        let evidence = list_evidence(&events);
        assert_eq!(
            evidence[&0],
            ListEvidence {
                pages: vec![(10, Migratetype::Movable)],
                blocks: Vec::new(),
                refilled: [true, false, false],
            }
        );
        assert_eq!(
            evidence[&1],
            ListEvidence {
                pages: vec![(40, Migratetype::Reclaimable), (60, Migratetype::Unmovable)],
                blocks: vec![(50, Order::new(2), Migratetype::Unmovable)],
                refilled: [false; MIGRATE_PCPTYPES],
            }
        );
    }

    /// From boot, a CPU's lists hold the pages and blocks the trace shows
    /// on them and nothing more: its allocations of them take no refill,
    /// the next one does, and every page is still the allocator's.
    #[test]
    fn from_boot_the_lists_hold_what_the_trace_shows() {
        let layout = guest().layout("guest").unwrap();
        let alloc = guest_allocator(&layout);
        let (zid, first) = dma32(&alloc);
        let evidence = ListEvidence {
            pages: (0..3).map(|i| (first + i, Migratetype::Movable)).collect(),
            blocks: vec![(first + 8, Order::new(2), Migratetype::Unmovable)],
            refilled: [false, true, false],
        };
        let from_boot = FromStart::default();
        assert!(from_boot.is_boot());
        let mut prior = Prior::new(&alloc, &from_boot, [(0, evidence)].into_iter().collect());
        let managed = alloc.managed_pages_total();
        let mut cpu = alloc.cpu_on(layout.first_node()).unwrap();
        prior.seed(&alloc, &mut cpu, 0).unwrap();
        assert_eq!(cpu.count(zid), 3 + 4);
        assert_eq!((prior.seeded_pages, prior.unseeded_pages), (7, 0));
        let mut other = alloc.cpu_on(layout.first_node()).unwrap();
        prior.seed(&alloc, &mut other, 1).unwrap();
        assert_eq!(other.total_count(), 0, "the trace shows nothing on CPU 1");
        let refills = || alloc.stats_total().pcp_refills;
        let movable = Gfp::KERNEL | Gfp::MOVABLE | Gfp::DMA32;
        let before = refills();
        for _ in 0..3 {
            cpu.alloc(movable).unwrap();
        }
        cpu.alloc_pages(Order::new(2), Gfp::KERNEL | Gfp::DMA32)
            .unwrap();
        assert_eq!(refills(), before, "the seeded pages and block served");
        cpu.alloc(movable).unwrap();
        assert_eq!(refills(), before + 1, "past them, a refill");
        drop(cpu);
        drop(other);
        assert_eq!(alloc.free_pages_total() + 3 + 4 + 1, managed);
    }

    /// From boot, a floor the vmstat work's drains show fills the lists
    /// past what the trace names with order-0 pages of a migratetype the
    /// CPU never refilled; with every type refilled it is left out and
    /// counted, and a floor below what the trace names adds nothing.
    #[test]
    fn from_boot_a_floor_fills_a_list_never_refilled() {
        let layout = guest().layout("guest").unwrap();
        let alloc = guest_allocator(&layout);
        let (zid, first) = dma32(&alloc);
        let pages = (0..3)
            .map(|i| (first + i, Migratetype::Unmovable))
            .collect();
        let evidence = |refilled| ListEvidence {
            pages: Vec::clone(&pages),
            blocks: Vec::new(),
            refilled,
        };
        let cpu_of = |refilled, floor| {
            let mut prior = Prior::new(
                &alloc,
                &FromStart::default(),
                [(0, evidence(refilled))].into_iter().collect(),
            );
            prior.set_list_floors([((0, zid.get()), floor)].into_iter().collect());
            let mut cpu = alloc.cpu_on(layout.first_node()).unwrap();
            prior.seed(&alloc, &mut cpu, 0).unwrap();
            (cpu, prior.seeded_pages, prior.unseeded_pages)
        };
        let (cpu, seeded, unseeded) = cpu_of([true, false, false], 50);
        assert_eq!((cpu.count(zid), seeded, unseeded), (50, 50, 0));
        assert!(cpu.high(zid) >= 50, "high holds them");
        // The 47 unnamed pages went on the Movable list: Movable requests
        // take them without a refill.
        let refills = || alloc.stats_total().pcp_refills;
        let before = refills();
        let mut cpu = cpu;
        for _ in 0..47 {
            cpu.alloc(Gfp::KERNEL | Gfp::MOVABLE | Gfp::DMA32).unwrap();
        }
        assert_eq!(refills(), before);
        drop(cpu);
        let (cpu, seeded, unseeded) = cpu_of([true; 3], 50);
        assert_eq!((cpu.count(zid), seeded, unseeded), (3, 3, 47));
        drop(cpu);
        let (cpu, seeded, unseeded) = cpu_of([true, false, false], 2);
        assert_eq!((cpu.count(zid), seeded, unseeded), (3, 3, 0));
    }

    /// A pageblock's migratetype is the one most of its zone-locked and
    /// drain events print (the lowest on a tie); frees of earlier pages
    /// in pageblocks of known type give the type of the rest.
    #[test]
    fn the_trace_shows_pageblocks_types_and_earlier_frees_follow_them() {
        let order = 9;
        let block = |b: u64, i: u64| (b << order) + i;
        let events = [
            event(EventKind::AllocZoneLocked, 0, block(1, 0), 0, 1),
            event(EventKind::PcpuDrain, 0, block(1, 1), 0, 1),
            event(EventKind::PcpuDrain, 0, block(1, 2), 0, 0),
            event(EventKind::PcpuDrain, 0, block(2, 0), 0, 2),
            event(EventKind::PcpuDrain, 0, block(2, 1), 0, 0),
            event(EventKind::Free, 0, block(3, 0), 0, -1),
            // Frees of earlier pages: two in Movable block 1, one in
            // Unmovable-or-Reclaimable block 2, one of block 1 named
            // before (not an earlier page), one in a block of no type.
            event(EventKind::Free, 1, block(1, 5), 0, -1),
            event(EventKind::Free, 1, block(1, 6), 0, -1),
            event(EventKind::Free, 1, block(2, 5), 0, -1),
            event(EventKind::Free, 1, block(1, 2), 0, -1),
            event(EventKind::Free, 1, block(7, 0), 0, -1),
        ];
        let types = pageblock_types(&events, order);
        assert_eq!(types.len(), 2, "{types:?}");
        assert_eq!(types[&1], Migratetype::Movable);
        assert_eq!(types[&2], Migratetype::Unmovable, "a tie: the lowest");
        assert_eq!(
            earlier_free_type(&events, &types, order),
            Some(Migratetype::Movable)
        );
        assert_eq!(earlier_free_type(&events[..6], &types, order), None);
    }

    /// A 6.18 allocator on `layout`, from boot.
    fn guest_allocator(layout: &sparsemem::Layout) -> Allocator<SparseExtreme, Kernel> {
        Allocator::new(
            SparseExtreme::new(layout).unwrap(),
            layout,
            Options::for_era(buddy::Era::V6_18),
        )
        .unwrap()
    }

    /// The DMA32 zone's id and first pfn.
    fn dma32(alloc: &Allocator<SparseExtreme, Kernel>) -> (ZoneId, u64) {
        let zone = alloc
            .zones()
            .iter()
            .find(|z| z.kind.name() == "DMA32")
            .unwrap();
        (zone.id, zone.start_pfn().get())
    }

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
        let mut prior = Prior::new(&alloc, &from_start, FxHashMap::default());
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

    /// Seeded with the trace's evidence, a CPU's list of a migratetype the
    /// recording refilled holds exactly the pages the trace shows there
    /// (its next allocation past them refills), and the rest of the
    /// snapshot's `count` sits on a list the recording never refilled,
    /// serving its allocations without a refill.
    #[test]
    fn seeding_follows_the_traces_evidence() {
        let snapshot = guest();
        let layout = snapshot.layout("guest").unwrap();
        let start = StartState::of(&snapshot, Path::new("guest"), false, 0).unwrap();
        let mut alloc = guest_allocator(&layout);
        let from_start = FromStart::apply(&start, &mut alloc).unwrap();
        let (zid, first) = dma32(&alloc);
        let count = start
            .pagesets()
            .iter()
            .find(|s| s.zone == "DMA32" && s.cpu == 0)
            .unwrap()
            .count;
        // Three Movable pages in DMA32 shown on CPU 0's lists; Movable
        // refilled later, the other types never.
        let shown = 3;
        let evidence = ListEvidence {
            pages: (0..shown)
                .map(|i| (first + i, Migratetype::Movable))
                .collect(),
            blocks: Vec::new(),
            refilled: [false, true, false],
        };
        assert!(count > shown + 2, "{count}");
        let mut prior = Prior::new(&alloc, &from_start, [(0, evidence)].into_iter().collect());
        let mut cpu = alloc.cpu_on(layout.first_node()).unwrap();
        prior.seed(&alloc, &mut cpu, 0).unwrap();
        assert_eq!(cpu.count(zid), count);
        assert_eq!((prior.seeded_pages, prior.unseeded_pages), (count, 0));
        let refills = || alloc.stats_total().pcp_refills;
        let movable = Gfp::KERNEL | Gfp::MOVABLE | Gfp::DMA32;
        let unmovable = Gfp::KERNEL | Gfp::DMA32;
        let before = refills();
        for _ in 0..shown {
            cpu.alloc(movable).unwrap();
        }
        assert_eq!(refills(), before, "the shown pages served Movable");
        cpu.alloc(movable).unwrap();
        assert_eq!(refills(), before + 1, "past them, Movable refills");
        for _ in 0..2 {
            cpu.alloc(unmovable).unwrap();
        }
        assert_eq!(refills(), before + 1, "the rest serves Unmovable");
    }
}
