//! The kernel's per-call entry of the single-page path (5.13 and 6.18),
//! the work a call does around the per-CPU list itself — what a bulk call
//! pays once for many pages.
//!
//! With [`Mechanisms::entry`](crate::Mechanisms::entry) an allocation goes
//! through `__alloc_pages` and `get_page_from_freelist` as two calls the
//! kernel does not inline, and a free through `__free_pages` and
//! `free_unref_page` (5.13) or `__free_frozen_pages` (6.18); on the way:
//!
//! - `current_gfp_context`: the task's scoped constraints
//!   (`memalloc_noio_save`, `memalloc_nofs_save`, `memalloc_pin_save`;
//!   here [`PerCpu::memalloc_save`], the handle being the task) applied to
//!   the mask on every call;
//! - `prepare_alloc_pages`' preferred zone (`first_zones_zonelist`): the
//!   first zone of the zonelist the request and the cpuset allow;
//! - `zone_statistics`: the NUMA counters (`numa_hit` or `numa_miss` and
//!   `numa_foreign`, `local_node` or `other_node`) on the CPU's own
//!   per-zone counters, behind the `vm_numa_stat_key` static key, which is
//!   on by default. 5.13 keeps them as 16-bit per-CPU diffs folded into
//!   the zone at `NUMA_STATS_THRESHOLD` (`__inc_numa_state`), 6.18 as
//!   plain per-CPU event counters (`__count_numa_events`, 5.14 on). A bulk
//!   call counts each page in 5.13 and once per call from 5.14.
//!
//! What the kernel's entry also does and pfnlab already did without it:
//! `zone_watermark_fast`, `gfp_zone` and `gfp_migratetype`, the cpuset
//! check, `get_pfnblock_migratetype` on free, the PGALLOC/PGFREE vm events
//! (the handle's per-order counts), `put_page_testzero`'s locked operation
//! (the claim's `page_ref_freeze`), 6.18's `pcp_spin_trylock`, and 5.13's
//! `local_irq_save` as far as user space can run it, the flags save
//! (`irqflags`). What it leaves out, and why, is in docs/accounting.md:
//! the `cli`, the restore's test and `sti`, `preempt_disable`, static
//! keys that are off
//! (a patched no-op, not a load), `set_pcppage_migratetype` (no `index`
//! field), `alloc_flags_nofragment`'s zone test (4.20; pfnlab sets
//! `ALLOC_NOFRAGMENT` only under `vm.defrag_mode`, from the options).

use sparsemem::{BuddyPage, Order, Pfn};

use super::{BATCH, FACTOR, Pcp, PerCpu, TUNED};
use crate::alloc::Allocator;
use crate::era::PcpForm;
use crate::error::{FreeError, RequestError};
use crate::gfp::{AllocContext, Gfp};
use crate::types::{BuddyModel, NumaEvents, ZoneId};
use crate::variant::Variant;

/// `NUMA_STATS_THRESHOLD` (5.13, `include/linux/vmstat.h`: `U16_MAX - 2`):
/// where a CPU's 16-bit NUMA diff is folded into its zone.
pub const NUMA_STATS_THRESHOLD: u64 = u16::MAX as u64 - 2;

/// A scoped allocation constraint of the task (`PF_MEMALLOC_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemallocScope {
    /// `PF_MEMALLOC_NOIO`: no `__GFP_IO` or `__GFP_FS`.
    NoIo,
    /// `PF_MEMALLOC_NOFS`: no `__GFP_FS`.
    NoFs,
    /// `PF_MEMALLOC_PIN`: no `__GFP_MOVABLE` (pages that will be pinned
    /// stay out of ZONE_MOVABLE and movable pageblocks).
    Pin,
}

impl MemallocScope {
    fn bit(self) -> u8 {
        match self {
            MemallocScope::NoIo => 1 << 0,
            MemallocScope::NoFs => 1 << 1,
            MemallocScope::Pin => 1 << 2,
        }
    }
}

/// The task's scoped constraints before a [`PerCpu::memalloc_save`], for
/// [`PerCpu::memalloc_restore`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "restore the scope with memalloc_restore"]
pub struct MemallocSaved(u8);

impl<'a, M: BuddyModel, V: Variant> PerCpu<'a, M, V> {
    /// `memalloc_noio_save`, `memalloc_nofs_save`, `memalloc_pin_save`:
    /// enters a scope in which every allocation of this task (handle) has
    /// the constraint applied by `current_gfp_context` (with the entry
    /// mechanism); returns what to restore.
    pub fn memalloc_save(&mut self, scope: MemallocScope) -> MemallocSaved {
        let old = MemallocSaved(self.memalloc);
        self.memalloc |= scope.bit();
        old
    }

