//! `split_page`: an allocated non-compound block of order `n` becomes
//! `1 << n` allocated order-0 pages, each freed on its own. The kernel
//! uses it where a caller took a high-order block and hands its pages out
//! one by one (`alloc_pages_exact`, `make_alloc_exact`, the vmalloc and
//! DMA paths); a replay uses it to free, page by page, memory a start
//! state left allocated before a recording began.

use sparsemem::{BuddyPage, Order, PageFlag, Pfn};

use crate::alloc::Allocator;
use crate::error::FreeError;
use crate::types::BuddyModel;
use crate::variant::Variant;

impl<M: BuddyModel, V: Variant> Allocator<M, V> {
    /// `split_page(page, order)`: the allocated block at `pfn` of `order`
    /// becomes `1 << order` allocated order-0 pages. Refused, with nothing
    /// changed, where a free of the block would be (not an allocated head
    /// of that order: [`FreeError`]) and for a compound block
    /// ([`FreeError::Compound`]: the kernel's `VM_BUG_ON_PAGE(PageCompound)`).
    pub fn split_page(&self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        let (block, _) = self.claim(pfn, order)?;
        if block.page().test(PageFlag::Head) {
            block.unclaim();
            return Err(FreeError::Compound { pfn });
        }
        block.split();
        Ok(())
    }
}
