//! The span sweep of `bench memdesc`: which spans of pfns the random
//! `pfn_to_page` runs over, read from this machine's caches, and the rule
//! that says at which span a size starts missing the last-level cache.
//!
//! The spans are powers of two of pages, from one whose 64-byte memmap
//! fits in half the L2 to one whose 8-byte memmap is four times the LLC,
//! so every size is seen both fitting and far past the LLC.
//!
//! # The rule
//! A size's *in-LLC reference* is its cost at the largest span whose
//! memmap (span × size) fits in half the LLC: the L2 misses are already
//! paid there, the LLC's not yet. The size *starts missing* at the first
//! larger span whose interval's lower bound is above [`MISS_FACTOR`] × the
//! reference's median and stays so at every larger span. A span above
//! that can only be a cache miss: an LLC hit costs at most a few L2-miss
//! latencies, a DRAM access several times that.

use std::path::Path;

use serde::Serialize;

use crate::spread::Interval;

/// How many times the in-LLC cost a lookup must cost, at the lower bound
/// of its interval, to count as missing the LLC.
pub const MISS_FACTOR: f64 = 1.5;

/// The L2 this machine's sysfs does not give is taken as 1 MiB.
const ASSUMED_L2: u64 = 1 << 20;
/// The LLC this machine's sysfs does not give is taken as 32 MiB.
const ASSUMED_LLC: u64 = 32 << 20;

/// cpu0's unified L2 and last-level cache sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CacheSizes {
    /// L2 bytes.
    pub l2_bytes: u64,
    /// Last-level cache bytes.
    pub llc_bytes: u64,
    /// Whether both came from sysfs (`false`: assumed, 1 MiB and 32 MiB).
    pub from_sysfs: bool,
}

impl CacheSizes {
    /// Reads `/sys/devices/system/cpu/cpu0/cache`.
    pub fn read() -> CacheSizes {
        Self::read_from(Path::new("/sys/devices/system/cpu/cpu0/cache"))
    }

    /// Reads a `cache` directory of `index*/{level,type,size}`.
    pub fn read_from(dir: &Path) -> CacheSizes {
        let mut levels: Vec<(u32, u64)> = Vec::new();
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let read = |name: &str| std::fs::read_to_string(entry.path().join(name)).ok();
            let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size"))
            else {
                continue;
            };
            if kind.trim() == "Instruction" {
                continue;
            }
            if let (Ok(level), Some(bytes)) = (level.trim().parse(), parse_cache_size(&size)) {
                levels.push((level, bytes));
            }
        }
        let l2 = levels.iter().find(|(l, _)| *l == 2).map(|&(_, b)| b);
        let llc = levels.iter().max_by_key(|(l, _)| *l).map(|&(_, b)| b);
        match (l2, llc) {
            (Some(l2_bytes), Some(llc_bytes)) if llc_bytes >= l2_bytes => CacheSizes {
                l2_bytes,
                llc_bytes,
                from_sysfs: true,
            },
            _ => CacheSizes {
                l2_bytes: ASSUMED_L2,
                llc_bytes: ASSUMED_LLC,
                from_sysfs: false,
            },
        }
    }

    /// The sweep's spans in pages: powers of two from `l2 / 2 / 64` to
    /// `4 × llc / 8`, every `step`-th power (the top always included),
    /// none above `max_pages` (the top clamped to it).
    pub fn spans(&self, step: u32, max_pages: Option<u64>) -> Vec<u64> {
        let lo = (self.l2_bytes / 2 / 64).max(64).next_power_of_two();
        let mut hi = (4 * self.llc_bytes / 8).next_power_of_two();
        if let Some(max) = max_pages {
            hi = hi.min(prev_power_of_two(max.max(lo)));
        }
        let mut spans: Vec<u64> = std::iter::successors(Some(lo), |&s| s.checked_shl(step))
            .take_while(|&s| s < hi)
            .collect();
        spans.push(hi);
        spans
    }
}

/// What stopped the sweep below the top the caches ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SweepCap {
    /// `--max-span-mib`.
    MaxSpan,
    /// The memmap budget: every size's sweep model is built at once, so
    /// the top span times the sizes' bytes must fit in it.
    Budget {
        /// The budget, in bytes.
        budget_bytes: u64,
        /// The sizes' bytes per page, summed.
        bytes_per_page: u64,
    },
}

/// [`CacheSizes::spans`], capped by `max_pages` and by the memmap budget
/// (`budget_bytes` for `bytes_per_page` of every size's memmap at once);
/// says which cap stopped the sweep, if one did.
pub fn capped_spans(
    caches: &CacheSizes,
    step: u32,
    max_pages: Option<u64>,
    (budget_bytes, bytes_per_page): (u64, u64),
) -> (Vec<u64>, Option<SweepCap>) {
    let wanted = *caches.spans(step, None).last().expect("at least one span");
    let budget_pages = budget_bytes / bytes_per_page.max(1);
    let (limit, cap) = match max_pages {
        Some(m) if m <= budget_pages => (Some(m), SweepCap::MaxSpan),
        _ => (
            Some(budget_pages),
            SweepCap::Budget {
                budget_bytes,
                bytes_per_page,
            },
        ),
    };
    let spans = caches.spans(step, limit);
    let top = *spans.last().expect("at least one span");
    (spans, (top < wanted).then_some(cap))
}

/// The largest power of two at most `n` (`n` ≥ 1).
fn prev_power_of_two(n: u64) -> u64 {
    1 << (63 - n.leading_zeros())
}

/// Parses a sysfs cache size (`1024K`, `32M`, `512`).
pub fn parse_cache_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => t.split_at(i),
        None => (t, ""),
    };
    let n: u64 = digits.parse().ok()?;
    let shift = match unit {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        _ => return None,
    };
    n.checked_mul(1 << shift)
}

