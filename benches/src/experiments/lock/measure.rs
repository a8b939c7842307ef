//! The lock experiment's measurements: one CPU's calibration of the job
//! set (every allocator call timed), the zone lock's handoff between two
//! CPUs, and the job set itself on every CPU, for each policy and lock;
//! then the model's projections from the calibration.

use std::sync::Mutex;

use buddy::{
    AllocError, Allocator, BuddyModel, Era, Kernel, LockPolicy, Options, RequestError, ZoneLockKind,
};
use sparsemem::{Layout, NodeId, Order};
use vmemmap::VmemmapOptions;

use super::sim::{SimParams, SimResult, simulate};
use crate::models::{Buildable, ModelVisitor, build_allocator};
use crate::threads::{Placement, on_threads};
use crate::timing::{Measurement, Plan, tsc_hz, tsc_now};
use crate::workloads::{lock_job, xorshift};

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

/// `per-batch` or `per-page`.
pub(super) fn policy_name(p: LockPolicy) -> &'static str {
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
    /// The same per trial: trial *i*'s projection runs on the calibration
    /// of the *i*-th chunk of its jobs and the handoff of trial *i*, so the
    /// projections carry the spread of what they are made from.
    pub model_trials: Vec<Vec<(usize, SimResult)>>,
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
    /// Per policy: the calibration of each chunk of its jobs (one chunk
    /// per trial; the two policies' jobs ran in turn, so chunk *i* of
    /// each pairs).
    pub calibration_trials: Vec<(LockPolicy, Vec<Calibration>)>,
    /// Per lock kind: what a zone-lock acquisition costs more when two
    /// CPUs take it in turn than when one takes it alone, ns.
    pub handoff: Vec<(ZoneLockKind, f64)>,
    /// The same per trial (the one- and two-CPU trials ran in turn).
    pub handoff_trials: Vec<(ZoneLockKind, Vec<f64>)>,
    /// Every configuration.
    pub runs: Vec<LockRun>,
}

/// The zone lock's acquisitions so far, every zone.
fn acquisitions<M: BuddyModel>(alloc: &Allocator<M, Kernel>) -> u64 {
    alloc.zones().iter().map(|z| z.lock_acquisitions()).sum()
}

/// The lock experiment's measurement over one model type.
pub(super) struct Visitor {
    pub(super) plan: Plan,
    pub(super) threads: usize,
    pub(super) jobs: u64,
    pub(super) pages: u64,
    pub(super) era: Era,
    pub(super) batch: Option<u32>,
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
    ) -> Result<Vec<(LockPolicy, Calibration, Vec<Calibration>)>, AllocError> {
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
        let jobs = self.plan.iters(400, 16) as usize;
        for _ in 0..jobs {
            for probe in &mut probes {
                probe.job(self.pages, true)?;
            }
        }
        let chunks = self.plan.trials.clamp(1, jobs);
        Ok(policies
            .into_iter()
            .zip(&probes)
            .map(|(policy, probe)| {
                let per_chunk = (0..chunks)
                    .map(|i| {
                        probe.calibration(i * jobs / chunks..(i + 1) * jobs / chunks, self.pages)
                    })
                    .collect();
                (policy, probe.calibration(0..jobs, self.pages), per_chunk)
            })
            .collect())
    }
}

/// One CPU's timed jobs on one allocator (the calibration).
struct Probe<'a, M: BuddyModel> {
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
    /// Where each kept job's records end: `marks[j]` is the state after
    /// `j` kept jobs (`marks[0]` is empty).
    marks: Vec<Mark>,
}

/// The lengths of a [`Probe`]'s records and its sums after some jobs.
#[derive(Clone, Copy, Default)]
struct Mark {
    plain_alloc: usize,
    refill: usize,
    plain_free: usize,
    drain: usize,
    small_alloc: u64,
    small_free: u64,
    total: u64,
}

