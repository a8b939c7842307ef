//! Test support shared by every crate: generated layouts and the generic
//! model checker. Enabled by the `testing` feature.
//!
//! The differential test is written once, here, against [`MemoryModel`], and
//! each crate runs it over its own models: [`check_model`] compares a model
//! with [`Reference`] on a set of pfns, and [`arb_layout`] generates layouts
//! that stress section and subsection edges within a window of
//! [`WINDOW_SECTIONS`] sections placed at the bottom, the middle or the very
//! top of the physical address space.

use proptest::prelude::*;

mod child;
pub use child::{run_alone, run_child};

use crate::error::BuildError;
use crate::geometry::{Geometry, SUBSECTION_SHIFT};
use crate::layout::{Layout, MemRange, RangeKind};
use crate::model::MemoryModel;
use crate::page::PageLayout;
use crate::pageblock::Migratetype;
use crate::reference::{Reference, Semantics};
use crate::table::MemoryKind;
use crate::types::{NodeId, Pfn};

/// `x86-pci-hole`'s shape (RAM below 3 GiB, a 1 GiB PCI hole, RAM from
/// 4 GiB: ZONE_DMA, ZONE_DMA32 and ZONE_NORMAL) with `gib_above_4g` GiB
/// above the hole instead of the preset's 28, for tests that build
/// allocators over the whole layout and need the zones, not the size.
pub fn pci_hole_layout(gib_above_4g: u64) -> Layout {
    const GIB: u64 = 1 << 30;
    Layout::new(
        Geometry::X86_64,
        vec![
            MemRange::new(0, 3 * GIB, RangeKind::Ram, 0),
            MemRange::new(3 * GIB, 4 * GIB, RangeKind::Reserved, 0),
            MemRange::new(4 * GIB, (4 + gib_above_4g) * GIB, RangeKind::Ram, 0),
        ],
        "x86-pci-hole's shape",
    )
    .expect("a valid layout")
}

/// How many cases a generated suite runs: `PFNLAB_PROPTEST_CASES` when it
/// holds a number (CI samples the suites under QEMU with a few); `full`,
/// the suite's own count, with `PFNLAB_TEST_FULL` set (as CI's full step
/// runs them); else half of `full`, so that `cargo test` stays quick.
pub fn cases(full: u32) -> u32 {
    if let Some(n) = std::env::var("PFNLAB_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        n
    } else if std::env::var_os("PFNLAB_TEST_FULL").is_some() {
        full
    } else {
        full.div_ceil(2)
    }
}

/// Whether the generated suites sweep the whole window at a `struct page`
/// of `size` bytes: always at 64; at every size with `PFNLAB_TEST_FULL=1`;
/// at 64 and N with `PFNLAB_TEST_FULL=N` (32, 16 or 8).
///
/// Whether a pfn is valid, online or device memory, and which pfns a walk
/// yields, depend on the section table and the subsection map, never on
/// the size of `struct page`; what the size changes is the memmap: where
/// each descriptor lives and what it holds. So by default the suites sweep
/// every window pfn (and walk the whole window) at 64 bytes, and at the
/// smaller sizes read the descriptors of [`sampled_pfns`] (every
/// subsection's edges, the layout's edges, random pfns) and walk across
/// each boundary, with a whole sweep once at the end of a hotplug sequence.
pub fn sweeps_whole(size: u64) -> bool {
    size == 64
        || std::env::var("PFNLAB_TEST_FULL")
            .is_ok_and(|v| v == "1" || v.parse::<u64>().is_ok_and(|n| n == size))
}

/// The pfns a differential check reads at `struct page` layout `P`: every
/// window pfn where [`sweeps_whole`], else [`sampled_pfns`].
pub fn pfns_at<P: PageLayout>(layout: &Layout) -> Vec<Pfn> {
    if sweeps_whole(P::SIZE) {
        window_pfns(layout)
    } else {
        sampled_pfns(layout, 4096)
    }
}

/// The reach of a walk check at `struct page` layout `P`: `reach` where
/// [`sweeps_whole`], else [`WalkReach::Boundaries`].
pub fn reach_at<P: PageLayout>(reach: WalkReach) -> WalkReach {
    if sweeps_whole(P::SIZE) {
        reach
    } else {
        WalkReach::Boundaries
    }
}

/// Sections in a generated layout's window.
pub const WINDOW_SECTIONS: u64 = 8;

