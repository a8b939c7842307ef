//! Allocator errors. Every misuse is refused before anything changes.

use std::fmt;

use sparsemem::{BuildError, HotplugError, NodeId, Order, OrderTooLarge, Pfn};

/// Why an allocator call was refused.
#[derive(Debug)]
pub enum AllocError {
    /// No zone allowed by the request has a free block of this order.
    NoMemory {
        /// The order asked for.
        order: Order,
    },
    /// The pfn is in no zone (a hole, reserved memory, or beyond memory).
    OutsideZone {
        /// The pfn.
        pfn: Pfn,
    },
    /// The block is already free (on a free list or a per-CPU list).
    DoubleFree {
        /// The pfn.
        pfn: Pfn,
    },
    /// The pfn does not head an allocated block.
    NotAllocated {
        /// The pfn.
        pfn: Pfn,
    },
    /// The block was allocated with another order.
    WrongOrder {
        /// The pfn.
        pfn: Pfn,
        /// The order given to free.
        freed: Order,
        /// The order it was allocated with.
        allocated: u64,
    },
    /// A bulk request above [`crate::MAX_BULK`].
    BulkTooLarge {
        /// Pages asked for.
        requested: usize,
    },
    /// A [`crate::PageChain`] of another allocator handed to a per-CPU
    /// handle's bulk list calls.
    ForeignChain,
    /// An order above `MAX_PAGE_ORDER`.
    Order(OrderTooLarge),
    /// `bad_page`: a page of the block being freed is still mapped, has a
    /// mapping, is locked, or (a compound page's tail) lost its link to the
    /// head. The free is refused and the block stays allocated.
    BadPage {
        /// The offending page.
        pfn: Pfn,
        /// The kernel's `page_bad_reason` text.
        reason: &'static str,
    },
    /// Real frames cannot be had for this layout (too much address space,
    /// a mapping the host refused, or a hot-add outside the frames).
    Frames(String),
    /// An invalid GFP mask (two zone modifiers, or movable and
    /// reclaimable at once).
    Gfp(crate::GfpError),
    /// The variant's mechanisms did not exist in the chosen era
    /// ([`crate::Era::check_variant`]).
    EraMismatch(String),
    /// The memory model refused a hotplug step.
    Hotplug(HotplugError),
    /// Offline refused: pages of the range are in use.
    InUse {
        /// Pages of the range not free.
        nr_pages: u64,
    },
    /// Without the hole check, every `MAX_PAGE_ORDER` block holding managed
    /// memory must be wholly valid (as the kernel requires without
    /// `HOLES_IN_ZONE`).
    HolesInBlock {
        /// An invalid pfn inside such a block.
        pfn: Pfn,
    },
    /// Online or hot remove of memory that is not offline memory (not
    /// hot-added, already online, or a reserved hole).
    NotOffline {
        /// First pfn of the offending subsection.
        pfn: Pfn,
    },
    /// More zones than a page's 8-bit zone id can name.
    TooManyZones,
    /// A `percpu_pagelist_high_fraction` the kernel refuses (below 8, not
    /// 0).
    HighFraction {
        /// The value asked for.
        fraction: u32,
    },
    /// The memory model was not built from the layout given with it.
    ModelMismatch {
        /// A pfn the two disagree on, when the geometry matches.
        pfn: Option<Pfn>,
        /// What differs.
        why: String,
    },
    /// Memory given to a zone is already managed (not reserved).
    AlreadyManaged {
        /// The pfn.
        pfn: Pfn,
    },
    /// The memory model could not be built.
    Build(BuildError),
    /// No zone of the allocator has memory on this node.
    UnknownNode {
        /// The node asked for.
        node: NodeId,
    },
    /// The allocator has no zone with this id.
    UnknownZone(crate::ZoneId),
    /// The pfn is device memory (ZONE_DEVICE): it never enters the buddy,
    /// so it cannot be freed, onlined or offlined.
    DeviceMemory {
        /// The pfn.
        pfn: Pfn,
    },
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocError::NoMemory { order } => write!(
                f,
                "no memory: no free block of order {order} in any allowed zone"
            ),
            AllocError::OutsideZone { pfn } => write!(f, "pfn {pfn} is outside every zone"),
            AllocError::DoubleFree { pfn } => write!(f, "double free of pfn {pfn}"),
            AllocError::NotAllocated { pfn } => {
                write!(f, "pfn {pfn} does not head an allocated block")
            }
            AllocError::WrongOrder {
                pfn,
                freed,
                allocated,
            } => {
                write!(
                    f,
                    "pfn {pfn} freed with order {freed} but allocated with order {allocated}"
                )
            }
            AllocError::BulkTooLarge { requested } => {
                write!(
                    f,
                    "bulk request of {requested} pages exceeds MAX_BULK ({})",
                    crate::MAX_BULK
                )
            }
            AllocError::ForeignChain => f.write_str(
                "the page chain belongs to another allocator than this per-CPU handle's",
            ),
            AllocError::Order(e) => write!(f, "{e}"),
            AllocError::EraMismatch(why) => f.write_str(why),
            AllocError::Gfp(e) => write!(f, "{e}"),
            AllocError::Frames(why) => f.write_str(why),
            AllocError::BadPage { pfn, reason } => write!(
                f,
                "bad page state at pfn {pfn}: {reason} (the free is refused, the block stays allocated)"
            ),
            AllocError::DeviceMemory { pfn } => write!(
                f,
                "pfn {pfn} is device memory (ZONE_DEVICE): it never enters the buddy allocator"
            ),
            AllocError::Hotplug(e) => write!(f, "{e}"),
            AllocError::InUse { nr_pages } => write!(
                f,
                "cannot offline: {nr_pages} pages of the range are in use"
            ),
            AllocError::HolesInBlock { pfn } => write!(
                f,
                "pfn {pfn} is a hole inside a MAX_PAGE_ORDER block of managed memory; use a variant with the hole check (HOLES_IN_ZONE, era 5.13 or older)"
            ),
            AllocError::HighFraction { fraction } => write!(
                f,
                "percpu_pagelist_high_fraction {fraction} is below {}, the least the kernel accepts (0 keeps the default)",
                crate::watermark::MIN_PERCPU_PAGELIST_HIGH_FRACTION
            ),
            AllocError::TooManyZones => {
                write!(f, "more than {} zones", crate::types::MAX_ZONES)
            }
            AllocError::ModelMismatch { why, .. } => {
                write!(f, "the memory model does not match the layout: {why}")
            }
            AllocError::AlreadyManaged { pfn } => {
                write!(f, "pfn {pfn} is already managed by a zone")
            }
            AllocError::Build(e) => write!(f, "cannot build the memory model: {e}"),
            AllocError::UnknownNode { node } => {
                write!(f, "node {node} has no memory in this allocator")
            }
            AllocError::UnknownZone(zid) => {
                write!(f, "zone {} does not exist in this allocator", zid.index())
            }
            AllocError::NotOffline { pfn } => {
                write!(
                    f,
                    "pfn {pfn} is not in offline memory (hot-add or offline it first)"
                )
            }
        }
    }
}

impl std::error::Error for AllocError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AllocError::Order(e) => Some(e),
            AllocError::Gfp(e) => Some(e),
            AllocError::Hotplug(e) => Some(e),
            AllocError::Build(e) => Some(e),
            _ => None,
        }
    }
}

impl From<BuildError> for AllocError {
    fn from(e: BuildError) -> Self {
        AllocError::Build(e)
    }
}

impl From<OrderTooLarge> for AllocError {
    fn from(e: OrderTooLarge) -> Self {
        AllocError::Order(e)
    }
}

impl From<HotplugError> for AllocError {
    fn from(e: HotplugError) -> Self {
        AllocError::Hotplug(e)
    }
}
