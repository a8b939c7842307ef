//! Memory hotplug with the allocator: add, online, offline, remove, and
//! device memory.
//!
//! As in the kernel, ordinary memory comes in whole memory blocks (one
//! section here, [`Geometry::memory_block_pages`](sparsemem::Geometry)):
//! `hot_add` (`add_memory`) only creates memmap and leaves the blocks
//! offline; `online_pages` picks the zone by the online type (the kernel
//! zone for `online` and `online_kernel`, ZONE_MOVABLE for
//! `online_movable`), initialises the memmap for that zone
//! (`memmap_init_range`) and frees the pages to the *tail* of the free
//! lists (`FPI_TO_TAIL`); `offline_pages` takes them back only when every
//! page of the range is free — pfnlab has no page migration, so memory in
//! use makes it say how many pages and change nothing — and, as since
//! Linux 5.10, refuses blocks with holes; it shrinks the zone's span at its
//! edges (`shrink_zone_span`); `hot_remove` then retires the memmap.
//! Device memory (`add_device`, as `memremap_pages`) comes in 2 MiB
//! subsections on VMEMMAP models only, and never enters the buddy. All of
//! these take `&mut self`, so no per-CPU handle can hold pages meanwhile,
//! and all refuse while deferred struct page init is pending
//! ([`MemHotplugError::DeferredInitPending`]): the kernel finishes it in
//! `page_alloc_init_late` before the initcalls that can hot-add memory
//! run, so no hotplug ever meets the window.

use std::fmt;

use sparsemem::{
    BuddyPage, Granule, HotplugError, Layout, NodeId, PageFlag, PageLayout, Pfn, RangeKind,
};

use crate::alloc::Allocator;
use crate::error::{MemHotplugError, RangeError};
use crate::frames::FramesError;
use crate::memmap_init::{MemmapInitForm, MemmapInitZone, memmap_init};
use crate::memmap_on_memory::{MemmapOnMemory, MemmapOnMemoryError, memmap_on_memory_pages};
use crate::memory_notify::{
    MemoryAction, MemoryNotifierFn, MemoryNotify, NotifierId, NotifyResult,
};
use crate::types::{BuddyModel, MAX_ZONES, ZoneId, ZoneType};
use crate::variant::Variant;
use crate::zone::{FpiFlags, Zone, check_blocks};

/// How a memory block is onlined: what is written to its sysfs `state`
/// (`mmop_type`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OnlineType {
    /// `online` (`MMOP_ONLINE`): the kernel zone, unless the range lies
    /// only in ZONE_MOVABLE's span (`default_zone_for_pfn`). The default,
    /// as for the kernel's `online` and auto-online.
    #[default]
    Online,
    /// `online_kernel` (`MMOP_ONLINE_KERNEL`): the kernel zone.
    OnlineKernel,
    /// `online_movable` (`MMOP_ONLINE_MOVABLE`): ZONE_MOVABLE.
    OnlineMovable,
}

impl OnlineType {
    /// Every online type, in the order of [`OnlineType::NAMES`].
    pub const ALL: [OnlineType; 3] = [
        OnlineType::Online,
        OnlineType::OnlineKernel,
        OnlineType::OnlineMovable,
    ];
    /// The sysfs spellings.
    pub const NAMES: [&'static str; 3] = ["online", "online_kernel", "online_movable"];

    /// The sysfs spelling.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// Parses a sysfs spelling.
    pub fn parse(s: &str) -> Result<OnlineType, UnknownOnlineType> {
        Self::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| UnknownOnlineType(s.to_owned()))
    }
}

/// A spelling that names no [`OnlineType`] (the text given).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownOnlineType(pub String);

impl std::fmt::Display for UnknownOnlineType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unknown online type `{}` (known: {})",
            self.0,
            OnlineType::NAMES.join(", ")
        )
    }
}

impl std::error::Error for UnknownOnlineType {}