/// Geometries whose windows every model (FLATMEM and the classic table
/// included) can build.
pub const SMALL_GEOMETRIES: [Geometry; 4] = [
    Geometry::X86_64,
    Geometry::ARM64_4K,
    Geometry::ARM64_64K,
    Geometry::IA64,
];

/// The first pfn of a generated layout's window.
pub fn window_start(layout: &Layout) -> Pfn {
    let g = layout.geometry();
    let first = layout.ranges()[0].start;
    g.section_nr_to_pfn(g.pfn_to_section_nr(g.phys_to_pfn(first)))
}

/// Layouts over `geometries`: up to six ranges of every kind with edges at
/// subsection granularity (hotplug ranges shrunk to whole memory blocks),
/// RAM and reserved edges jittered off page boundaries, inside a window of
/// [`WINDOW_SECTIONS`] sections. Device and hotplug ranges are rarer, so
/// most layouts build on every model.
pub fn arb_layout(geometries: &'static [Geometry]) -> impl Strategy<Value = Layout> {
    let segment = (0u8..12, 0u16..3, 0u64..1024, 0u64..1024);
    (
        0..geometries.len(),
        0u8..3,
        any::<u64>(),
        prop::collection::btree_set(0u64..4096, 2..=12),
        prop::collection::vec(segment, 6),
    )
        .prop_filter_map(
            "layout without memory",
            move |(gi, place, seed, cuts, segs)| {
                let g = geometries[gi];
                let nr_sections = g.nr_mem_sections();
                let base_section = match place {
                    0 => 0,
                    1 => nr_sections - WINDOW_SECTIONS,
                    _ => seed % (nr_sections - WINDOW_SECTIONS),
                };
                let base = base_section << g.section_size_bits();
                let nr_subs = WINDOW_SECTIONS * g.subsections_per_section();
                let mut cuts: Vec<u64> = cuts.into_iter().map(|c| c % (nr_subs + 1)).collect();
                cuts.sort_unstable();
                cuts.dedup();
                let ranges = cuts
                    .chunks_exact(2)
                    .zip(segs)
                    .filter(|(c, _)| c[0] < c[1])
                    .map(|(c, (kind, node, sj, ej))| {
                        let start = base + (c[0] << SUBSECTION_SHIFT);
                        let end = base + (c[1] << SUBSECTION_SHIFT);
                        let block = 1u64 << g.section_size_bits();
                        match kind {
                            0..=5 => MemRange::new(
                                start + sj * 1024,
                                end - ej * 1024,
                                RangeKind::Ram,
                                node,
                            ),
                            6 => MemRange::new(
                                start.next_multiple_of(block),
                                end / block * block,
                                RangeKind::Hotplug,
                                node,
                            ),
                            7 => MemRange::new(start, end, RangeKind::Device, node),
                            _ => MemRange::new(
                                start + sj * 1024,
                                end - ej * 1024,
                                RangeKind::Reserved,
                                node,
                            ),
                        }
                    })
                    .filter(|r| r.start < r.end)
                    .collect();
                Layout::new(g, ranges, "generated").ok()
            },
        )
}

/// Boundary pfns of a layout: range and section edges and their
/// neighbours, the max-physmem limit, zero and `u64::MAX`.
pub fn interesting_pfns(layout: &Layout) -> Vec<Pfn> {
    let g = layout.geometry();
    let mut v = vec![0, 1, u64::MAX, u64::MAX - 1, g.max_pfn().get()];
    v.push(g.max_pfn().get() - 1);
    v.push(g.max_pfn().get() + 1);
    for r in layout.ranges() {
        for edge in [g.phys_to_pfn(r.start).get(), g.phys_to_pfn(r.end).get()] {
            let sec = edge & !(g.pages_per_section() - 1);
            let sub = edge & !(g.pages_per_subsection() - 1);
            for base in [
                edge,
                sec,
                sec + g.pages_per_section(),
                sub,
                sub + g.pages_per_subsection(),
            ] {
                v.extend([base.wrapping_sub(1), base, base + 1]);
            }
        }
    }
    v.sort_unstable();
    v.dedup();
    v.into_iter().map(Pfn::new).collect()
}

/// Every pfn of the layout's window plus [`interesting_pfns`].
pub fn window_pfns(layout: &Layout) -> Vec<Pfn> {
    let g = layout.geometry();
    let start = window_start(layout).get();
    let end = (start + WINDOW_SECTIONS * g.pages_per_section()).min(g.max_pfn().get());
    let mut v: Vec<Pfn> = (start..end).map(Pfn::new).collect();
    v.extend(interesting_pfns(layout));
    v
}

