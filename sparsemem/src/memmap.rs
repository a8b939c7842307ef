//! Backing memory for memmap arrays, and residency measurement.
//!
//! Every model's `struct page`s live in anonymous private mappings, so the
//! models are compared on the same kind of memory: FLATMEM and SPARSEMEM get
//! theirs from `memmap2`, the vmemmap crate from its own reservation.
//! Residency is measured from the process with `mincore(2)`, never estimated;
//! huge-page use from `/proc/self/smaps`.
//!
//! The kernel's FLATMEM `mem_map` (`alloc_node_mem_map`) and classic
//! SPARSEMEM's section memmaps (`sparse_buffer_init` / `memmap_alloc`) are
//! memblock memory reached through the direct map, which x86_64 maps with
//! 2 MiB and 1 GiB pages (`probe_page_size_mask`) unless `debug_pagealloc`
//! forces 4 KiB pages. A [`MemmapBlock`] models that with
//! [`DirectMap`]: by default its mapping is 2 MiB aligned and advised
//! `MADV_HUGEPAGE`, so transparent huge pages back every whole 2 MiB of it
//! when THP is `always` or `madvise`; [`DirectMap::BasePages`] advises
//! `MADV_NOHUGEPAGE` instead. With THP `never` the advice is accepted and
//! no huge page comes: the block is in 4 KiB pages and reports 0 bytes in
//! THP.
//!
//! # Safety
//! This module is one of the few that hold `unsafe`: it views a zeroed,
//! page-aligned anonymous mapping as a slice of descriptors of a
//! [`PageLayout`] (an all-zero descriptor is a valid value: every field is
//! an atomic integer or pointer, point 1 of the layout contract) and calls
//! `mincore` on mappings it is given.

use std::io;

use memmap2::{Advice, MmapMut, MmapOptions};

use nix::unistd::{SysconfVar, sysconf};

pub use crate::error::MemmapTooLarge;
use crate::page::{Page64, PageLayout};

/// A PMD: the huge page that maps 2 MiB of the x86_64 direct map.
pub const PMD_SIZE: usize = 2 << 20;

/// How the memory behind a FLATMEM or SPARSEMEM memmap is mapped, as the
/// kernel's direct map maps the memblock memory it comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DirectMap {
    /// 2 MiB pages where a whole one fits (x86_64's default direct map):
    /// 2 MiB aligned and `MADV_HUGEPAGE`.
    #[default]
    HugePages,
    /// 4 KiB pages only, as with `debug_pagealloc=on`, which keeps
    /// `probe_page_size_mask` from using large pages: `MADV_NOHUGEPAGE`.
    BasePages,
}

/// One anonymous mapping holding `nr_pages` zero-initialised `struct page`s
/// of layout `P`.
///
/// Invariants: the descriptors start at `base`, 2 MiB aligned (outside
/// Miri), inside the mapping `map`, which has unadvised slack on both
/// sides so the advised range is a VMA of its own; `len` is
/// `nr_pages * P::SIZE` rounded up to host pages; the mapping is never
/// remapped while the block lives; `base` was taken from it with
/// `as_mut_ptr` once, so it carries read-write permission for the whole
/// mapping (every `&P` is derived from it: a descriptor is all interior
/// mutability, which needs that permission).
pub struct MemmapBlock<P: PageLayout = Page64> {
    map: MmapMut,
    base: std::ptr::NonNull<P>,
    /// Byte offset of `base` in `map`.
    offset: usize,
    len: usize,
    nr_pages: usize,
}

// SAFETY: the block owns its mapping; `base` points into it and is only
// turned into `&P`s (all atomics, themselves Send + Sync).
unsafe impl<P: PageLayout> Send for MemmapBlock<P> {}
// SAFETY: as above; `&MemmapBlock` hands out only shared `&P`s.
unsafe impl<P: PageLayout> Sync for MemmapBlock<P> {}

impl<P: PageLayout> MemmapBlock<P> {
    /// Maps `nr_pages` zeroed descriptors in huge pages
    /// ([`DirectMap::HugePages`]); nothing is resident until touched.
    pub fn new(nr_pages: u64) -> io::Result<MemmapBlock<P>> {
        Self::with_direct_map(nr_pages, DirectMap::HugePages)
    }

