//! The model's free lists at the end of a replay held against a machine's
//! at the end of its recording (`replay --end-state snapshot:FILE`), zone
//! by zone: free blocks per order (`/proc/buddyinfo`) and per migratetype
//! and order (`/proc/pagetypeinfo`), with one distance.
//!
//! The distance is the share of free pages that sit elsewhere. With `a_i`
//! and `b_i` the free pages in cell `i` (a zone and an order; or a zone,
//! a migratetype and an order) and `A` and `B` their sums, it is
//! `½ Σ |a_i/A − b_i/B|`, the total variation distance between the two
//! distributions of free memory: the least share of one side's free pages
//! that would have to sit in another cell for the two to match. 0 when
//! both hold their free memory in the same proportions, 1 when they share
//! no cell. It compares shapes, not amounts: the free pages of each side
//! are reported beside it. `pagetypeinfo` stops counting a list at
//! 100,000 blocks and prints `>100000`; a zone where either side reached
//! that cap is marked, and its migratetype cells count the cap.

use std::path::PathBuf;

use buddy::views::{BuddyInfo, FREECOUNT_CAP, PageTypeInfo};
use serde::Serialize;
use sparsemem::Migratetype;

/// The free memory one side holds at the end: its buddyinfo, and its
/// pagetypeinfo where there is one.
#[derive(Clone, Debug, PartialEq)]
pub struct FreeState {
    /// Free blocks per zone and order.
    pub buddyinfo: BuddyInfo,
    /// Free blocks per zone, migratetype and order, and pageblocks.
    pub pagetypeinfo: Option<PageTypeInfo>,
}

/// One zone, the model's free lists against the machine's.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ZoneEndState {
    /// Its node.
    pub node: u32,
    /// The kernel's zone name.
    pub zone: String,
    /// The model's `nr_free` per order (empty: the model has no such
    /// populated zone).
    pub model_nr_free: Vec<u64>,
    /// The machine's `nr_free` per order (empty: the machine has no such
    /// populated zone).
    pub machine_nr_free: Vec<u64>,
    /// The model's free pages on the zone's lists.
    pub model_free_pages: u64,
    /// The machine's free pages on the zone's lists.
    pub machine_free_pages: u64,
    /// The share of free pages at another order.
    pub order_distance: f64,
    /// The share of free pages at another migratetype or order, where
    /// both sides have a pagetypeinfo.
    pub type_distance: Option<f64>,
    /// A list counted at pagetypeinfo's cap, on either side.
    pub capped: bool,
}

/// A model's end state against the machine's.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct EndState {
    /// The machine's snapshot.
    pub snapshot: PathBuf,
    /// The share of free pages at another zone or order, over every zone.
    pub order_distance: f64,
    /// The share of free pages at another zone, migratetype or order, where
    /// both sides have a pagetypeinfo.
    pub type_distance: Option<f64>,
    /// Zone by zone: the machine's zones in its order, then any only the
    /// model has.
    pub zones: Vec<ZoneEndState>,
}

/// `½ Σ |a_i/A − b_i/B|` over the cells of `a` and `b` (a missing cell is
/// 0): 0 when both are empty, 1 when only one of them is.
pub fn share_elsewhere(a: &[u64], b: &[u64]) -> f64 {
    let (sum_a, sum_b): (u64, u64) = (a.iter().sum(), b.iter().sum());
    match (sum_a, sum_b) {
        (0, 0) => return 0.0,
        (0, _) | (_, 0) => return 1.0,
        _ => {}
    }
    let at = |v: &[u64], i: usize| v.get(i).copied().unwrap_or(0) as f64;
    let sum: f64 = (0..a.len().max(b.len()))
        .map(|i| (at(a, i) / sum_a as f64 - at(b, i) / sum_b as f64).abs())
        .sum();
    (sum / 2.0).min(1.0)
}

/// Free pages per order of `nr_free` (blocks per order), `orders` long.
fn pages_per_order(nr_free: &[u64], orders: usize) -> Vec<u64> {
    (0..orders)
        .map(|o| nr_free.get(o).map_or(0, |n| n << o))
        .collect()
}

