//! A zone's free area and the buddy algorithm proper.
//!
//! The three kernel routines, on pages (never a `pfn_to_page` per hop):
//! - `__free_one_page`: while below `MAX_PAGE_ORDER`, find the buddy at
//!   `pfn ^ (1 << order)` (optionally after `pfn_valid`), stop unless it is
//!   a free block of the same order in the same zone, else unlink it and
//!   merge; put the result on `free_area[order]`.
//! - `__rmqueue_smallest`: take the first block of the smallest order that
//!   has one;
//! - `expand`: split it, putting the upper halves back on lower orders.
//!
//! Everything here runs under the zone lock ([`crate::lock::SpinLock`]).

use std::marker::PhantomData;

use sparsemem::{MAX_PAGE_ORDER, MemoryModel, NR_PAGE_ORDERS, Order, Page, PageFlag, Pfn};

use crate::list::{PageList, page_offset};
use crate::variant::Variant;

/// Zone types, lowest first (`enum zone_type`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub enum ZoneType {
    /// Below 16 MiB.
    Dma,
    /// Below 4 GiB.
    Dma32,
    /// Everything else that booted.
    Normal,
    /// Hot-added memory, onlined movable.
    Movable,
}

impl ZoneType {
    /// Every zone type, lowest first.
    pub const ALL: [ZoneType; 4] = [
        ZoneType::Dma,
        ZoneType::Dma32,
        ZoneType::Normal,
        ZoneType::Movable,
    ];

    /// The kernel's name.
    pub fn name(self) -> &'static str {
        match self {
            ZoneType::Dma => "DMA",
            ZoneType::Dma32 => "DMA32",
            ZoneType::Normal => "Normal",
            ZoneType::Movable => "Movable",
        }
    }
}

/// Zone statistics. Plain counters: the buddy-path ones live in the free
/// area and change only under the zone lock; the per-CPU path counts in its
/// handle and folds in when it next takes the lock (as the kernel's per-CPU
/// vm events are folded), so no counter costs an atomic operation.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct ZoneStats {
    /// Blocks allocated, per order.
    pub allocs: [u64; NR_PAGE_ORDERS],
    /// Blocks freed, per order.
    pub frees: [u64; NR_PAGE_ORDERS],
    /// Buddy merges.
    pub merges: u64,
    /// Block splits in `expand`.
    pub splits: u64,
    /// `rmqueue_bulk` calls (pcp refills).
    pub pcp_refills: u64,
    /// `free_pcppages_bulk` calls (pcp drains).
    pub pcp_drains: u64,
    /// `pfn_valid` calls made by the hole check.
    pub hole_checks: u64,
    /// Hole checks that said "invalid".
    pub hole_hits: u64,
}

/// `free_area[]` of one zone, behind the zone lock.
///
/// Invariants:
/// - a page is on `lists[o]` iff it heads a free block of order `o`; then it
///   is marked buddy with `private == o` and the block lies in the zone;
/// - `lists[o].len()` is `nr_free[o]`;
/// - with the bitmap variant, bit `(pfn - bitmap_base) >> (o + 1)` of
///   `bitmap[o]` is set iff exactly one block of the pair at order `o` is
///   free.
pub struct FreeArea<V> {
    /// Statistics, changed only under the zone lock.
    pub stats: ZoneStats,
    lists: [PageList; NR_PAGE_ORDERS],
    bitmap: Vec<Vec<u64>>,
    bitmap_base: u64,
    zone_id: u8,
    _variant: PhantomData<V>,
}

impl<V: Variant> FreeArea<V> {
    /// Empty free lists for zone `zone_id` spanning `[start, end)`.
    pub fn new(zone_id: u8, start: Pfn, end: Pfn) -> Self {
        let mut area = FreeArea {
            stats: ZoneStats::default(),
            lists: Default::default(),
            bitmap: Vec::new(),
            bitmap_base: start.get() & !(Order::MAX.nr_pages() - 1),
            zone_id,
            _variant: PhantomData,
        };
        area.resize(start, end);
        area
    }

