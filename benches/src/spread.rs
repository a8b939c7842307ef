//! Spreads and verdicts: how far a comparison of two interleaved
//! measurements can be trusted.
//!
//! pfnlab's trials are interleaved: trial *i* of every variant runs in the
//! same stretch of time, so a machine whose speed drifts (this class of
//! machine drifts by up to 2× within minutes) moves trial *i* of both
//! sides together. The honest comparison is therefore **paired**: the
//! ratio (or the difference) of trial *i* of one side to trial *i* of the
//! other, one value per trial, and then the median of those values.
//!
//! The interval around that median is the distribution-free one for a
//! median: with *n* paired values sorted, the *k*-th smallest and the
//! *k*-th largest bound the median with probability
//! `1 − 2·P(Bin(n, ½) < k)`, whatever the distribution of the values. No
//! resampling and no random numbers, so the same trials always give the
//! same interval. [`CONFIDENCE`] is the level asked for; with few trials
//! the widest interval (the smallest and the largest value) may not reach
//! it, and [`Interval::confidence`] then says what it does reach (five
//! trials reach 93.75 %, six 96.9 %).
//!
//! A [`Verdict`] names a direction only when the interval excludes "no
//! difference" (a ratio of 1); otherwise it is [`Verdict::WithinNoise`] with
//! the interval's half-width, which is what a reading prints.

use std::fmt;

use serde::Serialize;

/// The confidence level asked of every interval: 95 %.
pub const CONFIDENCE: f64 = 0.95;

/// A median with the interval that bounds it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Interval {
    /// The median of the paired values.
    pub median: f64,
    /// The interval's lower bound.
    pub lo: f64,
    /// The interval's upper bound.
    pub hi: f64,
    /// The probability that `[lo, hi]` holds the true median (at least
    /// [`CONFIDENCE`] when there were enough trials).
    pub confidence: f64,
    /// How many paired values it was made from.
    pub trials: usize,
}

/// Why an interval could not be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpreadError {
    /// The two sides have different numbers of trials, so they cannot be
    /// paired.
    Unpaired {
        /// Trials of the first side.
        left: usize,
        /// Trials of the second side.
        right: usize,
    },
    /// No trials at all.
    Empty,
    /// A trial is not a finite, positive number.
    NotPositive,
}

impl fmt::Display for SpreadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpreadError::Unpaired { left, right } => write!(
                f,
                "cannot pair {left} trials with {right}: an interval needs interleaved trials of both sides"
            ),
            SpreadError::Empty => f.write_str("no trials to make an interval from"),
            SpreadError::NotPositive => f.write_str("a trial is not a finite, positive number"),
        }
    }
}

impl std::error::Error for SpreadError {}

impl Interval {
    /// The median of `values` and its distribution-free interval.
    pub fn of_median(values: &[f64]) -> Result<Interval, SpreadError> {
        if values.is_empty() {
            return Err(SpreadError::Empty);
        }
        if values.iter().any(|v| !v.is_finite()) {
            return Err(SpreadError::NotPositive);
        }
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        let (k, confidence) = order_statistic_rank(n, CONFIDENCE);
        Ok(Interval {
            median,
            lo: sorted[k - 1],
            hi: sorted[n - k],
            confidence,
            trials: n,
        })
    }

    /// The median ratio `a[i] / b[i]` over paired trials, with its
    /// interval: how many times `b` the cost `a` is.
    pub fn of_ratio(a: &[f64], b: &[f64]) -> Result<Interval, SpreadError> {
        let ratios = paired(a, b, |x, y| x / y)?;
        Interval::of_median(&ratios)
    }

    /// The median difference `a[i] − b[i]` over paired trials, with its
    /// interval.
    pub fn of_difference(a: &[f64], b: &[f64]) -> Result<Interval, SpreadError> {
        let diffs = paired(a, b, |x, y| x - y)?;
        Interval::of_median(&diffs)
    }

    /// Half the interval's width relative to its median (`0.05` is ±5 %).
    pub fn relative_half_width(&self) -> f64 {
        (self.hi - self.lo) / 2.0 / self.median.abs()
    }

    /// The verdict on a ratio interval: a direction only when the interval
    /// excludes 1.
    pub fn ratio_verdict(&self) -> Verdict {
        self.verdict_against(1.0)
    }

    /// The verdict on a difference interval: a direction only when the
    /// interval excludes 0.
    pub fn difference_verdict(&self) -> Verdict {
        self.verdict_against(0.0)
    }

