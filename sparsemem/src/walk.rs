//! `for_each_valid_pfn`: walking the valid pfns of a range, as each memory
//! model's kernel walks them.
//!
//! Until 6.16 a kernel walker that wanted the pfns with a `struct page` in
//! a range asked `pfn_valid` of every pfn; over a large NOMAP or absent
//! range that is millions of calls that each answer "no"
//! (`reserve_bootmem_region` on a kexec live update was the case that
//! prompted the change). `for_each_valid_pfn(pfn, start, end)` is now a
//! loop of `first_valid_pfn` and `next_valid_pfn`, built per model
//! (include/linux/mmzone.h):
//!
//! - FLATMEM clamps the range to the `mem_map` array;
//! - SPARSEMEM walks section numbers one at a time, up to
//!   `__highest_present_section_nr`, skipping sections without a memmap;
//!   inside a present section every pfn is valid, so `pfn_valid` is not
//!   asked again until the next section boundary;
//! - SPARSEMEM_VMEMMAP does the same and, in a section that is not early,
//!   jumps to the next present subsection (`find_next_bit` on the
//!   subsection map), re-asking at each subsection boundary;
//! - an architecture with its own `pfn_valid` keeps the generic loop,
//!   `pfn_valid` on every pfn ([`PfnWalker::PerPfn`]).
//!
//! The model's walk is [`KernelWalk`]; the per-pfn loop, for comparison on
//! every model, is [`PerPfnWalk`]; [`BulkSkipWalk`] is pfnlab's variant
//! that skips an absent EXTREME root page (256 sections) in one step,
//! which no kernel does. All three are zero-sized strategies of one
//! iterator, [`ValidPfns`], monomorphised per model and strategy: no
//! allocation, no dynamic dispatch.
//!
//! This module also holds the section table's two walk functions
//! ([`SectionTable::first_valid_pfn`], [`SectionTable::next_valid_pfn`]),
//! which the SPARSEMEM and VMEMMAP models call.

use std::fmt;
use std::marker::PhantomData;

use crate::geometry::Geometry;
use crate::model::{MemoryModel, first_valid_pfn_per_pfn};
use crate::section::MemSection;
use crate::table::{SectionRoot, SectionTable};
use crate::types::Pfn;

#[cfg(doc)]
use crate::model::PfnWalker;

/// A range a walk cannot be asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkError {
    /// `start == end`: nothing to walk.
    Empty {
        /// The range's start (and end).
        start: Pfn,
    },
    /// `start > end`.
    Inverted {
        /// The range's start.
        start: Pfn,
        /// The range's end.
        end: Pfn,
    },
    /// The range ends past `2^(MAX_PHYSMEM_BITS - PAGE_SHIFT)`.
    BeyondMaxPhysmem {
        /// The range's end.
        end: Pfn,
        /// One past the largest pfn of the geometry.
        max_pfn: Pfn,
        /// The geometry's `MAX_PHYSMEM_BITS`.
        max_physmem_bits: u32,
    },
}

impl fmt::Display for WalkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            WalkError::Empty { start } => write!(f, "the pfn range {start}..{start} is empty"),
            WalkError::Inverted { start, end } => {
                write!(f, "the pfn range {start}..{end} ends before it starts")
            }
            WalkError::BeyondMaxPhysmem {
                end,
                max_pfn,
                max_physmem_bits,
            } => write!(
                f,
                "the pfn range ends at {end}, past {max_pfn} (MAX_PHYSMEM_BITS {max_physmem_bits})"
            ),
        }
    }
}

impl std::error::Error for WalkError {}

/// A checked pfn range `[start, end)` to walk.
///
/// Invariant: `start < end <= geometry.max_pfn()` of the geometry it was
/// checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PfnRange {
    start: Pfn,
    end: Pfn,
}

impl PfnRange {
    /// Checks `[start, end)` against `geometry`.
    pub fn new(geometry: &Geometry, start: Pfn, end: Pfn) -> Result<PfnRange, WalkError> {
        if start == end {
            return Err(WalkError::Empty { start });
        }
        if start > end {
            return Err(WalkError::Inverted { start, end });
        }
        if end > geometry.max_pfn() {
            return Err(WalkError::BeyondMaxPhysmem {
                end,
                max_pfn: geometry.max_pfn(),
                max_physmem_bits: geometry.max_physmem_bits(),
            });
        }
        Ok(PfnRange { start, end })
    }

    /// The whole physical span of `geometry`, `[0, max_pfn)`.
    pub fn whole(geometry: &Geometry) -> PfnRange {
        PfnRange {
            start: Pfn::new(0),
            end: geometry.max_pfn(),
        }
    }

    /// The first pfn.
    pub fn start(&self) -> Pfn {
        self.start
    }

    /// One past the last pfn.
    pub fn end(&self) -> Pfn {
        self.end
    }

    /// Pfns in the range.
    pub fn nr_pages(&self) -> u64 {
        self.end - self.start
    }
}

/// How a walk finds the first and the next valid pfn.
pub trait WalkStrategy: Copy + Default {
    /// The walk's name in reports.
    const NAME: &'static str;

