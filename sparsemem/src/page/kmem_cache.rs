//! `kmem_cache_create("buddy", sizeof(struct buddy), 16, …)`: the slab
//! cache the Memdescs plan allocates every memdesc from, here for the one
//! pfnlab needs, a free or listed page's `struct buddy`, with SLUB's
//! per-CPU slab in front of it.
//!
//! The plan requires every structure a memdesc points to to come from a
//! slab aligned to 16 bytes, so the low 4 bits of the memdesc word are free
//! for the type. This cache hands out 16-byte-aligned objects carved from
//! slabs of [`SLAB_BYTES`] (one 4 KiB page, as an order-0 SLUB slab) and
//! counts its objects and slabs so that the memory the descriptors cost is
//! reported beside the memmap.
//!
//! # SLUB's two paths (mm/slub.c, 5.13 to 6.17)
//! Each CPU owns one slab, `struct kmem_cache_cpu`'s `slab` (`page`
//! before 5.17), *frozen* to it, and a `freelist` of that slab's free
//! objects, each free object holding the pointer to the next. Here a CPU
//! is a thread (pfnlab's per-CPU page lists are per-thread handles), and
//! its [`CpuSlab`] lives in a thread-local table indexed by the cache's id
//! (`raw_cpu_ptr(s->cpu_slab)`):
//! - `slab_alloc_node`'s fast path pops the CPU freelist and
//!   `do_slab_free`'s pushes an object of the CPU's own slab back, with no
//!   lock: plain loads and stores of thread-owned state;
//! - `___slab_alloc`, the slow path once the CPU freelist is empty, takes
//!   the cache's lock (`n->list_lock`), first takes back the objects other
//!   CPUs freed into the CPU slab (`get_freelist`), else unfreezes the full
//!   slab (`deactivate_slab`) and freezes a slab from the partial list
//!   (`get_partial`) or a new one (`allocate_slab`);
//! - `__slab_free`, the free of an object of any other slab (a remote
//!   free), takes the lock and puts the object on its own slab's freelist;
//!   a slab that was full goes back on the partial list (`add_partial`);
//! - a thread's exit runs `flush_cpu_slab`: its TLS destructor hands every
//!   CPU slab back (`deactivate_slab`), its freelist joined to the slab's,
//!   so nothing leaks and the counts stay exact.
//!
//! [`SlubStats`] counts the slow paths with `CONFIG_SLUB_STATS`' names;
//! the fast paths are not counted (a counter there would be a cost the
//! kernel does not pay either without that option).
//!
//! What is modelled and what is not:
//! - the cache is global, as a `kmem_cache` is: every allocator at one page
//!   size shares it (each size has its own, see `p16`), with one node;
//! - the fast path's `this_cpu_cmpxchg_double` of (`freelist`, `tid`) is
//!   not modelled: the kernel needs it because the task can be preempted
//!   and moved to another CPU, or interrupted by an allocating handler,
//!   between reading the CPU slab and writing it; a thread's TLS cannot
//!   change under it and nothing allocates from a signal handler, so plain
//!   loads and stores are the same exclusion, one unlocked `cmpxchg16b`
//!   cheaper (the fast path here is a lower bound by that much);
//! - remote frees take the lock; the kernel's `__slab_free` does a
//!   `cmpxchg_double_slab` of the slab's freelist and takes `list_lock`
//!   only when the slab changes lists, so a remote free here costs more;
//! - no per-CPU partial lists (`CONFIG_SLUB_CPU_PARTIAL`), and not 6.18's
//!   sheaves (per-CPU arrays of objects in front of the same slow paths);
//! - the free pointer sits beside the object, not in it, as the kernel
//!   places it after the object (`s->offset = size` in `calculate_sizes`)
//!   for a `SLAB_TYPESAFE_BY_RCU` cache, so a free object stays a valid
//!   `T::default()` for a reader racing its free; the word it would add to
//!   each object is not counted;
//! - slabs are never given back (no shrinker runs, empty slabs stay on
//!   the partial list), so `num_slabs` is the high-water mark;
//! - `SLAB_TYPESAFE_BY_RCU` needs no other code here: slabs are never
//!   freed, so a reader racing a free reads a descriptor of the same type;
//! - an allocation or free on a thread whose CPU table is already
//!   destroyed (another TLS destructor freeing pages) takes the lock and
//!   works on the slab directly, as if the CPU had no slab.
//!
//! # Safety
//! Objects are handed out as raw pointers derived from the slab's own
//! allocation, and the cache's core and each slab's metadata are leaked to
//! the cache, so all stay valid for the life of the process (a dropped
//! cache leaks them: a thread's CPU slab may still point there).
//! [`KmemCache::free`]'s caller promises the object came from this cache
//! and is no longer reachable from any page. A CPU table entry is only
//! ever read as the `T` of the cache whose id indexes it (one id per
//! core, handed out once).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// Bytes of one slab: one 4 KiB page.
pub const SLAB_BYTES: u64 = 4096;