    /// `memalloc_*_restore`: leaves the scope `saved` was taken before.
    pub fn memalloc_restore(&mut self, saved: MemallocSaved) {
        self.memalloc = saved.0;
    }

    /// `current_gfp_context`: the task's scoped constraints applied to
    /// `gfp`.
    #[inline(always)]
    pub(super) fn current_gfp_context(&self, gfp: Gfp) -> Gfp {
        let flags = self.memalloc;
        if flags == 0 {
            return gfp;
        }
        let mut gfp = gfp;
        if flags & MemallocScope::NoIo.bit() != 0 {
            gfp = gfp.without(Gfp::IO.union(Gfp::FS));
        } else if flags & MemallocScope::NoFs.bit() != 0 {
            gfp = gfp.without(Gfp::FS);
        }
        if flags & MemallocScope::Pin.bit() != 0 {
            gfp = gfp.without(Gfp::MOVABLE);
        }
        gfp
    }

    /// `first_zones_zonelist` in `prepare_alloc_pages`: the preferred
    /// zone, the first of the zonelist within the request's zone limit and
    /// the cpuset (`None` when there is none; the walk then finds nothing
    /// either).
    #[inline(always)]
    pub(super) fn first_zones_zonelist(&self, ac: &AllocContext) -> Option<ZoneId> {
        let zones = &self.alloc.zones;
        self.node.zonelist(ac.gfp).iter().copied().find(|&zid| {
            let zone = &zones[zid.index()];
            zone.kind <= ac.highest_zone && self.cpuset.as_ref().is_none_or(|m| m.test(zone.node))
        })
    }

    /// `zone_statistics(preferred_zone, z, nr)`: `nr` pages from zone `z`
    /// for a request whose preferred zone is `preferred`, counted on this
    /// CPU's per-zone NUMA counters.
    #[inline(always)]
    pub(super) fn zone_statistics(&mut self, preferred: ZoneId, z: ZoneId, nr: u64) {
        let alloc = self.alloc;
        let node = alloc.zones[z.index()].node;
        let local = node == self.node.id;
        if node != alloc.zones[preferred.index()].node {
            let foreign = &mut self.pcp[preferred.index()];
            foreign.numa.foreign += nr;
            foreign.numa_state_fold(alloc, preferred);
        }
        let pcp = &mut self.pcp[z.index()];
        if node == alloc.zones[preferred.index()].node {
            pcp.numa.hit += nr;
        } else {
            pcp.numa.miss += nr;
        }
        if local {
            pcp.numa.local += nr;
        } else {
            pcp.numa.other += nr;
        }
        pcp.numa_state_fold(alloc, z);
    }

    /// The forms of [`PerCpu::alloc_pages`] with the entry: `__alloc_pages`
    /// with the tuning and the grow as the form byte says (inlined into
    /// the out-of-line dispatch of the rarer forms, so the call to
    /// `__alloc_pages` is the first nested call, as before).
    #[inline(always)]
    pub(super) fn alloc_pages_entry(
        &mut self,
        order: Order,
        gfp: Gfp,
    ) -> Result<Pfn, RequestError> {
        const DEFERRED: u8 = PcpForm::DEFERRED;
        const TUNED_DEFERRED: u8 = TUNED | DEFERRED;
        match self.alloc.pcp_form.bits() & (TUNED | BATCH | DEFERRED) {
            FACTOR => self.__alloc_pages::<FACTOR, false>(order, gfp),
            TUNED => self.__alloc_pages::<TUNED, false>(order, gfp),
            BATCH => self.__alloc_pages::<BATCH, false>(order, gfp),
            DEFERRED => self.__alloc_pages::<FACTOR, true>(order, gfp),
            TUNED_DEFERRED => self.__alloc_pages::<TUNED, true>(order, gfp),
            // `BATCH | DEFERRED`, the one combination left.
            _ => self.__alloc_pages::<BATCH, true>(order, gfp),
        }
    }

    /// The forms of [`PerCpu::free_pages`] with the entry: `__free_pages`
    /// with the tuning as the form byte says.
    #[inline(always)]
    pub(super) fn free_pages_entry(&mut self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        if self.alloc.pcp_form.bits() & TUNED != 0 {
            self.__free_pages::<true>(pfn, order)
        } else {
            self.__free_pages::<false>(pfn, order)
        }
    }

