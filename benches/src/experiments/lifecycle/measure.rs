//! The measuring half of `bench memmap-lifecycle`: each part builds the
//! allocators it needs on the run's layout (one at a time where it can, as
//! a 32 GiB layout's memmap is half a GiB of real memory), times the
//! library's own calls, and drops them.

use buddy::{
    AllocError, Allocator, BuddyModel, Era, Gfp, Kernel, MemHotplugError, MemmapOnMemory,
    OnlineType, Options,
};
use sparsemem::{Layout, MemRange, NodeId, PAGE_STRUCT_SIZE, Pfn, RangeKind};
use vmemmap::VmemmapOptions;

use super::{
    BRANCH_FORMS, BranchForm, GrowResults, HotAddRefused, HotAddResults, InitResults,
    LifecycleResults, MemmapIn,
};
use crate::models::{Buildable, ModelVisitor, build_allocator};
use crate::timing::{Measurement, Plan, next_set, tsc_hz};
use crate::workloads::{pcp_pairs, read_flags, timed_allocs, xorshift};

/// Thread counts deferred init is timed at (this machine class has two
/// CPUs; beyond that the table projects).
pub const INIT_THREADS: [usize; 2] = [1, 2];

/// Memory blocks per hot-add: 2 GiB of 128 MiB blocks, the 2019 cover
/// letter's add (5.13 to 6.6 took one block per add with
/// memmap_on_memory, so one there).
fn blocks_per_add(era: Era) -> u64 {
    if era.since(5, 13) && !era.since(6, 8) {
        1
    } else {
        16
    }
}

/// Runs every part with the model type the CLI chose.
pub(super) struct Visitor {
    /// Trials and scale.
    pub plan: Plan,
    /// The run's allocator options (its era).
    pub options: Options,
}

impl ModelVisitor for Visitor {
    type Output = LifecycleResults;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<LifecycleResults, AllocError> {
        let (plan, base) = (self.plan, self.options);
        let deferred = Options {
            deferred_init: true,
            ..base
        };
        let init = measure_init::<M>(layout, options, deferred, plan)?;
        let grow = measure_grow::<M>(layout, options, deferred, plan)?;
        let branch = measure_branch::<M>(layout, options, base, plan)?;
        let hot_add = measure_hot_add::<M>(layout, options, base, plan);
        Ok(LifecycleResults {
            init,
            grow,
            branch,
            hot_add,
        })
    }
}

/// `deferred_init_memmap` on each of [`INIT_THREADS`], a fresh deferred
/// build per trial, the thread counts' trials interleaved.
fn measure_init<M: Buildable>(
    layout: &Layout,
    options: VmemmapOptions,
    deferred: Options,
    plan: Plan,
) -> Result<InitResults, AllocError> {
    let mut ns = vec![Vec::new(); INIT_THREADS.len()];
    let mut pages = 0;
    for trial in 0..=plan.trials.max(1) {
        for (i, &threads) in INIT_THREADS.iter().enumerate() {
            let alloc = build_allocator::<M, Kernel>(layout, options, deferred)?;
            let t0 = std::time::Instant::now();
            pages = alloc.deferred_init_memmap(threads);
            let dt = t0.elapsed().as_nanos() as f64;
            // The first round warms up (page cache, allocator of the host).
            if trial > 0 {
                ns[i].push(dt / pages.max(1) as f64);
            }
        }
    }
    let set = next_set();
    Ok(InitResults {
        pages,
        memmap_bytes: pages * PAGE_STRUCT_SIZE,
        by_threads: INIT_THREADS
            .iter()
            .zip(ns)
            .map(|(&t, ns)| (t, Measurement::from_ns(ns).in_set(set)))
            .collect(),
    })
}

/// Order-0 allocations through one CPU's lists on a deferred build until
/// the init is complete, each timed; the ones that grew the zone
/// (`deferred_grow_zone` on the watermark miss) apart from the rest.
fn measure_grow<M: Buildable>(
    layout: &Layout,
    options: VmemmapOptions,
    deferred: Options,
    plan: Plan,
) -> Result<GrowResults, AllocError> {
    let (mut grew, mut plain) = (Vec::new(), Vec::new());
    let ns_per_tick = 1e9 / tsc_hz() as f64;
    for _ in 0..plan.trials.max(1) {
        let alloc = build_allocator::<M, Kernel>(layout, options, deferred)?;
        let mut cpu = alloc.cpu_on(layout.first_node())?;
        let timed = timed_allocs(&mut cpu, Gfp::HIGHUSER_MOVABLE, || {
            alloc.deferred_pages_pending()
        });
        grew.extend(timed.grew.iter().map(|&t| t as f64 * ns_per_tick));
        plain.extend(timed.plain.iter().map(|&t| t as f64 * ns_per_tick));
    }
    Ok(GrowResults {
        grew: (!grew.is_empty()).then(|| Measurement::from_ns(grew)),
        plain: (!plain.is_empty()).then(|| Measurement::from_ns(plain)),
        section_pages: layout.geometry().pages_per_section(),
    })
}