    fn verdict_against(&self, none: f64) -> Verdict {
        if self.lo > none {
            Verdict::Higher
        } else if self.hi < none {
            Verdict::Lower
        } else {
            Verdict::WithinNoise {
                half_width_pct: 100.0 * self.relative_half_width(),
            }
        }
    }
}

impl fmt::Display for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.2} [{:.2}, {:.2}]", self.median, self.lo, self.hi)
    }
}

/// What a comparison may say.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The whole interval is above "no difference": the first side costs
    /// more.
    Higher,
    /// The whole interval is below "no difference": the first side costs
    /// less.
    Lower,
    /// The interval holds "no difference".
    WithinNoise {
        /// The interval's half-width, in percent of its median.
        half_width_pct: f64,
    },
}

impl Verdict {
    /// Whether the comparison may name a winner.
    pub fn is_decided(self) -> bool {
        !matches!(self, Verdict::WithinNoise { .. })
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Higher => f.write_str("costs more"),
            Verdict::Lower => f.write_str("costs less"),
            Verdict::WithinNoise { half_width_pct } => {
                write!(f, "within noise (±{half_width_pct:.1} %)")
            }
        }
    }
}

/// When to run more trials: an interval wider than `max_relative_half_width`
/// asks for more, up to `max_trials`, as criterion extends its sampling.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Extension {
    /// The widest interval accepted, as a half-width relative to the median.
    pub max_relative_half_width: f64,
    /// The most trials a measurement may grow to.
    pub max_trials: usize,
}

impl Extension {
    /// pfnlab's rule: ±5 % at most, up to 31 trials.
    pub const DEFAULT: Extension = Extension {
        max_relative_half_width: 0.05,
        max_trials: 31,
    };

    /// Whether `interval`, made from `trials` trials, should be made again
    /// from more.
    pub fn wants_more(&self, interval: &Interval) -> bool {
        interval.trials < self.max_trials
            && interval.relative_half_width() > self.max_relative_half_width
    }
}

fn paired(a: &[f64], b: &[f64], f: impl Fn(f64, f64) -> f64) -> Result<Vec<f64>, SpreadError> {
    if a.len() != b.len() {
        return Err(SpreadError::Unpaired {
            left: a.len(),
            right: b.len(),
        });
    }
    if a.is_empty() {
        return Err(SpreadError::Empty);
    }
    let positive = |v: &f64| v.is_finite() && *v > 0.0;
    if !a.iter().all(positive) || !b.iter().all(positive) {
        return Err(SpreadError::NotPositive);
    }
    Ok(a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect())
}

