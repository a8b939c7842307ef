//! The memory hotplug notifier chain: a callback that refuses
//! `MEM_GOING_ONLINE` makes `online_pages` cancel and undo (the kernel's
//! `failed_addition`), one that refuses `MEM_GOING_OFFLINE` makes
//! `offline_pages` cancel; generated hot-add/online/offline/remove
//! sequences with refusals at random steps end every step in the state of
//! a run without the refused attempts.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use buddy::testing::{Reference, check_conservation};
use buddy::{
    Allocator, BuddyModel, Era, Gfp, Kernel, MemHotplugError, MemmapOnMemory, MemoryAction,
    NotifyResult, OnlineType, Options,
};
use proptest::prelude::*;
use sparsemem::{Geometry, Layout, MemRange, NodeId, Pfn, RangeKind};
use vmemmap::VmemmapTable;

const BLOCK: u64 = 1 << 15; // 128 MiB of 4 KiB pages
const GIB: u64 = 1 << 30;
const BLOCKS: u64 = 6;

/// 1 GiB of RAM on node 0, room for six hot-added blocks at 4 GiB.
fn layout() -> Layout {
    Layout::new(
        Geometry::X86_64,
        vec![
            MemRange::new(0, GIB, RangeKind::Ram, 0),
            MemRange::new(
                4 * GIB,
                4 * GIB + BLOCKS * BLOCK * 4096,
                RangeKind::Hotplug,
                0,
            ),
        ],
        "notifier test",
    )
    .unwrap()
}

fn pfn(block: u64) -> Pfn {
    Pfn::new(((4 * GIB) >> 12) + block * BLOCK)
}

fn allocator() -> Allocator<VmemmapTable, Kernel> {
    let layout = layout();
    let model = VmemmapTable::new(&layout).unwrap();
    let mut alloc = Allocator::new(model, &layout, Options::for_era(Era::V6_18)).unwrap();
    alloc.hot_remove(pfn(0), BLOCKS * BLOCK).unwrap();
    alloc
}

/// Everything of the allocator and the model a hotplug step can change:
/// each zone's type, node, span, managed and free pages, free blocks and
/// `nr_free`; the offline blocks; the self-hosted pfns; each block's
/// validity and online bit.
/// One zone's part of [`State`]: type, node, span, managed and free
/// pages, free blocks, `nr_free`.
type ZoneState = (
    String,
    NodeId,
    Pfn,
    Pfn,
    u64,
    u64,
    BTreeSet<(u64, u8)>,
    Vec<u64>,
);

#[derive(Debug, PartialEq, Eq)]
struct State {
    zones: Vec<ZoneState>,
    offline: Vec<(Pfn, NodeId)>,
    hosted: Vec<(Pfn, Pfn)>,
    blocks: Vec<(bool, bool)>,
}

fn state<M: BuddyModel>(alloc: &Allocator<M, Kernel>) -> State {
    State {
        zones: alloc
            .zones()
            .iter()
            .map(|z| {
                let free = alloc
                    .free_blocks(z.id)
                    .into_iter()
                    .map(|(p, o)| (p.get(), o.get()))
                    .collect();
                (
                    format!("{:?}", z.kind),
                    z.node,
                    z.start_pfn(),
                    z.end_pfn(),
                    z.managed_pages(),
                    z.nr_free_pages(),
                    free,
                    z.nr_free().to_vec(),
                )
            })
            .collect(),
        offline: alloc.offline_blocks(),
        hosted: alloc.self_hosted_pfns(pfn(0), pfn(BLOCKS)),
        blocks: (0..BLOCKS)
            .map(|b| {
                let m = alloc.model();
                (m.pfn_valid(pfn(b)), m.pfn_to_online_page(pfn(b)).is_some())
            })
            .collect(),
    }
}

/// A callback that records every event and refuses the `Going*` events
/// while `refuse` is set.
fn register(
    alloc: &mut Allocator<VmemmapTable, Kernel>,
) -> (Arc<AtomicBool>, Arc<Mutex<Vec<MemoryAction>>>) {
    let refuse = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (r, s) = (Arc::clone(&refuse), Arc::clone(&seen));
    alloc.register_memory_notifier(
        0,
        Box::new(move |action, _| {
            s.lock().unwrap().push(action);
            // Relaxed: the flag is set and read on the test's one thread.
            let going = matches!(
                action,
                MemoryAction::GoingOnline | MemoryAction::GoingOffline
            );
            if going && r.load(Ordering::Relaxed) {
                NotifyResult::Bad
            } else {
                NotifyResult::Ok
            }
        }),
    );
    (refuse, seen)
}