impl fmt::Display for OnlineType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A model's refusal of an altmap, said as memmap_on_memory's.
fn altmap_refused(e: HotplugError) -> MemHotplugError {
    match e {
        HotplugError::NeedsVmemmap { model } => MemmapOnMemoryError::NeedsVmemmap { model }.into(),
        e => e.into(),
    }
}

impl<M: BuddyModel, V: Variant> Allocator<M, V> {
    /// Refuses a hotplug step in the deferred window (before
    /// [`Allocator::page_alloc_init_late`]).
    fn check_not_deferred(&self) -> Result<(), MemHotplugError> {
        if self.deferred_pages_enabled() {
            return Err(MemHotplugError::DeferredInitPending);
        }
        Ok(())
    }

    /// The memory blocks of a block-aligned range, as block numbers.
    fn blocks(&self, start: Pfn, nr_pages: u64) -> Result<std::ops::Range<u64>, MemHotplugError> {
        let g = self.model.geometry();
        let end = g.check_aligned_range(start, nr_pages, Granule::MemoryBlock)?;
        let per = g.memory_block_pages();
        Ok(start.get() / per..end.get() / per)
    }

    /// Why a block that is not offline cannot be onlined or removed.
    fn not_offline(&self, block: u64) -> MemHotplugError {
        let pfn = Pfn::new(block * self.model.geometry().memory_block_pages());
        if self
            .model
            .pfn_to_page(pfn)
            .is_some_and(|p| p.is_zone_device())
        {
            RangeError::DeviceMemory { pfn }.into()
        } else {
            MemHotplugError::NotOffline { pfn }
        }
    }

    /// `add_memory(node, start, size)`: hot-adds whole memory blocks for
    /// `node`; they stay offline until [`Allocator::online_pages`].
    pub fn hot_add(
        &mut self,
        start: Pfn,
        nr_pages: u64,
        node: NodeId,
    ) -> Result<(), MemHotplugError> {
        self.check_not_deferred()?;
        if let Some(frames) = &self.frames
            && !frames.covers(start, nr_pages)
        {
            return Err(FramesError::OutsideFrames { start, nr_pages }.into());
        }
        let blocks = self.blocks(start, nr_pages)?;
        self.model.hot_add(start, nr_pages)?;
        self.offline.extend(blocks.map(|b| (b, node)));
        Ok(())
    }

    /// The zone `online_type` puts `[start, end)` of `node` in
    /// (`zone_for_pfn_range`), as an index into the zones, or the type of
    /// zone to create.
    fn zone_for_pfn_range(
        &self,
        online_type: OnlineType,
        node: NodeId,
        [start, end]: [Pfn; 2],
    ) -> Result<usize, ZoneType> {
        let find = |kind: ZoneType| {
            self.zones
                .iter()
                .position(|z| z.node == node && z.kind == kind)
                .ok_or(kind)
        };
        let intersects = |z: &Zone<V, M::Page>| z.start < end && start < z.end;
        // `default_kernel_zone_for_pfn`: the first kernel zone of the node
        // whose span the range touches, else ZONE_NORMAL.
        let kernel = || {
            self.zones
                .iter()
                .position(|z| z.node == node && z.kind <= ZoneType::Normal && intersects(z))
                .map_or_else(|| find(ZoneType::Normal), Ok)
        };
        match online_type {
            OnlineType::OnlineMovable => find(ZoneType::Movable),
            OnlineType::OnlineKernel => kernel(),
            OnlineType::Online => {
                let movable = find(ZoneType::Movable).ok();
                let in_movable = movable.is_some_and(|m| intersects(&self.zones[m]));
                let in_kernel = kernel().is_ok_and(|k| intersects(&self.zones[k]));
                match (in_kernel, in_movable, movable) {
                    (false, true, Some(m)) => Ok(m),
                    _ => kernel(),
                }
            }
        }
    }

