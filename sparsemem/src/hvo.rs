//! HugeTLB vmemmap optimisation (HVO): the vocabulary every model shares.
//!
//! A hugetlb folio of `2^order` pages has `2^order` `struct page`s, all but
//! the head describing nothing of their own: every tail says "my head is
//! there". `mm/hugetlb_vmemmap.c` therefore maps the vmemmap pages of a
//! folio's tails read-only onto one page and frees the others. Since 5.18
//! every vmemmap page after the first is mapped onto the first (the head's):
//! with 4 KiB pages and 64-byte `struct page`s, 7 of a 2 MiB folio's 8
//! vmemmap pages are freed (28 KiB) and 4095 of a 1 GiB folio's 4096
//! (16380 KiB), the figures the kernel prints at boot (`hugetlb_vmemmap_init`:
//! "HugeTLB: ... can free N vmemmap pages"). 2026's `compound_info`
//! rework maps them instead onto a read-only page of tails shared by every
//! folio of one order in the zone; the count freed is the same.
//!
//! Only a memmap that is page tables over pages can do this: the kernel
//! builds HVO for SPARSEMEM_VMEMMAP alone
//! (`ARCH_WANT_HUGETLB_VMEMMAP_PREINIT` / `HUGETLB_PAGE_OPTIMIZE_VMEMMAP`
//! depend on it), requires a power-of-two `sizeof(struct page)` (so a tail's
//! descriptors tile a page exactly), and an architecture that opts in
//! (arm64 turned it off in 2023). A model offers it through
//! [`MemoryModel::hugetlb_vmemmap`](crate::MemoryModel::hugetlb_vmemmap).

use std::fmt;
use std::io;

use crate::geometry::Geometry;
use crate::types::Pfn;

/// Which vmemmap layout an optimised folio gets.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum HvoLayout {
    /// 5.18+: every vmemmap page after the first maps the head's page, so a
    /// tail `struct page` at a page boundary reads as the head: a "fake
    /// head" that `compound_head` must see through (`page_fixed_fake_head`).
    FakeHead,
    /// 2026 (`compound_info`): the head keeps its vmemmap page, the others
    /// map one read-only page of tails shared by every folio of the order
    /// in the zone; a tail finds its head by masking its own address.
    SharedTail,
}

/// Why a hugetlb vmemmap operation was refused or failed.
#[derive(Debug)]
pub enum HvoError {
    /// The model has no vmemmap (FLATMEM, SPARSEMEM without VMEMMAP).
    NoVmemmap(&'static str),
    /// The vmemmap model was built without a memfd backing.
    NotShared,
    /// `sizeof(struct page)` is one pfnlab's HVO does not model: the kernel
    /// asks only for a power of two, pfnlab's tail checks read the 64-byte
    /// page's fields.
    PageStructSize(u64),
    /// The architecture does not opt in (arm64 since 2023).
    Arch(&'static str),
    /// A folio of this order has its memmap in one page: nothing to free.
    NotOptimizable(u32),
    /// The folio's head is not aligned to its order, or not valid.
    BadFolio(Pfn, u32),
    /// The folio is already optimised.
    AlreadyOptimized(Pfn),
    /// The folio is not optimised.
    NotOptimized(Pfn),
    /// The folio's memmap is on its memory block's own frames
    /// (memmap_on_memory): the kernel leaves such a folio unoptimised
    /// (`PageVmemmapSelfHosted`), pfnlab refuses.
    SelfHosted(Pfn),
    /// A mapping, hole punch or write failed.
    Map(io::Error),
}

impl fmt::Display for HvoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HvoError::NoVmemmap(model) => write!(
                f,
                "HugeTLB vmemmap optimisation needs SPARSEMEM_VMEMMAP; {model} has no vmemmap"
            ),
            HvoError::NotShared => f.write_str(
                "HugeTLB vmemmap optimisation needs a memmap that can be mapped twice: build the vmemmap model with the memfd backing",
            ),
            HvoError::PageStructSize(size) => write!(
                f,
                "HugeTLB vmemmap optimisation is modelled for a 64-byte struct page only (the kernel needs a power of two), not {size} bytes"
            ),
            HvoError::Arch(geometry) => write!(
                f,
                "HugeTLB vmemmap optimisation is disabled on {geometry} (arm64 has not selected ARCH_WANT_OPTIMIZE_HUGETLB_VMEMMAP since 2023)"
            ),
            HvoError::NotOptimizable(order) => write!(
                f,
                "a folio of order {order} has its whole memmap in one page: nothing to free"
            ),
            HvoError::BadFolio(pfn, order) => write!(
                f,
                "pfn {pfn:?} does not head a valid folio of order {order}"
            ),
            HvoError::AlreadyOptimized(pfn) => {
                write!(f, "the folio at pfn {pfn:?} is already optimised")
            }
            HvoError::NotOptimized(pfn) => write!(f, "the folio at pfn {pfn:?} is not optimised"),
            HvoError::SelfHosted(pfn) => write!(
                f,
                "the folio at pfn {pfn:?} has its memmap on its own memory block's frames (memmap_on_memory): the kernel does not optimise it"
            ),
            HvoError::Map(e) => write!(f, "remapping the vmemmap failed: {e}"),
        }
    }
}

