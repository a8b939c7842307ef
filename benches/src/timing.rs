//! Timing after the kernel's `time_bench`: serialised counter reads around
//! a run of many iterations, several trials, median with min and max, in
//! counter ticks and in nanoseconds.
//!
//! On x86_64 the counter is the TSC: `lfence; rdtsc` starts a measurement
//! (earlier instructions have retired), `rdtscp; lfence` ends it (the
//! measured work has finished and later instructions have not started).
//! TSC cycles tick at the constant TSC rate, not the core clock (on this
//! machine class about 0.8 TSC ticks per core cycle); [`tsc_hz`] calibrates
//! the rate against the monotonic clock once per process.
//!
//! On aarch64 it is the generic timer's virtual count, `CNTVCT_EL0`, read
//! between `isb`s (the kernel's `get_cycles` reads the same register);
//! its rate is `CNTFRQ_EL0`, often tens of MHz, so one tick is many core
//! cycles. Elsewhere the counter is the monotonic clock in ns.
//! [`COUNTER_UNIT`] names the unit every table prints.
//!
//! # Safety
//! The only unsafe code is the counter reads, which read a register.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde::Serialize;

/// The unit of the cycles columns: TSC cycles, generic-timer ticks, or ns.
#[cfg(target_arch = "x86_64")]
pub const COUNTER_UNIT: &str = "TSC cycles";
/// The unit of the cycles columns: TSC cycles, generic-timer ticks, or ns.
#[cfg(target_arch = "aarch64")]
pub const COUNTER_UNIT: &str = "CNTVCT ticks";
/// The unit of the cycles columns: TSC cycles, generic-timer ticks, or ns.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub const COUNTER_UNIT: &str = "ns (monotonic clock)";

/// The counter's short name, for the machine line (`TSC 2.60 GHz`).
pub const COUNTER_NAME: &str = if cfg!(target_arch = "x86_64") {
    "TSC"
} else if cfg!(target_arch = "aarch64") {
    "CNTVCT"
} else {
    "clock"
};

/// Reads the counter after earlier instructions retire (`lfence; rdtsc;
/// lfence`; aarch64: `isb; mrs cntvct_el0; isb`).
#[inline(always)]
pub fn tsc_start() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: lfence and rdtsc have no memory-safety preconditions.
    unsafe {
        use std::arch::x86_64::{_mm_lfence, _rdtsc};
        _mm_lfence();
        let t = _rdtsc();
        _mm_lfence();
        t
    }
    #[cfg(target_arch = "aarch64")]
    {
        cntvct()
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        monotonic_ns()
    }
}

/// Reads the counter after the measured work finishes (`rdtscp; lfence`;
/// aarch64: `isb; mrs cntvct_el0; isb`).
#[inline(always)]
pub fn tsc_stop() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: rdtscp writes the aux value into a local; lfence is a fence.
    unsafe {
        use std::arch::x86_64::{__rdtscp, _mm_lfence};
        let mut aux = 0u32;
        let t = __rdtscp(&mut aux);
        _mm_lfence();
        t
    }
    #[cfg(target_arch = "aarch64")]
    {
        cntvct()
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        monotonic_ns()
    }
}

/// Reads the counter without ordering it against the work around it
/// (`rdtsc`; aarch64: `mrs cntvct_el0` without barriers): a few ns, for
/// accumulating the cost of many short calls where serialising every read
/// would cost more than the calls (the replay's per-allocation times).
#[inline(always)]
pub fn tsc_now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: rdtsc has no memory-safety preconditions.
    unsafe {
        std::arch::x86_64::_rdtsc()
    }
    #[cfg(target_arch = "aarch64")]
    {
        let t: u64;
        // SAFETY: reading the virtual count register, which EL0 may read
        // (Linux sets CNTKCTL_EL1.EL0VCTEN). No memory is touched.
        unsafe {
            std::arch::asm!("mrs {t}, cntvct_el0", t = out(reg) t, options(nostack, nomem, preserves_flags));
        }
        t
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        monotonic_ns()
    }
}