    /// `add_memory` with `MHP_MEMMAP_ON_MEMORY` (6.8's form: each memory
    /// block its own `vmem_altmap`): hot-adds whole blocks as
    /// [`Allocator::hot_add`] does, each block's memmap carved from its own
    /// first pfns. Returns the pfns each block loses to its memmap; refused
    /// with the gate's rule ([`memmap_on_memory_pages`]), or by a model
    /// without a vmemmap. At online those pfns join the zone as reserved,
    /// self-hosted pages (`mhp_init_memmap_on_memory`), so its pageblocks
    /// belong to the zone and `zone->contiguous` survives, but they never
    /// reach the buddy; they go with the block at hot-remove.
    pub fn hot_add_memmap_on_memory(
        &mut self,
        start: Pfn,
        nr_pages: u64,
        node: NodeId,
        mode: MemmapOnMemory,
    ) -> Result<u64, MemHotplugError> {
        self.check_not_deferred()?;
        let g = *self.model.geometry();
        let blocks = self.blocks(start, nr_pages)?;
        let vmemmap_pages = memmap_on_memory_pages(&g, self.options.era, mode, nr_pages)?;
        if let Some(frames) = &self.frames
            && !frames.covers(start, nr_pages)
        {
            return Err(FramesError::OutsideFrames { start, nr_pages }.into());
        }
        self.add_with_altmaps(start, nr_pages, vmemmap_pages)?;
        for b in blocks {
            self.offline.insert(b, node);
            self.altmaps.insert(b, vmemmap_pages);
        }
        Ok(vmemmap_pages)
    }

    /// The model's add of whole blocks, each with its memmap on its first
    /// `vmemmap_pages` pfns: with real frames, block by block onto those
    /// frames (shared as a file), so the memmap is stored in the hot-added
    /// memory as the altmap puts it; without, the model's altmap add. On
    /// error nothing of the range is added.
    fn add_with_altmaps(
        &mut self,
        start: Pfn,
        nr_pages: u64,
        vmemmap_pages: u64,
    ) -> Result<(), MemHotplugError> {
        let Some(frames) = self.frames.as_mut() else {
            return self
                .model
                .hot_add_memmap_on_memory(start, nr_pages, vmemmap_pages)
                .map_err(altmap_refused);
        };
        let per = self.model.geometry().memory_block_pages();
        for first in (start.get()..start.get() + nr_pages).step_by(per as usize) {
            let first = Pfn::new(first);
            if let Err(e) = frames.host_memmap(&mut self.model, first, per, vmemmap_pages) {
                // The blocks added so far go again, their frames private.
                let done = first.get() - start.get();
                if done > 0 {
                    self.model.hot_remove(start, done)?;
                }
                for b in (start.get()..first.get()).step_by(per as usize) {
                    frames.unshare(Pfn::new(b), vmemmap_pages)?;
                }
                // The model's refusals of the add itself read as without
                // frames; what only frames need stays a frames error.
                return Err(match e {
                    FramesError::Memmap(
                        e @ (HotplugError::Unsupported(_) | HotplugError::Memmap(_)),
                    ) => FramesError::Memmap(e).into(),
                    FramesError::Memmap(e) => altmap_refused(e),
                    e => e.into(),
                });
            }
        }
        Ok(())
    }

    /// After a hot-remove, gives the shared frames of its memmap_on_memory
    /// blocks back (private anonymous frames again).
    fn unshare_frames(&mut self, start: Pfn, nr_pages: u64) -> Result<(), MemHotplugError> {
        let hosted = self.self_hosted_pfns(start, start + nr_pages);
        if let Some(frames) = self.frames.as_mut() {
            for (s, e) in hosted {
                frames.unshare(s, e.get() - s.get())?;
            }
        }
        Ok(())
    }

