//! LLFree against a plain reference (a bitmap of allocated frames) on
//! generated get/put sequences, under threads, and on the fragmentation
//! property its design is for: free huge frames survive scattered frees.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use buddy::llfree::{Class, HUGE_FRAMES, HUGE_ORDER, LLFree, LlfreeError, TREE_FRAMES};
use proptest::prelude::*;
use sparsemem::{Order, Pfn};

/// The reference: which frames are allocated, and the live blocks.
struct Reference {
    taken: Vec<bool>,
    live: BTreeMap<u64, u8>,
}

impl Reference {
    fn new(nr_frames: u64) -> Reference {
        Reference {
            taken: vec![false; nr_frames as usize],
            live: BTreeMap::new(),
        }
    }

    fn nr_frames(&self) -> u64 {
        self.taken.len() as u64
    }

    fn range(frame: u64, order: u8) -> std::ops::Range<usize> {
        frame as usize..(frame + (1 << order)) as usize
    }

    /// Whether an aligned block of `order` is free somewhere.
    fn has_free_block(&self, order: u8) -> bool {
        let n = 1u64 << order;
        (0..self.nr_frames() / n)
            .map(|i| i * n)
            .any(|s| !self.taken[Reference::range(s, order)].contains(&true))
    }

    /// Records a block `get` returned, checking it is aligned, in range
    /// and overlaps no live block.
    fn got(&mut self, frame: u64, order: u8) -> Result<(), String> {
        let n = 1u64 << order;
        if !frame.is_multiple_of(n) || frame + n > self.nr_frames() {
            return Err(format!(
                "block {frame:#x}/{order} misaligned or out of range"
            ));
        }
        let range = Reference::range(frame, order);
        if self.taken[range.clone()].contains(&true) {
            return Err(format!("block {frame:#x}/{order} overlaps a live block"));
        }
        self.taken[range].fill(true);
        self.live.insert(frame, order);
        Ok(())
    }

    fn put(&mut self, frame: u64) -> u8 {
        let order = self.live.remove(&frame).unwrap();
        self.taken[Reference::range(frame, order)].fill(false);
        order
    }

    fn free_frames(&self) -> u64 {
        self.taken.iter().filter(|t| !**t).count() as u64
    }

    /// Whole huge frames with nothing taken.
    fn free_huge_frames(&self) -> u64 {
        self.taken
            .chunks_exact(HUGE_FRAMES as usize)
            .filter(|c| !c.contains(&true))
            .count() as u64
    }
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Get {
        cpu: usize,
        order: u8,
        movable: bool,
    },
    Put {
        cpu: usize,
        pick: usize,
    },
    /// A put that must be refused: `kind` picks a frame never handed out,
    /// a live one with another order, or a misaligned one.
    BadPut {
        cpu: usize,
        pick: usize,
        kind: u8,
    },
    Drain,
}

fn arb_op(nr_cpus: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..nr_cpus, prop_oneof![3 => 0u8..=2, 1 => 0u8..=HUGE_ORDER], any::<bool>())
            .prop_map(|(cpu, order, movable)| Op::Get { cpu, order, movable }),
        3 => (0..nr_cpus, any::<usize>()).prop_map(|(cpu, pick)| Op::Put { cpu, pick }),
        1 => (0..nr_cpus, any::<usize>(), 0u8..3).prop_map(|(cpu, pick, kind)| Op::BadPut { cpu, pick, kind }),
        1 => Just(Op::Drain),
    ]
}

/// Sizes: within one huge frame, a few huge frames with a partial last
/// one, and two trees (the second partial).
fn arb_case() -> impl Strategy<Value = (u64, usize, Vec<Op>)> {
    let frames = prop_oneof![
        1u64..600,
        600u64..4000,
        Just(TREE_FRAMES + 3 * HUGE_FRAMES + 17)
    ];
    (frames, 1usize..=4).prop_flat_map(|(frames, cpus)| {
        (
            Just(frames),
            Just(cpus),
            prop::collection::vec(arb_op(cpus), 1..120),
        )
    })
}

