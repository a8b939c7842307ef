//! Structured allocator operation sequences — alloc, free, bulk list and
//! array with generated GFP masks (valid or not), pcp drain, hot add,
//! online with each online type, offline, hot remove, device memory add and
//! remove, hugetlb pools grown and shrunk (HVO off: the fuzzed eras
//! predate it), and misuse — over every memory model at every `struct page`
//! layout the allocator runs at (64 and 32 bytes), in every era that had the
//! hole check and with a generated subset of mechanisms, checked against
//! the reference after each step.
#![no_main]

mod common;

use arbitrary::Arbitrary;
use std::collections::HashMap;

use buddy::testing::{Reference, check_conservation};
use buddy::{
    Allocator, BuddyModel, CompactControl, CompactError, CompactPriority, CompactState,
    CompactVmstat, Gfp, HugetlbPool, InitError, KernelHoleCheck, MemHotplugError, MigrateCounts,
    MigrateError, OnlineType, Options, OwnerError, OwnerId, Owners, RequestError,
    alloc_migration_target, alloc_pages_direct_compact, compact_zone, migrate_pages,
};
use libfuzzer_sys::fuzz_target;
use sparsemem::table::{Classic, Extreme};
use sparsemem::{BuddyPage, Flat, Layout, Migratetype, NodeId, Order, PageFlag, Pfn, Sparse};
use vmemmap::{Probe, Table, Vmemmap, VmemmapOptions};

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Op {
    Alloc(u8, u32),
    Free(u16),
    FreeBad(u64, u8),
    BulkList(u8, u32),
    BulkArray(u8, u32),
    Drain,
    HotAdd(u8, u8),
    Online(u8, u8, u8),
    Offline(u8, u8),
    HotRemove(u8, u8),
    AddDevice(u8, u8),
    RemoveDevice(u8, u8),
    /// Hugetlb: grow (even) or shrink (odd) the PMD (`which` < 128) or PUD
    /// pool by up to `n % 8` folios.
    Hugetlb(u8, u8),
    /// Allocates a block of order `o % 4` with `gfp_of(g)` and owns it: a
    /// movable mask makes an owner, any other is refused and the block
    /// stays a plain allocation.
    Own(u8, u32),
    /// Gives up the owner at position `i` (modulo the owners) and frees
    /// its block.
    Disown(u8),
    /// Pins (even) or unpins (odd) the owner at position `i >> 1`.
    Pin(u8),
    /// `migrate_pages` of the owners whose position (modulo 63) has its bit
    /// set, into `alloc_migration_target`; bit 63 adds one plain allocation,
    /// which has no owner and must stay.
    Migrate(u64),
    /// `compact_zone` over zone `z` (modulo the zones): `mode % 4` picks
    /// sync order -1 (`compact_memory`), sync and async at a costly order
    /// from `o`, or async order -1; an async run's budget is `o % 8 + 1`
    /// pageblocks, none when `o` is 128 or more. Only 5.13 of the fuzzed
    /// eras has compaction (2.6.35 on); the others must refuse every run.
    Compact(u8, u8, u8),
    /// `alloc_pages_direct_compact` for a costly order from `o` with
    /// `gfp_of(g)`, at `COMPACT_PRIO_ASYNC` (false) or `SYNC_FULL`.
    DirectCompact(u8, u32, bool),
}

/// `PAGE_ALLOC_COSTLY_ORDER` (include/linux/mmzone.h): an order above it
/// is costly, the orders direct compaction runs for.
const PAGE_ALLOC_COSTLY_ORDER: u8 = 3;

/// A costly order from `o`: above `PAGE_ALLOC_COSTLY_ORDER`, up to the
/// geometry's `MAX_PAGE_ORDER` (inclusive).
fn costly_order(max: Order, o: u8) -> Order {
    let lo = PAGE_ALLOC_COSTLY_ORDER + 1;
    let span = max.get().saturating_sub(lo) + 1;
    Order::new((lo + o % span).min(max.get()))
}

/// What the caller of the allocator keeps for migration and compaction:
/// the owners, each owner's pins (a shadow of [`Owners::pin`]), each zone's
/// compaction state with the span it was made for, and the counters.
#[derive(Default)]
struct Movers {
    owners: Owners,
    pins: HashMap<OwnerId, u32>,
    states: Vec<CompactState>,
    spans: Vec<(Pfn, Pfn)>,
    vmstat: CompactVmstat,
}

