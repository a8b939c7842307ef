//! The peers' hot pair alone: order-0 alloc+free through one per-CPU
//! handle, bookkeeping only, on one model and era. Small enough to run
//! under `valgrind --tool=callgrind`, which counts the pair's instructions
//! repeatably where timings on a shared machine are not:
//!
//! ```sh
//! cargo build --release --example hot_pair
//! valgrind --tool=callgrind target/release/examples/hot_pair flat 2.6.23 1000000
//! target/release/examples/hot_pair flat 2.6.23 100000000   # ns and cycles
//! ```
//!
//! Arguments: model (default `flat`), era (default `2.6.23`, the peers'),
//! pairs (default 10,000,000), `struct page` size (default 64; 32 runs
//! the flat model with Wilcox's 32-byte layout). Under callgrind, subtract a run with fewer
//! pairs to leave out set-up: the difference over the difference in pairs
//! is instructions per pair.

use buddy::{AllocError, Allocator, BuddyModel, Era, Kernel, Mechanisms, Options};
use pfnlab::models::{Buildable, ModelKind, ModelVisitor, build_allocator, with_model};
use pfnlab::timing::{Plan, measure};
use pfnlab::workloads::pcp_pairs;
use sparsemem::{Flat, Layout, Page32};
use vmemmap::VmemmapOptions;

struct HotPair {
    era: Era,
    pairs: u64,
}

impl ModelVisitor for HotPair {
    type Output = ();

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<(), AllocError> {
        let alloc = build_allocator::<M, Kernel>(layout, options, self.options())?;
        self.run(&alloc, layout)
    }
}

impl HotPair {
    fn options(&self) -> Options {
        Options {
            mechanisms: Mechanisms::BOOKKEEPING,
            ..Options::for_era(self.era)
        }
    }

    fn run<M: BuddyModel>(
        self,
        alloc: &Allocator<M, Kernel>,
        layout: &Layout,
    ) -> Result<(), AllocError> {
        let mut cpu = alloc.cpu_on(layout.first_node())?;
        let pairs = self.pairs;
        let m = measure(Plan::FULL.trials, || {
            std::hint::black_box(pcp_pairs(&mut cpu, pairs));
            pairs
        });
        println!(
            "{} pairs × {} trials: median {:.2} ns, {:.1} TSC cycles per pair",
            pairs,
            Plan::FULL.trials,
            m.ns_per_op.median,
            m.cycles_per_op.median
        );
        Ok(())
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let fail = |what: String| -> ! {
        eprintln!("hot_pair: {what}");
        std::process::exit(2)
    };
    let model = args.next().unwrap_or_else(|| "flat".into());
    let model = ModelKind::parse(&model).unwrap_or_else(|e| fail(e.to_string()));
    let era = args.next().unwrap_or_else(|| "2.6.23".into());
    let era = Era::parse(&era).unwrap_or_else(|e| fail(e));
    let pairs = match args.next().map(|a| a.parse()) {
        None => 10_000_000,
        Some(Ok(n)) => n,
        Some(Err(e)) => fail(format!("the pair count must be a number: {e}")),
    };
    let size = match args.next().map(|a| a.parse()) {
        None => 64,
        Some(Ok(n @ (64 | 32))) => n,
        Some(_) => fail("the size must be 64 or 32 (the allocator's layouts)".into()),
    };
    let layout = Layout::preset("x86-pci-hole").unwrap_or_else(|e| fail(e.to_string()));
    let hot = HotPair { era, pairs };
    let done = if size == 64 {
        with_model(model, &layout, hot)
    } else if model != ModelKind::Flat {
        fail("a 32-byte struct page is run on the flat model only".into())
    } else {
        let flat = Flat::<Page32>::build(&layout).unwrap_or_else(|e| fail(e.to_string()));
        Allocator::<_, Kernel>::new(flat, &layout, hot.options())
            .map_err(AllocError::from)
            .and_then(|alloc| hot.run(&alloc, &layout))
    };
    if let Err(e) = done {
        fail(e.to_string());
    }
}