    /// The layout's `hotplug` ranges marked `memmap_on_memory`, added at
    /// construction like the others but each block's memmap carved from
    /// the block (`memory_hotplug.memmap_on_memory=y`).
    pub(crate) fn boot_memmap_on_memory(&mut self, layout: &Layout) -> Result<(), MemHotplugError> {
        let g = *self.model.geometry();
        let per = g.memory_block_pages();
        for (r, first, end) in layout.ranges_of(RangeKind::Hotplug) {
            if !r.memmap_on_memory {
                continue;
            }
            let nr_pages = end - first;
            let vmemmap_pages =
                memmap_on_memory_pages(&g, self.options.era, MemmapOnMemory::On, nr_pages)?;
            self.model.hot_remove(first, nr_pages)?;
            self.add_with_altmaps(first, nr_pages, vmemmap_pages)?;
            for b in first.get() / per..end.get() / per {
                self.altmaps.insert(b, vmemmap_pages);
            }
        }
        Ok(())
    }

    /// The pfns of `[start, end)` (whole blocks) whose memmap lives in
    /// the block itself: each memmap_on_memory block's first pfns.
    pub fn self_hosted_pfns(&self, start: Pfn, end: Pfn) -> Vec<(Pfn, Pfn)> {
        let per = self.model.geometry().memory_block_pages();
        self.altmaps
            .range(start.get() / per..end.get().div_ceil(per))
            .map(|(&b, &n)| (Pfn::new(b * per), Pfn::new(b * per + n)))
            .collect()
    }

    /// `[start, end)` without its self-hosted pfns: what the buddy gets.
    fn buddy_pieces(&self, start: Pfn, end: Pfn) -> Vec<(Pfn, Pfn)> {
        let mut pieces = Vec::new();
        let mut pfn = start;
        for (s, e) in self.self_hosted_pfns(start, end) {
            if pfn < s {
                pieces.push((pfn, s));
            }
            pfn = pfn.max(e);
        }
        if pfn < end {
            pieces.push((pfn, end));
        }
        pieces
    }

    /// `online_pages`: onlines offline memory blocks `[start, start +
    /// nr_pages)` into the zone `online_type` picks on the node they were
    /// added for, creating or growing it; initialises their memmap for the
    /// zone and frees them to the tail of its free lists. Returns the zone.
    /// Every block must be offline and of one node; nothing changes on
    /// error. As the kernel's, it tells the memory notifier chain
    /// ([`Allocator::register_memory_notifier`]) `MEM_GOING_ONLINE` once
    /// the zone spans the range, and `MEM_ONLINE` at the end; a refusal
    /// of the first sends `MEM_CANCEL_ONLINE` and takes the range out of
    /// the zone again ([`MemHotplugError::NotifierRefused`]).
    pub fn online_pages(
        &mut self,
        start: Pfn,
        nr_pages: u64,
        online_type: OnlineType,
    ) -> Result<ZoneId, MemHotplugError> {
        self.check_not_deferred()?;
        let blocks = self.blocks(start, nr_pages)?;
        let mut node = None;
        for b in blocks.clone() {
            let Some(&n) = self.offline.get(&b) else {
                return Err(self.not_offline(b));
            };
            if node.is_some_and(|first| first != n) {
                let pfn = Pfn::new(b * self.model.geometry().memory_block_pages());
                return Err(MemHotplugError::NotOffline { pfn });
            }
            node = Some(n);
        }
        let node = node.unwrap_or(NodeId::ZERO);
        let end = start + nr_pages;
        for pfn in start.get()..end.get() {
            let pfn = Pfn::new(pfn);
            let page = self
                .model
                .pfn_to_page(pfn)
                .ok_or(RangeError::OutsideZone { pfn })?;
            if !page.test(PageFlag::Reserved) {
                return Err(HotplugError::AlreadyPresent { pfn }.into());
            }
        }
        check_blocks::<M, V>(&self.model, start, end)?;
        let (zid, old_span) = self.zone_to_online(online_type, node, [start, end])?;
        let arg = MemoryNotify {
            start_pfn: start,
            nr_pages,
            node,
        };
        self.move_pfn_range_to_zone(zid, [start, end]);
        if self.memory_chain.notify(MemoryAction::GoingOnline, &arg) == NotifyResult::Bad {
            // `failed_addition`: the chain hears the cancel, the range
            // leaves the zone; nothing else was done yet.
            self.memory_chain.notify(MemoryAction::CancelOnline, &arg);
            self.remove_pfn_range_from_zone(zid, old_span);
            return Err(MemHotplugError::NotifierRefused {
                action: MemoryAction::GoingOnline,
                start,
                nr_pages,
            });
        }
        if let Err(e) = self.model.set_online(start, nr_pages, true) {
            self.remove_pfn_range_from_zone(zid, old_span);
            return Err(e.into());
        }
        if let Err(e) = self.online_pages_range(zid, [start, end]) {
            self.model.set_online(start, nr_pages, false)?;
            self.remove_pfn_range_from_zone(zid, old_span);
            return Err(e.into());
        }
        let zone = &mut self.zones[zid];
        crate::walk::set_zone_contiguous(&self.model, zone, Some([start, end]));
        let id = zone.id;
        for b in blocks {
            self.offline.remove(&b);
        }
        self.setup_watermarks_and_pcp();
        self.memory_chain.notify(MemoryAction::Online, &arg);
        Ok(id)
    }

