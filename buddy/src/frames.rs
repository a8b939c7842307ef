//! Real frames: memory behind the simulated pfns, so `__GFP_ZERO` costs what
//! it costs the kernel (`clear_page` on every page of the block) and a
//! caller can use what it allocated.
//!
//! One anonymous `MAP_NORESERVE` mapping covers the layout's memory span,
//! pfn `p` at `(p - first) << PAGE_SHIFT`; host pages are faulted in on
//! first touch, so untouched memory costs nothing and a layout may have
//! more RAM than the machine. What the machine limits is address space: a
//! span beyond [`MAX_FRAMES_BYTES`] is refused before mapping, and a
//! mapping the kernel refuses is an error naming its size. Touching (or
//! zeroing) more frames than the machine has RAM is the caller's to avoid:
//! the host would swap or kill the process, as it would any program.
//!
//! A memmap_on_memory block's first frames hold its memmap
//! (`Frames::share`): they are remapped `MAP_SHARED` from one sparse
//! memfd (offset = the frames' offset in the span), so the vmemmap model
//! can map the same file pages as the block's `struct page`s; removing the
//! block puts private anonymous frames back (`Frames::unshare`) and
//! gives the file's pages up. Every other frame stays anonymous memory.
//!
//! # Safety
//! The mapping lives as long as the allocator; [`Frames::page_address`]
//! hands out addresses inside it. The allocator writes a block's frames only
//! while it owns the block (between taking it off a list and handing it
//! out), so no two writers touch the same frame through it. What a caller
//! does with an address is the caller's `unsafe`. Migration reads a
//! block's frames too, copying them into a block it just allocated, while
//! it holds the owner table that holds the source mutably
//! (`crate::migrate`). Shared frames are
//! self-hosted pfns, which the allocator never hands out: the memmap is
//! the only writer the allocator lets at them. This module calls
//! `memfd_create`, `ftruncate`, `mmap(MAP_FIXED)` and `fallocate` (libc).

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

use memmap2::{MmapMut, MmapOptions};
use sparsemem::{BuddyPage, HotplugError, Layout, MemmapFrames, MemoryModel, Pfn};

use crate::list::OwnedBlock;

/// The most address space the frames of one allocator may take: 64 TiB,
/// half of x86_64's 47-bit user space (the memmap reservations of the
/// vmemmap models need room too).
pub const MAX_FRAMES_BYTES: u64 = 64 << 40;

/// Why real frames cannot be had.
#[derive(Debug)]
pub enum FramesError {
    /// The layout's memory spans more address space than
    /// [`MAX_FRAMES_BYTES`].
    TooLarge {
        /// The span's size.
        span_bytes: u64,
    },
    /// The host refused the mapping.
    Mmap {
        /// The mapping's size.
        bytes: u64,
        /// The host's answer.
        source: std::io::Error,
    },
    /// The host returned a null mapping.
    NullMapping,
    /// The host refused to share a block's frames as a file, or to take
    /// them back.
    Share {
        /// The host's answer.
        source: std::io::Error,
    },
    /// The memory model refused to map a block's memmap on its frames.
    Memmap(HotplugError),
    /// Hot-added memory outside the frames of the layout's memory span.
    OutsideFrames {
        /// First pfn added.
        start: Pfn,
        /// Pages added.
        nr_pages: u64,
    },
}

impl std::fmt::Display for FramesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FramesError::TooLarge { span_bytes } => write!(
                f,
                "real frames: the layout's memory spans {} GiB of address space, more than the {} GiB limit",
                span_bytes >> 30,
                MAX_FRAMES_BYTES >> 30
            ),
            FramesError::Mmap { bytes, source } => {
                write!(f, "real frames: mmap of {bytes} bytes: {source}")
            }
            FramesError::NullMapping => f.write_str("real frames: mmap returned null"),
            FramesError::Memmap(e) => write!(f, "real frames: a memmap on the block's frames: {e}"),
            FramesError::Share { source } => {
                write!(
                    f,
                    "real frames: sharing a block's frames with its memmap: {source}"
                )
            }
            FramesError::OutsideFrames { start, nr_pages } => write!(
                f,
                "real frames: hot-added pfns {start}+{nr_pages} lie outside the frames of the layout's memory span"
            ),
        }
    }
}

