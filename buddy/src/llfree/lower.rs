//! The lower allocator: which base frames of each huge frame are taken.
//!
//! Memory is cut into huge frames of [`HUGE_FRAMES`] base frames (2 MiB of
//! 4 KiB frames, order [`HUGE_ORDER`]). Each huge frame has
//!
//! - a [`Bitfield`] of 512 bits, one per base frame (set: allocated), in
//!   eight `u64` words that fill one cache line, and
//! - a [`Child`] entry of 16 bits: how many of its 512 frames are free, and
//!   whether the whole huge frame is allocated as one (its bits then stay
//!   clear and its counter 0).
//!
//! An allocation of order 0 to 8 first takes `1 << order` from the child's
//! counter (a compare-and-swap that fails when too few are free or the
//! huge flag is set), then claims an aligned run of clear bits with a
//! compare-and-swap on the word (orders 7 and 8 claim two or four whole
//! words one at a time and give them back if one is taken). When no
//! aligned run is found the counter is given back and the caller tries the
//! next huge frame. A free clears the bits first and adds to the counter
//! after, so the counter never promises a frame whose bit is still set.
//! An order-9 allocation swaps the child from "512 free" to "huge, 0 free"
//! in one step, and its free swaps it back.
//!
//! Beyond the paper, each base frame has a byte saying which order's live
//! allocation starts there (0: none). The paper's allocator trusts the
//! caller's frame and order, as the kernel's callers are trusted; pfnlab
//! keeps the byte so that a double free, a free of a frame never handed
//! out or a free with the wrong order is refused before any bit changes.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU8, AtomicU16, AtomicU64};

use super::LlfreeError;

/// Order of a huge frame: 512 base frames, 2 MiB of 4 KiB frames.
pub const HUGE_ORDER: u8 = 9;
/// Base frames in a huge frame.
pub const HUGE_FRAMES: u64 = 1 << HUGE_ORDER;
/// Words of a bitfield.
const WORDS: usize = (HUGE_FRAMES / 64) as usize;

/// One huge frame's allocation bits: bit `i` of word `w` is base frame
/// `64 * w + i`, set while it is allocated. One cache line, so the
/// compare-and-swaps of one huge frame touch one line.
#[repr(align(64))]
#[derive(Default)]
pub(super) struct Bitfield([AtomicU64; WORDS]);

const _: () = assert!(size_of::<Bitfield>() == 64 && align_of::<Bitfield>() == 64);

/// A bit at every `n`-th position of a word, `n` a power of two up to 64:
/// the positions where a run of `n` frames is aligned.
const fn aligned_starts(n: u32) -> u64 {
    if n == 64 {
        1
    } else {
        u64::MAX / ((1u64 << n) - 1)
    }
}

/// The first aligned run of `n` clear bits in `word` (`n` a power of two
/// up to 64), as its first bit.
pub(super) fn first_free_run(word: u64, n: u32) -> Option<u32> {
    // Bit i of `run` ends up set when bits i .. i + width are all clear;
    // doubling the width each step reaches `n` in log2(n) steps.
    let mut run = !word;
    let mut width = 1;
    while width < n {
        run &= run >> width;
        width <<= 1;
    }
    let hits = run & aligned_starts(n);
    (hits != 0).then(|| hits.trailing_zeros())
}

/// The mask of a run of `n` bits (`n` up to 64) starting at bit 0.
const fn run_mask(n: u32) -> u64 {
    if n == 64 { u64::MAX } else { (1u64 << n) - 1 }
}

impl Bitfield {
    /// A bitfield whose first `present` frames are clear and the rest set
    /// (frames past the end of memory are never free).
    fn with_present(present: u64) -> Bitfield {
        let field = Bitfield::default();
        for (w, word) in field.0.iter().enumerate() {
            let first = w as u64 * 64;
            let clear = present.saturating_sub(first).min(64) as u32;
            word.store(!run_mask(clear), Relaxed);
        }
        field
    }

    /// Claims an aligned run of `1 << order` clear bits (`order` up to 8):
    /// its first bit, or `None` when there is no such run.
    ///
    /// Each claim is a compare-and-swap with `AcqRel`: it acquires the
    /// clearing `fetch_and` ([`Bitfield::clear`], `Release`) of the free it
    /// reads, so the frame's last owner is done with it before it is
    /// handed out again.
    pub(super) fn take(&self, order: u8) -> Option<u32> {
        let n = 1u32 << order;
        if n > 64 {
            return self.take_words(n as usize / 64);
        }
        for (w, word) in self.0.iter().enumerate() {
            let mut cur = word.load(Relaxed);
            while let Some(bit) = first_free_run(cur, n) {
                let new = cur | (run_mask(n) << bit);
                match word.compare_exchange_weak(cur, new, AcqRel, Relaxed) {
                    Ok(_) => return Some(w as u32 * 64 + bit),
                    Err(actual) => cur = actual,
                }
            }
        }
        None
    }