/// The most objects a slab holds: 16-byte objects, the alignment's floor.
const MAX_OBJS: usize = SLAB_BYTES as usize / 16;

/// Words of a slab's object bitmaps.
const BITMAP_WORDS: usize = MAX_OBJS / 64;

/// What a cache can say of itself (`/proc/slabinfo`'s `active_objs`,
/// `num_slabs`, `objsize`, and the slow paths it took).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlabInfo {
    /// Objects allocated and not freed.
    pub active_objs: u64,
    /// Slabs the cache holds (never shrunk: the high-water mark).
    pub num_slabs: u64,
    /// Bytes of one object.
    pub objsize: u64,
    /// The slow paths taken so far.
    pub slow: SlubStats,
}

impl SlabInfo {
    /// Bytes the cache holds: its slabs.
    pub fn bytes(&self) -> u64 {
        self.num_slabs * SLAB_BYTES
    }
}

/// Slow-path counts, named as `CONFIG_SLUB_STATS`' `enum stat_item`; each
/// is one entry under the cache's lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlubStats {
    /// `ALLOC_SLOWPATH`: allocations that took the lock.
    pub alloc_slowpath: u64,
    /// `FREE_SLOWPATH`: frees that took the lock (remote frees).
    pub free_slowpath: u64,
    /// `ALLOC_REFILL`: CPU freelists refilled from remote frees into the
    /// CPU slab.
    pub alloc_refill: u64,
    /// `ALLOC_FROM_PARTIAL`: CPU slabs taken from the partial list.
    pub alloc_from_partial: u64,
    /// `ALLOC_SLAB`: new slabs.
    pub alloc_slab: u64,
    /// `CPUSLAB_FLUSH`: CPU slabs handed back at a thread's exit.
    pub cpuslab_flush: u64,
}

/// The part of a `struct slab` read without the lock.
///
/// Invariants:
/// - `allocated` bit `i` is set while object `i` is handed out or freed
///   remotely and not yet taken back; it is written by the slab's owner
///   only: the CPU that froze it, else the holder of the cache's lock;
/// - `remote_freed` bit `i` is set while object `i` was freed by another
///   thread into the frozen slab and sits on its node's freelist; it is
///   written under the lock only;
/// - an object is live iff `allocated & !remote_freed`;
/// - `free_ptr[i]` is the next free object after object `i` on whichever
///   freelist holds it (null at the end); meaningless while `i` is live.
struct SlabMeta<T> {
    base: *mut T,
    allocated: [AtomicU64; BITMAP_WORDS],
    remote_freed: [AtomicU64; BITMAP_WORDS],
    free_ptr: Box<[AtomicPtr<T>]>,
}

// SAFETY: `base` points to objects leaked to the cache, whose `T` is
// `Sync` (atomics only) and lives for the process; every other field is
// atomic.
unsafe impl<T: Sync> Sync for SlabMeta<T> {}
// SAFETY: as for `Sync`: nothing in a `SlabMeta` belongs to a thread.
unsafe impl<T: Sync> Send for SlabMeta<T> {}

/// Sets or clears bit `i` of `words` as the one writer of the word: a load
/// and a store, no read-modify-write (see `SlabMeta`'s invariants).
#[inline(always)]
fn write_bit(words: &[AtomicU64; BITMAP_WORDS], i: usize, set: bool) {
    let word = &words[i / 64];
    let mask = 1 << (i % 64);
    let old = word.load(Relaxed);
    word.store(if set { old | mask } else { old & !mask }, Relaxed);
}

