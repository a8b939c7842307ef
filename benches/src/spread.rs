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
//! Measurements timed one after the other (not interleaved) have no pairs:
//! trial *i* of each ran minutes apart. Their ratio is then bounded
//! **unpaired**: each side's median gets its own distribution-free interval
//! at `1 − (1 − CONFIDENCE)/2`, and the ratio's interval runs from the
//! lowest to the highest quotient of those bounds; by Bonferroni's
//! inequality it holds the ratio of the medians with at least the sum of
//! the two levels minus one. [`Interval::between`] picks the paired form
//! whenever the two measurements came from one interleaved set
//! ([`Measurement::interleaved_with`]), the unpaired form otherwise, and
//! [`Interval::method`] says which.
//!
//! A [`Verdict`] names a direction only when the interval excludes "no
//! difference" (a ratio of 1); otherwise it is [`Verdict::WithinNoise`] with
//! the interval's half-width, which is what a reading prints.

use std::fmt;

use serde::Serialize;

use crate::timing::{Measurement, Plan};

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
    /// How many values it was made from (paired: the pairs; unpaired:
    /// the smaller side's trials).
    pub trials: usize,
    /// Paired per-trial values, or two medians' intervals combined.
    pub method: Method,
}

/// How an interval was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// The median of per-trial ratios (or differences) of interleaved
    /// trials, with its binomial-rank interval.
    Paired,
    /// The ratio of two medians, each with its own binomial-rank interval
    /// (trials not interleaved).
    Unpaired,
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
            method: Method::Paired,
        })
    }

    /// The ratio of the median of `a` to the median of `b`, trials not
    /// paired: each median's interval at `1 − (1 − CONFIDENCE)/2`, the
    /// ratio's bounds their extreme quotients.
    pub fn of_unpaired_ratio(a: &[f64], b: &[f64]) -> Result<Interval, SpreadError> {
        let positive = |v: &[f64]| v.iter().all(|x| x.is_finite() && *x > 0.0);
        if a.is_empty() || b.is_empty() {
            return Err(SpreadError::Empty);
        }
        if !positive(a) || !positive(b) {
            return Err(SpreadError::NotPositive);
        }
        let level = 1.0 - (1.0 - CONFIDENCE) / 2.0;
        let (ia, ib) = (median_at(a, level), median_at(b, level));
        Ok(Interval {
            median: ia.median / ib.median,
            lo: ia.lo / ib.hi,
            hi: ia.hi / ib.lo,
            confidence: (ia.confidence + ib.confidence - 1.0).max(0.0),
            trials: a.len().min(b.len()),
            method: Method::Unpaired,
        })
    }

    /// How many times `b` the time per operation of `a` is: paired when
    /// both came from one interleaved set with as many trials, unpaired
    /// otherwise.
    pub fn between(a: &Measurement, b: &Measurement) -> Result<Interval, SpreadError> {
        let (x, y) = (&a.ns_per_op.trials, &b.ns_per_op.trials);
        let paired = a.interleaved_with.is_some()
            && a.interleaved_with == b.interleaved_with
            && x.len() == y.len();
        if paired {
            Interval::of_ratio(x, y)
        } else {
            Interval::of_unpaired_ratio(x, y)
        }
    }

    /// `num / den` of two intervals made apart (a cost over a difference
    /// of two others): the extreme quotients of their bounds, at the
    /// Bonferroni level of both; `None` unless `den` is wholly positive.
    pub fn quotient(num: &Interval, den: &Interval) -> Option<Interval> {
        (den.lo > 0.0 && num.lo > 0.0).then(|| Interval {
            median: num.median / den.median,
            lo: num.lo / den.hi,
            hi: num.hi / den.lo,
            confidence: (num.confidence + den.confidence - 1.0).max(0.0),
            trials: num.trials.min(den.trials),
            method: Method::Unpaired,
        })
    }

    /// This ratio scaled by a constant (a seed's ratio divides it): the
    /// same trials, the same verdict against `1 / by`.
    pub fn scaled(&self, by: f64) -> Interval {
        Interval {
            median: self.median * by,
            lo: self.lo * by,
            hi: self.hi * by,
            ..*self
        }
    }

    /// Its reciprocal: `b` over `a` instead of `a` over `b`.
    pub fn inverse(&self) -> Interval {
        Interval {
            median: 1.0 / self.median,
            lo: 1.0 / self.hi,
            hi: 1.0 / self.lo,
            ..*self
        }
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
        // The interval must reach the level asked before it may decide
        // anything (three trials reach 75 %, unpaired 50 %).
        let reached = self.confidence + 1e-9 >= CONFIDENCE;
        if !reached && (self.lo > none || self.hi < none) {
            Verdict::TooFewTrials {
                confidence_pct: 100.0 * self.confidence,
                trials: self.trials,
            }
        } else if self.lo > none {
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

/// The median of `values` with its interval at `level` (a level other
/// than [`CONFIDENCE`], for the unpaired form's two sides).
fn median_at(values: &[f64], level: f64) -> Interval {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let (k, confidence) = order_statistic_rank(n, level);
    Interval {
        median: crate::timing::Stat::of(sorted.clone()).median,
        lo: sorted[k - 1],
        hi: sorted[n - k],
        confidence,
        trials: n,
        method: Method::Unpaired,
    }
}

/// A ratio as a reading states it: `1.52x [1.40, 1.61]`, then the verdict
/// when it has none to name a winner with (`, within noise (±4.1 %)`).
pub fn ratio_text(i: &Interval) -> String {
    let base = format!("{:.2}x [{:.2}, {:.2}]", i.median, i.lo, i.hi);
    match i.ratio_verdict() {
        Verdict::Higher | Verdict::Lower => base,
        v => format!("{base}, {v}"),
    }
}

/// A ratio as a table cell: `1.05 [1.01, 1.09]`, with a mark after it
/// when no direction may be read from it, one mark per reason: `~` when
/// the interval holds 1 (within noise), `?` when it excludes 1 but its
/// trials cannot reach [`CONFIDENCE`] (a clear ratio at a lower level).
pub fn ratio_cell(i: &Interval) -> String {
    let mark = match i.ratio_verdict() {
        Verdict::Higher | Verdict::Lower => "",
        Verdict::WithinNoise { .. } => "~",
        Verdict::TooFewTrials { .. } => "?",
    };
    format!("{:.2} [{:.2}, {:.2}]{mark}", i.median, i.lo, i.hi)
}

/// What a table cell's marks mean ([`ratio_cell`]), for a legend.
pub const MARKS: &str = "~: within noise, the interval holds 1; ?: the interval excludes 1, but its trials cannot reach 95 %";

/// The line under a table of ratio cells: the cells' form and
/// [`MARKS`].
pub const NOISE_MARK: &str = "ratios: median [95 % interval]; ~: within noise, the interval holds 1; ?: the interval excludes 1, but its trials cannot reach 95 %";

/// One sentence on a ranking, cheapest first by median: the cheapest is
/// named only when the runner-up's interval over it lies wholly above 1.
/// Wholly below 1, the medians and the trials disagree (paired trials that
/// drifted between the models), and the sentence says the run has no
/// order. The dearest is set beside it with its interval.
pub fn rank_sentence(what: &str, ranked: &[(&str, &Measurement)]) -> String {
    let Some(&(best, b)) = ranked.first() else {
        return String::new();
    };
    let ns = |m: &Measurement| crate::units::fmt_ns(m.ns_per_op.median);
    let Some(&(next, n)) = ranked.get(1) else {
        return format!("{best} is the only one timed on {what} ({} ns).", ns(b));
    };
    let Ok(i) = Interval::between(n, b) else {
        return String::new();
    };
    let mut s = match i.ratio_verdict() {
        Verdict::Higher => format!(
            "{best} is cheapest on {what} ({} ns); the next, {next}, costs {} as much ({} ns).",
            ns(b),
            ratio_text(&i),
            ns(n)
        ),
        Verdict::Lower => format!(
            "No order on {what} in this run: by median {best} is cheapest ({} ns) and {next} next ({} ns), but trial by trial {next} costs {} {best}'s: the trials drifted.",
            ns(b),
            ns(n),
            ratio_text(&i)
        ),
        _ => format!(
            "No one is cheapest on {what}, {}: {best} {} ns against {next} {} ns ({next} / {best} = {:.2}x [{:.2}, {:.2}]).",
            i.ratio_verdict(),
            ns(b),
            ns(n),
            i.median,
            i.lo,
            i.hi
        ),
    };
    if let Some(&(worst, w)) = ranked.last().filter(|_| ranked.len() > 2)
        && let Ok(i) = Interval::between(w, b)
    {
        s += &format!(
            " The dearest, {worst} ({} ns), costs {} {best}'s.",
            ns(w),
            ratio_text(&i)
        );
    }
    s
}

/// A named comparison: how many times `b` the cost of `a` is, with its
/// interval and verdict; the runner collects them into the report and
/// extends the trials while one is too wide.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    /// What over what (`sparse / vmemmap-table: alloc+free`).
    pub what: String,
    /// The ratio, `{median, lo, hi, confidence, trials, method}`.
    #[serde(flatten)]
    pub interval: Interval,
    /// What the interval allows a reading to say.
    pub verdict: Verdict,
}

impl Comparison {
    /// `a` over `b`, named `what`; `None` when the two cannot be compared
    /// (a trial not positive).
    pub fn of(what: impl Into<String>, a: &Measurement, b: &Measurement) -> Option<Comparison> {
        Interval::between(a, b)
            .ok()
            .map(|i| Comparison::from_interval(what, i))
    }

    /// A comparison from an interval already made.
    pub fn from_interval(what: impl Into<String>, interval: Interval) -> Comparison {
        Comparison {
            what: what.into(),
            verdict: interval.ratio_verdict(),
            interval,
        }
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
    /// The interval excludes "no difference" but reaches less than
    /// [`CONFIDENCE`]: too few trials to name a direction.
    TooFewTrials {
        /// The level the interval reaches, in percent.
        confidence_pct: f64,
        /// The trials it was made from.
        trials: usize,
    },
}

impl Verdict {
    /// Whether the comparison may name a winner.
    pub fn is_decided(self) -> bool {
        matches!(self, Verdict::Higher | Verdict::Lower)
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
            // The interval is what it is; only its level falls short, so
            // say that, not that nothing can be told.
            Verdict::TooFewTrials {
                confidence_pct,
                trials,
            } => write!(
                f,
                "at {confidence_pct:.0} %: {trials} {} cannot reach {:.0} % for this comparison",
                if *trials == 1 { "trial" } else { "trials" },
                100.0 * CONFIDENCE
            ),
        }
    }
}

/// When to run more trials: an interval wider than `max_relative_half_width`
/// asks for more, up to `max_trials`, as criterion extends its sampling;
/// and, as criterion bounds its measurement time, only while the run with
/// more trials is expected to take at most [`MAX_EXTENDED_RUN`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Extension {
    /// The widest interval accepted, as a half-width relative to the median.
    pub max_relative_half_width: f64,
    /// The most trials a measurement may grow to.
    pub max_trials: usize,
}