    /// Claims `count` whole, aligned words (orders 7 and 8), one at a time;
    /// a group with a taken word gives back the words it claimed.
    fn take_words(&self, count: usize) -> Option<u32> {
        for start in (0..WORDS).step_by(count) {
            let group = &self.0[start..start + count];
            let claimed = group
                .iter()
                .take_while(|w| w.compare_exchange(0, u64::MAX, AcqRel, Relaxed).is_ok())
                .count();
            if claimed == count {
                return Some(start as u32 * 64);
            }
            // The claimed words are this call's alone: no other allocation
            // sees a clear bit in them, and no free passes the head check
            // for a frame in them. `Release` as in `clear`.
            for w in &group[..claimed] {
                w.store(0, Release);
            }
        }
        None
    }

    /// Clears the `1 << order` bits from `bit` (order up to 8), which the
    /// caller owns. `Release` pairs with the `AcqRel` claim of the next
    /// allocation of these frames.
    fn clear(&self, bit: u32, order: u8) {
        let n = 1u32 << order;
        if n >= 64 {
            let first = bit as usize / 64;
            for w in &self.0[first..first + n as usize / 64] {
                let old = w.swap(0, Release);
                debug_assert_eq!(old, u64::MAX, "a claimed word was all set");
            }
        } else {
            let mask = run_mask(n) << (bit % 64);
            let old = self.0[bit as usize / 64].fetch_and(!mask, Release);
            debug_assert_eq!(old & mask, mask, "a claimed run was all set");
        }
    }

    /// Set bits: allocated (or absent) frames.
    #[cfg(test)]
    pub(super) fn count_set(&self) -> u32 {
        self.0.iter().map(|w| w.load(Relaxed).count_ones()).sum()
    }
}

/// A huge frame's child entry: its free counter (0 ..= 512) in bits 0..10
/// and the "allocated as a huge frame" flag in bit 15.
///
/// Invariants: the counter is at most the bitfield's clear bits; while the
/// huge flag is set the counter is 0 and every bit of the bitfield is
/// clear.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Child(u16);

impl Child {
    const HUGE: u16 = 1 << 15;
    const FREE: u16 = (1 << 10) - 1;

    /// An entry with `free` frames free and the huge flag `huge`.
    pub(super) const fn new(free: u16, huge: bool) -> Child {
        Child((free & Child::FREE) | if huge { Child::HUGE } else { 0 })
    }

    /// Free base frames.
    pub(super) const fn free(self) -> u16 {
        self.0 & Child::FREE
    }

    /// Whether the huge frame is allocated as one.
    pub(super) const fn huge(self) -> bool {
        self.0 & Child::HUGE != 0
    }
}

/// Every huge frame's bitfield and child entry, and each base frame's head
/// byte (the order + 1 of the live allocation it starts, 0 when none).
pub(super) struct Lower {
    nr_frames: u64,
    bitfields: Box<[Bitfield]>,
    children: Box<[AtomicU16]>,
    heads: Box<[AtomicU8]>,
}

impl Lower {
    /// `nr_frames` base frames, all free; the last huge frame may be
    /// partial (its missing frames are set and never free).
    pub(super) fn new(nr_frames: u64) -> Lower {
        let nr_huge = nr_frames.div_ceil(HUGE_FRAMES);
        let present = |i: u64| (nr_frames - i * HUGE_FRAMES).min(HUGE_FRAMES);
        Lower {
            nr_frames,
            bitfields: (0..nr_huge)
                .map(|i| Bitfield::with_present(present(i)))
                .collect(),
            children: (0..nr_huge)
                .map(|i| AtomicU16::new(Child::new(present(i) as u16, false).0))
                .collect(),
            heads: (0..nr_frames).map(|_| AtomicU8::new(0)).collect(),
        }
    }

    /// Base frames.
    pub(super) fn nr_frames(&self) -> u64 {
        self.nr_frames
    }

