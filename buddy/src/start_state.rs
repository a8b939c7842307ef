//! An allocator that starts from a real machine's fragmentation: its free
//! lists holding exactly the free blocks a `/proc/pagetypeinfo` counts,
//! per zone, order and migratetype, its pageblocks of each migratetype as
//! many as it counts, and the rest of its memory allocated.
//!
//! The kernel exports how many free blocks there are, not where, so
//! [`Allocator::set_start_state`] places them, deterministically from a
//! seed:
//! 1. the zone's pageblocks are those pagetypeinfo counts (one probe per
//!    `pageblock_nr_pages` from the zone's start, online and in the zone);
//!    the snapshot must count as many as the model's zone has. A machine
//!    still in deferred struct page init counts only the pageblocks it
//!    has initialised, so a model zone with deferred pages is first grown
//!    a section at a time, as the machine's allocations grew its zone
//!    ([`Allocator::deferred_grow_zone_to`]), until it counts as many,
//!    and the watermarks and per-CPU sizes are then worked out from the
//!    grown managed pages (`setup_per_zone_wmarks`, `zone_pcp_update`).
//!    That is the state a machine whose deferred init is lazy shows: a
//!    6.18 host booted with `deferred_init=lazy` had its zones' `min`,
//!    `high_min` and `high_max` follow the managed pages grown so far,
//!    exactly. Mainline works them out again only in
//!    `page_alloc_init_late`, before any snapshot can be taken;
//! 2. a free `MAX_PAGE_ORDER` block covers whole pageblocks of its
//!    migratetype: the aligned groups of pageblocks wholly in the zone are
//!    shuffled (seeded), and each migratetype takes as many as it has
//!    such blocks, in the kernel's migratetype order;
//! 3. the other pageblocks are shuffled and given the remaining counts of
//!    each migratetype, in the same order;
//! 4. from the next order down to 0, each migratetype's blocks go first
//!    fit into its own pageblocks (in their shuffled order, each from its
//!    lowest pfn), at a place that is wholly unused and whose buddy holds
//!    no free page: then no two free buddies exist (a fully free aligned
//!    region would need two free buddies inside it), so
//!    `__free_one_page` merges nothing and each block stays as placed;
//! 5. the rest is allocated, in aligned blocks handed back to the caller.
//!
//! A migratetype with more free pages than its pageblocks hold, in a zone
//! whose pageblocks hold all its free pages, is refused before any
//! placement: such blocks lie in pageblocks of another migratetype, a
//! state kernels before 6.10 reach and the model does not represent
//! ([`StartStateError::ForeignFreeBlocks`]).
//!
//! A shuffle that leaves some blocks without a place is tried again with
//! the next of [`PLACEMENT_ATTEMPTS`] shuffles derived from the seed, so
//! a target fails only when none fits.
//!
//! Everything is checked and planned before the free lists change: a
//! target that cannot fit (more blocks of an order than places for them,
//! another pageblock count, a zone the model lacks) is an error with the
//! free lists as they were (a deferred zone's grow stays: it is a state
//! the allocator reaches on its own). The per-CPU lists start empty (the kernel's
//! `count`s are memory it holds off the free lists: allocated here).
//!
//! A count the kernel capped (`>100000`: `pagetypeinfo_showfree_print`
//! stops counting at 100,000) is worked out from a buddyinfo read at the
//! same moment, when one is given
//! ([`Allocator::set_start_state_with`]): the order's `nr_free` less the
//! other migratetypes' counts, which must come to at least 100,000.
//! Where it cannot be (no buddyinfo, two migratetypes capped at one
//! order, or a buddyinfo of another moment), the target is refused.
//!
//! What it leaves out: which pfns were free (not exported, so the
//! placement is one of many with these counts), and eras without
//! migratetypes (refused).

use sparsemem::{Migratetype, Order, Pfn};

use crate::alloc::Allocator;
pub use crate::error::StartStateError;
use crate::types::{BuddyModel, ZoneId};
use crate::variant::Variant;
use crate::views::{BuddyInfo, FREECOUNT_CAP, PageTypeInfo, ZoneTypes};

/// Shuffles tried per zone before a target is refused: a shuffle can
/// give a migratetype the pageblocks a hole or the zone's edge cuts
/// short (DMA's first pageblock, say) where another fits.
const PLACEMENT_ATTEMPTS: u64 = 16;