impl std::error::Error for HvoError {}

impl From<io::Error> for HvoError {
    fn from(e: io::Error) -> Self {
        HvoError::Map(e)
    }
}

/// Vmemmap pages a folio of `order` spans: `2^order * page_struct_size /
/// page_size` (at least 1).
pub const fn vmemmap_pages_per_folio(order: u32, page_size: u64, page_struct_size: u64) -> u64 {
    let bytes = (1u64 << order) * page_struct_size;
    if bytes <= page_size {
        1
    } else {
        bytes / page_size
    }
}

/// Bytes of vmemmap HVO frees per folio of `order` (5.18+ and 2026 alike:
/// every vmemmap page but the head's), the kernel's
/// `hugetlb_vmemmap_optimizable_size`; 0 when the folio's memmap fits in
/// one page.
pub const fn hvo_freed_bytes(order: u32, page_size: u64, page_struct_size: u64) -> u64 {
    (vmemmap_pages_per_folio(order, page_size, page_struct_size) - 1) * page_size
}

/// The hugetlb orders of a geometry: one PMD's reach (`HPAGE_PMD_ORDER`,
/// `PAGE_SHIFT - 3` with 8-byte page-table entries) and one PUD's (twice
/// that), the 2 MiB and 1 GiB folios of 4 KiB pages.
pub const fn hugetlb_orders(g: &Geometry) -> [u32; 2] {
    let pmd = g.page_shift() - 3;
    [pmd, 2 * pmd]
}

/// A model's HugeTLB vmemmap optimisation.
///
/// # Safety
/// Implementers promise that after a successful [`optimize`] every pfn of
/// the folio still answers `pfn_valid`, `pfn_to_page` and `page_to_pfn` as
/// before, and that a successful [`restore`] gives every tail descriptor
/// back its own writable memory, holding what `prep_compound_page` wrote.
///
/// [`optimize`]: HugetlbVmemmap::optimize
/// [`restore`]: HugetlbVmemmap::restore
pub unsafe trait HugetlbVmemmap: Send + Sync {
    /// Checks HVO's preconditions for folios of `order`.
    fn hvo_supported(&self, order: u32) -> Result<(), HvoError>;

    /// `hugetlb_vmemmap_optimize_folios` (`batched`: 6.7's form, split all
    /// first, then remap all, then free all) or one
    /// `hugetlb_vmemmap_optimize_folio` per folio: the tail vmemmap of each
    /// folio headed by `heads` becomes read-only and its pages are freed.
    ///
    /// # Safety
    /// The caller owns every folio (allocated with `__GFP_COMP`, compound
    /// fields as `prep_compound_page` writes them) and writes none of its
    /// tail descriptors until it is restored.
    unsafe fn optimize(
        &self,
        heads: &[Pfn],
        order: u32,
        layout: HvoLayout,
        batched: bool,
    ) -> Result<(), HvoError>;

    /// `hugetlb_vmemmap_restore_folios` / `hugetlb_vmemmap_restore_folio`:
    /// pages back for each folio's tail vmemmap, the head page's tails
    /// copied into them, mapped writable.
    ///
    /// # Safety
    /// The caller owns every folio; no reference to a tail descriptor is
    /// used across the call.
    unsafe fn restore(&self, heads: &[Pfn], order: u32, batched: bool) -> Result<(), HvoError>;

    /// Whether the folio headed by `head` is optimised, and how.
    fn optimized(&self, head: Pfn) -> Option<HvoLayout>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_bytes_match_the_host_kernels_boot_message() {
        let g = Geometry::X86_64;
        let [pmd, pud] = hugetlb_orders(&g);
        let ps = g.page_size();
        let sps = crate::PAGE_STRUCT_SIZE;
        assert_eq!((pmd, pud), (9, 18));
        assert_eq!(hvo_freed_bytes(pmd, ps, sps), 28 << 10, "28 KiB per 2 MiB");
        assert_eq!(
            hvo_freed_bytes(pud, ps, sps),
            16380 << 10,
            "16380 KiB per 1 GiB"
        );
        assert_eq!(vmemmap_pages_per_folio(pud, ps, sps), 4096);
    }

    #[test]
    fn freed_bytes_scale_with_the_struct_page_size_and_page_size() {
        // 32-byte descriptors: a 2 MiB folio's memmap is 4 pages, 3 freed.
        assert_eq!(hvo_freed_bytes(9, 4096, 32), 3 * 4096);
        // 8-byte descriptors: one page, nothing to free.
        assert_eq!(hvo_freed_bytes(9, 4096, 8), 0);
        // arm64 64 KiB pages: a 512 MiB folio (order 13) has 8 vmemmap pages.
        let g = Geometry::ARM64_64K;
        assert_eq!(hugetlb_orders(&g)[0], 13);
        assert_eq!(hvo_freed_bytes(13, g.page_size(), 64), 7 * 65536);
    }
}
