//! Newtypes for the units of physical memory: page frame numbers, physical
//! addresses, section numbers and buddy orders.
//!
//! A bare `u64` never crosses an API boundary when it means one of these.
//! Conversions that depend on the page or section size live on
//! [`Geometry`](crate::Geometry), because those sizes are runtime values here.

use std::fmt;

/// The generic `MAX_PAGE_ORDER` (inclusive): blocks of `1 << 10` pages, the
/// default of `ARCH_FORCE_MAX_ORDER` on x86_64 and arm64 with 4 KiB pages
/// (include/linux/mmzone.h). Each [`Geometry`](crate::Geometry) carries its
/// own; this is the default for custom ones.
pub const DEFAULT_MAX_PAGE_ORDER: u8 = 10;

/// The largest `MAX_PAGE_ORDER` a geometry may have (inclusive): ia64 with
/// huge pages used 16 (`ARCH_FORCE_MAX_ORDER` "16" if HUGETLB_PAGE, a 1 GiB
/// block of 16 KiB pages: one section).
pub const MAX_PAGE_ORDER_LIMIT: u8 = 16;

/// Length of per-order arrays (`free_area[]`, `nr_free[]`): the kernel's
/// `NR_PAGE_ORDERS` for the largest geometry. A geometry uses the first
/// `max_page_order + 1` entries.
pub const NR_PAGE_ORDERS: usize = MAX_PAGE_ORDER_LIMIT as usize + 1;

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

/// A buddy order: a block of `1 << order` pages, `0 ..= MAX_PAGE_ORDER_LIMIT`.
///
/// Invariant: the value is at most [`MAX_PAGE_ORDER_LIMIT`]. Whether an
/// order exists on a geometry is the geometry's question
/// ([`Geometry::max_order`](crate::Geometry::max_order)).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(transparent)]
pub struct Order(pub(crate) u8);

/// An order above a geometry's `MAX_PAGE_ORDER` (or above
/// [`MAX_PAGE_ORDER_LIMIT`] for [`Order::try_new`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderTooLarge {
    /// The order asked for.
    pub order: u64,
    /// The largest order there is.
    pub max: u8,
}

impl fmt::Display for OrderTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "order {} is above MAX_PAGE_ORDER ({})",
            self.order, self.max
        )
    }
}

impl std::error::Error for OrderTooLarge {}

impl Order {
    /// Order 0: a single page.
    pub const ZERO: Order = Order(0);
    /// The largest order any geometry has, [`MAX_PAGE_ORDER_LIMIT`].
    pub const LIMIT: Order = Order(MAX_PAGE_ORDER_LIMIT);

    /// Builds an order.
    ///
    /// # Panics
    /// When `order > MAX_PAGE_ORDER_LIMIT`.
    #[inline]
    pub const fn new(order: u8) -> Order {
        assert!(
            order <= MAX_PAGE_ORDER_LIMIT,
            "order above MAX_PAGE_ORDER_LIMIT"
        );
        Order(order)
    }

    /// An order from a raw value, clamped to [`MAX_PAGE_ORDER_LIMIT`]: for
    /// a value that was an order when it was stored (no check to fail).
    #[inline(always)]
    pub const fn saturating(order: u8) -> Order {
        Order(if order > MAX_PAGE_ORDER_LIMIT {
            MAX_PAGE_ORDER_LIMIT
        } else {
            order
        })
    }

    /// Builds an order, or says why it cannot.
    #[inline]
    pub const fn try_new(order: u64) -> Result<Order, OrderTooLarge> {
        if order <= MAX_PAGE_ORDER_LIMIT as u64 {
            Ok(Order(order as u8))
        } else {
            Err(OrderTooLarge {
                order,
                max: MAX_PAGE_ORDER_LIMIT,
            })
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

    /// Every order from 0 to `max`, ascending.
    pub fn up_to(max: Order) -> impl DoubleEndedIterator<Item = Order> {
        (0..=max.0).map(Order)
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
        assert_eq!(Order::try_new(16), Ok(Order::LIMIT));
        let e = Order::try_new(17).unwrap_err();
        assert_eq!(e, OrderTooLarge { order: 17, max: 16 });
        assert_eq!(e.to_string(), "order 17 is above MAX_PAGE_ORDER (16)");
        assert_eq!(Order::up_to(Order::LIMIT).count(), NR_PAGE_ORDERS);
        assert_eq!(Order::up_to(Order::new(10)).count(), 11);
        assert_eq!(Order::new(3).nr_pages(), 8);
        assert_eq!(Order::saturating(3), Order::new(3));
        assert_eq!(Order::saturating(16), Order::LIMIT);
        assert_eq!(Order::saturating(200), Order::LIMIT);
    }

    #[test]
    #[should_panic(expected = "order above MAX_PAGE_ORDER_LIMIT")]
    fn order_new_panics() {
        let _ = Order::new(17);
    }

    #[test]
    fn debug_is_hex() {
        assert_eq!(format!("{:?}", Pfn::new(255)), "Pfn(0xff)");
        assert_eq!(format!("{}", PhysAddr::new(4096)), "0x1000");
    }
}