    /// The first valid pfn of `[pfn, end)`, or `end` or above.
    fn first<M: MemoryModel + ?Sized>(model: &M, pfn: Pfn, end: Pfn) -> Pfn;

    /// The valid pfn after `pfn` (just yielded), or `end` or above.
    fn next<M: MemoryModel + ?Sized>(model: &M, pfn: Pfn, end: Pfn) -> Pfn;
}

/// The model's own walk, the kernel's `for_each_valid_pfn`.
#[derive(Clone, Copy, Debug, Default)]
pub struct KernelWalk;

impl WalkStrategy for KernelWalk {
    const NAME: &'static str = "for_each_valid_pfn";

    #[inline(always)]
    fn first<M: MemoryModel + ?Sized>(model: &M, pfn: Pfn, end: Pfn) -> Pfn {
        model.first_valid_pfn(pfn, end)
    }

    #[inline(always)]
    fn next<M: MemoryModel + ?Sized>(model: &M, pfn: Pfn, end: Pfn) -> Pfn {
        model.next_valid_pfn(pfn, end)
    }
}

/// The generic loop: `pfn_valid` on every pfn, whatever the model.
#[derive(Clone, Copy, Debug, Default)]
pub struct PerPfnWalk;

impl WalkStrategy for PerPfnWalk {
    const NAME: &'static str = "per-pfn";

    #[inline(always)]
    fn first<M: MemoryModel + ?Sized>(model: &M, pfn: Pfn, end: Pfn) -> Pfn {
        first_valid_pfn_per_pfn(model, pfn, end)
    }

    #[inline(always)]
    fn next<M: MemoryModel + ?Sized>(model: &M, pfn: Pfn, end: Pfn) -> Pfn {
        match pfn.checked_add(1) {
            Some(next) => first_valid_pfn_per_pfn(model, next, end),
            None => end,
        }
    }
}

/// pfnlab's variant (in no kernel): the kernel's walk, with an absent
/// EXTREME root page skipped in one step.
#[derive(Clone, Copy, Debug, Default)]
pub struct BulkSkipWalk;

impl WalkStrategy for BulkSkipWalk {
    const NAME: &'static str = "bulk-skip (variant)";

    #[inline(always)]
    fn first<M: MemoryModel + ?Sized>(model: &M, pfn: Pfn, end: Pfn) -> Pfn {
        model.first_valid_pfn_bulk(pfn, end)
    }

    #[inline(always)]
    fn next<M: MemoryModel + ?Sized>(model: &M, pfn: Pfn, end: Pfn) -> Pfn {
        model.next_valid_pfn_bulk(pfn, end)
    }
}

/// The valid pfns of a range, ascending, found by strategy `W`.
pub struct ValidPfns<'a, M: ?Sized, W> {
    model: &'a M,
    pfn: Pfn,
    end: Pfn,
    _walk: PhantomData<W>,
}

impl<M: MemoryModel + ?Sized, W: WalkStrategy> Iterator for ValidPfns<'_, M, W> {
    type Item = Pfn;

    #[inline(always)]
    fn next(&mut self) -> Option<Pfn> {
        if self.pfn >= self.end {
            return None;
        }
        let pfn = self.pfn;
        self.pfn = W::next(self.model, pfn, self.end);
        Some(pfn)
    }
}

impl<M: MemoryModel + ?Sized, W: WalkStrategy> std::iter::FusedIterator for ValidPfns<'_, M, W> {}

/// `for_each_valid_pfn(pfn, start, end)`: the valid pfns of
/// `[start, end)` by the model's own walk. An empty or inverted range, or
/// one past `MAX_PHYSMEM_BITS`, is an error.
#[inline]
pub fn for_each_valid_pfn<M: MemoryModel + ?Sized>(
    model: &M,
    start: Pfn,
    end: Pfn,
) -> Result<ValidPfns<'_, M, KernelWalk>, WalkError> {
    walk(model, start, end)
}

/// The valid pfns of `[start, end)` by strategy `W`; errors as
/// [`for_each_valid_pfn`].
#[inline]
pub fn walk<M: MemoryModel + ?Sized, W: WalkStrategy>(
    model: &M,
    start: Pfn,
    end: Pfn,
) -> Result<ValidPfns<'_, M, W>, WalkError> {
    Ok(walk_range(
        model,
        PfnRange::new(model.geometry(), start, end)?,
    ))
}

/// The valid pfns of a checked range by strategy `W`.
#[inline]
pub fn walk_range<M: MemoryModel + ?Sized, W: WalkStrategy>(
    model: &M,
    range: PfnRange,
) -> ValidPfns<'_, M, W> {
    ValidPfns {
        model,
        pfn: W::first(model, range.start, range.end),
        end: range.end,
        _walk: PhantomData,
    }
}

