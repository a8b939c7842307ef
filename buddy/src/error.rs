//! Allocator errors, one small enum per domain. Every misuse is refused
//! before anything changes.
//!
//! - [`RequestError`]: an allocation request that cannot be served (no
//!   memory) or is malformed (order, GFP mask, bulk size, node);
//! - [`FreeError`]: a free that would corrupt the allocator (double free,
//!   wrong order, a bad page, a pfn outside every zone);
//! - [`InitError`]: an allocator that cannot be built over a model;
//! - [`MemHotplugError`]: an add, online, offline or remove refused;
//! - [`RangeError`]: memory a zone cannot be given or give back, the part
//!   construction and hotplug share;
//! - [`FramesError`](crate::FramesError): real frames that cannot be had.
//!
//! [`AllocError`] joins them for a caller that builds, allocates, frees and
//! hotplugs in one function; its message is the inner error's, and
//! `source()` is the inner error.

use std::fmt;

use sparsemem::{
    BuildError, Geometry, HotplugError, Migratetype, NodeId, Order, OrderTooLarge, Pfn,
};

use crate::era::NotInEra;

use crate::frames::FramesError;
use crate::gfp::GfpError;
use crate::memmap_on_memory::MemmapOnMemoryError;
use crate::types::{FREECOUNT_CAP, MAX_BULK, MAX_ZONES, ZoneId};
use crate::watermark::MIN_PERCPU_PAGELIST_HIGH_FRACTION;

/// Why an allocation request was refused.
#[derive(Debug)]
pub enum RequestError {
    /// No zone allowed by the request has a free block of this order.
    NoMemory {
        /// The order asked for.
        order: Order,
    },
    /// An order above `MAX_PAGE_ORDER`.
    Order(OrderTooLarge),
    /// An invalid GFP mask (two zone modifiers, or movable and
    /// reclaimable at once).
    Gfp(GfpError),
    /// A bulk request above [`MAX_BULK`].
    BulkTooLarge {
        /// Pages asked for.
        requested: usize,
    },
    /// A [`PageChain`](crate::PageChain) of another allocator handed to a
    /// per-CPU handle's bulk list allocation.
    ForeignChain,
    /// No zone of the allocator has memory on this node.
    UnknownNode {
        /// The node asked for.
        node: NodeId,
    },
    /// The allocator has no zone with this id.
    UnknownZone(ZoneId),
    /// A call the era does not have (`alloc_pages_nolock` before 6.15).
    NotInEra(NotInEra),
    /// `alloc_pages_nolock` of an order the per-CPU lists do not hold
    /// (`!pcp_allowed_order`: above `PAGE_ALLOC_COSTLY_ORDER` and not a
    /// THP's): the kernel returns NULL before looking at any zone.
    NolockOrder {
        /// The order asked for.
        order: Order,
    },
    /// `alloc_pages_nolock` while deferred struct page init may still grow
    /// a zone (`deferred_pages_enabled`): `_deferred_grow_zone` takes the
    /// zone lock, so the kernel returns NULL before looking at any zone.
    DeferredPages,
}

/// Why a free was refused; the block stays as it was.
#[derive(Debug)]
pub enum FreeError {
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
    /// `bad_page`: a page of the block being freed is still mapped, has a
    /// mapping, is locked, or (a compound page's tail) lost its link to the
    /// head. The free is refused and the block stays allocated.
    BadPage {
        /// The offending page.
        pfn: Pfn,
        /// The kernel's `page_bad_reason` text.
        reason: &'static str,
    },
    /// The pfn is device memory (ZONE_DEVICE): it never enters the buddy,
    /// so it cannot be freed.
    DeviceMemory {
        /// The pfn.
        pfn: Pfn,
    },
    /// `split_page` of a compound page (one allocated with `__GFP_COMP`),
    /// which only the folio paths split.
    Compound {
        /// The head's pfn.
        pfn: Pfn,
    },
    /// An order above `MAX_PAGE_ORDER`.
    Order(OrderTooLarge),
    /// A [`PageChain`](crate::PageChain) of another allocator handed to a
    /// per-CPU handle's bulk list free.
    ForeignChain,
    /// A call the era does not have (`free_pages_nolock` before 6.15).
    NotInEra(NotInEra),
}