impl Movers {
    /// The owner at position `i` (modulo the owners).
    fn nth(&self, i: usize) -> Option<(OwnerId, Pfn, Order)> {
        let n = self.owners.len();
        (n > 0).then(|| self.owners.iter().nth(i % n)).flatten()
    }

    /// Pinned owners and where they are.
    fn pinned(&self) -> Vec<(OwnerId, Pfn)> {
        self.owners
            .iter()
            .filter(|&(id, _, _)| self.owners.is_pinned(id))
            .map(|(id, pfn, _)| (id, pfn))
            .collect()
    }

    /// Fresh compaction states for zones whose span changed (hotplug
    /// grows and shrinks zones), as the kernel resets a resized zone's
    /// cached pfns.
    fn refresh_states<M: BuddyModel, V: buddy::Variant>(&mut self, alloc: &Allocator<M, V>) {
        let spans: Vec<_> = alloc
            .zones()
            .iter()
            .map(|z| (z.start_pfn(), z.end_pfn()))
            .collect();
        let block = alloc.model().geometry().pageblock_nr_pages();
        self.states.truncate(spans.len());
        for (i, (zone, &span)) in alloc.zones().iter().zip(&spans).enumerate() {
            if self.spans.get(i) != Some(&span) {
                let state = CompactState::new(zone, block);
                match self.states.get_mut(i) {
                    Some(s) => *s = state,
                    None => self.states.push(state),
                }
            }
        }
        self.spans = spans;
    }