/// [`interesting_pfns`], both neighbours of every subsection edge in the
/// window, and `nr_random` pseudo-random window pfns: for models whose holes
/// cost a caught fault each, where [`window_pfns`] would be slow.
pub fn sampled_pfns(layout: &Layout, nr_random: u64) -> Vec<Pfn> {
    let g = layout.geometry();
    let start = window_start(layout).get();
    let len = (WINDOW_SECTIONS * g.pages_per_section()).min(g.max_pfn().get() - start);
    let per = g.pages_per_subsection();
    let mut v = interesting_pfns(layout);
    for edge in (start..start + len).step_by(per as usize) {
        v.extend([Pfn::new(edge.wrapping_sub(1)), Pfn::new(edge)]);
    }
    let mut x = 0x2545_f491_4f6c_dd1du64 ^ start;
    for _ in 0..nr_random {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(Pfn::new(start + x % len));
    }
    v
}

/// Whether a model of `semantics` can hold `layout`: FLATMEM has no
/// hotplug or device memory, SPARSEMEM without VMEMMAP no device memory.
pub fn can_hold(layout: &Layout, semantics: Semantics) -> bool {
    match semantics {
        Semantics::Flat => !layout.has(RangeKind::Hotplug) && !layout.has(RangeKind::Device),
        Semantics::Section => !layout.has(RangeKind::Device),
        Semantics::Vmemmap => true,
    }
}

/// Checks a model build against [`can_hold`]: `Ok(Some(model))` when it was
/// built and should have been, `Ok(None)` when it was refused with
/// [`BuildError::CannotHold`] and should have been, else what went wrong.
pub fn expect_build<M>(
    built: Result<M, BuildError>,
    layout: &Layout,
    semantics: Semantics,
) -> Result<Option<M>, String> {
    match (built, can_hold(layout, semantics)) {
        (Ok(model), true) => Ok(Some(model)),
        (Err(BuildError::CannotHold { .. }), false) => Ok(None),
        (Ok(_), false) => Err(format!(
            "a {semantics:?} model built a layout it cannot hold: {layout:?}"
        )),
        (Err(e), _) => Err(format!("{semantics:?} model refused the layout: {e}")),
    }
}

/// Compares `model` with `reference` on `pfns`: `pfn_valid`, presence of
/// the page, `page_to_pfn(pfn_to_page(p)) == p`, `pfn_to_online_page`, and
/// that device memory's descriptors say so (`is_zone_device_page`).
/// Returns the first disagreement.
pub fn check_model<M: MemoryModel + ?Sized>(
    model: &M,
    reference: &Reference,
    pfns: &[Pfn],
) -> Result<(), String> {
    for &pfn in pfns {
        let expect = reference.pfn_valid(pfn);
        let got = model.pfn_valid(pfn);
        if got != expect {
            return Err(format!(
                "{}: pfn_valid({pfn}) = {got}, reference says {expect}",
                model.name()
            ));
        }
        if let Some(page) = model.pfn_to_page(pfn) {
            if !page.is_present() {
                return Err(format!(
                    "{}: page of valid pfn {pfn} is not present",
                    model.name()
                ));
            }
            let back = model.page_to_pfn(page);
            if back != pfn {
                return Err(format!(
                    "{}: page_to_pfn(pfn_to_page({pfn})) = {back}",
                    model.name()
                ));
            }
        }
        let online = model.pfn_to_online_page(pfn).is_some();
        if online != reference.pfn_online(pfn) {
            return Err(format!(
                "{}: online({pfn}) = {online}, reference disagrees",
                model.name()
            ));
        }
        let device = model.pfn_to_page(pfn).is_some_and(|p| p.is_zone_device());
        if device != reference.is_device(pfn) {
            return Err(format!(
                "{}: is_zone_device_page({pfn}) = {device}, reference disagrees",
                model.name()
            ));
        }
    }
    Ok(())
}

