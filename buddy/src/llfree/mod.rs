//! LLFree: a lock-free page-frame allocator beside the buddy.
//!
//! Wrenger, Rommel, Halbuer, Dietrich and Lohmann, "LLFree: Scalable and
//! Optionally-Persistent Page-Frame Allocation" (USENIX ATC 2023), argue
//! that the buddy allocator's free lists, zone lock and per-CPU lists
//! scale badly and fragment huge frames, and replace them with two layers
//! of atomic counters and bits that no lock guards:
//!
//! - the **lower allocator** (`lower`): per 2 MiB huge frame (512 base
//!   frames, order 9) a 512-bit bitfield in one cache line and a 16-bit
//!   child entry with the free counter and an "allocated as a huge frame"
//!   flag. Blocks of order 0 to 9 are claimed by compare-and-swap on the
//!   counter, then on the bitfield's words;
//! - the **upper allocator** (`upper`): trees of 32 huge frames (16,384
//!   base frames), each with an entry holding its free counter and a
//!   reserved flag. Each CPU reserves one tree and allocates from it with a
//!   counter of its own, so CPUs rarely touch the same cache lines; the
//!   search for the next tree (`search`) prefers partly used trees near
//!   the previous one, so allocations pack into them and free memory
//!   collects in whole trees (and whole huge frames).
//!
//! A free clears the block's bits and adds to the counters; once all 512
//! frames of a huge frame are free its counter reads 512 again and an
//! order-9 request can take it whole. The buddy reaches the same state by
//! merging up the free lists; LLFree never merges, it counts.
//!
//! # What pfnlab's LLFree keeps and what it leaves out
//! It keeps the two layers, the lower allocator's entry sizes and the
//! paper's tree of 32 huge frames (the authors' later releases default to
//! 8), the compare-and-swap protocols, the per-CPU reservations
//! with counter stealing, and orders 0 to 9. Where it departs:
//!
//! - **No persistence.** The paper can keep the lower allocator in
//!   non-volatile memory and recover it after a crash; pfnlab's lives on
//!   the heap and is volatile, as in the paper's volatile configuration.
//! - **Classes.** [`Class`] is the kernel's movable/immovable split
//!   (migratetypes `MIGRATE_MOVABLE` vs `MIGRATE_UNMOVABLE` and
//!   `MIGRATE_RECLAIMABLE`): each CPU has one reservation per class, a
//!   tree entry records the class of the last reservation that allocated
//!   from it, and the near and partial searches for a new tree only take
//!   trees of the caller's class (or entirely free ones), so immovable
//!   frames cluster in few trees. The 2023 paper's
//!   tree entry is 16 bits (a 15-bit counter and the reserved flag) with
//!   no room for it (the authors' later versions add a "kind"); pfnlab's
//!   tree entry is an `AtomicU32` with the class in bit 17. Huge
//!   (order-9) requests go through the caller's class like any other.
//! - **How a reservation is chosen.** The paper's tree-search
//!   heuristics are modelled in `search` with the counter ranges and
//!   search order of the authors' published implementation: near trees
//!   first (around the previous tree's cache line of entries), then
//!   partial trees (neither almost allocated nor almost free), then almost
//!   free trees, then any; a CPU moves on from its tree once what is left
//!   there is almost allocated; a CPU that keeps freeing into a tree
//!   reserves it. A CPU with no tree yet starts at a tree spread by CPU
//!   number. pfnlab adds a last resort: when every search fails, the
//!   CPU's own tree gives up whatever was freed into it, and then every
//!   CPU's reservation is ended ([`LLFree::drain`]) and the last search
//!   runs again, so a request fails only when no tree has an aligned free
//!   block (or, under concurrency, when the frames that would serve it are
//!   in another CPU's call at that moment: a lock-free allocator does not
//!   wait for it). The ranges scale with a tree's frames, the near search
//!   also visits the first tree of its line, and a line holds 32 entries
//!   as the paper's 16-bit entries would.
//! - **Inside a tree**, a request below order 9 tries the partly used
//!   huge frames before the entirely free ones (starting at the huge
//!   frame the CPU last allocated from), the reservation search's
//!   preference one level down, so that a small block breaks up a whole
//!   huge frame only when its tree has no other room. The authors'
//!   lower allocator takes the first huge frame with room from the last
//!   allocation on, whole or not; where allocations go within a tree
//!   matters less than which tree they go to, since a CPU fills its tree
//!   before it moves on.
//! - **Checked frees.** The paper trusts the caller's frame and order, as
//!   the kernel trusts its callers. pfnlab keeps one byte per base frame
//!   with the order of the live block starting there, so a double free, a
//!   free of a frame never handed out, a misaligned or out-of-range frame
//!   and a wrong order are refused with an [`LlfreeError`] before any bit
//!   or counter changes. This costs a store per allocation and a
//!   compare-and-swap per free that the paper's allocator does not pay.
//! - **Frames, not addresses.** Frames are numbered from 0 to `nr_frames`
//!   (a partial last huge frame is never free as a whole); there is no
//!   memory model behind them and no `struct page`.
//!
//! ```
//! use buddy::llfree::{Class, LLFree};
//! use sparsemem::Order;
//!
//! let llfree = LLFree::new(4 * 16_384, 2)?; // 256 MiB of 4 KiB frames, 2 CPUs
//! let frame = llfree.get(0, Order::ZERO, Class::Movable)?;
//! let huge = llfree.get(1, Order::new(9), Class::Immovable)?;
//! llfree.put(0, frame, Order::ZERO)?;
//! assert!(llfree.put(0, frame, Order::ZERO).is_err(), "double free is refused");
//! llfree.put(1, huge, Order::new(9))?;
//! assert_eq!(llfree.free_huge_frames(), 4 * 32);
//! # Ok::<(), buddy::llfree::LlfreeError>(())
//! ```

