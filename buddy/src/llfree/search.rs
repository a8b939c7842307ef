//! Where a CPU's next tree comes from: LLFree's tree-search heuristics.
//!
//! The paper (Wrenger et al., USENIX ATC 2023, the upper allocator's
//! design) makes the choice of the next tree its tool against
//! fragmentation: a CPU whose tree runs out reserves a *partially filled*
//! tree rather than a free one, so that allocations pack into memory that
//! is in use already and free memory stays in whole trees, and so whole
//! huge frames. How near, which counters count as partial and when a CPU
//! moves on are taken here from the authors' implementation published
//! with the paper (llfree-rs: its tree array's reservation searches, its
//! counter synchronisation and its reservation on free):
//!
//! - a tree counts as **almost allocated** below a sixteenth of its
//!   frames free (the authors' 1024 of 16,384: one order-10 block), and
//!   as **almost free** from fifteen sixteenths on; **partial** is
//!   between;
//! - [`Pass::Near`]: the trees around the CPU's previous one (a quarter of
//!   the trees per CPU, at least one), in alternating order before and
//!   after the start of its cache line of tree entries, any that is not
//!   almost allocated;
//! - [`Pass::Partial`]: the rest of the trees in the same alternating
//!   order, partial ones only;
//! - [`Pass::Free`]: almost free trees, from the previous tree on;
//! - [`Pass::Any`]: any tree with the frames, from the previous tree on;
//! - a CPU whose tree had the frames but no aligned block of the order
//!   (fragmentation) searches almost free trees first;
//! - a CPU that has freed [`LAST_FREES`] blocks in a row into a tree it
//!   does not hold reserves that tree at its next free there, if the
//!   tree is not almost allocated: the frames it keeps freeing there are
//!   likely to be reused soon ([`LastFrees`]);
//! - a CPU whose local counter runs short takes over the frames freed into
//!   its tree's entry only when they, with its own, exceed the almost
//!   allocated mark; otherwise it moves to another tree.
//!
//! Where pfnlab departs: the ranges scale with the tree's frames (the last
//! tree may be partial; the authors' marks are absolute); the near search
//! also visits the first tree of the cache line (the authors begin one
//! before it); [`Class`] keeps immovable and movable reservations apart
//! (near and partial trees must carry the caller's class unless entirely
//! free), which the 2023 allocator does not have; and a cache line holds
//! [`TREES_PER_LINE`] entries as the paper's 16-bit entries would, though
//! pfnlab's entries are 32 bits.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use super::Class;

/// Tree entries in a 64-byte cache line with the paper's 16-bit entries:
/// the near search is centred on the start of the previous tree's line.
pub(super) const TREES_PER_LINE: usize = 32;

/// Frees in a row into one tree after which the freeing CPU reserves it
/// (the authors' four-entry history of a CPU's last frees).
pub(super) const LAST_FREES: u32 = 4;

/// Below this many free frames a tree of `capacity` frames is almost
/// allocated: a sixteenth.
pub(super) const fn almost_allocated(capacity: u64) -> u64 {
    capacity / 16
}

/// From this many free frames on a tree of `capacity` frames is almost
/// free: all but a sixteenth.
pub(super) const fn almost_free(capacity: u64) -> u64 {
    capacity - capacity / 16
}

/// What a search sees of a tree's entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Candidate {
    /// Frames its entry counts free.
    pub(super) free: u64,
    /// Frames the tree has.
    pub(super) capacity: u64,
    /// Whether a CPU holds it.
    pub(super) reserved: bool,
    /// The class of its last reservation.
    pub(super) class: Class,
}

impl Candidate {
    /// Entirely free, or labelled `class`: a tree a reservation of `class`
    /// may pack into.
    fn fits(self, class: Class) -> bool {
        self.free == self.capacity || self.class == class
    }
}

/// One search over the trees: which it visits, in which order, and which
/// it accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pass {
    /// The trees near the previous one, unless almost allocated.
    Near,
    /// Every other tree, when partial.
    Partial,
    /// Almost free trees.
    Free,
    /// Any tree with the frames, of either class.
    Any,
}

impl Pass {
    /// The searches of a CPU whose tree ran out of frames.
    pub(super) const AFTER_SHORT: [Pass; 4] = [Pass::Near, Pass::Partial, Pass::Free, Pass::Any];
    /// The searches of a CPU whose tree had the frames but no aligned
    /// block: whole memory first.
    pub(super) const AFTER_FRAGMENTED: [Pass; 4] =
        [Pass::Free, Pass::Near, Pass::Partial, Pass::Any];

    /// Whether a reservation of `class` for `n` frames may take `tree`.
    pub(super) fn accepts(self, tree: Candidate, n: u64, class: Class) -> bool {
        if tree.reserved || tree.free < n {
            return false;
        }
        let low = almost_allocated(tree.capacity);
        match self {
            Pass::Near => tree.fits(class) && tree.free >= low,
            Pass::Partial => {
                tree.fits(class) && (low..almost_free(tree.capacity)).contains(&tree.free)
            }
            Pass::Free => tree.free >= almost_free(tree.capacity),
            Pass::Any => true,
        }
    }

    /// The trees this pass visits among `nr_trees`, in order, for a CPU
    /// whose previous tree is `start`, with `near` trees counting as
    /// near. Near and partial searches alternate before and after the
    /// start of `start`'s cache line; the others run up from `start`,
    /// wrapping.
    pub(super) fn trees(
        self,
        start: usize,
        nr_trees: usize,
        near: usize,
    ) -> impl Iterator<Item = usize> {
        let near = near.clamp(1, nr_trees);
        let base = start - start % TREES_PER_LINE;
        let (range, around) = match self {
            Pass::Near => (0..near, true),
            Pass::Partial => (near..nr_trees, true),
            Pass::Free | Pass::Any => (0..nr_trees, false),
        };
        range.map(move |i| {
            if around {
                alternate(base, i, nr_trees)
            } else {
                (start + i) % nr_trees
            }
        })
    }
}

