//! Traces: the kernel's text and pfnlab's recordings read back, replayed
//! on every model and era, and every kind of bad input refused with one
//! clear line.

use std::io::{BufRead, Cursor, Read};
use std::path::{Path, PathBuf};

use buddy::{Era, Gfp};
use pfnlab::layout_spec::LayoutSpec;
use pfnlab::models::ModelKind;
use pfnlab::trace::format::{Header, TraceReader, write_recording};
use pfnlab::trace::replay::{ReplayOptions, ReplayResult, replay_models};
use pfnlab::trace::{Event, EventKind, TraceError};
use sparsemem::Layout;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// The recording committed as test data (see tests/data/README.md).
const RECORDING: &str = "gzip-dd.trace.zst";
/// The kernel's own `trace` file, committed as test data.
const TEXT: &str = "ls-gzip.trace.txt";

/// x86-pci-hole's zones at 4 GiB of RAM instead of 31: every allocator a
/// replay builds initialises an eighth of the struct pages, and the
/// recordings' working sets fit in it many times over.
pub(crate) fn replay_layout() -> Layout {
    sparsemem::testing::pci_hole_layout(1)
}

fn read_all(reader: TraceReader) -> Result<Vec<Event>, TraceError> {
    reader.collect()
}

fn text_reader(text: &str) -> Result<TraceReader, TraceError> {
    TraceReader::from_reader(Box::new(Cursor::new(text.as_bytes().to_vec())))
}

fn replay(
    path: &Path,
    layout: &Layout,
    kinds: &[ModelKind],
    options: ReplayOptions,
) -> Vec<ReplayResult> {
    let open = || TraceReader::open(path);
    replay_models(&open, layout, kinds, options, &|_, _| {})
        .expect("the trace reads")
        .into_iter()
        .map(|(kind, r)| r.unwrap_or_else(|e| panic!("{}: {e}", kind.name())))
        .collect()
}

