//! Differential tests: generated operation sequences against a reference
//! map of allocated blocks, over every memory model and both buddy-tracking
//! variants, on layouts with holes (the hole check on).

use buddy::testing::{GFP, Reference, check_conservation, free_all_and_check, snapshot};
use buddy::{
    Allocator, BuddyModel, Config, Era, FreeError, InitError, Mechanisms, Options, PageChain,
    RangeError, RequestError, Variant,
};
use proptest::prelude::*;
use sparsemem::reference::Semantics;
use sparsemem::table::{Classic, Extreme};
use sparsemem::testing::{SMALL_GEOMETRIES, arb_layout, expect_build};
use sparsemem::{BuddyPage, Flat, Layout, Order, Sparse};
use vmemmap::{Probe, Table, Vmemmap, VmemmapOptions, VmemmapProbe, VmemmapTable};

#[derive(Clone, Copy, Debug)]
enum Op {
    Alloc(u8),
    Free(usize),
    BulkList(usize),
    BulkArray(usize, usize),
    Drain,
    /// `alloc_pages_nolock` (6.18; refused in the other eras).
    NolockAlloc(u8),
    /// `free_pages_nolock` (in the other eras refused, then freed as usual).
    NolockFree(usize),
}

fn arb_ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        4 => (0u8..=10).prop_map(Op::Alloc),
        3 => any::<usize>().prop_map(Op::Free),
        1 => (1usize..200).prop_map(Op::BulkList),
        1 => (1usize..200, 0usize..200).prop_map(|(n, pre)| Op::BulkArray(n, pre)),
        1 => Just(Op::Drain),
        2 => (0u8..=10).prop_map(Op::NolockAlloc),
        2 => any::<usize>().prop_map(Op::NolockFree),
    ];
    prop::collection::vec(op, 1..60)
}

/// Options for the generated `pick`: an era that had `V`, and usually
/// every mechanism, sometimes a subset off as `bench breakdown` runs them.
fn options_for<V: Variant>(pick: usize) -> Options {
    let bits = (pick / 7) % 32;
    let mechanisms = if bits < 16 {
        Mechanisms::ALL
    } else {
        Mechanisms {
            pageblock: bits & 1 != 0,
            watermarks: bits & 2 != 0,
            page_prep: bits & 4 != 0,
            entry: bits & 8 != 0,
        }
    };
    Options {
        mechanisms,
        ..Options::for_era(era_for::<V>(pick))
    }
}

/// The era at `pick` among the seeds' eras in which variant `V` existed
/// (the seeds', so each era keeps its share of the cases; the other eras'
/// mechanisms have their own tests).
fn era_for<V: Variant>(pick: usize) -> Era {
    let eras: Vec<Era> = Era::SEEDS
        .into_iter()
        .filter(|e| e.check_variant::<V>().is_ok())
        .collect();
    eras[pick % eras.len()]
}