/// Checks a model's pageblock flags on `layout`: every memory range's
/// first and last pageblock reads `Movable` (memmap init), a block set to
/// another migratetype reads it back while its neighbours keep theirs,
/// and setting it back restores the state.
pub fn check_pageblocks<M: MemoryModel + ?Sized>(model: &M, layout: &Layout) -> Result<(), String> {
    let g = layout.geometry();
    let block = g.pageblock_nr_pages();
    for (_, first, end) in layout.memory_ranges() {
        for pfn in [first, Pfn::new(end.get() - 1)] {
            let got = model.get_pfnblock_migratetype(pfn);
            if got != Migratetype::Movable {
                return Err(format!("{}: block of {pfn} starts {got}", model.name()));
            }
        }
        let pfn = first;
        model.set_pfnblock_migratetype(pfn, Migratetype::Reclaimable);
        let same_block = Pfn::new((pfn.get() | (block - 1)).min(end.get() - 1));
        let next = Pfn::new((pfn.get() | (block - 1)) + 1);
        let ok = model.get_pfnblock_migratetype(pfn) == Migratetype::Reclaimable
            && model.get_pfnblock_migratetype(same_block) == Migratetype::Reclaimable
            && (next >= end || model.get_pfnblock_migratetype(next) == Migratetype::Movable);
        model.set_pfnblock_migratetype(pfn, Migratetype::Movable);
        if !ok || model.get_pfnblock_migratetype(pfn) != Migratetype::Movable {
            return Err(format!(
                "{}: set_pfnblock_migratetype at {pfn}",
                model.name()
            ));
        }
    }
    Ok(())
}

/// One hotplug request in a generated sequence, addressed in subsections of
/// the window; `whole_blocks` snaps it out to whole memory blocks first, so
/// that ordinary memory requests are often well formed.
#[derive(Clone, Copy, Debug)]
pub struct HotplugStep {
    /// What the request does.
    pub op: StepOp,
    /// Subsection index within the window.
    pub at: u64,
    /// Length in subsections.
    pub nr_subsections: u64,
    /// Snap to whole memory blocks.
    pub whole_blocks: bool,
}

/// The request of a [`HotplugStep`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepOp {
    /// `hot_add` (memory) or `add_device`.
    Add(MemoryKind),
    /// `hot_remove` (memory) or `remove_device`.
    Remove(MemoryKind),
    /// `set_online(.., true)` or `(.., false)`.
    Online(bool),
}

/// Sequences of hotplug requests inside a window (many of them invalid on
/// purpose: overlaps, absent ranges, misaligned memory, device memory where
/// the model has no VMEMMAP).
pub fn arb_hotplug_steps() -> impl Strategy<Value = Vec<HotplugStep>> {
    let kind = prop_oneof![Just(MemoryKind::Memory), Just(MemoryKind::Device)];
    let op = prop_oneof![
        kind.clone().prop_map(StepOp::Add),
        kind.prop_map(StepOp::Remove),
        any::<bool>().prop_map(StepOp::Online),
    ];
    let step = (op, 0u64..4096, 1u64..96, prop::bool::weighted(0.7)).prop_map(
        |(op, at, nr_subsections, whole_blocks)| HotplugStep {
            op,
            at,
            nr_subsections,
            whole_blocks,
        },
    );
    prop::collection::vec(step, 1..12)
}

/// Applies `step` to `model` and `reference`; both must accept or both
/// refuse it.
pub fn apply_step<M: MemoryModel + ?Sized>(
    model: &mut M,
    reference: &mut Reference,
    layout: &Layout,
    step: HotplugStep,
) -> Result<(), String> {
    let g = layout.geometry();
    let base = window_start(layout).get();
    let per_section = g.subsections_per_section();
    let nr_window = WINDOW_SECTIONS * per_section;
    let (mut at, mut nr) = (step.at % nr_window, step.nr_subsections);
    if step.whole_blocks {
        at -= at % per_section;
        nr = nr.next_multiple_of(per_section);
    }
    let start = Pfn::new(base + at * g.pages_per_subsection());
    let n = nr * g.pages_per_subsection();
    let node = NodeId::ZERO;
    let (model_ok, reference_ok) = match step.op {
        StepOp::Add(MemoryKind::Memory) => {
            (model.hot_add(start, n).is_ok(), reference.hot_add(start, n))
        }
        StepOp::Add(MemoryKind::Device) => (
            model.add_device(start, n, node).is_ok(),
            reference.add_device(start, n),
        ),
        StepOp::Remove(MemoryKind::Memory) => (
            model.hot_remove(start, n).is_ok(),
            reference.hot_remove(start, n),
        ),
        StepOp::Remove(MemoryKind::Device) => (
            model.remove_device(start, n).is_ok(),
            reference.remove_device(start, n),
        ),
        StepOp::Online(online) => (
            model.set_online(start, n, online).is_ok(),
            reference.set_online(start, n, online),
        ),
    };
    if model_ok == reference_ok {
        Ok(())
    } else {
        Err(format!(
            "{}: {step:?} at pfn {start} accepted={model_ok}, reference accepted={reference_ok}",
            model.name()
        ))
    }
}