/// The per-CPU alloc+free pair on a build without deferred init, on a
/// deferred build after `page_alloc_init_late` (the key off: the grow's
/// form is gone), and on one whose init is done with the key still on,
/// trials interleaved.
fn measure_branch<M: Buildable>(
    layout: &Layout,
    options: VmemmapOptions,
    base: Options,
    plan: Plan,
) -> Result<Vec<(BranchForm, Measurement)>, AllocError> {
    let build = |form: BranchForm| -> Result<Allocator<M, Kernel>, AllocError> {
        let deferred_init = form != BranchForm::NeverDeferred;
        let mut alloc = build_allocator::<M, Kernel>(
            layout,
            options,
            Options {
                deferred_init,
                ..base
            },
        )?;
        match form {
            BranchForm::NeverDeferred => {}
            BranchForm::KeyOff => alloc.page_alloc_init_late(INIT_THREADS[1]),
            BranchForm::KeyOn => {
                alloc.deferred_init_memmap(INIT_THREADS[1]);
            }
        }
        Ok(alloc)
    };
    let allocs = BRANCH_FORMS
        .iter()
        .map(|&f| build(f))
        .collect::<Result<Vec<_>, _>>()?;
    let node = layout.first_node();
    let mut cpus = allocs
        .iter()
        .map(|a| a.cpu_on(node))
        .collect::<Result<Vec<_>, _>>()?;
    let n = plan.iters(2_000_000, 20_000);
    let measured = plan.measure_interleaved(&mut cpus, |cpu| {
        std::hint::black_box(pcp_pairs(cpu, n));
        n
    });
    Ok(BRANCH_FORMS.into_iter().zip(measured).collect())
}

/// The run's layout with room for two hot-adds after its last range, on
/// its first node: `[a, a + add)` and `[b, b + add)`.
fn with_hotplug_room(layout: &Layout, add_bytes: u64) -> Result<(Layout, [Pfn; 2]), HotAddRefused> {
    let g = *layout.geometry();
    let block_bytes = g.memory_block_pages() * g.page_size();
    let end = layout
        .ranges()
        .iter()
        .map(|r| r.end.get())
        .max()
        .unwrap_or(0);
    let a = end.next_multiple_of(block_bytes);
    let node = layout.first_node().get();
    let mut ranges = layout.ranges().to_vec();
    ranges.push(MemRange::new(
        a,
        a + 2 * add_bytes,
        RangeKind::Hotplug,
        node,
    ));
    let room = Layout::new(g, ranges, layout.source()).map_err(HotAddRefused::NoRoom)?;
    let first = g.phys_to_pfn(sparsemem::PhysAddr::new(a));
    Ok((room, [first, first + add_bytes / g.page_size()]))
}

/// memmap_on_memory against a memmap in boot memory: the hot-add and
/// online of 2 GiB, the pfns each block loses and its free blocks by
/// order, and random-pfn `pfn_to_page` + flags reads on each.
fn measure_hot_add<M: Buildable>(
    layout: &Layout,
    options: VmemmapOptions,
    base: Options,
    plan: Plan,
) -> Result<HotAddResults, HotAddRefused> {
    let g = *layout.geometry();
    let per = g.memory_block_pages();
    let nr = per * blocks_per_add(base.era);
    let (room, starts) = with_hotplug_room(layout, nr * g.page_size())?;
    let node = layout.first_node();
    let (mut alloc, on_frames) = build_for_hot_add::<M>(&room, options, base, starts, nr)?;
    let mut ns = [Vec::new(), Vec::new()];
    for trial in 0..=plan.trials.max(1) {
        for (i, place) in MemmapIn::ALL.into_iter().enumerate() {
            let t0 = std::time::Instant::now();
            add(&mut alloc, place, starts[i], nr, node)?;
            alloc.online_pages(starts[i], nr, OnlineType::Online)?;
            let dt = t0.elapsed().as_nanos() as f64;
            alloc.offline_pages(starts[i], nr)?;
            alloc.hot_remove(starts[i], nr)?;
            if trial > 0 {
                ns[i].push(dt / blocks_per_add(base.era) as f64);
            }
        }
    }
    let mut lost = [0; 2];
    let mut by_order = [Vec::new(), Vec::new()];
    for (i, place) in MemmapIn::ALL.into_iter().enumerate() {
        lost[i] = add(&mut alloc, place, starts[i], nr, node)?;
        let zid = alloc.online_pages(starts[i], nr, OnlineType::Online)?;
        by_order[i] = free_by_order(&alloc, zid, starts[i], per);
    }
    let reads = measure_reads(&alloc, starts, nr, plan);
    let set = next_set();
    Ok(HotAddResults {
        memmap_on_frames: on_frames,
        blocks: blocks_per_add(base.era),
        block_pages: per,
        add: MemmapIn::ALL
            .into_iter()
            .zip(ns)
            .map(|(p, ns)| (p, Measurement::from_ns(ns).in_set(set)))
            .collect(),
        lost_per_block: lost,
        free_by_order: by_order,
        reads,
    })
}

