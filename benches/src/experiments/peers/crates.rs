//! The peer crates behind the [`Frames`] interface the `peers` workloads
//! use (feature `peers`): `buddy_system_allocator`'s `FrameAllocator`,
//! `frame-alloc`'s lock-free `SummaryBuddyAllocator`, and
//! `bitmap-allocator`'s segment-tree `BitAlloc16M`. Each is built over the
//! same memory: a layout's RAM in whole max-order blocks, holes between
//! blocks reserved.
//!
//! # Safety
//! Two of the crates ask for unsafe calls: `frame-alloc` keeps its bitmap
//! inside the memory it manages, so it gets a real `MAP_NORESERVE`
//! mapping of the span (only its metadata pages are ever touched), reached
//! through exposed provenance, and its free is `unsafe` because it trusts
//! the address; `bitmap-allocator`'s 2 MiB tree is allocated zeroed on the
//! heap (all-zero is its `DEFAULT`, every bit taken) rather than built on
//! the stack.

use std::num::NonZeroUsize;
use std::ptr::NonNull;

use bitmap_allocator::{BitAlloc, BitAlloc16M};
use frame_alloc::{
    PageSize, PhysRange, PhysicalAllocator, Provenance, RegionInit, SummaryBuddyAllocator,
};
use sparsemem::Layout;
use vmemmap::reserve::{HoleStyle, Reservation};

use crate::error::PeerError;
use crate::workloads::{Frames, SharedFrames};

impl<const ORDER: usize> Frames for buddy_system_allocator::FrameAllocator<ORDER> {
    #[inline]
    fn alloc_frame(&mut self) -> Option<u64> {
        self.alloc(1).map(|f| f as u64)
    }
    #[inline]
    unsafe fn free_frame(&mut self, frame: u64) {
        self.dealloc(frame as usize, 1);
    }
}

/// `buddy_system_allocator`'s `FrameAllocator<11>` (max order 10) over the
/// RAM of `blocks`.
pub fn frame_allocator(blocks: &Layout) -> buddy_system_allocator::FrameAllocator<11> {
    let mut fa = buddy_system_allocator::FrameAllocator::<11>::new();
    for (_, first, end) in blocks.ram_ranges() {
        fa.add_frame(first.get() as usize, end.get() as usize);
    }
    fa
}

/// `frame-alloc`'s provenance strategy here: a "physical" address is an
/// address in our own mapping, whose provenance was exposed when it was
/// made.
pub struct ExposedMapping;

// SAFETY: `create` returns a pointer with the provenance the mapping
// exposed (`Reservation::base().expose_provenance()` in
// `SummaryBuddy::new`) for every address the allocator is given, all of
// which lie in that live mapping; `destroy` only reads the address.
unsafe impl Provenance for ExposedMapping {
    unsafe fn create(phys: usize) -> NonNull<u8> {
        // SAFETY: the allocator only asks for addresses of the mapping it was
        // initialised over, which are never null.
        unsafe { NonNull::new_unchecked(std::ptr::with_exposed_provenance_mut(phys)) }
    }
    unsafe fn destroy<T>(ptr: NonNull<T>) -> usize {
        ptr.addr().get()
    }
}

/// Frame size of the frame-alloc peer: 4 KiB.
const BASE_FRAME: PageSize = PageSize::from_log2(12);
/// Orders 0..=10, as pfnlab's x86_64 `MAX_PAGE_ORDER`.
const ORDERS: usize = 11;
/// Its largest block, which the span's base must be aligned to.
const MAX_BLOCK_BYTES: usize = BASE_FRAME.bytes() << (ORDERS - 1);

/// `frame-alloc`'s `SummaryBuddyAllocator` over a mapping of the span.
pub struct SummaryBuddy {
    alloc: SummaryBuddyAllocator<ORDERS, ExposedMapping>,
    /// Address of pfn `first_pfn`.
    base: usize,
    first_pfn: u64,
    _mapping: Reservation,
}

impl SummaryBuddy {
    /// The allocator over the RAM of `blocks` (a 4 KiB-page layout), with a
    /// `MAP_NORESERVE` mapping of the whole span as its pool.
    pub fn new(blocks: &Layout) -> Result<SummaryBuddy, PeerError> {
        if blocks.geometry().page_shift() != 12 {
            return Err(PeerError::PageSize);
        }
        let (lo, hi) = blocks.pfn_span();
        let span = ((hi.get() - lo.get()) << 12) as usize;
        let mapping = Reservation::new(span + MAX_BLOCK_BYTES, HoleStyle::Missing, false)
            .map_err(PeerError::Pool)?;
        let base = mapping
            .base()
            .expose_provenance()
            .next_multiple_of(MAX_BLOCK_BYTES);
        let usable: Vec<PhysRange> = blocks
            .ram_ranges()
            .map(|(_, first, end)| PhysRange {
                base: base + ((first.get() - lo.get()) << 12) as usize,
                len: ((end.get() - first.get()) << 12) as usize,
            })
            .collect();
        let alloc = SummaryBuddyAllocator::new(BASE_FRAME);
        // SAFETY: (1) the span and every usable range lie in `mapping`, which
        // this value owns and keeps alive, readable and writable, and whose
        // provenance was exposed above for `ExposedMapping`; (2) nothing else
        // aliases it; (3) called once, on this thread, before the allocator
        // is shared (moving it into the returned value is the publication).
        unsafe { alloc.try_init(base, span, &usable) }.map_err(|e| PeerError::Refused {
            peer: "frame-alloc",
            message: e.to_string(),
        })?;
        Ok(SummaryBuddy {
            alloc,
            base,
            first_pfn: lo.get(),
            _mapping: mapping,
        })
    }
}