mod lower;
mod search;
mod upper;

use std::fmt;

use sparsemem::{Order, Pfn};

pub use lower::{HUGE_FRAMES, HUGE_ORDER};
use search::Pass;
use upper::{StealMin, Upper};
pub use upper::{TREE_CHILDREN, TREE_FRAMES};

/// Most base frames an instance manages: 2^30 (4 TiB of 4 KiB frames;
/// about 1.1 GiB of metadata, most of it the per-frame order bytes).
pub const MAX_FRAMES: u64 = 1 << 30;

/// Most CPUs an instance has reservations for: the kernel's largest
/// `CONFIG_NR_CPUS` on x86_64 (8192, with `CONFIG_MAXSMP`).
pub const MAX_CPUS: usize = 8192;

/// Which reservation serves a request: the kernel's movable/immovable
/// split of migratetypes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// Kernel allocations that cannot move (`MIGRATE_UNMOVABLE`,
    /// `MIGRATE_RECLAIMABLE`).
    Immovable,
    /// User pages and page cache, which compaction can move
    /// (`MIGRATE_MOVABLE`).
    Movable,
}

impl Class {
    /// Both classes.
    pub const ALL: [Class; 2] = [Class::Immovable, Class::Movable];

    /// The class of a migratetype's allocations.
    pub fn of(migratetype: sparsemem::Migratetype) -> Class {
        match migratetype {
            sparsemem::Migratetype::Movable => Class::Movable,
            _ => Class::Immovable,
        }
    }

    const fn index(self) -> usize {
        self as usize
    }
}

