//! The cache's tests: counts, the fast path's reuse without the lock,
//! remote frees, the flush at a thread's exit, and random sequences on two
//! threads against a reference set.

use super::*;
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc;

#[derive(Default)]
#[repr(align(16))]
struct Obj {
    a: AtomicU64,
    b: AtomicU64,
    _pad: [u64; 2],
}

/// A cache that lives for the test binary, so a pointer can cross threads
/// as an address.
fn leaked_cache() -> &'static KmemCache<Obj> {
    Box::leak(Box::new(KmemCache::new()))
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
    assert_eq!(cache.info().active_objs, 299);
    // SAFETY: as above.
    unsafe { cache.free(objs[299]) };
    assert_eq!(
        cache.alloc(),
        objs[299],
        "the CPU freelist hands back the last object freed into the CPU slab"
    );
    // SAFETY: as above (the objects, each once).
    let a = unsafe { (*objs[299]).a.load(Relaxed) + (*objs[299]).b.load(Relaxed) };
    assert_eq!(a, 0, "a reused object is reset");
    assert!(
        !cache.is_live(objs[7]),
        "a slab off the CPU keeps its free object"
    );
    assert_eq!(
        cache.core().lock().partial,
        [objs[0].addr()],
        "and is partial"
    );
    for &o in objs.iter().filter(|&&o| o != objs[7]) {
        // SAFETY: as above.
        unsafe { cache.free(o) };
    }
    assert_eq!(cache.info().active_objs, 0);
    assert_eq!(cache.info().num_slabs, 3, "slabs are kept");
    assert!(!cache.is_live(std::ptr::null()));
    assert!(!cache.is_live(objs[0].cast::<u8>().wrapping_add(8).cast()));
}

#[test]
fn one_thread_reuses_its_cpu_slab_without_the_lock() {
    let cache: KmemCache<Obj> = KmemCache::new();
    let first = cache.alloc();
    let after_first = cache.info().slow;
    assert_eq!(
        after_first,
        SlubStats {
            alloc_slowpath: 1,
            alloc_slab: 1,
            ..SlubStats::default()
        },
        "the first allocation freezes a new slab"
    );
    // A workload, not a wait: 1000 alloc+free pairs on the fast paths
    // (`slab_alloc_node`, `do_slab_free`), which must never take the lock.
    for _ in 0..1000 {
        let o = cache.alloc();
        assert!(cache.is_live(o));
        // SAFETY: allocated just above, freed once.
        unsafe { cache.free(o) };
        assert!(!cache.is_live(o));
    }
    assert_eq!(cache.info().slow, after_first, "no pair took the lock");
    // 127 more objects fill the CPU slab; the 129th allocation is slow.
    let more: Vec<_> = (0..127).map(|_| cache.alloc()).collect();
    assert_eq!(cache.info().slow.alloc_slowpath, 1);
    let next = cache.alloc();
    let slow = cache.info().slow;
    assert_eq!((slow.alloc_slowpath, slow.alloc_slab), (2, 2));
    for o in more.into_iter().chain([first, next]) {
        // SAFETY: each allocated above, freed once.
        unsafe { cache.free(o) };
    }
    let info = cache.info();
    assert_eq!(info.active_objs, 0);
    assert_eq!(
        info.slow.free_slowpath, 128,
        "the full slab's objects were freed after it left the CPU"
    );
}

#[test]
fn a_remote_free_goes_to_its_slab_and_comes_back_by_refill() {
    let cache = leaked_cache();
    let objs: Vec<usize> = (0..128)
        .map(|_| cache.alloc().expose_provenance())
        .collect();
    assert_eq!(cache.info().slow.alloc_slowpath, 1, "one slab's worth");
    let (first_half, second_half) = objs.split_at(64);
    std::thread::scope(|s| {
        s.spawn(|| {
            for &o in first_half {
                // SAFETY: live objects of this cache, handed to this thread.
                unsafe { cache.free(std::ptr::with_exposed_provenance_mut::<Obj>(o)) };
            }
        })
        .join()
        .expect("the remote thread");
    });
    let info = cache.info();
    assert_eq!(info.active_objs, 64);
    assert_eq!(
        info.slow.free_slowpath, 64,
        "every remote free took the lock"
    );
    assert_eq!(info.slow.cpuslab_flush, 0, "the remote thread held no slab");
    assert!(
        first_half
            .iter()
            .all(|&o| !cache.is_live(std::ptr::without_provenance(o)))
    );
    assert!(
        second_half
            .iter()
            .all(|&o| cache.is_live(std::ptr::without_provenance(o)))
    );
    // The CPU freelist is empty: the next allocation takes the remote
    // frees back (`get_freelist`), not a new slab.
    let back: BTreeSet<usize> = (0..64).map(|_| cache.alloc().addr()).collect();
    let slow = cache.info().slow;
    assert_eq!((slow.alloc_refill, slow.alloc_slab), (1, 1));
    assert_eq!(back, first_half.iter().copied().collect());
    assert_eq!(cache.info().active_objs, 128);
}

