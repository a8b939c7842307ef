//! # sparsemem — physical memory vocabulary and the table-based memory models
//!
//! The Linux kernel describes physical memory with one 64-byte `struct page`
//! per page frame (the *memmap*) and answers two questions on every
//! allocator path: is there a `struct page` for this page frame number
//! (`pfn_valid`), and where is it (`pfn_to_page`)? How it answers depends on
//! the memory model. This crate holds what every model shares — [`Pfn`],
//! [`PhysAddr`], [`SectionNr`], [`Order`], [`Geometry`], [`Page`],
//! [`Layout`] and the [`MemoryModel`] trait — and two models:
//!
//! - [`Flat`] (FLATMEM): one array over the whole span; `pfn_valid` is a
//!   range check; holes cost memmap.
//! - [`Sparse`] (SPARSEMEM without VMEMMAP): a section table, classic
//!   ([`SparseClassic`]) or two-level EXTREME ([`SparseExtreme`]), with a
//!   memmap per present section; whole sections, as the kernel has it.
//!
//! The `vmemmap` crate adds the virtually mapped memmap on the same trait.
//!
//! ## Validity semantics (every model implements exactly this)
//! - A pfn at or beyond `2^(MAX_PHYSMEM_BITS - PAGE_SHIFT)` is invalid.
//! - FLATMEM: valid on the boot-memory span rounded out to max-order
//!   blocks (`alloc_node_mem_map`). No hotplug, no device memory.
//! - SPARSEMEM without VMEMMAP: valid on every present section, whole
//!   (`pfn_section_valid` is 1). Memory comes and goes in memory blocks (one
//!   section); device memory is refused.
//! - VMEMMAP (the `vmemmap` crate): a section is *early* when at least one
//!   whole page of a RAM range lies in it; every pfn of an early section is
//!   valid. In any other section a pfn is valid when its 2 MiB subsection
//!   holds hot-added or device memory.
//! - Reserved ranges never make a pfn valid.
//!
//! ## Module order
//! Bottom to top; a module uses only modules on its own level or below
//! (checked by `.ci/structure.py`):
//! 1. `types` (the newtypes), `page` (`struct page` at 64, 32, 16 and 8
//!    bytes), `pageblock`;
//! 2. `error`, `geometry`, `subsection` (the subsection bitmap);
//! 3. `memmap` (the memmap's own mappings), `section` (the encoded
//!    `section_mem_map`), `layout`, `hvo` (HVO's vocabulary);
//! 4. `model` (the `MemoryModel` trait), `table` (the section tables),
//!    `reference` (the plain rules);
//! 5. `flat`, `sparse` (the models), `walk` (the pfn walkers);
//! 6. `testing` (the checks generic over every model).
//!
//! [`reference::Reference`] is a plain implementation of these rules used by
//! the differential tests.
//!
//! ```
//! use sparsemem::{Layout, MemoryModel, Pfn, SparseExtreme};
//!
//! let layout = Layout::preset("x86-pci-hole")?;
//! let model = SparseExtreme::new(&layout)?;
//! assert!(model.pfn_valid(Pfn::new(0x1000)));
//! let page = model.pfn_to_page(Pfn::new(0x1000)).unwrap();
//! assert_eq!(model.page_to_pfn(page), Pfn::new(0x1000));
//! assert!(!model.pfn_valid(Pfn::new(1 << 40)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(unsafe_code)]

// Unsafe is allowed module by module, each for one reason.
// The memmap pointer a model hands out, and descriptor initialisation.
mod error;
#[allow(unsafe_code)]
mod flat;
mod geometry;
// HugeTLB vmemmap optimisation: an unsafe trait (the model promises what
// a remapped memmap still answers).
#[allow(unsafe_code)]
pub mod hvo;
pub mod layout;
pub mod pageblock;
// Anonymous mappings for memmap blocks (memmap2's unchecked advice).
#[allow(unsafe_code)]
pub mod memmap;
// `unsafe trait MemoryModel` and `pfn_to_page_ptr`: implementers promise.
#[allow(unsafe_code)]
mod model;
// The owners' writers of `struct page` are `unsafe fn`s.
#[allow(unsafe_code)]
mod page;
pub mod reference;
// The encoded `section_mem_map` (pointer minus first pfn, flags in low bits).
#[allow(unsafe_code)]
pub mod section;
// Descriptor initialisation and pointers into section memmaps.
#[allow(unsafe_code)]
mod sparse;
mod subsection;
// Root and section arrays handed out as raw pointers to the lookups.
#[allow(unsafe_code)]
pub mod table;
#[cfg(feature = "testing")]
pub mod testing;
mod types;
pub mod walk;

pub use error::{
    BuildError, Granule, HOTPLUG_MODELS, HotplugError, MemmapTooLarge, TableTooLarge,
    VMEMMAP_MODELS,
};
pub use flat::Flat;
pub use geometry::{
    Geometry, GeometryError, MAX_SECTIONS_SHIFT, MAX_SUBSECTIONS_PER_SECTION, SUBSECTION_SHIFT,
    SectionChunk, ZoneLimits,
};
pub use layout::{Layout, LayoutError, MemRange, RangeKind};
pub use memmap::DirectMap;
pub use model::{MemmapBytes, MemmapFrames, MemoryModel, PfnWalker, first_valid_pfn_per_pfn};
pub use page::{
    BuddyPage, ListState, MemdescType, PAGE_STRUCT_SIZE, Page, Page8, Page16, Page32, Page64,
    PageFlag, PageLayout, PageSize, PageSizeError, SLAB_BYTES, SlabInfo, TAIL_MAPPING, UserFlag,
    ZONE_DEVICE_ID,
};
pub use pageblock::{MIGRATE_PCPTYPES, MIGRATE_TYPES, Migratetype};
pub use sparse::{Sparse, SparseClassic, SparseExtreme};
pub use subsection::SubsectionMap;
pub use types::{
    DEFAULT_MAX_PAGE_ORDER, MAX_NUMNODES, MAX_PAGE_ORDER_LIMIT, NR_PAGE_ORDERS, NodeId,
    NodeIdTooLarge, Order, OrderTooLarge, Pfn, PhysAddr, SectionNr,
};
pub use walk::{PfnRange, WalkError, for_each_valid_pfn};