impl std::error::Error for FramesError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FramesError::Mmap { source, .. } | FramesError::Share { source } => Some(source),
            FramesError::Memmap(e) => Some(e),
            _ => None,
        }
    }
}

/// The frames of a layout's memory; see the module documentation.
pub struct Frames {
    /// Keeps the mapping alive; never read through (every access goes
    /// through `base`).
    _map: MmapMut,
    base: NonNull<u8>,
    first: u64,
    end: u64,
    page_shift: u32,
    /// The memfd behind shared frames, made at the first share; as long as
    /// the span.
    shared: Option<OwnedFd>,
}

// SAFETY: `Frames` owns its mapping; `base` points into it and is only
// written through by the allocator for blocks it owns (module contract), so
// sharing and sending it is as sound as sharing the allocator.
unsafe impl Send for Frames {}
// SAFETY: as above.
unsafe impl Sync for Frames {}

impl Frames {
    /// Maps frames for `layout`'s memory span, or says which limit it
    /// passes.
    pub(crate) fn new(layout: &Layout) -> Result<Frames, FramesError> {
        let g = layout.geometry();
        let (first, end) = layout.memory_span();
        let bytes = (end.get() - first.get()) << g.page_shift();
        if bytes > MAX_FRAMES_BYTES {
            return Err(FramesError::TooLarge { span_bytes: bytes });
        }
        let mut map = MmapOptions::new()
            .len(bytes.max(1) as usize)
            .no_reserve_swap()
            .map_anon()
            .map_err(|source| FramesError::Mmap { bytes, source })?;
        let base = NonNull::new(map.as_mut_ptr()).ok_or(FramesError::NullMapping)?;
        Ok(Frames {
            _map: map,
            base,
            first: first.get(),
            end: end.get(),
            page_shift: g.page_shift(),
            shared: None,
        })
    }

    /// `page_address`: where `pfn`'s frame is, if the frames cover it.
    #[inline(always)]
    pub fn page_address(&self, pfn: Pfn) -> Option<NonNull<u8>> {
        let p = pfn.get();
        if p < self.first || p >= self.end {
            return None;
        }
        let offset = ((p - self.first) << self.page_shift) as usize;
        // SAFETY: `offset` is inside the mapping (p lies in [first, end),
        // and the mapping is (end - first) pages long).
        Some(unsafe { self.base.add(offset) })
    }

    /// Whether every pfn of `[start, start + nr)` has a frame.
    pub(crate) fn covers(&self, start: Pfn, nr: u64) -> bool {
        start.get() >= self.first && start.get() + nr <= self.end
    }

    /// The frames `[start, start + nr)` (covered, page aligned) as bytes of
    /// the mapping: offset and length.
    fn span_of(&self, start: Pfn, nr: u64) -> (usize, usize) {
        debug_assert!(self.covers(start, nr));
        (
            ((start.get() - self.first) << self.page_shift) as usize,
            (nr << self.page_shift) as usize,
        )
    }