/// The frame a bad put of `kind` names, and the order it gives.
fn bad_put(reference: &Reference, pick: usize, kind: u8) -> (u64, u8) {
    let live: Vec<(u64, u8)> = reference.live.iter().map(|(f, o)| (*f, *o)).collect();
    match (kind, live.get(pick % live.len().max(1))) {
        (1, Some(&(frame, order))) => (frame, (order + 1 + (pick % 9) as u8) % (HUGE_ORDER + 1)),
        (2, Some(&(frame, order))) if order > 0 => (frame + 1, order),
        _ => {
            let free = (0..reference.nr_frames())
                .find(|f| !reference.live.contains_key(f) && (pick as u64 + f).is_multiple_of(7));
            (free.unwrap_or(reference.nr_frames() + pick as u64 % 3), 0)
        }
    }
}

fn step(llfree: &LLFree, reference: &mut Reference, op: Op) -> Result<(), String> {
    match op {
        Op::Get {
            cpu,
            order,
            movable,
        } => {
            let class = if movable {
                Class::Movable
            } else {
                Class::Immovable
            };
            match llfree.get(cpu, Order::new(order), class) {
                Ok(pfn) => reference.got(pfn.get(), order)?,
                Err(LlfreeError::NoMemory { .. }) if !reference.has_free_block(order) => {}
                Err(e) => return Err(format!("get of order {order} failed: {e}")),
            }
        }
        Op::Put { cpu, pick } => {
            let Some(&frame) = reference
                .live
                .keys()
                .nth(pick % reference.live.len().max(1))
            else {
                return Ok(());
            };
            let order = reference.put(frame);
            llfree
                .put(cpu, Pfn::new(frame), Order::new(order))
                .map_err(|e| format!("put {frame:#x}/{order}: {e}"))?;
        }
        Op::BadPut { cpu, pick, kind } => {
            let (frame, order) = bad_put(reference, pick, kind);
            if reference.live.get(&frame) == Some(&order) {
                return Ok(());
            }
            let before = (llfree.free_frames(), llfree.counted_free_frames());
            if llfree.put(cpu, Pfn::new(frame), Order::new(order)).is_ok() {
                return Err(format!("bad put {frame:#x}/{order} accepted"));
            }
            if (llfree.free_frames(), llfree.counted_free_frames()) != before {
                return Err(format!("bad put {frame:#x}/{order} changed the counters"));
            }
        }
        Op::Drain => llfree.drain(),
    }
    Ok(())
}

