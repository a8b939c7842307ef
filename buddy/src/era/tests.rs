use super::*;
use crate::types::HighatomicRules;

#[test]
fn names_parse_and_order() {
    for e in Era::ALL {
        assert_eq!(Era::parse(e.name()), Ok(e));
    }
    assert_eq!(
        Era::parse("3.0").unwrap_err(),
        "unknown era `3.0` (known: 2.6.9, 2.6.23, 5.13, 5.14, 5.15, 6.1, 6.6, 6.8, 6.12, 6.18)"
    );
    assert!(Era::V2_6_9 < Era::V6_18 && Era::default() == Era::V6_18);
    assert!(!Era::V5_13.pcp_high_from_watermark() && Era::V6_18.pcp_high_from_watermark());
}

/// The variants' order is the releases' order, so `<` between eras
/// compares versions, and every seed era is an era.
#[test]
fn eras_are_ordered_by_release() {
    for w in Era::ALL.windows(2) {
        assert!(w[0] < w[1] && w[0].release() < w[1].release(), "{w:?}");
        assert!(w[0].version() <= w[1].version(), "{w:?}");
    }
    for e in Era::SEEDS {
        assert!(Era::ALL.contains(&e), "{e}");
    }
    for e in Era::ALL {
        let (major, minor) = e.version();
        assert!(e.since(major, minor) && !e.since(major, minor + 1), "{e}");
        let (_, _, sublevel) = e.release();
        let written = if sublevel > 0 {
            format!("{major}.{minor}.{sublevel}")
        } else {
            format!("{major}.{minor}")
        };
        assert_eq!(written, e.name());
    }
    assert_eq!(Era::V2_6_23.version(), (2, 6));
    assert_eq!(Era::V2_6_23.release(), (2, 6, 23));
}

#[test]
fn a_release_maps_to_the_era_at_or_below_it() {
    assert_eq!(Era::at_or_below(6, 18, 0), Some(Era::V6_18));
    assert_eq!(Era::at_or_below(7, 0, 0), Some(Era::V6_18));
    assert_eq!(Era::at_or_below(6, 17, 9), Some(Era::V6_12));
    assert_eq!(Era::at_or_below(6, 1, 57), Some(Era::V6_1));
    assert_eq!(Era::at_or_below(6, 0, 0), Some(Era::V5_15));
    assert_eq!(Era::at_or_below(5, 14, 0), Some(Era::V5_14));
    assert_eq!(Era::at_or_below(5, 10, 0), Some(Era::V2_6_23));
    assert_eq!(Era::at_or_below(2, 6, 20), Some(Era::V2_6_9));
    assert_eq!(Era::at_or_below(2, 4, 0), None);
}

