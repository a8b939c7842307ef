//! 6.7's tuning of `pcp->high` (the 6.8, 6.12 and 6.18 eras).
//!
//! From Linux 6.7 a CPU's `high` is not fixed: it starts at 0
//! (`BOOT_PAGESET_HIGH`) and is clamped into `high_min..=high_max` where
//! it is used. Each refill (`nr_pcp_alloc`) raises it by the refill's
//! size unless the zone is `ZONE_BELOW_HIGH`, and refills double
//! (`alloc_factor`, up to `batch << PCP_BATCH_SCALE_MAX`) while order-0
//! allocations come without frees. A free (`free_frozen_page_commit`)
//! halves `alloc_factor` and counts itself in `free_count` (halved by
//! each allocation); when the lists reach `high` it raises `high` only as
//! far as `free_count + batch` and drains `free_count` pages (at least
//! `batch`, leaving `batch`). While the zone is `ZONE_BELOW_HIGH` each
//! free lowers `high` towards `high_min` and drains above `high_min`; a
//! run of high-order frees with no allocation between (`free_high`)
//! drains up to `batch << PCP_BATCH_SCALE_MAX` and lowers `high` as
//! much. The vmstat work (`decay_pcp_high`, every `stat_interval`)
//! lowers `high` by an eighth towards `high_min` and drains what is above
//! it.
//!
//! With `PCPF_FREE_HIGH_BATCH` ([`PerCpu::update_cacheinfo`]) `free_high`
//! also waits for a `batch` on the lists.
//!
//! Not modelled: `ZONE_RECLAIM_ACTIVE` (set by kswapd, which pfnlab does
//! not have), and the NUMA expiry that drains a remote zone's lists after
//! three idle vmstat ticks (`refresh_cpu_vm_stats` drains no zone of the
//! CPU's own node).

use super::{PAGE_ALLOC_COSTLY_ORDER, PCP_BATCH_SCALE_MAX, Pcp, PerCpu};
use crate::FreeError;
use crate::alloc::Allocator;
use crate::gfp::AllocFlags;
use crate::types::{BuddyModel, ZoneId, ZoneType};
use crate::variant::Variant;
use sparsemem::{BuddyPage, Migratetype, Order, Pfn};

impl<P: BuddyPage> Pcp<P> {
    /// `free_frozen_page_commit`'s bookkeeping on every free of a block of
    /// `order` (already listed): `alloc_factor` halved, the high-order
    /// run noted, `free_count` grown; returns `free_high`.
    #[inline(always)]
    pub(super) fn note_free(&mut self, order: Order) -> bool {
        self.alloc_factor >>= 1;
        let batch = u64::from(self.batch);
        let high_order = order.get() > 0 && order.get() <= PAGE_ALLOC_COSTLY_ORDER;
        let free_high = high_order
            && self.prev_free_high_order
            && self.free_count >= self.free_high_count
            && (!self.free_high_batch || self.count >= batch);
        self.prev_free_high_order = high_order;
        if self.free_count < batch << PCP_BATCH_SCALE_MAX {
            self.free_count += order.nr_pages();
        }
        free_high
    }