/// The longest run an extension may ask for (predicted from the run before
/// it: its time scaled by the trials): a longer one is not made, and the
/// record says which `--trials` would make it.
pub const MAX_EXTENDED_RUN: std::time::Duration = std::time::Duration::from_secs(120);

impl Extension {
    /// Whether a run of `trials` trials that took `took` may be made again
    /// with `next` trials: it is expected to take at most
    /// [`MAX_EXTENDED_RUN`].
    pub fn affordable(&self, took: std::time::Duration, trials: usize, next: usize) -> bool {
        took.as_secs_f64() * next as f64 / trials.max(1) as f64 <= MAX_EXTENDED_RUN.as_secs_f64()
    }

    /// pfnlab's rule: ±5 % at most, up to 31 trials ([`Plan::FULL`]'s
    /// cap).
    pub const DEFAULT: Extension = Extension {
        max_relative_half_width: 0.05,
        max_trials: Plan::FULL.max_trials,
    };

    /// The rule with `plan`'s cap.
    pub fn for_plan(plan: &Plan) -> Extension {
        Extension {
            max_trials: plan.max_trials,
            ..Extension::DEFAULT
        }
    }

    /// Whether `interval`, made from `trials` trials, should be made again
    /// from more.
    pub fn wants_more(&self, interval: &Interval) -> bool {
        interval.trials < self.max_trials
            && interval.relative_half_width() > self.max_relative_half_width
    }