/// Every mechanism switch of the four seeds' eras, as they were before
/// the eras became versions: each seed behaves exactly as it did.
#[test]
fn the_seeds_keep_every_switch() {
    type Switch = (&'static str, fn(Era) -> bool, [bool; 4]);
    let switches: [Switch; 19] = [
        (
            "has_migratetypes",
            Era::has_migratetypes,
            [false, false, true, true],
        ),
        (
            "pcp_high_from_watermark",
            Era::pcp_high_from_watermark,
            [false, false, false, true],
        ),
        (
            "pcp_high_orders",
            Era::pcp_high_orders,
            [false, false, false, true],
        ),
        (
            "pcp_high_tuning",
            Era::pcp_high_tuning,
            [false, false, false, true],
        ),
        ("pcp_lock", Era::pcp_lock, [false, false, false, true]),
        ("pcp_irq_save", Era::pcp_irq_save, [true, true, true, false]),
        ("pcp_free_factor", Era::pcp_free_factor, [false; 4]),
        (
            "pcp_drain_in_turn",
            Era::pcp_drain_in_turn,
            [false, false, false, true],
        ),
        (
            "pcp_free_high_above_high_min",
            Era::pcp_free_high_above_high_min,
            [false, false, false, true],
        ),
        (
            "drain chunked",
            |e| Path::new(e, Mechanisms::ALL).pcp_drain_chunked,
            [false, false, false, true],
        ),
        (
            "models_entry",
            Era::models_entry,
            [false, false, true, true],
        ),
        (
            "has_buddy_merge_likely",
            Era::has_buddy_merge_likely,
            [false, false, true, true],
        ),
        (
            "numa_stat_diffs",
            Era::numa_stat_diffs,
            [true, true, true, false],
        ),
        (
            "bulk_grows_deferred_zone",
            Era::bulk_grows_deferred_zone,
            [false, false, false, true],
        ),
        (
            "has_deferred_init",
            Era::has_deferred_init,
            [false, false, true, true],
        ),
        (
            "has_compaction",
            Era::has_compaction,
            [false, false, true, true],
        ),
        (
            "highatomic_6_18_rules",
            Era::highatomic_6_18_rules,
            [false, false, false, true],
        ),
        (
            "has_wmark_promo",
            Era::has_wmark_promo,
            [false, false, false, true],
        ),
        (
            "memblock ranges",
            |e| crate::MemmapInitForm::of_era(e) == crate::MemmapInitForm::MemblockRanges,
            [false, false, true, true],
        ),
    ];
    for (name, switch, want) in switches {
        for (era, want) in Era::SEEDS.into_iter().zip(want) {
            assert_eq!(switch(era), want, "{name} in {era}");
        }
    }
    let rules = Era::SEEDS.map(|e| Path::new(e, Mechanisms::ALL).highatomic);
    use HighatomicRules as R;
    assert_eq!(rules, [R::None, R::None, R::Harder, R::HighAtomic]);
    assert_eq!(Era::V6_18.pcp_thp_lists(), PcpThpLists::MovableOrNot);
}

/// The releases people run switch each mechanism at its release.
#[test]
fn the_new_eras_switch_at_their_releases() {
    use Era::*;
    let on = |switch: fn(Era) -> bool| -> Vec<Era> {
        Era::ALL.into_iter().filter(|&e| switch(e)).collect()
    };
    assert_eq!(
        on(Era::pcp_high_from_watermark),
        [V5_14, V5_15, V6_1, V6_6, V6_8, V6_12, V6_18]
    );
    assert_eq!(on(Era::pcp_free_factor), [V5_14, V5_15, V6_1, V6_6]);
    assert_eq!(on(Era::pcp_free_high), [V6_1, V6_6, V6_8, V6_12, V6_18]);
    assert_eq!(on(Era::pcp_lock), [V6_1, V6_6, V6_8, V6_12, V6_18]);
    assert_eq!(
        on(Era::pcp_irq_save),
        [V2_6_9, V2_6_23, V5_13, V5_14, V5_15, V6_1]
    );
    assert_eq!(on(Era::pcp_high_tuning), [V6_8, V6_12, V6_18]);
    assert_eq!(on(Era::has_alloc_nolock), [V6_18]);
    assert_eq!(on(Era::bulk_grows_deferred_zone), [V6_12, V6_18]);
    assert_eq!(on(Era::highatomic_6_18_rules), [V6_12, V6_18]);
    assert_eq!(on(Era::pcp_free_high_above_high_min), [V6_18]);
    assert_eq!(
        on(Era::movable_wmarks_like_highmem),
        [V6_6, V6_8, V6_12, V6_18]
    );
    assert_eq!(V5_15.pcp_thp_lists(), PcpThpLists::PerMigratetype);
    assert_eq!(V6_6.pcp_thp_lists(), PcpThpLists::Shared);
    assert_eq!(V6_12.pcp_thp_lists(), PcpThpLists::MovableOrNot);
}

#[test]
fn the_form_byte_holds_each_choice() {
    let no_entry = Mechanisms {
        entry: false,
        ..Mechanisms::ALL
    };
    let tuned = Path::new(Era::V6_18, no_entry);
    let untuned = Path::new(Era::V5_13, no_entry);
    let factor = Path::new(Era::V6_1, no_entry);
    assert_eq!(PcpForm::new(&tuned, false).bits(), PcpForm::TUNED);
    assert_eq!(
        PcpForm::new(&tuned, true).bits(),
        PcpForm::TUNED | PcpForm::DEFERRED
    );
    assert_eq!(
        PcpForm::new(&untuned, true).bits(),
        PcpForm::BATCH | PcpForm::DEFERRED
    );
    assert_eq!(PcpForm::new(&untuned, false).bits(), PcpForm::BATCH);
    assert_eq!(PcpForm::new(&factor, true).bits(), PcpForm::DEFERRED);
    assert_eq!(PcpForm::new(&factor, false).bits(), 0);
    // Bookkeeping only has no watermarks, so no tuning either: 6.18's
    // lists then drain a plain batch, as it has no drain factor.
    let bookkeeping = Path::new(Era::V6_18, Mechanisms::BOOKKEEPING);
    assert_eq!(PcpForm::new(&bookkeeping, false).bits(), PcpForm::BATCH);
    // The entry is 5.13's and later eras' only.
    let all = |era| PcpForm::new(&Path::new(era, Mechanisms::ALL), false).bits();
    assert_eq!(all(Era::V6_18), PcpForm::TUNED | PcpForm::ENTRY);
    assert_eq!(all(Era::V6_1), PcpForm::ENTRY);
    // The drain factor is 5.14 to 6.6's only: the one sizing with
    // neither bit, and never the tuning and a plain batch together.
    for era in Era::ALL {
        let form = all(era);
        let sizing = form & (PcpForm::BATCH | PcpForm::TUNED);
        assert_eq!(sizing == 0, era.pcp_free_factor(), "{era}");
        assert_ne!(sizing, PcpForm::BATCH | PcpForm::TUNED, "{era}");
    }
    assert_eq!(all(Era::V5_13), PcpForm::BATCH | PcpForm::ENTRY);
    assert_eq!(all(Era::V2_6_23), PcpForm::BATCH);
}

#[test]
fn variants_exist_only_in_their_eras() {
    use crate::{Bitmap, Kernel, KernelHoleCheck, NoBitmapAtomic, Up};
    for e in Era::ALL {
        assert!(e.check_variant::<Kernel>().is_ok());
        assert_eq!(e.check_variant::<Up>().is_ok(), e == Era::V2_6_9);
        assert_eq!(e.check_variant::<Bitmap>().is_ok(), e == Era::V2_6_9);
        assert_eq!(
            e.check_variant::<NoBitmapAtomic>().is_ok(),
            e == Era::V2_6_9
        );
        assert_eq!(
            e.check_variant::<KernelHoleCheck>().is_ok(),
            e <= Era::V5_13
        );
    }
    let why = Era::V6_18.check_variant::<KernelHoleCheck>().unwrap_err();
    assert!(why.to_string().contains("removed in 5.14"), "{why}");
}
