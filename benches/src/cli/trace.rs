//! `pfnlab trace record`, `pfnlab trace convert` and `pfnlab replay`.

use std::io::{self, IsTerminal};
use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::ProgressBar;
use pfnlab::layout_spec::LayoutSpec;
use pfnlab::machine::Machine;
use pfnlab::models::ModelKind;
use pfnlab::report::{JsonOut, Report};
use pfnlab::snapshot::{Snapshot, StartState};
use pfnlab::trace::format::{TraceReader, convert};
use pfnlab::trace::record::{RecordOptions, record_to};
use pfnlab::trace::replay::{
    ModelResults, ReplayOptions, replay_comparisons, replay_layout, replay_models_from,
    replay_rows, replay_table,
};

use super::replay_state::{self, EndArg, StateArg, start_and_layout};
use super::{CliError, load_layout, loaded, parse_layout};

/// `pfnlab trace`.
#[derive(clap::Subcommand)]
pub enum TraceCommand {
    /// Record kmem:mm_page_alloc, _zone_locked, mm_page_free, _batched and
    /// mm_page_pcpu_drain in a private tracing instance while COMMAND runs
    /// (or for --seconds), with the host's layout.
    Record {
        /// The recording (zstd-compressed when the name ends in .zst).
        #[arg(long, default_value = "pfnlab-trace.zst")]
        out: PathBuf,
        /// Without a command: how long to record.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Also take the machine's snapshot (as `pfnlab snapshot` does)
        /// just before tracing begins and just after it stops, into the
        /// recording: `replay --start-state recorded --end-state recorded`
        /// then holds the replay against where the machine ended.
        #[arg(long)]
        snapshot: bool,
        /// The command to record, after `--`.
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Convert a kernel text trace into a (compressed) recording, streamed:
    /// about 3 bytes per event instead of 135, and read 10x faster.
    Convert {
        /// The kernel's text (trace_pipe or the trace file).
        input: PathBuf,
        /// The recording (zstd-compressed when the name ends in .zst).
        output: PathBuf,
        /// Store this layout with it: `host`, `preset:NAME` (x86-pci-hole,
        /// ia64-holes, numa-fake-64, zone-device, sparse-52bit),
        /// `snapshot:FILE` or a TOML file.
        #[arg(long = "with-layout", value_parser = parse_layout)]
        with_layout: Option<LayoutSpec>,
        /// Count and skip malformed lines instead of stopping at the first.
        #[arg(long)]
        skip_bad: bool,
    },
}

/// `pfnlab replay`'s options.
#[derive(clap::Args)]
pub struct ReplayArgs {
    /// The trace: the kernel's text (trace_pipe or the trace file) or a
    /// recording from `pfnlab trace record`.
    file: PathBuf,
    /// The layout to replay on: `recorded` (the recording's own, the
    /// default when it has one), `host`, `preset:NAME` (x86-pci-hole, ia64-holes,
    /// numa-fake-64, zone-device, sparse-52bit), `snapshot:FILE` (the
    /// machine a `pfnlab snapshot` file was taken on) or a TOML file.
    #[arg(long, value_parser = parse_layout)]
    layout: Option<LayoutSpec>,
    /// Models, comma-separated (default: every model).
    #[arg(long, value_parser = ModelKind::parse, value_delimiter = ',')]
    model: Vec<ModelKind>,
    /// The kernel era the allocator models: 2.6.9, 2.6.23, 5.13, 5.14,
    /// 5.15, 6.1, 6.6, 6.8, 6.12 or 6.18 (default: with a snapshot's
    /// start state or layout, the newest era at or below its kernel's
    /// release, said in the header; else 6.18).
    #[arg(long, value_parser = buddy::Era::parse)]
    era: Option<buddy::Era>,
    /// Start from boot with deferred struct page init (Linux 4.2 on): the
    /// trace's allocations grow the zones until the deferred pages are
    /// initialised.
    #[arg(long)]
    deferred_init: bool,
    /// From boot, start every CPU's per-CPU lists empty instead of with the
    /// pages and blocks the trace shows on them (docs/trace.md).
    #[arg(long, conflicts_with = "start_state")]
    empty_lists: bool,
    /// Write every number to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Check every operation: blocks inside RAM, valid, never overlapping.
    #[arg(long)]
    verify: bool,
    /// Count and skip malformed lines instead of stopping at the first.
    #[arg(long)]
    skip_bad: bool,
    /// Also time the trace's own pfn stream through each model's
    /// pfn_valid + pfn_to_page + a descriptor read (the real locality;
    /// meaningful on the recorded or host layout).
    #[arg(long)]
    exact: bool,
    /// Also count the memory-model calls the replay makes (pfn_valid,
    /// pfn_to_page, page_to_pfn, the pageblock lookups), on a second,
    /// untimed pass over a counting model: a second allocator and a second
    /// replay per model, so off by default.
    #[arg(long)]
    count_calls: bool,
    /// Timed passes per model, each on an allocator built afresh and
    /// interleaved with the other models' (default 5; `--quick`: 3).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1000))]
    trials: Option<u16>,
    /// Three timed passes per model instead of five.
    #[arg(long)]
    quick: bool,
    /// `snapshot:FILE`, or `recorded` (the snapshot a recording made
    /// with `trace record --snapshot` carries from its start): every
    /// model starts from its free blocks per zone, order and migratetype,
    /// the rest allocated (docs/snapshots.md), and each CPU's per-CPU
    /// lists from its zoneinfo and what the trace shows on them
    /// (docs/trace.md); the layout is the
    /// snapshot's (with `recorded`, the recording's) unless --layout names
    /// another.
    #[arg(long = "start-state", value_parser = replay_state::parse_start)]
    start_state: Option<StateArg>,
    /// Where the start state's free blocks go (the same seed, the same
    /// pfns).
    #[arg(long = "seed", default_value_t = 0)]
    seed: u64,
    /// `snapshot:FILE` taken where the recording ended, or `recorded`
    /// (the snapshot a recording made with `trace record --snapshot`
    /// carries from its end): each model's free lists at the end of the
    /// replay beside the snapshot's, zone by zone, with the share of free
    /// pages at another order (docs/trace.md).
    #[arg(long = "end-state", value_parser = replay_state::parse_end)]
    end_state: Option<StateArg>,
}

/// Exit status 1 when `--verify` found a wrong operation.
fn verified(results: &ModelResults) -> Result<(), CliError> {
    let wrong: u64 = results
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok())
        .map(|r| r.verify_failures)
        .sum();
    if wrong > 0 {
        return Err(CliError(format!(
            "--verify: {wrong} operations were wrong (see above)"
        )));
    }
    Ok(())
}