#[test]
fn the_kernels_text_reads_in_order_with_every_event() {
    let events = read_all(TraceReader::open(&data(TEXT)).unwrap()).unwrap();
    let lines = std::fs::read_to_string(data(TEXT)).unwrap();
    let expected = lines.lines().filter(|l| l.contains(": mm_page_")).count();
    assert_eq!(events.len(), expected);
    assert!(events.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
    assert!(
        events
            .iter()
            .any(|e| e.kind == EventKind::Alloc && e.gfp.contains(Gfp::HIGHUSER_MOVABLE))
    );
    assert!(events.iter().any(|e| e.kind == EventKind::Free));
}

#[test]
fn a_recording_round_trips_compressed_and_not() {
    let events = read_all(TraceReader::open(&data(TEXT)).unwrap()).unwrap();
    let header = Header {
        kernel: "6.18.0-test".into(),
        page_size: 4096,
        cpus: 2,
        layout: Some(Layout::preset("x86-pci-hole").unwrap().to_toml()),
        command: Some("ls".into()),
        seconds: 0.5,
        lost_events: vec![0, 3],
        snapshot_start: Some("{}".into()),
        snapshot_end: None,
    };
    let dir = std::env::temp_dir().join(format!("pfnlab-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["t.trace", "t.trace.zst"] {
        let path = dir.join(name);
        write_recording(&path, &header, &events).unwrap();
        let reader = TraceReader::open(&path).unwrap();
        assert_eq!(reader.header(), Some(&header));
        let back = read_all(reader).unwrap();
        assert_eq!(back.len(), events.len());
        for (a, b) in back.iter().zip(&events) {
            assert_eq!(
                (
                    a.ts_ns,
                    a.cpu,
                    a.kind,
                    a.pfn,
                    a.order,
                    a.migratetype,
                    a.gfp,
                    a.percpu_refill
                ),
                (
                    b.ts_ns,
                    b.cpu,
                    b.kind,
                    b.pfn,
                    b.order,
                    b.migratetype,
                    b.gfp,
                    b.percpu_refill
                )
            );
        }
    }
    let layout = Layout::from_toml(header.layout.as_deref().unwrap()).unwrap();
    let preset = Layout::preset("x86-pci-hole").unwrap();
    assert_eq!(layout.ranges(), preset.ranges());
    assert_eq!(layout.geometry(), preset.geometry());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_recording_replays_on_every_model_and_era() {
    let path = data(RECORDING);
    let reader = TraceReader::open(&path).unwrap();
    let header = reader.header().cloned().expect("a recording has a header");
    assert!(header.layout.is_some() && header.cpus >= 1);
    let events = read_all(reader).unwrap();
    let allocs = events
        .iter()
        .filter(|e| e.kind == EventKind::Alloc && e.pfn.is_some())
        .count() as u64;
    let layout = replay_layout();
    // The model does not change the allocator's decisions, the era does:
    // every model replays at the newest era, two (a table and a fault
    // probe) at the others, and every model at every era with
    // `PFNLAB_TEST_FULL` set.
    let full = std::env::var_os("PFNLAB_TEST_FULL").is_some();
    let newest = Era::SEEDS[Era::SEEDS.len() - 1];
    // One thread per seed's era (the others share their mechanisms),
    // spread over the machine's CPUs; a failed assertion fails the test.
    std::thread::scope(|scope| {
        for era in Era::SEEDS {
            let (path, layout, events) = (&path, &layout, &events);
            let models = if full || era == newest {
                ModelKind::ALL
            } else {
                &[ModelKind::Flat, ModelKind::VmemmapProbe]
            };
            scope.spawn(move || {
                let options = ReplayOptions {
                    era,
                    verify: true,
                    count_calls: true,
                    ..ReplayOptions::default()
                };
                let results = replay(path, layout, models, options);
                let first = &results[0];
                for r in &results {
                    assert_eq!(r.events.events, events.len() as u64, "{} {era}", r.model);
                    assert_eq!(
                        r.events.allocs + r.events.alloc_failures.values().sum::<u64>(),
                        allocs
                    );
                    assert!(r.allocator.conserved, "{} {era}: pages lost", r.model);
                    assert_eq!(
                        r.verify_failures, 0,
                        "{} {era}: {:?}",
                        r.model, r.first_verify_failure
                    );
                    // Every model runs the same allocator: the same decisions.
                    assert_eq!(r.events, first.events, "{} {era}", r.model);
                    assert_eq!(
                        r.allocator.merges, first.allocator.merges,
                        "{} {era}",
                        r.model
                    );
                    let ops = r.model_ops.as_ref().expect("--count-calls counts");
                    assert!(ops.calls["page_to_pfn"] > 0);
                }
                // The pageblock lookup on every free exists from 2.6.24 on.
                let pageblock =
                    first.model_ops.as_ref().expect("counted").calls["get_pfnblock_migratetype"];
                assert_eq!(pageblock > 0, era.has_migratetypes(), "{era}");
            });
        }
    });
}

#[test]
fn the_recorded_layout_is_the_default() {
    let path = data(RECORDING);
    let reader = TraceReader::open(&path).unwrap();
    let layout = pfnlab::trace::replay::replay_layout(None, reader.header())
        .unwrap()
        .layout;
    assert!(layout.source().contains("recorded"), "{}", layout.source());
    let results = replay(
        &path,
        &layout,
        &[ModelKind::VmemmapTable],
        ReplayOptions::default(),
    );
    assert!(results[0].allocator.conserved);
    // A text trace carries no layout.
    let text = TraceReader::open(&data(TEXT)).unwrap();
    let e = pfnlab::trace::replay::replay_layout(Some(&LayoutSpec::Recorded), text.header())
        .unwrap_err();
    assert!(e.to_string().contains("carries no layout"), "{e}");
}

#[test]
fn a_layout_too_small_counts_failures_and_loses_nothing() {
    let path = data(RECORDING);
    let layout =
        Layout::from_toml("[[range]]\nstart = 0x1000000\nend = 0x1400000\nkind = \"ram\"\n")
            .unwrap();
    let r = &replay(&path, &layout, &[ModelKind::Flat], ReplayOptions::default())[0];
    assert!(
        r.events
            .alloc_failures
            .get("no memory")
            .copied()
            .unwrap_or(0)
            > 0,
        "{:?}",
        r.events
    );
    assert!(r.allocator.conserved);
}

#[test]
fn bad_input_is_one_clear_line() {
    // Empty.
    let e = text_reader("").err().expect("an empty trace");
    assert_eq!(e.to_string(), "the trace is empty");
    // A line cut in half.
    let good = "a-1 [000] ..... 1.000001: mm_page_alloc: page=00000000aa pfn=0x1000 order=0 migratetype=1 gfp_flags=GFP_KERNEL\n";
    let cut = format!("{good}a-1 [000] ..... 1.000002: mm_page_free: page=00000000aa pfn=0x10");
    let e = read_all(text_reader(&cut).unwrap()).unwrap_err();
    assert_eq!(e.line, 2);
    assert!(e.to_string().contains("no order"), "{e}");
    // ... counted and skipped with --skip-bad.
    let mut reader = text_reader(&cut).unwrap().skip_bad(true);
    assert_eq!(reader.by_ref().count(), 1);
    assert_eq!(reader.counts().bad_lines, 1);
    // A pfn that is not a number.
    let e = read_all(text_reader(&good.replace("0x1000", "0xg00")).unwrap()).unwrap_err();
    assert!(
        e.to_string().contains("line 1: pfn=0xg00 is not a number"),
        "{e}"
    );
    // Timestamps that go back further than the reorder window.
    let mut text = String::new();
    for i in 0..5000u64 {
        text.push_str(&format!(
            "a-1 [001] ..... 2.{:06}: mm_page_free: page=00000000aa pfn={:#x} order=0\n",
            i + 10,
            0x1000 + i
        ));
    }
    text.push_str("a-1 [000] ..... 1.000000: mm_page_free: page=00000000aa pfn=0x1 order=0\n");
    let e = read_all(text_reader(&text).unwrap()).unwrap_err();
    assert_eq!(e.line, 5001);
    assert!(e.to_string().contains("out of order"), "{e}");
    // Slightly out of order: sorted back.
    let swapped = "a-1 [001] ..... 1.5: mm_page_free: page=00000000aa pfn=0x2 order=0\na-1 [000] ..... 1.4: mm_page_free: page=00000000aa pfn=0x1 order=0\n";
    let events = read_all(text_reader(swapped).unwrap()).unwrap();
    assert_eq!(
        events.iter().map(|e| e.pfn).collect::<Vec<_>>(),
        [Some(1), Some(2)]
    );
    // Other events are counted, not errors.
    let mut reader = text_reader("a-1 [000] ..... 1.0: kmalloc: call_site=x\n").unwrap();
    assert_eq!(reader.by_ref().count(), 0);
    assert_eq!(reader.counts().unknown_events, 1);
}

#[test]
fn a_truncated_recording_is_refused() {
    let bytes = std::fs::read(data(RECORDING)).unwrap();
    let cut = bytes[..bytes.len() / 2].to_vec();
    let reader = TraceReader::from_reader(Box::new(Cursor::new(cut))).unwrap();
    let e = read_all(reader).unwrap_err();
    assert!(e.to_string().contains("truncated"), "{e}");
    // An uncompressed recording cut inside a record.
    let mut plain = b"pfnlab-trace 1\n".to_vec();
    let header = Header {
        kernel: String::new(),
        page_size: 4096,
        cpus: 1,
        layout: None,
        command: None,
        seconds: 0.0,
        lost_events: vec![0],
        snapshot_start: None,
        snapshot_end: None,
    };
    plain.extend(serde_json::to_vec(&header).unwrap());
    plain.extend(b"\n0123456789");
    let e = read_all(TraceReader::from_reader(Box::new(Cursor::new(plain))).unwrap()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "line 1: truncated: the file ends 10 bytes into a 26-byte record"
    );
}

#[test]
fn an_order_above_max_page_order_is_a_counted_refusal() {
    let text = "a-1 [000] ..... 1.0: mm_page_alloc: page=00000000aa pfn=0x1000 order=11 migratetype=1 gfp_flags=GFP_KERNEL\n";
    let dir = std::env::temp_dir().join(format!("pfnlab-order-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("order.txt");
    std::fs::write(&path, text).unwrap();
    let layout = replay_layout();
    let r = &replay(
        &path,
        &layout,
        &[ModelKind::SparseExtreme],
        ReplayOptions::default(),
    )[0];
    assert_eq!(
        r.events.alloc_failures.get("order above MAX_PAGE_ORDER"),
        Some(&1)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Four pages allocated and freed on one CPU end on its per-CPU list:
/// the trace drained nothing, so neither did the replay, though dropping
/// its handles at the end gives the pages back (and conserves them).
#[test]
fn the_final_drain_of_the_replays_handles_is_not_counted() {
    let mut text = String::new();
    for (i, pfn) in [0x1000, 0x1001, 0x1002, 0x1003].into_iter().enumerate() {
        text += &format!(
            "a-1 [000] ..... 1.{i:06}: mm_page_alloc: page=00000000aa pfn={pfn:#x} order=0 migratetype=1 gfp_flags=GFP_KERNEL\n"
        );
    }
    for (i, pfn) in [0x1000, 0x1001, 0x1002, 0x1003].into_iter().enumerate() {
        text += &format!(
            "a-1 [000] ..... 2.{i:06}: mm_page_free: page=00000000aa pfn={pfn:#x} order=0\n"
        );
    }
    let dir = std::env::temp_dir().join(format!("pfnlab-drain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("pairs.txt");
    std::fs::write(&path, text).unwrap();
    let layout = replay_layout();
    let r = &replay(&path, &layout, &[ModelKind::Flat], ReplayOptions::default())[0];
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(r.events.allocs, 4);
    assert!(r.allocator.pcp_refills >= 1, "{:?}", r.allocator);
    assert_eq!(
        (r.allocator.pcp_drains, r.allocator.pcp_drain_blocks),
        (0, 0),
        "{:?}",
        r.allocator
    );
    assert!(r.allocator.conserved);
}

/// A source of endless trace lines, made as they are read.
struct Endless {
    line: Vec<u8>,
    pos: usize,
    n: u64,
}

impl Read for Endless {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.fill_buf()?.len().min(buf.len());
        buf[..n].copy_from_slice(&self.line[self.pos..self.pos + n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for Endless {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        if self.pos == self.line.len() {
            self.n += 1;
            let (kind, extra) = if self.n % 2 == 1 {
                ("mm_page_alloc", " migratetype=1 gfp_flags=GFP_KERNEL")
            } else {
                ("mm_page_free", "")
            };
            self.line = format!(
                "a-1 [000] ..... {}.{:06}: {kind}: page=00000000aa pfn={:#x} order=0{extra}\n",
                self.n / 1_000_000,
                self.n % 1_000_000,
                0x1000 + (self.n - 1) / 2 % 4096
            )
            .into_bytes();
            self.pos = 0;
        }
        Ok(&self.line[self.pos..])
    }

    fn consume(&mut self, amt: usize) {
        self.pos += amt;
    }
}

#[test]
fn reading_streams_a_trace_larger_than_memory() {
    let source = Endless {
        line: Vec::new(),
        pos: 0,
        n: 0,
    };
    let reader = TraceReader::from_reader(Box::new(source)).unwrap();
    let events: Vec<Event> = reader.take(100_000).map(Result::unwrap).collect();
    assert_eq!(events.len(), 100_000);
    assert!(events.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
}

/// The layout a recording carries.
fn recorded_layout(path: &Path) -> Layout {
    let reader = TraceReader::open(path).unwrap();
    pfnlab::trace::replay::replay_layout(Some(&LayoutSpec::Recorded), reader.header())
        .unwrap()
        .layout
}

#[test]
fn exact_times_the_traces_own_pfns_on_the_recorded_layout() {
    let path = data(RECORDING);
    let layout = recorded_layout(&path);
    let options = ReplayOptions {
        exact: true,
        ..ReplayOptions::default()
    };
    let results = replay(
        &path,
        &layout,
        &[ModelKind::Flat, ModelKind::VmemmapProbe],
        options,
    );
    for r in &results {
        let x = r.exact.as_ref().expect("--exact ran");
        assert!(
            x.pfns > 0 && x.valid == x.pfns,
            "{}: the host's pfns are valid on its own layout",
            r.model
        );
        assert!(x.ns_per_pfn > 0.0);
        // Batched frees follow their page's mm_page_free on 6.x kernels.
        assert!(r.events.batched_paired > 0);
    }
}

/// From boot, a replay seeds the per-CPU lists with the pages the trace
/// shows on them, which spares it refills; with `empty_lists` (as `bench
/// frag` reads a trace) it seeds none and refills for them.
#[test]
fn from_boot_the_lists_are_seeded_unless_asked_empty() {
    let path = data(RECORDING);
    let layout = recorded_layout(&path);
    let run = |empty_lists| {
        let options = ReplayOptions {
            empty_lists,
            ..ReplayOptions::default()
        };
        let mut results = replay(&path, &layout, &[ModelKind::Flat], options);
        results.pop().unwrap()
    };
    let (seeded, empty) = (run(false), run(true));
    assert!(seeded.events.seeded_list_pages > 0, "{:?}", seeded.events);
    assert_eq!(empty.events.seeded_list_pages, 0, "{:?}", empty.events);
    assert!(
        seeded.allocator.pcp_refill_blocks < empty.allocator.pcp_refill_blocks,
        "{:?} against {:?}",
        seeded.allocator,
        empty.allocator
    );
    for r in [&seeded, &empty] {
        assert!(r.allocator.conserved, "{:?}", r.allocator);
    }
}

#[test]
fn convert_streams_text_into_a_recording() {
    let dir = std::env::temp_dir().join(format!("pfnlab-convert-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("c.trace.zst");
    let layout = Layout::preset("x86-pci-hole").unwrap();
    let n = pfnlab::trace::format::convert(&data(TEXT), &out, Some(&layout), false).unwrap();
    let text = read_all(TraceReader::open(&data(TEXT)).unwrap()).unwrap();
    let reader = TraceReader::open(&out).unwrap();
    assert!(reader.header().unwrap().layout.is_some());
    let back = read_all(reader).unwrap();
    assert_eq!(n, text.len() as u64);
    assert_eq!(back.len(), text.len());
    assert!(
        back.iter()
            .zip(&text)
            .all(|(a, b)| (a.ts_ns, a.pfn, a.kind) == (b.ts_ns, b.pfn, b.kind))
    );
    // A bad line: an error naming it, and no partial output left.
    let bad = dir.join("bad.txt");
    std::fs::write(
        &bad,
        "a-1 [000] ..... 1.0: mm_page_free: page=1 pfn=0x10 order=x\n",
    )
    .unwrap();
    let bad_out = dir.join("bad.trace");
    let e = pfnlab::trace::format::convert(&bad, &bad_out, None, false).unwrap_err();
    assert!(
        e.to_string().contains("line 1: order=x is not a number"),
        "{e}"
    );
    assert!(
        matches!(e, pfnlab::trace::format::ConvertError::Read { .. }),
        "{e:?}"
    );
    assert!(!bad_out.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A kernel text line of `mm_page_alloc` (or a free, for odd `n`) at `us`
/// microseconds.
fn text_line(n: u64, us: u64) -> String {
    let (event, rest) = if n.is_multiple_of(2) {
        ("mm_page_alloc", " migratetype=1 gfp_flags=GFP_KERNEL")
    } else {
        ("mm_page_free", "")
    };
    format!(
        "          gzip-{n}    [00{}] .....  {}.{:06}: {event}: page=00000000c9a1f6ce pfn=0x{:x} order=0{rest}\n",
        n % 2,
        us / 1_000_000,
        us % 1_000_000,
        0x10_0000 + n / 2
    )
}

/// Reading a whole trace in blocks gives what the iterator gives: the
/// same events in the same order, or the same first error, on text that
/// spans many blocks, is sorted back within the window, goes back
/// further, or breaks in a late block.
#[test]
fn reading_whole_agrees_with_the_iterator() {
    let n = 40_000u64; // about 5 MiB: several blocks
    let in_order: String = (0..n).map(|i| text_line(i, 1_000 + i)).collect();
    // Every 1000th event swapped with the one 100 later: sorted back.
    let mut ts: Vec<u64> = (0..n).map(|i| 1_000 + i).collect();
    for i in (0..n as usize - 100).step_by(1000) {
        ts.swap(i, i + 100);
    }
    let within: String = (0..n).map(|i| text_line(i, ts[i as usize])).collect();
    // One event 10,000 events late: refused at its line.
    let mut far = ts.clone();
    far[30_000] = 1_000 + 20_000;
    let beyond: String = (0..n).map(|i| text_line(i, far[i as usize])).collect();
    // A malformed line in a late block, with and without --skip-bad.
    let mut broken = in_order.clone();
    let at = broken.match_indices('\n').nth(35_000).unwrap().0 + 1;
    broken.insert_str(
        at,
        "  gzip-1 [000] ..... 1.0: mm_page_free: page=1 pfn=0xZZ order=0\n",
    );
    for (name, text) in [
        ("in order", &in_order),
        ("within", &within),
        ("beyond", &beyond),
        ("broken", &broken),
    ] {
        for skip_bad in [false, true] {
            let mut reader = text_reader(text).unwrap().skip_bad(skip_bad);
            let iterated: Result<Vec<Event>, TraceError> = reader.by_ref().collect();
            let counts = reader.counts();
            let whole = text_reader(text).unwrap().skip_bad(skip_bad).read_all();
            match (&iterated, &whole) {
                (Ok(a), Ok((b, c))) => {
                    assert!(a == b, "{name}: the events differ");
                    assert_eq!(counts, *c, "{name}");
                }
                (Err(a), Err(b)) => assert_eq!(a, b, "{name}"),
                _ => panic!("{name}: {:?} against {:?}", iterated.err(), whole.err()),
            }
        }
    }
    let e = read_all(text_reader(&beyond).unwrap()).unwrap_err();
    assert_eq!(e.line, 30_001, "{e}");
    let e = read_all(text_reader(&broken).unwrap()).unwrap_err();
    assert_eq!(e.line, 35_002, "{e}");
    let (events, counts) = text_reader(&broken)
        .unwrap()
        .skip_bad(true)
        .read_all()
        .unwrap();
    assert_eq!((events.len() as u64, counts.bad_lines), (n, 1));
    // Lines are the file's, across blocks.
    let (events, _) = text_reader(&in_order).unwrap().read_all().unwrap();
    assert!(events.iter().zip(1..).all(|(e, line)| e.line == line));
}

/// A line longer than a block (a comment of 3 MiB) is read whole, and the
/// lines after it keep their numbers.
#[test]
fn a_line_longer_than_a_block_reads() {
    let mut text = text_line(0, 1);
    text.push('#');
    text.push_str(&"x".repeat(3 << 20));
    text.push('\n');
    text.push_str(&text_line(1, 2));
    // The last line without its newline.
    text.push_str(text_line(2, 3).trim_end());
    let events = read_all(text_reader(&text).unwrap()).unwrap();
    let lines: Vec<u64> = events.iter().map(|e| e.line).collect();
    assert_eq!(lines, [1, 3, 4]);
}

/// The model calls are counted only when asked for, and then exactly: the
/// same counts as a replay of the trace through an allocator over a
/// counting model of one's own, and the timed pass unchanged.
#[test]
fn model_calls_are_counted_when_asked_and_exact() {
    use buddy::{Allocator, Kernel};
    use pfnlab::counting::{Counted, ModelOp};
    use pfnlab::trace::replay::replay_through;
    use sparsemem::Flat;

    let path = data(RECORDING);
    let layout = replay_layout();
    let plain = &replay(&path, &layout, &[ModelKind::Flat], ReplayOptions::default())[0];
    assert!(plain.model_ops.is_none());
    let options = ReplayOptions {
        count_calls: true,
        ..ReplayOptions::default()
    };
    let counted = &replay(&path, &layout, &[ModelKind::Flat], options)[0];
    assert_eq!(counted.events, plain.events);
    assert_eq!(counted.allocator.merges, plain.allocator.merges);
    let ops = counted.model_ops.as_ref().expect("counted");
    let own = Allocator::<_, Kernel>::new(
        Counted::new(Flat::new(&layout).unwrap()),
        &layout,
        options.allocator_options(),
    )
    .unwrap();
    own.model().reset();
    let open = || TraceReader::open(&path);
    replay_through(&own, &layout, &open, ReplayOptions::default()).unwrap();
    let mine = own.model().ops();
    for op in ModelOp::ALL {
        assert_eq!(ops.calls[op.name()], mine.count(op), "{}", op.name());
    }
    assert_eq!(ops.hole_hits, own.model().hole_hits());
    assert!(ops.calls["page_to_pfn"] > 0);
}

/// `pfnlab replay` prints the model-call columns as `-` and says how to
/// fill them unless `--count-calls` is given, and the whole command's
/// rate under the table either way.
#[cfg(feature = "cli")]
#[test]
fn the_replay_says_what_it_did_not_count() {
    let text = data(TEXT);
    let dir = std::env::temp_dir().join(format!("pfnlab-uncounted-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let layout = dir.join("pci-hole-4g.toml");
    std::fs::write(&layout, replay_layout().to_toml()).unwrap();
    let run = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_pfnlab"))
            .args([
                "replay",
                text.to_str().unwrap(),
                "--layout",
                layout.to_str().unwrap(),
            ])
            .args(["--model", "flat", "--trials", "1"])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let plain = run(&[]);
    let row = plain.lines().find(|l| l.starts_with("flat ")).unwrap();
    assert_eq!(row.split_whitespace().nth(7), Some("-"), "{row}");
    assert!(plain.contains("not counted (-). --count-calls"), "{plain}");
    assert!(plain.contains("the whole command: "), "{plain}");
    let counted = run(&["--count-calls"]);
    let row = counted.lines().find(|l| l.starts_with("flat ")).unwrap();
    let pageblock: u64 = row.split_whitespace().nth(8).unwrap().parse().unwrap();
    assert!(pageblock > 0, "{row}");
    assert!(counted.contains("--count-calls"), "{counted}");
    assert!(!counted.contains("not counted"), "{counted}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `bench flags` replays the seed program's recording from the source tree
/// unless told another; the quick test gives it the short text one, so
/// this reads the shipped one whole: present, a pfnlab recording, every
/// event well formed, and both allocations and frees in it.
#[test]
fn the_seed_programs_recording_ships_and_reads_whole() {
    let path = pfnlab::experiments::flags::default_trace();
    let reader = TraceReader::open(&path).unwrap();
    let header = reader.header().cloned().expect("a pfnlab recording");
    assert_eq!(header.page_size, 4096, "{header:?}");
    let (events, counts) = reader.read_all().unwrap();
    assert_eq!(counts.bad_lines, 0);
    let of = |kind| events.iter().filter(|e| e.kind == kind).count();
    let (allocs, frees) = (of(EventKind::Alloc), of(EventKind::Free));
    assert!(
        allocs > 1000 && frees > 1000,
        "{allocs} allocations, {frees} frees"
    );
}
