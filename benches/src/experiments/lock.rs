//! `lock`: zone-lock hold time in the per-CPU bulk paths (2007). 2.6.23
//! refilled and drained the per-CPU lists in batches of 31 (`high` 186)
//! under one `zone->lock` acquisition each; the proposal took the lock per
//! page, so that a request waiting for the lock (an order-1 kernel stack on
//! `fork`, say) is not stuck behind a whole batch, and reported a kernel
//! build 5 % faster on 8 CPUs.
//!
//! Here: the 2.6.23 era (its batch and `high` from the kernel's formula),
//! one thread per CPU pinned with `sched_setaffinity`, each running the
//! same set of jobs ([`lock_job`]: page faults with `clear_page` and the
//! process's writes, an order-1 zone-path request, everything freed). The
//! completion time of the job set is measured for both policies with the
//! unfair byte lock of 2.6.23, the ticket lock and a queued (MCS) lock.
//! Then [`lock_sim`](super::lock_sim) projects the job set to 4, 8 and 16
//! CPUs from holds and work measured on one CPU, its two-CPU prediction
//! set beside the measured two-CPU run.

use std::sync::Mutex;

use buddy::{AllocError, Allocator, Era, Kernel, LockPolicy, Options, ZoneLockKind};
use serde_json::json;
use sparsemem::{Layout, MemoryModel, NodeId, Order};
use vmemmap::VmemmapOptions;

use super::legacy::{Outcome, legacy_experiment};
use super::lock_sim::{SimParams, SimResult, simulate};
use super::{Ctx, Knobs, cell};
use crate::error::RunError;
use crate::models::{Buildable, ModelVisitor, build_allocator};
use crate::report::JsonRow;
use crate::threads::{Placement, on_threads};
use crate::timing::{Measurement, Plan, measure_interleaved, tsc_hz, tsc_now};
use crate::workloads::{lock_job, xorshift};

/// The seed: a kernel build 5 % faster with the lock taken per page, on
/// 8 CPUs.
pub const SEED_CPUS: usize = 8;
/// The seed's speedup of per-page locking (per-batch time / per-page).
pub const SEED_SPEEDUP: f64 = 1.05;
/// CPU counts the model projects to.
pub const PROJECTED_CPUS: [usize; 3] = [4, 8, 16];

/// One policy and lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockConfig {
    /// Batch under one acquisition, or per page.
    pub policy: LockPolicy,
    /// Which spinning lock.
    pub kind: ZoneLockKind,
}

impl LockConfig {
    /// The allocator options of this configuration in `era`: real frames,
    /// the era's batch unless `batch` overrides it.
    pub fn options(self, era: Era, batch: Option<u32>) -> Options {
        Options {
            lock_policy: self.policy,
            zone_lock: self.kind,
            pcp_batch: batch,
            frames: true,
            ..Options::for_era(era)
        }
    }

    /// Every configuration, per-batch first.
    pub fn all() -> Vec<LockConfig> {
        [LockPolicy::PerBatch, LockPolicy::PerPage]
            .into_iter()
            .flat_map(|policy| {
                ZoneLockKind::ALL
                    .into_iter()
                    .map(move |kind| LockConfig { policy, kind })
            })
            .collect()
    }

    /// `per-batch/unfair` and so on.
    pub fn name(self) -> String {
        format!("{}/{}", policy_name(self.policy), self.kind.name())
    }
}

fn policy_name(p: LockPolicy) -> &'static str {
    match p {
        LockPolicy::PerBatch => "per-batch",
        LockPolicy::PerPage => "per-page",
    }
}

/// What one CPU's uncontended run of the job set measured: the model's
/// parameters.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Calibration {
    /// Per page, outside every zone-lock hold, ns.
    pub compute_ns: f64,
    /// A refill's hold (the refilling call less an ordinary one), ns.
    pub refill_ns: f64,
    /// A drain's hold, ns.
    pub drain_ns: f64,
    /// The order-1 allocation, ns.
    pub small_alloc_ns: f64,
    /// The order-1 free, ns.
    pub small_free_ns: f64,
    /// Refills per job.
    pub refills: f64,
    /// Drains per job.
    pub drains: f64,
    /// The per-CPU batch.
    pub batch: u32,
    /// The per-CPU `high`.
    pub high: u32,
}