fn run(nr_frames: u64, nr_cpus: usize, ops: &[Op]) -> Result<(), String> {
    let llfree = LLFree::new(nr_frames, nr_cpus).map_err(|e| e.to_string())?;
    let mut reference = Reference::new(nr_frames);
    for (i, &op) in ops.iter().enumerate() {
        step(&llfree, &mut reference, op).map_err(|e| format!("op {i} {op:?}: {e}"))?;
        let free = reference.free_frames();
        let counts = (
            llfree.free_frames(),
            llfree.counted_free_frames(),
            llfree.free_huge_frames(),
        );
        if counts != (free, free, reference.free_huge_frames()) {
            return Err(format!(
                "op {i} {op:?}: counts {counts:?}, reference free {free}"
            ));
        }
    }
    for (frame, order) in std::mem::take(&mut reference.live) {
        llfree
            .put(0, Pfn::new(frame), Order::new(order))
            .map_err(|e| e.to_string())?;
    }
    let whole = nr_frames / HUGE_FRAMES;
    if (llfree.free_frames(), llfree.free_huge_frames()) != (nr_frames, whole) {
        return Err("not everything came back".into());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: sparsemem::testing::cases(48), ..ProptestConfig::default() })]

    #[test]
    fn llfree_matches_reference((nr_frames, nr_cpus, ops) in arb_case()) {
        run(nr_frames, nr_cpus, &ops).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn llfree_refuses_bad_arguments() {
    assert_eq!(
        LLFree::new(0, 1).err(),
        Some(LlfreeError::Frames { nr_frames: 0 })
    );
    assert_eq!(
        LLFree::new(512, 0).err(),
        Some(LlfreeError::Cpus { nr_cpus: 0 })
    );
    let too_many = buddy::llfree::MAX_CPUS + 1;
    assert_eq!(
        LLFree::new(512, too_many).err(),
        Some(LlfreeError::Cpus { nr_cpus: too_many })
    );
    let llfree = LLFree::new(1024, 2).unwrap();
    let cpu = LlfreeError::Cpu { cpu: 2, nr_cpus: 2 };
    assert_eq!(llfree.get(2, Order::ZERO, Class::Movable), Err(cpu));
    assert_eq!(llfree.put(2, Pfn::new(0), Order::ZERO), Err(cpu));
    assert_eq!(
        llfree.get(0, Order::new(10), Class::Movable),
        Err(LlfreeError::Order { order: 10 })
    );
    assert_eq!(
        llfree.put(0, Pfn::new(1024), Order::ZERO),
        Err(LlfreeError::OutOfRange {
            frame: 1024,
            nr_frames: 1024
        })
    );
    assert_eq!(
        llfree.put(0, Pfn::new(2), Order::new(2)),
        Err(LlfreeError::Misaligned { frame: 2, order: 2 })
    );
    assert_eq!(llfree.free_frames(), 1024);
}

/// The next number of a xorshift sequence.
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Which frames threads hold, one bit each: marking a frame twice or
/// unmarking a free one is a frame handed out twice.
struct Shadow(Vec<AtomicU64>);

impl Shadow {
    /// Unmarks the block, then puts it back on `cpu`.
    fn put(&self, llfree: &LLFree, cpu: usize, pfn: Pfn, order: u8) {
        self.mark(pfn.get(), order, false);
        llfree.put(cpu, pfn, Order::new(order)).unwrap();
    }

    fn new(nr_frames: u64) -> Shadow {
        Shadow(
            (0..nr_frames.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
        )
    }

    /// Marks the block as held (`held`) or as about to be put.
    fn mark(&self, frame: u64, order: u8, held: bool) {
        for f in frame..frame + (1 << order) {
            let (word, bit) = (&self.0[(f / 64) as usize], 1u64 << (f % 64));
            let old = if held {
                word.fetch_or(bit, Relaxed)
            } else {
                word.fetch_and(!bit, Relaxed)
            };
            assert_eq!(old & bit != 0, !held, "frame {f:#x} handed out twice");
        }
    }

    fn is_clear(&self) -> bool {
        self.0.iter().all(|w| w.load(Relaxed) == 0)
    }
}

/// Threads, each on its own CPU and both classes, get and put blocks of
/// orders 0 to 9 on one instance (most of order 0 to 2); a shared bitmap
/// catches any frame handed out twice, every order must succeed at least
/// once, and at the end every frame is free and every huge frame whole.
///
/// A block is unmarked before its put, so a frame handed out again
/// between the unmark and the put would go unseen.
#[test]
fn llfree_threads_account_for_every_frame() {
    const THREADS: usize = 4;
    // Two trees for eight reservations: requests fail, drain and steal.
    let nr_frames = TREE_FRAMES + 5 * HUGE_FRAMES;
    let llfree = LLFree::new(nr_frames, THREADS).unwrap();
    let shadow = Shadow::new(nr_frames);
    let got: [AtomicU64; HUGE_ORDER as usize + 1] = Default::default();
    let start = Barrier::new(THREADS);
    std::thread::scope(|s| {
        for cpu in 0..THREADS {
            let (llfree, shadow, got, start) = (&llfree, &shadow, &got, &start);
            s.spawn(move || {
                start.wait();
                let mut held: Vec<(Pfn, u8)> = Vec::new();
                let mut x = 0x2545_f491_4f6c_dd1du64 + cpu as u64;
                for _ in 0..5000 {
                    // Order, class, get or put and the block to put from
                    // separate bits, so that every combination occurs.
                    let x = xorshift(&mut x);
                    let order = if (x >> 8).is_multiple_of(16) {
                        ((x >> 16) % 10) as u8
                    } else {
                        ((x >> 24) % 3) as u8
                    };
                    let class = Class::ALL[(x >> 40) as usize % 2];
                    if held.len() < 200 && !(x >> 32).is_multiple_of(3) {
                        if let Ok(pfn) = llfree.get(cpu, Order::new(order), class) {
                            shadow.mark(pfn.get(), order, true);
                            held.push((pfn, order));
                            got[order as usize].fetch_add(1, Relaxed);
                        }
                    } else if !held.is_empty() {
                        let (pfn, order) = held.swap_remove((x >> 48) as usize % held.len());
                        shadow.put(llfree, cpu, pfn, order);
                    }
                }
                for (pfn, order) in held {
                    shadow.put(llfree, cpu, pfn, order);
                }
            });
        }
    });
    let got: Vec<u64> = got.iter().map(|g| g.load(Relaxed)).collect();
    assert!(!got.contains(&0), "gets per order 0..=9: {got:?}");
    assert_eq!(llfree.free_frames(), nr_frames);
    assert_eq!(llfree.counted_free_frames(), nr_frames);
    assert_eq!(llfree.free_huge_frames(), nr_frames / HUGE_FRAMES);
}

/// Threads race order-9 requests against order-0 and order-7 ones on the
/// same few huge frames (one tree of four), so that taking a huge frame
/// whole races small blocks being claimed from it and freed into it. Four
/// threads share two CPU numbers, so they also race on the same
/// reservations. A shared bitmap catches any frame handed out twice,
/// every order must succeed at least once, and at the end every frame is
/// free and every huge frame whole.
#[test]
fn llfree_threads_race_huge_and_small_on_few_huge_frames() {
    const THREADS: usize = 4;
    const ORDERS: [u8; 3] = [0, 7, HUGE_ORDER];
    let nr_frames = 4 * HUGE_FRAMES;
    let llfree = LLFree::new(nr_frames, THREADS / 2).unwrap();
    let shadow = Shadow::new(nr_frames);
    let got: [AtomicU64; 3] = Default::default();
    let start = Barrier::new(THREADS);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (llfree, shadow, got, start) = (&llfree, &shadow, &got, &start);
            s.spawn(move || {
                start.wait();
                let cpu = t % (THREADS / 2);
                let mut held: Vec<(Pfn, u8)> = Vec::new();
                let mut x = 0x9e37_79b9_7f4a_7c15u64 + t as u64;
                for _ in 0..4000 {
                    let x = xorshift(&mut x);
                    let i = (x >> 8) as usize % ORDERS.len();
                    let order = ORDERS[i];
                    let class = Class::ALL[(x >> 40) as usize % 2];
                    // Few blocks held, so huge frames keep coming free.
                    if held.len() < 3 && (x >> 32).is_multiple_of(2) {
                        if let Ok(pfn) = llfree.get(cpu, Order::new(order), class) {
                            shadow.mark(pfn.get(), order, true);
                            held.push((pfn, order));
                            got[i].fetch_add(1, Relaxed);
                        }
                    } else if !held.is_empty() {
                        let (pfn, order) = held.swap_remove((x >> 48) as usize % held.len());
                        shadow.put(llfree, cpu, pfn, order);
                    }
                }
                for (pfn, order) in held {
                    shadow.put(llfree, cpu, pfn, order);
                }
            });
        }
    });
    let got: Vec<u64> = got.iter().map(|g| g.load(Relaxed)).collect();
    assert!(!got.contains(&0), "gets of orders {ORDERS:?}: {got:?}");
    assert!(shadow.is_clear());
    assert_eq!(llfree.free_frames(), nr_frames);
    assert_eq!(llfree.counted_free_frames(), nr_frames);
    assert_eq!(llfree.free_huge_frames(), nr_frames / HUGE_FRAMES);
}