    /// Runs one of the owners', migration's or compaction's operations
    /// (not [`Op::Own`], which allocates through a CPU).
    fn apply<M: BuddyModel, V: buddy::Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        reference: &mut Reference,
        node: NodeId,
        op: Op,
    ) {
        match op {
            Op::Disown(i) => {
                if let Some((id, _, _)) = self.nth(usize::from(i)) {
                    let (pfn, order) = self.owners.disown(id).expect("a listed owner");
                    self.pins.remove(&id);
                    alloc
                        .free_pages(pfn, order)
                        .expect("an owner's block is allocated");
                }
            }
            Op::Pin(i) => {
                if let Some((id, _, _)) = self.nth(usize::from(i >> 1)) {
                    let pins = self.pins.entry(id).or_default();
                    if i % 2 == 0 {
                        self.owners.pin(id).expect("a listed owner");
                        *pins += 1;
                    } else {
                        match self.owners.unpin(id) {
                            Ok(()) => *pins -= 1,
                            Err(e) => assert_eq!((e, *pins), (OwnerError::NotPinned(id), 0)),
                        }
                    }
                    assert_eq!(self.owners.is_pinned(id), *pins > 0);
                }
            }
            Op::Migrate(mask) => self.migrate(alloc, reference, node, mask),
            Op::Compact(z, mode, o) => self.compact(alloc, z, mode, o),
            Op::DirectCompact(o, g, sync) => {
                let order = costly_order(alloc.model().geometry().max_order(), o);
                let gfp = gfp_of(g);
                let prio = if sync {
                    CompactPriority::SyncFull
                } else {
                    CompactPriority::Async
                };
                self.refresh_states(alloc);
                let (owners, states) = (&mut self.owners, &mut self.states[..]);
                let got = alloc_pages_direct_compact(
                    alloc,
                    order,
                    gfp,
                    node,
                    owners,
                    states,
                    prio,
                    &mut self.vmstat,
                );
                match got {
                    Ok(pfn) => {
                        assert!(!invalid(gfp), "{gfp} served");
                        reference
                            .record_model(alloc.model(), pfn, order)
                            .expect("fresh block");
                    }
                    Err(RequestError::Gfp(_)) => assert!(invalid(gfp), "{gfp} refused"),
                    Err(_) => {}
                }
                let v = self.vmstat;
                assert_eq!(v.compact_stall, v.compact_success + v.compact_fail);
            }
            _ => unreachable!("{op:?} is not an owners' operation"),
        }
    }

    /// `migrate_pages` of the owners `mask` picks (and, with bit 63, one
    /// plain allocation), into `alloc_migration_target`: what moved is
    /// counted as success, what stayed is still where it was.
    fn migrate<M: BuddyModel, V: buddy::Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        reference: &Reference,
        node: NodeId,
        mask: u64,
    ) {
        let mut from: Vec<Pfn> = self
            .owners
            .iter()
            .enumerate()
            .filter(|&(i, _)| mask & (1 << (i % 63)) != 0)
            .map(|(_, (_, pfn, _))| pfn)
            .collect();
        let plain = reference.blocks.keys().next().map(|&p| Pfn::new(p));
        if let Some(pfn) = plain.filter(|_| mask & (1 << 63) != 0) {
            from.push(pfn);
        }
        let before: Vec<_> = from
            .iter()
            .map(|&pfn| (pfn, self.owners.owner_of(pfn)))
            .collect();
        let mut counts = MigrateCounts::default();
        let target = alloc_migration_target(alloc, node, Gfp::HIGHUSER_MOVABLE);
        let put_new = |pfn| panic!("target {pfn} given back: every source is an owned block");
        match migrate_pages(
            alloc,
            &mut self.owners,
            &mut from,
            target,
            put_new,
            &mut counts,
        ) {
            Ok(left) => assert_eq!(left, from.len()),
            Err(MigrateError::NoTarget) => {}
            Err(e) => panic!("migrate_pages: {e}"),
        }
        let c = counts;
        assert_eq!(
            c.pgmigrate_fail,
            c.pinned + c.stale + c.no_target + c.bad_target
        );
        let mut moved_pages = 0;
        for (src, id) in before {
            let stayed = from.contains(&src);
            let Some(id) = id else {
                assert!(stayed, "{src} has no owner, yet moved");
                continue;
            };
            let (now, order) = self.owners.resolve(id).expect("migration keeps owners");
            assert_eq!(stayed, now == src, "{id:?} left the list iff it moved");
            if !stayed {
                assert!(!self.owners.is_pinned(id), "pinned {id:?} moved");
                moved_pages += order.nr_pages();
            }
        }
        assert_eq!(c.pgmigrate_success, moved_pages);
    }

    /// One `compact_zone` run, as `mode` and `o` pick (see [`Op::Compact`]).
    fn compact<M: BuddyModel, V: buddy::Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        z: u8,
        mode: u8,
        o: u8,
    ) {
        let Some(zone) = alloc
            .zones()
            .get(usize::from(z) % alloc.zones().len().max(1))
        else {
            return;
        };
        let order = costly_order(alloc.model().geometry().max_order(), o);
        let budget = (o < 128).then_some(u64::from(o % 8) + 1);
        let movable = Migratetype::Movable;
        let cc = match mode % 4 {
            0 => CompactControl::PROC,
            1 => CompactControl::direct_sync(order, movable),
            2 => CompactControl::direct_async(order, movable, budget),
            _ => CompactControl {
                order: None,
                ..CompactControl::direct_async(order, movable, budget)
            },
        };
        self.refresh_states(alloc);
        let state = &mut self.states[zone.id.index()];
        match compact_zone(alloc, zone.id, state, &mut self.owners, cc) {
            Ok(run) => {
                let m = run.migrate;
                assert_eq!(
                    m.pgmigrate_fail,
                    m.pinned + m.stale + m.no_target + m.bad_target
                );
                self.vmstat.account(&run);
            }
            Err(CompactError::NoCompaction(_)) => {
                assert!(!alloc.options().era.has_compaction());
            }
            Err(e) => panic!("compact_zone over a zone of the allocator: {e}"),
        }
    }

    /// The owners' invariant: each owner is the one its pfn maps back to,
    /// and holds an allocated block (a head with a reference, neither on
    /// the free lists nor on a per-CPU list), which goes into `reference`
    /// (so it may overlap no other allocated block) for the whole-allocator
    /// check. Returns the blocks added.
    fn record<M: BuddyModel, V: buddy::Variant>(
        &self,
        alloc: &Allocator<M, V>,
        reference: &mut Reference,
    ) -> Vec<(Pfn, Order)> {
        let mut added = Vec::new();
        for (id, pfn, order) in self.owners.iter() {
            assert_eq!(self.owners.owner_of(pfn), Some(id));
            let page = alloc
                .model()
                .pfn_to_page(pfn)
                .expect("an owned pfn is valid");
            assert!(
                page.refcount() > 0 && !page.test(PageFlag::Buddy) && !page.test(PageFlag::Pcp),
                "{id:?} holds {pfn}, which is not an allocated block"
            );
            reference
                .record_model(alloc.model(), pfn, order)
                .expect("an owner's block is allocated once");
            added.push((pfn, order));
        }
        added
    }
}

