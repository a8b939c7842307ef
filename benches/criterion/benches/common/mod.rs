//! Shared by the criterion suites: a TSC-cycles measurement and the
//! layouts the suites share.
#![allow(dead_code)]

use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{Criterion, Throughput};
use pfnlab::timing::{tsc_start, tsc_stop};
use pfnlab::workloads::XorShift;
use sparsemem::{Geometry, Layout, MemRange, RangeKind};

/// Criterion measurement in TSC cycles (serialised reads).
pub struct TscCycles;

struct CyclesFormatter;

impl ValueFormatter for CyclesFormatter {
    fn scale_values(&self, _typical: f64, _values: &mut [f64]) -> &'static str {
        "cycles"
    }

    fn scale_throughputs(
        &self,
        _typical: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        if let Throughput::Elements(n) = throughput {
            for v in values.iter_mut() {
                *v /= *n as f64;
            }
            "cycles/elem"
        } else {
            "cycles"
        }
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "cycles"
    }
}

impl Measurement for TscCycles {
    type Intermediate = u64;
    type Value = u64;

    fn start(&self) -> u64 {
        tsc_start()
    }
    fn end(&self, i: u64) -> u64 {
        tsc_stop() - i
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &CyclesFormatter
    }
}

/// A criterion instance measuring TSC cycles.
pub fn cycles() -> Criterion<TscCycles> {
    Criterion::default()
        .with_measurement(TscCycles)
        .configure_from_args()
}

/// The models' bench layout: a 64 GiB span of 512 sections,
/// 384 of them (75 %) present, chosen by a seeded shuffle.
pub fn span_64g_75pct() -> Layout {
    let mut sections: Vec<u64> = (0..512).collect();
    let mut rng = XorShift(0x5eed);
    for i in (1..sections.len()).rev() {
        sections.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    let mut present: Vec<u64> = sections[..384].to_vec();
    present.sort_unstable();
    if !present.contains(&511) {
        present.pop();
        present.push(511);
    }
    let ranges = present
        .iter()
        .map(|&s| MemRange::new(s << 27, (s + 1) << 27, RangeKind::Ram, 0))
        .collect();
    Layout::new(Geometry::X86_64, ranges, "64g-75pct").expect("valid layout")
}

/// 64 GiB of RAM from pfn 0: 16M pages, 1 GiB of memmap.
pub fn ram_64g() -> Layout {
    Layout::new(
        Geometry::X86_64,
        vec![MemRange::new(0, 64 << 30, RangeKind::Ram, 0)],
        "64g",
    )
    .expect("valid layout")
}

/// Today's allocator (6.18) on a vmemmap table over `preset:x86-pci-hole`,
/// the suites' common subject.
pub fn pci_hole_allocator() -> buddy::Allocator<vmemmap::VmemmapTable, buddy::Kernel> {
    let layout = Layout::preset("x86-pci-hole").unwrap();
    buddy::Allocator::new(
        vmemmap::VmemmapTable::new(&layout).unwrap(),
        &layout,
        buddy::Options::default(),
    )
    .unwrap()
}