/// How much of a layout [`check_walks`] walks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalkReach {
    /// A few pfns either side of every range and (sub)section edge: where
    /// the descriptors change and a subsection's interior does not, as at
    /// the smaller `struct page` sizes.
    Boundaries,
    /// A subsection either side of every range and (sub)section edge: for
    /// models whose hole pfns cost a caught fault each.
    Edges,
    /// The edges, the whole window, and (by the model's own walk and the
    /// bulk variant) the whole physical span.
    Whole,
}

/// Checks every walk of `model` against `reference`: over each range,
/// [`walk::KernelWalk`](crate::walk::KernelWalk),
/// [`walk::PerPfnWalk`](crate::walk::PerPfnWalk) and
/// [`walk::BulkSkipWalk`](crate::walk::BulkSkipWalk) yield exactly the
/// pfns the reference holds valid, in order; `first_valid_pfn` from every
/// range's start finds the reference's first; bad ranges are errors.
pub fn check_walks<M: MemoryModel + ?Sized>(
    model: &M,
    reference: &Reference,
    layout: &Layout,
    reach: WalkReach,
) -> Result<(), String> {
    let g = layout.geometry();
    let ws = window_start(layout).get();
    // A generated hotplug step starts in the window and reaches at most
    // two sections past it.
    let we = (ws + (WINDOW_SECTIONS + 2) * g.pages_per_section()).min(g.max_pfn().get());
    let reach_sub = match reach {
        WalkReach::Boundaries => 3,
        WalkReach::Edges | WalkReach::Whole => g.pages_per_subsection() + 3,
    };
    let mut ranges: Vec<(u64, u64)> = interesting_pfns(layout)
        .into_iter()
        .map(Pfn::get)
        .filter(|&p| p >= ws && p <= we)
        .map(|p| (p.saturating_sub(reach_sub).max(ws), (p + reach_sub).min(we)))
        .filter(|(s, e)| s < e)
        .collect();
    // `first_valid_pfn` from each range's own start, as a walk would begin
    // there.
    for &(s, e) in &ranges {
        check_first_valid(model, reference, Pfn::new(s), Pfn::new(e))?;
    }
    // The edges of a range cluster within a subsection of each other, so
    // their reaches overlap: walk each stretch once. Every pfn the separate
    // walks would cross, a merged one crosses too.
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len() + 1);
    for (s, e) in ranges {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    if reach == WalkReach::Whole {
        merged.push((ws, we));
    }
    for (s, e) in merged {
        check_range_walks(model, reference, Pfn::new(s), Pfn::new(e))?;
    }
    if reach == WalkReach::Whole {
        check_whole_span_walks(model, reference, layout, Pfn::new(ws), Pfn::new(we))?;
    }
    check_bad_ranges(model, layout, Pfn::new(ws))
}

/// The reference's valid pfns of `start..end`, in order.
fn expected_walk(reference: &Reference, start: Pfn, end: Pfn) -> Vec<Pfn> {
    (start.get()..end.get())
        .map(Pfn::new)
        .filter(|&p| reference.pfn_valid(p))
        .collect()
}

/// Each walker over `start..end` yields the reference's pfns, and
/// `first_valid_pfn` finds its first.
fn check_range_walks<M: MemoryModel + ?Sized>(
    model: &M,
    reference: &Reference,
    start: Pfn,
    end: Pfn,
) -> Result<(), String> {
    use crate::walk::{BulkSkipWalk, KernelWalk, PerPfnWalk, walk};
    let want = expected_walk(reference, start, end);
    let got: [Vec<Pfn>; 3] = [
        walk::<_, KernelWalk>(model, start, end).map(Iterator::collect),
        walk::<_, PerPfnWalk>(model, start, end).map(Iterator::collect),
        walk::<_, BulkSkipWalk>(model, start, end).map(Iterator::collect),
    ]
    .map(|r| r.unwrap_or_default());
    for (name, got) in ["kernel", "per-pfn", "bulk"].iter().zip(&got) {
        if *got != want {
            return Err(format!(
                "{}: {name} walk of {start}..{end} yields {} pfns (first {:?}), reference {} (first {:?})",
                model.name(),
                got.len(),
                got.first(),
                want.len(),
                want.first()
            ));
        }
    }
    check_first_valid(model, reference, start, end)
}