    /// The widest comparison that asks for more trials than the `trials`
    /// a run had, if one does.
    pub fn widest<'c>(
        &self,
        comparisons: &'c [Comparison],
        trials: usize,
    ) -> Option<&'c Comparison> {
        if trials >= self.max_trials {
            return None;
        }
        comparisons
            .iter()
            .filter(|c| self.wants_more(&c.interval))
            .max_by(|a, b| {
                a.interval
                    .relative_half_width()
                    .total_cmp(&b.interval.relative_half_width())
            })
    }

    /// The trial count after `trials`: twice and one more, at most the
    /// cap (7, 15, 31).
    pub fn next(&self, trials: usize) -> usize {
        (2 * trials + 1).min(self.max_trials)
    }
}

/// How many trials a run had and why: the JSON report's `trials`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TrialRecord {
    /// The trials asked for (`--trials`, or the plan's).
    pub asked: usize,
    /// The trials of the run reported.
    pub ran: usize,
    /// The cap (`--max-trials`).
    pub max_trials: usize,
    /// The widest interval accepted before extending, as a half-width
    /// relative to the median.
    pub max_relative_half_width: f64,
    /// The shortest trial, in seconds (`--min-time`).
    pub min_time_s: f64,
    /// Each extension: from how many trials, to how many, and the
    /// comparison too wide to stop at.
    pub extended: Vec<Extended>,
    /// An extension the time bound refused: the comparison still too wide,
    /// and the `--trials` that would narrow it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_extended: Option<String>,
}

