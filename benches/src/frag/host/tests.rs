use std::sync::atomic::AtomicBool;

use buddy::views::parse_buddyinfo;

use super::*;

/// Pages as a set: a touch of a held page or a drop of a free one is a
/// fault of the workload, counted.
struct Fake {
    held: Vec<bool>,
    faults: u64,
    allocations: u64,
}

impl WorkPages for Fake {
    fn count(&self) -> usize {
        self.held.len()
    }
    fn touch(&mut self, i: usize) {
        if self.held[i] {
            self.faults += 1;
        }
        self.held[i] = true;
        self.allocations += 1;
    }
    fn drop_page(&mut self, i: usize) {
        if !self.held[i] {
            self.faults += 1;
        }
        self.held[i] = false;
    }
}

fn shape(iterations: u32) -> FragShape {
    FragShape {
        iterations,
        ..FragShape::PAPER
    }
}

#[test]
fn the_shape_frees_half_then_churns_a_tenth_of_that_each_iteration() {
    let mut pages = Fake {
        held: vec![false; 1000],
        faults: 0,
        allocations: 0,
    };
    let work = run_shape(&mut pages, &shape(7), &AtomicBool::new(false));
    assert_eq!(
        pages.faults, 0,
        "every touch allocates and every drop frees"
    );
    assert_eq!(work.iterations, 7);
    assert_eq!(work.touched, 1000 + 7 * 50);
    assert_eq!(work.dropped, 500 + 7 * 50);
    assert_eq!(work.held, 500);
    assert_eq!(pages.held.iter().filter(|&&h| h).count(), 500);
    assert_eq!(pages.allocations, work.touched);
}

#[test]
fn a_set_stop_ends_the_run_before_its_iterations() {
    let mut pages = Fake {
        held: vec![false; 100],
        faults: 0,
        allocations: 0,
    };
    let work = run_shape(&mut pages, &shape(50), &AtomicBool::new(true));
    assert_eq!(work.iterations, 0);
    assert_eq!(work.held, 50);
}

#[test]
fn on_real_memory_the_dropped_pages_read_back_zero() {
    let mut region = HostRegion::map(64).expect("64 pages map");
    let work = run_shape(&mut region, &shape(3), &AtomicBool::new(false));
    let held = (0..64).filter(|&i| region.is_held(i)).count() as u64;
    assert_eq!(
        held, work.held,
        "a written byte survives only on held pages"
    );
    assert_eq!(work.held, 32);
}

#[test]
fn the_free_shape_reads_buddyinfo_over_every_zone() {
    let text = "Node 0, zone      DMA      1      0      0      0      0      0      0      0      0      1      0 \n\
                Node 0, zone   Normal      4      2      0      0      0      0      0      0      0      0      1 \n";
    let free = FreeShape::of(&parse_buddyinfo(text).expect("buddyinfo parses"));
    assert_eq!(free.nr_free[0], 5);
    assert_eq!(free.free_pages, 5 + 2 * 2 + 512 + 1024);
    assert!((free.huge_share - 1536.0 / 1545.0).abs() < 1e-12);
    assert_eq!(free.extfrag_index, -1.0, "an order-9 block is free");
    assert_eq!(
        free.unusable_index, 0.005,
        "9 of 1545 pages, in thousandths"
    );
}

#[test]
fn the_counters_are_read_by_name_and_a_missing_one_is_zero() {
    let before = compaction_counters("pgmigrate_success 10\ncompact_stall 2\nnr_free_pages 9\n");
    let after = compaction_counters("pgmigrate_success 25\ncompact_stall 2\ncompact_fail 1\n");
    let deltas = counter_deltas(&before, &after);
    assert_eq!(deltas.len(), 8);
    let of = |name| deltas.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
    assert_eq!(of("pgmigrate_success"), Some(15));
    assert_eq!(of("compact_fail"), Some(1));
    assert_eq!(of("compact_stall"), Some(0));
    assert_eq!(of("compact_migrate_scanned"), Some(0));
}

#[test]
fn a_recording_without_snapshots_is_refused_by_name() {
    let header = Header {
        kernel: "6.18.0".into(),
        page_size: 4096,
        cpus: 2,
        layout: None,
        command: None,
        seconds: 1.0,
        lost_events: vec![0, 0],
        snapshot_start: None,
        snapshot_end: None,
    };
    let err = header_states(&header).expect_err("no snapshot");
    assert!(err.to_string().contains("no start snapshot"), "{err}");
}

#[test]
fn an_empty_run_is_refused_before_anything_is_touched() {
    let err = run_on_host(
        &FragShape::PAPER,
        0,
        Path::new("unused"),
        &AtomicBool::new(false),
    )
    .expect_err("no pages");
    assert!(matches!(err, HostFragError::Empty), "{err}");
}

#[test]
fn a_recording_replays_from_its_start_snapshot_to_near_its_end() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/snapshots.trace.zst");
    let end = replay_recording(&path).expect("the committed recording replays");
    let machine: u64 = end
        .end_state
        .zones
        .iter()
        .map(|z| z.machine_free_pages)
        .sum();
    let model: u64 = end.end_state.zones.iter().map(|z| z.model_free_pages).sum();
    assert!(end.events.allocs > 0);
    assert_eq!(model, end.free.free_pages);
    // Started from the machine's free lists, the model ends within a few
    // per cent of its free pages; started from boot it would hold nearly
    // all of memory free.
    let off = model.abs_diff(machine) as f64 / machine as f64;
    assert!(off < 0.05, "model {model} against machine {machine}");
}

#[test]
fn a_recording_that_cannot_be_written_is_refused_before_the_run() {
    let out = Path::new("/nonexistent-directory/host.trace.zst");
    let err = run_on_host(&FragShape::PAPER, 16, out, &AtomicBool::new(false))
        .expect_err("no such directory");
    assert!(matches!(err, HostFragError::Write(..)), "{err}");
    assert!(
        err.to_string()
            .contains("/nonexistent-directory/host.trace.zst"),
        "{err}"
    );
}