/// `first_valid_pfn(start, end)` is the reference's first valid pfn of the
/// range, or `end` when it has none.
fn check_first_valid<M: MemoryModel + ?Sized>(
    model: &M,
    reference: &Reference,
    start: Pfn,
    end: Pfn,
) -> Result<(), String> {
    let first = model.first_valid_pfn(start, end);
    let want_first = (start.get()..end.get())
        .map(Pfn::new)
        .find(|&p| reference.pfn_valid(p))
        .unwrap_or(end);
    if first.min(end) != want_first {
        return Err(format!(
            "{}: first_valid_pfn({start}, {end}) = {first}, reference {want_first}",
            model.name()
        ));
    }
    Ok(())
}

/// Every valid pfn lies in the (widened) window `ws..we`, so the whole
/// span walks to exactly the window's, by the kernel's walk and the bulk
/// variant.
fn check_whole_span_walks<M: MemoryModel + ?Sized>(
    model: &M,
    reference: &Reference,
    layout: &Layout,
    ws: Pfn,
    we: Pfn,
) -> Result<(), String> {
    use crate::walk::{BulkSkipWalk, KernelWalk, PfnRange, walk_range};
    let want = expected_walk(reference, ws, we);
    let whole = PfnRange::whole(layout.geometry());
    let kernel: Vec<Pfn> = walk_range::<_, KernelWalk>(model, whole).collect();
    let bulk: Vec<Pfn> = walk_range::<_, BulkSkipWalk>(model, whole).collect();
    if kernel != want || bulk != want {
        return Err(format!(
            "{}: whole-span walks yield {} and {} pfns, reference {}",
            model.name(),
            kernel.len(),
            bulk.len(),
            want.len()
        ));
    }
    Ok(())
}

/// An empty, an inverted and a too-large range are each refused.
fn check_bad_ranges<M: MemoryModel + ?Sized>(
    model: &M,
    layout: &Layout,
    ws: Pfn,
) -> Result<(), String> {
    use crate::walk::{KernelWalk, WalkError, walk};
    let ws = ws.get();
    let max = layout.geometry().max_pfn().get();
    let bad = [
        (
            walk::<_, KernelWalk>(model, Pfn::new(ws), Pfn::new(ws)).err(),
            "empty",
        ),
        (
            walk::<_, KernelWalk>(model, Pfn::new(ws + 1), Pfn::new(ws)).err(),
            "inverted",
        ),
        (
            walk::<_, KernelWalk>(model, Pfn::new(0), Pfn::new(max + 1)).err(),
            "past max",
        ),
    ];
    for (err, what) in bad {
        if !matches!(
            err,
            Some(
                WalkError::Empty { .. }
                    | WalkError::Inverted { .. }
                    | WalkError::BeyondMaxPhysmem { .. }
            )
        ) {
            return Err(format!("{}: {what} range gave {err:?}", model.name()));
        }
    }
    Ok(())
}

/// Runs the generic check `$f::<P>(args…)` (returning `Result<_, String>`)
/// at every `struct page` layout, largest first, and stops at the first
/// error, which names the size.
#[macro_export]
macro_rules! for_each_page_layout {
    ($f:ident ( $($arg:expr),* $(,)? )) => {{
        let mut result: Result<(), String> = Ok(());
        $crate::for_each_page_layout!(@one result, $f, $crate::Page64, $($arg),*);
        $crate::for_each_page_layout!(@one result, $f, $crate::Page32, $($arg),*);
        $crate::for_each_page_layout!(@one result, $f, $crate::Page16, $($arg),*);
        $crate::for_each_page_layout!(@one result, $f, $crate::Page8, $($arg),*);
        result
    }};
    (@one $result:ident, $f:ident, $p:ty, $($arg:expr),*) => {
        if $result.is_ok() {
            $result = $f::<$p>($($arg),*).map(|_| ()).map_err(|e| {
                format!("{} at {}-byte struct page", e, <$p as $crate::PageLayout>::SIZE)
            });
        }
    };
}
