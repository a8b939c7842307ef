//! `lock`: zone-lock hold time in the per-CPU bulk paths (2007). 2.6.23
//! refilled and drained the per-CPU lists in batches of 31 (`high` 186)
//! under one `zone->lock` acquisition each; the proposal took the lock per
//! page, so that a request waiting for the lock (an order-1 kernel stack on
//! `fork`, say) is not stuck behind a whole batch, and reported a kernel
//! build 5 % faster on 8 CPUs.
//!
//! Here: the 2.6.23 era (its batch and `high` from the kernel's formula),
//! one thread per CPU pinned with `sched_setaffinity`, each running the
//! same set of jobs ([`lock_job`](crate::workloads::lock_job): page faults with `clear_page` and the
//! process's writes, an order-1 zone-path request, everything freed). The
//! completion time of the job set is measured for both policies with the
//! unfair byte lock of 2.6.23, the ticket lock and a queued (MCS) lock.
//! Then [`sim`] projects the job set to 4, 8 and 16
//! CPUs from holds and work measured on one CPU, its two-CPU prediction
//! set beside the measured two-CPU run.

mod measure;
pub mod sim;

pub use measure::{Calibration, LockConfig, LockResults, LockRun, PROJECTED_CPUS, job_set};

use crate::spread::{Comparison, Interval, MARKS, ratio_cell};
use buddy::{LockPolicy, ZoneLockKind};
use serde::Serialize;

use super::{Ctx, Experiment, ExperimentId, cell};
use crate::error::RunError;
use crate::report::Row;
use measure::policy_name;
use sim::SimResult;

