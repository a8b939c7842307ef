//! Building the allocator, as boot does (`free_area_init`,
//! `memblock_free_all`, `build_all_zonelists`, `init_per_zone_wmark_min`).
//!
//! Every RAM range becomes part of its node's DMA, DMA32 or Normal zone by
//! physical address (the geometry's [`ZoneLimits`]); each page gets its
//! zone and node ids and loses `PG_reserved`, and the ranges are freed in
//! the largest aligned blocks, merging as they go (`memblock_free_all`). Hot-added
//! memory (`hotplug` ranges) starts offline, waiting for
//! [`Allocator::online_pages`]; device memory never enters the buddy.
//! Reserved pages and holes inside a zone's span are never on a free list,
//! so they are never handed out. Whenever the managed memory changes (boot,
//! online, offline) every zone's watermarks, `lowmem_reserve` and per-CPU
//! sizes are worked out again.

use std::collections::BTreeMap;
use std::marker::PhantomData;

use sparsemem::{Layout, NodeId, Pfn, RangeKind, ZoneLimits};

use crate::alloc::{Allocator, Options};
use crate::era::{NotInEra, Path};
use crate::error::{InitError, ModelMismatch};
use crate::frames::Frames;
use crate::memmap_init::{Deferred, DeferredZone, poison_deferred};
use crate::movable::{MovableCore, zone_movable_pfns};
use crate::node::build_nodes;
use crate::types::{BuddyModel, MAX_ZONES, ZoneId, ZoneType};
use crate::variant::Variant;
use crate::watermark::{
    MIN_PERCPU_PAGELIST_HIGH_FRACTION, lowmem_reserve_with, setup_per_zone_wmarks_with,
    stat_threshold,
};
use crate::zone::{FpiFlags, Zone};

/// Zone type of boot RAM at physical address `addr` (`zone_sizes_init`'s
/// limits for the geometry).
fn ram_zone(limits: ZoneLimits, addr: u64) -> ZoneType {
    if limits.dma.is_some_and(|end| addr < end) {
        ZoneType::Dma
    } else if limits.dma32.is_some_and(|end| addr < end) {
        ZoneType::Dma32
    } else {
        ZoneType::Normal
    }
}

/// `(node, type) -> pfn ranges` of a layout's boot memory, each node's
/// top in ZONE_MOVABLE when `movable` asks for it.
fn zone_parts(
    layout: &Layout,
    movable: MovableCore,
) -> BTreeMap<(NodeId, ZoneType), Vec<(Pfn, Pfn)>> {
    let parts = kernel_zone_parts(layout);
    match movable.is_set() {
        true => split_movable(parts, layout, movable),
        false => parts,
    }
}

/// ZONE_MOVABLE from `kernelcore=` or `movablecore=`: on a node whose
/// movable zone starts at pfn `p`, every zone's memory from `p` on is
/// ZONE_MOVABLE's (`adjust_zone_range_for_zone_movable`).
fn split_movable(
    parts: BTreeMap<(NodeId, ZoneType), Vec<(Pfn, Pfn)>>,
    layout: &Layout,
    movable: MovableCore,
) -> BTreeMap<(NodeId, ZoneType), Vec<(Pfn, Pfn)>> {
    // `find_usable_zone_for_movable`: the highest zone type with memory.
    let Some(movable_zone) = parts.keys().map(|k| k.1).max() else {
        return parts;
    };
    // Its lowest possible pfn (`arch_zone_lowest_possible_pfn`): where the
    // zones below it end, or the lowest RAM pfn for the lowest zone.
    let g = layout.geometry();
    let limits = g.zone_limits();
    let below = match movable_zone {
        ZoneType::Dma => None,
        ZoneType::Dma32 => limits.dma,
        ZoneType::Normal | ZoneType::Movable => limits.dma32.or(limits.dma),
    };
    let lowest_ram = layout.ram_ranges().map(|(_, a, _)| a).min();
    let zone_start = below.map_or(lowest_ram.unwrap_or(Pfn::new(0)), |b| {
        Pfn::new(b >> g.page_shift())
    });
    let mut ram: BTreeMap<NodeId, Vec<(Pfn, Pfn)>> = BTreeMap::new();
    for (r, first, end) in layout.ram_ranges() {
        ram.entry(Layout::node_id(r))
            .or_default()
            .push((first, end));
    }
    for ranges in ram.values_mut() {
        ranges.sort_unstable();
    }
    let starts = zone_movable_pfns(movable, &ram, zone_start, g);
    let mut out: BTreeMap<(NodeId, ZoneType), Vec<(Pfn, Pfn)>> = BTreeMap::new();
    for ((node, kind), ranges) in parts {
        for (a, b) in ranges {
            let (a, b) = (a.get(), b.get());
            match starts.get(&node).map(|p| p.get()) {
                Some(p) if a >= p => push_part(&mut out, node, ZoneType::Movable, a, b),
                Some(p) if b > p => {
                    push_part(&mut out, node, kind, a, p);
                    push_part(&mut out, node, ZoneType::Movable, p, b);
                }
                _ => push_part(&mut out, node, kind, a, b),
            }
        }
    }
    for ranges in out.values_mut() {
        ranges.sort_unstable();
    }
    out
}