fn run<M: BuddyModel, V: Variant>(
    model: M,
    layout: &Layout,
    ops: &[Op],
    options: Options,
) -> Result<(), String> {
    let alloc = match Allocator::<M, V>::new(model, layout, options) {
        Ok(a) => a,
        Err(InitError::Range(RangeError::HolesInBlock { .. })) if !V::HOLE_CHECK => return Ok(()),
        Err(e) => return Err(e.to_string()),
    };
    let initial = snapshot(&alloc);
    let mut cpu = alloc.cpu_on(layout.first_node()).unwrap();
    let mut reference = Reference::default();
    for &op in ops {
        match op {
            Op::Alloc(order) => {
                // Odd orders ask for unmovable memory: with migratetypes
                // (the default 6.18 era) they fall back and steal.
                let gfp = if order % 2 == 1 {
                    buddy::Gfp::DMA32
                } else {
                    GFP
                };
                let order = Order::new(order);
                match cpu.alloc_pages(order, gfp) {
                    Ok(pfn) => reference.record(layout, pfn, order)?,
                    Err(RequestError::NoMemory { .. }) => {}
                    Err(e) => return Err(format!("alloc: {e}")),
                }
            }
            Op::Free(i) => {
                if let Some((pfn, order)) = reference.take(i) {
                    cpu.free_pages(pfn, order)
                        .map_err(|e| format!("free {pfn}/{order}: {e}"))?;
                }
            }
            Op::BulkList(n) => {
                // Threaded through the pages: either walked and freed at
                // once (even n), or taken off one by one and held.
                let mut list = PageChain::new(&alloc);
                let got = cpu
                    .alloc_bulk_list(n, GFP, &mut list)
                    .map_err(|e| e.to_string())?;
                let pfns: Vec<_> = list.iter().collect();
                if got != pfns.len() || got != list.len() {
                    return Err(format!("bulk list returned {got}, list has {}", pfns.len()));
                }
                if n % 2 == 0 {
                    let freed = cpu.free_bulk_list(&mut list).map_err(|e| e.to_string())?;
                    if freed != got || !list.is_empty() {
                        return Err(format!("freed {freed} of {got} listed pages"));
                    }
                } else {
                    for pfn in pfns {
                        if list.pop_front() != Some(pfn) {
                            return Err(format!("the list does not give back {pfn} in order"));
                        }
                        reference.record(layout, pfn, Order::ZERO)?;
                    }
                }
            }
            Op::BulkArray(n, pre) => {
                let mut slots = vec![None; n];
                let mut prefilled = 0;
                for slot in slots.iter_mut().take(pre.min(n)).step_by(3) {
                    if let Ok(pfn) = cpu.alloc(GFP) {
                        reference.record(layout, pfn, Order::ZERO)?;
                        *slot = Some(pfn);
                        prefilled += 1;
                    }
                }
                let populated = cpu
                    .alloc_bulk_array(GFP, &mut slots)
                    .map_err(|e| e.to_string())?;
                let filled = slots.iter().take_while(|s| s.is_some()).count();
                if populated != filled {
                    return Err(format!(
                        "bulk array says {populated}, populated prefix is {filled}"
                    ));
                }
                let before = reference.blocks.len();
                for pfn in slots.iter().flatten() {
                    if !reference.blocks.contains_key(&pfn.get()) {
                        reference.record(layout, *pfn, Order::ZERO)?;
                    }
                }
                if reference.blocks.len() - before + prefilled != slots.iter().flatten().count() {
                    return Err("bulk array overwrote a prefilled slot".into());
                }
            }
            Op::Drain => cpu.drain(),
            Op::NolockAlloc(order) => {
                let order = Order::new(order);
                match cpu.alloc_pages_nolock(order) {
                    Ok(Some(pfn)) => reference.record(layout, pfn, order)?,
                    Ok(None)
                    | Err(RequestError::NotInEra(_) | RequestError::NolockOrder { .. }) => {}
                    Err(e) => return Err(format!("alloc_pages_nolock: {e}")),
                }
            }
            Op::NolockFree(i) => {
                if let Some((pfn, order)) = reference.take(i) {
                    match cpu.free_pages_nolock(pfn, order) {
                        Ok(()) => {}
                        Err(FreeError::NotInEra(_)) => cpu
                            .free_pages(pfn, order)
                            .map_err(|e| format!("free {pfn}/{order}: {e}"))?,
                        Err(e) => return Err(format!("free_pages_nolock {pfn}/{order}: {e}")),
                    }
                }
            }
        }
        check_conservation(&alloc, cpu.total_count(), &reference)?;
    }
    free_all_and_check(cpu, &mut reference, &initial)
}

/// Runs `ops` on every model that can hold `layout` (and checks that the
/// others refuse it), in the era at `pick` of those that had `V`, with
/// 64-byte pages.
fn run_models<V: Variant>(layout: &Layout, ops: &[Op], pick: usize) -> Result<(), String> {
    run_models_at::<sparsemem::Page, V>(layout, ops, pick)
}

/// [`run_models`] at every `struct page` layout the allocator runs at
/// (for a few variants only, so the suite stays fast).
fn run_models_every_size<V: Variant>(
    layout: &Layout,
    ops: &[Op],
    pick: usize,
) -> Result<(), String> {
    buddy::for_each_buddy_layout!(run_models_at::<V>(layout, ops, pick))
}

