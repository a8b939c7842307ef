//! The `MIGRATE_HIGHATOMIC` reserve, worked by hand on one 256 MiB zone
//! (65,536 pages, 128 pageblocks of 512): a high-order atomic request in
//! the slow path reserves its pageblock, only atomic requests take from
//! it, the zone stops at its limit (6.18: 1 % rounded up to a pageblock,
//! 1,024 pages; 5.13: 1 % plus a pageblock, 1,167), and a request that may
//! reclaim gives the reserve back when it is all that stands between it
//! and failure.
//!
//! `watermark_scale_factor` 1000 puts `low` 6,553 pages above `min` (512),
//! so a zone filled down to `low` has room for every step on the slow
//! path, where the reserve lives.

use buddy::testing::{Reference, check_conservation};
use buddy::{Allocator, Era, Gfp, Kernel, Options, RequestError, Sysctls};
use sparsemem::{
    Geometry, Layout, MemRange, MemoryModel, Migratetype, NodeId, Order, Pfn, RangeKind,
    SparseExtreme,
};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const PAGEBLOCK: u64 = 512;

struct Lab {
    alloc: Allocator<SparseExtreme, Kernel>,
    layout: Layout,
    held: Vec<(Pfn, Order)>,
}

impl Lab {
    /// The zone, filled with movable pages down to its low watermark.
    fn filled(era: Era) -> Lab {
        let layout = Layout::new(
            Geometry::X86_64,
            vec![MemRange::new(
                4 * GIB,
                4 * GIB + 256 * MIB,
                RangeKind::Ram,
                0,
            )],
            "256m",
        )
        .unwrap();
        let options = Options {
            sysctls: Sysctls {
                min_free_kbytes: Some(2048),
                watermark_scale_factor: 1000,
                ..Sysctls::default()
            },
            ..Options::for_era(era)
        };
        let alloc = Allocator::new(SparseExtreme::new(&layout).unwrap(), &layout, options).unwrap();
        let mut lab = Lab {
            alloc,
            layout,
            held: Vec::new(),
        };
        let marks = lab.zone().watermarks();
        assert_eq!((marks.min, marks.low), (512, 512 + 6553));
        while lab.zone().nr_free_pages_state() > marks.low + 4 * 1024 {
            lab.alloc(10, Gfp::HIGHUSER_MOVABLE).unwrap();
        }
        while lab.zone().nr_free_pages_state() > marks.low {
            lab.alloc(0, Gfp::HIGHUSER_MOVABLE).unwrap();
        }
        lab
    }

    fn zone(&self) -> &buddy::Zone<Kernel> {
        &self.alloc.zones()[0]
    }

    fn alloc(&mut self, order: u8, gfp: Gfp) -> Result<Pfn, RequestError> {
        let pfn = self
            .alloc
            .alloc_pages(Order::new(order), gfp, NodeId::ZERO, None)?;
        self.held.push((pfn, Order::new(order)));
        Ok(pfn)
    }

    fn free(&mut self, pfn: Pfn) {
        let i = self.held.iter().position(|&(p, _)| p == pfn).unwrap();
        let (_, order) = self.held.swap_remove(i);
        self.alloc.free_pages(pfn, order).unwrap();
    }

    /// Order-0 GFP_KERNEL pages until refused.
    fn drain_kernel(&mut self) {
        while self.alloc(0, Gfp::KERNEL).is_ok() {}
    }

    fn mt(&self, pfn: Pfn) -> Migratetype {
        self.alloc.model().get_pfnblock_migratetype(pfn)
    }

    fn reserved(&self) -> (u64, u64) {
        (
            self.zone().nr_reserved_highatomic(),
            self.zone().nr_free_highatomic(),
        )
    }

    fn check(&self) {
        let mut reference = Reference::default();
        for &(pfn, order) in &self.held {
            reference.record(&self.layout, pfn, order).unwrap();
        }
        check_conservation(&self.alloc, 0, &reference).unwrap();
    }
}

fn same_pageblock(a: Pfn, b: Pfn) -> bool {
    a.get() / PAGEBLOCK == b.get() / PAGEBLOCK
}

/// Steps 1–5 of the sequence, the same in both eras up to the limit:
/// returns the first reserved pageblock's atomic blocks and the zone's
/// state after the limit is met.
fn reserve_up_to_the_limit(lab: &mut Lab) -> [Pfn; 4] {
    // 1. An order-8 GFP_ATOMIC request fails the low watermark, passes the
    // slow path's: it steals a free order-10 block for Unmovable, takes
    // its first 256 pages, and reserves that pageblock, whose other free
    // half moves to the HighAtomic list.
    let a1 = lab.alloc(8, Gfp::ATOMIC).unwrap();
    assert_eq!(lab.mt(a1), Migratetype::HighAtomic);
    assert_eq!(lab.reserved(), (PAGEBLOCK, 256));
    lab.check();

    // 2. GFP_KERNEL of the same order: not from the reserve (the
    // pageblock beside it, still Unmovable), and nothing reserved.
    let k1 = lab.alloc(8, Gfp::KERNEL).unwrap();
    assert_eq!(lab.mt(k1), Migratetype::Unmovable);
    assert_eq!(lab.reserved(), (PAGEBLOCK, 256));

    // 3. The next atomic request takes the reserve first; its pageblock is
    // HighAtomic already, so nothing more is reserved.
    let a2 = lab.alloc(8, Gfp::ATOMIC).unwrap();
    assert!(same_pageblock(a1, a2), "{a1} {a2}");
    assert_eq!(lab.reserved(), (PAGEBLOCK, 0));

    // 4. The reserve is empty: the next one comes from k1's pageblock,
    // which becomes the second reserved (the limit not yet met).
    let a3 = lab.alloc(8, Gfp::ATOMIC).unwrap();
    assert!(same_pageblock(a3, k1), "{a3} {k1}");
    assert_eq!(lab.mt(k1), Migratetype::HighAtomic);
    assert_eq!(lab.reserved(), (2 * PAGEBLOCK, 0));
    lab.check();

    // 5. Another one, from a block stolen anew.
    let a4 = lab.alloc(8, Gfp::ATOMIC).unwrap();
    assert!(!same_pageblock(a4, a1) && !same_pageblock(a4, k1));
    [a1, a2, k1, a4]
}

