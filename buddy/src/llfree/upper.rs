//! The upper allocator: trees of huge frames, and each CPU's reservation.
//!
//! [`TREE_CHILDREN`] huge frames make a tree. A tree's entry (a [`Tree`]
//! in one `AtomicU32`) holds its free counter, a reserved flag and the
//! class of the last reservation that allocated from it. A CPU allocates
//! from the tree it reserved: reserving moves the tree's whole counter
//! into the CPU's [`Local`] (one per CPU and class), so that the CPU's
//! allocations decrement a counter no other CPU writes, and sets the flag
//! so that no other CPU reserves it. Frees into a tree the CPU holds go
//! to its local counter; frees into any other tree go to the tree's
//! entry, and the holder takes them over ("steals" the counter) when its
//! local one runs short. When the tree cannot serve a request, the CPU
//! reserves another and returns the old one's counter to its entry.
//!
//! # Orderings
//! The counters here only steer the search: every frame is claimed by the
//! lower allocator's own compare-and-swaps, which carry the orderings that
//! matter. Each counter update is one atomic read-modify-write, so no
//! count is lost whatever the ordering, and an out-of-date plain load is
//! checked by the compare-and-swap that follows it. So every atomic of
//! this module is `Relaxed`.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU32, AtomicU64};

use super::Class;
use super::lower::{HUGE_FRAMES, HUGE_ORDER, Lower};

/// Huge frames in a tree: 32, as in the paper (16,384 base frames,
/// 64 MiB of 4 KiB frames).
pub const TREE_CHILDREN: usize = 32;
/// Base frames in a tree.
pub const TREE_FRAMES: u64 = TREE_CHILDREN as u64 * HUGE_FRAMES;

/// A tree's entry: free counter in bits 0..16 (at most [`TREE_FRAMES`]),
/// the reserved flag in bit 16, the class in bit 17 (set: movable).
///
/// Invariant: bits above 17 are clear; the counter never carries into the
/// flag, because a tree's free frames never exceed [`TREE_FRAMES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tree(u32);

impl Tree {
    const FREE: u32 = 0xffff;
    const RESERVED: u32 = 1 << 16;
    const MOVABLE: u32 = 1 << 17;

    fn free(self) -> u64 {
        u64::from(self.0 & Tree::FREE)
    }

    fn reserved(self) -> bool {
        self.0 & Tree::RESERVED != 0
    }

    fn class(self) -> Class {
        if self.0 & Tree::MOVABLE != 0 {
            Class::Movable
        } else {
            Class::Immovable
        }
    }

    /// The class bit of `class`.
    fn class_bit(class: Class) -> u32 {
        match class {
            Class::Movable => Tree::MOVABLE,
            Class::Immovable => 0,
        }
    }

    /// Reserved for `class`, its counter taken (0).
    fn reserved_for(class: Class) -> Tree {
        Tree(Tree::RESERVED | Tree::class_bit(class))
    }

    /// Not reserved, `free` more frames counted, labelled `class`.
    fn returned(self, free: u64, class: Class) -> Tree {
        let sum = self.free() + free;
        debug_assert!(sum <= TREE_FRAMES, "tree counter {sum} past its frames");
        Tree(Tree::class_bit(class) | sum as u32)
    }
}

const _: () = assert!(TREE_FRAMES <= Tree::FREE as u64);

/// Which trees a reservation search accepts, in the order the searches
/// run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pass {
    /// Partly used trees of the same class with at least a sixteenth of
    /// their frames free: fills used trees first and keeps free trees
    /// whole.
    Partial,
    /// Entirely free trees.
    Free,
    /// Any tree with enough frames, of either class.
    Any,
}

impl Pass {
    /// The searches, preferred first.
    pub(super) const ALL: [Pass; 3] = [Pass::Partial, Pass::Free, Pass::Any];

    /// Whether a tree of `capacity` frames in state `tree` may serve `n`
    /// frames of `class`.
    fn accepts(self, tree: Tree, capacity: u64, n: u64, class: Class) -> bool {
        let free = tree.free();
        if tree.reserved() || free < n {
            return false;
        }
        match self {
            Pass::Partial => tree.class() == class && free < capacity && free >= capacity / 16,
            Pass::Free => free == capacity,
            Pass::Any => true,
        }
    }
}

/// One CPU's reservation for one class: the tree it holds and the frames
/// of it counted here, packed in one word (tree + 1 in bits 0..32, 0 when
/// none; the counter in bits 32..64), and where in the tree its last
/// allocation was found. Padded to a cache line so that CPUs do not share
/// one.
#[repr(align(64))]
#[derive(Default)]
pub(super) struct Local {
    packed: AtomicU64,
    hint: AtomicU32,
}

/// A reservation unpacked: the tree and its local counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Held {
    pub(super) tree: usize,
    pub(super) free: u64,
}

impl Held {
    fn pack(self) -> u64 {
        (self.free << 32) | (self.tree as u64 + 1)
    }