    /// Makes frames `[start, start + nr)` (covered, held by no one: a
    /// block just hot-added) pages of the frames' memfd, mapped shared at
    /// the same addresses, and returns them as that file's range for the
    /// memmap to be mapped onto too. Their contents start as zeros.
    pub(crate) fn share(&mut self, start: Pfn, nr: u64) -> Result<MemmapFrames<'_>, FramesError> {
        let share = |source| FramesError::Share { source };
        if self.shared.is_none() {
            self.shared =
                Some(span_memfd((self.end - self.first) << self.page_shift).map_err(share)?);
        }
        let (offset, len) = self.span_of(start, nr);
        let fd = self.shared.as_ref().ok_or(FramesError::NullMapping)?;
        // SAFETY: (1) the range is frames of the mapping (covered), which no
        // one holds (the caller's promise), so replacing them breaks no
        // reference; (2) the file is the span's length, so it covers
        // `offset + len`; (3) offset and len are whole pages.
        unsafe {
            map_fixed(
                self.base.as_ptr().add(offset),
                len,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                offset,
            )
        }
        .map_err(share)?;
        Ok(MemmapFrames {
            fd: fd.as_fd(),
            offset: offset as u64,
        })
    }

    /// memmap_on_memory on real frames: shares the first `vmemmap_pages`
    /// frames of the memory block at `first` (`block_pages`, absent) and
    /// has `model` hot-add the block with its memmap on them. On error the
    /// frames are private again and the block absent.
    pub(crate) fn host_memmap<M: MemoryModel>(
        &mut self,
        model: &mut M,
        first: Pfn,
        block_pages: u64,
        vmemmap_pages: u64,
    ) -> Result<(), FramesError> {
        let memmap_bytes = block_pages * std::mem::size_of::<M::Page>() as u64;
        if memmap_bytes > vmemmap_pages << self.page_shift {
            return Err(FramesError::Memmap(HotplugError::Unsupported(
                "the block's memmap is larger than the pfns its altmap gives it",
            )));
        }
        let on = self.share(first, vmemmap_pages)?;
        // SAFETY: (1) the shared frames are the block's first
        // `vmemmap_pages` pfns, self-hosted: the allocator never hands
        // them out, so only the memmap writes them, and they hold its
        // whole memmap (checked above); (2) a frame's offset in the span
        // is whole pages, host pages included (`PAGE_SHIFT` ≥ the host's).
        let mapped =
            unsafe { model.hot_add_memmap_on_frames(first, block_pages, vmemmap_pages, on) };
        if let Err(e) = mapped {
            self.unshare(first, vmemmap_pages)?;
            return Err(FramesError::Memmap(e));
        }
        Ok(())
    }

    /// Gives shared frames `[start, start + nr)` back: fresh private
    /// anonymous frames at their addresses, and the file's pages
    /// punched out. For a block being hot-removed, whose memmap no longer
    /// maps them.
    pub(crate) fn unshare(&mut self, start: Pfn, nr: u64) -> Result<(), FramesError> {
        let share = |source| FramesError::Share { source };
        let (offset, len) = self.span_of(start, nr);
        // SAFETY: (1) as in `share`: frames of the mapping no one holds;
        // (2) an anonymous mapping needs no file.
        unsafe {
            map_fixed(
                self.base.as_ptr().add(offset),
                len,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        }
        .map_err(share)?;
        if let Some(fd) = &self.shared {
            let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
            // SAFETY: our own descriptor; punching changes file contents
            // only, and no mapping of the range is left.
            if unsafe { libc::fallocate(fd.as_raw_fd(), mode, offset as i64, len as i64) } != 0 {
                return Err(share(io::Error::last_os_error()));
            }
        }
        Ok(())
    }

    /// `kernel_init_pages`: `clear_page` on every page of `block`, which
    /// the token proves the caller owns (taken off the lists, not yet
    /// handed out).
    #[inline]
    pub(crate) fn clear_block<P: BuddyPage>(&self, block: &OwnedBlock<P>) {
        let page = 1usize << self.page_shift;
        for i in 0..block.order().nr_pages() {
            if let Some(addr) = self.page_address(Pfn::new(block.pfn().get() + i)) {
                // SAFETY: a whole page inside the mapping whose block the
                // token's holder owns, so no one else writes it.
                unsafe { std::ptr::write_bytes(addr.as_ptr(), 0, page) };
            }
        }
    }
}

