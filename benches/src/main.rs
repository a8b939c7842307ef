//! The `pfnlab` command. See README.md.

use std::io::{self, BufWriter, IsTerminal};
use std::path::PathBuf;
use std::process::ExitCode;

mod cli;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use pfnlab::commands::{PfnSource, layout_report, memmap_by_model, query};
use pfnlab::experiments::kernel_fixup::measure_kernel_fixup;
use pfnlab::layout_spec::{LayoutSpec, Loaded};
use pfnlab::machine::Machine;
use pfnlab::models::ModelKind;
use pfnlab::picture::layout_svg;
use pfnlab::report::{JsonOut, Report};
use pfnlab::timing::Plan;
use pfnlab::trace::format::TraceReader;
use pfnlab::trace::format::convert;
use pfnlab::trace::record::{RecordOptions, record_to};
use pfnlab::trace::replay::{
    ReplayOptions, replay_layout, replay_models, replay_rows, replay_table,
};
use pfnlab::{CliError, compare};
use std::sync::atomic::{AtomicBool, Ordering};

/// pfnlab: what pfn_valid and pfn_to_page cost under each memory model,
/// and what that does to a buddy allocator's hot path. With no command it
/// runs the default comparison on the live host's layout.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Layout for the default comparison: `host`, `preset:NAME` or a TOML
    /// file (default: host, falling back to preset:x86-pci-hole).
    #[arg(long, global = true, value_parser = cli::parse_layout)]
    layout: Option<LayoutSpec>,
    /// Default comparison: write every number, with its trials and the
    /// machine, to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Short runs (for tests and smoke checks).
    #[arg(long, global = true)]
    quick: bool,
    /// Default comparison: the kernel era the allocator models (default
    /// 6.18; `bench` takes its own `--era`).
    #[arg(long, value_parser = buddy::Era::parse)]
    era: Option<buddy::Era>,
}

#[derive(Subcommand)]
enum Command {
    /// Print a layout: ranges, sections, subsections, memmap bytes per model.
    Layout {
        /// Also draw the layout as an SVG picture into this file.
        #[arg(long)]
        svg: Option<PathBuf>,
    },
    /// Answer pfn_valid for pfns given as arguments or on stdin (one a line).
    Query {
        /// The memory model.
        #[arg(long, value_parser = ModelKind::parse)]
        model: ModelKind,
        /// One JSON object per line instead of text.
        #[arg(long)]
        json: bool,
        /// Pfns in decimal or 0x-hex; none means read stdin.
        pfns: Vec<String>,
    },
    /// Run one of the experiments (see `pfnlab bench --help`).
    Bench(cli::bench::BenchArgs),
    /// Record the running kernel's page allocations (root; see `trace record --help`).
    #[command(subcommand)]
    Trace(TraceCommand),
    /// Replay a kernel trace (text or a pfnlab recording) through every model.
    Replay {
        /// The trace: the kernel's text (trace_pipe or the trace file) or a
        /// recording from `pfnlab trace record`.
        file: PathBuf,
        /// Models, comma-separated (default: every model).
        #[arg(long, value_parser = ModelKind::parse, value_delimiter = ',')]
        model: Vec<ModelKind>,
        /// The kernel era the allocator models (default 6.18).
        #[arg(long, value_parser = buddy::Era::parse)]
        era: Option<buddy::Era>,
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
    },
}

#[derive(Subcommand)]
enum TraceCommand {
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
        /// Store this layout with it (`host`, `preset:NAME` or a file).
        #[arg(long = "with-layout", value_parser = cli::parse_layout)]
        with_layout: Option<LayoutSpec>,
        /// Count and skip malformed lines instead of stopping at the first.
        #[arg(long)]
        skip_bad: bool,
    },
}