/// Zone `(node, zone)`'s free blocks per migratetype and order in `s`, as
/// pages: one run of `orders` cells per migratetype; `None` without a
/// pagetypeinfo. The second value: whether a list reached the cap.
fn type_pages(s: &FreeState, node: u32, zone: &str, orders: usize) -> Option<(Vec<u64>, bool)> {
    let types = s.pagetypeinfo.as_ref()?;
    let z = types
        .zones
        .iter()
        .find(|z| z.node == node && z.zone == zone);
    let mut cells = Vec::with_capacity(orders * Migratetype::ALL.len());
    let mut capped = false;
    for mt in Migratetype::ALL {
        let free = z.map_or(&[][..], |z| &z.free[mt.index()][..]);
        capped |= free.iter().any(|&n| n >= FREECOUNT_CAP);
        cells.extend(pages_per_order(free, orders));
    }
    Some((cells, capped))
}

/// The model's end state `model` against the machine's `machine`, read
/// from `snapshot`.
pub fn compare_end_state(model: &FreeState, machine: &FreeState, snapshot: PathBuf) -> EndState {
    let mut keys: Vec<(u32, &str)> = Vec::new();
    for z in machine.buddyinfo.zones.iter().chain(&model.buddyinfo.zones) {
        if !keys.contains(&(z.node, z.zone.as_str())) {
            keys.push((z.node, z.zone.as_str()));
        }
    }
    let orders = machine
        .buddyinfo
        .zones
        .iter()
        .chain(&model.buddyinfo.zones)
        .map(|z| z.nr_free.len())
        .max()
        .unwrap_or(0);
    let nr_free = |s: &FreeState, node: u32, zone: &str| {
        s.buddyinfo
            .zones
            .iter()
            .find(|z| z.node == node && z.zone == zone)
            .map_or_else(Vec::new, |z| z.nr_free.clone())
    };
    let (mut all_model, mut all_machine) = (Vec::new(), Vec::new());
    let (mut types_model, mut types_machine) = (Vec::new(), Vec::new());
    let mut zones = Vec::new();
    for (node, zone) in keys {
        let (ours, theirs) = (nr_free(model, node, zone), nr_free(machine, node, zone));
        let (ours_pages, theirs_pages) = (
            pages_per_order(&ours, orders),
            pages_per_order(&theirs, orders),
        );
        let types =
            type_pages(model, node, zone, orders).zip(type_pages(machine, node, zone, orders));
        if let Some(((a, _), (b, _))) = &types {
            types_model.extend_from_slice(a);
            types_machine.extend_from_slice(b);
        }
        zones.push(ZoneEndState {
            node,
            zone: zone.to_owned(),
            model_free_pages: ours_pages.iter().sum(),
            machine_free_pages: theirs_pages.iter().sum(),
            order_distance: share_elsewhere(&ours_pages, &theirs_pages),
            type_distance: types.as_ref().map(|((a, _), (b, _))| share_elsewhere(a, b)),
            capped: types.is_some_and(|((_, ca), (_, cb))| ca || cb),
            model_nr_free: ours,
            machine_nr_free: theirs,
        });
        all_model.extend(ours_pages);
        all_machine.extend(theirs_pages);
    }
    let both_typed = model.pagetypeinfo.is_some() && machine.pagetypeinfo.is_some();
    EndState {
        snapshot,
        order_distance: share_elsewhere(&all_model, &all_machine),
        type_distance: both_typed.then(|| share_elsewhere(&types_model, &types_machine)),
        zones,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use buddy::views::{ZoneFree, ZoneTypes};

    fn buddyinfo(zones: &[(u32, &str, &[u64])]) -> BuddyInfo {
        BuddyInfo {
            zones: zones
                .iter()
                .map(|&(node, zone, nr_free)| ZoneFree {
                    node,
                    zone: zone.to_owned(),
                    nr_free: nr_free.to_vec(),
                })
                .collect(),
        }
    }

    fn state(zones: &[(u32, &str, &[u64])]) -> FreeState {
        FreeState {
            buddyinfo: buddyinfo(zones),
            pagetypeinfo: None,
        }
    }

    #[test]
    fn the_distance_is_the_share_of_free_pages_elsewhere() {
        assert_eq!(share_elsewhere(&[], &[]), 0.0);
        assert_eq!(share_elsewhere(&[0, 0], &[0]), 0.0);
        assert_eq!(share_elsewhere(&[4, 0], &[0, 0]), 1.0);
        assert_eq!(share_elsewhere(&[4, 0], &[0, 9]), 1.0);
        // Proportions, not amounts.
        assert_eq!(share_elsewhere(&[1, 3], &[100, 300]), 0.0);
        // A quarter of the pages at another order: a quarter.
        assert_eq!(share_elsewhere(&[3, 1], &[4, 0]), 0.25);
        // Symmetric, and a missing cell is empty.
        assert_eq!(
            share_elsewhere(&[4], &[3, 1]),
            share_elsewhere(&[3, 1], &[4])
        );
    }

    #[test]
    fn zones_are_matched_by_node_and_name_and_counted_in_pages() {
        // Order 1 holds 2 pages a block: the model's 2 blocks at order 1
        // are 4 pages, the machine's 4 pages at order 0.
        let model = state(&[(0, "DMA32", &[0, 2]), (1, "Normal", &[8, 0])]);
        let machine = state(&[(0, "DMA32", &[4, 0]), (0, "DMA", &[1, 0])]);
        let end = compare_end_state(&model, &machine, "after.json".into());
        let names: Vec<(u32, &str)> = end
            .zones
            .iter()
            .map(|z| (z.node, z.zone.as_str()))
            .collect();
        assert_eq!(
            names,
            [(0, "DMA32"), (0, "DMA"), (1, "Normal")],
            "the machine's, then the model's own"
        );
        let dma32 = &end.zones[0];
        assert_eq!((dma32.model_free_pages, dma32.machine_free_pages), (4, 4));
        assert!((dma32.order_distance - 1.0).abs() < 1e-12);
        assert_eq!(end.zones[1].model_nr_free, Vec::<u64>::new());
        assert!((end.zones[1].order_distance - 1.0).abs() < 1e-12);
        assert_eq!(end.zones[2].machine_free_pages, 0);
        assert_eq!(end.type_distance, None);
        // Over the machine: the model's 12 pages and the machine's 5 share
        // no (zone, order) cell.
        assert!((end.order_distance - 1.0).abs() < 1e-12);
        let same = compare_end_state(&machine, &machine, "after.json".into());
        assert_eq!(same.order_distance, 0.0);
        assert!(same.zones.iter().all(|z| z.order_distance == 0.0));
    }

    #[test]
    fn migratetypes_count_where_both_sides_have_them() {
        let types = |movable: u64, unmovable: u64| {
            let mut free: [Vec<u64>; sparsemem::MIGRATE_TYPES] = Default::default();
            for (mt, v) in free.iter_mut().enumerate() {
                *v = vec![0, 0];
                if mt == Migratetype::Movable.index() {
                    v[0] = movable;
                }
                if mt == Migratetype::Unmovable.index() {
                    v[0] = unmovable;
                }
            }
            PageTypeInfo {
                pageblock_order: 9,
                zones: vec![ZoneTypes {
                    node: 0,
                    zone: "Normal".into(),
                    free,
                    blocks: [0; sparsemem::MIGRATE_TYPES],
                }],
            }
        };
        let with = |t: PageTypeInfo| FreeState {
            buddyinfo: buddyinfo(&[(0, "Normal", &[4, 0])]),
            pagetypeinfo: Some(t),
        };
        let (model, machine) = (with(types(3, 1)), with(types(4, 0)));
        let end = compare_end_state(&model, &machine, "after.json".into());
        // The same orders; a quarter of the model's pages on another list.
        assert_eq!(end.order_distance, 0.0);
        assert_eq!(end.type_distance, Some(0.25));
        assert_eq!(end.zones[0].type_distance, Some(0.25));
        assert!(!end.zones[0].capped);
        let capped = with(types(FREECOUNT_CAP, 0));
        let end = compare_end_state(&model, &capped, "after.json".into());
        assert!(end.zones[0].capped);
        let untyped = compare_end_state(&model, &state(&[(0, "Normal", &[4, 0])]), "b".into());
        assert_eq!(untyped.type_distance, None);
        assert_eq!(untyped.zones[0].type_distance, None);
    }
}
