//! `bench walk`'s reproductions of the three published changes, each on
//! its own workload shape: compaction with `zone->contiguous` off and on
//! (a whole sync scan, a hinted run, and a THP fault's async run),
//! `memmap_init`'s forms over a sparse span, and `reserve_bootmem_region`
//! per pfn against `for_each_valid_pfn`.

use buddy::{
    BuddyModel, CompactControl, CompactState, Era, Gfp, Kernel, MemmapInitForm, MemmapInitZone,
    Options, compact_zone_scan, memmap_init,
};
use sparsemem::walk::{KernelWalk, PerPfnWalk};
use sparsemem::{Geometry, Layout, MemRange, NodeId, Order, Pfn, PfnRange, RangeKind};
use vmemmap::VmemmapOptions;

use super::super::hole_density::{SPAN_SECTIONS, layout_with_holes};
use super::{Case, CompactShape, WalkRow, Walker, row};
use crate::models::{Buildable, ModelKind, ModelVisitor, build_allocator};
use crate::timing::Plan;
use crate::workloads::{reserve_bootmem_walk, walk_valid};

/// A fragmented zone: every page taken as order-0 with `gfp`, two in
/// three given back.
fn fragment<M: BuddyModel>(alloc: &buddy::Allocator<M, Kernel>, gfp: Gfp) {
    let mut taken = Vec::new();
    while let Ok(p) = alloc.alloc_pages(Order::ZERO, gfp, NodeId::ZERO, None) {
        taken.push(p);
    }
    for (i, p) in taken.into_iter().enumerate() {
        if i % 3 != 0 {
            let _ = alloc.free_pages(p, Order::ZERO);
        }
    }
}

pub(super) struct ReproVisitor {
    pub(super) kind: ModelKind,
    pub(super) plan: Plan,
}

impl ReproVisitor {
    /// Compaction with `zone->contiguous` off and on, interleaved, in each
    /// [`CompactShape`]: the whole and hinted runs over a zone fragmented by
    /// movable allocations, the async THP run over one fragmented by kernel
    /// allocations.
    fn compaction<M: Buildable>(
        &self,
        o: VmemmapOptions,
        rows: &mut Vec<WalkRow>,
    ) -> Result<(), buddy::AllocError> {
        let gib = if self.plan.scale < 1.0 { 1 } else { 4 };
        let layout = Layout::new(
            Geometry::X86_64,
            vec![MemRange::new(0, gib << 30, RangeKind::Ram, 0)],
            format!("{gib} GiB, fragmented"),
        )
        .expect("a valid layout");
        for gfp in [Gfp::HIGHUSER_MOVABLE, Gfp::KERNEL] {
            let alloc = build_allocator::<M, Kernel>(&layout, o, Options::for_era(Era::V6_18))?;
            fragment(&alloc, gfp);
            let shapes: &[CompactShape] = if gfp == Gfp::KERNEL {
                &[CompactShape::AsyncThp]
            } else {
                &[CompactShape::Whole, CompactShape::Hinted]
            };
            for &shape in shapes {
                self.compaction_shape(&alloc, &layout, shape, rows);
            }
        }
        Ok(())
    }

    fn compaction_shape<M: Buildable>(
        &self,
        alloc: &buddy::Allocator<M, Kernel>,
        layout: &Layout,
        shape: CompactShape,
        rows: &mut Vec<WalkRow>,
    ) {
        let zone = alloc
            .zones()
            .iter()
            .max_by_key(|z| z.managed_pages())
            .expect("a zone");
        let block = layout.geometry().pageblock_nr_pages();
        let span = zone.end_pfn() - zone.start_pfn();
        let per_pfn = shape == CompactShape::Whole;
        // Each variant keeps its state across its runs: the warm-up run
        // sets the hints a hinted run then honours.
        let mut variants = [false, true].map(|contiguous| {
            let cc = CompactControl {
                use_contiguous: contiguous,
                ignore_skip_hint: shape != CompactShape::Hinted,
                async_movable: shape == CompactShape::AsyncThp,
                ..CompactControl::PROC
            };
            (cc, CompactState::new(zone, block), 0u64)
        });
        let ms = self
            .plan
            .measure_interleaved(&mut variants, |(cc, state, work)| {
                let n = compact_zone_scan(alloc, zone.id, state, *cc).expect("6.18 compacts");
                *work = if per_pfn {
                    n.migrate_scanned + n.free_scanned
                } else {
                    n.pageblock_checks
                };
                *work
            });
        for ((cc, _, work), m) in variants.into_iter().zip(ms) {
            let case = Case::Compaction {
                contiguous: cc.use_contiguous,
                shape,
            };
            rows.push(row(case, self.kind, layout, span, work, work, m));
        }
    }