#[derive(Arbitrary, Debug)]
struct Input {
    layout: common::FuzzLayout,
    model: u8,
    page_size: u8,
    era: u8,
    mechanisms: u8,
    ops: Vec<Op>,
}

/// A GFP mask from generated bits: one of the kernel's compositions, plus
/// modifier bits (which may make it invalid: two zones, or movable and
/// reclaimable at once).
fn gfp_of(raw: u32) -> Gfp {
    const BASES: [Gfp; 8] = [
        Gfp::KERNEL,
        Gfp::HIGHUSER_MOVABLE,
        Gfp::ATOMIC,
        Gfp::KERNEL.union(Gfp::DMA32),
        Gfp::DMA,
        Gfp::NOWAIT,
        Gfp::KERNEL.union(Gfp::RECLAIMABLE),
        Gfp::TRANSHUGE_LIGHT,
    ];
    let extra = if raw & (1 << 31) != 0 {
        Gfp::from_bits((raw >> 3) & Gfp::KNOWN.bits()).unwrap_or_default()
    } else {
        Gfp::default()
    };
    BASES[(raw % 8) as usize] | extra
}

/// Whether the kernel would refuse the mask outright.
fn invalid(gfp: Gfp) -> bool {
    gfp.gfp_zone().is_err() || gfp.gfp_migratetype().is_err()
}

/// A range in the layout's window or just past it: in whole memory blocks
/// (mostly; one in eight is skewed by a subsection, to be refused), or for
/// device memory in subsections.
fn hot_range(layout: &Layout, at: u8, len: u8, device: bool) -> (Pfn, u64) {
    let g = layout.geometry();
    let (lo, hi) = layout.memory_span();
    let base = lo.get() / g.pages_per_section() * g.pages_per_section();
    let window_end = hi.get().next_multiple_of(g.pages_per_section());
    let (unit, skew) = if device {
        (g.pages_per_subsection(), 0)
    } else {
        let skew = if at % 8 == 7 {
            g.pages_per_subsection()
        } else {
            0
        };
        (g.memory_block_pages(), skew)
    };
    let span = (window_end - base) / unit + 4;
    let start = base + (u64::from(at) % span) * unit + skew;
    let nr = u64::from(len % 4).max(1) * unit;
    (Pfn::new(start.min(g.max_pfn().get() - nr)), nr)
}

/// Owns the fresh block `(pfn, order)` allocated with `gfp`: a movable
/// mask makes an owner; any other is refused, and the block stays a plain
/// allocation in `reference`.
fn own<M: BuddyModel, V: buddy::Variant>(
    movers: &mut Movers,
    reference: &mut Reference,
    alloc: &Allocator<M, V>,
    pfn: Pfn,
    order: Order,
    gfp: Gfp,
) {
    match movers.owners.own(alloc, pfn, order, gfp) {
        Ok(_) => {}
        Err(OwnerError::NotMovable(_)) => {
            let movable = gfp.gfp_migratetype().ok() == Some(Migratetype::Movable);
            assert!(!movable, "{gfp} is movable, yet refused");
            reference
                .record_model(alloc.model(), pfn, order)
                .expect("fresh block");
        }
        Err(e) => panic!("owning a fresh {pfn}/{order} of {gfp}: {e}"),
    }
}

