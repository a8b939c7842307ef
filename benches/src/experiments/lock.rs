//! `lock`: zone-lock hold time in the per-CPU bulk paths (2007 proposal to
//! take `zone->lock` per page instead of across a batch). Batch threads
//! refill and drain large per-CPU batches; one thread makes single-page
//! requests on the zone path and records each request's latency.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use buddy::AllocError;
use buddy::{Gfp, Kernel, LockPolicy, Options};
use serde_json::json;
use sparsemem::{Layout, Order};
use vmemmap::VmemmapOptions;

use super::{Ctx, Outcome, cell};
use crate::CliError;
use crate::models::{Buildable, ModelVisitor, build_allocator};
use crate::report::Row;
use crate::timing::{Measurement, Plan, measure, tsc_hz, tsc_start, tsc_stop};

struct Visitor {
    plan: Plan,
    threads: usize,
    batch: u32,
    duration: Duration,
    era: buddy::Era,
}

/// Per policy: batch-thread cost per page, small-request latencies (ns).
type Results = Vec<(LockPolicy, Measurement, Vec<f64>)>;

impl ModelVisitor for Visitor {
    type Output = Results;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<Results, AllocError> {
        let mut out = Vec::new();
        for policy in [LockPolicy::PerBatch, LockPolicy::PerPage] {
            let opts = Options {
                lock_policy: policy,
                pcp_batch: Some(self.batch),
                era: self.era,
                ..Options::default()
            };
            let alloc = build_allocator::<M, Kernel>(layout, options, opts)?;
            let node = layout.first_node();
            drop(alloc.cpu_on(node)?);
            drop(alloc.cpu_on(node)?);
            let mut latencies = Vec::new();
            let batch = self.batch as usize;
            let m = measure(self.plan.trials, || {
                let stop = AtomicBool::new(false);
                let (alloc, stop) = (&alloc, &stop);
                std::thread::scope(|s| {
                    let workers: Vec<_> = (0..self.threads.saturating_sub(1).max(1))
                        .map(|_| {
                            s.spawn(move || {
                                let mut cpu = alloc.cpu_on(node).expect("checked above");
                                let mut held = Vec::with_capacity(batch * 6);
                                let mut pages = 0u64;
                                // Acquire: pairs with the Release store below.
                                while !stop.load(Ordering::Acquire) {
                                    for _ in 0..batch * 6 {
                                        held.push(
                                            cpu.alloc(Gfp::HIGHUSER_MOVABLE).expect("memory"),
                                        );
                                    }
                                    for pfn in held.drain(..) {
                                        cpu.free(pfn).expect("free");
                                    }
                                    pages += (batch * 6) as u64;
                                }
                                pages
                            })
                        })
                        .collect();
                    let deadline = std::time::Instant::now() + self.duration;
                    let hz = tsc_hz() as f64;
                    while std::time::Instant::now() < deadline {
                        let t0 = tsc_start();
                        let pfn = alloc
                            .alloc_pages(Order::ZERO, Gfp::HIGHUSER_MOVABLE, node, None)
                            .expect("memory");
                        alloc.free_pages(pfn, Order::ZERO).expect("free");
                        let t1 = tsc_stop();
                        latencies.push((t1 - t0) as f64 * 1e9 / hz);
                    }
                    // Release: the workers see everything before the stop.
                    stop.store(true, Ordering::Release);
                    workers
                        .into_iter()
                        .map(|w| w.join().expect("worker"))
                        .sum::<u64>()
                })
            });
            out.push((policy, m, latencies));
        }
        Ok(out)
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

pub(super) fn run(ctx: &Ctx) -> Result<Outcome, CliError> {
    let cores = ctx.machine.cores.max(1);
    let threads = ctx.args.threads.unwrap_or(cores.max(2));
    let batch = ctx.args.batch.unwrap_or(256);
    let duration = Duration::from_millis((ctx.plan.scale * 1500.0).max(60.0) as u64);
    let visitor = Visitor {
        plan: ctx.plan,
        threads,
        batch,
        duration,
        era: ctx.era,
    };
    let results = ctx.visit(visitor)?;
    let model = ctx.model.name();
    let mut table = format!(
        "{} batch thread(s) refilling/draining pcp batches of {batch} (high {}, era {}), 1 thread making single-page zone-path requests, {} ms per trial\n\n\
         {:<10}  {:>22}  {:>12}  {:>10}  {:>10}  {:>10}  {:>9}\n",
        threads.saturating_sub(1).max(1),
        if ctx.era.pcp_high_from_watermark() {
            "zone_highsize".to_string()
        } else {
            (batch * 6).to_string()
        },
        ctx.era,
        duration.as_millis(),
        "policy",
        "batch ns (cycles)/page",
        "Mpages/s",
        "small p50",
        "small p99",
        "small max",
        "requests"
    );
    let mut rows = Vec::new();
    for (policy, m, mut lat) in results {
        lat.sort_by(f64::total_cmp);
        let name = match policy {
            LockPolicy::PerBatch => "per-batch",
            LockPolicy::PerPage => "per-page",
        };
        let (p50, p99, max) = (
            percentile(&lat, 0.5),
            percentile(&lat, 0.99),
            lat.last().copied().unwrap_or(0.0),
        );
        let mpps = 1e3 / m.ns_per_op.median;
        table += &format!(
            "{:<10}  {:>22}  {:>12.2}  {:>8.0}ns  {:>8.0}ns  {:>8.0}ns  {:>9}\n",
            name,
            cell(&m),
            mpps,
            p50,
            p99,
            max,
            lat.len()
        );
        let distribution: serde_json::Map<String, serde_json::Value> =
            [0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 1.0]
                .iter()
                .map(|&p| (format!("p{}", p * 100.0), json!(percentile(&lat, p))))
                .collect();
        rows.push(
            Row::new(name, model, json!({"threads": threads, "batch": batch}), m)
                .with("small_latency_percentiles_ns", distribution)
                .with("pages_per_second", mpps * 1e6)
                .with("small_p50_ns", p50)
                .with("small_p99_ns", p99)
                .with("small_max_ns", max)
                .with("small_requests", lat.len() as u64),
        );
    }
    let parallel = threads.min(cores);
    table += &format!(
        "\nThis machine has {cores} CPU(s) and the run used {threads} threads, so at most {parallel} of them contend for the zone lock at once; \
         the seed measured eight CPUs (its published figure: a kernel build 5 % faster with per-page locking).\n"
    );
    Ok(Outcome {
        rows,
        table,
        layout: ctx.layout.source().into(),
    })
}