/// What LLFree refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LlfreeError {
    /// `new` with no frames, or more than [`MAX_FRAMES`].
    Frames {
        /// The frames asked for.
        nr_frames: u64,
    },
    /// `new` with no CPUs, or more than [`MAX_CPUS`].
    Cpus {
        /// The CPUs asked for.
        nr_cpus: usize,
    },
    /// A CPU number at or above the instance's CPU count.
    Cpu {
        /// The CPU given.
        cpu: usize,
        /// CPUs of the instance.
        nr_cpus: usize,
    },
    /// An order above [`HUGE_ORDER`].
    Order {
        /// The order asked for.
        order: u8,
    },
    /// No aligned free block of the order in any tree.
    NoMemory {
        /// The order asked for.
        order: u8,
    },
    /// A frame at or past the end of memory.
    OutOfRange {
        /// The frame given.
        frame: u64,
        /// Frames of the instance.
        nr_frames: u64,
    },
    /// A frame not aligned to its order.
    Misaligned {
        /// The frame given.
        frame: u64,
        /// The order given.
        order: u8,
    },
    /// No live block starts at the frame: never handed out, or freed
    /// already.
    NotAllocated {
        /// The frame given.
        frame: u64,
        /// The order given.
        order: u8,
    },
    /// A live block starts at the frame, of another order.
    WrongOrder {
        /// The frame given.
        frame: u64,
        /// The order given.
        order: u8,
        /// The block's order.
        allocated: u8,
    },
}

impl fmt::Display for LlfreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            LlfreeError::Frames { nr_frames } => {
                write!(
                    f,
                    "LLFree manages 1 to {MAX_FRAMES} frames, not {nr_frames}"
                )
            }
            LlfreeError::Cpus { nr_cpus } => {
                write!(f, "LLFree has 1 to {MAX_CPUS} CPUs, not {nr_cpus}")
            }
            LlfreeError::Cpu { cpu, nr_cpus } => {
                write!(f, "CPU {cpu} is not one of the {nr_cpus} CPUs")
            }
            LlfreeError::Order { order } => {
                write!(f, "order {order} is above LLFree's huge order {HUGE_ORDER}")
            }
            LlfreeError::NoMemory { order } => write!(f, "no free block of order {order}"),
            LlfreeError::OutOfRange { frame, nr_frames } => {
                write!(
                    f,
                    "frame {frame:#x} is past the last of {nr_frames:#x} frames"
                )
            }
            LlfreeError::Misaligned { frame, order } => {
                write!(f, "frame {frame:#x} is not aligned to order {order}")
            }
            LlfreeError::NotAllocated { frame, order } => write!(
                f,
                "no block of order {order} is allocated at frame {frame:#x} (double free?)"
            ),
            LlfreeError::WrongOrder {
                frame,
                order,
                allocated,
            } => write!(
                f,
                "frame {frame:#x} starts a block of order {allocated}, not {order}"
            ),
        }
    }
}

impl std::error::Error for LlfreeError {}

/// An LLFree instance: `nr_frames` base frames numbered from 0, and
/// `nr_cpus` CPUs, each with a reservation per [`Class`].
///
/// It is `Sync`: CPUs call it from their own threads through `&self`.
/// Two threads may even pass the same CPU number; they then share its
/// reservations, correctly but without the locality that is the point.
pub struct LLFree {
    upper: Upper,
    nr_frames: u64,
    nr_cpus: usize,
}

impl LLFree {
    /// An instance with every frame free and no reservation.
    pub fn new(nr_frames: u64, nr_cpus: usize) -> Result<LLFree, LlfreeError> {
        if nr_frames == 0 || nr_frames > MAX_FRAMES {
            return Err(LlfreeError::Frames { nr_frames });
        }
        if nr_cpus == 0 || nr_cpus > MAX_CPUS {
            return Err(LlfreeError::Cpus { nr_cpus });
        }
        Ok(LLFree {
            upper: Upper::new(lower::Lower::new(nr_frames), nr_cpus),
            nr_frames,
            nr_cpus,
        })
    }

    /// Base frames managed.
    pub fn nr_frames(&self) -> u64 {
        self.nr_frames
    }

    /// CPUs.
    pub fn nr_cpus(&self) -> usize {
        self.nr_cpus
    }

