//! `struct page` at 64, 32, 16 and 8 bytes: the descriptor every memory
//! model hands out, as a type parameter.
//!
//! The kernel keeps one `struct page` per page frame, and its size (64 bytes
//! on 64-bit architectures) is what makes the memmap 1.5625 % of RAM and
//! what makes one `pfn_to_page` touch exactly one cache line. The kernel is
//! shrinking it (the memdesc plan, see `docs/memdesc.md`): pfnlab has one
//! layout per step, each a type implementing the sealed [`PageLayout`] and
//! monomorphised like the memory model, so a size costs nothing at run time:
//! - [`Page64`] (`p64`): today's layout, every hot field in the page;
//! - [`Page32`] (`p32`): Matthew Wilcox's January 2025 sketch — `flags`, a
//!   union of `buddy_list` / `pcp_list` / `{memdesc, _refcount}`, a union of
//!   `private` / `_folio_mapcount`;
//! - [`Page16`] (`p16`): `flags` and the memdesc word;
//! - [`Page8`] (`p8`): the memdesc word alone, a 4-bit type in its low bits
//!   and, above it, a pointer to a 16-byte-aligned descriptor (or, for the
//!   types that have no descriptor, the page's section, zone and node).
//!
//! [`Page`] names the 64-byte layout, the default of every model.
//!
//! Every field is an atomic so that a `&Page` can be shared between threads
//! (per-CPU lists on several threads use the same memmap). Plain accesses use
//! `Relaxed` loads and stores, which compile to ordinary `mov`s on x86_64;
//! ordering between threads comes from the zone lock, exactly as in the
//! kernel, where page fields are written under `zone->lock`. Flag updates come
//! in two forms, like `SetPageX` / `__SetPageX`: an atomic read-modify-write
//! (`lock or` / `lock and`) and a non-atomic load + store that is only correct
//! when the caller already excludes other writers.
//!
//! # The probe's byte
//! At every size the first byte of a descriptor says whether it is real:
//! [`PageFlag::Present`] is bit 0 of the flags word at 64, 32 and 16 bytes;
//! at 8 bytes the memdesc type is the low nibble of byte 0 and type 0 is
//! "no descriptor". [`PageLayout::PRESENT_BYTE_MASK`] is the mask the vmemmap
//! fault probe tests, so a single byte load still answers `pfn_valid`.
//!
//! # Who may write what
//! Reading any field is safe. Writing is split by owner, as Asterinas keeps a
//! frame's list state private to its allocator:
//! - the memory model initialises and retires descriptors
//!   ([`PageLayout::init_reserved`], [`PageLayout::clear_to_hole`]);
//! - the page allocator owns the list links, `private`, the reference count,
//!   the zone/node ids and the flags it decides by ([`PageFlag::Reserved`],
//!   [`PageFlag::Buddy`], [`PageFlag::Pcp`]): the free lists dereference the
//!   links and trust those flags, so a stray write could make them follow a
//!   junk pointer;
//! - anyone holding a page may change the [`UserFlag`]s atomically, and
//!   its `mapping` and map count ([`Page64::set_mapping`],
//!   [`Page64::inc_mapcount`]): the allocator only reads them, to refuse
//!   freeing a page that is still mapped (`free_pages_prepare`).
//!
//! The owners' writes are `unsafe fn`s whose contract is [the one on
//! `PageLayout`](PageLayout#safety); safe code outside the owners can only
//! read, or set a user flag:
//!
//! ```compile_fail
//! # use sparsemem::{Layout, MemoryModel, Pfn, SparseExtreme};
//! let layout = Layout::preset("x86-pci-hole").unwrap();
//! let model = SparseExtreme::new(&layout).unwrap();
//! let page = model.pfn_to_page(Pfn::new(0x1000)).unwrap();
//! page.set_lru_next(std::ptr::null_mut()); // error: unsafe, the allocator's field
//! ```

mod buddy_page;
mod kmem_cache;
mod p16;
mod p32;
mod p64;
mod p8;
#[cfg(test)]
mod tests;

pub use buddy_page::{BuddyPage, ListState};
pub use kmem_cache::{SLAB_BYTES, SlabInfo};
pub(crate) use p8::SECTIONS_WIDTH as P8_SECTIONS_WIDTH;
pub use p8::{MemdescType, Page8};
pub use p16::Page16;
pub use p32::Page32;
pub use p64::Page64;

/// The default `struct page`: the 64-byte layout every model uses unless
/// told otherwise.
pub type Page = Page64;