fn push_part(
    out: &mut BTreeMap<(NodeId, ZoneType), Vec<(Pfn, Pfn)>>,
    node: NodeId,
    kind: ZoneType,
    a: u64,
    b: u64,
) {
    out.entry((node, kind))
        .or_default()
        .push((Pfn::new(a), Pfn::new(b)));
}

/// `(node, type) -> pfn ranges` of a layout's boot memory by the
/// geometry's zone limits alone.
fn kernel_zone_parts(layout: &Layout) -> BTreeMap<(NodeId, ZoneType), Vec<(Pfn, Pfn)>> {
    let g = layout.geometry();
    let limits = g.zone_limits();
    let bounds: Vec<u64> = [limits.dma, limits.dma32]
        .into_iter()
        .flatten()
        .map(|b| b >> g.page_shift())
        .collect();
    let mut parts: BTreeMap<(NodeId, ZoneType), Vec<(Pfn, Pfn)>> = Default::default();
    for (r, first, end) in layout.ram_ranges() {
        let mut cuts = vec![first.get()];
        cuts.extend(
            bounds
                .iter()
                .copied()
                .filter(|&b| b > first.get() && b < end.get()),
        );
        cuts.push(end.get());
        cuts.dedup();
        for w in cuts.windows(2) {
            let kind = ram_zone(limits, w[0] << g.page_shift());
            parts
                .entry((Layout::node_id(r), kind))
                .or_default()
                .push((Pfn::new(w[0]), Pfn::new(w[1])));
        }
    }
    parts
}

/// `percpu_pagelist_high_fraction_sysctl_handler`'s check: 0 or at least
/// `MIN_PERCPU_PAGELIST_HIGH_FRACTION` (8), and only in an era that has the
/// sysctl (5.14 on; 2.6's `percpu_pagelist_fraction` set `high` and
/// `batch` by another rule, which pfnlab does not model);
/// `kernelcore=`/`movablecore=` only in an era that takes them; and
/// `vm.defrag_mode` only from 6.15.
fn check_options(options: &Options) -> Result<(), InitError> {
    let fraction = options.percpu_pagelist_high_fraction;
    options
        .movable_core
        .check_era(options.era)
        .map_err(InitError::EraMismatch)?;
    if options.defrag_mode && !options.era.has_defrag_mode() {
        return Err(InitError::EraMismatch(NotInEra::DefragMode {
            era: options.era,
        }));
    }
    if fraction == 0 {
        return Ok(());
    }
    if !options.era.pcp_high_from_watermark() {
        return Err(InitError::EraMismatch(NotInEra::HighFraction {
            era: options.era,
        }));
    }
    if fraction < MIN_PERCPU_PAGELIST_HIGH_FRACTION {
        return Err(InitError::HighFraction { fraction });
    }
    Ok(())
}

/// Whether `model` could have been built from `layout`: the same geometry,
/// and every pfn of the layout's memory valid. Validity changes at most per
/// subsection, so one probe at each end of every subsection-sized piece
/// decides it.
fn check_model<M: BuddyModel>(model: &M, layout: &Layout) -> Result<(), InitError> {
    if model.geometry() != layout.geometry() {
        return Err(InitError::ModelMismatch(ModelMismatch::Geometry {
            model: Box::new(*model.geometry()),
            layout: Box::new(*layout.geometry()),
        }));
    }
    let per = layout.geometry().pages_per_subsection();
    for (_, first, end) in layout.memory_ranges() {
        let mut pfn = first.get();
        while pfn < end.get() {
            let last = (pfn | (per - 1)).min(end.get() - 1);
            if let Some(bad) = [pfn, last]
                .into_iter()
                .find(|&p| !model.pfn_valid(Pfn::new(p)))
            {
                return Err(InitError::ModelMismatch(ModelMismatch::NotValid {
                    pfn: Pfn::new(bad),
                    model: model.name(),
                }));
            }
            pfn = last + 1;
        }
    }
    Ok(())
}

