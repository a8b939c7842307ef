//! 6.7's tuning of `pcp->high` (the 6.18 era), followed step by step
//! against numbers worked out by hand from `nr_pcp_alloc`, `nr_pcp_high`,
//! `nr_pcp_free` and `decay_pcp_high`.
//!
//! The zone: 64 MiB of Normal (16,384 pages), one CPU. `min_free_kbytes`
//! = sqrt(16 × 65,536) = 1,024 KiB = 256 pages, so min 256, low 320, high
//! 384; `high_min` = low / 1 CPU = 320, `high_max` = 16,384 / 8 = 2,048.

use buddy::{Allocator, Era, Gfp, Kernel, Options, PerCpu, ZoneId};
use sparsemem::{Geometry, Layout, MemRange, NodeId, Order, Pfn, RangeKind, SparseExtreme};

const ZID: ZoneId = ZoneId::new(0);

/// One CPU's allocator, 6.18, on `bytes` of Normal memory at 4 GiB, with
/// the per-CPU `batch` given or the kernel's own.
fn one_cpu(bytes: u64, batch: Option<u32>) -> Allocator<SparseExtreme, Kernel> {
    let start = 4 << 30;
    let range = MemRange::new(start, start + bytes, RangeKind::Ram, 0);
    let layout = Layout::new(Geometry::X86_64, vec![range], "one zone").unwrap();
    let options = Options {
        cpus: Some(1),
        pcp_batch: batch,
        ..Options::for_era(Era::V6_18)
    };
    Allocator::new(SparseExtreme::new(&layout).unwrap(), &layout, options).unwrap()
}

fn allocator(batch: u32) -> Allocator<SparseExtreme, Kernel> {
    let alloc = one_cpu(64 << 20, Some(batch));
    let zone = &alloc.zones()[0];
    assert_eq!(zone.watermarks().high, 384);
    assert_eq!((zone.high(), zone.high_max()), (320, 2048));
    alloc
}

fn take(cpu: &mut PerCpu<'_, SparseExtreme, Kernel>, n: usize) -> Vec<Pfn> {
    (0..n)
        .map(|_| cpu.alloc(Gfp::KERNEL | Gfp::MOVABLE).unwrap())
        .collect()
}

/// Refills double and raise `high` by their size; frees below `high`
/// leave it; each vmstat tick takes an eighth off, draining what is above
/// it; at `high` a free drains `free_count` pages.
#[test]
fn high_follows_refills_frees_and_vmstat_ticks() {
    let alloc = allocator(4);
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    assert_eq!(cpu.high(ZID), 0, "BOOT_PAGESET_HIGH until first used");
    // Refills of 4 << alloc_factor: 4, 8, 16, 32, 64, then 128 twice
    // (alloc_factor stops at 5); high = 320 + the refills.
    let pages = take(&mut cpu, 253);
    let stats = alloc.stats_total();
    assert_eq!((stats.pcp_refills, stats.pcp_refill_blocks), (7, 380));
    assert_eq!((cpu.high(ZID), cpu.count(ZID)), (700, 127));
    for &p in &pages {
        cpu.free(p).unwrap();
    }
    assert_eq!((cpu.high(ZID), cpu.count(ZID)), (700, 380), "never at high");
    assert_eq!(alloc.stats_total().pcp_drains, 0);
    // max3(count − 128, high − high/8, 320), then drain to high.
    let ticks: Vec<(bool, u64, u64)> = (0..7)
        .map(|_| (cpu.vmstat_update(), cpu.high(ZID), cpu.count(ZID)))
        .collect();
    assert_eq!(
        ticks,
        [
            (true, 613, 380),
            (true, 537, 380),
            (true, 470, 380),
            (true, 412, 380),
            (true, 361, 361),
            (true, 320, 320),
            (false, 320, 320),
        ]
    );
    // An allocation halves free_count (128 → 64); its free makes it 65
    // and brings the lists to high: 65 + batch is below 320, so high
    // stays, and the drain is free_count's 65 pages.
    let p = take(&mut cpu, 1)[0];
    cpu.free(p).unwrap();
    assert_eq!((cpu.high(ZID), cpu.count(ZID)), (320, 255));
    assert_eq!(alloc.stats_total().pcp_drains, 3);
}