/// A page flag: a bit number in [`Page`]'s flags word (kernel `PG_*`).
///
/// `Present`, `Reserved`, `Buddy` and `Pcp` belong to the memory model and
/// the allocator; the others are [`UserFlag`]s.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum PageFlag {
    /// pfnlab: the descriptor was initialised by the memory model (a memmap
    /// entry exists). Bit 0, inside the first byte of the page.
    Present = 0,
    /// `PG_reserved`: never handed to the allocator (holes, firmware).
    Reserved = 1,
    /// `PG_buddy`: the page heads a free block; `private` holds its order.
    Buddy = 2,
    /// `PG_locked`.
    Locked = 3,
    /// `PG_referenced`: what the flags experiment touches.
    Referenced = 4,
    /// `PG_dirty`.
    Dirty = 5,
    /// `PG_private` stand-in for pages parked on a per-CPU list.
    Pcp = 6,
    /// `PG_head`: the page heads a compound page (`__GFP_COMP`); its tails
    /// point back to it through `compound_head`.
    Head = 7,
}

impl PageFlag {
    #[inline(always)]
    const fn mask(self) -> u64 {
        1 << self as u8
    }
}

/// A flag no allocator or memory model decides by, so any holder of a page
/// may change it with an atomic operation.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum UserFlag {
    /// `PG_locked`.
    Locked,
    /// `PG_referenced` (`mark_page_accessed`).
    Referenced,
    /// `PG_dirty`.
    Dirty,
}

impl From<UserFlag> for PageFlag {
    fn from(flag: UserFlag) -> PageFlag {
        match flag {
            UserFlag::Locked => PageFlag::Locked,
            UserFlag::Referenced => PageFlag::Referenced,
            UserFlag::Dirty => PageFlag::Dirty,
        }
    }
}

/// Size of the default (64-byte) `struct page` in bytes.
pub const PAGE_STRUCT_SIZE: u64 = Page64::SIZE;

/// The zone id device memory carries (`ZONE_DEVICE`): no allocator zone
/// has it (the buddy numbers its zones from 0 to 254).
pub const ZONE_DEVICE_ID: u8 = u8::MAX;

/// `TAIL_MAPPING`: the poison a compound page's tails keep in `mapping`
/// while allocated (`prep_compound_tail`); checked and cleared on free.
pub const TAIL_MAPPING: u64 = 0x400;

mod sealed {
    /// Only this module's layouts are [`PageLayout`](super::PageLayout)s:
    /// the memory models and the fault probe rely on their contract.
    pub trait Sealed {}
}

/// A `struct page` layout: what a memory model needs of its descriptors.
///
/// # Safety
/// The implementer (one of this module's four layouts) promises:
/// 1. every field is an atomic integer or pointer, so an all-zero value
///    (what a fresh anonymous mapping holds) is a valid descriptor, and it
///    is a hole ([`PageLayout::is_present`] false); shared references may
///    alias across threads;
/// 2. byte 0 of a descriptor, masked with [`PageLayout::PRESENT_BYTE_MASK`],
///    is non-zero exactly when [`PageLayout::is_present`] is true;
/// 3. the size is a power of two, at least 8, and the alignment equals it.
///
/// Every `unsafe fn` that writes a descriptor, at every size, has this
/// contract for its caller: the caller is the field's owner (see the
/// module documentation) and excludes every other writer of it — the
/// memory model while no allocator uses the descriptor, the allocator
/// under the zone lock or while the page is on a list it alone holds — and
/// the write keeps the owner's invariants (a page is linked on at most one
/// list, through links that point at live descriptors of the same memmap).
pub unsafe trait PageLayout:
    sealed::Sealed + Default + Send + Sync + Sized + 'static
{
    /// Bytes per descriptor.
    const SIZE: u64 = std::mem::size_of::<Self>() as u64;
    /// The size as the CLI spells it (`64`, `32`, `16`, `8`).
    const NAME: &'static str;
    /// The bits of byte 0 that are non-zero exactly for a real descriptor:
    /// what the fault probe tests after its one-byte load.
    const PRESENT_BYTE_MASK: u8;
    /// Whether the page has a flags word, and so holds its own section,
    /// zone and node bits (`page->flags`); at 8 bytes those live in the
    /// memdesc word or its descriptor.
    const FLAGS_WORD: bool;

    /// `__init_single_page` as a memory model does at memmap setup:
    /// present, reserved, in `section`, on no list.
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns this field.
    unsafe fn init_reserved(&self, section: u64);

    /// `memmap_init_zone_device`: present, reserved, in the
    /// [`ZONE_DEVICE_ID`] zone of `node`.
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns this field.
    unsafe fn init_device(&self, section: u64, node: u16);

    /// Turns the descriptor back into a hole (all zero).
    ///
    /// # Safety
    /// The [layout contract](PageLayout#safety): the caller owns this field.
    unsafe fn clear_to_hole(&self);

    /// Whether a memory model initialised this descriptor.
    fn is_present(&self) -> bool;

    /// `page_to_section`: the section number stored at init.
    fn section(&self) -> u64;

    /// `page_zonenum`.
    fn zone_id(&self) -> u8;

    /// `page_to_nid`.
    fn node_id(&self) -> u16;

    /// `is_zone_device_page`: the descriptor is device memory.
    #[inline(always)]
    fn is_zone_device(&self) -> bool {
        self.is_present() && self.zone_id() == ZONE_DEVICE_ID
    }
}