    /// Huge frames, the last perhaps partial.
    pub(super) fn nr_huge(&self) -> usize {
        self.children.len()
    }

    /// Huge frame `child`'s entry.
    pub(super) fn child(&self, child: usize) -> Child {
        Child(self.children[child].load(Relaxed))
    }

    /// A block of `order` (up to [`HUGE_ORDER`]) from huge frame `child`:
    /// its first frame, or `None` when the huge frame has no aligned run.
    pub(super) fn get(&self, child: usize, order: u8) -> Option<u64> {
        if order == HUGE_ORDER {
            return self.get_huge(child);
        }
        let n = 1u16 << order;
        let entry = &self.children[child];
        // `Acquire` pairs with the `Release` increment of `put`, so the
        // bits that free cleared are visible to the search below.
        entry
            .fetch_update(Acquire, Relaxed, |c| {
                let c = Child(c);
                (!c.huge() && c.free() >= n).then(|| Child::new(c.free() - n, false).0)
            })
            .ok()?;
        match self.bitfields[child].take(order) {
            Some(bit) => {
                let frame = child as u64 * HUGE_FRAMES + u64::from(bit);
                // `Release` pairs with the head check's `Acquire` in `put`:
                // a free that sees this head sees the claimed bits.
                self.heads[frame as usize].store(order + 1, Release);
                Some(frame)
            }
            None => {
                // `Release` as in `put`. The counter stays below 512: it
                // had at least `n` before this call took them.
                entry.fetch_add(n, Release);
                None
            }
        }
    }

    /// Huge frame `child` as one block: its counter from 512 to 0 with the
    /// huge flag set, in one compare-and-swap (`Acquire` as in `get`).
    fn get_huge(&self, child: usize) -> Option<u64> {
        let whole = Child::new(HUGE_FRAMES as u16, false).0;
        self.children[child]
            .compare_exchange(whole, Child::new(0, true).0, Acquire, Relaxed)
            .ok()?;
        let frame = child as u64 * HUGE_FRAMES;
        self.heads[frame as usize].store(HUGE_ORDER + 1, Release);
        Some(frame)
    }

    /// Frees the block of `order` at `frame` (in range and aligned, which
    /// the caller checked), refusing a frame that does not start a live
    /// block of that order.
    pub(super) fn put(&self, frame: u64, order: u8) -> Result<(), LlfreeError> {
        // The head swap claims this free: of two racing frees one wins.
        // `Acquire` pairs with the `Release` store of `get`.
        if let Err(held) =
            self.heads[frame as usize].compare_exchange(order + 1, 0, Acquire, Relaxed)
        {
            return Err(match held {
                0 => LlfreeError::NotAllocated { frame, order },
                _ => LlfreeError::WrongOrder {
                    frame,
                    order,
                    allocated: held - 1,
                },
            });
        }
        let child = (frame / HUGE_FRAMES) as usize;
        let entry = &self.children[child];
        if order == HUGE_ORDER {
            // The block is the caller's: nothing else writes this entry
            // while it is huge. `Release` as below.
            let old = entry.swap(Child::new(HUGE_FRAMES as u16, false).0, Release);
            debug_assert_eq!(Child(old), Child::new(0, true), "a huge block's entry");
            return Ok(());
        }
        self.bitfields[child].clear((frame % HUGE_FRAMES) as u32, order);
        // `Release` pairs with the counter's `Acquire` in `get`: whoever
        // takes these frames from the counter sees their bits clear.
        let old = Child(entry.fetch_add(1 << order, Release));
        debug_assert!(
            u64::from(old.free()) + (1 << order) <= HUGE_FRAMES,
            "huge frame {child} counter {} + {} past its frames",
            old.free(),
            1u64 << order
        );
        Ok(())
    }

    /// Free base frames: the sum of the counters.
    pub(super) fn free_frames(&self) -> u64 {
        (0..self.nr_huge())
            .map(|c| u64::from(self.child(c).free()))
            .sum()
    }

    /// Huge frames whose 512 frames are all free.
    pub(super) fn free_huge_frames(&self) -> u64 {
        (0..self.nr_huge())
            .filter(|&c| u64::from(self.child(c).free()) == HUGE_FRAMES)
            .count() as u64
    }

    /// Set bits of huge frame `child`'s bitfield.
    #[cfg(test)]
    pub(super) fn bits_set(&self, child: usize) -> u32 {
        self.bitfields[child].count_set()
    }
}

#[cfg(test)]
#[path = "lower_tests.rs"]
mod tests;
