//! The floor: the least a buddy allocator can do.
//!
//! A minimal intrusive buddy: one descriptor per frame in an array, free
//! lists threaded through the descriptors by index, the buddy found by XOR,
//! and nothing else — no lock, no per-CPU lists, no zones, no statistics,
//! no misuse checks, no memory model (the array is indexed directly).
//! `bench peers` times it on the same workloads as pfnlab and the peer
//! crates, in the same run, so that pfnlab's cost over the floor is measured
//! rather than quoted. It is written in safe Rust: a bounds check per
//! descriptor access is the only cost it pays beyond the algorithm.

use sparsemem::{Layout, Pfn};

use crate::error::PeerError;
use crate::workloads::Frames;

/// No descriptor: the end of a list.
const NIL: u32 = u32::MAX;

/// One frame's descriptor: list links, and the order while it heads a free
/// block.
#[derive(Clone, Copy)]
struct FloorPage {
    next: u32,
    prev: u32,
    /// The order of the free block it heads, or `u8::MAX` when it heads
    /// none.
    free_order: u8,
}

/// A free block of order `o` is `heads[o]`, linked through `desc`.
///
/// Invariants: `base` is aligned to the largest block, so an index and its
/// pfn have the same low bits and the buddy of index `i` at order `o` is
/// `i ^ (1 << o)`; a descriptor heads a free block of order `o` exactly when
/// it is on list `o` and its `free_order` is `o`.
pub struct FloorBuddy {
    base: u64,
    desc: Vec<FloorPage>,
    heads: Vec<u32>,
}

impl FloorBuddy {
    /// A buddy over the layout's RAM with blocks up to the geometry's
    /// `MAX_PAGE_ORDER`; holes between ranges are never free.
    pub fn new(layout: &Layout) -> Result<FloorBuddy, PeerError> {
        let max_order = layout.geometry().max_order().get();
        let block = 1u64 << max_order;
        let (lo, hi) = layout.pfn_span();
        let base = lo.get() & !(block - 1);
        let len = hi.get().next_multiple_of(block) - base;
        if len >= u64::from(NIL) {
            return Err(PeerError::FloorTooLarge { frames: len });
        }
        let mut floor = FloorBuddy {
            base,
            desc: vec![
                FloorPage {
                    next: NIL,
                    prev: NIL,
                    free_order: u8::MAX,
                };
                len as usize
            ],
            heads: vec![NIL; usize::from(max_order) + 1],
        };
        for (_, first, end) in layout.ram_ranges() {
            let mut pfn = first.get();
            while pfn < end.get() {
                let mut order = pfn.trailing_zeros().min(u32::from(max_order));
                while pfn + (1 << order) > end.get() {
                    order -= 1;
                }
                floor.free(Pfn::new(pfn), order as u8);
                pfn += 1 << order;
            }
        }
        Ok(floor)
    }

    fn push(&mut self, i: u32, order: u8) {
        let head = self.heads[usize::from(order)];
        self.desc[i as usize] = FloorPage {
            next: head,
            prev: NIL,
            free_order: order,
        };
        if head != NIL {
            self.desc[head as usize].prev = i;
        }
        self.heads[usize::from(order)] = i;
    }

    fn unlink(&mut self, i: u32, order: u8) {
        let FloorPage { next, prev, .. } = self.desc[i as usize];
        if prev == NIL {
            self.heads[usize::from(order)] = next;
        } else {
            self.desc[prev as usize].next = next;
        }
        if next != NIL {
            self.desc[next as usize].prev = prev;
        }
        self.desc[i as usize].free_order = u8::MAX;
    }

    /// A block of `order`: the smallest free block that fits, split down.
    #[inline]
    pub fn alloc(&mut self, order: u8) -> Option<Pfn> {
        let mut current = order;
        let i = loop {
            let head = *self.heads.get(usize::from(current))?;
            if head != NIL {
                break head;
            }
            current += 1;
        };
        self.unlink(i, current);
        while current > order {
            current -= 1;
            self.push(i + (1 << current), current);
        }
        Some(Pfn::new(self.base + u64::from(i)))
    }

    /// Frees a block of `order`, merging with free buddies.
    #[inline]
    pub fn free(&mut self, pfn: Pfn, order: u8) {
        let mut i = (pfn.get() - self.base) as u32;
        let mut order = order;
        let max = (self.heads.len() - 1) as u8;
        while order < max {
            let buddy = i ^ (1 << order);
            if self.desc[buddy as usize].free_order != order {
                break;
            }
            self.unlink(buddy, order);
            i &= buddy;
            order += 1;
        }
        self.push(i, order);
    }

    /// Free frames on the lists.
    pub fn free_frames(&self) -> u64 {
        let mut total = 0;
        for (order, &head) in self.heads.iter().enumerate() {
            let mut i = head;
            while i != NIL {
                total += 1 << order;
                i = self.desc[i as usize].next;
            }
        }
        total
    }
}

// The trait's `free_frame` is an `unsafe fn` (some peers trust the frame);
// the floor checks nothing it could break, and its body needs no unsafe.
#[allow(unsafe_code)]
impl Frames for FloorBuddy {
    #[inline]
    fn alloc_frame(&mut self) -> Option<u64> {
        self.alloc(0).map(Pfn::get)
    }
    #[inline]
    unsafe fn free_frame(&mut self, frame: u64) {
        self.free(Pfn::new(frame), 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_allocates_ram_only_and_merges_back() {
        let layout = Layout::new(
            sparsemem::Geometry::X86_64,
            vec![
                sparsemem::MemRange::new(0x1000, 0x9f000, sparsemem::RangeKind::Ram, 0),
                sparsemem::MemRange::new(0x100000, 16 << 20, sparsemem::RangeKind::Ram, 0),
            ],
            "small",
        )
        .unwrap();
        let ram: u64 = layout.ram_ranges().map(|(_, a, b)| b.get() - a.get()).sum();
        let mut floor = FloorBuddy::new(&layout).unwrap();
        assert_eq!(floor.free_frames(), ram);
        let mut taken = Vec::new();
        while let Some(p) = floor.alloc(0) {
            let inside = layout.ram_ranges().any(|(_, a, b)| a <= p && p < b);
            assert!(inside, "{p} is a hole");
            taken.push(p);
        }
        assert_eq!(taken.len() as u64, ram);
        taken.sort_unstable();
        taken.dedup();
        assert_eq!(taken.len() as u64, ram, "no frame twice");
        for p in taken {
            floor.free(p, 0);
        }
        assert_eq!(floor.free_frames(), ram);
        let big = floor.alloc(10).expect("merged back to max-order blocks");
        assert_eq!(big.get() % 1024, 0);
    }
}