    /// Makes the bitmap cover the zone span `[start, end)` (which may have
    /// grown either way by hot add), keeping every pair bit.
    pub fn resize(&mut self, start: Pfn, end: Pfn) {
        if !V::BITMAP {
            return;
        }
        let new_base = self
            .bitmap_base
            .min(start.get() & !(Order::MAX.nr_pages() - 1));
        let span = end.get().saturating_sub(new_base);
        let old = std::mem::take(&mut self.bitmap);
        self.bitmap = (0..MAX_PAGE_ORDER as usize)
            .map(|o| vec![0u64; ((span >> (o + 1)) + 1).div_ceil(64) as usize])
            .collect();
        let shift = self.bitmap_base - new_base;
        for (o, map) in old.iter().enumerate() {
            let offset = shift >> (o + 1);
            for bit in
                (0..map.len() as u64 * 64).filter(|b| map[(b / 64) as usize] & (1 << (b % 64)) != 0)
            {
                let to = bit + offset;
                self.bitmap[o][(to / 64) as usize] |= 1 << (to % 64);
            }
        }
        self.bitmap_base = new_base;
    }

    /// `nr_free` per order.
    pub fn nr_free(&self) -> [u64; NR_PAGE_ORDERS] {
        std::array::from_fn(|o| self.lists[o].len())
    }

    /// Free pages on the lists.
    pub fn free_pages(&self) -> u64 {
        self.lists
            .iter()
            .enumerate()
            .map(|(o, l)| l.len() << o)
            .sum()
    }

    /// Pfns of the blocks on the free list of one order (for checks).
    pub fn block_pfns<M: MemoryModel>(&self, model: &M, order: Order) -> Vec<Pfn> {
        self.lists[order.index()]
            .iter()
            // SAFETY: listed pages are live descriptors of `model`'s memmap.
            .map(|p| model.page_to_pfn(unsafe { &*p }))
            .collect()
    }

    /// `__test_and_change_bit` on the pair bit of `pfn` at `order`: returns
    /// the old value.
    #[inline(always)]
    fn toggle(&mut self, order: usize, pfn: u64) -> bool {
        let bit = (pfn - self.bitmap_base) >> (order + 1);
        let word = &mut self.bitmap[order][(bit / 64) as usize];
        let mask = 1u64 << (bit % 64);
        let old = *word & mask != 0;
        *word ^= mask;
        old
    }

    /// Puts a block head on `free_area[order]`.
    ///
    /// # Safety
    /// `page` is a live descriptor heading a free block of this zone, on no
    /// list.
    #[inline(always)]
    unsafe fn add(&mut self, page: *const Page, order: usize) {
        // SAFETY: the caller's contract.
        let pr = unsafe { &*page };
        pr.set_private(order as u64);
        V::set(pr, PageFlag::Buddy);
        // SAFETY: as above; the list's contract is the same.
        unsafe { self.lists[order].push_front(page) };
    }

    /// Takes a block head off `free_area[order]`.
    ///
    /// # Safety
    /// `page` is on `lists[order]`.
    #[inline(always)]
    unsafe fn del(&mut self, page: *const Page, order: usize) {
        // SAFETY: the caller's contract.
        unsafe { self.lists[order].unlink(page) };
        // SAFETY: listed pages are live.
        V::clear(unsafe { &*page }, PageFlag::Buddy);
    }

    /// `page_is_buddy`: a free block head of this order in this zone.
    #[inline(always)]
    fn page_is_buddy(&self, buddy: &Page, order: usize) -> bool {
        buddy.test(PageFlag::Buddy)
            && buddy.private() == order as u64
            && buddy.zone_id() == self.zone_id
    }