const ONE: NonZeroUsize = NonZeroUsize::MIN;

impl SharedFrames for SummaryBuddy {
    #[inline]
    fn alloc_frame(&self) -> Option<u64> {
        let addr = self.alloc.allocate_physical(BASE_FRAME, ONE).ok()?;
        Some(((addr - self.base) >> 12) as u64 + self.first_pfn)
    }
    #[inline]
    unsafe fn free_frame(&self, frame: u64) {
        let addr = self.base + ((frame - self.first_pfn) << 12) as usize;
        // SAFETY: the caller promises `frame` came from `alloc_frame`, so
        // `addr` is an address `allocate_physical` returned for one base
        // frame and not yet given back.
        unsafe { self.alloc.deallocate_physical(BASE_FRAME, ONE, addr) };
    }
}

impl Frames for SummaryBuddy {
    #[inline]
    fn alloc_frame(&mut self) -> Option<u64> {
        SharedFrames::alloc_frame(&*self)
    }
    #[inline]
    unsafe fn free_frame(&mut self, frame: u64) {
        // SAFETY: the caller's promise, passed on.
        unsafe { SharedFrames::free_frame(&*self, frame) }
    }
}

/// `bitmap-allocator`'s 16M-bit segment tree over the RAM of `blocks`
/// (bit `i` is pfn `first + i`).
pub struct SegmentTree {
    tree: Box<BitAlloc16M>,
    first_pfn: u64,
}

impl SegmentTree {
    /// The tree with the RAM of `blocks` inserted; spans over 16M frames
    /// are refused.
    pub fn new(blocks: &Layout) -> Result<SegmentTree, PeerError> {
        let (lo, hi) = blocks.pfn_span();
        if (hi.get() - lo.get()) as usize > BitAlloc16M::CAP {
            return Err(PeerError::TooManyFrames {
                capacity: BitAlloc16M::CAP,
                frames: hi.get() - lo.get(),
            });
        }
        // SAFETY: `BitAlloc16M` is nested arrays of `u16` bitsets, so every
        // bit pattern is a valid value, and all-zero is its `DEFAULT` (no
        // bit available).
        let mut tree = unsafe { Box::<BitAlloc16M>::new_zeroed().assume_init() };
        for (_, first, end) in blocks.ram_ranges() {
            tree.insert((first.get() - lo.get()) as usize..(end.get() - lo.get()) as usize);
        }
        Ok(SegmentTree {
            tree,
            first_pfn: lo.get(),
        })
    }
}

impl Frames for SegmentTree {
    #[inline]
    fn alloc_frame(&mut self) -> Option<u64> {
        self.tree.alloc().map(|i| i as u64 + self.first_pfn)
    }
    #[inline]
    unsafe fn free_frame(&mut self, frame: u64) {
        self.tree.dealloc((frame - self.first_pfn) as usize);
    }
}

/// [`SummaryBuddy`] for `bench scale`: blocks of any order up to 10, its
/// frees checked as pfnlab's LLFree checks them (a byte per frame holding
/// the order of the live block that starts there, cleared by one
/// compare-and-swap), so that a safe call can never hand the crate's
/// trusting `deallocate_physical` a block it did not hand out.
pub struct CheckedSummaryBuddy {
    inner: SummaryBuddy,
    /// Per frame from `first_pfn`: 0 free or inside a block, `order + 1`
    /// where a live block of that order starts.
    live: Box<[std::sync::atomic::AtomicU8]>,
}

impl CheckedSummaryBuddy {
    /// The allocator over the RAM of `blocks` ([`SummaryBuddy::new`]).
    pub fn new(blocks: &Layout) -> Result<CheckedSummaryBuddy, PeerError> {
        let inner = SummaryBuddy::new(blocks)?;
        let (lo, hi) = blocks.pfn_span();
        let live = (lo.get()..hi.get())
            .map(|_| std::sync::atomic::AtomicU8::new(0))
            .collect();
        Ok(CheckedSummaryBuddy { inner, live })
    }

    /// A block of `1 << order` frames: its first frame.
    pub fn alloc_block(&self, order: u8) -> Option<u64> {
        let count = NonZeroUsize::new(1usize.checked_shl(order.into())?)?;
        let addr = self.inner.alloc.allocate_physical(BASE_FRAME, count).ok()?;
        let frame = ((addr - self.inner.base) >> 12) as u64 + self.inner.first_pfn;
        // Release pairs with the Acquire of the compare-and-swap in
        // `free_block`: the free sees the block as this call left it.
        self.live[(frame - self.inner.first_pfn) as usize]
            .store(order + 1, std::sync::atomic::Ordering::Release);
        Some(frame)
    }

    /// Gives back the block of `order` at `frame`; false (and nothing
    /// changes) unless `alloc_block` returned it with that order and it
    /// was not given back since.
    pub fn free_block(&self, frame: u64, order: u8) -> bool {
        use std::sync::atomic::Ordering;
        let Some(slot) = frame
            .checked_sub(self.inner.first_pfn)
            .and_then(|i| self.live.get(i as usize))
        else {
            return false;
        };
        let Some(count) = 1usize.checked_shl(order.into()).and_then(NonZeroUsize::new) else {
            return false;
        };
        if slot
            .compare_exchange(order + 1, 0, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        let addr = self.inner.base + ((frame - self.inner.first_pfn) << 12) as usize;
        // SAFETY: the compare-and-swap above took the mark `alloc_block`
        // left for exactly this frame and order, so (1) `addr` is the address
        // `allocate_physical` returned for `count` base frames, and (2) no
        // other call can give it back, the mark being gone.
        unsafe {
            self.inner
                .alloc
                .deallocate_physical(BASE_FRAME, count, addr)
        };
        true
    }
}