/// At `high`, a free raises it to `free_count + batch` when that is more,
/// and drains `free_count` pages, leaving `batch`.
#[test]
fn a_free_at_high_raises_it_to_free_count_plus_batch() {
    let alloc = allocator(16);
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    // Refills 16, 32, 64, 128, 256: 496 pages, all taken.
    let pages = take(&mut cpu, 496);
    assert_eq!((cpu.high(ZID), cpu.count(ZID)), (816, 0));
    let highs: Vec<u64> = (0..8)
        .map(|_| {
            cpu.vmstat_update();
            cpu.high(ZID)
        })
        .collect();
    assert_eq!(highs, [714, 625, 547, 479, 420, 368, 322, 320]);
    for &p in &pages[..319] {
        cpu.free(p).unwrap();
    }
    assert_eq!((cpu.high(ZID), cpu.count(ZID)), (320, 319));
    // The 320th free: free_count 320, so high = 336, and the drain is
    // clamp(320, 16, 320 − 16) = 304 pages.
    cpu.free(pages[319]).unwrap();
    assert_eq!((cpu.high(ZID), cpu.count(ZID)), (336, 16));
    for &p in &pages[320..] {
        cpu.free(p).unwrap();
    }
    assert_eq!((cpu.high(ZID), cpu.count(ZID)), (336, 192));
}

/// Below the zone's high watermark an allocation sets `ZONE_BELOW_HIGH`;
/// then refills do not raise `high`, each free lowers it by
/// `max(free_count, batch)` down to `high_min`, and the lists drain at
/// `high_min`; the drain that finds the zone above its high watermark
/// again clears the flag.
#[test]
fn below_the_high_watermark_high_falls_back_to_high_min() {
    let alloc = allocator(4);
    let zone = &alloc.zones()[0];
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let pages = take(&mut cpu, 253);
    assert_eq!(cpu.high(ZID), 700);
    let mut blocks = Vec::new();
    while zone.nr_free_pages_state() >= 384 {
        blocks.push(cpu.alloc_pages(Order::new(5), Gfp::KERNEL).unwrap());
    }
    assert!(
        zone.below_high(),
        "the allocation that found free < high set it"
    );
    // free_count 1, then 2: high falls by batch (4) each time.
    cpu.free(pages[0]).unwrap();
    assert_eq!(cpu.high(ZID), 696);
    cpu.free(pages[1]).unwrap();
    assert_eq!(cpu.high(ZID), 692);
    for b in blocks {
        cpu.free_pages(b, Order::new(5)).unwrap();
    }
    assert!(zone.below_high(), "only a per-CPU drain clears it");
    // Frees 3..=192 lower high to 320 without draining (count < 320); the
    // 193rd brings count to 320 and drains free_count (128) pages.
    for &p in &pages[2..193] {
        cpu.free(p).unwrap();
    }
    assert_eq!((cpu.high(ZID), cpu.count(ZID)), (320, 192));
    assert!(!zone.below_high(), "the drain found the zone above high");
    for &p in &pages[193..] {
        cpu.free(p).unwrap();
    }
    assert_eq!((cpu.high(ZID), cpu.count(ZID)), (320, 252));
    // Not below high any more: a refill raises high again.
    drop(cpu);
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    take(&mut cpu, 1);
    assert_eq!(cpu.high(ZID), 324);
}

