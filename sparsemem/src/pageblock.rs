//! Migratetypes and the per-pageblock flags that record them.
//!
//! Since Linux 2.6.24 every `pageblock_nr_pages` block of memory has a
//! migratetype, kept in a bitmap of `NR_PAGEBLOCK_BITS` bits per block:
//! under SPARSEMEM in each present section's `mem_section_usage`
//! (`pageblock_flags[]`, allocated and freed with the section), under
//! FLATMEM in the zone. `get_pfnblock_migratetype` is therefore a memory-
//! model operation: a section-table walk (or an index into the zone's
//! bitmap) and a load, on every page freed. Every model implements
//! [`MemoryModel::get_pfnblock_migratetype`](crate::MemoryModel) over
//! storage of this module, so that cost is each model's own.
//!
//! The bits are atomics: readers load them without a lock, writers
//! (`set_pfnblock_flags_mask`, under the zone lock in the kernel) update
//! their 4 bits with a compare-and-swap so that neighbouring blocks'
//! bits are never lost.

use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

/// What kind of allocations a pageblock serves (`enum migratetype`, without
/// CMA).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Migratetype {
    /// `MIGRATE_UNMOVABLE`: kernel allocations.
    Unmovable = 0,
    /// `MIGRATE_MOVABLE`: user pages and page cache; what memmap init sets.
    Movable = 1,
    /// `MIGRATE_RECLAIMABLE`: slab caches that can be reclaimed.
    Reclaimable = 2,
    /// `MIGRATE_HIGHATOMIC`: a reserve for high-order atomic allocations.
    HighAtomic = 3,
    /// `MIGRATE_ISOLATE`: being offlined or migrated; never allocated from.
    Isolate = 4,
}

/// `MIGRATE_PCPTYPES`: the migratetypes with per-CPU lists.
pub const MIGRATE_PCPTYPES: usize = 3;

/// `MIGRATE_TYPES`: every migratetype pfnlab models.
pub const MIGRATE_TYPES: usize = 5;

/// `NR_PAGEBLOCK_BITS`: 3 bits of migratetype and the compaction skip bit,
/// as before Linux 6.17. 6.17 ("mm/page_isolation: make page isolation a
/// standalone bit") moves isolation out of the migratetype into a bit of
/// its own and rounds the count up to 8; pfnlab keeps `MIGRATE_ISOLATE` a
/// migratetype in every era.
pub const NR_PAGEBLOCK_BITS: u32 = 4;

/// Most pageblocks a section may have: what a section's inline bitmap
/// holds (x86_64: 64; a custom geometry is refused beyond this).
pub const MAX_PAGEBLOCKS_PER_SECTION: u64 = 512;

const WORDS: usize = (MAX_PAGEBLOCKS_PER_SECTION as usize * NR_PAGEBLOCK_BITS as usize) / 64;
const MT_MASK: u64 = 0b111;

impl Migratetype {
    /// Every migratetype, in the kernel's order.
    pub const ALL: [Migratetype; MIGRATE_TYPES] = [
        Migratetype::Unmovable,
        Migratetype::Movable,
        Migratetype::Reclaimable,
        Migratetype::HighAtomic,
        Migratetype::Isolate,
    ];

    /// The value stored in the bitmap, and the index of per-migratetype
    /// lists.
    #[inline(always)]
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The migratetype of a stored value (unknown values read as
    /// `Unmovable`, the kernel's fallback for a corrupt block).
    #[inline(always)]
    pub const fn from_bits(bits: u64) -> Migratetype {
        match bits & MT_MASK {
            1 => Migratetype::Movable,
            2 => Migratetype::Reclaimable,
            3 => Migratetype::HighAtomic,
            4 => Migratetype::Isolate,
            _ => Migratetype::Unmovable,
        }
    }
}

impl fmt::Display for Migratetype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Migratetype::Unmovable => "Unmovable",
            Migratetype::Movable => "Movable",
            Migratetype::Reclaimable => "Reclaimable",
            Migratetype::HighAtomic => "HighAtomic",
            Migratetype::Isolate => "Isolate",
        })
    }
}

/// A section's `pageblock_flags[]`: 4 bits per pageblock, for up to
/// [`MAX_PAGEBLOCKS_PER_SECTION`] blocks, inline in the usage structure as
/// the kernel's flexible array is.
#[derive(Debug)]
pub struct SectionBlockFlags([AtomicU64; WORDS]);

impl Default for SectionBlockFlags {
    fn default() -> Self {
        SectionBlockFlags([const { AtomicU64::new(0) }; WORDS])
    }
}

impl SectionBlockFlags {
    /// The migratetype of block `index` of the section.
    #[inline(always)]
    pub fn get(&self, index: u64) -> Migratetype {
        get_bits(&self.0, index)
    }

    /// Sets the migratetype of block `index` of the section.
    pub fn set(&self, index: u64, mt: Migratetype) {
        set_bits(&self.0, index, mt);
    }

    /// Sets blocks `0..nr` to `mt` (memmap init: `MIGRATE_MOVABLE`).
    pub fn fill(&self, nr: u64, mt: Migratetype) {
        for i in 0..nr.min(MAX_PAGEBLOCKS_PER_SECTION) {
            self.set(i, mt);
        }
    }
}

/// The migratetype of block `index` in a bitmap of 4-bit fields (blocks
/// beyond the bitmap read as `Unmovable`).
#[inline(always)]
pub fn get_bits(words: &[AtomicU64], index: u64) -> Migratetype {
    let bit = index * u64::from(NR_PAGEBLOCK_BITS);
    // Relaxed: the migratetype is a hint read without the zone lock, as the
    // kernel's READ_ONCE of the word; no other memory is published with it.
    words
        .get((bit / 64) as usize)
        .map_or(Migratetype::Unmovable, |w| {
            Migratetype::from_bits(w.load(Relaxed) >> (bit % 64))
        })
}

/// Sets the migratetype of block `index` (nothing beyond the bitmap),
/// keeping the other bits of the word (`set_pfnblock_flags_mask`'s
/// `try_cmpxchg` loop).
pub fn set_bits(words: &[AtomicU64], index: u64, mt: Migratetype) {
    let bit = index * u64::from(NR_PAGEBLOCK_BITS);
    let Some(word) = words.get((bit / 64) as usize) else {
        return;
    };
    let shift = bit % 64;
    // Relaxed: the update is atomic on the word, so concurrent writers of
    // neighbouring blocks keep each other's bits; readers need no order.
    let _ = word.fetch_update(Relaxed, Relaxed, |w| {
        Some((w & !(MT_MASK << shift)) | ((mt as u64) << shift))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_keep_their_own_bits() {
        let flags = SectionBlockFlags::default();
        assert_eq!(
            flags.get(5),
            Migratetype::Unmovable,
            "all zero is Unmovable"
        );
        flags.fill(64, Migratetype::Movable);
        flags.set(17, Migratetype::Reclaimable);
        flags.set(16, Migratetype::Isolate);
        assert_eq!(flags.get(17), Migratetype::Reclaimable);
        assert_eq!(flags.get(16), Migratetype::Isolate);
        assert_eq!(flags.get(15), Migratetype::Movable);
        assert_eq!(flags.get(18), Migratetype::Movable);
        assert_eq!(flags.get(511), Migratetype::Unmovable);
        assert_eq!(flags.get(512), Migratetype::Unmovable, "beyond the bitmap");
        flags.set(9999, Migratetype::Movable);
        for mt in Migratetype::ALL {
            assert_eq!(Migratetype::from_bits(mt as u64), mt);
        }
    }
}