fn run<M: buddy::BuddyModel>(model: M, layout: &Layout, ops: &[Op], era: u8, mechanisms: u8) {
    // The eras that had the hole check: 2.6.9, 2.6.23 and 5.13 (the last,
    // with migratetypes, so steals and fallbacks are fuzzed too).
    let eras = [buddy::Era::V2_6_9, buddy::Era::V2_6_23, buddy::Era::V5_13];
    let options = Options {
        mechanisms: buddy::Mechanisms {
            pageblock: mechanisms & 1 == 0,
            watermarks: mechanisms & 2 == 0,
            page_prep: mechanisms & 4 == 0,
            entry: mechanisms & 8 == 0,
        },
        ..Options::for_era(eras[usize::from(era) % eras.len()])
    };
    let mut alloc = match Allocator::<M, KernelHoleCheck>::new(model, layout, options) {
        Ok(a) => a,
        Err(InitError::TooManyZones) => return,
        Err(e) => panic!("the hole-check variant accepts every layout: {e}"),
    };
    let mut reference = Reference::default();
    let node = layout.first_node();
    let orders = sparsemem::hvo::hugetlb_orders(layout.geometry());
    let mut pools: Vec<HugetlbPool> = orders
        .iter()
        .filter_map(|&o| HugetlbPool::new(&alloc, o, node, None).ok())
        .collect();
    let mut movers = Movers::default();
    for &op in ops.iter().take(64) {
        let pinned = movers.pinned();
        match op {
            Op::Disown(_)
            | Op::Pin(_)
            | Op::Migrate(_)
            | Op::Compact(..)
            | Op::DirectCompact(..) => movers.apply(&alloc, &mut reference, node, op),
            Op::HotAdd(at, len) => {
                let (start, nr) = hot_range(layout, at, len, false);
                let _ = alloc.hot_add(start, nr, node);
            }
            Op::Online(at, len, t) => {
                let (start, nr) = hot_range(layout, at, len, false);
                let t = OnlineType::ALL[usize::from(t) % OnlineType::ALL.len()];
                let _ = alloc.online_pages(start, nr, t);
            }
            Op::AddDevice(at, len) => {
                let (start, nr) = hot_range(layout, at, len, true);
                let _ = alloc.add_device(start, nr, NodeId::ZERO);
            }
            Op::RemoveDevice(at, len) => {
                let (start, nr) = hot_range(layout, at, len, true);
                let _ = alloc.remove_device(start, nr);
            }
            Op::Offline(at, len) => {
                let (start, nr) = hot_range(layout, at, len, false);
                let before: Vec<_> = alloc.zones().iter().map(|z| z.nr_free()).collect();
                if let Err(MemHotplugError::InUse { .. }) = alloc.offline_pages(start, nr) {
                    let after: Vec<_> = alloc.zones().iter().map(|z| z.nr_free()).collect();
                    assert_eq!(before, after, "a refused offline changes nothing");
                }
            }
            Op::HotRemove(at, len) => {
                let (start, nr) = hot_range(layout, at, len, false);
                let _ = alloc.hot_remove(start, nr);
            }
            Op::Hugetlb(which, n) => {
                let Some(pool) = pools.get_mut(usize::from(which >> 7) % 2) else {
                    continue;
                };
                let n = u64::from(n % 8);
                let before = pool.counts().nr_hugepages;
                if which % 2 == 0 {
                    let got = pool.grow(&alloc, n).unwrap_or(0);
                    assert_eq!(pool.counts().nr_hugepages, before + got);
                } else {
                    let freed = pool.shrink(&alloc, n).expect("no HVO: nothing to restore");
                    assert_eq!(freed, n.min(before));
                }
            }
            _ => {
                // A layout with no memory yet has no node to run a CPU on.
                let Ok(mut cpu) = alloc.cpu_on(node) else {
                    continue;
                };
                match op {
                    Op::Alloc(o, g) => {
                        let max = cpu.allocator().model().geometry().max_order().get();
                        let order = Order::new(o % (max + 1));
                        let gfp = gfp_of(g);
                        match cpu.alloc_pages(order, gfp) {
                            Ok(pfn) => {
                                assert!(!invalid(gfp), "{gfp} served");
                                reference
                                    .record_model(cpu.allocator().model(), pfn, order)
                                    .expect("fresh block");
                            }
                            Err(RequestError::Gfp(_)) => assert!(invalid(gfp), "{gfp} refused"),
                            Err(_) => {}
                        }
                    }
                    Op::Own(o, g) => {
                        let order = Order::new(o % 4);
                        let gfp = gfp_of(g);
                        if let Ok(pfn) = cpu.alloc_pages(order, gfp) {
                            own(
                                &mut movers,
                                &mut reference,
                                cpu.allocator(),
                                pfn,
                                order,
                                gfp,
                            );
                        }
                    }
                    Op::Free(i) => {
                        if let Some((pfn, order)) = reference.take(usize::from(i)) {
                            cpu.free_pages(pfn, order)
                                .expect("freeing an allocated block");
                        }
                    }
                    Op::FreeBad(pfn, o) => {
                        let pfn = Pfn::new(pfn);
                        let allocated = reference.blocks.contains_key(&pfn.get())
                            || movers.owners.owner_of(pfn).is_some();
                        if !allocated {
                            assert!(
                                cpu.free_pages(pfn, Order::new(o % 17)).is_err(),
                                "{pfn:?} was never allocated"
                            );
                        }
                    }
                    Op::BulkList(n, g) => {
                        let mut out = Vec::new();
                        let gfp = gfp_of(g);
                        if let Err(e) = cpu.alloc_bulk_vec(usize::from(n), gfp, &mut out) {
                            assert!(invalid(gfp) && out.is_empty(), "{gfp}: {e}");
                        }
                        for pfn in out {
                            reference
                                .record_model(cpu.allocator().model(), pfn, Order::ZERO)
                                .expect("fresh page");
                        }
                    }
                    Op::BulkArray(n, g) => {
                        let mut slots = vec![None; usize::from(n)];
                        let gfp = gfp_of(g);
                        let got = match cpu.alloc_bulk_array(gfp, &mut slots) {
                            Ok(got) => got,
                            Err(e) => {
                                assert!(invalid(gfp), "{gfp}: {e}");
                                0
                            }
                        };
                        assert_eq!(got, slots.iter().take_while(|s| s.is_some()).count());
                        for pfn in slots.into_iter().flatten() {
                            reference
                                .record_model(cpu.allocator().model(), pfn, Order::ZERO)
                                .expect("fresh page");
                        }
                    }
                    _ => cpu.drain(),
                }
                drop(cpu);
            }
        }
        // The pools' and the owners' blocks count as allocated for the
        // check only.
        let held: Vec<_> = pools.iter().flat_map(|p| p.blocks(&alloc)).collect();
        for &(pfn, order) in &held {
            reference
                .record_model(alloc.model(), pfn, order)
                .expect("a pool's block is allocated once");
        }
        let owned = movers.record(&alloc, &mut reference);
        check_conservation(&alloc, 0, &reference).expect("conservation");
        for (pfn, _) in held.into_iter().chain(owned) {
            reference.blocks.remove(&pfn.get());
        }
        for (id, pfn) in pinned {
            if let Some((now, _)) = movers.owners.resolve(id) {
                assert_eq!(now, pfn, "pinned {id:?} moved");
            }
        }
    }
}