/// Memory filled with order-0 frames, then a random tenth of them freed
/// all over it: no huge frame is free. Freeing every frame of some huge
/// frames gives exactly those back as whole huge frames, which order-9
/// requests then take.
#[test]
fn llfree_whole_huge_frames_come_back_after_scattered_frees() {
    let nr_frames = 4 * TREE_FRAMES;
    let llfree = LLFree::new(nr_frames, 2).unwrap();
    let mut frames = Vec::new();
    while let Ok(pfn) = llfree.get(frames.len() % 2, Order::ZERO, Class::Movable) {
        frames.push(pfn);
    }
    assert_eq!(frames.len() as u64, nr_frames);
    let mut x = 0x1234_5678u64;
    let mut live: BTreeSet<u64> = frames.iter().map(|p| p.get()).collect();
    for _ in 0..nr_frames / 10 {
        let f = xorshift(&mut x) % nr_frames;
        if live.remove(&f) {
            llfree.put(0, Pfn::new(f), Order::ZERO).unwrap();
        }
    }
    assert!(llfree.free_frames() > nr_frames / 20);
    assert_eq!(
        llfree.free_huge_frames(),
        0,
        "scattered frees make no huge frame"
    );
    // Every seventh huge frame freed whole.
    let chosen: Vec<u64> = (0..nr_frames / HUGE_FRAMES).step_by(7).collect();
    for &h in &chosen {
        for f in h * HUGE_FRAMES..(h + 1) * HUGE_FRAMES {
            if live.remove(&f) {
                llfree.put(1, Pfn::new(f), Order::ZERO).unwrap();
            }
        }
    }
    assert_eq!(llfree.free_huge_frames(), chosen.len() as u64);
    // Order-0 requests fill partly used huge frames of the reserved tree
    // first: a few hundred leave the whole ones be.
    let small: Vec<Pfn> = (0..256)
        .map(|_| llfree.get(0, Order::ZERO, Class::Movable).unwrap())
        .collect();
    for pfn in small {
        assert!(
            !chosen.contains(&(pfn.get() / HUGE_FRAMES)),
            "{pfn:?} broke a huge frame"
        );
        llfree.put(0, pfn, Order::ZERO).unwrap();
    }
    let mut huge: Vec<u64> = (0..chosen.len())
        .map(|_| {
            llfree
                .get(1, Order::new(HUGE_ORDER), Class::Movable)
                .unwrap()
                .get()
                / HUGE_FRAMES
        })
        .collect();
    huge.sort_unstable();
    assert_eq!(huge, chosen);
    // The scattered frames all serve order-0 requests.
    while llfree.get(0, Order::ZERO, Class::Movable).is_ok() {}
    assert_eq!(llfree.free_frames(), 0);
}