/// A zone so small that `high_min` (its low watermark, held up by
/// `min_free_kbytes`' floor of 128 KiB) is above `high_max` (an eighth of
/// its pages). The kernel's `clamp()` then gives `high_max` for a `high`
/// at or above it and `high_min` below it; refills, frees and vmstat ticks
/// keep `high` at one of the two, and every page comes back.
#[test]
fn a_zone_whose_high_min_is_above_high_max_still_tunes_and_drains() {
    let alloc = one_cpu(512 << 10, None);
    let zone = &alloc.zones()[0];
    let (high_min, high_max) = (u64::from(zone.high()), u64::from(zone.high_max()));
    assert!(high_min > high_max, "{high_min} ≤ {high_max}");
    let free_before = zone.nr_free_pages_state();
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let mut seen = Vec::new();
    for round in 0..4 {
        let mut pages = Vec::new();
        while let Ok(p) = cpu.alloc(Gfp::KERNEL | Gfp::MOVABLE) {
            pages.push(p);
            seen.push(cpu.high(ZID));
            if pages.len() > 40 + round * 20 {
                break;
            }
        }
        for p in pages {
            cpu.free(p).unwrap();
            seen.push(cpu.high(ZID));
        }
        cpu.vmstat_update();
        seen.push(cpu.high(ZID));
    }
    assert!(
        seen.iter().all(|&h| h == high_min || h == high_max),
        "high left {{{high_min}, {high_max}}}: {seen:?}"
    );
    drop(cpu);
    assert_eq!(zone.nr_free_pages_state(), free_before);
}

/// `restore_high` puts a CPU's `high` where a machine's zoneinfo showed
/// it, clamped into `high_min..=high_max`, and tuning goes on from there;
/// an era whose `high` is the zone's refuses it. `pcp_blocks` counts this
/// CPU's own share of the zone's refill and drain blocks.
#[test]
fn a_restored_high_is_clamped_and_tuned_on_and_blocks_are_counted_per_cpu() {
    let alloc = allocator(4);
    let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
    let mut other = alloc.cpu_on(NodeId::ZERO).unwrap();
    assert!(cpu.restore_high(ZID, 1000));
    assert_eq!(cpu.high(ZID), 1000);
    assert!(cpu.restore_high(ZID, 1 << 20));
    assert_eq!(cpu.high(ZID), 2048, "high_max");
    assert!(cpu.restore_high(ZID, 3));
    assert_eq!(cpu.high(ZID), 320, "high_min");
    assert!(!cpu.restore_high(ZoneId::new(7), 1000), "no such zone");
    // Tuned on from the restored value: each refill raises it by its size.
    let pages = take(&mut cpu, 253);
    let (refilled, drained) = cpu.pcp_blocks();
    assert_eq!((refilled, drained), (380, 0));
    assert_eq!(cpu.high(ZID), 320 + 380);
    let theirs = take(&mut other, 3);
    assert_eq!(other.pcp_blocks(), (4, 0), "one refill of batch");
    let stats = alloc.stats_total();
    assert_eq!(stats.pcp_refill_blocks, 380 + 4, "the zone's, both CPUs'");
    for p in pages.into_iter().chain(theirs) {
        cpu.free(p).unwrap();
    }
    while cpu.vmstat_update() {}
    assert_eq!(cpu.pcp_blocks().1, alloc.stats_total().pcp_drain_blocks);
    // 5.13 sizes `high` from `batch`, the zone's: nothing to restore.
    let old = {
        let start = 4 << 30;
        let range = MemRange::new(start, start + (64 << 20), RangeKind::Ram, 0);
        let layout = Layout::new(Geometry::X86_64, vec![range], "one zone").unwrap();
        let options = Options::for_era(Era::V5_13);
        Allocator::<SparseExtreme, Kernel>::new(
            SparseExtreme::new(&layout).unwrap(),
            &layout,
            options,
        )
        .unwrap()
    };
    let mut cpu = old.cpu_on(NodeId::ZERO).unwrap();
    let high = cpu.high(ZID);
    assert!(!cpu.restore_high(ZID, 1000));
    assert_eq!(cpu.high(ZID), high);
}
