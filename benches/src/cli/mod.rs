//! The binary's own parts: the arguments of each command (each command
//! declares only the options it takes), the progress bar, and the text
//! each command prints.
//!
//! Modules: `commands` (layout, query), `compare` (no command), `bench`
//! (the experiments), `trace` (record, convert, replay), `views`
//! (zoneinfo, buddyinfo, pagetypeinfo), `snapshot`; each uses only
//! this module's helpers and the library.

pub mod bench;
pub mod commands;
pub mod compare;
pub mod hotplug_memmap;
pub mod layout_hugetlb;
pub mod replay_state;
pub mod snapshot;
pub mod trace;
pub mod views;

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

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
    /// The default comparison's layout: `host`, `preset:NAME` (x86-pci-hole, ia64-holes,
    /// numa-fake-64, zone-device, sparse-52bit), `snapshot:FILE` (the
    /// machine a `pfnlab snapshot` file was taken on) or a TOML file (default: host, falling back to
    /// preset:x86-pci-hole). Given before a command, that command's layout.
    #[arg(long, value_parser = parse_layout)]
    layout: Option<LayoutSpec>,
    /// Default comparison: write every number, with its trials and the
    /// machine, to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Default comparison: short runs (for tests and smoke checks).
    #[arg(long)]
    quick: bool,
    /// Default comparison: the kernel era the allocator models: 2.6.9,
    /// 2.6.23, 5.13, 5.14, 5.15, 6.1, 6.6, 6.8, 6.12 or 6.18 (default 6.18).
    #[arg(long, value_parser = buddy::Era::parse)]
    era: Option<buddy::Era>,
    #[command(flatten)]
    trials: TrialArgs,
    #[command(flatten)]
    start: StartArgs,
}

/// `--start-state snapshot:FILE` and `--seed`, on the commands whose
/// allocators can start from a machine's free lists.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct StartArgs {
    /// `snapshot:FILE`: every allocator the run builds starts from the
    /// snapshot's free blocks per zone, order and migratetype, the rest
    /// allocated (docs/snapshots.md); the layout is the snapshot's unless
    /// --layout names another.
    #[arg(long = "start-state", value_parser = views::parse_start_state)]
    start_state: Option<PathBuf>,
    /// Where the start state's free blocks go (the same seed, the same
    /// pfns).
    #[arg(long = "seed", default_value_t = 0)]
    start_seed: u64,
}

impl StartArgs {
    /// The snapshot and the seed, if a start state was asked for.
    fn spec(&self) -> Option<(PathBuf, u64)> {
        self.start_state.clone().map(|p| (p, self.start_seed))
    }
}

/// How many trials, how long, and up to how many when an interval is too
/// wide: every measuring command takes these.
#[derive(Clone, Copy, Debug, Default, clap::Args)]
pub struct TrialArgs {
    /// Timed trials (default 7; 3 with --quick).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1000))]
    trials: Option<u64>,
    /// Shortest trial, in seconds: a shorter run repeats within its trial
    /// (default 0: each trial runs its workload once).
    #[arg(long, value_parser = parse_seconds)]
    min_time: Option<std::time::Duration>,
    /// Most trials a run grows to while a comparison's 95 % interval is
    /// wider than ±5 % (default 31; with --quick, or equal to --trials,
    /// never extended).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1000))]
    max_trials: Option<u64>,
}

impl TrialArgs {
    /// Whether any was given.
    fn given(&self) -> bool {
        self.trials.is_some() || self.min_time.is_some() || self.max_trials.is_some()
    }
}

