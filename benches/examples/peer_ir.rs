//! One `bench peers` workload, once, on pfnlab, the floor or `frame-alloc`,
//! small enough to run under `valgrind --tool=callgrind`, which counts its
//! instructions repeatably where timings on a shared machine are not. The
//! workloads and the allocators are the peers' own (`pfnlab::workloads`,
//! the floor of `pfnlab::experiments::peers::floor`, the peer crate's
//! runner set-up, pfnlab with the bookkeeping only), so the counts are
//! those of the code `bench peers` times.
//!
//! ```sh
//! cargo build --release -p pfnlab --example peer_ir
//! valgrind --tool=callgrind target/release/examples/peer_ir pfnlab split flat 2.6.23 20000
//! benches/ir_accounting.py target/release/examples/peer_ir   # the table of docs/accounting.md
//! ```
//!
//! Arguments: contender (`pfnlab`, `floor` or `frame-alloc`, the peer
//! crate nearest pfnlab on the split-merge pair), workload (`hot`, `split`
//! or `burst`), model (default `flat`), era (default `2.6.23`, the
//! peers'), operations (default 100,000: pairs, or pages of 128-page
//! bursts). It prints the operations run and, for pfnlab's split-merge
//! pair, its splits and merges per pair (its zone statistics). Under
//! callgrind, subtract a run with fewer operations to leave out set-up.

use buddy::{AllocError, Era, Kernel, Mechanisms, Options};
use pfnlab::experiments::peers::floor::FloorBuddy;
use pfnlab::experiments::peers::whole_blocks;
use pfnlab::models::{Buildable, ModelKind, ModelVisitor, build_allocator, with_model};
use pfnlab::workloads::{Frames, bursts, frame_bursts, frame_pairs, pcp_pairs, zone_pairs};
use sparsemem::Layout;
use vmemmap::VmemmapOptions;

/// Pages per burst, as `bench peers` runs them.
const BURST: usize = 128;

/// Which workload.
#[derive(Clone, Copy)]
enum Work {
    Hot,
    Split,
    Burst,
}

struct Pfnlab {
    era: Era,
    work: Work,
    ops: u64,
}

impl ModelVisitor for Pfnlab {
    type Output = ();

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<(), AllocError> {
        // The peers' pfnlab: bookkeeping only.
        let alloc = build_allocator::<M, Kernel>(
            layout,
            options,
            Options {
                mechanisms: Mechanisms::BOOKKEEPING,
                ..Options::for_era(self.era)
            },
        )?;
        let node = layout.first_node();
        match self.work {
            Work::Split => {
                let before = alloc.stats_total();
                std::hint::black_box(zone_pairs(&alloc, node, self.ops));
                let after = alloc.stats_total();
                let per = |a: u64, b: u64| (a - b) as f64 / self.ops.max(1) as f64;
                println!(
                    "{} pairs; {:.2} splits and {:.2} merges per pair",
                    self.ops,
                    per(after.splits, before.splits),
                    per(after.merges, before.merges)
                );
            }
            Work::Hot => {
                let mut cpu = alloc.cpu_on(node)?;
                std::hint::black_box(pcp_pairs(&mut cpu, self.ops));
                println!("{} pairs", self.ops);
            }
            Work::Burst => {
                let mut cpu = alloc.cpu_on(node)?;
                let mut held = Vec::with_capacity(BURST);
                let rounds = self.ops / BURST as u64;
                std::hint::black_box(bursts(&mut cpu, rounds, BURST, &mut held));
                println!("{} pages", rounds * BURST as u64);
            }
        }
        Ok(())
    }
}