impl Frames {
    /// `folio_mc_copy`: the frames of block `src` copied onto those of
    /// block `dst`, `nr` pages each. The caller ([`crate::migrate_pages`])
    /// has just checked both as blocks the allocator handed out at the
    /// order of `nr`: `src` the block of an owner in a table it borrows
    /// mutably, `dst` a target held by no owner and disjoint from `src`.
    /// A pfn without a frame is left alone.
    ///
    /// # Panics
    ///
    /// If the two ranges overlap.
    pub(crate) fn copy_block(&self, src: Pfn, dst: Pfn, nr: u64) {
        assert!(
            src.get() + nr <= dst.get() || dst.get() + nr <= src.get(),
            "copy_block: {src} and {dst} overlap over {nr} pages"
        );
        if !self.covers(src, nr) || !self.covers(dst, nr) {
            return;
        }
        let (from, len) = self.span_of(src, nr);
        let (to, _) = self.span_of(dst, nr);
        // SAFETY: 1. both ranges lie inside the mapping (`covers`);
        // 2. they do not overlap (asserted above);
        // 3. no one else writes either frame meanwhile. `src` heads a
        // block allocated at this order whose owner's table the migration
        // holds `&mut`, and `page_address`'s contract lets no one write an
        // owned frame beside a migration; a block freed while owned was
        // refused by the re-check unless it was handed out again at the
        // same order, and its new holder's `page_address` contract then
        // excludes a block a table still names. `dst` is allocated and
        // held by no owner: the target callback gave it to the migration.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.base.as_ptr().add(from),
                self.base.as_ptr().add(to),
                len,
            );
        }
    }
}

/// A sparse memfd of `len` bytes for shared frames.
fn span_memfd(len: u64) -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated name; the returned descriptor is checked.
    let raw = unsafe { libc::memfd_create(c"pfnlab-frames".as_ptr(), libc::MFD_CLOEXEC) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor no one else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let size = libc::off_t::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "memfd size overflows"))?;
    // SAFETY: our own descriptor.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// `mmap(addr, len, RW, flags | MAP_FIXED | MAP_NORESERVE, fd, offset)`.
///
/// # Safety
/// - `[addr, addr + len)` lies in a mapping the caller owns and no
///   reference into it is alive;
/// - `addr`, `len` and `offset` are page aligned, and `fd` (if not -1)
///   is a file at least `offset + len` bytes long.
unsafe fn map_fixed(
    addr: *mut u8,
    len: usize,
    flags: libc::c_int,
    fd: libc::c_int,
    offset: usize,
) -> io::Result<()> {
    let off = libc::off_t::try_from(offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset overflows"))?;
    // SAFETY: the caller's contract: the range is theirs to replace.
    let got = unsafe {
        libc::mmap(
            addr.cast(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags | libc::MAP_FIXED | libc::MAP_NORESERVE,
            fd,
            off,
        )
    };
    if got == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    debug_assert_eq!(got.cast::<u8>(), addr);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sparsemem::{Geometry, MemRange, RangeKind};

    /// A span beyond the address-space limit is refused, naming both; a
    /// layout with more RAM than this machine maps (nothing is touched).
    #[test]
    fn the_limit_is_address_space() {
        let far = Layout::new(
            Geometry::X86_64_LA57,
            vec![
                MemRange::new(0, 1 << 30, RangeKind::Ram, 0),
                MemRange::new(100 << 40, (100 << 40) + (1 << 30), RangeKind::Ram, 0),
            ],
            "100 TiB apart",
        )
        .unwrap();
        let Err(e @ FramesError::TooLarge { .. }) = Frames::new(&far) else {
            panic!("a 100 TiB span was accepted");
        };
        let why = e.to_string();
        assert!(why.contains("more than the 65536 GiB limit"), "{why}");
        let big = Layout::new(
            Geometry::X86_64,
            vec![MemRange::new(1 << 30, 65 << 30, RangeKind::Ram, 0)],
            "64 GiB",
        )
        .unwrap();
        let frames = Frames::new(&big).unwrap();
        assert!(frames.covers(Pfn::new(1 << 18), 1 << 18));
        assert!(!frames.covers(Pfn::new((1 << 18) - 1), 1));
        assert!(frames.page_address(Pfn::new(65 << 18)).is_none());
    }
}
