//! The binary's own parts: the arguments of each command (each command
//! declares only the options it takes), the progress bar, and the text
//! each command prints.
//!
//! Modules: `commands` (layout, query), `compare` (no command), `bench`
//! (the experiments), `trace` (record, convert, replay), `views`
//! (zoneinfo, buddyinfo, pagetypeinfo); each uses only
//! this module's helpers and the library.

pub mod bench;
pub mod commands;
pub mod compare;
pub mod hotplug_memmap;
pub mod trace;
pub mod views;

use std::convert::Infallible;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use pfnlab::layout_spec::{FALLBACK_PRESET, LayoutSpec, Loaded};
use pfnlab::timing::Plan;

/// pfnlab: what pfn_valid and pfn_to_page cost under each memory model,
/// and what that does to a buddy allocator's hot path. With no command it
/// runs the default comparison on the live host's layout.
#[derive(Parser)]
#[command(version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// The default comparison's layout: `host`, `preset:NAME` or a TOML
    /// file (default: host, falling back to preset:x86-pci-hole). Given
    /// before a command, that command's layout.
    #[arg(long, value_parser = parse_layout)]
    layout: Option<LayoutSpec>,
    /// Default comparison: write every number, with its trials and the
    /// machine, to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Default comparison: short runs (for tests and smoke checks).
    #[arg(long)]
    quick: bool,
    /// Default comparison: the kernel era the allocator models (default
    /// 6.18).
    #[arg(long, value_parser = buddy::Era::parse)]
    era: Option<buddy::Era>,
}

#[derive(Subcommand)]
enum Command {
    /// Print a layout: ranges, sections, subsections, memmap bytes per model.
    Layout(commands::LayoutArgs),
    /// Answer pfn_valid for pfns given as arguments or on stdin (one a line).
    Query(commands::QueryArgs),
    /// Run one of the experiments (see `pfnlab bench --help`).
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Record the running kernel's page allocations (root; see `trace record --help`).
    #[command(subcommand)]
    Trace(trace::TraceCommand),
    /// Replay a kernel trace (text or a pfnlab recording) through every model.
    Replay(trace::ReplayArgs),
    /// The model's /proc/zoneinfo, or its differences from a machine's.
    Zoneinfo(views::ZoneinfoArgs),
    /// The model's /proc/buddyinfo.
    Buddyinfo(views::ModelArgs),
    /// The model's /proc/pagetypeinfo.
    Pagetypeinfo(views::ModelArgs),
}

/// Runs the command `cli` names.
pub fn run(cli: Cli) -> Result<(), CliError> {
    let outer = cli.layout;
    if cli.command.is_some() {
        // The default comparison's own options say nothing to a command:
        // refused rather than silently ignored.
        let given = [
            (cli.quick, "--quick"),
            (cli.json.is_some(), "--json"),
            (cli.era.is_some(), "--era"),
        ];
        if let Some((_, flag)) = given.into_iter().find(|(on, _)| *on) {
            return Err(CliError(format!(
                "{flag} before a command is the default comparison's; give it after the command (for example `pfnlab bench bulk {flag} ...`)"
            )));
        }
    }
    match cli.command {
        None => compare::run(&pfnlab::experiments::Setup {
            layout: outer,
            model: None,
            era: cli.era,
            plan: plan(cli.quick),
            json: cli.json,
        }),
        Some(Command::Layout(args)) => commands::layout(args, outer),
        Some(Command::Query(args)) => commands::query_command(args, outer),
        Some(Command::Bench(command)) => bench::run(command, outer),
        Some(Command::Trace(command)) => trace::trace(command),
        Some(Command::Replay(args)) => trace::replay(args, outer),
        Some(Command::Zoneinfo(args)) => views::zoneinfo(args, outer),
        Some(Command::Buddyinfo(args)) => views::buddyinfo(args, outer),
        Some(Command::Pagetypeinfo(args)) => views::pagetypeinfo(args, outer),
    }
}

/// Full trials, or short ones with `--quick`.
fn plan(quick: bool) -> Plan {
    if quick { Plan::QUICK } else { Plan::FULL }
}

/// Loads `spec` (default `host`), saying on stderr when `host` fell back
/// to the preset.
fn load_layout(spec: Option<&LayoutSpec>) -> Result<sparsemem::Layout, CliError> {
    Ok(loaded(spec.unwrap_or(&LayoutSpec::Host).load()?))
}

/// The layout of `l`, the fallback said on stderr.
fn loaded(l: Loaded) -> sparsemem::Layout {
    if let Some(why) = &l.fallback {
        fallback_notice(why);
    }
    l.layout
}

/// Parses `--layout`: `host`, `recorded`, `preset:NAME`, or a file path.
pub fn parse_layout(text: &str) -> Result<LayoutSpec, Infallible> {
    Ok(match text {
        "host" => LayoutSpec::Host,
        "recorded" => LayoutSpec::Recorded,
        _ => match text.strip_prefix("preset:") {
            Some(name) => LayoutSpec::Preset(name.to_owned()),
            None => LayoutSpec::File(PathBuf::from(text)),
        },
    })
}

/// An error the CLI reports as one line and exit status 2. (Deliberately
/// not `std::error::Error`, so any error converts into it with `?`.)
#[derive(Debug)]
pub struct CliError(pub String);

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl<E: std::error::Error> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError(e.to_string())
    }
}

/// Says on stderr that `host` fell back to the preset, and why.
pub fn fallback_notice(why: &sparsemem::LayoutError) {
    eprintln!("notice: {why}; using preset:{FALLBACK_PRESET}");
}

/// A progress bar on stderr when it is a terminal, hidden otherwise.
pub struct Bar(pub indicatif::ProgressBar);

impl pfnlab::experiments::Progress for Bar {
    fn stage(&self, what: String) {
        self.0.set_message(what);
    }

    fn advance(&self) {
        self.0.inc(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_specs_parse_into_their_sources() {
        let parse = |t| parse_layout(t).unwrap();
        assert_eq!(parse("host"), LayoutSpec::Host);
        assert_eq!(parse("recorded"), LayoutSpec::Recorded);
        assert_eq!(
            parse("preset:ia64-holes"),
            LayoutSpec::Preset("ia64-holes".into())
        );
        assert_eq!(parse("a/b.toml"), LayoutSpec::File("a/b.toml".into()));
    }
}