    /// Maps `nr_pages` zeroed descriptors mapped as `direct_map` says.
    pub fn with_direct_map(nr_pages: u64, direct_map: DirectMap) -> io::Result<MemmapBlock<P>> {
        let too_large = || io::Error::new(io::ErrorKind::OutOfMemory, "memmap too large");
        let bytes = usize::try_from(nr_pages * P::SIZE).map_err(|_| too_large())?;
        let len = bytes.max(1).next_multiple_of(host_page_size());
        // Slack of two PMDs: room to align, and an unadvised gap on both
        // sides so the advised range never merges with a neighbour's VMA.
        let slack = if cfg!(miri) { 0 } else { 2 * PMD_SIZE };
        let mut map = MmapOptions::new()
            .len(len.checked_add(slack).ok_or_else(too_large)?)
            .map_anon()?;
        let start = map.as_mut_ptr();
        let offset = if cfg!(miri) {
            0
        } else {
            (start as usize + 1).next_multiple_of(PMD_SIZE) - start as usize
        };
        if !cfg!(miri) {
            let advice = match direct_map {
                DirectMap::HugePages => Advice::HugePage,
                DirectMap::BasePages => Advice::NoHugePage,
            };
            // A kernel without THP refuses the advice: the block stays in
            // 4 KiB pages, which its `huge_bytes` reports.
            let _ = map.advise_range(advice, offset, len);
        }
        // SAFETY: offset + len <= the mapping's length (offset <= 2 PMDs).
        let base = std::ptr::NonNull::new(unsafe { start.add(offset) }.cast::<P>())
            .expect("mmap returns non-null");
        Ok(MemmapBlock {
            map,
            base,
            offset,
            len,
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

    /// Descriptor `index`'s address, with the block's provenance like
    /// [`MemmapBlock::as_ptr`]: the start of a section memmap carved from a
    /// node's boot buffer.
    ///
    /// # Panics
    /// If `index` is not below the block's descriptor count.
    pub fn ptr_at(&self, index: u64) -> *const P {
        assert!(index < self.nr_pages as u64, "ptr_at beyond the block");
        self.base.as_ptr().wrapping_add(index as usize)
    }

    /// Bytes mapped for descriptors (the slack around them is never
    /// touched and not counted).
    pub fn reserved_bytes(&self) -> u64 {
        self.len as u64
    }

    /// Bytes resident, by `mincore`.
    pub fn resident_bytes(&self) -> u64 {
        // SAFETY: the range lies within this live mapping.
        unsafe { resident_bytes(self.base.as_ptr().cast(), self.len) }.unwrap_or(0)
    }

    /// The descriptors' address range, `[start, end)`.
    pub fn address_range(&self) -> (u64, u64) {
        let start = self.base.as_ptr() as u64;
        (start, start + self.len as u64)
    }

    /// Resident bytes in transparent huge pages (`AnonHugePages` of the
    /// block's own VMA in `/proc/self/smaps`; 0 if it cannot be read).
    pub fn huge_bytes(&self) -> u64 {
        smaps_totals(&[self.address_range()]).map_or(0, |t| t.huge)
    }

    /// Gives the block's memory back to the kernel: contents become zero
    /// (so every descriptor reads as a hole) and residency drops.
    pub fn discard(&mut self) -> io::Result<()> {
        // SAFETY: MADV_DONTNEED on our own private anonymous mapping: later
        // reads see zero-filled pages, which are valid descriptors (all
        // atomics), and `&mut self` guarantees no `&P` into the block is
        // alive.
        unsafe {
            self.map.unchecked_advise_range(
                memmap2::UncheckedAdvice::DontNeed,
                self.offset,
                self.len,
            )
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
                    self.offset + inner_start as usize,
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

/// Totals of `/proc/self/smaps` over some address ranges, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Smaps {
    /// `Rss`: mapped resident pages, a page mapped at k addresses k times.
    pub rss: u64,
    /// `Pss`: each page divided by its map count, so an aliased page counts
    /// once when all its mappings are in the range.
    pub pss: u64,
    /// `AnonHugePages` + `ShmemPmdMapped`: bytes mapped by PMDs.
    pub huge: u64,
}

/// Sums `/proc/self/smaps` over every VMA that overlaps one of `ranges`
/// (`[start, end)` addresses), each VMA once, in one read of the file.
pub fn smaps_totals(ranges: &[(u64, u64)]) -> io::Result<Smaps> {
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    let mut totals = Smaps::default();
    let mut inside = false;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ')
            && let Some((a, b)) = range.split_once('-')
            && let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16))
        {
            inside = ranges.iter().any(|&(lo, hi)| a < hi && b > lo);
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
            totals.rss += kib(rest);
        } else if let Some(rest) = line.strip_prefix("Pss:") {
            totals.pss += kib(rest);
        } else if let Some(rest) = line
            .strip_prefix("AnonHugePages:")
            .or_else(|| line.strip_prefix("ShmemPmdMapped:"))
        {
            totals.huge += kib(rest);
        }
    }
    Ok(totals)
}

/// Whether the kernel lets a process ask for transparent huge pages
/// (`always` or `madvise` in `/sys/kernel/mm/transparent_hugepage/enabled`).
pub fn thp_available() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .map(|s| !s.contains("[never]"))
        .unwrap_or(false)
}

/// Whether `MADV_HUGEPAGE` advice from this process reaches the kernel:
/// THP is available ([`thp_available`]) and a fresh mapping advised with
/// it shows the `hg` flag (`VM_HUGEPAGE`) in its `VmFlags` in
/// `/proc/self/smaps`.
///
/// It can be false where THP is available: user-mode QEMU 7.2 accepts
/// `madvise` and drops it, so nothing a guest program advises is ever
/// backed by huge pages. The probe maps and advises a region of its own,
/// independent of any [`MemmapBlock`], so a block that forgot its advice
/// still shows as a block without huge pages where this is true.
pub fn thp_advice_honoured() -> bool {
    if !thp_available() {
        return false;
    }
    let Ok(map) = MmapOptions::new().len(PMD_SIZE).map_anon() else {
        return false;
    };
    if map.advise(Advice::HugePage).is_err() {
        return false;
    }
    let start = map.as_ptr() as u64;
    vma_flags(start).is_some_and(|flags| flags.split_whitespace().any(|f| f == "hg"))
}

/// The `VmFlags` of the VMA holding `addr` in `/proc/self/smaps`, if it is
/// listed there.
fn vma_flags(addr: u64) -> Option<String> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ')
            && let Some((a, b)) = range.split_once('-')
            && let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16))
        {
            inside = (a..b).contains(&addr);
        } else if inside && let Some(flags) = line.strip_prefix("VmFlags:") {
            return Some(flags.to_owned());
        }
    }
    None
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

    /// Touches every descriptor of `block`.
    fn touch<P: PageLayout>(block: &MemmapBlock<P>) {
        for p in block.pages() {
            // SAFETY: the test owns the block.
            unsafe { p.init_reserved(1) };
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri does not emulate mincore or madvise")]
    fn block_is_zero_until_touched_and_discard_drops_residency() {
        let mut block = MemmapBlock::<Page64>::new(32768).unwrap();
        assert_eq!(block.reserved_bytes(), 2 << 20);
        assert_eq!(block.resident_bytes(), 0);
        assert_eq!(block.huge_bytes(), 0);
        assert!(block.pages().iter().step_by(64).all(|p| !p.is_present()));
        touch(&block);
        assert_eq!(block.resident_bytes(), 2 << 20);
        block.discard().unwrap();
        assert_eq!(block.resident_bytes(), 0);
        assert_eq!(block.huge_bytes(), 0);
        assert!(!block.pages()[100].is_present());
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri does not emulate mincore or madvise")]
    fn blocks_start_on_a_pmd_and_base_pages_never_get_thp() {
        let block = MemmapBlock::<Page64>::with_direct_map(3 << 15, DirectMap::BasePages).unwrap();
        let (start, end) = block.address_range();
        assert_eq!(start % PMD_SIZE as u64, 0);
        assert_eq!(end - start, 6 << 20);
        touch(&block);
        assert_eq!(block.resident_bytes(), 6 << 20);
        assert_eq!(block.huge_bytes(), 0, "MADV_NOHUGEPAGE keeps 4 KiB pages");
        // A block smaller than a PMD is its own VMA: no huge page fits it.
        let small = MemmapBlock::<Page64>::new(100).unwrap();
        assert_eq!(small.reserved_bytes(), 8192, "100 * 64 B in host pages");
        touch(&small);
        assert_eq!(small.resident_bytes(), 8192);
        assert_eq!(small.huge_bytes(), 0);
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri does not emulate mincore or madvise")]
    fn a_touched_block_is_in_huge_pages_when_thp_is_available() {
        if !thp_advice_honoured() {
            println!("skipped: THP is [never], or MADV_HUGEPAGE does not reach the kernel");
            return;
        }
        let block = MemmapBlock::<Page64>::new(4 << 15).unwrap();
        touch(&block);
        assert_eq!(block.resident_bytes(), 8 << 20);
        let huge = block.huge_bytes();
        // Each 2 MiB is THP unless the kernel had no free huge page then.
        assert!(huge > 0 && huge <= 8 << 20, "{huge}");
        assert_eq!(huge % PMD_SIZE as u64, 0);
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri does not emulate /proc/self/smaps")]
    fn vma_flags_name_a_mappings_permissions() {
        let block = MemmapBlock::<Page64>::with_direct_map(1 << 15, DirectMap::BasePages).unwrap();
        let Some(flags) = vma_flags(block.address_range().0) else {
            println!("skipped: /proc/self/smaps does not list this process's own mappings");
            return;
        };
        let flags: Vec<&str> = flags.split_whitespace().collect();
        assert!(flags.contains(&"rd") && flags.contains(&"wr"), "{flags:?}");
        assert!(!flags.contains(&"hg"), "{flags:?}");
        assert_eq!(vma_flags(0), None, "nothing is mapped at 0");
    }

    #[test]
    fn budget_refuses_absurd_memmaps() {
        let e = check_memmap_budget(u64::MAX).unwrap_err();
        assert!(e.to_string().contains("half its memory"), "{e}");
        assert!(check_memmap_budget(1 << 20).is_ok());
    }
}