#[test]
fn a_refused_online_is_cancelled_and_undone() {
    use MemoryAction::*;
    let mut alloc = allocator();
    let (refuse, seen) = register(&mut alloc);
    alloc.hot_add(pfn(0), BLOCK, NodeId::ZERO).unwrap();
    alloc
        .online_pages(pfn(0), BLOCK, OnlineType::OnlineMovable)
        .unwrap();
    let (start, nr) = (pfn(1), 2 * BLOCK);
    alloc
        .hot_add_memmap_on_memory(start, nr, NodeId::ZERO, MemmapOnMemory::On)
        .unwrap();
    let before = state(&alloc);
    refuse.store(true, Ordering::Relaxed);
    // ZONE_MOVABLE exists (its span grown, then shrunk back); the kernel
    // zone does not (ZONE_NORMAL created, then gone again).
    for online_type in [OnlineType::OnlineMovable, OnlineType::Online] {
        let got = alloc.online_pages(start, nr, online_type);
        assert!(
            matches!(
                got,
                Err(MemHotplugError::NotifierRefused { action: GoingOnline, start: s, nr_pages })
                    if s == start && nr_pages == nr
            ),
            "{got:?}"
        );
        assert_eq!(state(&alloc), before, "{online_type}: undone");
    }
    refuse.store(false, Ordering::Relaxed);
    alloc.online_pages(start, nr, OnlineType::Online).unwrap();
    let onlined = state(&alloc);
    assert_ne!(onlined, before);
    // Offline: refused by the callback, then by a page in use.
    refuse.store(true, Ordering::Relaxed);
    let got = alloc.offline_pages(start, nr);
    assert!(
        matches!(
            got,
            Err(MemHotplugError::NotifierRefused {
                action: GoingOffline,
                ..
            })
        ),
        "{got:?}"
    );
    assert_eq!(state(&alloc), onlined);
    refuse.store(false, Ordering::Relaxed);
    // ZONE_NORMAL is only the onlined blocks, and GFP_KERNEL tries it first.
    let page = alloc
        .alloc_pages(sparsemem::Order::ZERO, Gfp::KERNEL, NodeId::ZERO, None)
        .unwrap();
    assert!(start <= page && page < start + nr, "{page:?}");
    let got = alloc.offline_pages(start, nr);
    assert!(
        matches!(got, Err(MemHotplugError::InUse { nr_pages: 1 })),
        "{got:?}"
    );
    assert_eq!(
        *seen.lock().unwrap(),
        [
            GoingOnline,
            Online,
            GoingOnline,
            CancelOnline,
            GoingOnline,
            CancelOnline,
            GoingOnline,
            Online,
            GoingOffline,
            CancelOffline,
            GoingOffline,
            CancelOffline
        ]
    );
}

#[derive(Clone, Debug)]
enum Op {
    Add { on_memory: bool },
    Online(OnlineType),
    Offline,
    Remove,
}

fn arb_steps() -> impl Strategy<Value = Vec<(u64, u64, Op, bool)>> {
    let op = prop_oneof![
        any::<bool>().prop_map(|on_memory| Op::Add { on_memory }),
        prop::sample::select(OnlineType::ALL.to_vec()).prop_map(Op::Online),
        Just(Op::Offline),
        Just(Op::Remove),
    ];
    // (first block, blocks, step, whether the notifier refuses it)
    prop::collection::vec((0..BLOCKS, 1..3u64, op, prop::bool::weighted(0.4)), 1..40)
}

fn apply(
    alloc: &mut Allocator<VmemmapTable, Kernel>,
    first: u64,
    blocks: u64,
    op: &Op,
) -> Result<(), MemHotplugError> {
    let (start, nr) = (pfn(first), (blocks.min(BLOCKS - first)) * BLOCK);
    match *op {
        Op::Add { on_memory: true } => alloc
            .hot_add_memmap_on_memory(start, nr, NodeId::ZERO, MemmapOnMemory::On)
            .map(|_| ()),
        Op::Add { on_memory: false } => alloc.hot_add(start, nr, NodeId::ZERO),
        Op::Online(t) => alloc.online_pages(start, nr, t).map(|_| ()),
        Op::Offline => alloc.offline_pages(start, nr),
        Op::Remove => alloc.hot_remove(start, nr),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: sparsemem::testing::cases(32), ..ProptestConfig::default() })]

    /// `refused` runs every step, the notifier refusing the marked ones;
    /// `plain` has no notifier and skips the steps `refused` saw
    /// cancelled. After every step both are in one state, conserve their
    /// memory and keep their free lists' structure.
    #[test]
    fn refused_steps_leave_the_state_of_a_run_without_them(steps in arb_steps()) {
        let mut refused = allocator();
        let (refuse, _) = register(&mut refused);
        let mut plain = allocator();
        // Every case starts with one refusal that must be cancelled.
        let add = Op::Add { on_memory: true };
        apply(&mut refused, 0, 1, &add).unwrap();
        apply(&mut plain, 0, 1, &add).unwrap();
        refuse.store(true, Ordering::Relaxed);
        let got = apply(&mut refused, 0, 1, &Op::Online(OnlineType::OnlineMovable));
        prop_assert!(matches!(got, Err(MemHotplugError::NotifierRefused { .. })), "{:?}", got);
        prop_assert_eq!(state(&refused), state(&plain));
        for (first, blocks, op, refusing) in &steps {
            refuse.store(*refusing, Ordering::Relaxed);
            let got = apply(&mut refused, *first, *blocks, op);
            if matches!(got, Err(MemHotplugError::NotifierRefused { .. })) {
                prop_assert!(*refusing);
            } else {
                let want = apply(&mut plain, *first, *blocks, op);
                prop_assert_eq!(got.is_ok(), want.is_ok(), "{:?}: {:?} / {:?}", op, got, want);
            }
            prop_assert_eq!(state(&refused), state(&plain));
            check_conservation(&refused, 0, &Reference::default())
                .map_err(TestCaseError::fail)?;
        }
    }
}