/// The seed: a kernel build 5 % faster with the lock taken per page, on
/// 8 CPUs.
pub const SEED_CPUS: usize = 8;
/// The seed's speedup of per-page locking (per-batch time / per-page).
pub const SEED_SPEEDUP: f64 = 1.05;
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
        self.speedup_interval(kind).map(|i| i.median)
    }

    /// [`LockResults::speedup_measured`] with its interval: the runs'
    /// trials are interleaved, so it is the paired per-trial ratio.
    pub fn speedup_interval(&self, kind: ZoneLockKind) -> Option<Interval> {
        let b = self.run(LockConfig {
            policy: LockPolicy::PerBatch,
            kind,
        })?;
        let p = self.run(LockConfig {
            policy: LockPolicy::PerPage,
            kind,
        })?;
        Interval::between(&b.per_page, &p.per_page).ok()
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

    /// [`LockResults::speedup_modelled`] with its interval: the median of
    /// the per-trial projections' ratios (trial *i* of both policies made
    /// from chunk *i* of their calibration jobs, which ran in turn, and
    /// trial *i*'s handoff), with its distribution-free interval.
    pub fn speedup_modelled_interval(&self, kind: ZoneLockKind, cpus: usize) -> Option<Interval> {
        let trials = |policy| {
            self.run(LockConfig { policy, kind })
                .map(|r| &r.model_trials)
        };
        let (b, p) = (trials(LockPolicy::PerBatch)?, trials(LockPolicy::PerPage)?);
        let at = |t: &[(usize, SimResult)]| {
            t.iter()
                .find(|(c, _)| *c == cpus)
                .map(|(_, m)| m.completion_ns)
        };
        let ratios: Vec<f64> = b
            .iter()
            .zip(p)
            .filter_map(|(b, p)| Some(at(b)? / at(p)?))
            .collect();
        Interval::of_median(&ratios).ok()
    }

    /// The JSON rows.
    pub fn rows(&self, model: crate::models::ModelKind) -> Vec<LockRow> {
        self.runs.iter().map(|r| self.row(r, model)).collect()
    }

    fn row(&self, r: &LockRun, model: crate::models::ModelKind) -> LockRow {
        let params = LockParams {
            policy: policy_name(r.config.policy),
            lock: r.config.kind.name(),
            threads: self.threads,
            era: self.era.name(),
            pinned: self.pinned,
            jobs: self.jobs,
            pages: self.pages,
        };
        let projected = self.speedup_modelled(r.config.kind, SEED_CPUS);
        let projected_interval = self.speedup_modelled_interval(r.config.kind, SEED_CPUS);
        let extra = LockExtra {
            completion_ms: self.completion_ms(r),
            small_p50_ns: percentile(&r.small_ns, 0.5),
            small_p99_ns: percentile(&r.small_ns, 0.99),
            small_max_ns: r.small_ns.last().copied().unwrap_or(0.0),
            small_requests: r.small_ns.len() as u64,
            calibration: self
                .calibration
                .iter()
                .find(|(p, _)| *p == r.config.policy)
                .map(|(_, c)| *c),
            handoff_ns: self
                .handoff
                .iter()
                .find(|(k, _)| *k == r.config.kind)
                .map(|(_, h)| *h),
            model_projection: Projections(r.model.clone()),
            model_error_at_measured_cpus: Self::model_at(r, self.threads)
                .map(|m| m.completion_ns / 1e6 / self.completion_ms(r) - 1.0),
            seed: projected.map(|_| LockSeed {
                cpus: SEED_CPUS,
                per_page_speedup: SEED_SPEEDUP,
                workload: "kernel build",
            }),
            per_page_speedup_projected_8cpus: projected,
            per_page_speedup_projected_8cpus_interval: projected_interval,
            ratio_to_seed: projected.map(|s| s / SEED_SPEEDUP),
            ratio_to_seed_interval: projected_interval.map(|i| i.scaled(1.0 / SEED_SPEEDUP)),
            per_page_speedup_measured: self.speedup_measured(r.config.kind),
            per_page_speedup_measured_interval: self.speedup_interval(r.config.kind),
        };
        Row::new(r.config, model, params, r.per_page.clone(), extra)
    }

    /// The printed table: the measured runs, the calibration, the
    /// projections and the seed.
    pub fn render(&self) -> String {
        let mut t = self.measured_table();
        t += &self.calibration_text();
        t += &self.projection_table();
        t += &format!(
            "\nSeed (2007): a kernel build {:.0} % faster with per-page locking on {SEED_CPUS} CPUs (per-batch / per-page = {SEED_SPEEDUP:.2}).\n",
            (SEED_SPEEDUP - 1.0) * 100.0
        );
        t
    }

    fn measured_table(&self) -> String {
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
        t
    }

    fn calibration_text(&self) -> String {
        let mut t = "\nCalibration (one CPU, uncontended; the model's parameters):\n".to_string();
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
        t + "\n"
    }

    fn projection_table(&self) -> String {
        let mut t = format!(
            "\nPROJECTION (discrete-event model, docs/experiments.md): per-batch / per-page completion, and the order-1 requests' mean wait; \
             measured: median [95 % interval] of the interleaved trials ({MARKS}); model: median [95 % interval] of one projection per trial, each from its own chunk of the calibration's jobs and that trial's handoff\n\
             {:<8} {:>22}",
            "lock", "measured"
        );
        for cpus in std::iter::once(self.threads).chain(PROJECTED_CPUS) {
            t += &format!(" {:>22}", format!("model {cpus} CPUs"));
        }
        t += "\n";
        for kind in ZoneLockKind::ALL {
            t += &format!(
                "{:<8} {:>22}",
                kind.name(),
                self.speedup_interval(kind)
                    .map_or("n/a".into(), |i| ratio_cell(&i))
            );
            for cpus in std::iter::once(self.threads).chain(PROJECTED_CPUS) {
                let cell_text = self
                    .speedup_modelled_interval(kind, cpus)
                    .map_or("n/a".into(), |i| ratio_cell(&i));
                t += &format!(" {cell_text:>22}");
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
        t
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// A row's parameters.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct LockParams {
    /// `per-batch` or `per-page`.
    pub policy: &'static str,
    /// The lock's name.
    pub lock: &'static str,
    /// Threads, one per CPU.
    pub threads: usize,
    /// The era.
    pub era: &'static str,
    /// Whether every thread was pinned.
    pub pinned: bool,
    /// Jobs per thread.
    pub jobs: u64,
    /// Pages per job.
    pub pages: u64,
}

/// The seed beside the 8-CPU projection.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct LockSeed {
    /// Its CPUs.
    pub cpus: usize,
    /// Its per-batch over per-page time.
    pub per_page_speedup: f64,
    /// What it ran.
    pub workload: &'static str,
}

/// The model's results by CPU count (`{"2": …, "4": …}`).
#[derive(Clone, Debug)]
pub struct Projections(pub Vec<(usize, SimResult)>);

impl Serialize for Projections {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(cpus, m)| (cpus.to_string(), m)))
    }
}

