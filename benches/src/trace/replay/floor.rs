//! What the vmstat work's drains show of the per-CPU lists: how many times
//! the work ran ([`work_runs`]), and how many pages each CPU's lists held
//! when a recording began ([`list_floors`]), the floor a replay from boot
//! seeds the lists up to.
//!
//! From 6.7 the vmstat work's `decay_pcp_high` sets `high` to
//! `max3(count − cap, high − high/8, high_min)`, with `cap` =
//! `batch << CONFIG_PCP_BATCH_SCALE_MAX`, and drains the lists down to it.
//! So a CPU whose work drained `d` pages of a zone held at least
//! `high_min + d` of them just before ([`WorkDrain`]). A run that drained
//! its whole `cap` shows more: `count − cap` was at least `high − high/8`.
//! The lists hold at most a `batch` above `high` (a free at `high`
//! drains, a refill takes no more than `high − count − batch`, at least a
//! `batch`, and each run drains down to it), so `count` was at least
//! `8·cap − 7·batch`. Only a zone below its high watermark
//! (`ZONE_BELOW_HIGH`) lowers `high` without draining.
//!
//! The trace shows what went onto those lists and off them since it
//! began: blocks refilled from the zone (`mm_page_alloc_zone_locked` with
//! `percpu_refill=1`) and frees on, allocations and drains off. With that
//! net change `n`, the lists held at least the bound less `n` when the
//! recording began, and the greatest such over the recording is the
//! floor. The pages the trace names as already there (allocated or
//! drained before any event put them on a list) are part of it; the rest
//! are pages it never names.
//!
//! It is a lower bound: the work may have drained to a `high` above
//! `high_min`. It counts as the seeding does: a block the steal path
//! refilled is not marked `percpu_refill`, so its allocation reads as a
//! page that was there from the start, both here and in the evidence
//! seeded ([`list_evidence`](super::prior::list_evidence)).

use buddy::{Allocator, BuddyModel, PAGE_ALLOC_COSTLY_ORDER, PCP_BATCH_SCALE_MAX, Variant, ZoneId};
use rustc_hash::FxHashMap;
use sparsemem::{PageLayout, Pfn};

use super::vmstat::WorkDrain;
use crate::trace::{Event, EventKind};

/// The zone id of the model's page at trace pfn `pfn` (`None`: the pfn is
/// in no zone of the model's).
pub(super) fn zone_of<M: BuddyModel, V: Variant>(alloc: &Allocator<M, V>, pfn: u64) -> Option<u8> {
    alloc
        .model()
        .pfn_to_page(Pfn::new(pfn))
        .map(|p| p.zone_id())
}

/// Whether blocks of `order` go through the per-CPU lists in the eras
/// that tune `high` (orders up to `PAGE_ALLOC_COSTLY_ORDER`, and a THP's).
pub(super) fn on_lists<M: BuddyModel, V: Variant>(alloc: &Allocator<M, V>, order: u8) -> bool {
    order <= PAGE_ALLOC_COSTLY_ORDER || order == alloc.model().geometry().pageblock_order().get()
}

/// How many times the vmstat work ran to drain `burst`: one run's
/// `decay_pcp_high` drains at most `batch << PCP_BATCH_SCALE_MAX` pages
/// of a zone (the `high` it sets is at least `count` less that), so a
/// zone's drain of more shows as many more runs. At least one.
pub(super) fn work_runs<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    events: &[Event],
    burst: &WorkDrain,
) -> u32 {
    burst
        .pages_by_zone(events, |p| zone_of(alloc, p))
        .into_iter()
        .filter_map(|(zone, pages)| {
            let cap = zone_lists(alloc, zone)?.batch << PCP_BATCH_SCALE_MAX;
            u32::try_from(pages.div_ceil(cap.max(1))).ok()
        })
        .max()
        .unwrap_or(1)
        .max(1)
}

/// What [`list_floors`] needs of a zone: its per-CPU `high_min` and
/// `batch`.
#[derive(Clone, Copy, Debug)]
pub(super) struct ZoneLists {
    pub(super) high_min: u64,
    pub(super) batch: u64,
}

/// The [`ZoneLists`] of zone id `zone` in `alloc` (`high_min` is the
/// zone's `high` in the eras that tune it).
pub(super) fn zone_lists<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    zone: u8,
) -> Option<ZoneLists> {
    let z = alloc.zone(ZoneId::new(zone))?;
    Some(ZoneLists {
        high_min: u64::from(z.high()),
        batch: u64::from(z.batch()),
    })
}