/// Why memory cannot be given to a zone (boot, online) or taken back from
/// it (offline); nothing changes.
#[derive(Debug)]
pub enum RangeError {
    /// The pfn is in no zone's span, or not managed by the zone.
    OutsideZone {
        /// The pfn.
        pfn: Pfn,
    },
    /// Memory given to a zone is already managed (not reserved).
    AlreadyManaged {
        /// The pfn.
        pfn: Pfn,
    },
    /// The pfn is device memory (ZONE_DEVICE): it never enters the buddy,
    /// so it cannot be onlined or offlined.
    DeviceMemory {
        /// The pfn.
        pfn: Pfn,
    },
    /// Without the hole check, every `MAX_PAGE_ORDER` block holding managed
    /// memory must be wholly valid (as the kernel requires without
    /// `HOLES_IN_ZONE`).
    HolesInBlock {
        /// An invalid pfn inside such a block.
        pfn: Pfn,
    },
    /// A block to take back is not a free block of the zone.
    NotFree {
        /// Its head.
        pfn: Pfn,
    },
}

/// How a memory model differs from the layout it came with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelMismatch {
    /// The model was built for another geometry.
    Geometry {
        /// The model's.
        model: Box<Geometry>,
        /// The layout's.
        layout: Box<Geometry>,
    },
    /// A pfn of the layout's memory the model does not have.
    NotValid {
        /// The pfn.
        pfn: Pfn,
        /// The model's name.
        model: &'static str,
    },
}

impl fmt::Display for ModelMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelMismatch::Geometry { model, layout } => write!(
                f,
                "the model was built for geometry {model}, the layout uses {layout}"
            ),
            ModelMismatch::NotValid { pfn, model } => write!(
                f,
                "pfn {:#x} is memory in the layout but not valid in the {model} model",
                pfn.get()
            ),
        }
    }
}

/// Why an allocator could not be built.
#[derive(Debug)]
pub enum InitError {
    /// The variant's mechanisms, or an option, did not exist in the chosen
    /// era ([`crate::Era::check_variant`]).
    EraMismatch(NotInEra),
    /// A `percpu_pagelist_high_fraction` the kernel refuses (below 8, not
    /// 0).
    HighFraction {
        /// The value asked for.
        fraction: u32,
    },
    /// The memory model was not built from the layout given with it.
    ModelMismatch(ModelMismatch),
    /// More zones than a page's 8-bit zone id can name.
    TooManyZones,
    /// Boot memory a zone could not be given.
    Range(RangeError),
    /// Real frames cannot be had for this layout.
    Frames(FramesError),
    /// The memory model could not be built (for a caller that builds the
    /// model and the allocator in one step).
    Build(BuildError),
    /// A layout's `memmap_on_memory` hotplug range refused (the gate's
    /// rule, or a model without a vmemmap).
    Hotplug(MemHotplugError),
}