    fn memmap_init<M: Buildable>(
        &self,
        o: VmemmapOptions,
        rows: &mut Vec<WalkRow>,
    ) -> Result<(), buddy::AllocError> {
        let layout = layout_with_holes(Geometry::X86_64, 0.97);
        let mut model = M::build(&layout, o)?;
        let memory: Vec<(Pfn, Pfn)> = layout.ram_ranges().map(|(_, a, b)| (a, b)).collect();
        let end = Pfn::new(SPAN_SECTIONS * layout.geometry().pages_per_section());
        let zone = MemmapInitZone {
            zone: 1,
            node: NodeId::ZERO,
            start: Pfn::new(0),
            end,
        };
        for form in MemmapInitForm::ALL {
            let mut written = 0;
            let m = self.plan.measure(|| {
                written = memmap_init(&mut model, &memory, zone, form).pages_initialised;
                end.get()
            });
            rows.push(row(
                Case::MemmapInit(form),
                self.kind,
                &layout,
                end.get(),
                end.get(),
                written,
                m,
            ));
        }
        Ok(())
    }

    fn reserve_bootmem<M: Buildable>(
        &self,
        o: VmemmapOptions,
        rows: &mut Vec<WalkRow>,
    ) -> Result<(), buddy::AllocError> {
        const GIB: u64 = 1 << 30;
        let nomap = if self.plan.scale < 1.0 { 8 } else { 64 };
        let layout = Layout::new(
            Geometry::X86_64,
            vec![
                MemRange::new(0, GIB, RangeKind::Ram, 0),
                MemRange::new(GIB, (1 + nomap) * GIB, RangeKind::Reserved, 0),
                MemRange::new((1 + nomap) * GIB, (2 + nomap) * GIB, RangeKind::Ram, 0),
            ],
            format!("{nomap} GiB reserved (NOMAP) between two 1 GiB banks"),
        )
        .expect("a valid layout");
        let model = M::build(&layout, o)?;
        let g = layout.geometry();
        let range = PfnRange::new(
            g,
            g.phys_to_pfn(sparsemem::PhysAddr::new(GIB)),
            g.phys_to_pfn(sparsemem::PhysAddr::new((1 + nomap) * GIB)),
        )
        .expect("a range");
        let valid = walk_valid::<M, KernelWalk>(&model, range);
        for walker in [Walker::PerPfn, Walker::ForEachValidPfn] {
            let m = self.plan.measure(|| {
                std::hint::black_box(match walker {
                    Walker::PerPfn => reserve_bootmem_walk::<M, PerPfnWalk>(&model, range),
                    _ => reserve_bootmem_walk::<M, KernelWalk>(&model, range),
                });
                range.nr_pages()
            });
            rows.push(row(
                Case::ReserveBootmem(walker),
                self.kind,
                &layout,
                range.nr_pages(),
                range.nr_pages(),
                valid,
                m,
            ));
        }
        Ok(())
    }
}

impl ModelVisitor for ReproVisitor {
    type Output = Vec<WalkRow>;

    fn visit<M: Buildable>(
        self,
        _: &Layout,
        o: VmemmapOptions,
    ) -> Result<Vec<WalkRow>, buddy::AllocError> {
        let mut rows = Vec::new();
        self.compaction::<M>(o, &mut rows)?;
        self.memmap_init::<M>(o, &mut rows)?;
        self.reserve_bootmem::<M>(o, &mut rows)?;
        Ok(rows)
    }
}