    /// `__free_one_page`: frees the block of `order` at `pfn` and merges it
    /// with free buddies.
    ///
    /// # Safety
    /// - `page` is `pfn`'s descriptor from `model.pfn_to_page_ptr` (so it
    ///   carries provenance over its section's memmap);
    /// - the block lies in this zone and is not free;
    /// - without the hole check, every pfn of the `MAX_PAGE_ORDER` block
    ///   around it is valid (the allocator checks this at construction).
    #[inline(always)]
    pub unsafe fn free_one<M: MemoryModel>(
        &mut self,
        model: &M,
        page: *const Page,
        pfn: Pfn,
        order: Order,
    ) {
        let mut page = page;
        let mut pfn = pfn.get();
        let mut order = order.index();
        while order < MAX_PAGE_ORDER as usize {
            let buddy_pfn = pfn ^ (1 << order);
            if V::HOLE_CHECK {
                self.stats.hole_checks += 1;
                if !model.pfn_valid(Pfn::new(buddy_pfn)) {
                    self.stats.hole_hits += 1;
                    break;
                }
            }
            // SAFETY: the buddy is in the same MAX_PAGE_ORDER block, hence the
            // same section, and its pfn is valid (just checked, or guaranteed
            // by the caller); `page` has provenance over the section.
            let buddy = unsafe { page_offset(page, buddy_pfn as i64 - pfn as i64) };
            if V::BITMAP {
                if !self.toggle(order, pfn) {
                    break;
                }
                // SAFETY: a valid descriptor (above).
                debug_assert!(self.page_is_buddy(unsafe { &*buddy }, order));
            // SAFETY: a valid descriptor (above).
            } else if !self.page_is_buddy(unsafe { &*buddy }, order) {
                break;
            }
            // SAFETY: page_is_buddy (or the pair bit) says the buddy heads a
            // free block of this order, so it is on lists[order].
            unsafe { self.del(buddy, order) };
            self.stats.merges += 1;
            if buddy_pfn < pfn {
                page = buddy;
            }
            pfn &= buddy_pfn;
            order += 1;
        }
        // SAFETY: `page` heads the merged free block, on no list.
        unsafe { self.add(page, order) };
    }

    /// `__rmqueue_smallest` + `expand`: a block of `order` as its head's
    /// pointer (with the provenance it was freed with) and pfn.
    #[inline(always)]
    pub fn rmqueue_smallest<M: MemoryModel>(
        &mut self,
        model: &M,
        order: Order,
    ) -> Option<(*const Page, Pfn)> {
        let low = order.index();
        for current in low..=MAX_PAGE_ORDER as usize {
            let Some(page) = self.lists[current].pop_front() else {
                continue;
            };
            // SAFETY: listed pages are live descriptors of `model`'s memmap.
            let pr = unsafe { &*page };
            V::clear(pr, PageFlag::Buddy);
            let pfn = model.page_to_pfn(pr);
            if V::BITMAP && current < MAX_PAGE_ORDER as usize {
                self.toggle(current, pfn.get());
            }
            // SAFETY: the block was free and is now off every list.
            unsafe { self.expand(page, pfn.get(), low, current) };
            return Some((page, pfn));
        }
        None
    }

    /// `expand`: splits a block of order `high` down to `low`.
    ///
    /// # Safety
    /// `page` heads a block of order `high` of this zone that is on no list,
    /// with provenance over its section.
    #[inline(always)]
    unsafe fn expand(&mut self, page: *const Page, pfn: u64, low: usize, mut high: usize) {
        while high > low {
            high -= 1;
            let size = 1u64 << high;
            // SAFETY: the upper half lies in the same block, so in the same
            // section, and is a valid descriptor.
            let half = unsafe { page_offset(page, size as i64) };
            // SAFETY: the upper half heads a free block of order `high`.
            unsafe { self.add(half, high) };
            if V::BITMAP {
                self.toggle(high, pfn + size);
            }
            self.stats.splits += 1;
        }
    }

    /// Takes a specific free block off its list (offline).
    ///
    /// # Safety
    /// `page` heads a free block of `order` of this zone.
    pub unsafe fn take_block(&mut self, page: *const Page, pfn: Pfn, order: Order) {
        if V::BITMAP && order < Order::MAX {
            self.toggle(order.index(), pfn.get());
        }
        // SAFETY: the caller's contract.
        unsafe { self.del(page, order.index()) };
    }
}