/// Why a memory hotplug step (add, online, offline, remove, device memory)
/// was refused; nothing changes.
#[derive(Debug)]
pub enum MemHotplugError {
    /// The memory model refused the step.
    Model(HotplugError),
    /// Offline or remove refused: pages of the range are in use.
    InUse {
        /// Pages of the range not free.
        nr_pages: u64,
    },
    /// Online or hot remove of memory that is not offline memory (not
    /// hot-added, already online, a reserved hole, or blocks of two nodes).
    NotOffline {
        /// First pfn of the offending block.
        pfn: Pfn,
    },
    /// Onlining would need a zone beyond the 8-bit zone ids.
    TooManyZones,
    /// Memory a zone could not be given or give back.
    Range(RangeError),
    /// A hot-add outside the real frames.
    Frames(FramesError),
    /// A memmap_on_memory request the gate refused, with its rule.
    MemmapOnMemory(MemmapOnMemoryError),
    /// A memory notifier answered `NOTIFY_BAD` to `MEM_GOING_ONLINE` or
    /// `MEM_GOING_OFFLINE`: the step was cancelled and undone.
    NotifierRefused {
        /// The event refused.
        action: crate::memory_notify::MemoryAction,
        /// First pfn of the range.
        start: Pfn,
        /// Pages in the range.
        nr_pages: u64,
    },
    /// A hotplug step while deferred struct page init is pending: the
    /// kernel runs `page_alloc_init_late` before the initcalls that can
    /// hot-add memory, so it never meets one.
    DeferredInitPending,
}

/// Why a start state could not be set; the allocator is unchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartStateError {
    /// An era without migratetypes (before 2.6.24).
    NoMigratetypes,
    /// Pages are allocated or on per-CPU lists: only a fresh allocator.
    NotFresh,
    /// Another `pageblock_order`.
    PageblockOrder {
        /// The target's.
        target: u32,
        /// The model's.
        model: u32,
    },
    /// A zone one side has and the other does not.
    Zones {
        /// Its node.
        node: u32,
        /// Its name.
        zone: String,
        /// Which side lacks it.
        missing_in: &'static str,
    },
    /// A zone with another number of pageblocks, or of orders.
    Shape {
        /// Its node.
        node: u32,
        /// Its name.
        zone: String,
        /// What differs.
        what: String,
    },
    /// A count the kernel capped (`>100000`) that cannot be worked out.
    Capped {
        /// Its node.
        node: u32,
        /// Its name.
        zone: String,
        /// The order.
        order: usize,
        /// Why it cannot be.
        why: &'static str,
    },
    /// Blocks of an order that found no place.
    CannotFit {
        /// Its node.
        node: u32,
        /// Its name.
        zone: String,
        /// The migratetype.
        mt: Migratetype,
        /// The order.
        order: Order,
        /// How many found a place of how many.
        placed: u64,
        /// Of how many.
        wanted: u64,
    },
    /// More pages free on a migratetype's lists than its pageblocks hold,
    /// in a zone whose pageblocks hold all the free pages: some of them
    /// lie in pageblocks of another migratetype. A kernel before 6.10
    /// leaves such blocks (`steal_suitable_fallback` put the rest of a
    /// block split for a request of another migratetype on the request's
    /// list, until commit c0cd6f557b90); the model keeps every free block
    /// on its pageblock's list, so it cannot start from them.
    ForeignFreeBlocks {
        /// Its node.
        node: u32,
        /// Its name.
        zone: String,
        /// The migratetype.
        mt: Migratetype,
        /// Pages free on its lists.
        free_pages: u64,
        /// Its pageblocks.
        pageblocks: u64,
        /// The pages they hold.
        room: u64,
    },
}