/// The four sizes, as the CLI and reports name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum PageSize {
    /// [`Page64`].
    B64,
    /// [`Page32`].
    B32,
    /// [`Page16`].
    B16,
    /// [`Page8`].
    B8,
}

impl PageSize {
    /// Every size, largest first.
    pub const ALL: [PageSize; 4] = [PageSize::B64, PageSize::B32, PageSize::B16, PageSize::B8];

    /// Bytes per descriptor.
    pub const fn bytes(self) -> u64 {
        match self {
            PageSize::B64 => Page64::SIZE,
            PageSize::B32 => Page32::SIZE,
            PageSize::B16 => Page16::SIZE,
            PageSize::B8 => Page8::SIZE,
        }
    }
}

impl std::fmt::Display for PageSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.bytes())
    }
}

/// A `struct page` size that is not one of the four layouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageSizeError(pub u64);

impl std::fmt::Display for PageSizeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "struct page size {} is not a layout pfnlab has (64, 32, 16 or 8 bytes)",
            self.0
        )
    }
}

impl std::error::Error for PageSizeError {}

impl TryFrom<u64> for PageSize {
    type Error = PageSizeError;

    fn try_from(bytes: u64) -> Result<PageSize, PageSizeError> {
        PageSize::ALL
            .into_iter()
            .find(|s| s.bytes() == bytes)
            .ok_or(PageSizeError(bytes))
    }
}

/// `page->flags`' upper bits as the kernel packs them (`SECTIONS_PGSHIFT`,
/// `NODES_PGSHIFT`, `ZONES_PGSHIFT`), for the layouts whose flags word
/// must hold the section, node and zone (32 and 16 bytes), and for the
/// 8-byte memdesc word of a type without a descriptor. The low
/// `low_bits` stay the owner's (page flags, or the memdesc type).
pub(crate) mod packed {
    /// Bits of zone id.
    const ZONES_WIDTH: u32 = 8;
    /// Bits of node id: enough for `MAX_NUMNODES` (1024).
    const NODES_WIDTH: u32 = 12;
    /// Bits of section number: enough for `MAX_SECTIONS_SHIFT` (25,
    /// asserted beside it in `geometry`).
    pub(crate) const SECTIONS_WIDTH: u32 = 28;

    const _: () = assert!(1 << NODES_WIDTH >= crate::types::MAX_NUMNODES as u64);

    /// The packed word for `section`, `zone`, `node` above `low_bits`.
    #[inline(always)]
    pub(super) const fn pack(low_bits: u32, section: u64, zone: u8, node: u16) -> u64 {
        debug_assert!(low_bits + ZONES_WIDTH + NODES_WIDTH + SECTIONS_WIDTH <= 64);
        ((zone as u64) << low_bits)
            | ((node as u64) << (low_bits + ZONES_WIDTH))
            | (section << (low_bits + ZONES_WIDTH + NODES_WIDTH))
    }

    /// The zone id of a packed word.
    #[inline(always)]
    pub(super) const fn zone(low_bits: u32, word: u64) -> u8 {
        (word >> low_bits) as u8
    }

    /// The node id of a packed word.
    #[inline(always)]
    pub(super) const fn node(low_bits: u32, word: u64) -> u16 {
        ((word >> (low_bits + ZONES_WIDTH)) & ((1 << NODES_WIDTH) - 1)) as u16
    }

    /// The section number of a packed word.
    #[inline(always)]
    pub(super) const fn section(low_bits: u32, word: u64) -> u64 {
        (word >> (low_bits + ZONES_WIDTH + NODES_WIDTH)) & ((1 << SECTIONS_WIDTH) - 1)
    }

    /// `word` with its zone and node replaced.
    #[inline(always)]
    pub(super) const fn with_zone_node(low_bits: u32, word: u64, zone: u8, node: u16) -> u64 {
        let mask = ((1u64 << (ZONES_WIDTH + NODES_WIDTH)) - 1) << low_bits;
        (word & !mask) | pack(low_bits, 0, zone, node)
    }
}

// The probe's byte is the low byte of the first word: little-endian only.
const _: () = assert!(cfg!(target_endian = "little"));
