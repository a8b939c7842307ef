//! A discrete-event model of the lock experiment's job set, to project the
//! measured two-CPU result to more CPUs than this machine has.
//!
//! **The model.** Each of `cpus` CPUs runs `jobs` jobs back to back. A
//! job is the [`lock_job`](crate::workloads::lock_job) of the experiment:
//! `pages` allocations, each `compute_ns` of work outside the zone lock
//! (the per-CPU list, `clear_page`, the process's writes, the free), with
//! `refills` batch refills spread over its allocations and `drains` batch
//! drains over its frees (as many as the measured run made per job), an
//! order-1 allocation between them and its free at the end, on the zone
//! path. Everything
//! done under the zone lock is a hold: `refill_ns` and `drain_ns` per
//! batch (with [`SimParams::per_page`], `batch` holds of a batch's share
//! each), `small_alloc_ns` and `small_free_ns` per job. Holds are served
//! by one lock: in arrival order for the ticket and queued locks; for the
//! unfair lock, by a uniformly random pick among the CPUs waiting when it
//! is released — the releaser included, when its next step asks for the
//! lock again at once (the per-page policy's next page).
//!
//! A hold taken by another CPU than the last holder costs `handoff_ns`
//! more: the lock's cache line and the zone's free-list lines move
//! between CPUs. That cost is measured, not fitted: two CPUs taking the
//! zone lock in turn against one CPU taking it alone.
//!
//! **What it leaves out.** Shared caches and memory bandwidth (the work of
//! a page is as fast on 16 CPUs as on one), the growth of a handoff with
//! the distance between CPUs on a bigger machine, and any variance of the
//! work around its mean. The two-CPU point, measured, says how much these
//! matter here.
//!
//! The parameters come from one CPU's uncontended run of the same job set
//! ([`SimParams`] is filled by the experiment from its calibration).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::workloads::xorshift;

/// The model's parameters, in ns.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct SimParams {
    /// CPUs running jobs at once.
    pub cpus: usize,
    /// Jobs per CPU.
    pub jobs: u64,
    /// Order-0 pages per job.
    pub pages: u64,
    /// Pages per refill and per drain (the per-page policy's holds per
    /// batch).
    pub batch: u64,
    /// Batch refills per job (measured: how many of a job's allocations
    /// found the per-CPU list empty), spread evenly over its allocations.
    pub refills: u64,
    /// Batch drains per job, spread evenly over its frees.
    pub drains: u64,
    /// Work per page outside the zone lock.
    pub compute_ns: f64,
    /// Zone-lock hold of one batch refill (`rmqueue_bulk`).
    pub refill_ns: f64,
    /// Zone-lock hold of one batch drain (`free_pcppages_bulk`).
    pub drain_ns: f64,
    /// Zone-lock hold of the order-1 allocation.
    pub small_alloc_ns: f64,
    /// Zone-lock hold of the order-1 free.
    pub small_free_ns: f64,
    /// What a hold costs more when the lock last belonged to another CPU:
    /// the lock's and the zone's lines crossing between CPUs (measured
    /// with two CPUs taking the zone lock in turn).
    pub handoff_ns: f64,
    /// The 2007 proposal: the lock taken per page of a batch.
    pub per_page: bool,
    /// Waiters served in arrival order (ticket, queued) or at random
    /// (unfair).
    pub fair: bool,
    /// The unfair lock's random picks.
    pub seed: u64,
}

/// What the model predicts.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct SimResult {
    /// When the last CPU finished its jobs.
    pub completion_ns: f64,
    /// Mean wait for the lock per acquisition.
    pub mean_wait_ns: f64,
    /// Mean wait of the order-1 allocations.
    pub small_wait_ns: f64,
    /// Share of the run the lock was held.
    pub lock_busy: f64,
}

/// One step of a CPU's program.
#[derive(Clone, Copy, PartialEq)]
enum Step {
    Compute(f64),
    /// A hold; `small` marks the order-1 allocation.
    Lock {
        hold: f64,
        small: bool,
    },
    Done,
}