/// `pfn_section_first_valid`: the first present subsection's pfn at or
/// after `pfn` in its section `ms`, if any.
#[inline(always)]
fn section_first_valid(g: &Geometry, ms: &MemSection, pfn: u64) -> Option<u64> {
    let index = g.subsection_index(Pfn::new(pfn));
    let bit = ms.subsection_map()?.next_set(index)?;
    if bit == index {
        return Some(pfn);
    }
    let section_base = pfn & !(g.pages_per_section() - 1);
    Some(section_base + bit * g.pages_per_subsection())
}

impl<R: SectionRoot, const VMEMMAP: bool> SectionTable<R, VMEMMAP> {
    /// SPARSEMEM's `first_valid_pfn`: section numbers one at a time from
    /// `pfn`'s up to `__highest_present_section_nr`; the first section with
    /// a memmap answers (at `pfn` itself, or with VMEMMAP and a section
    /// that is not early, at its next present subsection). `BULK` is
    /// pfnlab's variant: an absent root page is skipped whole.
    #[inline]
    pub fn first_valid_pfn<const BULK: bool>(&self, pfn: Pfn, end: Pfn) -> Pfn {
        let Some(highest) = self.highest_present_section() else {
            return end;
        };
        let g = self.geometry();
        let shift = g.pfn_section_shift();
        let mut pfn = pfn.get();
        let mut nr = pfn >> shift;
        while nr <= highest && pfn < end.get() {
            if BULK && let Some(next_root) = self.root().absent_root_end(nr) {
                nr = next_root;
                pfn = nr << shift;
                continue;
            }
            if let Some(ms) = self.root().get(nr).filter(|ms| ms.has_mem_map()) {
                if !VMEMMAP || ms.is_early() {
                    return Pfn::new(pfn);
                }
                if let Some(first) = section_first_valid(g, ms, pfn) {
                    return Pfn::new(first);
                }
            }
            nr += 1;
            pfn = nr << shift;
        }
        end
    }

    /// SPARSEMEM's `next_valid_pfn`: the next pfn, unless it crosses a
    /// section boundary (a subsection boundary with VMEMMAP), where
    /// [`SectionTable::first_valid_pfn`] is asked again.
    #[inline(always)]
    pub fn next_valid_pfn<const BULK: bool>(&self, pfn: Pfn, end: Pfn) -> Pfn {
        let Some(next) = pfn.checked_add(1) else {
            return end;
        };
        if next >= end {
            return end;
        }
        let g = self.geometry();
        let granule = if VMEMMAP {
            g.pages_per_subsection()
        } else {
            g.pages_per_section()
        };
        if next.get() & (granule - 1) != 0 {
            return next;
        }
        self.first_valid_pfn::<BULK>(next, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, MemRange, RangeKind};
    use crate::{Flat, SparseExtreme};

    #[test]
    fn bad_ranges_are_errors() {
        let g = Geometry::X86_64;
        let p = Pfn::new;
        assert_eq!(
            PfnRange::new(&g, p(5), p(5)),
            Err(WalkError::Empty { start: p(5) })
        );
        assert_eq!(
            PfnRange::new(&g, p(6), p(5)),
            Err(WalkError::Inverted {
                start: p(6),
                end: p(5)
            })
        );
        let e = PfnRange::new(&g, p(0), p((1 << 34) + 1)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the pfn range ends at 0x400000001, past 0x400000000 (MAX_PHYSMEM_BITS 46)"
        );
        assert_eq!(
            PfnRange::new(&g, p(0), g.max_pfn()),
            Ok(PfnRange::whole(&g))
        );
        assert_eq!(PfnRange::whole(&g).nr_pages(), 1 << 34);
    }

    #[test]
    fn flat_clamps_and_sections_skip() {
        let layout = Layout::new(
            Geometry::X86_64,
            vec![
                MemRange::new(1 << 20, 8 << 20, RangeKind::Ram, 0),
                MemRange::new(1 << 30, (1 << 30) + (4 << 20), RangeKind::Ram, 0),
            ],
            "two banks",
        )
        .unwrap();
        let flat = Flat::new(&layout).unwrap();
        let all: Vec<Pfn> = for_each_valid_pfn(&flat, Pfn::new(0), Pfn::new(1 << 20))
            .unwrap()
            .collect();
        assert_eq!(all.len() as u64, flat.max_mapnr());
        assert_eq!(all[0], flat.pfn_offset());
        let sparse = SparseExtreme::new(&layout).unwrap();
        let walked: Vec<Pfn> = for_each_valid_pfn(&sparse, Pfn::new(100), Pfn::new(1 << 30))
            .unwrap()
            .collect();
        // Two present sections (0 and 8), whole without VMEMMAP.
        assert_eq!(walked.len(), 2 * 32768 - 100);
        assert_eq!(walked[0], Pfn::new(100));
        assert_eq!(walked[32767 - 100 + 1], Pfn::new(8 * 32768));
        let bulk: Vec<Pfn> = walk::<_, BulkSkipWalk>(&sparse, Pfn::new(100), Pfn::new(1 << 30))
            .unwrap()
            .collect();
        assert_eq!(bulk, walked);
        assert!(
            for_each_valid_pfn(&sparse, Pfn::new(9 * 32768), Pfn::new(1 << 34))
                .unwrap()
                .next()
                .is_none()
        );
    }
}
