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
//! With THP requested, populated ranges get `MADV_HUGEPAGE`, as the kernel
//! maps vmemmap with 2 MiB PMDs where it can. Residency and huge-page use
//! are read from `/proc/self/smaps` for the reservation's address range.
//!
//! # Safety
//! This module calls `mmap`, `mprotect`, `madvise` and `munmap` (nix's
//! `sys::mman`) on the
//! reservation it owns. It hands out the base address; callers may only
//! form references to descriptors in populated ranges (or, with
//! `HoleStyle::Missing`, in ranges a userfaultfd resolves).

use std::ffi::c_void;
use std::io;
use std::num::NonZeroUsize;
use std::ptr::NonNull;

use nix::sys::mman::{self, MapFlags, MmapAdvise, ProtFlags};

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
}

// SAFETY: the reservation is plain memory owned by this value; the raw
// pointers are addresses, and concurrent access to the memory is governed
// by the model that owns the reservation (descriptors are atomics).
unsafe impl Send for Reservation {}
// SAFETY: as above; `&Reservation` only reads addresses and /proc.
unsafe impl Sync for Reservation {}

impl Reservation {
    /// Reserves `len` bytes (rounded up to 2 MiB).
    pub fn new(len: usize, style: HoleStyle, thp: bool) -> io::Result<Reservation> {
        let len = len.div_ceil(RESERVATION_ALIGN) * RESERVATION_ALIGN;
        let mapped_len = len.checked_add(RESERVATION_ALIGN).ok_or_else(|| {
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
        let offset = mapped_base.cast::<u8>().align_offset(RESERVATION_ALIGN);
        Ok(Reservation {
            // SAFETY: offset < RESERVATION_ALIGN, within the mapping.
            base: unsafe { mapped_base.cast::<u8>().add(offset) },
            len,
            mapped_len,
            mapped_base,
            style,
            thp,
        })
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

    /// Makes `[offset, offset + len)` writable memory (`vmemmap_populate`).
    pub fn populate(&self, offset: usize, len: usize) -> io::Result<()> {
        self.check(offset, len)?;
        let addr = self.range_start(offset);
        if self.style == HoleStyle::Inaccessible {
            // SAFETY: the range lies within our reservation (checked); making
            // our own reservation accessible invalidates nothing.
            unsafe { mman::mprotect(addr, len, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE) }?;
        }
        let advice = if self.thp {
            MmapAdvise::MADV_HUGEPAGE
        } else {
            MmapAdvise::MADV_NOHUGEPAGE
        };
        // SAFETY: advice on our own range; an unsupported advice (no THP in
        // this kernel) is not an error here, so the result is ignored.
        let _ = unsafe { mman::madvise(addr, len, advice) };
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
        // SAFETY: the range lies within our reservation (checked) and the
        // caller holds no reference into it; DONTNEED on private anonymous
        // memory drops the pages, later reads see zeros or fault.
        unsafe { mman::madvise(addr, len, MmapAdvise::MADV_DONTNEED) }?;
        if self.style == HoleStyle::Inaccessible {
            // SAFETY: as above.
            unsafe { mman::mprotect(addr, len, ProtFlags::PROT_NONE) }?;
        }
        Ok(())
    }

    /// Resident bytes and bytes in transparent huge pages, from
    /// `/proc/self/smaps` over the reservation's address range.
    pub fn residency(&self) -> io::Result<(u64, u64)> {
        let smaps = std::fs::read_to_string("/proc/self/smaps")?;
        let lo = self.base.as_ptr() as u64;
        let hi = lo + self.len as u64;
        let (mut rss, mut huge) = (0u64, 0u64);
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ')
                && let Some((a, b)) = range.split_once('-')
                && let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16))
            {
                inside = a < hi && b > lo;
                continue;
            }
            if !inside {
                continue;
            }
            let kib = |rest: &str| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap_or(0)
                    * 1024
            };
            if let Some(rest) = line.strip_prefix("Rss:") {
                rss += kib(rest);
            } else if let Some(rest) = line.strip_prefix("AnonHugePages:") {
                huge += kib(rest);
            }
        }
        Ok((rss, huge))
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

/// Whether the kernel lets a process ask for THP (`always` or `madvise`).
pub fn thp_available() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .map(|s| !s.contains("[never]"))
        .unwrap_or(false)
}
