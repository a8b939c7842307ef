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
//! local one runs short and they are worth it. When the tree cannot
//! serve a request, the CPU reserves another ([`search`](super::search)
//! says which) and returns the old one's counter to its entry; a CPU
//! that keeps freeing into one tree reserves that one.
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
use super::search::{Candidate, LAST_FREES, LastFrees, Pass, almost_allocated, near_trees};

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

    /// What a search sees of it, for a tree of `capacity` frames.
    fn candidate(self, capacity: u64) -> Candidate {
        Candidate {
            free: self.free(),
            capacity,
            reserved: self.reserved(),
            class: self.class(),
        }
    }

    /// Not reserved, `free` more frames counted, labelled `class`.
    fn returned(self, free: u64, class: Class) -> Tree {
        let sum = self.free() + free;
        debug_assert!(sum <= TREE_FRAMES, "tree counter {sum} past its frames");
        Tree(Tree::class_bit(class) | sum as u32)
    }
}

const _: () = assert!(TREE_FRAMES <= Tree::FREE as u64);

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

/// Why the reserved tree did not serve a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Miss {
    /// Too few frames counted (none held, or the counter short).
    Short,
    /// The frames were there but no aligned block of the order.
    Fragmented,
}

impl Miss {
    /// The searches for the next tree, preferred first.
    pub(super) fn passes(self) -> [Pass; 4] {
        match self {
            Miss::Short => Pass::AFTER_SHORT,
            Miss::Fragmented => Pass::AFTER_FRAGMENTED,
        }
    }
}

/// When a CPU whose local counter is short takes over the frames freed
/// into its tree's entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StealMin {
    /// When they and the local counter exceed the almost allocated mark:
    /// the authors' rule, which moves the CPU on from a nearly full tree.
    AlmostAllocated,
    /// Whenever there are any: the last resort before draining.
    Any,
}

/// The trees' entries over a lower allocator, every reservation, and each
/// CPU's recent frees.
pub(super) struct Upper {
    pub(super) lower: Lower,
    trees: Box<[AtomicU32]>,
    /// Each CPU's reservations, one per class, CPU by CPU.
    locals: Box<[Local]>,
    last_frees: Box<[LastFrees]>,
    /// Trees the near search visits.
    near: usize,
}

impl Upper {
    /// Trees over `lower`, all unreserved, and empty reservations for
    /// `nr_cpus` CPUs.
    pub(super) fn new(lower: Lower, nr_cpus: usize) -> Upper {
        let nr_trees = lower.nr_huge().div_ceil(TREE_CHILDREN);
        let trees = (0..nr_trees)
            .map(|t| {
                let free: u64 = children(t, lower.nr_huge())
                    .map(|c| u64::from(lower.child(c).free()))
                    .sum();
                AtomicU32::new(free as u32)
            })
            .collect();
        let nr_locals = nr_cpus * Class::ALL.len();
        Upper {
            lower,
            trees,
            locals: (0..nr_locals).map(|_| Local::default()).collect(),
            last_frees: (0..nr_cpus).map(|_| LastFrees::default()).collect(),
            near: near_trees(nr_trees, nr_cpus),
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
    /// why not. A short local counter takes over the frames freed into
    /// the tree's entry when, with its own, they exceed `steal_min`
    /// (the authors' CPU moves on from a tree that is almost allocated:
    /// [`almost_allocated`]).
    pub(super) fn get_reserved(
        &self,
        local: &Local,
        order: u8,
        steal_min: StealMin,
    ) -> Result<u64, Miss> {
        let n = 1u64 << order;
        let held = loop {
            match local.take(n) {
                Ok(held) => break held,
                Err(Some(short)) if self.steal(local, short, steal_min) => continue,
                Err(_) => return Err(Miss::Short),
            }
        };
        let hint = local.hint.load(Relaxed) as usize;
        // Every frame counted here: the tree is entirely free.
        let whole = held.free == self.capacity(held.tree);
        match self.get_in_tree(held.tree, order, hint, whole) {
            Some((frame, child)) => {
                local.hint.store(child as u32, Relaxed);
                Ok(frame)
            }
            None => {
                self.give_back(local, held.tree, n);
                Err(Miss::Fragmented)
            }
        }
    }

    /// Moves the frames freed into the held tree's entry to the local
    /// counter, if there are any and `steal_min` lets it; whether it did
    /// (the caller then tries again).
    fn steal(&self, local: &Local, held: Held, steal_min: StealMin) -> bool {
        let entry = &self.trees[held.tree];
        let min = match steal_min {
            StealMin::AlmostAllocated => almost_allocated(self.capacity(held.tree)),
            StealMin::Any => 0,
        };
        let Ok(old) = entry.fetch_update(Relaxed, Relaxed, |e| {
            let free = Tree(e).free();
            (free > 0 && held.free + free > min).then_some(e & !Tree::FREE)
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
    /// `cpu` that holds the tree, else to the tree's entry. A CPU that
    /// keeps freeing into a tree it does not hold then reserves it, if it
    /// is not almost allocated: the reservation on free of the authors'
    /// upper allocator, which expects the frames a CPU frees together to
    /// be reused by it.
    pub(super) fn put_counter(&self, cpu: usize, tree: usize, n: u64) {
        let before = self.last_frees[cpu].record(tree);
        if self.cpu_locals(cpu).iter().any(|l| l.add(tree, n)) {
            return;
        }
        self.add_to_entry(tree, n);
        if before >= LAST_FREES {
            self.reserve_on_free(cpu, tree);
        }
    }

    /// Reserves `tree` for `cpu`, in the class of its label, if no CPU
    /// holds it and it is not almost allocated; the CPU's old reservation
    /// of that class goes back.
    fn reserve_on_free(&self, cpu: usize, tree: usize) {
        let capacity = self.capacity(tree);
        let Ok(old) = self.trees[tree].fetch_update(Relaxed, Relaxed, |e| {
            let t = Tree(e);
            (!t.reserved() && t.free() >= almost_allocated(capacity))
                .then_some(Tree::reserved_for(t.class()).0)
        }) else {
            return;
        };
        let old = Tree(old);
        let local = &self.cpu_locals(cpu)[old.class().index()];
        local.hint.store((tree * TREE_CHILDREN) as u32, Relaxed);
        let new = Held {
            tree,
            free: old.free(),
        };
        if let Some(prev) = local.swap(Some(new)) {
            self.unreserve(prev, None);
        }
    }

    /// `cpu`'s reservations, one per class (`cpu` in range: the caller
    /// checked).
    pub(super) fn cpu_locals(&self, cpu: usize) -> &[Local] {
        let n = Class::ALL.len();
        &self.locals[cpu * n..(cpu + 1) * n]
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

    /// Reserves, for `local`, the first tree `pass` accepts, visiting the
    /// trees in its order from the previous tree `start`, that has a block
    /// of `order`, and takes the block; the old reservation goes back.
    /// Trees that have the frames but no aligned run are given back at
    /// once.
    pub(super) fn reserve_and_get(
        &self,
        local: &Local,
        start: usize,
        order: u8,
        class: Class,
        pass: Pass,
    ) -> Option<u64> {
        let n = 1u64 << order;
        for tree in pass.trees(start, self.nr_trees(), self.near) {
            let capacity = self.capacity(tree);
            let entry = &self.trees[tree];
            let Ok(old) = entry.fetch_update(Relaxed, Relaxed, |e| {
                pass.accepts(Tree(e).candidate(capacity), n, class)
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