    /// The zone `[start, end)` of `node` is onlined into, created if the
    /// node has none of that type, with its span before (`None`: created
    /// here).
    fn zone_to_online(
        &mut self,
        online_type: OnlineType,
        node: NodeId,
        [start, end]: [Pfn; 2],
    ) -> Result<(usize, Option<[Pfn; 2]>), MemHotplugError> {
        match self.zone_for_pfn_range(online_type, node, [start, end]) {
            Ok(index) => Ok((
                index,
                Some([self.zones[index].start, self.zones[index].end]),
            )),
            Err(kind) => {
                if self.zones.len() >= MAX_ZONES {
                    return Err(MemHotplugError::TooManyZones);
                }
                let id = ZoneId::new(self.zones.len() as u8);
                let max_order = self.model.geometry().max_order();
                self.zones.push(Zone::new(
                    kind,
                    node,
                    id,
                    [start, end],
                    max_order,
                    self.path,
                ));
                self.rebuild_nodes();
                Ok((id.index(), None))
            }
        }
    }

    /// `move_pfn_range_to_zone` for whole blocks `[start, end)` onlined
    /// into zone `zid`: the span grows over them and the self-hosted pfns
    /// join the zone reserved (`mhp_init_memmap_on_memory`,
    /// `memmap_init_range`).
    fn move_pfn_range_to_zone(&mut self, zid: usize, [start, end]: [Pfn; 2]) {
        let hosted = self.self_hosted_pfns(start, end);
        let zone = &mut self.zones[zid];
        zone.grow(start, end);
        for &(s, e) in &hosted {
            let target = MemmapInitZone {
                zone: zone.id.get(),
                node: zone.node,
                start: s,
                end: e,
            };
            memmap_init(
                &mut self.model,
                &[(s, e)],
                target,
                MemmapInitForm::MemblockRanges,
            );
        }
    }

    /// `remove_pfn_range_from_zone` after a failed online: the zone's span
    /// as it was before (`old_span`), or the zone gone if the online
    /// created it. The self-hosted descriptors keep the zone link
    /// `move_pfn_range_to_zone` wrote (the kernel poisons them), which
    /// nothing reads while the block is offline.
    fn remove_pfn_range_from_zone(&mut self, zid: usize, old_span: Option<[Pfn; 2]>) {
        match old_span {
            Some([s, e]) => {
                let zone = &mut self.zones[zid];
                zone.start = s;
                zone.end = e;
            }
            None => {
                debug_assert_eq!(zid + 1, self.zones.len(), "the zone just created");
                self.zones.pop();
                self.rebuild_nodes();
            }
        }
    }

    /// `online_pages_range`: frees `[start, end)` but its self-hosted pfns
    /// to the tail of zone `zid`'s lists.
    fn online_pages_range(&mut self, zid: usize, [start, end]: [Pfn; 2]) -> Result<(), RangeError> {
        let pieces = self.buddy_pieces(start, end);
        let zone = &mut self.zones[zid];
        for &(s, e) in &pieces {
            zone.give_range(&self.model, [s, e], FpiFlags::TO_TAIL)?;
        }
        Ok(())
    }