/// [`run_models`] at `struct page` layout `P`: every model where the
/// suites sweep `P` whole ([`sparsemem::testing::sweeps_whole`]), else the
/// model at `pick` (the allocator's decisions do not depend on the model,
/// and each case picks another), so the cases cover every pair.
fn run_models_at<P: BuddyPage, V: Variant>(
    layout: &Layout,
    ops: &[Op],
    pick: usize,
) -> Result<(), String> {
    const MODELS: usize = 5;
    let options = options_for::<V>(pick);
    let every = sparsemem::testing::sweeps_whole(P::SIZE);
    let runs = |i: usize| every || pick % MODELS == i;
    if runs(0)
        && let Some(m) = expect_build(Flat::<P>::build(layout), layout, Semantics::Flat)?
    {
        run::<_, V>(m, layout, ops, options)?;
    }
    if runs(1)
        && let Some(m) = expect_build(
            Sparse::<Classic, P>::build(layout),
            layout,
            Semantics::Section,
        )?
    {
        run::<_, V>(m, layout, ops, options)?;
    }
    if runs(2)
        && let Some(m) = expect_build(
            Sparse::<Extreme, P>::build(layout),
            layout,
            Semantics::Section,
        )?
    {
        run::<_, V>(m, layout, ops, options)?;
    }
    let e = |e: sparsemem::BuildError| e.to_string();
    let vopts = VmemmapOptions::default();
    if runs(3) {
        let table = Vmemmap::<Table, P>::build(layout, vopts).map_err(e)?;
        run::<_, V>(table, layout, ops, options)?;
    }
    if runs(4) {
        let probe = Vmemmap::<Probe, P>::build(layout, vopts).map_err(e)?;
        run::<_, V>(probe, layout, ops, options)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: sparsemem::testing::cases(24), ..ProptestConfig::default() })]

    #[test]
    fn nobitmap_matches_reference(
        layout in arb_layout(&SMALL_GEOMETRIES),
        ops in arb_ops(),
        pick in any::<usize>(),
    ) {
        run_models_every_size::<Config<false, false, true>>(&layout, &ops, pick).map_err(TestCaseError::fail)?;
        run_models::<Config<false, false, false>>(&layout, &ops, pick).map_err(TestCaseError::fail)?;
        run_models::<Config<true, false, false>>(&layout, &ops, pick).map_err(TestCaseError::fail)?;
        run_models_every_size::<buddy::Up>(&layout, &ops, pick).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn bitmap_matches_reference(
        layout in arb_layout(&SMALL_GEOMETRIES),
        ops in arb_ops(),
        pick in any::<usize>(),
    ) {
        run_models_every_size::<Config<false, true, true>>(&layout, &ops, pick).map_err(TestCaseError::fail)?;
        run_models::<Config<true, true, false>>(&layout, &ops, pick).map_err(TestCaseError::fail)?;
    }
}

/// Device memory with sub-section holes never enters the buddy, so the
/// zones hold boot memory only, whose max-order blocks are whole: with or
/// without the hole check the allocator builds, and the check never finds
/// a hole (why the kernel could drop `HOLES_IN_ZONE` in 5.14).
#[test]
fn zone_device_holes_stay_out_of_the_buddy() {
    let layout = Layout::preset("zone-device").unwrap();
    let ops: Vec<Op> = (0..400u32)
        .map(|i| match i % 5 {
            0 | 1 => Op::Alloc((i % 11) as u8),
            2 => Op::BulkList(64),
            3 => Op::Free(i as usize * 7),
            _ => Op::Free(i as usize),
        })
        .collect();
    let probe = VmemmapProbe::new(&layout).unwrap();
    run::<_, Config<false, false, true>>(probe, &layout, &ops, Options::for_era(Era::V5_13))
        .unwrap();
    let table = VmemmapTable::new(&layout).unwrap();
    run::<_, Config<false, false, false>>(table, &layout, &ops, Options::default()).unwrap();
    let alloc = Allocator::<_, Config<false, false, true>>::new(
        VmemmapProbe::new(&layout).unwrap(),
        &layout,
        Options::for_era(Era::V5_13),
    )
    .unwrap();
    let ram: u64 = layout.ram_ranges().map(|(_, a, b)| b.get() - a.get()).sum();
    assert_eq!(
        alloc.managed_pages_total(),
        ram,
        "only boot memory is managed"
    );
    let mut cpu = alloc.cpu_on(layout.first_node()).unwrap();
    let mut taken = Vec::new();
    while let Ok(p) = cpu.alloc_pages(Order::new(9), GFP) {
        taken.push(p);
    }
    for p in taken {
        cpu.free_pages(p, Order::new(9)).unwrap();
    }
    drop(cpu);
    let stats = alloc.stats_total();
    assert!(stats.hole_checks > 0 && stats.hole_hits == 0, "{stats:?}");
}