/// The index of the span at which a size starts missing the LLC, by the
/// rule in the module documentation; `None` when it never does in the
/// sweep. `costs[i]` is the cost at `spans[i]` (ascending).
pub fn starts_missing(
    spans: &[u64],
    costs: &[Interval],
    size_bytes: u64,
    llc_bytes: u64,
) -> Option<usize> {
    debug_assert_eq!(spans.len(), costs.len());
    let fits = |s: u64| s.saturating_mul(size_bytes) <= llc_bytes / 2;
    let reference = spans.iter().rposition(|&s| fits(s)).unwrap_or(0);
    let bar = MISS_FACTOR * costs[reference].median;
    let above: Vec<bool> = costs.iter().map(|c| c.lo > bar).collect();
    (reference + 1..costs.len()).find(|&i| above[i..].iter().all(|&a| a))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_large_llc_is_swept_up_to_the_budget_and_no_further() {
        let big = CacheSizes {
            l2_bytes: 2 << 20,
            llc_bytes: 1 << 30,
            from_sysfs: false,
        };
        // The caches ask for 512 Mi pages; 64 MiB at 120 B a page holds
        // 559,240, so the top is 512 Ki.
        let (spans, cap) = capped_spans(&big, 1, None, (64 << 20, 120));
        assert_eq!(*spans.last().unwrap(), 512 << 10);
        assert_eq!(
            cap,
            Some(SweepCap::Budget {
                budget_bytes: 64 << 20,
                bytes_per_page: 120
            })
        );
        // --max-span-mib below the budget's top is the cap that applies.
        let (spans, cap) = capped_spans(&big, 1, Some(64 << 10), (64 << 20, 120));
        assert_eq!(
            (*spans.last().unwrap(), cap),
            (64 << 10, Some(SweepCap::MaxSpan))
        );
        // A budget that holds the caches' whole sweep caps nothing.
        let small = CacheSizes {
            llc_bytes: 8 << 20,
            ..big
        };
        let (spans, cap) = capped_spans(&small, 1, None, (u64::MAX, 120));
        assert_eq!((*spans.last().unwrap(), cap), (4 << 20, None));
    }

    use super::*;
    use crate::spread::Method;

    fn cost(median: f64, lo: f64) -> Interval {
        Interval {
            median,
            lo,
            hi: median * 1.1,
            confidence: 0.96,
            trials: 9,
            method: Method::Paired,
        }
    }

    const LLC: u64 = 32 << 20;
    /// 8 Ki to 16 Mi pages.
    fn spans() -> Vec<u64> {
        (13..=24).map(|s| 1 << s).collect()
    }

    #[test]
    fn a_size_starts_missing_where_its_cost_leaves_the_llc_plateau() {
        // 64 bytes: the memmap is half the LLC at 256 Ki pages (index 5);
        // the cost jumps at 1 Mi pages (index 7).
        let medians = [
            4.0, 4.0, 6.0, 9.0, 10.0, 10.0, 12.0, 40.0, 80.0, 95.0, 100.0, 100.0,
        ];
        let costs: Vec<Interval> = medians.iter().map(|&m| cost(m, m * 0.95)).collect();
        assert_eq!(starts_missing(&spans(), &costs, 64, LLC), Some(7));
    }

    #[test]
    fn a_dip_back_below_the_bar_moves_the_answer_past_it() {
        let medians = [
            4.0, 4.0, 6.0, 9.0, 10.0, 10.0, 40.0, 12.0, 80.0, 95.0, 100.0, 100.0,
        ];
        let costs: Vec<Interval> = medians.iter().map(|&m| cost(m, m * 0.95)).collect();
        assert_eq!(starts_missing(&spans(), &costs, 64, LLC), Some(8));
    }

    #[test]
    fn a_wide_interval_does_not_count_as_missing() {
        // 8 bytes: half the LLC is 2 Mi pages (index 8); the last span's
        // median is high but its interval reaches down to the plateau.
        let mut costs: Vec<Interval> = (0..12).map(|_| cost(10.0, 9.5)).collect();
        costs[11] = cost(30.0, 12.0);
        assert_eq!(starts_missing(&spans(), &costs, 8, LLC), None);
        costs[11] = cost(30.0, 16.0);
        assert_eq!(starts_missing(&spans(), &costs, 8, LLC), Some(11));
    }

    #[test]
    fn the_spans_run_from_half_the_l2_at_64_bytes_to_four_llcs_at_8() {
        let caches = CacheSizes {
            l2_bytes: 1 << 20,
            llc_bytes: LLC,
            from_sysfs: true,
        };
        assert_eq!(caches.spans(1, None), spans());
        assert_eq!(
            caches.spans(2, None),
            [
                1 << 13,
                1 << 15,
                1 << 17,
                1 << 19,
                1 << 21,
                1 << 23,
                1 << 24
            ]
        );
        assert_eq!(caches.spans(2, Some(100_000)), [1 << 13, 1 << 15, 1 << 16]);
    }

    #[test]
    fn sysfs_sizes_parse_and_bad_ones_do_not() {
        assert_eq!(parse_cache_size("1024K\n"), Some(1 << 20));
        assert_eq!(parse_cache_size("32M"), Some(32 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("lots"), None);
        assert_eq!(parse_cache_size("12Q"), None);
    }

    #[test]
    fn a_missing_cache_directory_gives_the_stated_assumption() {
        let c = CacheSizes::read_from(Path::new("/nonexistent/pfnlab"));
        assert_eq!(
            (c.l2_bytes, c.llc_bytes, c.from_sysfs),
            (ASSUMED_L2, ASSUMED_LLC, false)
        );
    }
}
