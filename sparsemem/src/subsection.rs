//! The subsection bitmap of a section (`mem_section_usage::subsection_map`).
//!
//! Since Linux 5.3 a section can be partly present: hotplug works in 2 MiB
//! subsections, and `pfn_valid` on a section that is not *early* tests the
//! pfn's bit here. The map is sized for the largest geometry
//! ([`MAX_SUBSECTIONS_PER_SECTION`]); smaller geometries use a prefix.

use crate::geometry::MAX_SUBSECTIONS_PER_SECTION;

const WORDS: usize = (MAX_SUBSECTIONS_PER_SECTION / 64) as usize;

/// One bit per subsection of a section.
#[derive(Clone, Copy, PartialEq, Eq, Default, Debug)]
pub struct SubsectionMap([u64; WORDS]);

impl SubsectionMap {
    /// No subsection present.
    pub const EMPTY: SubsectionMap = SubsectionMap([0; WORDS]);

    /// Subsections `first ..= last` set.
    pub fn range(first: u64, last: u64) -> SubsectionMap {
        debug_assert!(first <= last && last < MAX_SUBSECTIONS_PER_SECTION);
        let mut m = SubsectionMap::EMPTY;
        for i in first..=last {
            m.0[(i / 64) as usize] |= 1 << (i % 64);
        }
        m
    }

    /// Whether subsection `index` is present.
    #[inline(always)]
    pub fn test(&self, index: u64) -> bool {
        self.0[(index / 64) as usize] & (1 << (index % 64)) != 0
    }

    /// `find_next_bit`: the first present subsection at or after `index`.
    #[inline]
    pub fn next_set(&self, index: u64) -> Option<u64> {
        let mut word = (index / 64) as usize;
        if word >= WORDS {
            return None;
        }
        let mut bits = self.0[word] & (u64::MAX << (index % 64));
        loop {
            if bits != 0 {
                return Some(word as u64 * 64 + u64::from(bits.trailing_zeros()));
            }
            word += 1;
            if word == WORDS {
                return None;
            }
            bits = self.0[word];
        }
    }

    /// Whether no subsection is present.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// Present subsections.
    pub fn count(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }

    /// Bits set in both.
    pub fn and(&self, other: &SubsectionMap) -> SubsectionMap {
        SubsectionMap(std::array::from_fn(|i| self.0[i] & other.0[i]))
    }

    /// Bits set in either.
    pub fn or(&self, other: &SubsectionMap) -> SubsectionMap {
        SubsectionMap(std::array::from_fn(|i| self.0[i] | other.0[i]))
    }

    /// Bits of `self` not in `other`.
    pub fn and_not(&self, other: &SubsectionMap) -> SubsectionMap {
        SubsectionMap(std::array::from_fn(|i| self.0[i] & !other.0[i]))
    }

    /// Indices of the present subsections, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        (0..MAX_SUBSECTIONS_PER_SECTION).filter(|&i| self.test(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_and_set_ops() {
        let a = SubsectionMap::range(3, 70);
        assert!(a.test(3) && a.test(64) && a.test(70) && !a.test(71) && !a.test(2));
        assert_eq!(a.count(), 68);
        let b = SubsectionMap::range(60, 511);
        assert_eq!(a.and(&b).count(), 11);
        assert_eq!(a.or(&b).count(), 509);
        assert_eq!(a.and_not(&b).iter().last(), Some(59));
        assert!(a.and_not(&a).is_empty());
    }

    #[test]
    fn next_set_finds_the_following_bit() {
        let m = SubsectionMap::range(3, 3).or(&SubsectionMap::range(130, 131));
        assert_eq!(m.next_set(0), Some(3));
        assert_eq!(m.next_set(3), Some(3));
        assert_eq!(m.next_set(4), Some(130));
        assert_eq!(m.next_set(131), Some(131));
        assert_eq!(m.next_set(132), None);
        assert_eq!(m.next_set(MAX_SUBSECTIONS_PER_SECTION), None);
        assert_eq!(SubsectionMap::EMPTY.next_set(0), None);
        let top = SubsectionMap::range(0, MAX_SUBSECTIONS_PER_SECTION - 1);
        assert_eq!(
            top.next_set(MAX_SUBSECTIONS_PER_SECTION - 1),
            Some(MAX_SUBSECTIONS_PER_SECTION - 1)
        );
    }
}