/// Parses `--min-time`: non-negative seconds.
fn parse_seconds(text: &str) -> Result<std::time::Duration, String> {
    let secs: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds"))?;
    std::time::Duration::try_from_secs_f64(secs)
        .map_err(|_| format!("`{text}` is not a non-negative number of seconds"))
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
    /// Save this machine's memory state to one file (see docs/snapshots.md).
    Snapshot(snapshot::SnapshotArgs),
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
            (cli.trials.given(), "--trials, --min-time or --max-trials"),
            (cli.start.start_state.is_some(), "--start-state"),
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
            plan: plan(cli.quick, cli.trials),
            json: cli.json,
            start_state: cli.start.spec(),
        }),
        Some(Command::Layout(args)) => commands::layout(args, outer),
        Some(Command::Query(args)) => commands::query_command(args, outer),
        Some(Command::Bench(command)) => bench::run(command, outer),
        Some(Command::Trace(command)) => trace::trace(command),
        Some(Command::Replay(args)) => trace::replay(args, outer),
        Some(Command::Zoneinfo(args)) => views::zoneinfo(args, outer),
        Some(Command::Buddyinfo(args)) => views::buddyinfo(args, outer),
        Some(Command::Pagetypeinfo(args)) => views::pagetypeinfo(args, outer),
        Some(Command::Snapshot(args)) => snapshot::snapshot(args),
    }
}

/// Full trials, or short ones with `--quick`, with the trial options
/// over either; `--trials` above the cap raises the cap with it.
fn plan(quick: bool, args: TrialArgs) -> Plan {
    let base = if quick { Plan::QUICK } else { Plan::FULL };
    let trials = args.trials.map_or(base.trials, |n| n as usize);
    let cap = args.max_trials.map_or(base.max_trials, |n| n as usize);
    Plan {
        trials,
        min_time: args.min_time.unwrap_or(base.min_time),
        max_trials: cap.max(trials),
        ..base
    }
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

/// Parses `--layout`: `host`, `recorded`, `preset:NAME`, `snapshot:FILE`,
/// or a layout file's path.
pub fn parse_layout(text: &str) -> Result<LayoutSpec, Infallible> {
    Ok(match text {
        "host" => LayoutSpec::Host,
        "recorded" => LayoutSpec::Recorded,
        _ => match (text.strip_prefix("preset:"), text.strip_prefix("snapshot:")) {
            (Some(name), _) => LayoutSpec::Preset(name.to_owned()),
            (_, Some(path)) => LayoutSpec::Snapshot(PathBuf::from(path)),
            _ => LayoutSpec::File(PathBuf::from(text)),
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

/// Set by Ctrl-C, SIGTERM or SIGHUP once [`catch_signals`] has run.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Turns Ctrl-C, SIGTERM and SIGHUP into [`INTERRUPTED`] instead of the
/// default of dying on the spot (which would skip every destructor,
/// a sysctl's restore among them). Installed once per process.
pub fn catch_signals() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = ctrlc::set_handler(|| INTERRUPTED.store(true, Ordering::Relaxed));
    });
}

/// While measuring this host's kernel: a signal waits for the
/// measurement, whose settings are restored before it returns; dropping
/// the guard then ends the process with status 130 if one came.
pub struct HostSignals(());

impl HostSignals {
    /// Starts deferring the signals.
    pub fn defer() -> HostSignals {
        catch_signals();
        HostSignals(())
    }
}

impl Drop for HostSignals {
    fn drop(&mut self) {
        if INTERRUPTED.load(Ordering::Relaxed) {
            eprintln!("pfnlab: interrupted; the host kernel's settings were restored");
            std::process::exit(130);
        }
    }
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
        assert_eq!(
            parse("snapshot:a/s.json"),
            LayoutSpec::Snapshot("a/s.json".into())
        );
    }

    #[test]
    fn trial_options_override_the_plan_and_the_cap_follows_the_trials() {
        let args = TrialArgs {
            trials: Some(40),
            min_time: Some(std::time::Duration::from_millis(5)),
            max_trials: None,
        };
        let p = plan(false, args);
        assert_eq!((p.trials, p.max_trials), (40, 40));
        assert_eq!(p.min_time, std::time::Duration::from_millis(5));
        assert_eq!(plan(true, TrialArgs::default()), Plan::QUICK);
        let capped = TrialArgs {
            max_trials: Some(7),
            ..TrialArgs::default()
        };
        assert_eq!(plan(false, capped).max_trials, 7);
        assert!(parse_seconds("-1").is_err() && parse_seconds("x").is_err());
        assert_eq!(
            parse_seconds("0.5"),
            Ok(std::time::Duration::from_millis(500))
        );
    }
}