/// The largest rank `k` (1-based) such that the `k`-th smallest and the
/// `k`-th largest of `n` values bound their median with probability at
/// least `level`, and that probability; `k` = 1 (the extremes) with its
/// own probability when even that falls short.
fn order_statistic_rank(n: usize, level: f64) -> (usize, f64) {
    let extremes = (1, 1.0 - 2.0 * 0.5f64.powi(n as i32));
    // `pmf` is P(Bin(n, 1/2) = k - 1) and `cdf` P(Bin(n, 1/2) <= k - 1).
    let mut pmf = 0.5f64.powi(n as i32);
    let mut cdf = 0.0;
    let mut best = None;
    for k in 1..=n.div_ceil(2) {
        cdf += pmf;
        let coverage = 1.0 - 2.0 * cdf;
        if coverage < level {
            break;
        }
        best = Some((k, coverage));
        pmf *= (n - k + 1) as f64 / k as f64;
    }
    best.unwrap_or(extremes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_trials_use_the_extremes_at_their_own_level() {
        let i = Interval::of_median(&[3.0, 1.0, 5.0, 2.0, 4.0]).unwrap();
        assert_eq!((i.median, i.lo, i.hi), (3.0, 1.0, 5.0));
        assert!((i.confidence - 0.9375).abs() < 1e-12);
    }

    #[test]
    fn the_rank_follows_the_binomial_tables() {
        // Published distribution-free ranks for the median at 95 %:
        // n = 6 -> 1 (96.9 %), n = 9 -> 2 (96.1 %), n = 20 -> 6 (95.9 %).
        let (k6, c6) = order_statistic_rank(6, 0.95);
        assert_eq!(k6, 1);
        assert!((c6 - 0.96875).abs() < 1e-9);
        let (k9, c9) = order_statistic_rank(9, 0.95);
        assert_eq!(k9, 2);
        assert!((c9 - 0.9609375).abs() < 1e-9);
        let (k20, c20) = order_statistic_rank(20, 0.95);
        assert_eq!(k20, 6);
        assert!((0.95..0.97).contains(&c20));
    }

    #[test]
    fn a_uniform_sample_gives_the_expected_ranks() {
        // 1..=20 shuffled: the 95 % interval is the 6th and the 15th value.
        let mut v: Vec<f64> = (1..=20).map(f64::from).collect();
        v.reverse();
        v.swap(3, 17);
        let i = Interval::of_median(&v).unwrap();
        assert_eq!((i.lo, i.median, i.hi), (6.0, 10.5, 15.0));
    }

    #[test]
    fn identical_samples_are_within_noise() {
        let a = [10.0, 11.0, 9.5, 10.2, 10.8, 9.9, 10.1];
        let i = Interval::of_ratio(&a, &a).unwrap();
        assert_eq!((i.lo, i.median, i.hi), (1.0, 1.0, 1.0));
        assert!(!i.ratio_verdict().is_decided());
    }

    #[test]
    fn drift_shared_by_both_sides_cancels_in_the_pairs() {
        // The machine slows 2x over the run; b is 1.1x a in every trial.
        let a: Vec<f64> = (0..7).map(|t| 10.0 * (1.0 + t as f64 / 6.0)).collect();
        let b: Vec<f64> = a.iter().map(|x| x * 1.1).collect();
        let i = Interval::of_ratio(&b, &a).unwrap();
        assert!((i.lo - 1.1).abs() < 1e-12 && (i.hi - 1.1).abs() < 1e-12);
        assert_eq!(i.ratio_verdict(), Verdict::Higher);
    }

    #[test]
    fn a_clear_doubling_is_a_verdict_and_noise_is_not() {
        let a = [10.0, 10.5, 9.8, 10.1, 10.3, 9.9, 10.0];
        let twice: Vec<f64> = a.iter().map(|x| x * 2.0).collect();
        assert_eq!(
            Interval::of_ratio(&twice, &a).unwrap().ratio_verdict(),
            Verdict::Higher
        );
        assert_eq!(
            Interval::of_ratio(&a, &twice).unwrap().ratio_verdict(),
            Verdict::Lower
        );
        let noisy = [10.6, 9.6, 10.2, 9.7, 10.7, 9.5, 10.3];
        let v = Interval::of_ratio(&noisy, &a).unwrap().ratio_verdict();
        assert!(matches!(v, Verdict::WithinNoise { half_width_pct } if half_width_pct > 1.0));
        assert!(v.to_string().starts_with("within noise (±"));
    }

    #[test]
    fn differences_are_judged_against_zero() {
        let a = [5.0, 6.0, 5.5, 5.2, 5.8];
        let b = [3.0, 4.1, 3.4, 3.1, 3.9];
        let d = Interval::of_difference(&a, &b).unwrap();
        assert_eq!(d.difference_verdict(), Verdict::Higher);
        assert!((d.median - 2.0).abs() < 1e-9);
    }

    #[test]
    fn bad_trials_are_refused_not_averaged() {
        assert_eq!(
            Interval::of_ratio(&[1.0, 2.0], &[1.0]),
            Err(SpreadError::Unpaired { left: 2, right: 1 })
        );
        assert_eq!(Interval::of_ratio(&[], &[]), Err(SpreadError::Empty));
        assert_eq!(
            Interval::of_ratio(&[1.0, 0.0], &[1.0, 1.0]),
            Err(SpreadError::NotPositive)
        );
        assert_eq!(
            Interval::of_median(&[f64::NAN]),
            Err(SpreadError::NotPositive)
        );
    }

    #[test]
    fn a_wide_interval_asks_for_more_trials_up_to_the_cap() {
        let wide = Interval::of_median(&[1.0, 1.5, 2.0, 2.5, 3.0]).unwrap();
        let tight = Interval::of_median(&[1.0, 1.01, 1.02, 1.0, 1.01]).unwrap();
        assert!(Extension::DEFAULT.wants_more(&wide));
        assert!(!Extension::DEFAULT.wants_more(&tight));
        let capped = Interval {
            trials: Extension::DEFAULT.max_trials,
            ..wide
        };
        assert!(!Extension::DEFAULT.wants_more(&capped));
    }
}
