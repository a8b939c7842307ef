//! Backing memory for memmap arrays, and residency measurement.
//!
//! Every model's `struct page`s live in anonymous private mappings, so the
//! models are compared on the same kind of memory: FLATMEM and SPARSEMEM get
//! theirs from `memmap2`, the vmemmap crate from its own reservation.
//! Residency is measured from the process with `mincore(2)`, never estimated.
//!
//! # Safety
//! This module is one of the few that hold `unsafe`: it views a zeroed,
//! page-aligned anonymous mapping as a slice of descriptors of a
//! [`PageLayout`] (an all-zero descriptor is a valid value: every field is
//! an atomic integer or pointer, point 1 of the layout contract) and calls
//! `mincore` on mappings it is given.

use std::io;

use memmap2::{MmapMut, MmapOptions};

use nix::unistd::{SysconfVar, sysconf};

pub use crate::error::MemmapTooLarge;
use crate::page::{Page64, PageLayout};

/// One anonymous mapping holding `nr_pages` zero-initialised `struct page`s
/// of layout `P`.
///
/// Invariants: the mapping is page aligned (so aligned for every layout),
/// exactly `nr_pages * P::SIZE` bytes long, and never remapped while the
/// block lives; `base` was taken from it with `as_mut_ptr` once, so it
/// carries read-write permission for the whole mapping (every `&P` is
/// derived from it: a descriptor is all interior mutability, which needs
/// that permission).
pub struct MemmapBlock<P: PageLayout = Page64> {
    map: MmapMut,
    base: std::ptr::NonNull<P>,
    nr_pages: usize,
}

// SAFETY: the block owns its mapping; `base` points into it and is only
// turned into `&P`s (all atomics, themselves Send + Sync).
unsafe impl<P: PageLayout> Send for MemmapBlock<P> {}
// SAFETY: as above; `&MemmapBlock` hands out only shared `&P`s.
unsafe impl<P: PageLayout> Sync for MemmapBlock<P> {}

impl<P: PageLayout> MemmapBlock<P> {
    /// Maps `nr_pages` zeroed descriptors; nothing is resident until touched.
    pub fn new(nr_pages: u64) -> io::Result<MemmapBlock<P>> {
        let len = usize::try_from(nr_pages * P::SIZE)
            .map_err(|_| io::Error::new(io::ErrorKind::OutOfMemory, "memmap too large"))?;
        let mut map = MmapOptions::new().len(len.max(1)).map_anon()?;
        let base =
            std::ptr::NonNull::new(map.as_mut_ptr().cast::<P>()).expect("mmap returns non-null");
        Ok(MemmapBlock {
            map,
            base,
            nr_pages: nr_pages as usize,
        })
    }

    /// The descriptors.
    #[inline(always)]
    pub fn pages(&self) -> &[P] {
        // SAFETY: (1) the mapping is page aligned, so aligned for P;
        // (2) it is at least nr_pages * P::SIZE bytes long and lives as
        // long as `self`; (3) its bytes started zeroed and are only ever
        // written through P's atomics, so every chunk is a valid P (the
        // layout contract, point 1); (4) P is all atomics, so shared
        // references may alias freely.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.nr_pages) }
    }

    /// The first descriptor, with provenance over the whole block (see
    /// [`MemoryModel::pfn_to_page_ptr`](crate::MemoryModel::pfn_to_page_ptr)).
    #[inline(always)]
    pub fn as_ptr(&self) -> *const P {
        self.base.as_ptr()
    }

    /// Bytes mapped.
    pub fn reserved_bytes(&self) -> u64 {
        self.map.len() as u64
    }

    /// Bytes resident, by `mincore`.
    pub fn resident_bytes(&self) -> u64 {
        // SAFETY: the range is exactly this live mapping.
        unsafe { resident_bytes(self.map.as_ptr(), self.map.len()) }.unwrap_or(0)
    }

    /// Gives the block's memory back to the kernel: contents become zero
    /// (so every descriptor reads as a hole) and residency drops.
    pub fn discard(&mut self) -> io::Result<()> {
        // SAFETY: MADV_DONTNEED on our own private anonymous mapping: later
        // reads see zero-filled pages, which are valid descriptors (all
        // atomics), and `&mut self` guarantees no `&P` into the block is
        // alive.
        unsafe {
            self.map
                .unchecked_advise(memmap2::UncheckedAdvice::DontNeed)
        }
    }
}