/// One extension of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Extended {
    /// Trials of the run that was too wide.
    pub from: usize,
    /// Trials of the run made instead.
    pub to: usize,
    /// The widest comparison and its half-width.
    pub because: String,
}

impl TrialRecord {
    /// The record of a run that starts with `plan`.
    pub fn new(plan: &Plan) -> TrialRecord {
        let rule = Extension::for_plan(plan);
        TrialRecord {
            asked: plan.trials,
            ran: plan.trials,
            max_trials: rule.max_trials,
            max_relative_half_width: rule.max_relative_half_width,
            min_time_s: plan.min_time.as_secs_f64(),
            extended: Vec::new(),
            not_extended: None,
        }
    }

    /// Notes that `widest` asked for `to` trials, which would take about
    /// `seconds`, over the bound.
    pub fn refuse(&mut self, to: usize, seconds: f64, widest: &Comparison) {
        self.not_extended = Some(format!(
            "{}: ±{:.1} %, but {to} trials would take about {seconds:.0} s (over {} s): run with --trials {to}",
            widest.what,
            100.0 * widest.interval.relative_half_width(),
            MAX_EXTENDED_RUN.as_secs()
        ));
    }

    /// Notes that the run with `from` trials was too wide because of
    /// `widest`, and is made again with `to`.
    pub fn extend(&mut self, from: usize, to: usize, widest: &Comparison) {
        self.extended.push(Extended {
            from,
            to,
            because: format!(
                "{}: ±{:.1} % > ±{:.0} %",
                widest.what,
                100.0 * widest.interval.relative_half_width(),
                100.0 * self.max_relative_half_width
            ),
        });
        self.ran = to;
    }