fn run(cli: Cli) -> Result<(), CliError> {
    let plan = if cli.quick { Plan::QUICK } else { Plan::FULL };
    match cli.command {
        None => {
            let out = cli.json.as_deref().map(JsonOut::create).transpose()?;
            let layout = load_layout(cli.layout.as_ref())?;
            let machine = Machine::describe();
            println!(
                "pfnlab default comparison on {} ({}), kernel era {}",
                layout.source(),
                layout.geometry(),
                cli.era.unwrap_or_default()
            );
            println!("machine: {}\n", machine.summary());
            let bar = if io::stderr().is_terminal() {
                ProgressBar::new(ModelKind::ALL.len() as u64)
            } else {
                ProgressBar::hidden()
            };
            bar.set_style(
                ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            let era = cli.era.unwrap_or_default();
            let options = buddy::Options {
                era,
                ..buddy::Options::default()
            };
            let bar = cli::Bar(bar);
            let (results, refused) = compare::run(&layout, plan, options, &bar);
            let bar = bar.0;
            bar.set_message("kernel fault fixup");
            let fixup = measure_kernel_fixup(plan)?;
            bar.finish_and_clear();
            compare::check_finite(&results)?;
            print!("{}", compare::table(&results, &refused, Some(&fixup)));
            if let Some(out) = out {
                let mut rows = compare::rows(&results);
                rows.extend(fixup.rows());
                out.write(&Report {
                    experiment: "compare".into(),
                    machine,
                    layout: layout.source().into(),
                    results: rows,
                })?;
            }
            Ok(())
        }
        Some(Command::Layout { svg }) => {
            let layout = load_layout(cli.layout.as_ref())?;
            print!("{}", layout_report(&layout));
            if let Some(path) = svg {
                let picture = layout_svg(&layout, &memmap_by_model(&layout))?;
                std::fs::write(&path, picture)
                    .map_err(|e| CliError(format!("cannot write {}: {e}", path.display())))?;
                println!("\npicture: {}", path.display());
            }
            Ok(())
        }
        Some(Command::Query {
            model: kind,
            json,
            pfns,
        }) => {
            let layout = load_layout(cli.layout.as_ref())?;
            let stdin = io::stdin();
            let source = if pfns.is_empty() {
                PfnSource::Lines(Box::new(stdin.lock()))
            } else {
                PfnSource::Args(&pfns)
            };
            query(
                &layout,
                kind,
                json,
                source,
                BufWriter::new(io::stdout().lock()),
            )
        }
        Some(Command::Bench(args)) => cli::bench::run(args, cli.layout, plan),
        Some(Command::Trace(TraceCommand::Record {
            out,
            seconds,
            command,
        })) => trace_record(&out, seconds, command),
        Some(Command::Trace(TraceCommand::Convert {
            input,
            output,
            with_layout,
            skip_bad,
        })) => {
            let layout = with_layout
                .map(|spec| load_layout(Some(&spec)))
                .transpose()?;
            let n = convert(&input, &output, layout.as_ref(), skip_bad).map_err(CliError)?;
            println!("{n} events written to {}", output.display());
            Ok(())
        }
        Some(Command::Replay {
            file,
            model,
            era,
            json,
            verify,
            skip_bad,
            exact,
        }) => {
            let options = ReplayOptions {
                era: era.unwrap_or_default(),
                verify,
                skip_bad,
                exact,
            };
            replay(&file, cli.layout.as_ref(), model, options, json.as_deref())
        }
    }
}

fn trace_record(out: &std::path::Path, seconds: f64, command: Vec<String>) -> Result<(), CliError> {
    static STOP: AtomicBool = AtomicBool::new(false);
    // Ctrl-C ends the recording (and kills the command); the instance is
    // removed on the way out either way.
    let _ = ctrlc::set_handler(|| STOP.store(true, Ordering::Relaxed));
    let options = RecordOptions { command, seconds };
    eprintln!("recording page allocations (Ctrl-C stops)...");
    let rec = record_to(&options, out, &STOP).map_err(CliError)?;
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
    match rec.status {
        Some(s) if !s.success() => Err(CliError(format!("the recorded command failed: {s}"))),
        _ => Ok(()),
    }
}

fn replay(
    file: &std::path::Path,
    layout_spec: Option<&LayoutSpec>,
    models: Vec<ModelKind>,
    options: ReplayOptions,
    json: Option<&std::path::Path>,
) -> Result<(), CliError> {
    let out = json.map(JsonOut::create).transpose()?;
    let first =
        TraceReader::open(file).map_err(|e| CliError(format!("{}: {e}", file.display())))?;
    let layout = loaded(replay_layout(layout_spec, first.header())?);
    drop(first);
    let kinds = if models.is_empty() {
        ModelKind::ALL.to_vec()
    } else {
        models
    };
    let machine = Machine::describe();
    println!(
        "pfnlab replay {} | era {} | layout {}",
        file.display(),
        options.era,
        layout.source()
    );
    println!("machine: {}\n", machine.summary());
    let bar = if io::stderr().is_terminal() {
        ProgressBar::new_spinner()
    } else {
        ProgressBar::hidden()
    };
    let open = || TraceReader::open(file);
    let results = replay_models(&open, &layout, &kinds, options, &|kind, n| {
        bar.set_message(format!("{}: {n} events", kind.name()));
        bar.tick();
    })
    .map_err(|e| CliError(format!("{}: {e}", file.display())))?;
    bar.finish_and_clear();
    print!("{}", replay_table(&results));
    if let Some(out) = out {
        out.write(&Report {
            experiment: "replay".into(),
            machine,
            layout: layout.source().into(),
            results: replay_rows(&results, options),
        })?;
    }
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

/// Loads `spec` (default `host`), saying on stderr when `host` fell back
/// to the preset.
fn load_layout(spec: Option<&LayoutSpec>) -> Result<sparsemem::Layout, CliError> {
    Ok(loaded(spec.unwrap_or(&LayoutSpec::Host).load()?))
}

/// The layout of `l`, the fallback said on stderr.
fn loaded(l: Loaded) -> sparsemem::Layout {
    if let Some(why) = &l.fallback {
        cli::fallback_notice(why);
    }
    l.layout
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // One clear line: clap's first line, without its usage block.
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("bad arguments");
            eprintln!(
                "pfnlab: {} (see pfnlab --help)",
                first.trim_start_matches("error: ")
            );
            return ExitCode::from(2);
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pfnlab: {e}");
            ExitCode::from(2)
        }
    }
}