impl<P: PageLayout> MemmapBlock<P> {
    /// Turns descriptors `[first, first + nr)` back into holes: the host
    /// pages wholly inside the range go back to the kernel (residency drops),
    /// the descriptors at the unaligned edges are zeroed in place.
    pub fn discard_range(&mut self, first: u64, nr: u64) -> io::Result<()> {
        assert!(
            first + nr <= self.nr_pages as u64,
            "discard_range beyond the block"
        );
        let page = host_page_size() as u64;
        let start = first * P::SIZE;
        let end = (first + nr) * P::SIZE;
        let inner_start = start.div_ceil(page) * page;
        let inner_end = (end / page * page).max(inner_start);
        // Miri does not emulate madvise: zero every descriptor instead.
        let (inner_start, inner_end) = if cfg!(miri) {
            (end, end)
        } else {
            (inner_start, inner_end)
        };
        if inner_end > inner_start {
            // SAFETY: as in `discard`: our own private anonymous mapping, the
            // range lies within it, and `&mut self` excludes live `&P`s.
            unsafe {
                self.map.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    inner_start as usize,
                    (inner_end - inner_start) as usize,
                )?;
            }
        }
        let edge = |a: u64, b: u64| (a / P::SIZE) as usize..(b / P::SIZE) as usize;
        for range in [
            edge(start, inner_start.min(end)),
            edge(inner_end.max(start), end),
        ] {
            for p in &self.pages()[range] {
                // SAFETY: the caller (a model's hot remove, under `&mut`)
                // retires these descriptors; no allocator manages them.
                unsafe { p.clear_to_hole() };
            }
        }
        Ok(())
    }
}

/// Host page size in bytes (`sysconf(_SC_PAGESIZE)`; 4096 if it cannot be
/// read).
pub fn host_page_size() -> usize {
    match sysconf(SysconfVar::PAGE_SIZE) {
        Ok(Some(size)) if size > 0 => size as usize,
        _ => 4096,
    }
}

/// Physical memory of this machine in bytes (`_SC_PHYS_PAGES`).
#[cfg(not(miri))]
pub fn host_memory_bytes() -> u64 {
    let pages = match sysconf(SysconfVar::_PHYS_PAGES) {
        Ok(Some(pages)) => pages.max(0) as u64,
        _ => 0,
    };
    pages * host_page_size() as u64
}

/// Physical memory of this machine in bytes, from `/proc/meminfo` (Miri
/// does not emulate `_SC_PHYS_PAGES`).
#[cfg(miri)]
pub fn host_memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("MemTotal:"))?.to_owned();
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(8 << 30, |kib| kib << 10)
}

/// Resident bytes of `[addr, addr + len)`, counted with `mincore` (libc's:
/// nix has no `mincore`).
///
/// Ranges that are reserved but unmapped (`ENOMEM`) count as not resident;
/// the range is walked in chunks so a huge sparse reservation needs no huge
/// vector.
///
/// # Safety
/// `[addr, addr + len)` must lie within mappings this process owns (a
/// reservation is fine); `mincore` only reads page tables.
pub unsafe fn resident_bytes(addr: *const u8, len: usize) -> io::Result<u64> {
    const CHUNK_PAGES: usize = 1 << 16;
    let page = host_page_size();
    let start = addr as usize & !(page - 1);
    let end = (addr as usize + len).div_ceil(page) * page;
    let mut vec = vec![0u8; CHUNK_PAGES];
    let mut resident = 0u64;
    let mut at = start;
    while at < end {
        let chunk = (end - at).min(CHUNK_PAGES * page);
        // SAFETY: `vec` has room for chunk / page entries; the address range
        // is page aligned and within the caller's mapping.
        let rc = unsafe { libc::mincore(at as *mut libc::c_void, chunk, vec.as_mut_ptr()) };
        if rc == 0 {
            let n = chunk / page;
            resident += vec[..n].iter().filter(|&&b| b & 1 != 0).count() as u64 * page as u64;
        } else {
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::ENOMEM) {
                return Err(err);
            }
        }
        at += chunk;
    }
    Ok(resident)
}

/// Refuses a memmap that would not fit comfortably in this machine's memory,
/// before anything is mapped.
pub fn check_memmap_budget(needed_bytes: u64) -> Result<(), MemmapTooLarge> {
    let budget = host_memory_bytes() / 2;
    if needed_bytes > budget {
        Err(MemmapTooLarge {
            needed: needed_bytes,
            budget,
        })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore = "Miri does not emulate mincore or madvise")]
    fn block_is_zero_until_touched_and_discard_drops_residency() {
        let mut block = MemmapBlock::<Page64>::new(32768).unwrap();
        assert_eq!(block.reserved_bytes(), 2 << 20);
        assert_eq!(block.resident_bytes(), 0);
        assert!(block.pages().iter().step_by(64).all(|p| !p.is_present()));
        for p in block.pages() {
            // SAFETY: the test owns the block.
            unsafe { p.init_reserved(1) };
        }
        assert_eq!(block.resident_bytes(), 2 << 20);
        block.discard().unwrap();
        assert_eq!(block.resident_bytes(), 0);
        assert!(!block.pages()[100].is_present());
    }

    #[test]
    fn budget_refuses_absurd_memmaps() {
        let e = check_memmap_budget(u64::MAX).unwrap_err();
        assert!(e.to_string().contains("half its memory"), "{e}");
        assert!(check_memmap_budget(1 << 20).is_ok());
    }
}