/// A CPU's position in its job set.
#[derive(Clone, Copy)]
struct Cursor {
    job: u64,
    /// 0..pages: allocations; pages: the order-1 allocation;
    /// pages+1..=2*pages: frees; 2*pages+1: the order-1 free.
    page: u64,
    /// Within a per-page batch: holds left of the current batch.
    pending: u64,
    /// The allocation's compute is still due after its refill.
    compute_due: bool,
}

impl SimParams {
    fn hold(&self, batch_ns: f64) -> f64 {
        if self.per_page {
            batch_ns / self.batch as f64
        } else {
            batch_ns
        }
    }

    fn holds_per_batch(&self) -> u64 {
        if self.per_page { self.batch } else { 1 }
    }

    /// Whether step `i` of `n` is one of `k` spread evenly over them.
    fn due(i: u64, k: u64, n: u64) -> bool {
        (i + 1) * k / n.max(1) > i * k / n.max(1)
    }

    /// The step at `c`, advancing it.
    fn next(&self, c: &mut Cursor) -> Step {
        loop {
            if c.job == self.jobs {
                return Step::Done;
            }
            if c.pending > 0 {
                c.pending -= 1;
                let batch_ns = if c.page <= self.pages {
                    self.refill_ns
                } else {
                    self.drain_ns
                };
                return Step::Lock {
                    hold: self.hold(batch_ns),
                    small: false,
                };
            }
            if c.compute_due {
                c.compute_due = false;
                c.page += 1;
                return Step::Compute(self.compute_ns);
            }
            let p = c.page;
            if p < self.pages {
                c.compute_due = true;
                if Self::due(p, self.refills, self.pages) {
                    c.pending = self.holds_per_batch();
                }
                continue;
            }
            if p == self.pages {
                c.page += 1;
                return Step::Lock {
                    hold: self.small_alloc_ns,
                    small: true,
                };
            }
            if p <= 2 * self.pages {
                c.page += 1;
                if Self::due(p - self.pages - 1, self.drains, self.pages) {
                    c.pending = self.holds_per_batch();
                }
                continue;
            }
            c.job += 1;
            c.page = 0;
            return Step::Lock {
                hold: self.small_free_ns,
                small: false,
            };
        }
    }
}

/// A time-ordered event: a CPU ready to run its next step, or the lock's
/// release. At equal times a ready CPU goes first, so a holder whose next
/// step asks for the lock again is among the waiters its release chooses
/// from.
#[derive(PartialEq)]
struct Event {
    t: f64,
    /// `None`: the lock's release.
    cpu: Option<usize>,
}

impl Eq for Event {}

impl Ord for Event {
    fn cmp(&self, other: &Self) -> Ordering {
        // The heap is a max-heap: the earliest event is the greatest; at a
        // tie a CPU (Some) before the release (None), lower CPUs first.
        other
            .t
            .total_cmp(&self.t)
            .then_with(|| match (self.cpu, other.cpu) {
                (Some(a), Some(b)) => b.cmp(&a),
                (Some(_), None) => Ordering::Greater,
                (None, Some(_)) => Ordering::Less,
                (None, None) => Ordering::Equal,
            })
    }
}

impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A CPU waiting for the lock.
struct Waiter {
    cpu: usize,
    since: f64,
    hold: f64,
    small: bool,
}

/// The lock and what it saw.
#[derive(Default)]
struct Lock {
    held: bool,
    /// The CPU that held it last.
    last: Option<usize>,
    handoff: f64,
    waits: f64,
    acquisitions: u64,
    busy: f64,
    small_waits: f64,
    smalls: u64,
}

impl Lock {
    /// `cpu` takes the lock at `t` after waiting since `since`; its hold
    /// ends (and it runs on) at `t + hold`.
    fn take(&mut self, heap: &mut BinaryHeap<Event>, t: f64, w: &Waiter) {
        self.held = true;
        let hold = w.hold
            + if self.last.is_some_and(|c| c != w.cpu) {
                self.handoff
            } else {
                0.0
            };
        self.last = Some(w.cpu);
        let wait = t - w.since;
        self.waits += wait;
        self.acquisitions += 1;
        self.busy += hold;
        if w.small {
            self.small_waits += wait;
            self.smalls += 1;
        }
        heap.push(Event {
            t: t + hold,
            cpu: Some(w.cpu),
        });
        heap.push(Event {
            t: t + hold,
            cpu: None,
        });
    }
}

