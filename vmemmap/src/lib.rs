//! # vmemmap — SPARSEMEM_VMEMMAP on real virtual memory
//!
//! The kernel's VMEMMAP model maps the memmap of the whole physical address
//! space at one virtual address, populating only the parts that describe
//! present memory, so `pfn_to_page` is `vmemmap + pfn` and never consults a
//! table. This crate does the same with a `MAP_NORESERVE` reservation in the
//! process ([`reserve`]) and offers three ways to answer `pfn_valid`:
//!
//! - [`VmemmapTable`]: the stock kernel — the EXTREME section table and
//!   subsection bitmap decide.
//! - [`VmemmapProbe`]: KAMEZAWA Hiroyuki's 2006 proposal (and ia64's
//!   `ia64_pfn_valid`) — load one byte of the `struct page` under an
//!   exception-table fixup ([`fixup`]); a fault means "hole".
//! - `VmemmapUffd` / `VmemmapUffdSigbus` (feature `uffd`): holes registered
//!   with userfaultfd; a handler thread answers the first touch with the
//!   zero page, or the kernel raises SIGBUS caught by the same fixup.
//!
//! ## Module order
//! Bottom to top; a module uses only modules below it (checked by
//! `.ci/structure.py`): `fixup` and `kernel_fixup` (the fault fixups),
//! `backing` (anonymous or memfd memory), `hvo_state`; then `reserve` (the
//! reservation); `model` (the model and its detectors); `hvo` (the remap)
//! and `uffd` over the model.
//!
//! ```
//! use sparsemem::{Layout, MemoryModel, Pfn};
//! use vmemmap::VmemmapProbe;
//!
//! let layout = Layout::preset("ia64-holes")?;
//! let model = VmemmapProbe::new(&layout)?;
//! assert!(model.pfn_valid(Pfn::new(0)));
//! assert!(!model.pfn_valid(Pfn::new((3u64 << 30) >> 14)), "a hole between banks");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![cfg(target_os = "linux")]
#![deny(unsafe_code)]

// Unsafe is allowed module by module, each for one reason.
// The exception-table probe: inline asm, a signal handler that edits the
// saved context, per-thread alternate stacks. x86_64 and aarch64 only; on
// other architectures `vmemmap-probe` is refused when built.
// The memfd behind a shareable memmap: memfd_create, mmap(MAP_FIXED),
// fallocate, pwrite, fstat.
#[allow(unsafe_code)]
pub mod backing;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[allow(unsafe_code)]
pub mod fixup;
// HugeTLB vmemmap optimisation: remaps of the memmap and the owner's
// writes of tail compound fields.
#[allow(unsafe_code)]
pub mod hvo;
// HVO's bookkeeping, held by the model and kept by `hvo`.
mod hvo_state;
// A PROT_NONE page's address handed to write(2), to time the kernel's fixup.
#[allow(unsafe_code)]
pub mod kernel_fixup;
// The memmap is raw memory in a reservation: pointers to descriptors.
#[allow(unsafe_code)]
mod model;
// mmap / mprotect / madvise of the reservation.
#[allow(unsafe_code)]
pub mod reserve;
// userfaultfd ioctls and the zero-page answers.
#[cfg(feature = "uffd")]
#[allow(unsafe_code)]
mod uffd;

pub use hvo::{compound_head_fake_head, compound_head_mask};
pub use hvo_state::HvoCounts;
pub use model::{Detector, Probe, Table, Vmemmap, VmemmapOptions};
#[cfg(feature = "uffd")]
pub use uffd::{UffdSigbus, UffdZeroPage};

/// Stock VMEMMAP: section table, then `vmemmap + pfn`.
pub type VmemmapTable = Vmemmap<Table>;
/// VMEMMAP with the fault-probed `pfn_valid`.
pub type VmemmapProbe = Vmemmap<Probe>;
/// VMEMMAP with holes resolved to the zero page by a userfaultfd thread.
#[cfg(feature = "uffd")]
pub type VmemmapUffd = Vmemmap<UffdZeroPage>;
/// VMEMMAP with userfaultfd `UFFD_FEATURE_SIGBUS` holes.
#[cfg(feature = "uffd")]
pub type VmemmapUffdSigbus = Vmemmap<UffdSigbus>;