    /// The rest of `free_frozen_page_commit`, out of the hot path: tunes
    /// `high` (`nr_pcp_high`) and, with the lists at it, drains
    /// `nr_pcp_free` pages from `pindex`, clearing `ZONE_BELOW_HIGH` when
    /// that brings the zone back above its high watermark.
    #[cold]
    #[inline(never)]
    pub(super) fn commit_tuned<M: BuddyModel<Page = P>, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        zid: ZoneId,
        pindex: usize,
        free_high: bool,
    ) {
        let zone = &alloc.zones[zid.index()];
        let high = self.nr_pcp_high(zone.below_high(), free_high);
        if self.count >= high {
            let nr = self.nr_pcp_free(high, free_high);
            self.free_pcppages_bulk(alloc, zid, nr, pindex);
            if zone.below_high()
                && zone.watermark_ok(
                    Order::ZERO,
                    zone.watermarks.high,
                    ZoneType::Movable,
                    AllocFlags::FAST,
                )
            {
                zone.set_below_high(false);
            }
        }
    }

    /// `clamp(pcp->high, high_min, high_max)`, stored.
    fn clamp_high(&mut self) -> u64 {
        self.high = clamp(self.high, self.high_min, self.high_max);
        self.high
    }

    /// `nr_pcp_high`: the count at which a free drains, tuning `high`.
    fn nr_pcp_high(&mut self, below_high: bool, free_high: bool) -> u64 {
        let batch = u64::from(self.batch);
        let high = self.clamp_high();
        if high == 0 {
            return 0;
        }
        if free_high {
            self.high = high
                .saturating_sub(batch << PCP_BATCH_SCALE_MAX)
                .max(self.high_min);
            return 0;
        }
        if self.high_min == self.high_max {
            return high;
        }
        if below_high {
            let free_count = self.free_count.max(batch);
            self.high = high.saturating_sub(free_count).max(self.high_min);
            return self.count.max(self.high_min);
        }
        if self.count >= high {
            let need_high = self.free_count + batch;
            if self.high < need_high {
                self.high = clamp(need_high, self.high_min, self.high_max);
            }
        }
        high
    }

    /// `nr_pcp_free`: how many pages a drain at `high` frees.
    fn nr_pcp_free(&self, high: u64, free_high: bool) -> u64 {
        let batch = u64::from(self.batch);
        if free_high {
            return self.count.min(batch << PCP_BATCH_SCALE_MAX);
        }
        if high < batch {
            return 1;
        }
        // `clamp_t`: at least `batch`, and leave `batch` on the lists.
        self.free_count.max(batch).min(high - batch)
    }

    /// `nr_pcp_alloc`: how many blocks of `order` a refill takes, raising
    /// `high` by the refill unless the zone is `ZONE_BELOW_HIGH`.
    pub(super) fn nr_pcp_alloc(&mut self, below_high: bool, order: Order) -> u32 {
        let base = i64::from(self.batch);
        let mut high = self.clamp_high() as i64;
        if high < base {
            return 1;
        }
        let mut batch = if order == Order::ZERO {
            base << self.alloc_factor
        } else {
            base
        };
        if self.high_min != self.high_max && !below_high {
            high = (high + batch).min(self.high_max as i64);
            self.high = high as u64;
        }
        if order == Order::ZERO {
            let max_nr_alloc = (high - self.count as i64 - base).max(base);
            if batch <= max_nr_alloc && self.alloc_factor < PCP_BATCH_SCALE_MAX {
                self.alloc_factor += 1;
            }
            batch = batch.min(max_nr_alloc);
        }
        if batch > 1 {
            batch = (batch >> order.get()).max(2);
        }
        batch as u32
    }

    /// `decay_pcp_high`: `high` lowered to `max3(count − (batch << 5),
    /// high − high/8, high_min)` and whatever is above it drained from
    /// list 0; whether there is more to do.
    pub(super) fn decay_pcp_high<M: BuddyModel<Page = P>, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        zid: ZoneId,
    ) -> bool {
        let batch = u64::from(self.batch);
        let mut todo = false;
        if self.high > self.high_min {
            self.high = self
                .count
                .saturating_sub(batch << PCP_BATCH_SCALE_MAX)
                .max(self.high - (self.high >> 3))
                .max(self.high_min);
            todo = self.high > self.high_min;
        }
        if self.count > self.high {
            self.free_pcppages_bulk(alloc, zid, self.count - self.high, 0);
            todo = true;
        }
        todo
    }
}

/// The kernel's `clamp()` (`__clamp`, include/linux/minmax.h): `hi` from
/// `hi` up, else `lo` up to `lo`, else `val`. Unlike [`Ord::clamp`] it does
/// not panic when `lo > hi`, which a small zone gives: `high_min` comes
/// from the low watermark, which `min_free_kbytes`' floor of 128 KiB can
/// put above `high_max`, an eighth of the managed pages. The kernel then
/// uses `high_max` for a `high` at or above it and `high_min` below it,
/// and so does pfnlab.
fn clamp(val: u64, lo: u64, hi: u64) -> u64 {
    if val >= hi {
        hi
    } else if val <= lo {
        lo
    } else {
        val
    }
}