/// Builds the model `input.model` picks at `struct page` layout `P` and
/// runs the input on it.
fn run_at<P: sparsemem::BuddyPage>(layout: &Layout, input: &Input) {
    let (ops, era, mechanisms) = (&input.ops[..], input.era, input.mechanisms);
    match input.model % 5 {
        0 => {
            if let Some(m) = common::built(Flat::<P>::build(layout), layout, true) {
                run(m, layout, ops, era, mechanisms)
            }
        }
        1 => {
            // The classic table refuses geometries whose table is too big.
            if let Ok(m) = Sparse::<Classic, P>::build(layout) {
                run(m, layout, ops, era, mechanisms)
            }
        }
        2 => {
            let extreme = Sparse::<Extreme, P>::build(layout);
            if let Some(m) = common::built(extreme, layout, false) {
                run(m, layout, ops, era, mechanisms)
            }
        }
        3 => {
            let table = Vmemmap::<Table, P>::build(layout, VmemmapOptions::default());
            run(table.expect("builds"), layout, ops, era, mechanisms)
        }
        _ => {
            let probe = Vmemmap::<Probe, P>::build(layout, VmemmapOptions::default());
            run(probe.expect("builds"), layout, ops, era, mechanisms)
        }
    }
}

fuzz_target!(|input: Input| {
    let Some(layout) = input.layout.build() else {
        return;
    };
    // The size is drawn too: every layout the allocator runs at.
    match input.page_size % 4 {
        0 => run_at::<sparsemem::Page64>(&layout, &input),
        1 => run_at::<sparsemem::Page32>(&layout, &input),
        2 => run_at::<sparsemem::Page16>(&layout, &input),
        _ => run_at::<sparsemem::Page8>(&layout, &input),
    }
});