/// One configuration's results.
#[derive(Clone, Debug)]
pub struct LockRun {
    /// Which.
    pub config: LockConfig,
    /// Per page of the whole job set (completion time over pages).
    pub per_page: Measurement,
    /// The order-1 requests' latencies, ns, sorted.
    pub small_ns: Vec<f64>,
    /// The model at this machine's CPUs (validation) and the projections.
    pub model: Vec<(usize, SimResult)>,
}

/// What the lock experiment measured.
#[derive(Clone, Debug)]
pub struct LockResults {
    /// The kernel era the allocator modelled.
    pub era: Era,
    /// Threads (one per CPU).
    pub threads: usize,
    /// Whether every thread was pinned to its CPU.
    pub pinned: bool,
    /// Jobs per thread.
    pub jobs: u64,
    /// Pages per job.
    pub pages: u64,
    /// Per policy: the calibration.
    pub calibration: Vec<(LockPolicy, Calibration)>,
    /// Per lock kind: what a zone-lock acquisition costs more when two
    /// CPUs take it in turn than when one takes it alone, ns.
    pub handoff: Vec<(ZoneLockKind, f64)>,
    /// Every configuration.
    pub runs: Vec<LockRun>,
}

impl LockResults {
    /// Completion time of the measured job set, ms.
    pub fn completion_ms(&self, r: &LockRun) -> f64 {
        r.per_page.ns_per_op.median * (self.jobs * self.pages * self.threads as u64) as f64 / 1e6
    }

    fn run(&self, config: LockConfig) -> Option<&LockRun> {
        self.runs.iter().find(|r| r.config == config)
    }

    fn model_at(r: &LockRun, cpus: usize) -> Option<SimResult> {
        r.model.iter().find(|(c, _)| *c == cpus).map(|(_, m)| *m)
    }

    /// Per-batch over per-page completion with `kind`, measured.
    pub fn speedup_measured(&self, kind: ZoneLockKind) -> Option<f64> {
        let b = self.run(LockConfig {
            policy: LockPolicy::PerBatch,
            kind,
        })?;
        let p = self.run(LockConfig {
            policy: LockPolicy::PerPage,
            kind,
        })?;
        Some(b.per_page.ns_per_op.median / p.per_page.ns_per_op.median)
    }

    /// Per-batch over per-page completion with `kind`, as the model puts
    /// it at `cpus`.
    pub fn speedup_modelled(&self, kind: ZoneLockKind, cpus: usize) -> Option<f64> {
        let at = |policy| {
            self.run(LockConfig { policy, kind })
                .and_then(|r| Self::model_at(r, cpus))
                .map(|m| m.completion_ns)
        };
        Some(at(LockPolicy::PerBatch)? / at(LockPolicy::PerPage)?)
    }

    /// The JSON rows.
    pub fn rows(&self, model: &str) -> Vec<JsonRow> {
        self.runs
            .iter()
            .map(|r| {
                let cal = self
                    .calibration
                    .iter()
                    .find(|(p, _)| *p == r.config.policy)
                    .map(|(_, c)| *c);
                let projections: serde_json::Map<String, serde_json::Value> = r
                    .model
                    .iter()
                    .map(|(cpus, m)| (cpus.to_string(), json!(m)))
                    .collect();
                let modelled_here = Self::model_at(r, self.threads);
                let mut row = JsonRow::new(
                    r.config.name(),
                    model,
                    json!({
                        "policy": policy_name(r.config.policy),
                        "lock": r.config.kind.name(),
                        "threads": self.threads,
                        "era": self.era.name(),
                        "pinned": self.pinned,
                        "jobs": self.jobs,
                        "pages": self.pages,
                    }),
                    r.per_page.clone(),
                )
                .with("completion_ms", self.completion_ms(r))
                .with("small_p50_ns", percentile(&r.small_ns, 0.5))
                .with("small_p99_ns", percentile(&r.small_ns, 0.99))
                .with("small_max_ns", r.small_ns.last().copied().unwrap_or(0.0))
                .with("small_requests", r.small_ns.len() as u64)
                .with("calibration", json!(cal))
                .with(
                    "handoff_ns",
                    self.handoff
                        .iter()
                        .find(|(k, _)| *k == r.config.kind)
                        .map(|(_, h)| *h),
                )
                .with("model_projection", projections)
                .with(
                    "model_error_at_measured_cpus",
                    modelled_here.map(|m| m.completion_ns / 1e6 / self.completion_ms(r) - 1.0),
                );
                if let Some(s) = self.speedup_modelled(r.config.kind, SEED_CPUS) {
                    row = row
                        .with(
                            "seed",
                            json!({"cpus": SEED_CPUS, "per_page_speedup": SEED_SPEEDUP, "workload": "kernel build"}),
                        )
                        .with("per_page_speedup_projected_8cpus", s)
                        .with("ratio_to_seed", s / SEED_SPEEDUP);
                }
                if let Some(s) = self.speedup_measured(r.config.kind) {
                    row = row.with("per_page_speedup_measured", s);
                }
                row
            })
            .collect()
    }