    /// Trees (the last one perhaps partial).
    pub fn nr_trees(&self) -> usize {
        self.upper.nr_trees()
    }

    /// A block of `1 << order` frames (order up to [`HUGE_ORDER`]) for
    /// `cpu`, from its reservation for `class`: the block's first frame,
    /// aligned to the order.
    pub fn get(&self, cpu: usize, order: Order, class: Class) -> Result<Pfn, LlfreeError> {
        let order = self.check_order(order)?;
        let local = self.local(cpu, class)?;
        let miss = match self
            .upper
            .get_reserved(local, order, StealMin::AlmostAllocated)
        {
            Ok(frame) => return Ok(Pfn::new(frame)),
            Err(miss) => miss,
        };
        let start = local
            .held()
            .map_or_else(|| cpu * self.nr_trees() / self.nr_cpus, |held| held.tree);
        let search = |pass| self.upper.reserve_and_get(local, start, order, class, pass);
        miss.passes()
            .into_iter()
            .find_map(search)
            .or_else(|| self.upper.get_reserved(local, order, StealMin::Any).ok())
            .or_else(|| {
                self.upper.drain();
                search(Pass::Any)
            })
            .map(Pfn::new)
            .ok_or(LlfreeError::NoMemory { order })
    }

    /// Frees the block of `1 << order` frames at `frame`, which `get`
    /// returned with that order; `cpu`'s reservations take the frames back
    /// if they hold the block's tree. A frame that does not start a live
    /// block of that order is refused and nothing changes.
    pub fn put(&self, cpu: usize, frame: Pfn, order: Order) -> Result<(), LlfreeError> {
        let order = self.check_order(order)?;
        self.cpu_locals(cpu)?;
        let frame = frame.get();
        if frame >= self.nr_frames {
            return Err(LlfreeError::OutOfRange {
                frame,
                nr_frames: self.nr_frames,
            });
        }
        if frame & ((1 << order) - 1) != 0 {
            return Err(LlfreeError::Misaligned { frame, order });
        }
        self.upper.lower.put(frame, order)?;
        let tree = (frame / TREE_FRAMES) as usize;
        self.upper.put_counter(cpu, tree, 1 << order);
        Ok(())
    }

    /// Ends every CPU's reservations, returning their counters to the
    /// trees (what a failing request does before its last search).
    pub fn drain(&self) {
        self.upper.drain();
    }

    /// Free base frames (the lower allocator's counters).
    pub fn free_frames(&self) -> u64 {
        self.upper.lower.free_frames()
    }

    /// Huge frames with all 512 base frames free: what an order-9 request
    /// can take.
    pub fn free_huge_frames(&self) -> u64 {
        self.upper.lower.free_huge_frames()
    }

    /// Free frames as the trees' and reservations' counters hold them:
    /// equal to [`free_frames`](Self::free_frames) whenever no call is in
    /// flight (the upper allocator's invariant).
    pub fn counted_free_frames(&self) -> u64 {
        self.upper.counted_free()
    }

    /// `order` as a number, when LLFree serves it.
    fn check_order(&self, order: Order) -> Result<u8, LlfreeError> {
        match order.get() {
            o if o <= HUGE_ORDER => Ok(o),
            o => Err(LlfreeError::Order { order: o }),
        }
    }

    /// `cpu`'s reservations, one per class.
    fn cpu_locals(&self, cpu: usize) -> Result<&[upper::Local], LlfreeError> {
        if cpu >= self.nr_cpus {
            return Err(LlfreeError::Cpu {
                cpu,
                nr_cpus: self.nr_cpus,
            });
        }
        Ok(self.upper.cpu_locals(cpu))
    }

    /// `cpu`'s reservation for `class`.
    fn local(&self, cpu: usize, class: Class) -> Result<&upper::Local, LlfreeError> {
        Ok(&self.cpu_locals(cpu)?[class.index()])
    }
}
