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
//! # Safety
//! The mapping lives as long as the allocator; [`Frames::page_address`]
//! hands out addresses inside it. The allocator writes a block's frames only
//! while it owns the block (between taking it off a list and handing it
//! out), so no two writers touch the same frame through it. What a caller
//! does with an address is the caller's `unsafe`.

use std::ptr::NonNull;

use memmap2::{MmapMut, MmapOptions};
use sparsemem::{BuddyPage, Layout, Pfn};

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
            FramesError::Mmap { source, .. } => Some(source),
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
