//! The per-CPU drain of the releases between 5.13 and 6.7: 5.14's
//! `free_factor` (a drain at `high` frees `batch << free_factor`, the
//! factor growing with each drain and halved by each allocation) and
//! 5.18's `free_high` (a high-order free while frees dominate empties the
//! lists), with 6.7's `PCPF_FREE_HIGH_BATCH`; and every era conserving
//! pages through its lists.

use buddy::testing::{Reference, check_conservation};
use buddy::{Allocator, Era, Gfp, Kernel, Options, ZoneId};
use sparsemem::{Layout, MemRange, NodeId, Order, Pfn, RangeKind, SparseExtreme};

const BATCH: u32 = 8;
const DMA32: ZoneId = ZoneId::new(1);

/// 0–16 MiB (DMA) and 16–64 MiB (DMA32) on node 0, one CPU.
fn allocator(era: Era) -> Allocator<SparseExtreme, Kernel> {
    let layout = Layout::new(
        sparsemem::Geometry::X86_64,
        vec![MemRange::new(0, 64 << 20, RangeKind::Ram, 0)],
        "two zones",
    )
    .unwrap();
    let options = Options {
        pcp_batch: Some(BATCH),
        cpus: Some(1),
        ..Options::for_era(era)
    };
    Allocator::new(SparseExtreme::new(&layout).unwrap(), &layout, options).unwrap()
}

/// The pages each drain freed while `pfns` are freed one by one.
fn drains(cpu: &mut buddy::PerCpu<'_, SparseExtreme, Kernel>, pfns: &[Pfn]) -> Vec<u64> {
    let mut out = Vec::new();
    for &pfn in pfns {
        let before = cpu.count(DMA32);
        cpu.free(pfn).unwrap();
        let after = cpu.count(DMA32);
        if after <= before {
            out.push(before + 1 - after);
        }
    }
    out
}

/// 5.14 on: each drain frees twice the last, `batch` first, until that
/// would leave fewer than `batch` pages; 5.13 frees `batch` every time.
#[test]
fn free_factor_doubles_each_drain_until_high_less_batch() {
    for era in [Era::V5_13, Era::V5_15] {
        let alloc = allocator(era);
        let high = u64::from(alloc.zone(DMA32).unwrap().high());
        let batch = u64::from(BATCH);
        let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
        let held: Vec<Pfn> = (0..4 * high)
            .map(|_| cpu.alloc(Gfp::DMA32).unwrap())
            .collect();
        let freed = drains(&mut cpu, &held);
        assert!(freed.len() >= 3, "{era}: {freed:?}");
        if era == Era::V5_13 {
            assert!(freed.iter().all(|&n| n == batch), "{era}: {freed:?}");
            continue;
        }
        let mut want = batch;
        for &n in &freed {
            assert_eq!(n, want.min(high - batch), "{era}: {freed:?}");
            want *= 2;
        }
        // An allocation halves the factor: the next drain is half the last.
        let last = *freed.last().unwrap();
        let pfn = cpu.alloc(Gfp::DMA32).unwrap();
        let more: Vec<Pfn> = (0..high)
            .map(|_| cpu.alloc(Gfp::DMA32).unwrap())
            .chain([pfn])
            .collect();
        let next = drains(&mut cpu, &more);
        assert!(last > batch, "{era}: {freed:?}");
        assert_eq!(next[0], batch, "{era}: {next:?}");
    }
}

/// 5.18 on (6.1 here): an order-1 free after frees have drained, with no
/// allocation between, empties the lists; 5.15 lists it like any other.
#[test]
fn free_high_empties_the_lists_from_5_18() {
    for era in [Era::V5_15, Era::V6_1, Era::V6_6] {
        let alloc = allocator(era);
        let high = u64::from(alloc.zone(DMA32).unwrap().high());
        let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
        let pair = cpu.alloc_pages(Order::new(1), Gfp::DMA32).unwrap();
        let held: Vec<Pfn> = (0..2 * high)
            .map(|_| cpu.alloc(Gfp::DMA32).unwrap())
            .collect();
        // Free until the first drain, which leaves at most `high - batch`.
        let mut drained = false;
        for &pfn in &held {
            let before = cpu.count(DMA32);
            cpu.free(pfn).unwrap();
            if cpu.count(DMA32) <= before {
                drained = true;
                break;
            }
        }
        assert!(drained, "{era}: a drain");
        let before = cpu.count(DMA32);
        assert!(before + 2 < high, "{era}: {before} below high {high}");
        cpu.free_pages(pair, Order::new(1)).unwrap();
        let want = if era >= Era::V6_1 { 0 } else { before + 2 };
        assert_eq!(cpu.count(DMA32), want, "{era}");
    }
}

/// 6.7 on (6.12 here): once a `free_high` drain has emptied the lists, the
/// next order-1 free drains them again, unless the CPU's cache holds more
/// than three batches (`PCPF_FREE_HIGH_BATCH`): then it waits for a
/// `batch` on the lists. Eras before 6.7 have no flag to set.
#[test]
fn free_high_batch_holds_a_drain_back_below_a_batch() {
    assert!(
        !allocator(Era::V6_6)
            .cpu_on(NodeId::ZERO)
            .unwrap()
            .update_cacheinfo(1 << 30)
    );
    let batch_bytes = u64::from(BATCH) * 4096;
    for (slice, kept) in [(0, 0), (3 * batch_bytes, 0), (1 << 30, 2)] {
        let alloc = allocator(Era::V6_12);
        let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
        assert!(cpu.update_cacheinfo(slice));
        let pairs: Vec<Pfn> = (0..16)
            .map(|_| cpu.alloc_pages(Order::new(1), Gfp::DMA32).unwrap())
            .collect();
        // Free pairs until a `free_high` drain empties the lists.
        let mut rest = pairs.iter();
        let emptied = rest.by_ref().any(|&pfn| {
            cpu.free_pages(pfn, Order::new(1)).unwrap();
            cpu.count(DMA32) == 0
        });
        assert!(emptied, "slice {slice}: a free_high drain");
        let next = *rest.next().unwrap();
        cpu.free_pages(next, Order::new(1)).unwrap();
        assert_eq!(cpu.count(DMA32), kept, "slice {slice}");
    }
}

/// Every era's lists give back what they took: blocks of every order the
/// era lists, freed and drained, leave the zones as they were.
#[test]
fn every_era_conserves_pages_through_its_lists() {
    for era in Era::ALL {
        let alloc = allocator(era);
        let total = alloc.free_pages_total();
        let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
        let mut held = Vec::new();
        for round in 0..64u8 {
            let order = Order::new([0, 1, 2, 3, 0, 9][usize::from(round) % 6]);
            let gfp = if order.get() == 9 {
                Gfp::TRANSHUGE_LIGHT
            } else {
                Gfp::KERNEL
            };
            if let Ok(pfn) = cpu.alloc_pages(order, gfp) {
                held.push((pfn, order));
            }
            if round % 3 == 2
                && let Some((pfn, order)) = held.pop()
            {
                cpu.free_pages(pfn, order).unwrap();
            }
        }
        let listed = cpu.total_count();
        let reference = Reference::default();
        for (pfn, order) in held {
            cpu.free_pages(pfn, order).unwrap();
        }
        check_conservation(&alloc, cpu.total_count(), &reference)
            .unwrap_or_else(|e| panic!("{era}: {e} ({listed} listed)"));
        drop(cpu);
        assert_eq!(alloc.free_pages_total(), total, "{era}");
    }
}