#[inline(always)]
fn read_bit(words: &[AtomicU64; BITMAP_WORDS], i: usize) -> bool {
    words[i / 64].load(Relaxed) >> (i % 64) & 1 == 1
}

impl<T> SlabMeta<T> {
    /// Bytes of the slab's objects.
    const SPAN: usize = (SLAB_BYTES as usize) / size_of::<T>() * size_of::<T>();

    /// The index of `obj` if it is an object of this slab
    /// (`virt_to_slab(obj) == slab`).
    #[inline(always)]
    fn index_of(&self, obj: *const T) -> Option<usize> {
        let off = obj.addr().wrapping_sub(self.base.addr());
        (off < Self::SPAN && off.is_multiple_of(size_of::<T>())).then_some(off / size_of::<T>())
    }

    /// Whether object `i` is live.
    #[inline(always)]
    fn is_live(&self, i: usize) -> bool {
        read_bit(&self.allocated, i) && !read_bit(&self.remote_freed, i)
    }

    /// The remote frees are taken back by the owner: their allocated bits
    /// clear with their remote bits.
    ///
    /// The caller is the slab's owner and holds the lock.
    fn take_back_remote(&self) {
        for (a, r) in self.allocated.iter().zip(&self.remote_freed) {
            let remote = r.load(Relaxed);
            if remote != 0 {
                a.store(a.load(Relaxed) & !remote, Relaxed);
                r.store(0, Relaxed);
            }
        }
    }

    /// Live objects: the set bits of `allocated & !remote_freed`.
    fn nr_live(&self) -> u64 {
        let words = self.allocated.iter().zip(&self.remote_freed);
        words
            .map(|(a, r)| (a.load(Relaxed) & !r.load(Relaxed)).count_ones() as u64)
            .sum()
    }
}

/// The part of a `struct slab` under the lock.
struct SlabNode<T: 'static> {
    meta: &'static SlabMeta<T>,
    /// `slab->freelist`: free objects no CPU freelist holds (while frozen,
    /// the remote frees only).
    freelist: *mut T,
    /// Whether a CPU owns the slab.
    frozen: bool,
}

/// The cache's state behind its lock (`struct kmem_cache_node`).
///
/// Invariants: `slabs` is keyed by each slab's base address (so finding an
/// object's slab is a lookup, as `virt_to_slab` is in the kernel); a slab
/// is on `partial` iff it is not frozen and its freelist is not empty;
/// every object on a slab's freelist is free, with its allocated bit clear
/// unless it is a remote free into the frozen slab.
struct Slabs<T: 'static> {
    slabs: BTreeMap<usize, SlabNode<T>>,
    partial: Vec<usize>,
    stats: SlubStats,
}

// SAFETY: the pointers are to objects and metadata leaked to the cache,
// whose `T` is `Sync` (atomics only) and lives for the process; the
// `Mutex` serialises every use of the lists.
unsafe impl<T: Sync + 'static> Send for Slabs<T> {}

/// What a cache shares between threads, leaked so a CPU slab can always
/// reach it.
struct Core<T: 'static> {
    /// The index of this cache's CPU slab in every thread's table.
    id: usize,
    node: Mutex<Slabs<T>>,
}

/// The id the next cache's CPU slabs are filed under.
static NEXT_CACHE_ID: AtomicUsize = AtomicUsize::new(0);

/// One thread's `struct kmem_cache_cpu` of one cache, its types erased so
/// one table holds every cache's.
///
/// Invariants: `core` is the leaked `Core<T>` whose id indexes this entry;
/// `slab` is null or a `SlabMeta<T>` of that core, frozen to this thread;
/// `freelist` chains free objects of `slab` (allocated bits clear) through
/// their free pointers, null-terminated; `flush` is
/// `Core::<T>::flush_erased` for the same `T`.
struct CpuSlab {
    core: *const (),
    slab: *const (),
    freelist: *mut (),
    flush: unsafe fn(&CpuSlab),
}

/// A thread's CPU slabs, indexed by cache id; its destructor is
/// `flush_cpu_slab` for each.
struct CpuSlabs(RefCell<Vec<Option<CpuSlab>>>);