/// For each `(trace CPU, zone id)` the trace shows the work drain: how
/// many pages the lists held when the recording began, at least ([module
/// documentation](self)). `zone_of` maps a trace pfn to its zone id
/// (`None`: the event is left out), `lists` gives the zone's
/// [`ZoneLists`], and `on_lists` says which orders go through the per-CPU
/// lists.
pub(super) fn list_floors(
    events: &[Event],
    drains: &[WorkDrain],
    zone_of: impl Fn(u64) -> Option<u8>,
    lists: impl Fn(u8) -> Option<ZoneLists>,
    on_lists: impl Fn(u8) -> bool,
) -> FxHashMap<(u16, u8), u64> {
    // Where each burst starts, in trace order.
    let mut starts: Vec<(usize, &WorkDrain)> = drains.iter().map(|d| (d.drains[0], d)).collect();
    starts.sort_unstable_by_key(|&(at, _)| at);
    let mut starts = starts.into_iter().peekable();
    let mut net: FxHashMap<(u16, u8), i64> = FxHashMap::default();
    let mut floors: FxHashMap<(u16, u8), u64> = FxHashMap::default();
    for (at, e) in events.iter().enumerate() {
        while let Some(&(_, burst)) = starts.peek().filter(|&&(s, _)| s == at) {
            starts.next();
            for (zone, pages) in burst.pages_by_zone(events, &zone_of) {
                let Some(ZoneLists { high_min, batch }) = lists(zone) else {
                    continue;
                };
                let cap = batch << PCP_BATCH_SCALE_MAX;
                let mut held = high_min + pages;
                if pages >= cap {
                    held = held.max((8 * cap).saturating_sub(7 * batch));
                }
                let before = net.get(&(burst.cpu, zone)).copied().unwrap_or(0);
                let floor =
                    u64::try_from(i64::try_from(held).unwrap_or(i64::MAX) - before).unwrap_or(0);
                let at_least = floors.entry((burst.cpu, zone)).or_default();
                *at_least = (*at_least).max(floor);
            }
        }
        if !on_lists(e.order) {
            continue;
        }
        let Some(zone) = e.pfn.and_then(&zone_of) else {
            continue;
        };
        let pages = 1i64 << e.order;
        let change = match e.kind {
            EventKind::Free => pages,
            EventKind::AllocZoneLocked if e.percpu_refill => pages,
            EventKind::Alloc | EventKind::PcpuDrain => -pages,
            // `mm_page_free_batched` follows its page's `mm_page_free`.
            EventKind::FreeBatched | EventKind::AllocZoneLocked => 0,
        };
        *net.entry((e.cpu, zone)).or_default() += change;
    }
    floors
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::replay::vmstat::work_drains;

    fn event(ts_ns: u64, cpu: u16, kind: EventKind, pfn: u64, order: u8) -> Event {
        Event {
            pfn: Some(pfn),
            order,
            percpu_refill: kind == EventKind::AllocZoneLocked,
            ..Event::new(0, ts_ns, cpu, kind)
        }
    }

    /// The floor is what the work's drain shows the lists held, less what
    /// went onto them before it, per CPU and zone, the greatest over the
    /// recording; the free path's drains count only as traffic, and orders
    /// off the lists not at all.
    #[test]
    fn the_floor_is_the_largest_drain_less_what_came_on_before() {
        use EventKind::{Alloc, AllocZoneLocked, Free, FreeBatched, PcpuDrain};
        const MS: u64 = 1_000_000;
        // Zone 1 from pfn 1000, zone 0 below; orders below 9 go through the
        // lists.
        let zone_of = |pfn: u64| Some(u8::from(pfn >= 1000));
        let mut events = vec![
            // CPU 0: 64 pages refilled, 4 freed (batched too), 10 allocated.
            event(MS, 0, AllocZoneLocked, 1000, 6),
            event(2 * MS, 0, Free, 1100, 2),
            event(2 * MS + 1, 0, FreeBatched, 1100, 2),
        ];
        events.extend((0..10).map(|i| event(3 * MS + i, 0, Alloc, 1000 + i, 0)));
        // The work drains 100 pages of zone 1 and 3 of zone 0: net +58
        // before it in zone 1, 0 in zone 0.
        events.push(event(4 * MS, 0, Alloc, 1200, 0));
        events.extend((0..100).map(|i| event(5 * MS + i, 0, PcpuDrain, 1300 + i, 0)));
        events.extend((0..3).map(|i| event(5 * MS + 200 + i, 0, PcpuDrain, 10 + i, 0)));
        // A free-path drain of 500 pages sets no floor; an order-9 free
        // is off the lists.
        events.push(event(6 * MS, 0, Free, 1500, 0));
        events.extend((0..500).map(|i| event(6 * MS + 1000 + i, 0, PcpuDrain, 2000 + i, 0)));
        events.push(event(7 * MS, 0, Free, 4096, 9));
        // A smaller drain later, when the lists had lost 543 pages more
        // than they gained: a higher floor.
        events.push(event(8 * MS, 0, Alloc, 1600, 0));
        events.extend((0..40).map(|i| event(9 * MS + i, 0, PcpuDrain, 3000 + i, 0)));
        // CPU 1 drains 5 pages with nothing before.
        events.push(event(10 * MS, 1, Alloc, 1700, 0));
        events.extend((0..5).map(|i| event(11 * MS + i, 1, PcpuDrain, 1800 + i, 0)));
        let drains = work_drains(&events);
        assert_eq!(drains.len(), 3, "two of the work's on CPU 0, one on CPU 1");
        // With `high_min` 1000 and a `batch` of 2 (a run's cap is 64), the
        // lists held `high_min` and the drain, less what came on before.
        let lists = |_| {
            Some(ZoneLists {
                high_min: 1000,
                batch: 2,
            })
        };
        let floors = list_floors(&events, &drains, zone_of, lists, |o| o < 9);
        // Zone 1 on CPU 0 before the first burst: +64 + 4 − 10 − 1 = 57.
        // Before the last: 57 − 100 + 1 − 500 − 1 = −543, so 1040 + 543.
        assert_eq!(floors.get(&(0, 1)), Some(&1583));
        assert_eq!(floors.get(&(0, 0)), Some(&1003), "zone 0: nothing before");
        assert_eq!(floors.get(&(1, 1)), Some(&1006), "5 drained, 1 allocated");
        assert_eq!(floors.len(), 3);
        // With `high_min` 0 and a `batch` of 1 (cap 32), the bursts of 100
        // and 40 drained a run's cap: the lists held 8·32 − 7 = 249.
        let lists = |_| {
            Some(ZoneLists {
                high_min: 0,
                batch: 1,
            })
        };
        let floors = list_floors(&events, &drains, zone_of, lists, |o| o < 9);
        assert_eq!(floors.get(&(0, 1)), Some(&(249 + 543)));
        assert_eq!(floors.get(&(0, 0)), Some(&3), "3 is below the cap");
        assert_eq!(floors.get(&(1, 1)), Some(&6));
        assert_eq!(floors.len(), 3);
    }

    /// A burst of up to one run's cap in each zone is one run; past it in
    /// any zone, as many runs as it takes that zone; a burst in no zone
    /// of the model's, one.
    #[test]
    fn a_burst_past_one_runs_cap_is_more_runs() {
        use buddy::{Kernel, Options};
        use sparsemem::Flat;
        let layout = sparsemem::Layout::preset("x86-pci-hole").unwrap();
        let alloc: Allocator<Flat, Kernel> = Allocator::new(
            Flat::new(&layout).unwrap(),
            &layout,
            Options::for_era(buddy::Era::V6_18),
        )
        .unwrap();
        let normal = alloc.zones().last().unwrap();
        let dma32 = &alloc.zones()[alloc.zones().len() - 2];
        let cap = |z: &buddy::Zone<_, _>| u64::from(z.batch()) << PCP_BATCH_SCALE_MAX;
        let (n0, d0) = (normal.start_pfn().get(), dma32.start_pfn().get());
        let (n_cap, d_cap) = (cap(normal), cap(dma32));
        let drains = |pages: &[(u64, u64)]| -> Vec<Event> {
            pages
                .iter()
                .flat_map(|&(start, n)| start..start + n)
                .map(|pfn| event(1_000, 0, EventKind::PcpuDrain, pfn, 0))
                .collect()
        };
        let runs = |events: &[Event]| {
            let burst = WorkDrain {
                cpu: 0,
                ts_ns: 1_000,
                drains: (0..events.len()).collect(),
            };
            work_runs(&alloc, events, &burst)
        };
        assert_eq!(runs(&drains(&[(n0, n_cap), (d0, d_cap)])), 1);
        assert_eq!(runs(&drains(&[(n0, n_cap + 1)])), 2);
        assert_eq!(runs(&drains(&[(n0, 2 * n_cap), (d0, 2 * d_cap + 1)])), 3);
        assert_eq!(runs(&drains(&[(u64::MAX - 10, 5)])), 1, "no zone");
    }
}