    /// `__alloc_pages` with the kernel's entry, a call of its own as the
    /// kernel's is, calling `get_page_from_freelist` as a second one (the
    /// entry's work runs in the inner call here; the kernel splits it
    /// between the two).
    #[inline(never)]
    fn __alloc_pages<const SIZING: u8, const DEFERRED: bool>(
        &mut self,
        order: Order,
        gfp: Gfp,
    ) -> Result<Pfn, RequestError> {
        self.get_page_from_freelist::<SIZING, DEFERRED>(order, gfp)
    }

    /// `get_page_from_freelist` as the call the kernel makes.
    #[inline(never)]
    fn get_page_from_freelist<const SIZING: u8, const DEFERRED: bool>(
        &mut self,
        order: Order,
        gfp: Gfp,
    ) -> Result<Pfn, RequestError> {
        self.alloc_pages_on::<SIZING, DEFERRED, true>(order, gfp)
    }

    /// `__free_pages` with the kernel's entry: a call of its own, calling
    /// `free_unref_page` (5.13) or `__free_frozen_pages` (6.18) as a
    /// second one, which drops the reference (the claim) and frees.
    #[inline(never)]
    fn __free_pages<const TUNING: bool>(
        &mut self,
        pfn: Pfn,
        order: Order,
    ) -> Result<(), FreeError> {
        self.free_unref_page::<TUNING>(pfn, order)
    }

    /// `free_unref_page` / `__free_frozen_pages` as the call the kernel
    /// makes.
    #[inline(never)]
    fn free_unref_page<const TUNING: bool>(
        &mut self,
        pfn: Pfn,
        order: Order,
    ) -> Result<(), FreeError> {
        self.free_pages_on::<TUNING>(pfn, order)
    }
}

impl<P: BuddyPage> Pcp<P> {
    /// 5.13's `__inc_numa_state` fold: a counter past
    /// `NUMA_STATS_THRESHOLD` goes into zone `zid`'s statistics (6.18's
    /// counters are folded with the rest, at the next drain or thread
    /// exit).
    #[inline(always)]
    fn numa_state_fold<M: BuddyModel<Page = P>, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        zid: ZoneId,
    ) {
        if alloc.path.numa_stat_diffs && self.numa.max() > NUMA_STATS_THRESHOLD {
            self.fold_numa(alloc, zid);
        }
    }

    /// Adds this CPU's NUMA counts to zone `zid`'s.
    #[cold]
    #[inline(never)]
    fn fold_numa<M: BuddyModel<Page = P>, V: Variant>(
        &mut self,
        alloc: &Allocator<M, V>,
        zid: ZoneId,
    ) {
        let mut area = alloc.zones[zid.index()].free_area.lock();
        area.stats.numa += std::mem::take(&mut self.numa);
    }
}

