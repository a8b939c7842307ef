//! The bitfield search, the child counter and the huge flag.

use super::*;

#[test]
fn first_free_run_finds_aligned_runs_only() {
    assert_eq!(first_free_run(0, 1), Some(0));
    assert_eq!(first_free_run(0b1, 1), Some(1));
    // Bits 1 and 2 are free but not an aligned pair; 2 and 3 are.
    assert_eq!(first_free_run(0b1001, 2), Some(4));
    assert_eq!(first_free_run(0b0001, 2), Some(2));
    assert_eq!(first_free_run(0xff, 8), Some(8));
    assert_eq!(first_free_run(0x100, 8), Some(0));
    assert_eq!(first_free_run(1 << 63, 64), None);
    assert_eq!(first_free_run(0, 64), Some(0));
    assert_eq!(first_free_run(u64::MAX, 1), None);
    assert_eq!(first_free_run(!(1 << 40), 1), Some(40));
}

#[test]
fn bitfield_hands_out_each_aligned_run_once() {
    for order in 0..HUGE_ORDER {
        let field = Bitfield::default();
        let n = 1u32 << order;
        let mut seen = Vec::new();
        while let Some(bit) = field.take(order) {
            assert_eq!(bit % n, 0, "order {order}: bit {bit} is aligned");
            seen.push(bit);
        }
        assert_eq!(seen.len() as u32, 512 / n, "order {order}: every run once");
        assert_eq!(field.count_set(), 512);
        field.clear(seen[1], order);
        assert_eq!(field.take(order), Some(seen[1]), "a cleared run comes back");
    }
}

#[test]
fn multi_word_runs_need_whole_free_words() {
    let field = Bitfield::default();
    // One frame in word 1 taken: order 7 (words 0-1) must use words 2-3.
    field.0[1].store(1, Relaxed);
    assert_eq!(field.take(7), Some(128));
    // Order 8 needs words 4-7, all free.
    assert_eq!(field.take(8), Some(256));
    assert_eq!(field.take(8), None, "words 0-3 are partly taken");
    assert_eq!(
        field.0[0].load(Relaxed),
        0,
        "a failed group gives its words back"
    );
}

#[test]
fn child_counter_follows_allocations_and_frees() {
    let lower = Lower::new(2 * HUGE_FRAMES);
    let a = lower.get(0, 0).unwrap();
    let b = lower.get(0, 3).unwrap();
    assert_eq!(lower.child(0), Child::new(512 - 9, false));
    assert_eq!(lower.bits_set(0), 9);
    assert_eq!(b % 8, 0);
    lower.put(b, 3).unwrap();
    lower.put(a, 0).unwrap();
    assert_eq!(lower.child(0), Child::new(512, false));
    assert_eq!(lower.bits_set(0), 0);
    assert_eq!(lower.free_frames(), 1024);
    assert_eq!(lower.free_huge_frames(), 2);
}

#[test]
fn huge_flag_excludes_small_blocks_and_comes_back_whole() {
    let lower = Lower::new(HUGE_FRAMES);
    let huge = lower.get(0, HUGE_ORDER).unwrap();
    assert_eq!(lower.child(0), Child::new(0, true));
    assert_eq!(lower.bits_set(0), 0, "a huge block sets no bits");
    assert_eq!(lower.get(0, 0), None, "no base frame of a huge block");
    assert_eq!(
        lower.put(huge, 0),
        Err(LlfreeError::WrongOrder {
            frame: 0,
            order: 0,
            allocated: 9
        })
    );
    lower.put(huge, HUGE_ORDER).unwrap();
    assert_eq!(lower.free_huge_frames(), 1);
    let small = lower.get(0, 0).unwrap();
    assert_eq!(
        lower.get(0, HUGE_ORDER),
        None,
        "one frame taken: no huge block"
    );
    lower.put(small, 0).unwrap();
    assert_eq!(lower.get(0, HUGE_ORDER), Some(0));
}

#[test]
fn bad_frees_change_nothing() {
    let lower = Lower::new(HUGE_FRAMES);
    let a = lower.get(0, 1).unwrap();
    assert_eq!(
        lower.put(a + 2, 1),
        Err(LlfreeError::NotAllocated { frame: 2, order: 1 })
    );
    assert!(matches!(
        lower.put(a, 2),
        Err(LlfreeError::WrongOrder { .. })
    ));
    assert_eq!(lower.child(0).free(), 510);
    lower.put(a, 1).unwrap();
    assert_eq!(
        lower.put(a, 1),
        Err(LlfreeError::NotAllocated { frame: 0, order: 1 })
    );
    assert_eq!(lower.child(0).free(), 512);
}

#[test]
fn a_partial_last_huge_frame_is_never_whole() {
    let lower = Lower::new(HUGE_FRAMES + 100);
    assert_eq!(lower.child(1), Child::new(100, false));
    assert_eq!(lower.bits_set(1), 412, "frames past the end are set");
    assert_eq!(lower.get(1, HUGE_ORDER), None);
    assert_eq!(lower.get(1, 7), None, "no 128 frames there");
    let f = lower.get(1, 6).unwrap();
    assert!(f + 64 <= HUGE_FRAMES + 100);
    assert_eq!(lower.free_huge_frames(), 1);
}
