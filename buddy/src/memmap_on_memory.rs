//! memmap_on_memory's gate: whether a hot-added memory block may carry its
//! own memmap in its first pfns (`MHP_MEMMAP_ON_MEMORY`, a `vmem_altmap`
//! per block), and how many pfns that memmap takes.
//!
//! Linux 5.13 (Oscar Salvador, "Allocate memmap from hotadded memory")
//! took the request only for an add of exactly one memory block whose
//! memmap fills whole PMDs and leaves whole pageblocks; 6.6 gave every
//! block its own altmap and the `force` mode, which pads the memmap to
//! whole pageblocks; 6.8 splits a larger add per block. Each era here has
//! what its release had: 5.13 to 6.1 the one-block form, 6.6 `force` too,
//! 6.8 on all of it; the 2.6 eras none. The
//! kernel's gate, `mhp_supports_memmap_on_memory` (6.8 on), asks in this
//! order:
//!
//! 1. the boot parameter `memory_hotplug.memmap_on_memory` is on (`y`
//!    or `force`) — a request here always names a mode, so it is;
//! 2. the block's memmap (`memory_block_memmap_size`: the block's pages
//!    times `sizeof(struct page)`) is a whole number of pages;
//! 3. the pfns it takes (`memory_block_memmap_on_memory_pages`: the memmap
//!    in pages, padded to whole pageblocks with `force`) are whole
//!    pageblocks, so the rest of the block onlines with migratetypes;
//! 4. they are not the whole block (nothing would be left to online);
//! 5. `arch_supports_memmap_on_memory`: by default the memmap is a whole
//!    number of `PMD_SIZE` mappings, so `vmemmap_populate` takes all of it
//!    from the altmap.
//!
//! Where the kernel's `add_memory` falls back silently to a memmap in
//! boot memory, pfnlab refuses with the rule that failed, so a request
//! never measures something other than what it asked for.

use std::fmt;

use sparsemem::{Geometry, PAGE_STRUCT_SIZE};

use crate::era::Era;

/// `memory_hotplug.memmap_on_memory`: how the memmap of a hot-added block
/// is carved from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemmapOnMemory {
    /// `y`: the memmap as it is, which must fill whole pageblocks.
    On,
    /// `force` (6.6 on): the memmap padded to whole pageblocks; the
    /// padding is lost with it.
    Force,
}

/// The rule of the gate that refused a memmap_on_memory request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemmapOnMemoryError {
    /// The era has no memmap_on_memory (before 5.13).
    Era(Era),
    /// The memory model has no `vmemmap_populate` to take an altmap.
    NeedsVmemmap {
        /// The model's name.
        model: &'static str,
    },
    /// `force` arrived in 6.6.
    ForceEra(Era),
    /// 5.13 took only an add of exactly one memory block.
    NotOneBlock {
        /// Pages asked for.
        nr_pages: u64,
        /// Pages in a memory block.
        block_pages: u64,
    },
    /// The memmap is not a whole number of pages.
    MemmapNotPageAligned {
        /// The block's memmap.
        memmap_bytes: u64,
    },
    /// The memmap's pfns are not whole pageblocks (without `force`).
    NotPageblockAligned {
        /// Pfns the memmap takes.
        memmap_pages: u64,
        /// Pages in a pageblock.
        pageblock_pages: u64,
    },
    /// The memmap would take the whole block.
    WholeBlock,
    /// `arch_supports_memmap_on_memory`: the memmap is not a whole number
    /// of PMD mappings.
    NotPmdAligned {
        /// The block's memmap.
        memmap_bytes: u64,
        /// `PMD_SIZE` of the geometry.
        pmd_bytes: u64,
    },
}

impl fmt::Display for MemmapOnMemoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Era(era) => write!(
                f,
                "memmap_on_memory arrived in Linux 5.13; era {era} keeps every memmap in boot memory"
            ),
            Self::NeedsVmemmap { model } => write!(
                f,
                "memmap_on_memory needs SPARSEMEM_VMEMMAP (an altmap for vmemmap_populate), which `{model}` is not"
            ),
            Self::ForceEra(era) => write!(
                f,
                "memmap_on_memory=force arrived in Linux 6.6; era {era} has only `y`"
            ),
            Self::NotOneBlock {
                nr_pages,
                block_pages,
            } => write!(
                f,
                "Linux 5.13 to 6.7 puts the memmap on the memory only for an add of one memory block ({block_pages} pages), not {nr_pages} pages (6.8 splits larger adds per block)"
            ),
            Self::MemmapNotPageAligned { memmap_bytes } => write!(
                f,
                "mhp_supports_memmap_on_memory: the block's memmap ({memmap_bytes} bytes) is not a whole number of pages"
            ),
            Self::NotPageblockAligned {
                memmap_pages,
                pageblock_pages,
            } => write!(
                f,
                "mhp_supports_memmap_on_memory: the memmap's {memmap_pages} pfns are not whole pageblocks of {pageblock_pages} (memmap_on_memory=force pads them)"
            ),
            Self::WholeBlock => f.write_str(
                "mhp_supports_memmap_on_memory: the memmap would take the whole memory block",
            ),
            Self::NotPmdAligned {
                memmap_bytes,
                pmd_bytes,
            } => write!(
                f,
                "arch_supports_memmap_on_memory: the block's memmap ({memmap_bytes} bytes) is not a whole number of PMD mappings ({pmd_bytes} bytes)"
            ),
        }
    }
}

impl std::error::Error for MemmapOnMemoryError {}