    fn unpack(word: u64) -> Option<Held> {
        let tree = (word & u64::from(u32::MAX)).checked_sub(1)?;
        Some(Held {
            tree: tree as usize,
            free: word >> 32,
        })
    }
}

impl Local {
    /// The reservation, if any.
    pub(super) fn held(&self) -> Option<Held> {
        Held::unpack(self.packed.load(Relaxed))
    }

    /// Takes `n` frames from the local counter: the reservation as it was
    /// before, or the reservation that has fewer (`None`: there is none).
    fn take(&self, n: u64) -> Result<Held, Option<Held>> {
        let mut cur = self.packed.load(Relaxed);
        loop {
            let held = Held::unpack(cur).ok_or(None)?;
            if held.free < n {
                return Err(Some(held));
            }
            let new = Held {
                free: held.free - n,
                ..held
            }
            .pack();
            match self
                .packed
                .compare_exchange_weak(cur, new, Relaxed, Relaxed)
            {
                Ok(_) => return Ok(held),
                Err(actual) => cur = actual,
            }
        }
    }

    /// Adds `n` frames to the local counter if this reservation holds
    /// `tree`; whether it did.
    fn add(&self, tree: usize, n: u64) -> bool {
        self.packed
            .fetch_update(Relaxed, Relaxed, |cur| {
                let held = Held::unpack(cur).filter(|h| h.tree == tree)?;
                Some(
                    Held {
                        free: held.free + n,
                        ..held
                    }
                    .pack(),
                )
            })
            .is_ok()
    }

    /// Replaces the reservation; the old one, if any.
    fn swap(&self, new: Option<Held>) -> Option<Held> {
        Held::unpack(self.packed.swap(new.map_or(0, Held::pack), Relaxed))
    }
}

/// The trees' entries over a lower allocator, and every reservation.
pub(super) struct Upper {
    pub(super) lower: Lower,
    trees: Box<[AtomicU32]>,
    pub(super) locals: Box<[Local]>,
}

impl Upper {
    /// Trees over `lower`, all unreserved, and `nr_locals` empty
    /// reservations.
    pub(super) fn new(lower: Lower, nr_locals: usize) -> Upper {
        let nr_trees = lower.nr_huge().div_ceil(TREE_CHILDREN);
        let trees = (0..nr_trees)
            .map(|t| {
                let free: u64 = children(t, lower.nr_huge())
                    .map(|c| u64::from(lower.child(c).free()))
                    .sum();
                AtomicU32::new(free as u32)
            })
            .collect();
        Upper {
            lower,
            trees,
            locals: (0..nr_locals).map(|_| Local::default()).collect(),
        }
    }

    /// Trees.
    pub(super) fn nr_trees(&self) -> usize {
        self.trees.len()
    }

    /// Base frames that exist in tree `tree`: all but in the last tree.
    fn capacity(&self, tree: usize) -> u64 {
        (self.lower.nr_frames() - tree as u64 * TREE_FRAMES).min(TREE_FRAMES)
    }

    /// A block of `order` from the tree `local` holds: its first frame, or
    /// `None` when the local counter (with what it steals from the tree's
    /// entry) is short, or the tree has no aligned run.
    pub(super) fn get_reserved(&self, local: &Local, order: u8) -> Option<u64> {
        let n = 1u64 << order;
        let held = loop {
            match local.take(n) {
                Ok(held) => break held,
                Err(Some(short)) if self.steal(local, short) => continue,
                Err(_) => return None,
            }
        };
        let hint = local.hint.load(Relaxed) as usize;
        // Every frame counted here: the tree is entirely free.
        let whole = held.free == self.capacity(held.tree);
        match self.get_in_tree(held.tree, order, hint, whole) {
            Some((frame, child)) => {
                local.hint.store(child as u32, Relaxed);
                Some(frame)
            }
            None => {
                self.give_back(local, held.tree, n);
                None
            }
        }
    }

    /// Moves the frames freed into the held tree's entry to the local
    /// counter; whether there were any (the caller then tries again).
    fn steal(&self, local: &Local, held: Held) -> bool {
        let entry = &self.trees[held.tree];
        let Ok(old) = entry.fetch_update(Relaxed, Relaxed, |e| {
            (Tree(e).free() > 0).then_some(e & !Tree::FREE)
        }) else {
            return false;
        };
        let taken = Tree(old).free();
        let moved = local
            .packed
            .compare_exchange(
                held.pack(),
                Held {
                    free: held.free + taken,
                    ..held
                }
                .pack(),
                Relaxed,
                Relaxed,
            )
            .is_ok();
        if !moved {
            // The reservation changed meanwhile: the frames go back.
            self.add_to_entry(held.tree, taken);
        }
        true
    }

    /// Returns `n` frames of `tree` to `local` if it still holds the tree,
    /// else to the tree's entry.
    fn give_back(&self, local: &Local, tree: usize, n: u64) {
        if !local.add(tree, n) {
            self.add_to_entry(tree, n);
        }
    }

