//! The `pfnlab` command. See README.md.

use std::io::{self, BufWriter};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use pfnlab::CliError;
use pfnlab::commands::{PfnSource, layout_report, load_layout, query};
use pfnlab::models::ModelKind;

/// pfnlab: what pfn_valid and pfn_to_page cost under each memory model.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Print a layout: ranges, sections, subsections, memmap bytes per model.
    Layout {
        /// `host`, `preset:NAME` or a TOML file (default: host, falling back
        /// to preset:x86-pci-hole).
        #[arg(long)]
        layout: Option<String>,
    },
    /// Answer pfn_valid for pfns given as arguments or on stdin (one a line).
    Query {
        /// `host`, `preset:NAME` or a TOML file.
        #[arg(long)]
        layout: Option<String>,
        /// The memory model.
        #[arg(long)]
        model: String,
        /// One JSON object per line instead of text.
        #[arg(long)]
        json: bool,
        /// Pfns in decimal or 0x-hex; none means read stdin.
        pfns: Vec<String>,
    },
}

fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        None => {
            let layout = load_layout(None)?;
            print!("{}", layout_report(&layout));
            Ok(())
        }
        Some(Command::Layout { layout }) => {
            let layout = load_layout(layout.as_deref())?;
            print!("{}", layout_report(&layout));
            Ok(())
        }
        Some(Command::Query {
            layout,
            model,
            json,
            pfns,
        }) => {
            let kind = ModelKind::parse(&model)?;
            let layout = load_layout(layout.as_deref())?;
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
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pfnlab: {e}");
            ExitCode::from(2)
        }
    }
}