#[test]
fn thread_exit_flushes_its_cpu_slab_and_counts_stay_exact() {
    let cache = leaked_cache();
    let kept: Vec<usize> = std::thread::scope(|s| {
        s.spawn(|| {
            let objs: Vec<*mut Obj> = (0..10).map(|_| cache.alloc()).collect();
            for &o in &objs[..6] {
                // SAFETY: allocated above, freed once.
                unsafe { cache.free(o) };
            }
            objs[6..].iter().map(|o| o.expose_provenance()).collect()
        })
        .join()
        .expect("the exiting thread")
    });
    let info = cache.info();
    assert_eq!((info.active_objs, info.num_slabs), (4, 1));
    assert_eq!(info.slow.cpuslab_flush, 1, "the TLS destructor ran");
    assert_eq!(info.slow.free_slowpath, 0, "its frees were of its own slab");
    // The flushed slab is partial: this thread's first allocation takes it.
    let o = cache.alloc();
    let slow = cache.info().slow;
    assert_eq!((slow.alloc_from_partial, slow.alloc_slab), (1, 1));
    assert!(!kept.contains(&o.addr()));
    for a in kept {
        // SAFETY: the exited thread's live objects, freed once.
        unsafe { cache.free(std::ptr::with_exposed_provenance_mut::<Obj>(a)) };
    }
    // SAFETY: allocated above, freed once.
    unsafe { cache.free(o) };
    assert_eq!(cache.info().active_objs, 0);
}

/// One step of the two-thread sequence: which thread, and whether it
/// allocates or frees the reference set's `n`-th live object.
#[derive(Clone, Debug)]
struct Step {
    thread: usize,
    alloc: bool,
    n: usize,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let len = if cfg!(miri) { 40 } else { 400 };
    prop::collection::vec(
        (0..2usize, prop::bool::weighted(0.55), any::<usize>())
            .prop_map(|(thread, alloc, n)| Step { thread, alloc, n }),
        1..len,
    )
}

/// Two threads that each run the alloc or free they are sent and answer
/// with the object's address (a remote free whenever the object is of the
/// other thread's CPU slab).
fn run_on_two_threads(cache: &'static KmemCache<Obj>, steps: &[Step]) -> BTreeSet<usize> {
    let mut live = BTreeSet::new();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let (to, from_lab) = mpsc::channel::<Option<usize>>();
                let (to_lab, from) = mpsc::channel::<usize>();
                let handle = s.spawn(move || {
                    for free in from_lab {
                        let addr = match free {
                            None => cache.alloc().expose_provenance(),
                            Some(a) => {
                                // SAFETY: a live object the lab owns, freed once.
                                unsafe {
                                    cache.free(std::ptr::with_exposed_provenance_mut::<Obj>(a))
                                };
                                a
                            }
                        };
                        to_lab.send(addr).expect("the lab waits");
                    }
                });
                (to, from, handle)
            })
            .collect();
        for step in steps {
            let (to, from, _) = &workers[step.thread];
            if step.alloc || live.is_empty() {
                to.send(None).expect("the worker runs");
                let a = from.recv().expect("the worker answers");
                assert!(live.insert(a), "an object handed out twice");
            } else {
                let a = *live.iter().nth(step.n % live.len()).expect("not empty");
                to.send(Some(a)).expect("the worker runs");
                assert_eq!(from.recv().expect("the worker answers"), a);
                live.remove(&a);
                assert!(!cache.is_live(std::ptr::without_provenance(a)));
            }
            assert_eq!(cache.info().active_objs, live.len() as u64);
        }
        for (to, from, handle) in workers {
            drop((to, from));
            handle.join().expect("the worker exits");
        }
    });
    live
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 2 } else { 64 }))]

    #[test]
    fn two_threads_match_a_reference_set(steps in steps()) {
        let cache = leaked_cache();
        let live = run_on_two_threads(cache, &steps);
        let info = cache.info();
        prop_assert_eq!(info.active_objs, live.len() as u64);
        prop_assert!(info.slow.cpuslab_flush <= 2, "one flush per worker at most");
        check_nodes(cache);
        for &a in &live {
            prop_assert!(cache.is_live(std::ptr::without_provenance(a)));
            // SAFETY: live objects the workers left, freed once.
            unsafe { cache.free(std::ptr::with_exposed_provenance_mut::<Obj>(a)) };
        }
        prop_assert_eq!(cache.info().active_objs, 0);
    }
}

/// After every worker exited: no slab is frozen, and the partial list
/// holds exactly the slabs with a free object, once each.
fn check_nodes(cache: &KmemCache<Obj>) {
    let n = cache.core().lock();
    assert!(
        n.slabs.values().all(|node| !node.frozen),
        "a flushed CPU slab is unfrozen"
    );
    let partial: BTreeSet<usize> = n.partial.iter().copied().collect();
    assert_eq!(
        partial.len(),
        n.partial.len(),
        "a slab is on the partial list once"
    );
    let with_free: BTreeSet<usize> = n
        .slabs
        .iter()
        .filter(|(_, node)| !node.freelist.is_null())
        .map(|(&k, _)| k)
        .collect();
    assert_eq!(partial, with_free);
}