    /// The frames of a free block of `tree` go back: to a reservation of
    /// `locals` that holds the tree, else to the tree's entry.
    pub(super) fn put_counter(&self, locals: &[Local], tree: usize, n: u64) {
        if !locals.iter().any(|l| l.add(tree, n)) {
            self.add_to_entry(tree, n);
        }
    }

    /// Counts `n` more free frames in `tree`'s entry. The counter never
    /// exceeds the tree's frames (it counts at most what the lower
    /// allocator has free there), so it never carries into the flag.
    fn add_to_entry(&self, tree: usize, n: u64) {
        let old = Tree(self.trees[tree].fetch_add(n as u32, Relaxed));
        debug_assert!(
            old.free() + n <= self.capacity(tree),
            "tree {tree} counter {} + {n} past its frames",
            old.free()
        );
    }

    /// A block of `order` from the huge frames of `tree`, from child
    /// `hint` on (wrapping): the frame and the child it came from. Below
    /// the huge order, partly used huge frames are tried before entirely
    /// free ones, so that a small block breaks up a whole huge frame only
    /// when the tree has no other room; `whole` says the tree is entirely
    /// free, so there are none to try.
    fn get_in_tree(
        &self,
        tree: usize,
        order: u8,
        hint: usize,
        whole: bool,
    ) -> Option<(u64, usize)> {
        let span = children(tree, self.lower.nr_huge());
        let first = if span.contains(&hint) {
            hint
        } else {
            span.start
        };
        // From the hint to the end, then from the start: no division.
        let ring = || (first..span.end).chain(span.start..first);
        let get = |c| self.lower.get(c, order).map(|f| (f, c));
        let partial = |c: &usize| u64::from(self.lower.child(*c).free()) < HUGE_FRAMES;
        if order < HUGE_ORDER
            && !whole
            && let Some(found) = ring().filter(partial).find_map(get)
        {
            return Some(found);
        }
        ring().find_map(get)
    }

    /// Reserves, for `local`, the first tree `pass` accepts from `start`
    /// on (wrapping) that has a block of `order`, and takes the block; the
    /// old reservation goes back. Trees that have the frames but no
    /// aligned run are given back at once.
    pub(super) fn reserve_and_get(
        &self,
        local: &Local,
        start: usize,
        order: u8,
        class: Class,
        pass: Pass,
    ) -> Option<u64> {
        let n = 1u64 << order;
        let nr = self.nr_trees();
        for tree in (0..nr).map(|i| (start + i) % nr) {
            let capacity = self.capacity(tree);
            let entry = &self.trees[tree];
            let Ok(old) = entry.fetch_update(Relaxed, Relaxed, |e| {
                pass.accepts(Tree(e), capacity, n, class)
                    .then_some(Tree::reserved_for(class).0)
            }) else {
                continue;
            };
            let free = Tree(old).free();
            match self.get_in_tree(tree, order, 0, free == capacity) {
                Some((frame, child)) => {
                    local.hint.store(child as u32, Relaxed);
                    let new = Held {
                        tree,
                        free: free - n,
                    };
                    if let Some(old) = local.swap(Some(new)) {
                        self.unreserve(old, None);
                    }
                    return Some(frame);
                }
                // Nothing served: the tree goes back with the class it
                // had, so that a request of the other class that probes
                // trees and fails does not relabel them. While the tree
                // is reserved only this call writes its class (reserving
                // needs the flag clear; frees only add to the counter),
                // so the class read when reserving is still the one to
                // restore.
                None => self.unreserve(Held { tree, free }, Some(Tree(old).class())),
            }
        }
        None
    }

    /// Gives a reservation's tree back, with its local counter, labelled
    /// `class` (`None`: the class it was reserved for).
    fn unreserve(&self, held: Held, class: Option<Class>) {
        let entry = &self.trees[held.tree];
        let update = entry.fetch_update(Relaxed, Relaxed, |e| {
            let tree = Tree(e);
            Some(tree.returned(held.free, class.unwrap_or(tree.class())).0)
        });
        debug_assert!(
            update.is_ok_and(|e| Tree(e).reserved()),
            "only a reserved tree is given back"
        );
    }

    /// Ends every reservation, returning each counter to its tree.
    pub(super) fn drain(&self) {
        for local in &self.locals {
            if let Some(held) = local.swap(None) {
                self.unreserve(held, None);
            }
        }
    }

    /// Free frames as the trees and reservations count them (equal to the
    /// lower allocator's when no call is in flight).
    pub(super) fn counted_free(&self) -> u64 {
        let trees: u64 = self
            .trees
            .iter()
            .map(|t| Tree(t.load(Relaxed)).free())
            .sum();
        let locals: u64 = self
            .locals
            .iter()
            .filter_map(Local::held)
            .map(|h| h.free)
            .sum();
        trees + locals
    }
}

/// The huge frames of tree `tree` among `nr_huge`.
fn children(tree: usize, nr_huge: usize) -> std::ops::Range<usize> {
    tree * TREE_CHILDREN..((tree + 1) * TREE_CHILDREN).min(nr_huge)
}