impl Drop for CpuSlabs {
    fn drop(&mut self) {
        for c in self.0.get_mut().drain(..).flatten() {
            // SAFETY: `flush` matches `core`'s type (`CpuSlab`'s
            // invariant) and the thread is exiting: the entry is gone.
            unsafe { (c.flush)(&c) };
        }
    }
}

thread_local! {
    static CPU_SLABS: CpuSlabs = const { CpuSlabs(RefCell::new(Vec::new())) };
}

/// A slab cache of `T`: see the module documentation.
pub struct KmemCache<T: 'static> {
    core: OnceLock<&'static Core<T>>,
}

impl<T: Default + Sync + 'static> Core<T> {
    /// Objects per slab.
    const OBJS_PER_SLAB: usize = (SLAB_BYTES as usize) / size_of::<T>();

    fn lock(&self) -> MutexGuard<'_, Slabs<T>> {
        // A panic under the lock leaves the lists consistent (every
        // mutation below is completed before anything that can panic).
        self.node.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `allocate_slab`: a new slab, unfrozen, every object on its freelist
    /// in address order, on no list yet.
    fn allocate_slab(n: &mut Slabs<T>) -> usize {
        let slab: Box<[T]> = (0..Self::OBJS_PER_SLAB).map(|_| T::default()).collect();
        let base = Box::into_raw(slab).cast::<T>();
        let meta: &'static SlabMeta<T> = Box::leak(Box::new(SlabMeta {
            base,
            allocated: Default::default(),
            remote_freed: Default::default(),
            free_ptr: (1..=Self::OBJS_PER_SLAB)
                .map(|i| {
                    AtomicPtr::new(if i < Self::OBJS_PER_SLAB {
                        base.wrapping_add(i)
                    } else {
                        null_mut()
                    })
                })
                .collect(),
        }));
        let node = SlabNode {
            meta,
            freelist: base,
            frozen: false,
        };
        n.slabs.insert(base.addr(), node);
        base.addr()
    }

    /// `virt_to_slab`: the node of the slab holding `obj`, and its index.
    fn find(n: &mut Slabs<T>, obj: *const T) -> Option<(&mut SlabNode<T>, usize)> {
        let (_, node) = n.slabs.range_mut(..=obj.addr()).next_back()?;
        let i = node.meta.index_of(obj)?;
        Some((node, i))
    }

    /// `___slab_alloc`: the CPU freelist is empty. Under the lock, the CPU
    /// takes back its slab's remote frees, or trades the full slab for a
    /// partial or new one, then pops an object.
    fn slab_alloc_slow(&self, c: &mut CpuSlab) -> *mut T {
        let mut n = self.lock();
        n.stats.alloc_slowpath += 1;
        if let Some(meta) = Self::cpu_meta(c) {
            let node = n
                .slabs
                .get_mut(&meta.base.addr())
                .expect("the CPU slab is the cache's");
            debug_assert!(node.frozen);
            if node.freelist.is_null() {
                // `deactivate_slab` of a full slab: on no list.
                node.frozen = false;
                c.slab = std::ptr::null();
            } else {
                // `get_freelist`.
                meta.take_back_remote();
                c.freelist = std::mem::replace(&mut node.freelist, null_mut()).cast();
                n.stats.alloc_refill += 1;
                return Self::pop(c, meta).expect("a refilled freelist is not empty");
            }
        }
        let key = match n.partial.pop() {
            Some(key) => {
                n.stats.alloc_from_partial += 1;
                key
            }
            None => {
                n.stats.alloc_slab += 1;
                Self::allocate_slab(&mut n)
            }
        };
        let node = n
            .slabs
            .get_mut(&key)
            .expect("a partial slab is the cache's");
        node.frozen = true;
        c.slab = std::ptr::from_ref(node.meta).cast();
        c.freelist = std::mem::replace(&mut node.freelist, null_mut()).cast();
        Self::pop(c, node.meta).expect("a partial or new slab has a free object")
    }

    /// The allocation of a thread without a CPU table: an object straight
    /// from a partial or new slab, under the lock.
    fn alloc_without_cpu(&self) -> *mut T {
        let mut n = self.lock();
        n.stats.alloc_slowpath += 1;
        let key = match n.partial.last() {
            Some(&key) => key,
            None => {
                n.stats.alloc_slab += 1;
                let key = Self::allocate_slab(&mut n);
                n.partial.push(key);
                key
            }
        };
        let node = n
            .slabs
            .get_mut(&key)
            .expect("a partial slab is the cache's");
        let obj = node.freelist;
        let i = node
            .meta
            .index_of(obj)
            .expect("a freelist holds its slab's objects");
        node.freelist = node.meta.free_ptr[i].load(Relaxed);
        write_bit(&node.meta.allocated, i, true);
        if node.freelist.is_null() {
            n.partial.pop();
        }
        obj
    }

    /// `__slab_free`: `obj` is not of this thread's CPU slab. Under the
    /// lock it goes on its own slab's freelist: marked a remote free if
    /// another CPU owns the slab, else freed, and a full slab becomes
    /// partial (`add_partial`).
    fn slab_free_slow(&self, obj: *mut T) {
        let mut n = self.lock();
        n.stats.free_slowpath += 1;
        let (node, i) = Self::find(&mut n, obj).expect("freed object is the cache's");
        assert!(node.meta.is_live(i), "double kmem_cache_free");
        let was_full = node.freelist.is_null();
        let frozen = node.frozen;
        if frozen {
            write_bit(&node.meta.remote_freed, i, true);
        } else {
            write_bit(&node.meta.allocated, i, false);
        }
        node.meta.free_ptr[i].store(node.freelist, Relaxed);
        node.freelist = obj;
        let key = node.meta.base.addr();
        if was_full && !frozen {
            n.partial.push(key);
        }
    }

    /// `flush_cpu_slab` → `deactivate_slab`: the CPU's freelist joins its
    /// slab's, the remote frees are taken back, and the unfrozen slab goes
    /// on the partial list if it has a free object.
    fn flush(&self, c: &CpuSlab) {
        let Some(meta) = Self::cpu_meta(c) else {
            return;
        };
        let mut n = self.lock();
        n.stats.cpuslab_flush += 1;
        let key = meta.base.addr();
        let node = n.slabs.get_mut(&key).expect("the CPU slab is the cache's");
        meta.take_back_remote();
        let mut obj = c.freelist.cast::<T>();
        while !obj.is_null() {
            let i = meta
                .index_of(obj)
                .expect("a CPU freelist holds its slab's objects");
            let next = meta.free_ptr[i].load(Relaxed);
            meta.free_ptr[i].store(node.freelist, Relaxed);
            node.freelist = obj;
            obj = next;
        }
        node.frozen = false;
        if !node.freelist.is_null() {
            n.partial.push(key);
        }
    }

    /// [`Core::flush`] of an erased entry (`CpuSlab::flush`).
    ///
    /// # Safety
    /// `c.core` is a leaked `Core<T>` of this `T` (`CpuSlab`'s invariant).
    unsafe fn flush_erased(c: &CpuSlab) {
        // SAFETY: the contract: a `Core<T>` leaked for the process.
        let core = unsafe { &*c.core.cast::<Core<T>>() };
        core.flush(c);
    }

    /// The CPU slab's metadata, if the CPU has a slab.
    #[inline(always)]
    fn cpu_meta(c: &CpuSlab) -> Option<&'static SlabMeta<T>> {
        // SAFETY: `CpuSlab`'s invariant: null or a leaked `SlabMeta<T>`.
        (!c.slab.is_null()).then(|| unsafe { &*c.slab.cast::<SlabMeta<T>>() })
    }

    /// The fast path's pop of the CPU freelist (`get_freepointer`).
    #[inline(always)]
    fn pop(c: &mut CpuSlab, meta: &SlabMeta<T>) -> Option<*mut T> {
        let obj = c.freelist.cast::<T>();
        if obj.is_null() {
            return None;
        }
        let i = meta
            .index_of(obj)
            .expect("a CPU freelist holds its slab's objects");
        c.freelist = meta.free_ptr[i].load(Relaxed).cast();
        write_bit(&meta.allocated, i, true);
        Some(obj)
    }

    /// The fast path's push of an object of the CPU slab
    /// (`set_freepointer`); `false` if `obj` is of another slab.
    #[inline(always)]
    fn push(c: &mut CpuSlab, obj: *mut T) -> bool {
        let Some(meta) = Self::cpu_meta(c) else {
            return false;
        };
        let Some(i) = meta.index_of(obj) else {
            return false;
        };
        assert!(meta.is_live(i), "double kmem_cache_free");
        write_bit(&meta.allocated, i, false);
        meta.free_ptr[i].store(c.freelist.cast(), Relaxed);
        c.freelist = obj.cast();
        true
    }
}