    /// `register_memory_notifier` (`hotplug_memory_notifier(callback,
    /// priority)`): `callback` hears every online and offline from now
    /// on, higher priorities first; answering [`NotifyResult::Bad`] to
    /// [`MemoryAction::GoingOnline`] or [`MemoryAction::GoingOffline`]
    /// makes the step fail with [`MemHotplugError::NotifierRefused`],
    /// undone.
    pub fn register_memory_notifier(
        &mut self,
        priority: i32,
        callback: MemoryNotifierFn,
    ) -> NotifierId {
        self.memory_chain.register(priority, callback)
    }

    /// `unregister_memory_notifier`: whether `id` was registered.
    pub fn unregister_memory_notifier(&mut self, id: NotifierId) -> bool {
        self.memory_chain.unregister(id)
    }

    /// `offline_pages`: offlines whole memory blocks `[start, start +
    /// nr_pages)` of one zone; every page must be managed (a block with
    /// holes is refused, as the kernel does) and free (no migration here:
    /// pages in use make it refuse with their count). The notifier chain
    /// hears `MEM_GOING_OFFLINE` first, and `MEM_CANCEL_OFFLINE` when a
    /// callback or the pages in use refuse, else `MEM_OFFLINE`.
    pub fn offline_pages(&mut self, start: Pfn, nr_pages: u64) -> Result<(), MemHotplugError> {
        self.check_not_deferred()?;
        let blocks = self.blocks(start, nr_pages)?;
        let end = start + nr_pages;
        // `memory_block_offline`: the self-hosted pfns are not the buddy's
        // and are left out of the walk.
        let pieces = self.buddy_pieces(start, end);
        let head = pieces.first().map_or(start, |p| p.0);
        let first = self
            .model
            .pfn_to_page(head)
            .ok_or(RangeError::OutsideZone { pfn: head })?;
        if first.is_zone_device() {
            return Err(RangeError::DeviceMemory { pfn: head }.into());
        }
        let zid = ZoneId::new(first.zone_id());
        if first.test(PageFlag::Reserved) || zid.index() >= self.zones.len() {
            return Err(RangeError::OutsideZone { pfn: head }.into());
        }
        let mut free_blocks = vec![Vec::new(); pieces.len()];
        let mut in_use = 0;
        for (&(s, e), free) in pieces.iter().zip(&mut free_blocks) {
            in_use += self.free_blocks_of(zid, [s, e], free)?;
        }
        let arg = MemoryNotify {
            start_pfn: start,
            nr_pages,
            node: self.zones[zid.index()].node,
        };
        // `MEM_GOING_OFFLINE` before the migration (here: the pages in use
        // refuse); either failure cancels (`failed_removal_isolated`).
        let refused = self.memory_chain.notify(MemoryAction::GoingOffline, &arg);
        if refused == NotifyResult::Bad || in_use > 0 {
            self.memory_chain.notify(MemoryAction::CancelOffline, &arg);
            return Err(if in_use > 0 {
                MemHotplugError::InUse { nr_pages: in_use }
            } else {
                MemHotplugError::NotifierRefused {
                    action: MemoryAction::GoingOffline,
                    start,
                    nr_pages,
                }
            });
        }
        self.model.set_online(start, nr_pages, false)?;
        let hosted = self.self_hosted_pfns(start, end);
        let zone = &mut self.zones[zid.index()];
        for (&(s, e), free) in pieces.iter().zip(&free_blocks) {
            zone.take_range(&self.model, s, e, free)?;
        }
        // `mhp_deinit_memmap_on_memory`: the self-hosted pfns leave the
        // zone's span too.
        for (s, e) in hosted {
            zone.shrink_span(s, e);
        }
        crate::walk::set_zone_contiguous(&self.model, zone, None);
        let node = zone.node;
        self.offline.extend(blocks.map(|b| (b, node)));
        self.setup_watermarks_and_pcp();
        self.memory_chain.notify(MemoryAction::Offline, &arg);
        Ok(())
    }