/// `splitmix64`: a small seeded generator for the shuffles.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, (self.next() % (i as u64 + 1)) as usize);
        }
    }
}

/// A set of pfns `[base, base + len)` as bits.
struct Bits {
    base: u64,
    words: Vec<u64>,
}

impl Bits {
    fn new(base: u64, len: u64) -> Bits {
        Bits {
            base,
            words: vec![0; len.div_ceil(64) as usize + 1],
        }
    }

    fn set(&mut self, pfn: u64, n: u64) {
        for p in pfn - self.base..pfn - self.base + n {
            self.words[(p / 64) as usize] |= 1 << (p % 64);
        }
    }

    /// How many of `[pfn, pfn + n)` are set (`pfn` aligned to `n`, a
    /// power of two, as every block is).
    fn count(&self, pfn: u64, n: u64) -> u64 {
        let Some(p) = pfn.checked_sub(self.base) else {
            return 0;
        };
        if n < 64 {
            let word = self.words.get((p / 64) as usize).copied().unwrap_or(0);
            let mask = (u64::MAX >> (64 - n)) << (p % 64);
            return u64::from((word & mask).count_ones());
        }
        let first = (p / 64) as usize;
        let last = ((p + n) / 64) as usize;
        self.words
            .get(first..last.min(self.words.len()))
            .map_or(0, |w| w.iter().map(|w| u64::from(w.count_ones())).sum())
    }
}

/// One zone's plan: pageblock migratetypes and free blocks, by pfn.
struct Plan {
    zid: ZoneId,
    migratetypes: Vec<(Pfn, Migratetype)>,
    free: Vec<(Pfn, Order)>,
}

impl<M: BuddyModel, V: Variant> Allocator<M, V> {
    /// Rebuilds a fresh allocator's free lists to the state `target`
    /// counts (see the module doc), placing the blocks from `seed`;
    /// returns the allocated blocks (`(head, order)`, each ready for a
    /// free). On error the free lists are as they were (a deferred zone
    /// grown to the target's pageblocks stays grown). A capped count is refused:
    /// [`Allocator::set_start_state_with`] works it out from a buddyinfo.
    pub fn set_start_state(
        &mut self,
        target: &PageTypeInfo,
        seed: u64,
    ) -> Result<Vec<(Pfn, Order)>, StartStateError> {
        self.set_start_state_with(target, None, seed)
    }

    /// [`Allocator::set_start_state`] with `buddyinfo`, read at the same
    /// moment as `target`, to work out the counts the kernel capped (see
    /// the module doc).
    pub fn set_start_state_with(
        &mut self,
        target: &PageTypeInfo,
        buddyinfo: Option<&BuddyInfo>,
        seed: u64,
    ) -> Result<Vec<(Pfn, Order)>, StartStateError> {
        let target = &uncap(target, buddyinfo)?;
        self.grow_deferred_zones(target);
        let fresh = self.pagetypeinfo();
        if self
            .zones
            .iter()
            .any(|z| z.nr_free_pages() != z.managed_pages())
        {
            return Err(StartStateError::NotFresh);
        }
        if self.zones.iter().any(|z| !z.free_area.lock().migratetypes) {
            return Err(StartStateError::NoMigratetypes);
        }
        if target.pageblock_order != fresh.pageblock_order {
            return Err(StartStateError::PageblockOrder {
                target: target.pageblock_order,
                model: fresh.pageblock_order,
            });
        }
        let missing = |z: &ZoneTypes, missing_in| StartStateError::Zones {
            node: z.node,
            zone: z.zone.clone(),
            missing_in,
        };
        if let Some(z) = fresh
            .zones
            .iter()
            .find(|m| !target.zones.iter().any(|t| same(m, t)))
        {
            return Err(missing(z, "target"));
        }
        let mut plans = Vec::new();
        for t in &target.zones {
            let m = fresh
                .zones
                .iter()
                .find(|m| same(m, t))
                .ok_or_else(|| missing(t, "model"))?;
            plans.push(self.plan_zone(t, m, seed)?);
        }
        let mut allocated = Vec::new();
        for plan in plans {
            let zone = &mut self.zones[plan.zid.index()];
            let before = zone.nr_free_pages();
            allocated.extend(zone.rebuild_free_lists(&self.model, &plan.migratetypes, &plan.free));
            if self.path.watermarks {
                zone.mod_free_pages(zone.nr_free_pages() as i64 - before as i64);
            }
        }
        Ok(allocated)
    }

