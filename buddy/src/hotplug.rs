//! Memory hotplug with the allocator: add, online, offline, remove.
//!
//! As in the kernel, hot add only creates memmap (the model's `hot_add`);
//! `online_pages` gives the pages to the node's Movable zone (created, or
//! grown, on first use) and frees them into its lists; `offline_pages`
//! takes them back only when every page of the range is free — otherwise it
//! says how many are in use and changes nothing — splitting free blocks
//! that straddle the range; `hot_remove` then retires the memmap. All four
//! take `&mut self`, so no per-CPU handle can hold pages meanwhile.

use sparsemem::{MemoryModel, NodeId, PageFlag, Pfn};

use crate::alloc::{Allocator, MAX_ZONES};
use crate::error::AllocError;
use crate::variant::Variant;
use crate::zone::{Zone, ZoneId, ZoneType, check_blocks};

impl<M: MemoryModel, V: Variant> Allocator<M, V> {
    /// The global subsection numbers of a subsection-aligned range.
    fn subsections(&self, start: Pfn, nr_pages: u64) -> Result<std::ops::Range<u64>, AllocError> {
        let g = self.model.geometry();
        let end = g.check_subsection_range(start, nr_pages)?;
        let per = g.pages_per_subsection();
        Ok(start.get() / per..end.get() / per)
    }

    /// The first subsection of `subs` that is not offline memory.
    fn first_not_offline(&self, subs: std::ops::Range<u64>) -> Option<Pfn> {
        let per = self.model.geometry().pages_per_subsection();
        subs.clone()
            .find(|s| !self.offline.contains(s))
            .map(|s| Pfn::new(s * per))
    }

    /// Hot-adds memmap for `[start, start + nr_pages)`; it stays offline.
    pub fn hot_add(&mut self, start: Pfn, nr_pages: u64) -> Result<(), AllocError> {
        let subs = self.subsections(start, nr_pages)?;
        self.model.hot_add(start, nr_pages)?;
        self.offline.extend(subs);
        Ok(())
    }

    /// Onlines `[start, start + nr_pages)` (offline memory: hot-added or
    /// offlined) into `node`'s Movable zone.
    pub fn online_pages(
        &mut self,
        start: Pfn,
        nr_pages: u64,
        node: NodeId,
    ) -> Result<(), AllocError> {
        let subs = self.subsections(start, nr_pages)?;
        if let Some(pfn) = self.first_not_offline(subs.clone()) {
            return Err(AllocError::NotOffline { pfn });
        }
        let end = Pfn::new(start.get() + nr_pages);
        for pfn in start.get()..end.get() {
            let page = self
                .model
                .pfn_to_page(Pfn::new(pfn))
                .ok_or(AllocError::OutsideZone { pfn: Pfn::new(pfn) })?;
            if !page.test(PageFlag::Reserved) {
                return Err(AllocError::Hotplug(
                    sparsemem::HotplugError::AlreadyPresent { pfn: Pfn::new(pfn) },
                ));
            }
        }
        check_blocks::<M, V>(&self.model, start, end)?;
        let zid = match self
            .zones
            .iter()
            .position(|z| z.node == node && z.kind == ZoneType::Movable)
        {
            Some(zid) => zid,
            None => {
                if self.zones.len() >= MAX_ZONES {
                    return Err(AllocError::TooManyZones);
                }
                let id = ZoneId::new(self.zones.len() as u8);
                self.zones
                    .push(Zone::new(ZoneType::Movable, node, id, start, end));
                self.rebuild_nodes();
                id.index()
            }
        };
        self.model.set_online(start, nr_pages, true)?;
        let zone = &mut self.zones[zid];
        zone.grow(start, end);
        zone.give_range(&self.model, start, end)?;
        for s in subs {
            self.offline.remove(&s);
        }
        zone.set_pcp_sizes(self.options.pcp_batch);
        Ok(())
    }

    /// Offlines `[start, start + nr_pages)` (subsection aligned): every
    /// page must be managed and free.
    pub fn offline_pages(&mut self, start: Pfn, nr_pages: u64) -> Result<(), AllocError> {
        let subs = self.subsections(start, nr_pages)?;
        let end = start.get() + nr_pages;
        let first = self
            .model
            .pfn_to_page(start)
            .ok_or(AllocError::OutsideZone { pfn: start })?;
        let zid = ZoneId::new(first.zone_id());
        if first.test(PageFlag::Reserved) || zid.index() >= self.zones.len() {
            return Err(AllocError::OutsideZone { pfn: start });
        }
        let mut blocks = Vec::new();
        let mut in_use = 0;
        let mut pfn = start.get();
        while pfn < end {
            let managed = self
                .model
                .pfn_to_page(Pfn::new(pfn))
                .is_some_and(|p| p.zone_id() == zid.get() && !p.test(PageFlag::Reserved));
            if !managed {
                return Err(AllocError::OutsideZone { pfn: Pfn::new(pfn) });
            }
            match self.free_block_containing(zid, Pfn::new(pfn)) {
                Some((head, order)) => {
                    blocks.push((head, order));
                    pfn = head.get() + order.nr_pages();
                }
                None => {
                    in_use += 1;
                    pfn += 1;
                }
            }
        }
        if in_use > 0 {
            return Err(AllocError::InUse { nr_pages: in_use });
        }
        self.model.set_online(start, nr_pages, false)?;
        self.zones[zid.index()].take_range(&self.model, start, Pfn::new(end), &blocks)?;
        self.offline.extend(subs);
        Ok(())
    }

    /// Hot-removes `[start, start + nr_pages)`: it must be offline memory.
    pub fn hot_remove(&mut self, start: Pfn, nr_pages: u64) -> Result<(), AllocError> {
        let subs = self.subsections(start, nr_pages)?;
        if let Some(pfn) = self.first_not_offline(subs.clone()) {
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
                AllocError::InUse { nr_pages: managed }
            } else {
                AllocError::NotOffline { pfn }
            });
        }
        self.model.hot_remove(start, nr_pages)?;
        for s in subs {
            self.offline.remove(&s);
        }
        Ok(())
    }
}