    /// The free blocks covering `[start, end)` of zone `zid`, into `free`,
    /// and how many of its pages are in use; an error when a page is not
    /// the zone's managed memory.
    fn free_blocks_of(
        &self,
        zid: ZoneId,
        [start, end]: [Pfn; 2],
        free: &mut Vec<(Pfn, sparsemem::Order)>,
    ) -> Result<u64, MemHotplugError> {
        let mut in_use = 0;
        let mut pfn = start.get();
        while pfn < end.get() {
            let page = self.model.pfn_to_page(Pfn::new(pfn));
            if page.is_some_and(|p| p.is_zone_device()) {
                return Err(RangeError::DeviceMemory { pfn: Pfn::new(pfn) }.into());
            }
            let managed =
                page.is_some_and(|p| p.zone_id() == zid.get() && !p.test(PageFlag::Reserved));
            if !managed {
                return Err(RangeError::OutsideZone { pfn: Pfn::new(pfn) }.into());
            }
            match self.free_block_containing(zid, Pfn::new(pfn)) {
                Some((head, order)) => {
                    free.push((head, order));
                    pfn = head.get() + order.nr_pages();
                }
                None => {
                    in_use += 1;
                    pfn += 1;
                }
            }
        }
        Ok(in_use)
    }

    /// `remove_memory`: hot-removes whole offline memory blocks.
    pub fn hot_remove(&mut self, start: Pfn, nr_pages: u64) -> Result<(), MemHotplugError> {
        self.check_not_deferred()?;
        let blocks = self.blocks(start, nr_pages)?;
        if let Some(b) = blocks.clone().find(|b| !self.offline.contains_key(b)) {
            // Managed pages lie in zone spans only, so the count walks the
            // range's overlap with each span, never a hostile range itself.
            let end = start + nr_pages;
            let managed: u64 = self
                .zones
                .iter()
                .map(|z| {
                    (start.max(z.start).get()..end.min(z.end).get())
                        .filter(|&p| {
                            self.model.pfn_to_page(Pfn::new(p)).is_some_and(|page| {
                                page.zone_id() == z.id.get() && !page.test(PageFlag::Reserved)
                            })
                        })
                        .count() as u64
                })
                .sum();
            return Err(if managed > 0 {
                MemHotplugError::InUse { nr_pages: managed }
            } else {
                self.not_offline(b)
            });
        }
        self.model.hot_remove(start, nr_pages)?;
        self.unshare_frames(start, nr_pages)?;
        for b in blocks {
            self.offline.remove(&b);
            self.altmaps.remove(&b);
        }
        Ok(())
    }

    /// `memremap_pages`: adds device memory (ZONE_DEVICE) in 2 MiB
    /// subsections — VMEMMAP models only. It is valid and never enters the
    /// buddy.
    pub fn add_device(
        &mut self,
        start: Pfn,
        nr_pages: u64,
        node: NodeId,
    ) -> Result<(), MemHotplugError> {
        self.check_not_deferred()?;
        Ok(self.model.add_device(start, nr_pages, node)?)
    }

    /// `memunmap_pages`: removes device memory added with
    /// [`Allocator::add_device`].
    pub fn remove_device(&mut self, start: Pfn, nr_pages: u64) -> Result<(), MemHotplugError> {
        self.check_not_deferred()?;
        Ok(self.model.remove_device(start, nr_pages)?)
    }

    /// Memory blocks that are offline, with their nodes, as `(first pfn,
    /// node)`.
    pub fn offline_blocks(&self) -> Vec<(Pfn, NodeId)> {
        let per = self.model.geometry().memory_block_pages();
        self.offline
            .iter()
            .map(|(&b, &n)| (Pfn::new(b * per), n))
            .collect()
    }
}