/// The `i`-th tree around `base` among `nr_trees`: `base`, the one
/// before, the one after, two before, two after, and so on (wrapping), so
/// that `i` in `0..nr_trees` visits every tree once.
pub(super) fn alternate(base: usize, i: usize, nr_trees: usize) -> usize {
    let step = i.div_ceil(2) % nr_trees;
    if i.is_multiple_of(2) {
        (base + step) % nr_trees
    } else {
        (base + nr_trees - step) % nr_trees
    }
}

/// Trees counting as near for `nr_cpus` CPUs over `nr_trees`: a quarter
/// of a CPU's share, at least one.
pub(super) fn near_trees(nr_trees: usize, nr_cpus: usize) -> usize {
    (nr_trees / nr_cpus.max(1) / 4).max(1)
}

/// A CPU's recent frees: the tree of its last free (plus one; 0 for none)
/// in bits 0..32, and how many frees in a row went there in bits 32..64.
///
/// Only its own CPU updates it, and it only steers the search, so
/// `Relaxed` is enough.
#[derive(Default)]
pub(super) struct LastFrees(AtomicU64);

impl LastFrees {
    /// Records a free into `tree`: how many frees in a row went there
    /// before this one.
    pub(super) fn record(&self, tree: usize) -> u32 {
        let id = tree as u64 + 1;
        let old = self
            .0
            .fetch_update(Relaxed, Relaxed, |w| {
                let count = if w & u64::from(u32::MAX) == id {
                    (w >> 32).saturating_add(1).min(u64::from(u32::MAX))
                } else {
                    1
                };
                Some((count << 32) | id)
            })
            .unwrap_or_default();
        if old & u64::from(u32::MAX) == id {
            (old >> 32) as u32
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(free: u64, class: Class) -> Candidate {
        Candidate {
            free,
            capacity: 16_384,
            reserved: false,
            class,
        }
    }

    #[test]
    fn ranges_split_trees_as_the_authors_marks_do() {
        assert_eq!(almost_allocated(16_384), 1024);
        assert_eq!(almost_free(16_384), 16_384 - 1024);
        let m = Class::Movable;
        // Almost allocated: no pass but Any.
        for pass in [Pass::Near, Pass::Partial, Pass::Free] {
            assert!(!pass.accepts(tree(1023, m), 1, m), "{pass:?}");
        }
        assert!(Pass::Any.accepts(tree(1023, m), 1, m));
        // Partial: near and partial passes.
        assert!(Pass::Near.accepts(tree(1024, m), 1, m));
        assert!(Pass::Partial.accepts(tree(1024, m), 1, m));
        assert!(!Pass::Free.accepts(tree(1024, m), 1, m));
        // Almost free: near and free passes, not partial.
        assert!(Pass::Near.accepts(tree(15_360, m), 1, m));
        assert!(!Pass::Partial.accepts(tree(15_360, m), 1, m));
        assert!(Pass::Free.accepts(tree(15_360, m), 1, m));
        // Another class's partial tree is not packed into; a free one is.
        let i = Class::Immovable;
        assert!(!Pass::Partial.accepts(tree(8000, i), 1, m));
        assert!(!Pass::Near.accepts(tree(8000, i), 1, m));
        assert!(Pass::Near.accepts(tree(16_384, i), 1, m));
        // Reserved or too few frames: never.
        let held = Candidate {
            reserved: true,
            ..tree(8000, m)
        };
        assert!(!Pass::Any.accepts(held, 1, m));
        assert!(!Pass::Any.accepts(tree(100, m), 512, m));
    }

    #[test]
    fn near_and_partial_alternate_around_the_line_and_cover_every_tree() {
        // 100 trees, previous tree 40: its line starts at 32.
        let near: Vec<usize> = Pass::Near.trees(40, 100, 5).collect();
        assert_eq!(near, [32, 31, 33, 30, 34]);
        let partial: Vec<usize> = Pass::Partial.trees(40, 100, 5).collect();
        assert_eq!(&partial[..3], [29, 35, 28]);
        let mut all: Vec<usize> = near.iter().chain(&partial).copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..100).collect::<Vec<_>>());
        // Wrapping below tree 0, and an odd count.
        let near: Vec<usize> = Pass::Near.trees(3, 7, 4).collect();
        assert_eq!(near, [0, 6, 1, 5]);
        let mut all: Vec<usize> = (0..7).map(|i| alternate(0, i, 7)).collect();
        all.sort_unstable();
        assert_eq!(all, (0..7).collect::<Vec<_>>());
        // Free and Any run up from the previous tree itself.
        let free: Vec<usize> = Pass::Free.trees(5, 7, 4).collect();
        assert_eq!(free, [5, 6, 0, 1, 2, 3, 4]);
        assert_eq!(near_trees(64, 2), 8);
        assert_eq!(near_trees(2, 8), 1);
    }

    #[test]
    fn last_frees_count_a_run_into_one_tree() {
        let last = LastFrees::default();
        assert_eq!(last.record(7), 0);
        assert_eq!(last.record(7), 1);
        assert_eq!(last.record(7), 2);
        assert_eq!(last.record(3), 0, "another tree starts a new run");
        assert_eq!(last.record(7), 0);
        for before in 1..=LAST_FREES {
            assert_eq!(last.record(7), before);
        }
    }
}