    /// The line a table ends with: the trials, and each extension.
    pub fn text(&self) -> String {
        let mut s = format!(
            "Trials: {} (intervals: {:.0} % distribution-free; paired where trials interleaved",
            self.ran,
            100.0 * CONFIDENCE
        );
        if self.extended.is_empty() {
            s += ")";
        } else {
            s += "; extended";
            for e in &self.extended {
                s += &format!(" {} -> {} ({})", e.from, e.to, e.because);
            }
            s += ")";
        }
        if let Some(why) = &self.not_extended {
            s += &format!("; not extended: {why}");
        }
        s + ".\n"
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
    fn too_few_trials_decide_nothing_however_clear() {
        let i = Interval::of_ratio(&[2.0, 2.1, 1.9], &[1.0, 1.0, 1.0]).unwrap();
        assert!((i.confidence - 0.75).abs() < 1e-12);
        let v = i.ratio_verdict();
        assert!(
            matches!(v, Verdict::TooFewTrials { confidence_pct, trials: 3 } if confidence_pct == 75.0)
        );
        assert!(!v.is_decided());
        assert_eq!(
            ratio_text(&i),
            "2.00x [1.90, 2.10], at 75 %: 3 trials cannot reach 95 % for this comparison"
        );
        assert!(ratio_cell(&i).ends_with('?'));
        // One trial: its level is 0 %, and the trial is one.
        let one = Interval::of_ratio(&[2.0], &[1.0]).unwrap();
        assert!(
            ratio_text(&one).ends_with(", at 0 %: 1 trial cannot reach 95 % for this comparison")
        );
    }

    #[test]
    fn differences_are_judged_against_zero() {
        let a = [5.0, 6.0, 5.5, 5.2, 5.8, 5.4];
        let b = [3.0, 4.1, 3.4, 3.1, 3.9, 3.4];
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

    #[test]
    fn a_run_extends_on_its_widest_comparison_up_to_the_cap() {
        let wide = Comparison::from_interval(
            "wide",
            Interval::of_median(&[1.0, 1.5, 2.0, 2.5, 3.0]).unwrap(),
        );
        let narrow = Comparison::from_interval(
            "narrow",
            Interval::of_median(&[1.0, 1.01, 1.02, 1.0, 1.01]).unwrap(),
        );
        let rule = Extension::DEFAULT;
        let both = [narrow.clone(), wide];
        assert_eq!(rule.widest(&both, 7).map(|c| c.what.as_str()), Some("wide"));
        assert_eq!(rule.widest(&both, 31), None);
        assert_eq!(rule.widest(&both[..1], 7), None);
        assert_eq!((rule.next(7), rule.next(15), rule.next(20)), (15, 31, 31));
        let mut record = TrialRecord::new(&Plan::FULL);
        record.extend(7, 15, &both[1]);
        assert_eq!(record.ran, 15);
        assert!(record.extended[0].because.starts_with("wide: ±"));
        assert!(record.text().contains("7 -> 15"));
        assert_eq!(Extension::for_plan(&Plan::QUICK).widest(&both, 3), None);
        let second = std::time::Duration::from_secs(1);
        assert!(rule.affordable(10 * second, 7, 15));
        assert!(!rule.affordable(60 * second, 7, 15));
        record.refuse(31, 400.0, &both[1]);
        assert!(
            record.text().contains("run with --trials 31"),
            "{}",
            record.text()
        );
    }

    fn timed(ns: &[f64], set: Option<u64>) -> Measurement {
        Measurement {
            interleaved_with: set,
            ..Measurement::from_ns(ns.to_vec())
        }
    }

    #[test]
    fn unpaired_medians_combine_their_own_intervals() {
        // Seven trials each: each median's 97.5 % interval is its extremes
        // (98.4 %), so the ratio runs from min/max to max/min.
        let a = [20.0, 21.0, 19.0, 20.5, 22.0, 19.5, 20.0];
        let b = [10.0, 10.5, 9.5, 10.2, 11.0, 9.8, 10.0];
        let i = Interval::of_unpaired_ratio(&a, &b).unwrap();
        assert_eq!(i.method, Method::Unpaired);
        assert!((i.median - 2.0).abs() < 1e-12);
        assert!((i.lo - 19.0 / 11.0).abs() < 1e-12);
        assert!((i.hi - 22.0 / 9.5).abs() < 1e-12);
        assert!((i.confidence - (1.0 - 2.0 / 64.0)).abs() < 1e-12);
        assert_eq!(i.ratio_verdict(), Verdict::Higher);
    }

    #[test]
    fn between_pairs_only_one_interleaved_set() {
        let a = [10.0, 20.0, 10.0, 20.0, 10.0];
        let b = [11.0, 22.0, 11.0, 22.0, 11.0];
        let paired = Interval::between(&timed(&b, Some(7)), &timed(&a, Some(7))).unwrap();
        assert_eq!(paired.method, Method::Paired);
        assert!((paired.lo - 1.1).abs() < 1e-9 && (paired.hi - 1.1).abs() < 1e-9);
        // The same numbers timed apart: the drift is no longer cancelled.
        let apart = Interval::between(&timed(&b, Some(7)), &timed(&a, Some(8))).unwrap();
        assert_eq!(apart.method, Method::Unpaired);
        assert!(!apart.ratio_verdict().is_decided());
        assert!(ratio_text(&apart).contains("within noise"));
    }

    #[test]
    fn each_mark_has_one_meaning() {
        let noise = Interval::of_ratio(&[1.0, 1.1, 0.9, 1.05, 0.95, 1.0, 1.02], &[1.0; 7]).unwrap();
        assert!(matches!(noise.ratio_verdict(), Verdict::WithinNoise { .. }));
        assert!(ratio_cell(&noise).ends_with("]~"));
        let short = Interval::of_ratio(&[2.0, 2.1, 1.9], &[1.0; 3]).unwrap();
        assert!(matches!(
            short.ratio_verdict(),
            Verdict::TooFewTrials { .. }
        ));
        assert!(ratio_cell(&short).ends_with("]?"));
        let clear = Interval::of_ratio(&[2.0, 2.1, 1.9, 2.05, 1.95, 2.0, 2.02], &[1.0; 7]).unwrap();
        assert!(clear.ratio_verdict().is_decided());
        assert!(ratio_cell(&clear).ends_with(']'));
        assert!(NOISE_MARK.ends_with(MARKS));
    }

    #[test]
    fn a_scaled_or_inverted_ratio_keeps_its_trials() {
        let i = Interval::of_ratio(&[2.0, 2.2, 1.8, 2.1, 1.9, 2.0, 2.05], &[1.0; 7]).unwrap();
        let half = i.scaled(0.5);
        assert!((half.median - 1.0).abs() < 1e-12 && half.trials == 7);
        let inv = i.inverse();
        assert!((inv.lo - 1.0 / 2.2).abs() < 1e-12 && (inv.hi - 1.0 / 1.8).abs() < 1e-12);
        let q = Interval::quotient(&i, &i).unwrap();
        assert!((q.lo - 1.8 / 2.2).abs() < 1e-12 && q.method == Method::Unpaired);
        assert!(q.confidence < i.confidence);
        assert_eq!(ratio_cell(&i), "2.00 [1.80, 2.20]");
        assert!(ratio_cell(&Interval::of_ratio(&[1.0, 1.1], &[1.05, 1.0]).unwrap()).ends_with('~'));
        let c = Comparison::from_interval("a / b", i);
        assert_eq!(c.verdict, Verdict::Higher);
        assert!(ratio_text(&i).starts_with("2.00x [1.80, 2.20]"));
    }
}