impl<T: Default + Sync + 'static> KmemCache<T> {
    /// An empty cache (`kmem_cache_create`); slabs come on first use.
    pub const fn new() -> KmemCache<T> {
        assert!(
            std::mem::align_of::<T>() >= 16,
            "memdescs are 16-byte aligned"
        );
        assert!((SLAB_BYTES as usize) / size_of::<T>() <= MAX_OBJS);
        KmemCache {
            core: OnceLock::new(),
        }
    }

    /// The shared core, made and leaked on first use.
    #[inline(always)]
    fn core(&self) -> &'static Core<T> {
        self.core.get_or_init(|| {
            Box::leak(Box::new(Core {
                id: NEXT_CACHE_ID.fetch_add(1, Relaxed),
                node: Mutex::new(Slabs {
                    slabs: BTreeMap::new(),
                    partial: Vec::new(),
                    stats: SlubStats::default(),
                }),
            }))
        })
    }

    /// This thread's CPU slab of `core` in `table`, made empty on first
    /// use.
    #[inline(always)]
    fn this_cpu<'t>(
        table: &'t mut Vec<Option<CpuSlab>>,
        core: &'static Core<T>,
    ) -> &'t mut CpuSlab {
        if table.len() <= core.id {
            table.resize_with(core.id + 1, || None);
        }
        table[core.id].get_or_insert_with(|| CpuSlab {
            core: std::ptr::from_ref(core).cast(),
            slab: std::ptr::null(),
            freelist: null_mut(),
            flush: Core::<T>::flush_erased,
        })
    }

    /// `kmem_cache_alloc`: a fresh `T::default()` object, 16-byte aligned,
    /// valid for the life of the process. Lock-free while this thread's
    /// CPU freelist has an object.
    pub fn alloc(&self) -> *mut T {
        let core = self.core();
        CPU_SLABS
            .try_with(|cpu| {
                let mut table = cpu.0.borrow_mut();
                let c = Self::this_cpu(&mut table, core);
                match Core::<T>::cpu_meta(c).and_then(|meta| Core::pop(c, meta)) {
                    Some(obj) => obj,
                    None => core.slab_alloc_slow(c),
                }
            })
            .unwrap_or_else(|_| core.alloc_without_cpu())
    }

    /// `kmem_cache_free`. Lock-free if `obj` is of this thread's CPU slab.
    ///
    /// # Safety
    /// `obj` came from [`KmemCache::alloc`] of this cache, is not freed
    /// yet, and nothing will read it as its owner's descriptor again.
    pub unsafe fn free(&self, obj: *mut T) {
        // SAFETY: the caller's contract: a live object of this cache, which
        // no one else writes now. Resetting it keeps the free objects at
        // `T::default()`, as a constructor-less slab would not promise but
        // this cache does (it makes a stale read obvious).
        unsafe { obj.write(T::default()) };
        let core = self.core();
        let fast = CPU_SLABS.try_with(|cpu| {
            let mut table = cpu.0.borrow_mut();
            let c = table.get_mut(core.id).and_then(Option::as_mut);
            c.is_some_and(|c| Core::push(c, obj))
        });
        if fast != Ok(true) {
            core.slab_free_slow(obj);
        }
    }

    /// Whether `obj` is an allocated object of this cache (the structure
    /// checker's question). Exact for an object no other thread is
    /// allocating or freeing at the same time.
    pub fn is_live(&self, obj: *const T) -> bool {
        let mut n = self.core().lock();
        Core::find(&mut n, obj).is_some_and(|(node, i)| node.meta.is_live(i))
    }

    /// The cache's counts now: exact while no thread allocates or frees.
    pub fn info(&self) -> SlabInfo {
        let n = self.core().lock();
        SlabInfo {
            active_objs: n.slabs.values().map(|node| node.meta.nr_live()).sum(),
            num_slabs: n.slabs.len() as u64,
            objsize: size_of::<T>() as u64,
            slow: n.stats,
        }
    }
}

#[cfg(test)]
#[path = "kmem_cache_tests.rs"]
mod tests;
