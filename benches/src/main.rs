//! The `pfnlab` command. See README.md.

use std::io::{self, BufWriter, IsTerminal};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use pfnlab::commands::{PfnSource, layout_report, load_layout, memmap_by_model, query};
use pfnlab::experiments::kernel_fixup::measure_kernel_fixup;
use pfnlab::machine::Machine;
use pfnlab::models::ModelKind;
use pfnlab::picture::layout_svg;
use pfnlab::report::{JsonOut, Report};
use pfnlab::timing::Plan;
use pfnlab::{CliError, compare, experiments};

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
    #[arg(long, global = true)]
    layout: Option<String>,
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
    Bench(experiments::BenchArgs),
}

fn run(cli: Cli) -> Result<(), CliError> {
    let plan = if cli.quick { Plan::QUICK } else { Plan::FULL };
    match cli.command {
        None => {
            let out = cli.json.as_deref().map(JsonOut::create).transpose()?;
            let layout = load_layout(cli.layout.as_deref())?;
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
            let (results, refused) = compare::run(&layout, plan, options, &bar);
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
            let layout = load_layout(cli.layout.as_deref())?;
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
            let layout = load_layout(cli.layout.as_deref())?;
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
        Some(Command::Bench(args)) => experiments::run(&args, cli.layout.as_deref(), plan),
    }
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