#[test]
fn the_618_reserve_is_taken_limited_and_given_back_under_pressure() {
    let mut lab = Lab::filled(Era::V6_18);
    let [a1, a2, k1, a4] = reserve_up_to_the_limit(&mut lab);
    // 6.18's limit: 655 pages (1 %) rounded up to a pageblock, met.
    assert_eq!(lab.mt(a4), Migratetype::Unmovable, "the limit is met");
    assert_eq!(lab.reserved(), (2 * PAGEBLOCK, 0));

    // A non-blocking request without __GFP_HIGH may count the reserve in
    // its watermark (ALLOC_RESERVES) but does not take from it while its
    // own lists serve it.
    let nowait = lab.alloc(0, Gfp::NOWAIT).unwrap();
    assert_ne!(lab.mt(nowait), Migratetype::HighAtomic);

    // a2 freed goes back to the reserve's list: a free finds its list by
    // its pageblock.
    lab.free(a2);
    assert_eq!(lab.reserved(), (2 * PAGEBLOCK, 256));
    lab.check();
    // The watermark of a request without ALLOC_RESERVES does not count
    // those 256 pages (6.13: the reserve's free pages, not all of it).
    let free = lab.zone().nr_free_pages_state();
    let ok = |mark| {
        lab.zone()
            .zone_watermark_ok(Order::ZERO, mark, buddy::ZoneType::Normal)
    };
    assert!(ok(free - 257) && !ok(free - 256));

    // Pressure: GFP_KERNEL order 0 until refused. The watermark hides the
    // reserve's 256 free pages; when only they are left above `min`, the
    // request gives back one reserved pageblock (keeping the zone's last
    // one), as a direct reclaim that found nothing would, and goes on.
    lab.drain_kernel();
    assert_eq!(
        lab.mt(a1),
        Migratetype::Unmovable,
        "given back to the requester's type"
    );
    assert_eq!(lab.reserved(), (PAGEBLOCK, 0));
    assert_eq!(lab.zone().nr_free_pages(), lab.zone().watermarks().min);
    lab.check();

    // The last pageblock goes too once it has free pages and nothing else
    // is left (`should_reclaim_retry`'s forced unreserve before the OOM).
    let a3 = lab
        .held
        .iter()
        .find(|&&(p, _)| same_pageblock(p, k1) && p != k1)
        .unwrap()
        .0;
    lab.free(a3);
    lab.free(k1);
    assert_eq!(
        lab.reserved(),
        (PAGEBLOCK, PAGEBLOCK),
        "k1 and a3 merged on the reserve's list"
    );
    lab.drain_kernel();
    assert_eq!(lab.reserved(), (0, 0));
    assert_eq!(lab.mt(k1), Migratetype::Unmovable);
    assert_eq!(lab.zone().nr_free_pages(), lab.zone().watermarks().min);
    lab.check();
}

#[test]
fn the_513_reserve_has_its_own_limit_and_watermark() {
    let mut lab = Lab::filled(Era::V5_13);
    let [_, _, _, a4] = reserve_up_to_the_limit(&mut lab);
    // 5.13's limit is 1 % plus one pageblock (1,167 pages): at 1,024 a
    // third pageblock is still reserved.
    assert_eq!(lab.mt(a4), Migratetype::HighAtomic);
    assert_eq!(lab.reserved(), (3 * PAGEBLOCK, 256));
    let a5 = lab.alloc(8, Gfp::ATOMIC).unwrap();
    assert!(same_pageblock(a5, a4), "from the third pageblock's reserve");
    let a6 = lab.alloc(8, Gfp::ATOMIC).unwrap();
    assert_ne!(lab.mt(a6), Migratetype::HighAtomic, "the limit is met");
    assert_eq!(lab.reserved(), (3 * PAGEBLOCK, 0));
    lab.check();

    // 5.13 hides every reserved page from a request without
    // ALLOC_HARDER, free or not: with none of the reserve free, movable
    // requests still stop 1,536 pages above `min` (6.18 would go to
    // `min`), and giving back finds no free reserved block to give.
    let min = lab.zone().watermarks().min;
    while lab.alloc(0, Gfp::HIGHUSER_MOVABLE).is_ok() {}
    assert_eq!(lab.zone().nr_free_pages(), min + 3 * PAGEBLOCK);
    assert_eq!(lab.reserved(), (3 * PAGEBLOCK, 0));
    lab.check();
}