impl NumaEvents {
    /// The largest counter.
    fn max(&self) -> u64 {
        self.hit
            .max(self.miss)
            .max(self.foreign)
            .max(self.local)
            .max(self.other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::NodeMask;
    use crate::{Era, Kernel, Options};
    use sparsemem::{Geometry, Layout, MemRange, MemoryModel, NodeId, RangeKind, SparseExtreme};

    fn two_nodes() -> Layout {
        Layout::new(
            Geometry::X86_64,
            vec![
                MemRange::new(0, 512 << 20, RangeKind::Ram, 0),
                MemRange::new(512 << 20, 1 << 30, RangeKind::Ram, 1),
            ],
            "two nodes",
        )
        .unwrap()
    }

    /// The NUMA counters of node `n`'s zones, folded.
    fn numastat(alloc: &Allocator<SparseExtreme, Kernel>, n: u16) -> NumaEvents {
        let mut sum = NumaEvents::default();
        for z in alloc.zones().iter().filter(|z| z.node == NodeId::new(n)) {
            sum += z.stats().numa;
        }
        sum
    }

    /// A CPU of node 1 allocating on its own node counts hits and local
    /// allocations there; with a cpuset of node 0 the preferred zone is
    /// node 0's, so its pages are hits there but allocated from another
    /// node's CPU. Without the entry nothing is counted.
    #[test]
    fn zone_statistics_count_as_numastat_does() {
        let layout = two_nodes();
        for era in [Era::V5_13, Era::V6_18] {
            for entry in [true, false] {
                let mut options = Options::for_era(era);
                options.mechanisms.entry = entry;
                let model = SparseExtreme::new(&layout).unwrap();
                let alloc = Allocator::<_, Kernel>::new(model, &layout, options).unwrap();
                let mut cpu = alloc.cpu_on(NodeId::new(1)).unwrap();
                let own: Vec<Pfn> = (0..100).map(|_| cpu.alloc(Gfp::KERNEL).unwrap()).collect();
                cpu.set_cpuset(Some(NodeMask::of([NodeId::ZERO])));
                let far: Vec<Pfn> = (0..30).map(|_| cpu.alloc(Gfp::KERNEL).unwrap()).collect();
                for pfn in own.into_iter().chain(far) {
                    cpu.free(pfn).unwrap();
                }
                drop(cpu);
                let n = u64::from(entry);
                let want1 = NumaEvents {
                    hit: 100 * n,
                    local: 100 * n,
                    ..NumaEvents::default()
                };
                let want0 = NumaEvents {
                    hit: 30 * n,
                    other: 30 * n,
                    ..NumaEvents::default()
                };
                assert_eq!(numastat(&alloc, 1), want1, "{era} entry {entry}");
                assert_eq!(numastat(&alloc, 0), want0, "{era} entry {entry}");
            }
        }
    }

    /// The form byte follows the `deferred_pages` key: on at a deferred
    /// boot (with the grow's form, which serves a request from memory
    /// not yet initialised), off after `page_alloc_init_late`; the
    /// tuning's bit is the era's.
    #[test]
    fn the_form_byte_follows_the_deferred_key() {
        let layout = Layout::new(
            Geometry::X86_64,
            vec![MemRange::new(0, 1 << 30, RangeKind::Ram, 0)],
            "1 GiB",
        )
        .unwrap();
        for era in [Era::V5_13, Era::V6_18] {
            let tuned = if era == Era::V6_18 {
                PcpForm::TUNED | PcpForm::ENTRY
            } else {
                PcpForm::BATCH | PcpForm::ENTRY
            };
            let options = Options {
                deferred_init: true,
                ..Options::for_era(era)
            };
            let model = SparseExtreme::new(&layout).unwrap();
            let mut alloc = Allocator::<_, Kernel>::new(model, &layout, options).unwrap();
            assert!(alloc.deferred_pages_enabled(), "{era}: something deferred");
            assert_eq!(alloc.pcp_form.bits(), tuned | PcpForm::DEFERRED, "{era}");
            let free = alloc.free_pages_total();
            let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
            let mut held = Vec::new();
            while let Ok(pfn) = cpu.alloc_pages(Order::new(9), Gfp::KERNEL) {
                held.push(pfn);
            }
            assert!(
                held.len() as u64 * 512 > free,
                "{era}: the grow's form served more than boot freed"
            );
            for pfn in held {
                cpu.free_pages(pfn, Order::new(9)).unwrap();
            }
            drop(cpu);
            alloc.page_alloc_init_late(1);
            assert!(!alloc.deferred_pages_enabled());
            assert_eq!(alloc.pcp_form.bits(), tuned, "{era}: the grow's bit is off");
        }
    }

    /// Each scope takes its bits off the mask, and a restore brings the
    /// outer scope back.
    #[test]
    fn current_gfp_context_applies_the_task_scope() {
        let layout = two_nodes();
        let model = SparseExtreme::new(&layout).unwrap();
        let alloc = Allocator::<_, Kernel>::new(model, &layout, Options::default()).unwrap();
        let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
        let gfp = Gfp::HIGHUSER_MOVABLE;
        assert_eq!(cpu.current_gfp_context(gfp), gfp);
        let outer = cpu.memalloc_save(MemallocScope::NoFs);
        assert_eq!(cpu.current_gfp_context(gfp), gfp.without(Gfp::FS));
        let inner = cpu.memalloc_save(MemallocScope::Pin);
        assert_eq!(
            cpu.current_gfp_context(gfp),
            gfp.without(Gfp::FS).without(Gfp::MOVABLE)
        );
        let noio = cpu.memalloc_save(MemallocScope::NoIo);
        assert!(!cpu.current_gfp_context(gfp).contains(Gfp::IO));
        cpu.memalloc_restore(noio);
        cpu.memalloc_restore(inner);
        assert_eq!(cpu.current_gfp_context(gfp), gfp.without(Gfp::FS));
        cpu.memalloc_restore(outer);
        assert_eq!(cpu.current_gfp_context(gfp), gfp);
        // In a pin scope a movable request is served as an unmovable one.
        let p = cpu.memalloc_save(MemallocScope::Pin);
        let pfn = cpu.alloc(gfp).unwrap();
        cpu.memalloc_restore(p);
        let mt = alloc.model().get_pfnblock_migratetype(pfn);
        assert_ne!(
            mt,
            sparsemem::Migratetype::Movable,
            "from a stolen pageblock"
        );
        cpu.free(pfn).unwrap();
    }
}