/// With deferred init (refused before 4.2), the deferred state of each
/// node's highest zone (the last of the node's parts, by zone type) that
/// is large enough to defer, its memory poisoned in `model`; zone ids are
/// the parts' positions.
fn deferred_zones<M: BuddyModel>(
    model: &mut M,
    parts: &BTreeMap<(NodeId, ZoneType), Vec<(Pfn, Pfn)>>,
    layout: &Layout,
    options: &Options,
) -> Result<Vec<DeferredZone>, InitError> {
    if !options.deferred_init {
        return Ok(Vec::new());
    }
    crate::deferred::check_era(options.era)?;
    let per_section = layout.geometry().pages_per_section();
    let keys: Vec<&(NodeId, ZoneType)> = parts.keys().collect();
    let zones: Vec<DeferredZone> = parts
        .iter()
        .enumerate()
        .filter(|(i, ((node, _), _))| keys.get(i + 1).is_none_or(|next| next.0 != *node))
        .filter_map(|(i, (key, ranges))| {
            let mut memory = ranges.clone();
            memory.sort();
            let mut d = DeferredZone::new(ZoneId::new(i as u8), key.0, &memory, per_section)?;
            let others: Vec<(Pfn, Pfn)> = parts
                .iter()
                .filter(|(k, _)| *k != key)
                .flat_map(|(_, r)| r.iter().copied())
                .collect();
            d.keep_unshared(&others, layout.geometry().max_order_nr_pages());
            (!d.memory.is_empty()).then_some(d)
        })
        .collect();
    poison_deferred(model, &zones);
    Ok(zones)
}

impl<M: BuddyModel, V: Variant> Allocator<M, V> {
    /// Builds nodes and zones for `layout` over `model` and frees all
    /// memory into them. The model must have been built from this layout:
    /// the same geometry and every pfn of its memory valid, or
    /// [`InitError::ModelMismatch`] says what differs.
    ///
    /// The variant must have existed in the options' era
    /// ([`Era::check_variant`](crate::Era::check_variant)), or the answer is
    /// [`InitError::EraMismatch`].
    pub fn new(model: M, layout: &Layout, options: Options) -> Result<Self, InitError> {
        options
            .era
            .check_variant::<V>()
            .map_err(InitError::EraMismatch)?;
        check_options(&options)?;
        check_model(&model, layout)?;
        let mut model = model;
        let parts = zone_parts(layout, options.movable_core);
        let deferred = deferred_zones(&mut model, &parts, layout, &options)?;
        if parts.len() > MAX_ZONES {
            return Err(InitError::TooManyZones);
        }
        let mut path = Path::new(options.era, options.mechanisms);
        path.zone_lock = options.zone_lock;
        // `build_all_zonelists`: with less memory than one pageblock per
        // migratetype, grouping by mobility is pointless and turned off
        // (`page_group_by_mobility_disabled`).
        let g = layout.geometry();
        let ram: u64 = layout.ram_ranges().map(|(_, a, b)| b.get() - a.get()).sum();
        if ram < g.pageblock_nr_pages() * sparsemem::MIGRATE_TYPES as u64 {
            path.mobility = false;
        }
        let mut alloc = Allocator {
            model,
            zones: Vec::new(),
            nodes: Vec::new(),
            options,
            path,
            pcp_form: Default::default(),
            frames: if options.frames {
                Some(Frames::new(layout)?)
            } else {
                None
            },
            offline: Default::default(),
            altmaps: Default::default(),
            deferred: Deferred::new(Vec::new()),
            memory_chain: Default::default(),
            node_cpus: Vec::new(),
            _variant: PhantomData,
        };
        let max_order = layout.geometry().max_order();
        for (i, ((node, kind), ranges)) in parts.iter().enumerate() {
            let start = ranges.iter().map(|r| r.0).min().unwrap_or_default();
            let end = ranges.iter().map(|r| r.1).max().unwrap_or_default();
            let mut zone = Zone::new(
                *kind,
                *node,
                ZoneId::new(i as u8),
                [start, end],
                max_order,
                alloc.path,
            );
            let boot = match deferred.iter().find(|d| d.zone.index() == i) {
                Some(d) => d.boot_part(ranges),
                None => ranges.clone(),
            };
            for (first, end) in boot {
                zone.give_range(&alloc.model, [first, end], FpiFlags::NONE)?;
            }
            alloc.zones.push(zone);
        }
        alloc.deferred = Deferred::new(deferred);
        alloc.update_pcp_form();
        alloc.record_offline_blocks(layout);
        alloc.boot_memmap_on_memory(layout)?;
        // `zone->contiguous` waits for `page_alloc_init_late` when part of
        // the memmap is not written yet.
        if !alloc.deferred_pages_enabled() {
            for zone in &mut alloc.zones {
                crate::walk::set_zone_contiguous(&alloc.model, zone, None);
            }
        }
        alloc.rebuild_nodes();
        alloc.setup_watermarks_and_pcp();
        Ok(alloc)
    }

