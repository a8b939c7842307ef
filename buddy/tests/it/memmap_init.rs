//! `memmap_init`'s forms on generated layouts: the per-pfn form writes
//! every valid pfn of the span; the memblock-range form leaves the same
//! memmap wherever validity is per pageblock or coarser; the 4.11 skip
//! leaves the same memmap on memory and misses only valid pfns that are
//! not memory — the leading hole of a present section, the revert's case.

use buddy::{BuddyModel, MemmapInitForm, MemmapInitZone, memmap_init};
use proptest::prelude::*;
use sparsemem::testing::{SMALL_GEOMETRIES, WINDOW_SECTIONS, arb_layout, window_start};
use sparsemem::{
    BuddyPage, Flat, Geometry, Layout, MemRange, MemoryModel, NodeId, PageFlag, PageLayout, Pfn,
    RangeKind, SparseClassic, SparseExtreme,
};
use vmemmap::VmemmapTable;

/// One descriptor as memmap_init leaves it: zone, node, count, reserved.
type Written = Option<(u8, u16, i32, bool)>;

fn zone_of(layout: &Layout) -> MemmapInitZone {
    let g = layout.geometry();
    let start = window_start(layout);
    let end = (start + WINDOW_SECTIONS * g.pages_per_section()).min(g.max_pfn());
    MemmapInitZone {
        zone: 3,
        node: NodeId::new(1),
        start,
        end,
    }
}

fn memory(layout: &Layout) -> Vec<(Pfn, Pfn)> {
    layout.ram_ranges().map(|(_, a, b)| (a, b)).collect()
}

/// The memmap of the span after `form` on a fresh model from `build`.
fn run<M: BuddyModel>(
    mut model: M,
    layout: &Layout,
    form: MemmapInitForm,
) -> (Vec<Written>, buddy::MemmapInitCounts) {
    let zone = zone_of(layout);
    let counts = memmap_init(&mut model, &memory(layout), zone, form);
    let written = (zone.start.get()..zone.end.get())
        .map(|p| {
            model.pfn_to_page(Pfn::new(p)).map(|page| {
                (
                    page.zone_id(),
                    page.node_id(),
                    page.refcount(),
                    page.test(PageFlag::Reserved),
                )
            })
        })
        .collect();
    (written, counts)
}

fn check<M: BuddyModel>(build: impl Fn() -> Option<M>, layout: &Layout) -> Result<(), String> {
    let Some(probe) = build() else { return Ok(()) };
    let zone = zone_of(layout);
    let g = *layout.geometry();
    let name = probe.name();
    let block = g.pageblock_nr_pages();
    let pfn_at = |i: usize| Pfn::new(zone.start.get() + i as u64);
    let mem = memory(layout);
    let in_memory = |p: Pfn| mem.iter().any(|&(a, b)| a <= p && p < b);
    let (per_pfn, c) = run(build().unwrap(), layout, MemmapInitForm::PerPfn);
    if c.pfn_valid_calls != zone.end - zone.start {
        return Err(format!("{name}: per-pfn made {} calls", c.pfn_valid_calls));
    }
    for (i, w) in per_pfn.iter().enumerate() {
        let device = probe
            .pfn_to_page(pfn_at(i))
            .is_some_and(|p| p.is_zone_device());
        if w.is_some() && !device && *w != Some((3, 1, 1, true)) {
            return Err(format!("{name}: per-pfn left {} as {w:?}", pfn_at(i)));
        }
    }
    let (ranges, _) = run(build().unwrap(), layout, MemmapInitForm::MemblockRanges);
    for (i, (a, b)) in per_pfn.iter().zip(&ranges).enumerate() {
        let p = pfn_at(i);
        let skipped_block = !probe.pfn_valid(Pfn::new(p.get() & !(block - 1)));
        let allowed = skipped_block && !in_memory(p) && block > g.pages_per_subsection();
        if a != b && !allowed {
            return Err(format!(
                "{name}: memblock-ranges differs at {p}: {b:?}, per-pfn {a:?}"
            ));
        }
    }
    let (skip, _) = run(build().unwrap(), layout, MemmapInitForm::SkipToNextRegion);
    for (i, (a, b)) in per_pfn.iter().zip(&skip).enumerate() {
        let p = pfn_at(i);
        if a != b && in_memory(p) {
            return Err(format!(
                "{name}: the skip differs on memory at {p}: {b:?}, per-pfn {a:?}"
            ));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: sparsemem::testing::cases(24), ..ProptestConfig::default() })]

    #[test]
    fn forms_leave_the_same_memmap(layout in arb_layout(&SMALL_GEOMETRIES)) {
        check(|| Flat::new(&layout).ok(), &layout).map_err(TestCaseError::fail)?;
        check(|| SparseClassic::new(&layout).ok(), &layout).map_err(TestCaseError::fail)?;
        check(|| SparseExtreme::new(&layout).ok(), &layout).map_err(TestCaseError::fail)?;
        check(|| VmemmapTable::new(&layout).ok(), &layout).map_err(TestCaseError::fail)?;
    }
}

/// The revert's case: RAM starting in the middle of a present section
/// after an absent one. The 4.11 skip jumps from the absent section to the
/// RAM and leaves the section's leading hole uninitialised; the other two
/// forms write it.
#[test]
fn the_skip_misses_a_present_sections_leading_hole() {
    const MIB: u64 = 1 << 20;
    let layout = Layout::new(
        Geometry::X86_64,
        vec![
            MemRange::new(0, 128 * MIB, RangeKind::Ram, 0),
            MemRange::new(256 * MIB + 64 * MIB, 384 * MIB, RangeKind::Ram, 0),
        ],
        "a leading hole",
    )
    .unwrap();
    let zone = MemmapInitZone {
        zone: 3,
        node: NodeId::new(1),
        start: Pfn::new(0),
        end: Pfn::new((384 * MIB) >> 12),
    };
    let hole = Pfn::new((256 * MIB) >> 12);
    let memory = memory(&layout);
    for form in MemmapInitForm::ALL {
        let mut model = SparseExtreme::new(&layout).unwrap();
        let counts = memmap_init(&mut model, &memory, zone, form);
        let written = model.pfn_to_page(hole).unwrap().zone_id() == 3;
        assert_eq!(
            written,
            form != MemmapInitForm::SkipToNextRegion,
            "{form:?}"
        );
        let calls = counts.pfn_valid_calls;
        match form {
            MemmapInitForm::PerPfn => assert_eq!(calls, zone.end - zone.start),
            MemmapInitForm::SkipToNextRegion => assert_eq!(counts.region_searches, 1),
            // The hole 128..320 MiB: one call per 2 MiB pageblock of the
            // absent section (64), one per pfn of the leading hole.
            MemmapInitForm::MemblockRanges => assert_eq!(calls, 64 + ((64 * MIB) >> 12)),
        }
    }
}