impl fmt::Display for StartStateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartStateError::NoMigratetypes => {
                f.write_str("this era has no migratetypes (2.6.24 on): no start state")
            }
            StartStateError::NotFresh => {
                f.write_str("a start state needs a fresh allocator (nothing allocated)")
            }
            StartStateError::PageblockOrder { target, model } => {
                write!(f, "pageblock order {target}, but the model's is {model}")
            }
            StartStateError::Zones {
                node,
                zone,
                missing_in,
            } => write!(f, "node {node} zone {zone} is missing in the {missing_in}"),
            StartStateError::Shape { node, zone, what } => {
                write!(f, "node {node} zone {zone}: {what}")
            }
            StartStateError::Capped {
                node,
                zone,
                order,
                why,
            } => write!(
                f,
                "node {node} zone {zone} order {order}: a free count the kernel capped (>{FREECOUNT_CAP}) and {why}"
            ),
            StartStateError::CannotFit {
                node,
                zone,
                mt,
                order,
                placed,
                wanted,
            } => write!(
                f,
                "node {node} zone {zone}: only {placed} of {wanted} free {mt} blocks of order {order} fit the layout"
            ),
            StartStateError::ForeignFreeBlocks {
                node,
                zone,
                mt,
                free_pages,
                pageblocks,
                room,
            } => write!(
                f,
                "node {node} zone {zone}: {free_pages} pages free on the {mt} lists, more than its \
                 {pageblocks} {mt} pageblocks hold ({room}): some lie in pageblocks of another \
                 migratetype, as a kernel before 6.10 leaves them (the rest of a block split for \
                 a request of another migratetype stays on the request's list), and the model \
                 keeps every free block on its own pageblock's list"
            ),
        }
    }
}

impl std::error::Error for StartStateError {}

/// Any of the allocator's errors, for a caller that needs one type; its
/// message and `source()` are the inner error's.
#[derive(Debug)]
pub enum AllocError {
    /// An allocation request refused.
    Request(RequestError),
    /// A free refused.
    Free(FreeError),
    /// An allocator not built.
    Init(InitError),
    /// A hotplug step refused.
    Hotplug(MemHotplugError),
    /// A start state refused (the allocator unchanged).
    StartState(StartStateError),
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::NoMemory { order } => write!(
                f,
                "no memory: no free block of order {order} in any allowed zone"
            ),
            RequestError::Order(e) => write!(f, "{e}"),
            RequestError::Gfp(e) => write!(f, "{e}"),
            RequestError::BulkTooLarge { requested } => write!(
                f,
                "bulk request of {requested} pages exceeds MAX_BULK ({MAX_BULK})"
            ),
            RequestError::ForeignChain => f.write_str(FOREIGN_CHAIN),
            RequestError::UnknownNode { node } => {
                write!(f, "node {node} has no memory in this allocator")
            }
            RequestError::UnknownZone(zid) => {
                write!(f, "zone {} does not exist in this allocator", zid.index())
            }
            RequestError::NotInEra(e) => write!(f, "{e}"),
            RequestError::NolockOrder { order } => write!(
                f,
                "alloc_pages_nolock serves only orders the per-CPU lists hold \
                 (up to PAGE_ALLOC_COSTLY_ORDER, and a THP's); order {order} is not one"
            ),
            RequestError::DeferredPages => f.write_str(
                "alloc_pages_nolock serves nothing while deferred struct page init \
                 may still grow a zone (growing takes the zone lock)",
            ),
        }
    }
}

/// The message of both `ForeignChain`s.
const FOREIGN_CHAIN: &str =
    "the page chain belongs to another allocator than this per-CPU handle's";

impl fmt::Display for FreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FreeError::OutsideZone { pfn } => write!(f, "pfn {pfn} is outside every zone"),
            FreeError::DoubleFree { pfn } => write!(f, "double free of pfn {pfn}"),
            FreeError::NotAllocated { pfn } => {
                write!(f, "pfn {pfn} does not head an allocated block")
            }
            FreeError::WrongOrder {
                pfn,
                freed,
                allocated,
            } => write!(
                f,
                "pfn {pfn} freed with order {freed} but allocated with order {allocated}"
            ),
            FreeError::BadPage { pfn, reason } => write!(
                f,
                "bad page state at pfn {pfn}: {reason} (the free is refused, the block stays allocated)"
            ),
            FreeError::DeviceMemory { pfn } => device_memory(f, *pfn),
            FreeError::Compound { pfn } => write!(
                f,
                "pfn {pfn} heads a compound page, which split_page does not split"
            ),
            FreeError::Order(e) => write!(f, "{e}"),
            FreeError::ForeignChain => f.write_str(FOREIGN_CHAIN),
            FreeError::NotInEra(e) => write!(f, "{e}"),
        }
    }
}