    /// The printed table.
    pub fn render(&self) -> String {
        let mut t = format!(
            "{} pinned threads ({}), {} jobs each of {} order-0 __GFP_ZERO faults (0-64 lines written, uniform) + one order-1 request; era {}\n\n\
             {:<18} {:>16} {:>12} {:>10} {:>10} {:>12}\n",
            self.threads,
            if self.pinned {
                "pinned"
            } else {
                "NOT pinned: sched_setaffinity failed"
            },
            self.jobs,
            self.pages,
            self.era,
            "policy/lock",
            "ns (cycles)/page",
            "job set ms",
            "order-1 p50",
            "p99",
            "model err"
        );
        for r in &self.runs {
            let err = Self::model_at(r, self.threads)
                .map(|m| {
                    format!(
                        "{:+.0} %",
                        (m.completion_ns / 1e6 / self.completion_ms(r) - 1.0) * 100.0
                    )
                })
                .unwrap_or_default();
            t += &format!(
                "{:<18} {:>16} {:>12.2} {:>8.0}ns {:>8.0}ns {:>12}\n",
                r.config.name(),
                cell(&r.per_page),
                self.completion_ms(r),
                percentile(&r.small_ns, 0.5),
                percentile(&r.small_ns, 0.99),
                err
            );
        }
        t += "\nCalibration (one CPU, uncontended; the model's parameters):\n";
        for (policy, c) in &self.calibration {
            t += &format!(
                "  {:<9} batch {} high {}: work {:.0} ns/page, refill hold {:.0} ns x {:.1}/job, drain hold {:.0} ns x {:.1}/job, order-1 {:.0} + {:.0} ns\n",
                policy_name(*policy),
                c.batch,
                c.high,
                c.compute_ns,
                c.refill_ns,
                c.refills,
                c.drain_ns,
                c.drains,
                c.small_alloc_ns,
                c.small_free_ns
            );
        }
        t += "  handoff (an acquisition from the other CPU's, over one CPU's own):";
        for (kind, h) in &self.handoff {
            t += &format!(" {} {:.0} ns", kind.name(), h);
        }
        t += "\n";
        t += &format!(
            "\nPROJECTION (discrete-event model, docs/experiments.md): per-batch / per-page completion, and the order-1 requests' mean wait\n\
             {:<8} {:>10}",
            "lock", "measured"
        );
        for cpus in std::iter::once(self.threads).chain(PROJECTED_CPUS) {
            t += &format!(" {:>14}", format!("model {cpus} CPUs"));
        }
        t += "\n";
        for kind in ZoneLockKind::ALL {
            t += &format!(
                "{:<8} {:>9.3}x",
                kind.name(),
                self.speedup_measured(kind).unwrap_or(f64::NAN)
            );
            for cpus in std::iter::once(self.threads).chain(PROJECTED_CPUS) {
                t += &format!(
                    " {:>13.3}x",
                    self.speedup_modelled(kind, cpus).unwrap_or(f64::NAN)
                );
            }
            t += "\n";
        }
        for r in &self.runs {
            t += &format!("  order-1 mean wait, {:<18}", r.config.name());
            for (cpus, m) in &r.model {
                t += &format!(" {cpus} CPUs {:>7.0} ns", m.small_wait_ns);
            }
            t += "\n";
        }
        t += &format!(
            "\nSeed (2007): a kernel build {:.0} % faster with per-page locking on {SEED_CPUS} CPUs (per-batch / per-page = {SEED_SPEEDUP:.2}).\n",
            (SEED_SPEEDUP - 1.0) * 100.0
        );
        t
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// The zone lock's acquisitions so far, every zone.
fn acquisitions<M: MemoryModel>(alloc: &Allocator<M, Kernel>) -> u64 {
    alloc.zones().iter().map(|z| z.lock_acquisitions()).sum()
}

struct Visitor {
    plan: Plan,
    threads: usize,
    jobs: u64,
    pages: u64,
    era: Era,
    batch: Option<u32>,
}

impl Visitor {
    fn options(&self, config: LockConfig) -> Options {
        config.options(self.era, self.batch)
    }

    /// One CPU's run of the jobs through both policies, a job of each in
    /// turn (so the machine's drift falls on both alike), every allocator
    /// call timed.
    fn calibrate<M: Buildable>(
        &self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<Vec<(LockPolicy, Calibration)>, AllocError> {
        let policies = [LockPolicy::PerBatch, LockPolicy::PerPage];
        let mut allocs = Vec::new();
        for policy in policies {
            let config = LockConfig {
                policy,
                kind: ZoneLockKind::Unfair,
            };
            allocs.push(build_allocator::<M, Kernel>(
                layout,
                options,
                self.options(config),
            )?);
        }
        let node = layout.first_node();
        let mut probes = Vec::new();
        for alloc in &allocs {
            let mut probe = Probe::new(alloc, node)?;
            // Warm: frames touched, lists in their steady state.
            for _ in 0..16 {
                probe.job(self.pages, false)?;
            }
            probes.push(probe);
        }
        let jobs = self.plan.iters(400, 16);
        for _ in 0..jobs {
            for probe in &mut probes {
                probe.job(self.pages, true)?;
            }
        }
        Ok(policies
            .into_iter()
            .zip(&probes)
            .map(|(policy, probe)| (policy, probe.calibration(jobs, self.pages)))
            .collect())
    }
}

/// One CPU's timed jobs on one allocator (the calibration).
struct Probe<'a, M: MemoryModel> {
    alloc: &'a Allocator<M, Kernel>,
    cpu: buddy::PerCpu<'a, M, Kernel>,
    rng: u64,
    held: Vec<sparsemem::Pfn>,
    /// TSC cycles of ordinary and list-refilling allocations, ordinary and
    /// list-draining frees.
    plain_alloc: Vec<u64>,
    refill: Vec<u64>,
    plain_free: Vec<u64>,
    drain: Vec<u64>,
    small_alloc: u64,
    small_free: u64,
    total: u64,
}

impl<'a, M: MemoryModel> Probe<'a, M> {
    fn new(alloc: &'a Allocator<M, Kernel>, node: NodeId) -> Result<Self, AllocError> {
        Ok(Probe {
            alloc,
            cpu: alloc.cpu_on(node)?,
            rng: 0x9e37_79b9_7f4a_7c15,
            held: Vec::new(),
            plain_alloc: Vec::new(),
            refill: Vec::new(),
            plain_free: Vec::new(),
            drain: Vec::new(),
            small_alloc: 0,
            small_free: 0,
            total: 0,
        })
    }

    /// `f`'s TSC cycles and whether it took the zone lock.
    fn timed(alloc: &Allocator<M, Kernel>, f: impl FnOnce()) -> (u64, bool) {
        let a = acquisitions(alloc);
        let t0 = tsc_now();
        f();
        let t = tsc_now() - t0;
        (t, acquisitions(alloc) != a)
    }

    /// One [`lock_job`], its calls timed; recorded when `keep`.
    fn job(&mut self, pages: u64, keep: bool) -> Result<(), AllocError> {
        let alloc = self.alloc;
        let start = tsc_now();
        let mut times = Vec::with_capacity(2 * pages as usize);
        for _ in 0..pages {
            let mut got = Err(AllocError::NoMemory { order: Order::ZERO });
            let cpu = &mut self.cpu;
            let (t, locked) = Self::timed(alloc, || {
                got = cpu.alloc(buddy::Gfp::HIGHUSER | buddy::Gfp::ZERO)
            });
            times.push((t, locked, true));
            let pfn = got?;
            if let Some(frame) = alloc.page_address(pfn) {
                crate::workloads::write_lines(frame, xorshift(&mut self.rng) % 65);
            }
            self.held.push(pfn);
        }
        let cpu = &mut self.cpu;
        let mut stack = None;
        let (small_alloc, _) = Self::timed(alloc, || {
            stack = cpu.alloc_pages(Order::new(1), buddy::Gfp::KERNEL).ok()
        });
        for pfn in std::mem::take(&mut self.held) {
            let cpu = &mut self.cpu;
            let (t, locked) = Self::timed(alloc, || {
                let _ = cpu.free(pfn);
            });
            times.push((t, locked, false));
        }
        let mut small_free = 0;
        if let Some(s) = stack {
            let cpu = &mut self.cpu;
            small_free = Self::timed(alloc, || {
                let _ = cpu.free_pages(s, Order::new(1));
            })
            .0;
        }
        let total = tsc_now() - start;
        if keep {
            for (t, locked, is_alloc) in times {
                match (is_alloc, locked) {
                    (true, false) => self.plain_alloc.push(t),
                    (true, true) => self.refill.push(t),
                    (false, false) => self.plain_free.push(t),
                    (false, true) => self.drain.push(t),
                }
            }
            self.small_alloc += small_alloc;
            self.small_free += small_free;
            self.total += total;
        }
        Ok(())
    }

    /// The model's parameters from `jobs` kept jobs of `pages` pages.
    fn calibration(&self, jobs: u64, pages: u64) -> Calibration {
        let ns = 1e9 / tsc_hz() as f64;
        let mean = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len().max(1) as f64;
        let refill_ns = (mean(&self.refill) - mean(&self.plain_alloc)).max(0.0) * ns;
        let drain_ns = (mean(&self.drain) - mean(&self.plain_free)).max(0.0) * ns;
        let jobs_f = jobs.max(1) as f64;
        let small_alloc_ns = self.small_alloc as f64 / jobs_f * ns;
        let small_free_ns = self.small_free as f64 / jobs_f * ns;
        let refills = self.refill.len() as f64 / jobs_f;
        let drains = self.drain.len() as f64 / jobs_f;
        let holds = refills * refill_ns + drains * drain_ns + small_alloc_ns + small_free_ns;
        let compute_ns = (self.total as f64 * ns / jobs_f - holds) / pages as f64;
        let zone = self
            .alloc
            .zones()
            .iter()
            .max_by_key(|z| z.managed_pages())
            .map(|z| (z.batch(), z.high()))
            .unwrap_or_default();
        Calibration {
            compute_ns,
            refill_ns,
            drain_ns,
            small_alloc_ns,
            small_free_ns,
            refills,
            drains,
            batch: zone.0,
            high: zone.1,
        }
    }
}

/// The job set on `threads` threads of `alloc`, thread `t` pinned to CPU
/// `t` (`pinned` is cleared if the kernel refuses), each running `jobs`
/// [`lock_job`]s of `pages` pages; the order-1 requests' latencies (ns)
/// are appended to `small`. Returns the pages allocated.
pub fn job_set<M: MemoryModel>(
    alloc: &Allocator<M, Kernel>,
    node: NodeId,
    threads: usize,
    jobs: u64,
    pages: u64,
    small: &Mutex<Vec<f64>>,
    pinned: &std::sync::atomic::AtomicBool,
) -> u64 {
    let ns = 1e9 / tsc_hz() as f64;
    let joined = on_threads(
        threads,
        Placement::Pinned,
        |_| alloc.cpu_on(node).expect("checked when built"),
        |t, mut cpu| {
            let mut rng = 0x2545_f491_4f6c_dd1du64 ^ (t as u64 + 1);
            let (mut held, mut lat) = (Vec::new(), Vec::new());
            for _ in 0..jobs {
                lock_job(&mut cpu, pages as usize, &mut rng, &mut held, &mut lat);
            }
            lat
        },
    );
    if !joined.pinned {
        pinned.store(false, std::sync::atomic::Ordering::Relaxed);
    }
    let mut all = small.lock().unwrap_or_else(|e| e.into_inner());
    all.extend(joined.results.iter().flatten().map(|&c| c as f64 * ns));
    jobs * pages * threads as u64
}

/// `n` order-1 allocations and frees on the zone path on each of
/// `threads` pinned threads; returns the pairs.
fn stack_pairs<M: MemoryModel>(
    alloc: &Allocator<M, Kernel>,
    node: NodeId,
    threads: usize,
    n: u64,
) -> u64 {
    on_threads(
        threads,
        Placement::Pinned,
        |_| (),
        |_, ()| {
            for _ in 0..n {
                if let Ok(pfn) = alloc.alloc_pages(Order::new(1), buddy::Gfp::KERNEL, node, None) {
                    let _ = alloc.free_pages(pfn, Order::new(1));
                }
            }
        },
    );
    n * threads as u64
}

impl ModelVisitor for Visitor {
    type Output = LockResults;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<LockResults, AllocError> {
        let node = layout.first_node();
        let calibration = self.calibrate::<M>(layout, options)?;
        // The handoff: order-1 allocations and frees on the zone path (two
        // zone-lock acquisitions each), on one CPU and on two at once.
        let mut handoff = Vec::new();
        for kind in ZoneLockKind::ALL {
            let a = build_allocator::<M, Kernel>(
                layout,
                options,
                self.options(LockConfig {
                    policy: LockPolicy::PerBatch,
                    kind,
                }),
            )?;
            let n = self.plan.iters(200_000, 5_000);
            let m = measure_interleaved(self.plan.trials, &mut [1, 2], |cpus| {
                stack_pairs(&a, node, *cpus, n)
            });
            // Per acquisition: two per pair; the two-CPU run's wall time
            // covers both CPUs' acquisitions.
            let alone = m[0].ns_per_op.median / 2.0;
            let shared = m[1].ns_per_op.median / 2.0;
            handoff.push((kind, (shared - alone).max(0.0)));
        }
        let configs = LockConfig::all();
        let mut allocs = Vec::new();
        for &c in &configs {
            allocs.push(build_allocator::<M, Kernel>(
                layout,
                options,
                self.options(c),
            )?);
        }
        let smalls: Vec<Mutex<Vec<f64>>> = configs.iter().map(|_| Mutex::new(Vec::new())).collect();
        let pinned = std::sync::atomic::AtomicBool::new(true);
        let (threads, jobs, pages) = (self.threads, self.jobs, self.pages);
        let mut runs: Vec<_> = allocs.iter().zip(&smalls).collect();
        let measured = measure_interleaved(self.plan.trials, &mut runs, |(a, s)| {
            job_set(a, node, threads, jobs, pages, s, &pinned)
        });
        let runs = configs
            .iter()
            .zip(measured)
            .zip(smalls)
            .map(|((&config, per_page), small)| {
                let mut small_ns = small.into_inner().unwrap_or_else(|e| e.into_inner());
                small_ns.sort_by(f64::total_cmp);
                let cal = calibration
                    .iter()
                    .find(|(p, _)| *p == config.policy)
                    .map(|(_, c)| *c)
                    .expect("both policies calibrated");
                let model = std::iter::once(threads)
                    .chain(PROJECTED_CPUS)
                    .map(|cpus| {
                        let p = SimParams {
                            cpus,
                            jobs,
                            pages,
                            batch: u64::from(cal.batch.max(1)),
                            refills: cal.refills.round() as u64,
                            drains: cal.drains.round() as u64,
                            compute_ns: cal.compute_ns,
                            handoff_ns: handoff
                                .iter()
                                .find(|(k, _)| *k == config.kind)
                                .map_or(0.0, |(_, h)| *h),
                            refill_ns: cal.refill_ns,
                            drain_ns: cal.drain_ns,
                            small_alloc_ns: cal.small_alloc_ns,
                            small_free_ns: cal.small_free_ns,
                            per_page: config.policy == LockPolicy::PerPage,
                            fair: config.kind != ZoneLockKind::Unfair,
                            seed: 0x5eed,
                        };
                        (cpus, simulate(&p))
                    })
                    .collect();
                LockRun {
                    config,
                    per_page,
                    small_ns,
                    model,
                }
            })
            .collect();
        Ok(LockResults {
            era: self.era,
            threads,
            pinned: pinned.load(std::sync::atomic::Ordering::Relaxed),
            jobs,
            pages,
            calibration,
            handoff,
            runs,
        })
    }
}

legacy_experiment!(
    /// Zone-lock hold time in the per-CPU bulk paths (2007).
    Lock = Lock,
    run
);

fn run(ctx: &Ctx, knobs: &Knobs) -> Result<Outcome, RunError> {
    let threads = knobs.threads.unwrap_or(ctx.machine.cores.max(1));
    let visitor = Visitor {
        plan: ctx.plan,
        threads,
        jobs: knobs.iterations.unwrap_or(ctx.plan.iters(400, 10)),
        pages: 512,
        era: ctx.era,
        batch: knobs.batch,
    };
    let results = ctx.visit(visitor)?;
    Ok(Outcome {
        rows: results.rows(ctx.model.name()),
        table: results.render(),
        layout: ctx.layout.source().into(),
    })
}
