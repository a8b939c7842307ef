//! The virtual reservation that holds the memmap of the whole physical
//! address space, and population of parts of it.
//!
//! Like the kernel's `VMEMMAP_START` region, the reservation covers
//! `2^(MAX_PHYSMEM_BITS - PAGE_SHIFT)` descriptors: 1 TiB of address space
//! for x86_64's 46 bits, 64 TiB for 52 bits. It is mapped `MAP_NORESERVE`,
//! so it costs neither memory nor commit charge until populated. Two hole
//! styles:
//! - [`HoleStyle::Inaccessible`]: holes are `PROT_NONE`; populated ranges are
//!   made read-write (`vmemmap_populate`). A load from a hole faults.
//! - [`HoleStyle::Missing`]: the whole reservation is read-write and holes
//!   are simply never written, so a userfaultfd registered on them sees the
//!   first touch.
//!
//! With THP requested, ranges the model populates in whole PMDs get
//! `MADV_HUGEPAGE`, as the kernel maps vmemmap with 2 MiB PMDs where it
//! can, and others `MADV_NOHUGEPAGE` (the model decides, see its
//! `populate` module). Residency and huge-page use
//! are read from `/proc/self/smaps` for the reservation's address range.
//!
//! Two backings: private anonymous memory (the default), or a sparse memfd
//! mapped shared over the whole reservation ([`Backing::Memfd`], see
//! [`crate::backing`]), so HVO can map one memmap page at several
//! addresses. With a memfd, depopulating punches a hole in the file, and
//! the resident memmap is the file's allocated bytes; only
//! [`HoleStyle::Inaccessible`] is offered (a userfaultfd on shmem is not
//! modelled).
//!
//! # Safety
//! This module calls `mmap`, `mprotect`, `madvise` and `munmap` (nix's
//! `sys::mman`) on the
//! reservation it owns, and maps a foreign file (a block's frames) over
//! part of it under [`Reservation::map_foreign`]'s contract. It hands out the base address; callers may only
//! form references to descriptors in populated ranges (or, with
//! `HoleStyle::Missing`, in ranges a userfaultfd resolves).

use std::ffi::c_void;
use std::io;
use std::num::NonZeroUsize;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;

use nix::sys::mman::{self, MapFlags, MmapAdvise, ProtFlags};

use crate::backing::{Memfd, Prot};
pub use sparsemem::memmap::{Smaps, thp_available};

/// How holes in the reservation behave.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum HoleStyle {
    /// Holes are `PROT_NONE`: loads fault with SIGSEGV.
    Inaccessible,
    /// Holes are readable but unpopulated, for userfaultfd.
    Missing,
}

/// Alignment of the reservation: one PMD, so section memmaps can be THP.
const RESERVATION_ALIGN: usize = 2 << 20;

/// Alignment of a memfd-backed reservation: 1 GiB, so the `struct page` of
/// every hugetlb head (up to a 1 GiB folio of 4 KiB pages, 16 MiB of
/// memmap) is naturally aligned to its folio's memmap size, which the mask
/// encoding of `compound_info` needs.
const MEMFD_RESERVATION_ALIGN: usize = 1 << 30;

/// File bytes past a memfd-backed memmap for 2026's shared read-only tail
/// pages (one per hugetlb order, zone and node): 512 pages of 4 KiB.
pub(crate) const HVO_SHARED_TAIL_BYTES: usize = 2 << 20;

/// What is behind the reservation's populated pages.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Backing {
    /// Private anonymous memory: one address per page.
    #[default]
    Anonymous,
    /// A sparse memfd mapped shared: a page can be mapped twice (HVO).
    Memfd,
}

/// An owned `MAP_NORESERVE` reservation.
///
/// Invariants: `[base, base + len)` is mapped by this reservation for its
/// whole life; `base` is 2 MiB aligned.
pub struct Reservation {
    base: NonNull<u8>,
    len: usize,
    mapped_len: usize,
    mapped_base: NonNull<c_void>,
    style: HoleStyle,
    thp: bool,
    memfd: Option<Memfd>,
}

// SAFETY: the reservation is plain memory owned by this value; the raw
// pointers are addresses, and concurrent access to the memory is governed
// by the model that owns the reservation (descriptors are atomics).
unsafe impl Send for Reservation {}
// SAFETY: as above; `&Reservation` only reads addresses and /proc.
unsafe impl Sync for Reservation {}

impl Reservation {
    /// Reserves `len` bytes (rounded up to 2 MiB) of anonymous memory.
    pub fn new(len: usize, style: HoleStyle, thp: bool) -> io::Result<Reservation> {
        Self::with_backing(len, style, thp, Backing::Anonymous)
    }