/// `CNTVCT_EL0` between instruction barriers: earlier instructions have
/// completed before the read, later ones start after it.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
fn cntvct() -> u64 {
    let t: u64;
    // SAFETY: reading the virtual count register, which EL0 may read
    // (Linux sets CNTKCTL_EL1.EL0VCTEN); `isb` is a barrier. No memory is
    // touched.
    unsafe {
        std::arch::asm!(
            "isb",
            "mrs {t}, cntvct_el0",
            "isb",
            t = out(reg) t,
            options(nostack, nomem, preserves_flags),
        );
    }
    t
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn monotonic_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Counter ticks per second: on aarch64 `CNTFRQ_EL0`; otherwise
/// calibrated once against `Instant` over 50 ms.
pub fn tsc_hz() -> u64 {
    #[cfg(target_arch = "aarch64")]
    {
        let hz: u64;
        // SAFETY: reading the counter frequency register, readable at EL0.
        unsafe {
            std::arch::asm!(
                "mrs {hz}, cntfrq_el0",
                hz = out(reg) hz,
                options(nostack, nomem, preserves_flags),
            );
        }
        if hz > 0 {
            return hz;
        }
    }
    static HZ: OnceLock<u64> = OnceLock::new();
    *HZ.get_or_init(|| {
        let t0 = Instant::now();
        let c0 = tsc_start();
        while t0.elapsed() < Duration::from_millis(50) {
            std::hint::spin_loop();
        }
        let c1 = tsc_stop();
        let secs = t0.elapsed().as_secs_f64();
        ((c1 - c0) as f64 / secs) as u64
    })
}

/// Median, min, max and every trial's value.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Stat {
    /// Median of the trials.
    pub median: f64,
    /// Smallest trial.
    pub min: f64,
    /// Largest trial.
    pub max: f64,
    /// Every trial, in order.
    pub trials: Vec<f64>,
}

impl Stat {
    /// Summarises `trials` (at least one).
    pub fn of(trials: Vec<f64>) -> Stat {
        let mut sorted = trials.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Stat {
            median,
            min: sorted[0],
            max: sorted[n - 1],
            trials,
        }
    }
}

/// One measured quantity per operation, in ns and TSC cycles.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Measurement {
    /// Nanoseconds per operation.
    pub ns_per_op: Stat,
    /// TSC cycles per operation.
    pub cycles_per_op: Stat,
    /// Which interleaved set its trials belong to: two measurements of one
    /// set ran trial by trial in turn, so their trials pair (`None`: timed
    /// on its own).
    #[serde(skip)]
    pub interleaved_with: Option<u64>,
}

impl Measurement {
    /// A measurement from per-trial ns per operation that a workload timed
    /// itself (a replay's allocator calls, a job set's wall time between
    /// barriers); the cycles are the same trials at the TSC rate.
    pub fn from_ns(ns: Vec<f64>) -> Measurement {
        let ghz = tsc_hz() as f64 / 1e9;
        Measurement {
            cycles_per_op: Stat::of(ns.iter().map(|n| n * ghz).collect()),
            ns_per_op: Stat::of(ns),
            interleaved_with: None,
        }
    }
}

impl Measurement {
    /// This measurement tagged as one of the interleaved set `set`
    /// ([`next_set`]).
    pub fn in_set(self, set: u64) -> Measurement {
        Measurement {
            interleaved_with: Some(set),
            ..self
        }
    }
}

/// How many trials, how long each should be, and when to run more.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Plan {
    /// Timed trials after one warm-up run.
    pub trials: usize,
    /// Scale for the experiments' iteration counts (1.0 full, smaller in
    /// quick mode).
    pub scale: f64,
    /// The shortest trial: a trial whose run takes less repeats it until
    /// this much time has passed ([`Plan::measure`]); zero runs it once.
    pub min_time: Duration,
    /// Up to how many trials a run grows when an interval is too wide
    /// (`trials` itself: never).
    pub max_trials: usize,
}

impl Plan {
    /// Full measurement: 7 trials, extended up to 31 while an interval is
    /// wider than ±5 % (`crate::spread::Extension::DEFAULT`).
    pub const FULL: Plan = Plan {
        trials: 7,
        scale: 1.0,
        min_time: Duration::ZERO,
        max_trials: 31,
    };
    /// Quick mode for tests and smoke runs: 3 short trials, never extended.
    pub const QUICK: Plan = Plan {
        trials: 3,
        scale: 0.01,
        min_time: Duration::ZERO,
        max_trials: 3,
    };

    /// `n` scaled for this plan, at least `floor`.
    pub fn iters(&self, n: u64, floor: u64) -> u64 {
        ((n as f64 * self.scale) as u64).max(floor)
    }

    /// [`measure`] with this plan's trials, each lasting at least
    /// [`Plan::min_time`].
    pub fn measure(&self, run: impl FnMut() -> u64) -> Measurement {
        let mut one = [()];
        let mut run = run;
        let mut m = self.measure_interleaved(&mut one, |_| run());
        m.pop().expect("one variant, one measurement")
    }

    /// [`measure_interleaved`] with this plan's trials, each trial of each
    /// variant lasting at least [`Plan::min_time`].
    pub fn measure_interleaved<T>(
        &self,
        variants: &mut [T],
        run: impl FnMut(&mut T) -> u64,
    ) -> Vec<Measurement> {
        interleaved(self.trials, self.min_time, variants, run)
    }
}