    /// Grows each zone still in deferred init until it counts the
    /// target's pageblocks, and then works the watermarks and per-CPU
    /// sizes out again from the grown managed pages (see the module doc).
    fn grow_deferred_zones(&mut self, target: &PageTypeInfo) {
        let managed = self.managed_pages_total();
        for t in &target.zones {
            let zid = self
                .zones
                .iter()
                .find(|z| u32::from(z.node.get()) == t.node && z.kind.name() == t.zone)
                .map(|z| z.id);
            if let Some(zid) = zid {
                self.deferred_grow_zone_to(zid, t.blocks.iter().sum());
            }
        }
        if self.managed_pages_total() != managed {
            self.setup_watermarks_and_pcp();
        }
    }

    /// Plans one zone (`m` is the fresh model's view of it).
    fn plan_zone(&self, t: &ZoneTypes, m: &ZoneTypes, seed: u64) -> Result<Plan, StartStateError> {
        let shape = |what: String| StartStateError::Shape {
            node: t.node,
            zone: t.zone.clone(),
            what,
        };
        let (tb, mb) = (t.blocks.iter().sum::<u64>(), m.blocks.iter().sum::<u64>());
        if tb != mb {
            return Err(shape(format!("{tb} pageblocks, the model's zone has {mb}")));
        }
        if t.free[0].len() != m.free[0].len() {
            return Err(shape(format!(
                "orders 0..{}, the model's 0..{}",
                t.free[0].len(),
                m.free[0].len()
            )));
        }
        let zone = self
            .zones
            .iter()
            .find(|z| u32::from(z.node.get()) == t.node && z.kind.name() == t.zone)
            .expect("the model's view names its own zones");
        foreign_free_blocks(t, self.model.geometry().pageblock_nr_pages())?;
        let mut last = None;
        for attempt in 0..PLACEMENT_ATTEMPTS {
            let mut placer = Placer::new(self, zone.id, zone.start, zone.end, seed, attempt);
            match placer.assign(t).and_then(|()| placer.place(t)) {
                Ok(()) => {
                    return Ok(Plan {
                        zid: zone.id,
                        migratetypes: placer.migratetypes(),
                        free: placer.placed(),
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("at least one attempt"))
    }
}

/// `target` with every capped count worked out from `buddyinfo`: the
/// order's `nr_free` less the other migratetypes' counts.
fn uncap(
    target: &PageTypeInfo,
    buddyinfo: Option<&BuddyInfo>,
) -> Result<PageTypeInfo, StartStateError> {
    let mut out = target.clone();
    for t in &mut out.zones {
        for order in 0..t.free[0].len() {
            let capped: Vec<usize> = (0..t.free.len())
                .filter(|&mt| t.free[mt][order] >= FREECOUNT_CAP)
                .collect();
            let refuse = |why| StartStateError::Capped {
                node: t.node,
                zone: t.zone.clone(),
                order,
                why,
            };
            let &[mt] = capped.as_slice() else {
                if capped.is_empty() {
                    continue;
                }
                return Err(refuse("so is another migratetype's at that order"));
            };
            let nr_free = buddyinfo
                .ok_or_else(|| refuse("no buddyinfo to work it out from"))?
                .zones
                .iter()
                .find(|b| (b.node, &b.zone) == (t.node, &t.zone))
                .and_then(|b| b.nr_free.get(order).copied())
                .ok_or_else(|| refuse("the buddyinfo has no such zone and order"))?;
            let others: u64 = (0..t.free.len())
                .filter(|&m| m != mt)
                .map(|m| t.free[m][order])
                .sum();
            t.free[mt][order] = nr_free
                .checked_sub(others)
                .filter(|&n| n >= FREECOUNT_CAP)
                .ok_or_else(|| {
                    refuse("the buddyinfo's count leaves it under the cap (another moment)")
                })?;
        }
    }
    Ok(out)
}

/// Refuses a zone whose free pages all fit in its pageblocks but not each
/// migratetype's in its own: no placement can keep every free block on
/// its pageblock's list (see [`StartStateError::ForeignFreeBlocks`]).
fn foreign_free_blocks(t: &ZoneTypes, pageblock_pages: u64) -> Result<(), StartStateError> {
    let free_pages = |mt: Migratetype| -> u64 {
        t.free[mt.index()]
            .iter()
            .enumerate()
            .map(|(order, &n)| n.saturating_mul(1 << order))
            .fold(0, u64::saturating_add)
    };
    let room = |mt: Migratetype| t.blocks[mt.index()].saturating_mul(pageblock_pages);
    let sum = |f: &dyn Fn(Migratetype) -> u64| -> u64 {
        Migratetype::ALL
            .into_iter()
            .map(f)
            .fold(0, u64::saturating_add)
    };
    let (total, zone_room) = (sum(&free_pages), sum(&room));
    match Migratetype::ALL
        .into_iter()
        .find(|&mt| free_pages(mt) > room(mt))
    {
        Some(mt) if total <= zone_room => Err(StartStateError::ForeignFreeBlocks {
            node: t.node,
            zone: t.zone.clone(),
            mt,
            free_pages: free_pages(mt),
            pageblocks: t.blocks[mt.index()],
            room: room(mt),
        }),
        _ => Ok(()),
    }
}

fn same(a: &ZoneTypes, b: &ZoneTypes) -> bool {
    (a.node, &a.zone) == (b.node, &b.zone)
}

/// The placement of one zone's blocks (steps 1–4 of the module doc).
struct Placer {
    rng: SplitMix,
    /// `pageblock_order`, `MAX_PAGE_ORDER`.
    pb_order: u32,
    max_order: u32,
    /// Pages free today (the memory a plan may use).
    avail: Bits,
    /// Pages of the planned free blocks.
    free: Bits,
    /// The pageblocks pagetypeinfo counts: base pfn and migratetype.
    blocks: Vec<(u64, Option<Migratetype>)>,
    placed: Vec<(Pfn, Order)>,
    node: u32,
    zone: String,
}

impl Placer {
    fn new<M: BuddyModel, V: Variant>(
        alloc: &Allocator<M, V>,
        zid: ZoneId,
        start: Pfn,
        end: Pfn,
        seed: u64,
        attempt: u64,
    ) -> Placer {
        let g = alloc.model.geometry();
        let pb = g.pageblock_nr_pages();
        let base = start.get() & !(pb - 1);
        let mut avail = Bits::new(base, end.get() - base + pb);
        for (pfn, order) in alloc.free_blocks(zid) {
            avail.set(pfn.get(), order.nr_pages());
        }
        let mut blocks = Vec::new();
        let mut pfn = start.get();
        while pfn < end.get() {
            if alloc.counts_pageblock(zid, Pfn::new(pfn)) {
                blocks.push((pfn & !(pb - 1), None));
            }
            pfn += pb;
        }
        let zone = &alloc.zones[zid.index()];
        Placer {
            rng: SplitMix(seed ^ u64::from(zid.get()) << 32 ^ attempt << 40),
            pb_order: u32::from(g.pageblock_order().get()),
            max_order: u32::from(zone.max_order().get()),
            free: Bits::new(base, end.get() - base + pb),
            avail,
            blocks,
            placed: Vec::new(),
            node: u32::from(zone.node.get()),
            zone: zone.kind.name().to_owned(),
        }
    }

    fn cannot_fit(&self, mt: Migratetype, order: u32, placed: u64, wanted: u64) -> StartStateError {
        StartStateError::CannotFit {
            node: self.node,
            zone: self.zone.clone(),
            mt,
            order: Order::new(order as u8),
            placed,
            wanted,
        }
    }

    /// Steps 2 and 3: the max-order blocks' groups, then every other
    /// pageblock, get their migratetypes; the max-order blocks are placed.
    fn assign(&mut self, t: &ZoneTypes) -> Result<(), StartStateError> {
        let max = self.max_order;
        let per_group = 1usize << max.saturating_sub(self.pb_order);
        let pages = 1u64 << max;
        // Groups: indices into `blocks` of aligned runs wholly free today.
        let mut groups: Vec<usize> = (0..self.blocks.len())
            .filter(|&i| {
                let base = self.blocks[i].0;
                base.is_multiple_of(pages)
                    && self.blocks.get(i + per_group - 1).map(|b| b.0)
                        == Some(base + pages - (pages / per_group as u64))
                    && self.avail.count(base, pages) == pages
            })
            .collect();
        self.rng.shuffle(&mut groups);
        let mut groups = groups.into_iter();
        let mut left = t.blocks;
        for mt in Migratetype::ALL {
            let wanted = t.free[mt.index()][max as usize];
            for n in 0..wanted {
                let fits = left[mt.index()] >= per_group as u64;
                let Some(i) = groups.next().filter(|_| fits) else {
                    return Err(self.cannot_fit(mt, max, n, wanted));
                };
                left[mt.index()] -= per_group as u64;
                for b in &mut self.blocks[i..i + per_group] {
                    b.1 = Some(mt);
                }
                let base = self.blocks[i].0;
                self.free.set(base, pages);
                self.placed.push((Pfn::new(base), Order::new(max as u8)));
            }
        }
        let mut rest: Vec<usize> = (0..self.blocks.len())
            .filter(|&i| self.blocks[i].1.is_none())
            .collect();
        self.rng.shuffle(&mut rest);
        let mut rest = rest.into_iter();
        for mt in Migratetype::ALL {
            for i in rest.by_ref().take(left[mt.index()] as usize) {
                self.blocks[i].1 = Some(mt);
            }
        }
        debug_assert!(self.blocks.iter().all(|b| b.1.is_some()));
        Ok(())
    }

    /// Step 4: orders below the maximum, first fit in each migratetype's
    /// pageblocks (in shuffled order, as `assign` left them).
    fn place(&mut self, t: &ZoneTypes) -> Result<(), StartStateError> {
        let mut order_of_blocks: Vec<usize> = (0..self.blocks.len()).collect();
        self.rng.shuffle(&mut order_of_blocks);
        let pb_pages = 1u64 << self.pb_order;
        for order in (0..self.max_order).rev() {
            let pages = 1u64 << order;
            for mt in Migratetype::ALL {
                let wanted = t.free[mt.index()][order as usize];
                let mut placed = 0;
                let bases: Vec<u64> = order_of_blocks
                    .iter()
                    .map(|&i| self.blocks[i])
                    .filter(|&(base, m)| m == Some(mt) && base.is_multiple_of(pages))
                    .map(|(base, _)| base)
                    .collect();
                'blocks: for base in bases {
                    for pfn in (base..base + pb_pages.max(pages)).step_by(pages as usize) {
                        if placed == wanted {
                            break 'blocks;
                        }
                        if self.fits(pfn, order, mt) {
                            self.free.set(pfn, pages);
                            self.placed.push((Pfn::new(pfn), Order::new(order as u8)));
                            placed += 1;
                        }
                    }
                }
                if placed < wanted {
                    return Err(self.cannot_fit(mt, order, placed, wanted));
                }
            }
        }
        Ok(())
    }

    /// Whether a free block of `order` may go at `pfn`: free today, no
    /// planned free page in it or in its buddy, and every pageblock it
    /// covers of `mt`.
    fn fits(&self, pfn: u64, order: u32, mt: Migratetype) -> bool {
        let pages = 1u64 << order;
        if self.avail.count(pfn, pages) != pages || self.free.count(pfn, pages) != 0 {
            return false;
        }
        if self.free.count(pfn ^ pages, pages) != 0 {
            return false;
        }
        order <= self.pb_order || {
            let pb = 1u64 << self.pb_order;
            (pfn..pfn + pages).step_by(pb as usize).all(|b| {
                self.blocks
                    .binary_search_by_key(&b, |x| x.0)
                    .is_ok_and(|i| self.blocks[i].1 == Some(mt))
            })
        }
    }

    fn migratetypes(&self) -> Vec<(Pfn, Migratetype)> {
        self.blocks
            .iter()
            .map(|&(b, mt)| (Pfn::new(b), mt.unwrap_or(Migratetype::Movable)))
            .collect()
    }

    /// The planned free blocks, by pfn.
    fn placed(&self) -> Vec<(Pfn, Order)> {
        let mut v = self.placed.clone();
        v.sort_unstable();
        v
    }
}