/// A row's extra fields.
#[derive(Clone, Debug, Serialize)]
pub struct LockExtra {
    /// The job set's completion, ms.
    pub completion_ms: f64,
    /// The order-1 requests' median latency.
    pub small_p50_ns: f64,
    /// Their 99th percentile.
    pub small_p99_ns: f64,
    /// Their worst.
    pub small_max_ns: f64,
    /// How many there were.
    pub small_requests: u64,
    /// The policy's calibration.
    pub calibration: Option<Calibration>,
    /// The lock's handoff cost.
    pub handoff_ns: Option<f64>,
    /// The model at the measured CPUs and the projections.
    pub model_projection: Projections,
    /// The model's completion over the measured one, less 1.
    pub model_error_at_measured_cpus: Option<f64>,
    /// The seed, where the 8-CPU projection exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<LockSeed>,
    /// Per-batch over per-page completion, modelled at 8 CPUs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_page_speedup_projected_8cpus: Option<f64>,
    /// The same over the per-trial projections, `{median, lo, hi, ...}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_page_speedup_projected_8cpus_interval: Option<Interval>,
    /// That over the seed's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_seed: Option<f64>,
    /// The same from the per-trial projections.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_seed_interval: Option<Interval>,
    /// Per-batch over per-page completion, measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_page_speedup_measured: Option<f64>,
    /// The same with its interval, `{median, lo, hi, ...}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_page_speedup_measured_interval: Option<Interval>,
}

/// One row of `bench lock`'s report.
pub type LockRow = Row<LockConfig, LockParams, LockExtra>;

impl Serialize for LockConfig {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.name())
    }
}

/// `bench lock`'s parameters.
#[derive(Clone, Copy, Debug, Default)]
pub struct LockOptions {
    /// Threads, one per CPU (default: the machine's CPUs).
    pub threads: Option<usize>,
    /// Jobs per thread (default 400, scaled by the plan).
    pub jobs: Option<u64>,
    /// The per-CPU batch (default: the era's formula).
    pub batch: Option<u32>,
}

/// The experiment `bench lock`.
pub struct Lock;

impl Experiment for Lock {
    const ID: ExperimentId = ExperimentId::Lock;
    type Params = LockOptions;
    type Results = LockResults;
    type Row = LockRow;

    fn measure(ctx: &Ctx, p: &LockOptions) -> Result<LockResults, RunError> {
        ctx.visit(measure::Visitor {
            plan: ctx.plan,
            threads: p.threads.unwrap_or(ctx.machine.cores.max(1)),
            jobs: p.jobs.unwrap_or(ctx.plan.iters(400, 10)),
            pages: 512,
            era: ctx.era,
            batch: p.batch,
        })
    }

    fn rows(ctx: &Ctx, results: &LockResults) -> Vec<LockRow> {
        results.rows(ctx.model)
    }

    fn render(_: &Ctx, results: &LockResults) -> String {
        results.render()
    }

    fn comparisons(_: &Ctx, results: &LockResults) -> Vec<Comparison> {
        let measured = ZoneLockKind::ALL.into_iter().filter_map(|kind| {
            let what = format!("per-batch / per-page: {} lock", kind.name());
            Some(Comparison::from_interval(
                what,
                results.speedup_interval(kind)?,
            ))
        });
        let projected = ZoneLockKind::ALL.into_iter().filter_map(|kind| {
            let what = format!(
                "per-batch / per-page: {} lock, modelled at {SEED_CPUS} CPUs",
                kind.name()
            );
            Some(Comparison::from_interval(
                what,
                results.speedup_modelled_interval(kind, SEED_CPUS)?,
            ))
        });
        measured.chain(projected).collect()
    }
}