/// Immovable and movable requests on one CPU reserve different trees, so
/// the immovable frames cluster apart from the movable ones.
#[test]
fn llfree_classes_cluster_in_their_own_trees() {
    let llfree = LLFree::new(4 * TREE_FRAMES, 1).unwrap();
    let tree_of = |class| llfree.get(0, Order::ZERO, class).unwrap().get() / TREE_FRAMES;
    let mut trees = [BTreeSet::new(), BTreeSet::new()];
    for i in 0..4000 {
        let class = Class::ALL[i % 2];
        trees[i % 2].insert(tree_of(class));
    }
    assert_eq!(trees[0].len(), 1, "immovable frames in one tree: {trees:?}");
    assert_eq!(trees[1].len(), 1, "movable frames in one tree: {trees:?}");
    assert!(trees[0].is_disjoint(&trees[1]));
}

/// A request that probes trees and fails leaves their class as it was:
/// after an immovable order-9 request finds no whole huge frame, the
/// partly used movable tree still draws the next movable request.
#[test]
fn llfree_failed_request_keeps_tree_classes() {
    let llfree = LLFree::new(2 * TREE_FRAMES, 1).unwrap();
    // Tree 0 filled with immovable frames, tree 1 with movable ones.
    for (class, tree) in [(Class::Immovable, 0), (Class::Movable, 1)] {
        for _ in 0..TREE_FRAMES {
            let pfn = llfree.get(0, Order::ZERO, class).unwrap();
            assert_eq!(pfn.get() / TREE_FRAMES, tree, "{class:?}");
        }
    }
    // An eighth of every huge frame freed: both trees partly used, no
    // huge frame whole.
    for huge in 0..2 * TREE_FRAMES / HUGE_FRAMES {
        for f in huge * HUGE_FRAMES..huge * HUGE_FRAMES + HUGE_FRAMES / 8 {
            llfree.put(0, Pfn::new(f), Order::ZERO).unwrap();
        }
    }
    llfree.drain();
    assert_eq!(
        llfree.get(0, Order::new(HUGE_ORDER), Class::Immovable),
        Err(LlfreeError::NoMemory { order: HUGE_ORDER })
    );
    let pfn = llfree.get(0, Order::ZERO, Class::Movable).unwrap();
    assert_eq!(pfn.get() / TREE_FRAMES, 1, "movable frame from tree 1");
}