/// Runs `pfnlab trace ...`.
pub fn trace(command: TraceCommand) -> Result<(), CliError> {
    match command {
        TraceCommand::Record {
            out,
            seconds,
            snapshot,
            command,
        } => record(
            &out,
            RecordOptions {
                command,
                seconds,
                snapshot,
            },
        ),
        TraceCommand::Convert {
            input,
            output,
            with_layout,
            skip_bad,
        } => {
            let layout = with_layout
                .map(|spec| load_layout(Some(&spec)))
                .transpose()?;
            let n = convert(&input, &output, layout.as_ref(), skip_bad)?;
            println!("{n} events written to {}", output.display());
            Ok(())
        }
    }
}

fn record(out: &Path, options: RecordOptions) -> Result<(), CliError> {
    // Ctrl-C ends the recording (and kills the command); the instance is
    // removed on the way out either way.
    super::catch_signals();
    eprintln!("recording page allocations (Ctrl-C stops)...");
    let rec = record_to(&options, out, &super::INTERRUPTED)?;
    let lost: u64 = rec.header.lost_events.iter().sum();
    println!(
        "{} events in {:.2} s on {} CPUs written to {}; lost events per CPU: {:?}{}",
        rec.events.len(),
        rec.header.seconds,
        rec.header.cpus,
        out.display(),
        rec.header.lost_events,
        if lost > 0 {
            " (the ring buffers overran: raise their size or record less)"
        } else {
            ""
        }
    );
    if rec.header.snapshot_start.is_some() {
        println!(
            "with the machine's snapshots from just before and just after: `pfnlab replay {} --start-state recorded --end-state recorded` holds a replay against them",
            out.display()
        );
    }
    match rec.status {
        Some(s) if !s.success() => Err(CliError(format!("the recorded command failed: {s}"))),
        _ => Ok(()),
    }
}

/// The replay's options from its arguments.
fn replay_options(args: &ReplayArgs) -> ReplayOptions {
    ReplayOptions {
        era: args.era.unwrap_or_default(),
        deferred_init: args.deferred_init,
        verify: args.verify,
        skip_bad: args.skip_bad,
        exact: args.exact,
        trials: usize::from(args.trials.unwrap_or(if args.quick { 3 } else { 5 })),
        start_state_pages: 0,
        count_calls: args.count_calls,
        started: None,
        end_state: false,
        defrag_mode: false,
        empty_lists: args.empty_lists,
        sample_every: None,
    }
}

/// The replay's era: `--era`, else the kernel's of the snapshot the start
/// state or layout comes from, with the header's words for it, else the
/// default.
fn replay_era(
    args: &ReplayArgs,
    start: Option<&StartState>,
    layout: Option<&LayoutSpec>,
) -> Result<(buddy::Era, String), CliError> {
    if let Some(era) = args.era {
        return Ok((era, String::new()));
    }
    let era = match (start, layout) {
        (Some(s), _) => s.era().cloned(),
        (None, Some(LayoutSpec::Snapshot(path))) => Snapshot::load(path)?.era(),
        _ => None,
    };
    Ok(match era {
        Some((era, release)) => (era, format!(" (the snapshot's kernel {release})")),
        None => (buddy::Era::default(), String::new()),
    })
}

