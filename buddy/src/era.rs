//! Kernel eras: which of the allocator's mechanisms exist, so a question can
//! be asked of the kernel it belongs to and answered beside today's.
//!
//! | era | free lists | per-CPU `high` | buddy tracking (the seed's) |
//! |---|---|---|---|
//! | 2.6.9 | one per order | `6 × batch` (`pageset_set_batch`) | per-order bitmap ([`Bitmap`](crate::Bitmap)) |
//! | 2.6.23 | one per order | `6 × batch` | no bitmap |
//! | 5.13 | per order and migratetype, fallback and stealing; a pageblock lookup per free | `6 × batch` (the last release before `zone_highsize`) | no bitmap |
//! | 6.18 | as 5.13 | `zone_highsize`: the zone's low watermark split over the node's CPUs, at least `4 × batch` | no bitmap |
//!
//! This is the first part of the era model: grouping by mobility, the
//! per-CPU list sizing and the zone watermarks it reads. The 6.x per-CPU
//! list shape (lists per migratetype and order), watermark checks on the
//! allocation path, the GFP flag set and page preparation per era are not
//! yet modelled (issue 12); until they are, every era shares pfnlab's single
//! order-0 per-CPU list (its pages of whatever migratetype the refill took)
//! and an unchecked zone path. The buddy-tracking variant stays a type parameter
//! ([`Variant`](crate::Variant)), chosen with the era by the caller.

use std::fmt;

/// A kernel release whose allocator pfnlab can model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Era {
    /// Linux 2.6.9 (2004): the bitmap buddy's last release.
    V2_6_9,
    /// Linux 2.6.23 (2007): the zone-lock discussion's kernel.
    V2_6_23,
    /// Linux 5.13 (2021): the bulk page allocator's first release.
    V5_13,
    /// Linux 6.18: today's.
    #[default]
    V6_18,
}

impl Era {
    /// Every era, oldest first.
    pub const ALL: [Era; 4] = [Era::V2_6_9, Era::V2_6_23, Era::V5_13, Era::V6_18];

    /// The release as written (`6.18`).
    pub fn name(self) -> &'static str {
        match self {
            Era::V2_6_9 => "2.6.9",
            Era::V2_6_23 => "2.6.23",
            Era::V5_13 => "5.13",
            Era::V6_18 => "6.18",
        }
    }

    /// Parses a release name, or says which exist.
    pub fn parse(s: &str) -> Result<Era, String> {
        Era::ALL.into_iter().find(|e| e.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Era::ALL.iter().map(|e| e.name()).collect();
            format!("unknown era `{s}` (known: {})", names.join(", "))
        })
    }

    /// Whether pages are grouped by mobility: free lists per migratetype and
    /// a pageblock lookup on every free (Linux 2.6.24 on).
    pub fn has_migratetypes(self) -> bool {
        self >= Era::V5_13
    }

    /// Whether `pcp->high` comes from the zone's low watermark
    /// (`zone_highsize`, Linux 5.14 on) rather than `6 × batch`.
    pub fn pcp_high_from_watermark(self) -> bool {
        self >= Era::V6_18
    }
}

impl fmt::Display for Era {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_order() {
        for e in Era::ALL {
            assert_eq!(Era::parse(e.name()), Ok(e));
        }
        assert_eq!(
            Era::parse("3.0").unwrap_err(),
            "unknown era `3.0` (known: 2.6.9, 2.6.23, 5.13, 6.18)"
        );
        assert!(Era::V2_6_9 < Era::V6_18 && Era::default() == Era::V6_18);
        assert!(!Era::V5_13.pcp_high_from_watermark() && Era::V6_18.pcp_high_from_watermark());
    }
}