/// Runs `run` once to warm up, then `trials` times; `run` returns how many
/// operations it did. Per-operation ns and TSC cycles of each trial.
pub fn measure(trials: usize, mut run: impl FnMut() -> u64) -> Measurement {
    let mut one = [()];
    let mut m = interleaved(trials, Duration::ZERO, &mut one, |_| run());
    m.pop().expect("one variant, one measurement")
}

/// [`measure`] for several variants at once, their trials interleaved
/// (one trial of each in turn, after one warm-up run of each), so that the
/// machine's drift over a run falls on every variant alike rather than on
/// whichever ran last. `run` does one trial of the variant it is handed
/// (its state: a variant tag, an allocator, a closure) and returns how
/// many operations it did; one measurement per variant, in order, tagged
/// as one set so that their trials pair.
pub fn measure_interleaved<T>(
    trials: usize,
    variants: &mut [T],
    run: impl FnMut(&mut T) -> u64,
) -> Vec<Measurement> {
    interleaved(trials, Duration::ZERO, variants, run)
}

/// A fresh tag for one interleaved set: the measurements of one set are
/// tagged with one number, so that a comparison can tell paired trials
/// from trials that merely share an index
/// ([`Measurement::interleaved_with`]). A workload that interleaves its
/// own trials (a job set, a pool grown and shrunk in turn) tags its
/// measurements with [`Measurement::in_set`].
pub fn next_set() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SETS: AtomicU64 = AtomicU64::new(1);
    // Relaxed: the number only has to be unique, it orders nothing.
    SETS.fetch_add(1, Ordering::Relaxed)
}

/// The measuring loop behind [`measure`], [`measure_interleaved`] and
/// [`Plan`]'s forms: one warm-up run of each variant, then `trials` rounds
/// of one trial of each; a trial repeats its variant's run until
/// `min_time` has passed.
fn interleaved<T>(
    trials: usize,
    min_time: Duration,
    variants: &mut [T],
    mut run: impl FnMut(&mut T) -> u64,
) -> Vec<Measurement> {
    for v in variants.iter_mut() {
        std::hint::black_box(run(v));
    }
    let set = (variants.len() > 1).then(next_set);
    let mut ns = vec![Vec::with_capacity(trials); variants.len()];
    let mut cycles = vec![Vec::with_capacity(trials); variants.len()];
    for _ in 0..trials.max(1) {
        for (i, v) in variants.iter_mut().enumerate() {
            let t0 = Instant::now();
            let c0 = tsc_start();
            let mut ops = 0;
            loop {
                ops += run(v);
                if t0.elapsed() >= min_time {
                    break;
                }
            }
            let c1 = tsc_stop();
            let dt = t0.elapsed();
            let ops = ops.max(1) as f64;
            ns[i].push(dt.as_nanos() as f64 / ops);
            cycles[i].push((c1 - c0) as f64 / ops);
        }
    }
    ns.into_iter()
        .zip(cycles)
        .map(|(ns, cycles)| Measurement {
            ns_per_op: Stat::of(ns),
            cycles_per_op: Stat::of(cycles),
            interleaved_with: set,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_median_min_max() {
        let s = Stat::of(vec![3.0, 1.0, 2.0]);
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(Stat::of(vec![4.0, 1.0, 2.0, 3.0]).median, 2.5);
    }

    #[test]
    fn tsc_is_monotonic_and_calibrated() {
        let a = tsc_start();
        let b = tsc_stop();
        assert!(b > a);
        let hz = tsc_hz();
        assert!((1_000_000..20_000_000_000).contains(&hz), "{hz}");
        let m = measure(3, || {
            let mut x = 0u64;
            for i in 0..1000 {
                x = std::hint::black_box(x + i);
            }
            1000
        });
        assert!(m.ns_per_op.median > 0.0 && m.cycles_per_op.median > 0.0);
    }

    #[test]
    fn interleaved_trials_are_tagged_as_one_set_and_min_time_repeats_a_run() {
        let plan = Plan {
            min_time: Duration::from_millis(2),
            ..Plan::QUICK
        };
        let mut calls = [0u64, 0];
        let m = plan.measure_interleaved(&mut calls, |c| {
            *c += 1;
            1
        });
        assert_eq!(m[0].interleaved_with, m[1].interleaved_with);
        assert!(m[0].interleaved_with.is_some());
        // One warm-up, then each of 3 trials repeats until 2 ms have passed.
        assert!(calls[0] > 1 + 3, "{calls:?}");
        assert_eq!(measure(3, || 1).interleaved_with, None);
        assert_eq!(plan.measure(|| 1).interleaved_with, None);
    }
}
