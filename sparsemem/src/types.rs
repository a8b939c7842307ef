//! Newtypes for the units of physical memory: page frame numbers, physical
//! addresses, section numbers and buddy orders.
//!
//! A bare `u64` never crosses an API boundary when it means one of these.
//! Conversions that depend on the page or section size live on
//! [`Geometry`](crate::Geometry), because those sizes are runtime values here.

use std::fmt;

/// Largest buddy order, inclusive (the kernel's `MAX_PAGE_ORDER`): blocks of
/// `1 << 10` pages.
pub const MAX_PAGE_ORDER: u8 = 10;

/// Number of buddy orders, exclusive bound (the kernel's `NR_PAGE_ORDERS`).
pub const NR_PAGE_ORDERS: usize = MAX_PAGE_ORDER as usize + 1;

macro_rules! hex_newtype {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        #[repr(transparent)]
        pub struct $name(u64);

        impl $name {
            /// Wraps a raw value; every `u64` is representable.
            #[inline(always)]
            pub const fn new(raw: u64) -> Self {
                Self(raw)
            }

            /// The raw value.
            #[inline(always)]
            pub const fn get(self) -> u64 {
                self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:#x})"), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:#x}", self.0)
            }
        }
    };
}

hex_newtype!(
    /// A page frame number: a physical address shifted right by `PAGE_SHIFT`.
    ///
    /// Any `u64` is a pfn; whether a `struct page` exists for it is the memory
    /// model's question ([`MemoryModel::pfn_valid`](crate::MemoryModel::pfn_valid)).
    Pfn
);

hex_newtype!(
    /// A physical byte address.
    PhysAddr
);

hex_newtype!(
    /// A memory section number: a pfn shifted right by `PFN_SECTION_SHIFT`.
    SectionNr
);

/// `pfn + nr_pages`: the pfn that many pages later. Overflow behaves as
/// `u64` addition does (a panic in debug builds); use [`Pfn::checked_add`]
/// on untrusted input.
impl std::ops::Add<u64> for Pfn {
    type Output = Pfn;
    #[inline(always)]
    fn add(self, nr_pages: u64) -> Pfn {
        Pfn(self.0 + nr_pages)
    }
}

/// `pfn - nr_pages`: the pfn that many pages earlier (as `u64` subtraction).
impl std::ops::Sub<u64> for Pfn {
    type Output = Pfn;
    #[inline(always)]
    fn sub(self, nr_pages: u64) -> Pfn {
        Pfn(self.0 - nr_pages)
    }
}

/// `end - start`: the number of pages between two pfns (as `u64`
/// subtraction).
impl std::ops::Sub<Pfn> for Pfn {
    type Output = u64;
    #[inline(always)]
    fn sub(self, start: Pfn) -> u64 {
        self.0 - start.0
    }
}

impl Pfn {
    /// The pfn `nr_pages` after this one, or `None` on overflow.
    #[inline(always)]
    pub const fn checked_add(self, nr_pages: u64) -> Option<Pfn> {
        match self.0.checked_add(nr_pages) {
            Some(p) => Some(Pfn(p)),
            None => None,
        }
    }
}

/// Node ids are below this bound (the kernel's `MAX_NUMNODES`,
/// `1 << CONFIG_NODES_SHIFT` with the x86_64 maximum `NODES_SHIFT` of 10,
/// include/linux/numa.h).
pub const MAX_NUMNODES: u16 = 1024;

/// A NUMA node id (`nid`).
///
/// Invariant: the value is below [`MAX_NUMNODES`], so a node mask can hold
/// every node.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(transparent)]
pub struct NodeId(u16);

/// The node id given to [`NodeId::try_new`] is not below [`MAX_NUMNODES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeIdTooLarge(pub u64);

impl fmt::Display for NodeIdTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "node {} is not below MAX_NUMNODES ({MAX_NUMNODES})",
            self.0
        )
    }
}

