//! `kmem_cache_create("buddy", sizeof(struct buddy), 16, …)`: the slab
//! cache the Memdescs plan allocates every memdesc from, here for the one
//! pfnlab needs, a free or listed page's `struct buddy`.
//!
//! The plan requires every structure a memdesc points to to come from a
//! slab aligned to 16 bytes, so the low 4 bits of the memdesc word are free
//! for the type. This cache hands out 16-byte-aligned objects carved from
//! slabs of [`SLAB_BYTES`] (one 4 KiB page, as an order-0 SLUB slab), keeps
//! a free-object list, and counts its objects and slabs so that the memory
//! the descriptors cost is reported beside the memmap.
//!
//! What is modelled and what is not:
//! - the cache is global, as a `kmem_cache` is: every allocator at one page
//!   size shares it (each size has its own, see `p16`);
//! - `kmem_cache_alloc` / `kmem_cache_free` take the cache's lock (SLUB's
//!   `n->list_lock`, the slow path) on every call: the per-CPU slab that
//!   makes the kernel's fast path lock-free is not modelled, so the figure
//!   at 16 bytes is an upper bound on the pool's share;
//! - slabs are never given back (no shrinker runs), so `slabs` is the
//!   high-water mark;
//! - `SLAB_TYPESAFE_BY_RCU` needs no code here: slabs are never freed, so a
//!   reader racing a free reads a descriptor of the same type.
//!
//! # Safety
//! Objects are handed out as raw pointers derived from the slab's own
//! allocation (leaked to the cache for the life of the process), so they
//! stay valid forever; [`KmemCache::free`]'s caller promises the object
//! came from this cache and is no longer reachable from any page.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// Bytes of one slab: one 4 KiB page.
pub const SLAB_BYTES: u64 = 4096;

/// What a cache can say of itself (`/proc/slabinfo`'s `active_objs`,
/// `num_slabs`, `objsize`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlabInfo {
    /// Objects allocated and not freed.
    pub active_objs: u64,
    /// Slabs the cache holds (never shrunk: the high-water mark).
    pub num_slabs: u64,
    /// Bytes of one object.
    pub objsize: u64,
}

impl SlabInfo {
    /// Bytes the cache holds: its slabs.
    pub fn bytes(&self) -> u64 {
        self.num_slabs * SLAB_BYTES
    }
}

/// One slab: its first object and which of its objects are allocated.
struct Slab<T> {
    base: *mut T,
    live: u128,
}

/// The cache's state behind its lock.
///
/// Invariants: `slabs` is keyed by each slab's base address (so finding an
/// object's slab is a lookup, as `virt_to_slab` is in the kernel); every
/// pointer on `free` is an object of a slab in `slabs` whose `live` bit is
/// clear; every other object's bit is set; `active` is the number of set
/// bits.
struct Slabs<T> {
    slabs: BTreeMap<usize, Slab<T>>,
    free: Vec<*mut T>,
    active: u64,
}

// SAFETY: the pointers are to objects leaked to the cache, whose `T` is
// `Sync` (atomics only) and lives for the process; the `Mutex` serialises
// every use of the lists.
unsafe impl<T: Sync> Send for Slabs<T> {}

/// A slab cache of `T`: see the module documentation.
pub struct KmemCache<T> {
    inner: Mutex<Slabs<T>>,
}

impl<T: Default + Sync> KmemCache<T> {
    /// Objects per slab.
    const OBJS_PER_SLAB: usize = (SLAB_BYTES as usize) / std::mem::size_of::<T>();