    /// The layout's hot-pluggable memory blocks, recorded as offline with
    /// their nodes: present for a later hot add, not yet in any zone.
    fn record_offline_blocks(&mut self, layout: &Layout) {
        let block = layout.geometry().memory_block_pages();
        for (r, first, end) in layout.ranges_of(RangeKind::Hotplug) {
            for b in first.get() / block..end.get() / block {
                self.offline.insert(b, Layout::node_id(r));
            }
        }
    }

    /// `init_per_zone_wmark_min` and `zone_pcp_update` after the managed
    /// memory changed (boot, online, offline): every zone's watermarks and
    /// `lowmem_reserve`, its per-CPU `batch`, `high` and stat threshold for
    /// the era, and `NR_FREE_PAGES` set from the free lists (no per-CPU
    /// handle exists while `&mut self` does, so nothing is pending).
    pub(crate) fn setup_watermarks_and_pcp(&mut self) {
        let sizes: Vec<(ZoneType, u64)> = self
            .zones
            .iter()
            .map(|z| (z.kind, z.managed_pages()))
            .collect();
        let g = self.model.geometry();
        let marks = setup_per_zone_wmarks_with(
            &sizes,
            g.page_size(),
            g.pageblock_nr_pages(),
            &self.options.sysctls,
            self.options.era,
        );
        let cpus = self.nr_cpus();
        let nodes = self.nodes.len().max(1) as u32;
        let page_shift = self.model.geometry().page_shift();
        let promo = self.options.era.has_wmark_promo();
        for (zone, marks) in self.zones.iter_mut().zip(marks) {
            zone.watermarks = marks.in_era(promo);
            let split = split_cpus(&self.node_cpus, zone.node.get(), cpus, nodes);
            zone.set_pcp_sizes(
                self.options.era,
                self.options.pcp_batch,
                self.options.percpu_pagelist_high_fraction,
                split,
            );
            zone.stat_threshold = stat_threshold(zone.managed_pages(), page_shift, cpus);
            let free = zone.free_area.get_mut().nr_free_pages();
            *zone.vm_free.get_mut() = free as i64;
        }
        for node in &self.nodes {
            let own: Vec<(ZoneType, u64)> = node
                .zones
                .iter()
                .map(|z| {
                    (
                        self.zones[z.index()].kind,
                        self.zones[z.index()].managed_pages(),
                    )
                })
                .collect();
            let reserves = lowmem_reserve_with(&own, &self.options.sysctls.lowmem_reserve_ratio);
            for (z, reserve) in node.zones.iter().zip(reserves) {
                self.zones[z.index()].lowmem_reserve = reserve;
            }
        }
    }

    /// Gives the CPUs of each node, by node id, as the kernel's
    /// `cpumask_of_node` counts them (a node's
    /// `/sys/devices/system/node/nodeN/cpulist`), and sizes every zone's
    /// per-CPU `high` again (`zone_pcp_update`). `zone_highsize` splits a
    /// node's share over these; a node without CPUs, or beyond the list,
    /// splits over every online CPU ([`Options::cpus`]). Under fake NUMA
    /// every node lists the same CPUs, so the counts may add up to more
    /// than the online CPUs. An empty list goes back to the online CPUs
    /// spread evenly over the nodes.
    pub fn set_node_cpus(&mut self, cpus: &[u32]) {
        self.node_cpus = cpus.to_vec();
        self.setup_watermarks_and_pcp();
    }

    /// The CPUs of each node as [`Allocator::set_node_cpus`] gave them
    /// (empty when it has not).
    pub fn node_cpus(&self) -> &[u32] {
        &self.node_cpus
    }

    /// The CPUs the machine has ([`Options::cpus`], or this machine's).
    pub fn nr_cpus(&self) -> u32 {
        self.options
            .cpus
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u32))
    }

    /// `build_all_zonelists`: every node's zonelists, from the zones.
    pub(crate) fn rebuild_nodes(&mut self) {
        let triples: Vec<(ZoneId, NodeId, ZoneType)> =
            self.zones.iter().map(|z| (z.id, z.node, z.kind)).collect();
        self.nodes = build_nodes(&triples);
    }
}

/// `zone_highsize`'s `nr_split_cpus` for a zone of `node`: the node's CPUs
/// as given (`cpumask_weight(cpumask_of_node())`), all `online` when it
/// has none; without a list, the online CPUs spread over `nodes`.
fn split_cpus(node_cpus: &[u32], node: u16, online: u32, nodes: u32) -> u32 {
    if node_cpus.is_empty() {
        return online.div_ceil(nodes).max(1);
    }
    match node_cpus.get(usize::from(node)) {
        Some(&n) if n > 0 => n,
        _ => online.max(1),
    }
}