/// The message of both `DeviceMemory`s.
fn device_memory(f: &mut fmt::Formatter<'_>, pfn: Pfn) -> fmt::Result {
    write!(
        f,
        "pfn {pfn} is device memory (ZONE_DEVICE): it never enters the buddy allocator"
    )
}

impl fmt::Display for RangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RangeError::OutsideZone { pfn } => write!(f, "pfn {pfn} is outside every zone"),
            RangeError::AlreadyManaged { pfn } => {
                write!(f, "pfn {pfn} is already managed by a zone")
            }
            RangeError::DeviceMemory { pfn } => device_memory(f, *pfn),
            RangeError::HolesInBlock { pfn } => write!(
                f,
                "pfn {pfn} is a hole inside a MAX_PAGE_ORDER block of managed memory; use a variant with the hole check (HOLES_IN_ZONE, era 5.13 or older)"
            ),
            RangeError::NotFree { pfn } => write!(f, "pfn {pfn} does not head a free block"),
        }
    }
}

impl fmt::Display for InitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InitError::EraMismatch(e) => e.fmt(f),
            InitError::HighFraction { fraction } => write!(
                f,
                "percpu_pagelist_high_fraction {fraction} is below {MIN_PERCPU_PAGELIST_HIGH_FRACTION}, the least the kernel accepts (0 keeps the default)"
            ),
            InitError::ModelMismatch(e) => {
                write!(f, "the memory model does not match the layout: {e}")
            }
            InitError::TooManyZones => write!(f, "more than {MAX_ZONES} zones"),
            InitError::Range(e) => write!(f, "{e}"),
            InitError::Frames(e) => write!(f, "{e}"),
            InitError::Build(e) => write!(f, "cannot build the memory model: {e}"),
            InitError::Hotplug(e) => write!(f, "a memmap_on_memory hotplug range: {e}"),
        }
    }
}

impl fmt::Display for MemHotplugError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemHotplugError::Model(e) => write!(f, "{e}"),
            MemHotplugError::InUse { nr_pages } => write!(
                f,
                "cannot offline: {nr_pages} pages of the range are in use"
            ),
            MemHotplugError::NotOffline { pfn } => write!(
                f,
                "pfn {pfn} is not in offline memory (hot-add or offline it first)"
            ),
            MemHotplugError::TooManyZones => write!(f, "more than {MAX_ZONES} zones"),
            MemHotplugError::Range(e) => write!(f, "{e}"),
            MemHotplugError::Frames(e) => write!(f, "{e}"),
            MemHotplugError::MemmapOnMemory(e) => write!(f, "{e}"),
            MemHotplugError::NotifierRefused {
                action,
                start,
                nr_pages,
            } => write!(
                f,
                "a memory notifier refused {} for pfns {start}+{nr_pages}: cancelled, nothing changed",
                match action {
                    crate::memory_notify::MemoryAction::GoingOffline => "MEM_GOING_OFFLINE",
                    _ => "MEM_GOING_ONLINE",
                }
            ),
            MemHotplugError::DeferredInitPending => f.write_str(
                "memory hotplug waits for deferred struct page init: the kernel runs \
                 page_alloc_init_late before the initcalls that hot-add memory",
            ),
        }
    }
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocError::Request(e) => write!(f, "{e}"),
            AllocError::Free(e) => write!(f, "{e}"),
            AllocError::Init(e) => write!(f, "{e}"),
            AllocError::Hotplug(e) => write!(f, "{e}"),
            AllocError::StartState(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for RequestError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RequestError::Order(e) => Some(e),
            RequestError::Gfp(e) => Some(e),
            RequestError::NotInEra(e) => Some(e),
            _ => None,
        }
    }
}

impl std::error::Error for FreeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FreeError::Order(e) => Some(e),
            FreeError::NotInEra(e) => Some(e),
            _ => None,
        }
    }
}