    /// An empty cache (`kmem_cache_create`); slabs come on first use.
    pub const fn new() -> KmemCache<T> {
        assert!(
            std::mem::align_of::<T>() >= 16,
            "memdescs are 16-byte aligned"
        );
        assert!((SLAB_BYTES as usize) / std::mem::size_of::<T>() <= 128);
        KmemCache {
            inner: Mutex::new(Slabs {
                slabs: BTreeMap::new(),
                free: Vec::new(),
                active: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slabs<T>> {
        // A panic under the lock leaves the lists consistent (every
        // mutation below is completed before anything that can panic).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `kmem_cache_alloc`: a fresh `T::default()` object, 16-byte aligned,
    /// valid for the life of the process.
    pub fn alloc(&self) -> *mut T {
        let mut s = self.lock();
        if s.free.is_empty() {
            // `allocate_slab`: a new slab, every object on the free list.
            let slab: Box<[T]> = (0..Self::OBJS_PER_SLAB).map(|_| T::default()).collect();
            let base = Box::into_raw(slab).cast::<T>();
            // Pushed in reverse so the first object is handed out first.
            // SAFETY: `i` is within the slab just leaked.
            s.free.extend(
                (0..Self::OBJS_PER_SLAB)
                    .rev()
                    .map(|i| unsafe { base.add(i) }),
            );
            s.slabs.insert(base.addr(), Slab { base, live: 0 });
        }
        let obj = s.free.pop().expect("a slab was just added");
        let (slab, i) = Self::find(&mut s.slabs, obj).expect("free objects are the cache's");
        debug_assert_eq!(slab.live >> i & 1, 0, "a free object is not live");
        slab.live |= 1 << i;
        s.active += 1;
        obj
    }

    /// `kmem_cache_free`.
    ///
    /// # Safety
    /// `obj` came from [`KmemCache::alloc`] of this cache, is not freed
    /// yet, and nothing will read it as its owner's descriptor again.
    pub unsafe fn free(&self, obj: *mut T) {
        // SAFETY: the caller's contract: a live object of this cache, which
        // no one else writes now. Resetting it keeps the free list's
        // objects at `T::default()`, as a constructor-less slab would not
        // promise but this cache does (it makes a stale read obvious).
        unsafe { obj.write(T::default()) };
        let mut s = self.lock();
        let (slab, i) = Self::find(&mut s.slabs, obj).expect("freed object is the cache's");
        assert_eq!(slab.live >> i & 1, 1, "double kmem_cache_free");
        slab.live &= !(1 << i);
        s.active -= 1;
        s.free.push(obj);
    }

    /// Whether `obj` is an allocated object of this cache (the structure
    /// checker's question).
    pub fn is_live(&self, obj: *const T) -> bool {
        let mut s = self.lock();
        Self::find(&mut s.slabs, obj.cast_mut()).is_some_and(|(slab, i)| slab.live >> i & 1 == 1)
    }

    /// The cache's counts now.
    pub fn info(&self) -> SlabInfo {
        let s = self.lock();
        SlabInfo {
            active_objs: s.active,
            num_slabs: s.slabs.len() as u64,
            objsize: std::mem::size_of::<T>() as u64,
        }
    }

    /// The slab and index of `obj`, if it is an object of one of `slabs`:
    /// the slab with the highest base at or below it.
    fn find(slabs: &mut BTreeMap<usize, Slab<T>>, obj: *mut T) -> Option<(&mut Slab<T>, usize)> {
        let size = std::mem::size_of::<T>();
        let (_, slab) = slabs.range_mut(..=obj.addr()).next_back()?;
        let off = obj.addr() - slab.base.addr();
        (off < Self::OBJS_PER_SLAB * size && off.is_multiple_of(size)).then_some((slab, off / size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    #[derive(Default)]
    #[repr(align(16))]
    struct Obj {
        a: AtomicU64,
        b: AtomicU64,
        _pad: [u64; 2],
    }

    #[test]
    fn alloc_free_counts_and_reuses() {
        let cache: KmemCache<Obj> = KmemCache::new();
        assert_eq!(
            cache.info(),
            SlabInfo {
                objsize: 32,
                ..SlabInfo::default()
            }
        );
        let objs: Vec<*mut Obj> = (0..300).map(|_| cache.alloc()).collect();
        for (i, &o) in objs.iter().enumerate() {
            assert_eq!(o.addr() % 16, 0);
            assert!(cache.is_live(o));
            // SAFETY: a live object of this cache, used by this test alone.
            unsafe { (*o).a.store(i as u64, Relaxed) };
        }
        let info = cache.info();
        assert_eq!(
            (info.active_objs, info.num_slabs),
            (300, 3),
            "128 per slab of 32 B"
        );
        assert_eq!(info.bytes(), 3 * SLAB_BYTES);
        // SAFETY: live, allocated above, freed once.
        unsafe { cache.free(objs[7]) };
        assert!(!cache.is_live(objs[7]) && cache.is_live(objs[8]));
        assert_eq!(
            cache.alloc(),
            objs[7],
            "the free list hands back the freed object"
        );
        // SAFETY: as above (the objects, each once).
        let a = unsafe { (*objs[7]).a.load(Relaxed) + (*objs[7]).b.load(Relaxed) };
        assert_eq!(a, 0, "a reused object is reset");
        for &o in &objs {
            // SAFETY: as above.
            unsafe { cache.free(o) };
        }
        assert_eq!(cache.info().active_objs, 0);
        assert_eq!(cache.info().num_slabs, 3, "slabs are kept");
        assert!(!cache.is_live(std::ptr::null()));
    }
}