impl std::error::Error for NodeIdTooLarge {}

impl NodeId {
    /// Node 0, which every machine has.
    pub const ZERO: NodeId = NodeId(0);

    /// Builds a node id.
    ///
    /// # Panics
    /// When `nid >= MAX_NUMNODES`.
    #[inline]
    pub const fn new(nid: u16) -> NodeId {
        assert!(nid < MAX_NUMNODES, "node id not below MAX_NUMNODES");
        NodeId(nid)
    }

    /// Builds a node id, or says why it cannot.
    #[inline]
    pub const fn try_new(nid: u64) -> Result<NodeId, NodeIdTooLarge> {
        if nid < MAX_NUMNODES as u64 {
            Ok(NodeId(nid as u16))
        } else {
            Err(NodeIdTooLarge(nid))
        }
    }

    /// The id as a number.
    #[inline(always)]
    pub const fn get(self) -> u16 {
        self.0
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeId({})", self.0)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A buddy order: a block of `1 << order` pages, `0 ..= MAX_PAGE_ORDER`.
///
/// Invariant: the value is at most [`MAX_PAGE_ORDER`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(transparent)]
pub struct Order(u8);

/// The order given to [`Order::try_new`] is above [`MAX_PAGE_ORDER`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderTooLarge(pub u64);

impl fmt::Display for OrderTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "order {} is above MAX_PAGE_ORDER ({MAX_PAGE_ORDER})",
            self.0
        )
    }
}

impl std::error::Error for OrderTooLarge {}

impl Order {
    /// Order 0: a single page.
    pub const ZERO: Order = Order(0);
    /// The largest order, [`MAX_PAGE_ORDER`].
    pub const MAX: Order = Order(MAX_PAGE_ORDER);

    /// Builds an order.
    ///
    /// # Panics
    /// When `order > MAX_PAGE_ORDER`.
    #[inline]
    pub const fn new(order: u8) -> Order {
        assert!(order <= MAX_PAGE_ORDER, "order above MAX_PAGE_ORDER");
        Order(order)
    }

    /// Builds an order, or says why it cannot.
    #[inline]
    pub const fn try_new(order: u64) -> Result<Order, OrderTooLarge> {
        if order <= MAX_PAGE_ORDER as u64 {
            Ok(Order(order as u8))
        } else {
            Err(OrderTooLarge(order))
        }
    }

    /// The order as a number.
    #[inline(always)]
    pub const fn get(self) -> u8 {
        self.0
    }

    /// The order as an index into per-order arrays (`free_area[order]`).
    #[inline(always)]
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// Pages in a block of this order.
    #[inline(always)]
    pub const fn nr_pages(self) -> u64 {
        1 << self.0
    }

    /// Every order from 0 to [`MAX_PAGE_ORDER`], ascending.
    pub fn all() -> impl DoubleEndedIterator<Item = Order> {
        (0..=MAX_PAGE_ORDER).map(Order)
    }
}

impl fmt::Debug for Order {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Order({})", self.0)
    }
}

impl fmt::Display for Order {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_bounds() {
        assert_eq!(Order::try_new(10), Ok(Order::MAX));
        assert_eq!(Order::try_new(11), Err(OrderTooLarge(11)));
        assert_eq!(
            OrderTooLarge(11).to_string(),
            "order 11 is above MAX_PAGE_ORDER (10)"
        );
        assert_eq!(Order::all().count(), NR_PAGE_ORDERS);
        assert_eq!(Order::new(3).nr_pages(), 8);
    }

    #[test]
    #[should_panic(expected = "order above MAX_PAGE_ORDER")]
    fn order_new_panics() {
        let _ = Order::new(11);
    }

    #[test]
    fn debug_is_hex() {
        assert_eq!(format!("{:?}", Pfn::new(255)), "Pfn(0xff)");
        assert_eq!(format!("{}", PhysAddr::new(4096)), "0x1000");
    }
}