/// A frame allocator (the floor, or a peer crate) on the layout's whole
/// max-order blocks, as `bench peers` runs it: its hot pair with one frame
/// pinned, so the pinned frame's buddy is the only free order-0 frame; its
/// split-merge pairs and bursts with the frames `hold` keeps (a peer's
/// partly used max-order blocks), so that a pair splits a whole block.
fn frames<F: Frames>(mut frames: F, hold: impl FnOnce(&mut F) -> Vec<u64>, work: Work, ops: u64) {
    let _held: Vec<u64> = match work {
        Work::Hot => frames.alloc_frame().into_iter().collect(),
        Work::Split | Work::Burst => hold(&mut frames),
    };
    match work {
        Work::Hot | Work::Split => {
            std::hint::black_box(frame_pairs(&mut frames, ops));
            println!("{ops} pairs");
        }
        Work::Burst => {
            let mut held = Vec::with_capacity(BURST);
            let rounds = ops / BURST as u64;
            std::hint::black_box(frame_bursts(&mut frames, rounds, BURST, &mut held));
            println!("{} pages", rounds * BURST as u64);
        }
    }
}

/// The floor, as `bench peers` builds it.
fn floor(layout: &Layout, work: Work, ops: u64) -> Result<(), String> {
    let blocks = whole_blocks(layout).map_err(|e| e.to_string())?;
    let floor = FloorBuddy::new(&blocks).map_err(|e| e.to_string())?;
    // Every free block of the floor is whole: nothing to hold.
    frames(floor, |_| Vec::new(), work, ops);
    Ok(())
}

/// `frame-alloc`'s lock-free `SummaryBuddyAllocator`, as `bench peers`
/// builds it (the peer crate nearest pfnlab on the split-merge pair).
#[cfg(feature = "peers")]
fn frame_alloc(layout: &Layout, work: Work, ops: u64) -> Result<(), String> {
    use pfnlab::experiments::peers::crates::SummaryBuddy;
    use pfnlab::experiments::peers::hold_partial_blocks;
    let blocks = whole_blocks(layout).map_err(|e| e.to_string())?;
    let block_pages = blocks.geometry().max_order_nr_pages();
    let peer = SummaryBuddy::new(&blocks).map_err(|e| e.to_string())?;
    frames(peer, |f| hold_partial_blocks(f, block_pages), work, ops);
    Ok(())
}

/// Without the `peers` feature there is no peer crate to run.
#[cfg(not(feature = "peers"))]
fn frame_alloc(_: &Layout, _: Work, _: u64) -> Result<(), String> {
    Err("frame-alloc needs the `peers` feature".into())
}

fn main() {
    let mut args = std::env::args().skip(1);
    let fail = |what: String| -> ! {
        eprintln!("peer_ir: {what}");
        std::process::exit(2)
    };
    let contender = args.next().unwrap_or_else(|| "pfnlab".into());
    let work = match args.next().as_deref() {
        Some("hot") | None => Work::Hot,
        Some("split") => Work::Split,
        Some("burst") => Work::Burst,
        Some(w) => fail(format!("unknown workload `{w}` (hot, split, burst)")),
    };
    let model = args.next().unwrap_or_else(|| "flat".into());
    let model = ModelKind::parse(&model).unwrap_or_else(|e| fail(e.to_string()));
    let era = args.next().unwrap_or_else(|| "2.6.23".into());
    let era = Era::parse(&era).unwrap_or_else(|e| fail(e));
    let ops = match args.next().map(|a| a.parse()) {
        None => 100_000,
        Some(Ok(n)) => n,
        Some(Err(e)) => fail(format!("the operation count must be a number: {e}")),
    };
    let layout = Layout::preset("x86-pci-hole").unwrap_or_else(|e| fail(e.to_string()));
    let done = match contender.as_str() {
        "pfnlab" => {
            with_model(model, &layout, Pfnlab { era, work, ops }).map_err(|e| e.to_string())
        }
        "floor" => floor(&layout, work, ops),
        "frame-alloc" => frame_alloc(&layout, work, ops),
        other => fail(format!(
            "unknown contender `{other}` (pfnlab, floor, frame-alloc)"
        )),
    };
    if let Err(e) = done {
        fail(e);
    }
}