impl<M: BuddyModel, V: Variant> PerCpu<'_, M, V> {
    /// This CPU's `pcp->high_min` for zone `zid`: the least `high` 6.7's
    /// tuning lowers it to (the zone's `high` in eras without the tuning,
    /// where it equals [`PerCpu::high_max`]; 0 for an id of no zone).
    pub fn high_min(&self, zid: ZoneId) -> u64 {
        self.pcp.get(zid.index()).map_or(0, |p| p.high_min)
    }

    /// This CPU's `pcp->high_max` for zone `zid`: the most 6.7's tuning
    /// raises `high` to (0 for an id of no zone).
    pub fn high_max(&self, zid: ZoneId) -> u64 {
        self.pcp.get(zid.index()).map_or(0, |p| p.high_max)
    }

    /// Sets this CPU's `pcp->high` for zone `zid` to the value a machine's
    /// zoneinfo showed for the CPU, clamped into `high_min..=high_max`, so
    /// that a run starting from that machine's state goes on tuning from
    /// where its kernel was (6.7's tuning moves `high` with every refill,
    /// free and vmstat run; its value is state the trace cannot rebuild).
    /// False, with nothing changed, where `high` is not per CPU (eras
    /// before 6.7, and with `percpu_pagelist_high_fraction`, where
    /// `high_min == high_max`) or `zid` names no zone.
    pub fn restore_high(&mut self, zid: ZoneId, high: u64) -> bool {
        let tuned = self.alloc.path.pcp_high_tuning;
        match self.pcp.get_mut(zid.index()) {
            Some(p) if tuned && p.high_min != p.high_max => {
                p.high = clamp(high, p.high_min, p.high_max);
                true
            }
            _ => false,
        }
    }

    /// Puts a held block on this CPU's lists as a machine's state had it
    /// there: on the list of its pageblock's migratetype, as a free files
    /// it, but without the free path's tuning (`free_count`, `free_high`,
    /// the drain at `high`), so that a start state's lists hold the
    /// `count` its snapshot showed, whatever order its blocks are put
    /// back in. An order the lists do not take, or an isolated
    /// pageblock's block, goes to the zone as [`PerCpu::free_pages`]
    /// sends it. Nothing is counted as a free (`PGFREE`). The same errors
    /// as [`PerCpu::free_pages`], with nothing changed.
    pub fn restore_on_list(&mut self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        let (block, zid) = self.alloc.claim_for_free(pfn, order)?;
        let (mt, pindex) = self.free_list_of(pfn, order);
        if !self.pcp_allowed_order(order) || mt == Migratetype::Isolate {
            self.free_one_page(zid, block);
            return Ok(());
        }
        let pcp = &mut self.pcp[zid.index()];
        pcp.lists[pindex].push_front(block);
        pcp.count += order.nr_pages();
        Ok(())
    }

    /// `zone_pcp_update_cacheinfo` for every zone, as the kernel runs it
    /// for a CPU once its cache sizes are known: `PCPF_FREE_HIGH_BATCH`
    /// set where `slice_bytes`, this CPU's share of its last-level data
    /// cache (`per_cpu_data_slice_size`, `94a3bfe4073c` "cacheinfo:
    /// calculate size of per-CPU data cache slice"), holds more than three
    /// batches of pages, cleared elsewhere. With it set a run of
    /// high-order frees drains (`free_high`) only once the lists hold a
    /// `batch`, so that a CPU whose cache can hold the pages keeps them
    /// (`362d37a106dd` "mm, pcp: reduce lock contention for draining
    /// high-order pages", 6.7). A handle starts with it clear, as a CPU
    /// does before its cache is known. False, with nothing changed, in an
    /// era without 6.7's tuning.
    pub fn update_cacheinfo(&mut self, slice_bytes: u64) -> bool {
        if !self.alloc.path.pcp_high_tuning {
            return false;
        }
        let pages = slice_bytes >> self.alloc.model.geometry().page_shift();
        for p in &mut self.pcp {
            p.free_high_batch = pages > 3 * u64::from(p.batch);
        }
        true
    }

    /// Blocks this CPU's refills took from the zones and its drains gave
    /// back since the handle was made, over every zone: its own share of
    /// [`ZoneStats::pcp_refill_blocks`](crate::ZoneStats) and
    /// `pcp_drain_blocks`.
    pub fn pcp_blocks(&self) -> (u64, u64) {
        self.pcp.iter().fold((0, 0), |(r, d), p| {
            (r + p.refill_blocks, d + p.drain_blocks)
        })
    }
}