/// Runs `pfnlab replay`; `outer` is a `--layout` given before the command.
pub fn replay(args: ReplayArgs, outer: Option<LayoutSpec>) -> Result<(), CliError> {
    let started = Instant::now();
    // Describing the machine calibrates the TSC (a 50 ms spin): on a
    // thread of its own, beside the replay.
    let machine = std::thread::spawn(Machine::describe);
    let file = &args.file;
    let out = args.json.as_deref().map(JsonOut::create).transpose()?;
    let first =
        TraceReader::open(file).map_err(|e| CliError(format!("{}: {e}", file.display())))?;
    let header = first.header();
    let layout_arg = args.layout.clone().or(outer);
    let (start, spec) = start_and_layout(
        args.start_state.as_ref(),
        args.seed,
        file,
        header,
        layout_arg,
    )?;
    // Read before the replay: a bad snapshot costs no replay.
    let end = args
        .end_state
        .as_ref()
        .map(|arg| EndArg::load(arg, file, header))
        .transpose()?;
    let (era, era_source) = replay_era(&args, start.as_ref(), spec.as_ref())?;
    let deferred_init = replay_state::deferred_init(args.deferred_init, start.as_ref(), era)?;
    let layout = loaded(replay_layout(spec.as_ref(), first.header())?);
    drop(first);
    let kinds = models_of(&args.model);
    let options = ReplayOptions {
        started: Some(started),
        era,
        deferred_init,
        end_state: end.is_some(),
        ..replay_options(&args)
    };
    let mut results = run_models(file, &layout, &kinds, options, start.as_ref())?;
    let end_table = end.map(|e| e.compare(&mut results)).unwrap_or_default();
    let machine = machine
        .join()
        .map_err(|_| CliError("describing the machine failed".into()))?;
    // Everything the command does but print: the trace and every
    // allocator are freed by now.
    let command_wall_ns = started.elapsed().as_nanos() as f64;
    // A start state that does not fit the layout fits no model: one line.
    if let Some((_, Err(e @ buddy::AllocError::StartState(_)))) = results.first() {
        return Err(CliError(format!("--start-state: {e}")));
    }
    println!(
        "pfnlab replay {} | era {}{} | layout {}",
        file.display(),
        options.era,
        era_source,
        layout.source()
    );
    println!("machine: {}\n", machine.summary());
    if let Some(s) = &start {
        println!("start state: {}\n", s.label());
    }
    print!("{}{end_table}", replay_table(&results));
    print!("{}", command_line(&results, command_wall_ns));
    if let Some(out) = out {
        let rows = replay_rows(&results, options)
            .into_iter()
            .map(|row| row.with("command_wall_ns", command_wall_ns))
            .collect();
        out.write(&Report {
            experiment: "replay".into(),
            machine,
            layout: layout.source().into(),
            trials: None,
            comparisons: replay_comparisons(&results),
            start_state: start.as_ref().map(|s| s.record().clone()),
            results: rows,
        })?;
    }
    verified(&results)
}

/// `--model`'s models, every model when none was named.
fn models_of(named: &[ModelKind]) -> Vec<ModelKind> {
    if named.is_empty() {
        ModelKind::ALL.to_vec()
    } else {
        named.to_vec()
    }
}

/// Replays `file` through every model of `kinds`, with a spinner on a
/// terminal.
fn run_models(
    file: &Path,
    layout: &sparsemem::Layout,
    kinds: &[ModelKind],
    options: ReplayOptions,
    start: Option<&StartState>,
) -> Result<ModelResults, CliError> {
    let bar = if io::stderr().is_terminal() {
        ProgressBar::new_spinner()
    } else {
        ProgressBar::hidden()
    };
    let open = || TraceReader::open(file);
    let results = replay_models_from(&open, layout, kinds, options, start, &|kind, n| {
        bar.set_message(format!("{}: {n} events", kind.name()));
        bar.tick();
    })
    .map_err(|e| CliError(format!("{}: {e}", file.display())))?;
    bar.finish_and_clear();
    Ok(results)
}

/// The whole command's wall time and rate, under the table.
fn command_line(results: &ModelResults, command_wall_ns: f64) -> String {
    let Some(events) = results
        .iter()
        .find_map(|(_, r)| r.as_ref().ok().map(|r| r.events.events))
    else {
        return String::new();
    };
    let models = results.iter().filter(|(_, r)| r.is_ok()).count();
    format!(
        "the whole command: {events} events through {models} model{} in {:.3} s wall, {:.2} Mevents/s (from its start to the last allocator and the trace freed: reading, every model's construction, passes and teardown; only printing and --json come after)\n",
        if models == 1 { "" } else { "s" },
        command_wall_ns / 1e9,
        events as f64 / (command_wall_ns / 1e9) / 1e6,
    )
}