    /// Reserves `len` bytes (rounded up to 2 MiB) with `backing`.
    pub fn with_backing(
        len: usize,
        style: HoleStyle,
        thp: bool,
        backing: Backing,
    ) -> io::Result<Reservation> {
        let align = match backing {
            Backing::Anonymous => RESERVATION_ALIGN,
            Backing::Memfd if style == HoleStyle::Inaccessible => MEMFD_RESERVATION_ALIGN,
            Backing::Memfd => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "a memfd-backed memmap has PROT_NONE holes only (no userfaultfd on shmem)",
                ));
            }
        };
        let len = len.div_ceil(RESERVATION_ALIGN) * RESERVATION_ALIGN;
        let mapped_len = len.checked_add(align).ok_or_else(|| {
            io::Error::new(io::ErrorKind::OutOfMemory, "reservation size overflows")
        })?;
        let prot = match style {
            HoleStyle::Inaccessible => ProtFlags::PROT_NONE,
            HoleStyle::Missing => ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
        };
        let nonzero = NonZeroUsize::new(mapped_len)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty reservation"))?;
        // SAFETY: a fresh private anonymous mapping at a kernel-chosen
        // address; it overlaps nothing of ours.
        let mapped_base = unsafe {
            mman::mmap_anonymous(
                None,
                nonzero,
                prot,
                MapFlags::MAP_PRIVATE | MapFlags::MAP_NORESERVE,
            )
        }?;
        let offset = mapped_base.cast::<u8>().align_offset(align);
        let mut reservation = Reservation {
            // SAFETY: offset < align, within the mapping.
            base: unsafe { mapped_base.cast::<u8>().add(offset) },
            len,
            mapped_len,
            mapped_base,
            style,
            thp,
            memfd: None,
        };
        if backing == Backing::Memfd {
            let memfd = Memfd::new((len + HVO_SHARED_TAIL_BYTES) as u64)?;
            // SAFETY: (1) `[base, base + len)` lies in the mapping just made
            // and nothing refers into it yet; (2) base is 1 GiB aligned and
            // len a multiple of 2 MiB.
            unsafe { memfd.map_fixed(reservation.base(), len, 0, Prot::None) }?;
            reservation.memfd = Some(memfd);
        }
        Ok(reservation)
    }

    /// The memfd behind the reservation, when it is memfd-backed.
    pub fn memfd(&self) -> Option<&Memfd> {
        self.memfd.as_ref()
    }

    /// First byte.
    #[inline(always)]
    pub fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Bytes reserved.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the reservation is empty (never: at least 2 MiB).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The hole style.
    pub fn style(&self) -> HoleStyle {
        self.style
    }

    /// Whether THP was requested for populated ranges.
    pub fn thp_requested(&self) -> bool {
        self.thp
    }

    fn check(&self, offset: usize, len: usize) -> io::Result<()> {
        let page = sparsemem::memmap::host_page_size();
        let aligned = offset.is_multiple_of(page) && len.is_multiple_of(page);
        if aligned && offset.checked_add(len).is_some_and(|end| end <= self.len) {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "range not page aligned or outside the reservation",
            ))
        }
    }

    /// Makes `[offset, offset + len)` writable memory (`vmemmap_populate`),
    /// in transparent huge pages when `huge` and THP was requested
    /// (`MADV_HUGEPAGE`), else in 4 KiB pages (`MADV_NOHUGEPAGE`).
    pub fn populate(&self, offset: usize, len: usize, huge: bool) -> io::Result<()> {
        self.check(offset, len)?;
        let addr = self.range_start(offset);
        if self.style == HoleStyle::Inaccessible {
            // SAFETY: the range lies within our reservation (checked); making
            // our own reservation accessible invalidates nothing.
            unsafe { mman::mprotect(addr, len, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE) }?;
        }
        let advice = if self.thp && huge {
            MmapAdvise::MADV_HUGEPAGE
        } else {
            MmapAdvise::MADV_NOHUGEPAGE
        };
        // SAFETY: advice on our own range; an unsupported advice (no THP in
        // this kernel) is not an error here, so the result is ignored.
        let _ = unsafe { mman::madvise(addr, len, advice) };
        Ok(())
    }

    /// `MADV_NOHUGEPAGE` on `[offset, offset + len)`: no huge page maps
    /// it again (HVO's split of a memmap PMD stays split).
    pub fn advise_nohugepage(&self, offset: usize, len: usize) -> io::Result<()> {
        self.check(offset, len)?;
        // SAFETY: advice on our own range (checked); it changes no contents.
        unsafe { mman::madvise(self.range_start(offset), len, MmapAdvise::MADV_NOHUGEPAGE) }?;
        Ok(())
    }

    /// The address `offset` bytes into the reservation.
    fn range_start(&self, offset: usize) -> NonNull<c_void> {
        self.base
            .map_addr(|a| a.saturating_add(offset))
            .cast::<c_void>()
    }

    /// Gives `[offset, offset + len)` back to the kernel and makes it a hole
    /// again (`vmemmap_free`).
    ///
    /// The caller guarantees no reference into the range is alive.
    pub fn depopulate(&self, offset: usize, len: usize) -> io::Result<()> {
        self.check(offset, len)?;
        let addr = self.range_start(offset);
        match &self.memfd {
            Some(memfd) => memfd.punch_hole(offset as u64, len as u64)?,
            // SAFETY: the range lies within our reservation (checked) and
            // the caller holds no reference into it; DONTNEED on private
            // anonymous memory drops the pages, later reads see zeros or
            // fault.
            None => unsafe { mman::madvise(addr, len, MmapAdvise::MADV_DONTNEED) }?,
        }
        if self.style == HoleStyle::Inaccessible {
            // SAFETY: as above.
            unsafe { mman::mprotect(addr, len, ProtFlags::PROT_NONE) }?;
        }
        Ok(())
    }

    /// Maps `[offset, offset + len)` shared from `fd` at `fd_offset`,
    /// read-write and populated, replacing the reservation's own pages
    /// there: a memmap_on_memory block's memmap on the block's frames.
    /// [`Reservation::restore`] undoes it.
    ///
    /// # Safety
    /// - no reference into the range is alive (its bytes become the
    ///   file's);
    /// - `fd_offset` is host-page aligned and the file is at least
    ///   `fd_offset + len` bytes long.
    pub unsafe fn map_foreign(
        &self,
        offset: usize,
        len: usize,
        fd: BorrowedFd<'_>,
        fd_offset: u64,
    ) -> io::Result<()> {
        self.check(offset, len)?;
        if self.style != HoleStyle::Inaccessible {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a memmap on foreign frames needs PROT_NONE holes (no userfaultfd on shmem)",
            ));
        }
        let off = libc::off_t::try_from(fd_offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset overflows"))?;
        let nonzero = NonZeroUsize::new(len)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty range"))?;
        // SAFETY: (1) the range lies within our reservation (checked) and
        // the caller holds no reference into it; (2) MAP_FIXED replaces
        // only that range; (3) the caller promises the file covers it.
        let got = unsafe {
            mman::mmap(
                Some(self.range_start(offset).addr()),
                nonzero,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED
                    | MapFlags::MAP_FIXED
                    | MapFlags::MAP_NORESERVE
                    | MapFlags::MAP_POPULATE,
                fd,
                off,
            )
        }?;
        debug_assert_eq!(got, self.range_start(offset));
        Ok(())
    }

    /// Puts the reservation's own hole back over `[offset, offset + len)`
    /// (after [`Reservation::map_foreign`]): `PROT_NONE`, from the
    /// reservation's memfd or fresh anonymous memory, so no page of the
    /// foreign file stays mapped there.
    ///
    /// The caller guarantees no reference into the range is alive.
    pub fn restore(&self, offset: usize, len: usize) -> io::Result<()> {
        self.check(offset, len)?;
        let addr = self.range_start(offset);
        match &self.memfd {
            // SAFETY: (1) the range lies within our reservation (checked)
            // and holds no live reference; (2) offsets in the file equal
            // offsets in the reservation, and both are page aligned.
            Some(memfd) => unsafe {
                memfd.map_fixed(addr.as_ptr().cast(), len, offset as u64, Prot::None)
            },
            None => {
                let nonzero = NonZeroUsize::new(len)
                    .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty range"))?;
                // SAFETY: as above; a private anonymous PROT_NONE mapping
                // over our own range is what `new` made there.
                unsafe {
                    mman::mmap_anonymous(
                        Some(addr.addr()),
                        nonzero,
                        ProtFlags::PROT_NONE,
                        MapFlags::MAP_PRIVATE | MapFlags::MAP_FIXED | MapFlags::MAP_NORESERVE,
                    )
                }?;
                Ok(())
            }
        }
    }

    /// Resident bytes and bytes in transparent huge pages. Anonymous:
    /// `Rss` and `AnonHugePages` from `/proc/self/smaps` over the
    /// reservation's address range. Memfd: the file's allocated bytes (an
    /// aliased page counts once) and `ShmemPmdMapped`.
    pub fn residency(&self) -> io::Result<(u64, u64)> {
        let smaps = self.smaps()?;
        match &self.memfd {
            Some(memfd) => Ok((memfd.allocated_bytes()?, smaps.huge)),
            None => Ok((smaps.rss, smaps.huge)),
        }
    }

    /// The reservation's `/proc/self/smaps` totals.
    pub fn smaps(&self) -> io::Result<Smaps> {
        let lo = self.base.as_ptr() as u64;
        sparsemem::memmap::smaps_totals(&[(lo, lo + self.len as u64)])
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `new`; the owner
        // (the model) is being dropped, so no reference into it remains.
        // A failure leaves a mapping behind, which drop cannot report.
        let _ = unsafe { mman::munmap(self.mapped_base, self.mapped_len) };
    }
}
