//! `Allocator::split_page`: a non-compound block becomes order-0 pages,
//! each freed on its own until the block merges back; what a free of the
//! block would refuse, and a compound page, are refused with nothing
//! changed.

use buddy::testing::ram_allocator;
use buddy::{Era, FreeError, Gfp};
use sparsemem::{NodeId, Order};

#[test]
fn a_split_block_is_freed_page_by_page_and_merges_back() {
    let alloc = ram_allocator(4 << 30, (4 << 30) + (64 << 20), Era::V6_18);
    let free = alloc.free_pages_total();
    let mut cpu = alloc.cpu_on(NodeId::new(0)).unwrap();
    let order = Order::new(3);
    let pfn = cpu.alloc_pages(order, Gfp::KERNEL).unwrap();
    alloc.split_page(pfn, order).unwrap();
    // The block is gone as a block: its head is an order-0 page now.
    assert!(
        matches!(
            cpu.free_pages(pfn, order),
            Err(FreeError::WrongOrder { .. })
        ),
        "a split block freed whole"
    );
    for i in 0..order.nr_pages() {
        cpu.free_pages(pfn + i, Order::ZERO).unwrap();
    }
    assert!(
        cpu.free_pages(pfn + 5, Order::ZERO).is_err(),
        "a page freed twice"
    );
    drop(cpu);
    assert_eq!(alloc.free_pages_total(), free, "every page came back");
}

#[test]
fn split_page_refuses_a_free_block_another_order_and_a_compound_page() {
    let alloc = ram_allocator(4 << 30, (4 << 30) + (64 << 20), Era::V6_18);
    let mut cpu = alloc.cpu_on(NodeId::new(0)).unwrap();
    let order = Order::new(2);
    let plain = cpu.alloc_pages(order, Gfp::KERNEL).unwrap();
    let comp = cpu.alloc_pages(order, Gfp::KERNEL | Gfp::COMP).unwrap();
    assert!(matches!(
        alloc.split_page(plain, Order::new(1)),
        Err(FreeError::WrongOrder { .. })
    ));
    assert!(matches!(
        alloc.split_page(comp, order),
        Err(FreeError::Compound { pfn }) if pfn == comp
    ));
    // Both are still whole allocated blocks, and a freed one is not split.
    cpu.free_pages(plain, order).unwrap();
    cpu.free_pages(comp, order).unwrap();
    assert!(alloc.split_page(plain, order).is_err());
}