/// `PMD_SIZE` of a geometry: one page-table page of 8-byte entries, each
/// mapping a page.
pub const fn pmd_size(g: &Geometry) -> u64 {
    g.page_size() * (g.page_size() / 8)
}

/// The pfns the memmap of one hot-added memory block takes from the block
/// itself in `era` and `mode` (`memory_block_memmap_on_memory_pages`), for
/// an add of `nr_pages`, or the rule that refuses it.
pub fn memmap_on_memory_pages(
    g: &Geometry,
    era: Era,
    mode: MemmapOnMemory,
    nr_pages: u64,
) -> Result<u64, MemmapOnMemoryError> {
    let block_pages = g.memory_block_pages();
    // memmap_on_memory: 5.13; `force`: 6.6; an add of several blocks
    // split per block: 6.8 (as this module's documentation dates them).
    if !era.since(5, 13) {
        return Err(MemmapOnMemoryError::Era(era));
    }
    if mode == MemmapOnMemory::Force && !era.since(6, 6) {
        return Err(MemmapOnMemoryError::ForceEra(era));
    }
    if nr_pages != block_pages && !era.since(6, 8) {
        return Err(MemmapOnMemoryError::NotOneBlock {
            nr_pages,
            block_pages,
        });
    }
    let memmap_bytes = block_pages * PAGE_STRUCT_SIZE;
    if !memmap_bytes.is_multiple_of(g.page_size()) {
        return Err(MemmapOnMemoryError::MemmapNotPageAligned { memmap_bytes });
    }
    let pageblock_pages = g.pageblock_nr_pages();
    let memmap_pages = match mode {
        MemmapOnMemory::On => memmap_bytes / g.page_size(),
        MemmapOnMemory::Force => (memmap_bytes / g.page_size()).next_multiple_of(pageblock_pages),
    };
    if !memmap_pages.is_multiple_of(pageblock_pages) {
        return Err(MemmapOnMemoryError::NotPageblockAligned {
            memmap_pages,
            pageblock_pages,
        });
    }
    if memmap_pages >= block_pages {
        return Err(MemmapOnMemoryError::WholeBlock);
    }
    let pmd_bytes = pmd_size(g);
    if !memmap_bytes.is_multiple_of(pmd_bytes) {
        return Err(MemmapOnMemoryError::NotPmdAligned {
            memmap_bytes,
            pmd_bytes,
        });
    }
    Ok(memmap_pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x86_64_blocks_give_one_pageblock() {
        let g = Geometry::X86_64;
        // 128 MiB block: 32768 pages, a 2 MiB memmap = 512 pfns = one PMD
        // and one pageblock.
        let on = memmap_on_memory_pages(&g, Era::V6_18, MemmapOnMemory::On, 16 << 15);
        assert_eq!(on, Ok(512));
        assert_eq!(
            memmap_on_memory_pages(&g, Era::V5_13, MemmapOnMemory::On, 1 << 15),
            Ok(512)
        );
    }

    /// `force` from 6.6, adds of several blocks from 6.8.
    #[test]
    fn each_era_has_its_releases_rules() {
        let g = Geometry::X86_64;
        let (one, two) = (1 << 15, 2 << 15);
        let gate = |era, mode, n| memmap_on_memory_pages(&g, era, mode, n);
        for era in [Era::V5_14, Era::V5_15, Era::V6_1] {
            assert_eq!(gate(era, MemmapOnMemory::On, one), Ok(512), "{era}");
            assert!(gate(era, MemmapOnMemory::Force, one).is_err(), "{era}");
        }
        assert_eq!(gate(Era::V6_6, MemmapOnMemory::Force, one), Ok(512));
        assert!(gate(Era::V6_6, MemmapOnMemory::On, two).is_err());
        for era in [Era::V6_8, Era::V6_12] {
            assert_eq!(gate(era, MemmapOnMemory::On, two), Ok(512), "{era}");
        }
    }

    #[test]
    fn the_gate_names_the_rule() {
        let g = Geometry::X86_64;
        let two = 2 << 15;
        assert!(matches!(
            memmap_on_memory_pages(&g, Era::V5_13, MemmapOnMemory::On, two),
            Err(MemmapOnMemoryError::NotOneBlock { .. })
        ));
        assert!(matches!(
            memmap_on_memory_pages(&g, Era::V5_13, MemmapOnMemory::Force, 1 << 15),
            Err(MemmapOnMemoryError::ForceEra(_))
        ));
        assert!(matches!(
            memmap_on_memory_pages(&g, Era::V2_6_23, MemmapOnMemory::On, 1 << 15),
            Err(MemmapOnMemoryError::Era(_))
        ));
        // arm64 with 64 KiB pages: a 512 MiB block's memmap is 512 KiB, 8
        // pfns, under a 8192-pfn pageblock; force pads it to one
        // pageblock, and the PMD rule (512 MiB) still refuses.
        let g = Geometry::ARM64_64K;
        let n = g.memory_block_pages();
        assert!(matches!(
            memmap_on_memory_pages(&g, Era::V6_18, MemmapOnMemory::On, n),
            Err(MemmapOnMemoryError::NotPageblockAligned {
                memmap_pages: 8,
                ..
            })
        ));
        let forced = memmap_on_memory_pages(&g, Era::V6_18, MemmapOnMemory::Force, n);
        assert!(
            matches!(
                forced,
                Err(MemmapOnMemoryError::WholeBlock | MemmapOnMemoryError::NotPmdAligned { .. })
            ),
            "{forced:?}"
        );
    }
}