impl<'a, M: BuddyModel> Probe<'a, M> {
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
            marks: vec![Mark::default()],
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
            let mut got = Err(RequestError::NoMemory { order: Order::ZERO });
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
            self.marks.push(Mark {
                plain_alloc: self.plain_alloc.len(),
                refill: self.refill.len(),
                plain_free: self.plain_free.len(),
                drain: self.drain.len(),
                small_alloc: self.small_alloc,
                small_free: self.small_free,
                total: self.total,
            });
        }
        Ok(())
    }

    /// The model's parameters from the kept jobs `jobs` (indices in the
    /// order they ran), each of `pages` pages.
    fn calibration(&self, jobs: std::ops::Range<usize>, pages: u64) -> Calibration {
        let ns = 1e9 / tsc_hz() as f64;
        let (a, b) = (self.marks[jobs.start], self.marks[jobs.end]);
        let mean = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len().max(1) as f64;
        let refill = &self.refill[a.refill..b.refill];
        let drain = &self.drain[a.drain..b.drain];
        let plain_alloc = mean(&self.plain_alloc[a.plain_alloc..b.plain_alloc]);
        let plain_free = mean(&self.plain_free[a.plain_free..b.plain_free]);
        let refill_ns = (mean(refill) - plain_alloc).max(0.0) * ns;
        let drain_ns = (mean(drain) - plain_free).max(0.0) * ns;
        let jobs_f = jobs.len().max(1) as f64;
        let small_alloc_ns = (b.small_alloc - a.small_alloc) as f64 / jobs_f * ns;
        let small_free_ns = (b.small_free - a.small_free) as f64 / jobs_f * ns;
        let refills = refill.len() as f64 / jobs_f;
        let drains = drain.len() as f64 / jobs_f;
        let holds = refills * refill_ns + drains * drain_ns + small_alloc_ns + small_free_ns;
        let compute_ns = ((b.total - a.total) as f64 * ns / jobs_f - holds) / pages as f64;
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
pub fn job_set<M: BuddyModel>(
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
fn stack_pairs<M: BuddyModel>(
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

impl Visitor {
    /// Per lock kind: what a zone-lock acquisition costs more when two
    /// CPUs take it in turn than when one takes it alone, from order-1
    /// allocations and frees on the zone path (two acquisitions each).
    fn handoffs<M: Buildable>(
        &self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<Vec<(ZoneLockKind, f64, Vec<f64>)>, AllocError> {
        let node = layout.first_node();
        let mut handoff = Vec::new();
        for kind in ZoneLockKind::ALL {
            let config = LockConfig {
                policy: LockPolicy::PerBatch,
                kind,
            };
            let a = build_allocator::<M, Kernel>(layout, options, self.options(config))?;
            let n = self.plan.iters(200_000, 5_000);
            let m = self
                .plan
                .measure_interleaved(&mut [1, 2], |cpus| stack_pairs(&a, node, *cpus, n));
            // Per acquisition: two per pair; the two-CPU run's wall time
            // covers both CPUs' acquisitions.
            let alone = m[0].ns_per_op.median / 2.0;
            let shared = m[1].ns_per_op.median / 2.0;
            let per_trial = m[0].ns_per_op.trials.iter().zip(&m[1].ns_per_op.trials);
            let trials = per_trial.map(|(a, s)| ((s - a) / 2.0).max(0.0)).collect();
            handoff.push((kind, (shared - alone).max(0.0), trials));
        }
        Ok(handoff)
    }

    /// The model at this machine's CPUs and at [`PROJECTED_CPUS`], from the
    /// policy's calibration and the lock's handoff.
    fn projections(
        &self,
        config: LockConfig,
        cal: &Calibration,
        handoff_ns: f64,
    ) -> Vec<(usize, SimResult)> {
        std::iter::once(self.threads)
            .chain(PROJECTED_CPUS)
            .map(|cpus| {
                let p = SimParams {
                    cpus,
                    jobs: self.jobs,
                    pages: self.pages,
                    batch: u64::from(cal.batch.max(1)),
                    refills: cal.refills.round() as u64,
                    drains: cal.drains.round() as u64,
                    compute_ns: cal.compute_ns,
                    handoff_ns,
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
            .collect()
    }
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
        let handoff = self.handoffs::<M>(layout, options)?;
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
        let measured = self.plan.measure_interleaved(&mut runs, |(a, s)| {
            job_set(a, node, threads, jobs, pages, s, &pinned)
        });
        let runs = configs
            .iter()
            .zip(measured)
            .zip(smalls)
            .map(|((&config, per_page), small)| {
                let mut small_ns = small.into_inner().unwrap_or_else(|e| e.into_inner());
                small_ns.sort_by(f64::total_cmp);
                let (_, cal, chunks) = calibration
                    .iter()
                    .find(|(p, ..)| *p == config.policy)
                    .expect("both policies calibrated");
                let (handoff_ns, handoff_trials) = handoff
                    .iter()
                    .find(|(k, ..)| *k == config.kind)
                    .map_or((0.0, &[][..]), |(_, h, t)| (*h, &t[..]));
                // Chunk i with trial i's handoff (the median where a trial
                // is missing).
                let model_trials = chunks
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let h = handoff_trials.get(i).copied().unwrap_or(handoff_ns);
                        self.projections(config, c, h)
                    })
                    .collect();
                LockRun {
                    config,
                    per_page,
                    small_ns,
                    model: self.projections(config, cal, handoff_ns),
                    model_trials,
                }
            })
            .collect();
        Ok(LockResults {
            era: self.era,
            threads,
            pinned: pinned.load(std::sync::atomic::Ordering::Relaxed),
            jobs,
            pages,
            calibration: calibration.iter().map(|(p, c, _)| (*p, *c)).collect(),
            calibration_trials: calibration.into_iter().map(|(p, _, t)| (p, t)).collect(),
            handoff: handoff.iter().map(|(k, h, _)| (*k, *h)).collect(),
            handoff_trials: handoff.into_iter().map(|(k, _, t)| (k, t)).collect(),
            runs,
        })
    }
}