/// The allocator for the hot-add part, its room (`2 * nr` pages from
/// `starts[0]`) removed: with real frames, so a block's memmap really
/// lives in its own first frames, where the model can map it there
/// (`true`); else without (the userfaultfd detectors, whose holes are not
/// `PROT_NONE`), and the in-block memmap is only the allocator's record.
fn build_for_hot_add<M: Buildable>(
    room: &Layout,
    options: VmemmapOptions,
    base: Options,
    starts: [Pfn; 2],
    nr: u64,
) -> Result<(Allocator<M, Kernel>, bool), HotAddRefused> {
    let framed = Options {
        frames: true,
        ..base
    };
    let node = room.first_node();
    let per = room.geometry().memory_block_pages();
    let mut alloc = build_allocator::<M, Kernel>(room, options, framed)?;
    alloc.hot_remove(starts[0], 2 * nr)?;
    match alloc.hot_add_memmap_on_memory(starts[0], per, node, MemmapOnMemory::On) {
        Ok(_) => {
            alloc.hot_remove(starts[0], per)?;
            Ok((alloc, true))
        }
        Err(MemHotplugError::Frames(_)) => {
            drop(alloc);
            let mut alloc = build_allocator::<M, Kernel>(room, options, base)?;
            alloc.hot_remove(starts[0], 2 * nr)?;
            Ok((alloc, false))
        }
        Err(e) => Err(e.into()),
    }
}

/// One hot-add of `nr` pages at `start`, its memmap where `place` says;
/// the pfns each block loses to it.
fn add<M: BuddyModel>(
    alloc: &mut Allocator<M, Kernel>,
    place: MemmapIn,
    start: Pfn,
    nr: u64,
    node: NodeId,
) -> Result<u64, MemHotplugError> {
    match place {
        MemmapIn::TheBlock => alloc.hot_add_memmap_on_memory(start, nr, node, MemmapOnMemory::On),
        MemmapIn::BootMemory => alloc.hot_add(start, nr, node).map(|()| 0),
    }
}

/// The free blocks of zone `zid` inside the memory block at `start`, by
/// order (`NR_PAGE_ORDERS` counts).
fn free_by_order<M: BuddyModel>(
    alloc: &Allocator<M, Kernel>,
    zid: buddy::ZoneId,
    start: Pfn,
    per: u64,
) -> Vec<u64> {
    let orders = usize::from(alloc.model().geometry().max_order().get()) + 1;
    let mut counts = vec![0; orders];
    for (pfn, order) in alloc.free_blocks(zid) {
        if start <= pfn && pfn < start + per {
            counts[usize::from(order.get())] += 1;
        }
    }
    counts
}

/// Random-pfn `pfn_to_page` + flags reads over each hot-added range,
/// trials interleaved.
fn measure_reads<M: BuddyModel>(
    alloc: &Allocator<M, Kernel>,
    starts: [Pfn; 2],
    nr: u64,
    plan: Plan,
) -> Vec<(MemmapIn, Measurement)> {
    let n = plan.iters(1 << 20, 1 << 14) as usize;
    let mut seed = 0x2019_0725u64;
    let mut pfns: Vec<Vec<Pfn>> = starts
        .iter()
        .map(|&s| (0..n).map(|_| s + xorshift(&mut seed) % nr).collect())
        .collect();
    let rounds = 4;
    let model = alloc.model();
    let measured = plan.measure_interleaved(&mut pfns, |pfns| {
        for _ in 0..rounds {
            std::hint::black_box(read_flags(model, pfns));
        }
        rounds * pfns.len() as u64
    });
    MemmapIn::ALL.into_iter().zip(measured).collect()
}