/// Runs the model.
pub fn simulate(p: &SimParams) -> SimResult {
    let cpus = p.cpus.max(1);
    let mut cursors = vec![
        Cursor {
            job: 0,
            page: 0,
            pending: 0,
            compute_due: false,
        };
        cpus
    ];
    let mut heap: BinaryHeap<Event> = (0..cpus)
        .map(|cpu| Event {
            t: 0.0,
            cpu: Some(cpu),
        })
        .collect();
    let mut waiters: Vec<Waiter> = Vec::new();
    let mut lock = Lock {
        handoff: p.handoff_ns,
        ..Lock::default()
    };
    let mut rng = p.seed | 1;
    let mut finish = 0.0f64;
    while let Some(Event { t, cpu }) = heap.pop() {
        let Some(cpu) = cpu else {
            // The release: the next holder, if anyone waits.
            lock.held = false;
            if !waiters.is_empty() {
                let i = if p.fair {
                    0
                } else {
                    (xorshift(&mut rng) % waiters.len() as u64) as usize
                };
                let w = waiters.remove(i);
                lock.take(&mut heap, t, &w);
            }
            continue;
        };
        match p.next(&mut cursors[cpu]) {
            Step::Compute(d) => heap.push(Event {
                t: t + d,
                cpu: Some(cpu),
            }),
            Step::Lock { hold, small } => {
                let w = Waiter {
                    cpu,
                    since: t,
                    hold,
                    small,
                };
                if lock.held || !waiters.is_empty() {
                    waiters.push(w);
                } else {
                    lock.take(&mut heap, t, &w);
                }
            }
            Step::Done => finish = finish.max(t),
        }
    }
    SimResult {
        completion_ns: finish,
        mean_wait_ns: lock.waits / lock.acquisitions.max(1) as f64,
        small_wait_ns: lock.small_waits / lock.smalls.max(1) as f64,
        lock_busy: lock.busy / finish.max(f64::MIN_POSITIVE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(cpus: usize) -> SimParams {
        SimParams {
            cpus,
            jobs: 20,
            pages: 62,
            batch: 31,
            refills: 2,
            drains: 2,
            compute_ns: 100.0,
            refill_ns: 600.0,
            drain_ns: 500.0,
            small_alloc_ns: 80.0,
            small_free_ns: 70.0,
            handoff_ns: 0.0,
            per_page: false,
            fair: true,
            seed: 7,
        }
    }

    /// One CPU never waits: the completion is the sum of its steps.
    #[test]
    fn one_cpu_is_the_sum_of_its_steps() {
        let p = params(1);
        let r = simulate(&p);
        let per_job = 62.0 * 100.0 + 2.0 * 600.0 + 2.0 * 500.0 + 80.0 + 70.0;
        assert!((r.completion_ns - 20.0 * per_job).abs() < 1e-6, "{r:?}");
        assert_eq!(r.mean_wait_ns, 0.0);
        let per_page = simulate(&SimParams {
            per_page: true,
            ..p
        });
        assert!(
            (per_page.completion_ns - r.completion_ns).abs() < 1e-6,
            "same holds, split"
        );
    }

    /// More CPUs than the lock can serve: the lock saturates, the
    /// completion grows with the CPUs, and waits appear.
    #[test]
    fn contention_grows_with_cpus() {
        let one = simulate(&params(1));
        let many = simulate(&SimParams {
            compute_ns: 10.0,
            ..params(16)
        });
        assert!(many.mean_wait_ns > 0.0);
        assert!(many.lock_busy > 0.9, "{many:?}");
        let two = simulate(&params(2));
        assert!(two.completion_ns >= one.completion_ns - 1e-6);
    }

    /// The unfair lock with per-page holds lets the releaser win often, so
    /// the order-1 requests wait longer than with a fair lock.
    #[test]
    fn unfair_per_page_holds_starve_the_small_requests() {
        let base = SimParams {
            cpus: 4,
            compute_ns: 20.0,
            per_page: true,
            ..params(4)
        };
        let fair = simulate(&base);
        let unfair = simulate(&SimParams {
            fair: false,
            ..base
        });
        assert!(
            unfair.small_wait_ns > fair.small_wait_ns,
            "{fair:?} {unfair:?}"
        );
    }
}