impl std::error::Error for RangeError {}

impl std::error::Error for InitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            InitError::EraMismatch(e) => Some(e),
            InitError::Range(e) => Some(e),
            InitError::Frames(e) => Some(e),
            InitError::Build(e) => Some(e),
            InitError::Hotplug(e) => Some(e),
            _ => None,
        }
    }
}

impl std::error::Error for MemHotplugError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MemHotplugError::Model(e) => Some(e),
            MemHotplugError::Range(e) => Some(e),
            MemHotplugError::Frames(e) => Some(e),
            MemHotplugError::MemmapOnMemory(e) => Some(e),
            _ => None,
        }
    }
}

impl std::error::Error for AllocError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(match self {
            AllocError::Request(e) => e,
            AllocError::Free(e) => e,
            AllocError::Init(e) => e,
            AllocError::Hotplug(e) => e,
            AllocError::StartState(e) => e,
        })
    }
}

/// `From` for an outer error that wraps an inner one in a variant.
macro_rules! wrap {
    ($($inner:ty => $outer:ident::$variant:ident),* $(,)?) => {$(
        impl From<$inner> for $outer {
            fn from(e: $inner) -> Self {
                $outer::$variant(e)
            }
        }
    )*};
}

wrap! {
    OrderTooLarge => RequestError::Order,
    GfpError => RequestError::Gfp,
    OrderTooLarge => FreeError::Order,
    RangeError => InitError::Range,
    FramesError => InitError::Frames,
    BuildError => InitError::Build,
    MemHotplugError => InitError::Hotplug,
    HotplugError => MemHotplugError::Model,
    RangeError => MemHotplugError::Range,
    FramesError => MemHotplugError::Frames,
    MemmapOnMemoryError => MemHotplugError::MemmapOnMemory,
    RequestError => AllocError::Request,
    FreeError => AllocError::Free,
    InitError => AllocError::Init,
    MemHotplugError => AllocError::Hotplug,
    StartStateError => AllocError::StartState,
}

/// Errors of the lower layers a joined caller meets directly: building
/// the model, an order, a hotplug step of the model.
impl From<BuildError> for AllocError {
    fn from(e: BuildError) -> Self {
        AllocError::Init(InitError::Build(e))
    }
}

impl From<OrderTooLarge> for AllocError {
    fn from(e: OrderTooLarge) -> Self {
        AllocError::Request(RequestError::Order(e))
    }
}

impl From<HotplugError> for AllocError {
    fn from(e: HotplugError) -> Self {
        AllocError::Hotplug(MemHotplugError::Model(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    /// The joined error says what the inner one says and names it as its
    /// source; an inner error wrapping a lower layer's names that one.
    #[test]
    fn joined_errors_keep_the_message_and_name_the_source() {
        let inner = FreeError::DoubleFree { pfn: Pfn::new(7) };
        let text = inner.to_string();
        let joined = AllocError::from(inner);
        assert_eq!(joined.to_string(), text);
        assert_eq!(joined.source().map(ToString::to_string), Some(text));

        let order = OrderTooLarge { order: 12, max: 10 };
        let joined = AllocError::from(order);
        assert!(matches!(
            joined,
            AllocError::Request(RequestError::Order(_))
        ));
        let inner = joined
            .source()
            .and_then(Error::source)
            .map(ToString::to_string);
        assert_eq!(inner, Some("order 12 is above MAX_PAGE_ORDER (10)".into()));

        let range = RangeError::HolesInBlock { pfn: Pfn::new(3) };
        let text = range.to_string();
        let hotplug = MemHotplugError::from(range);
        assert_eq!(hotplug.to_string(), text);
        assert_eq!(hotplug.source().map(ToString::to_string), Some(text));
        assert!(MemHotplugError::InUse { nr_pages: 1 }.source().is_none());
    }
}
