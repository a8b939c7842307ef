//! `pfnlab bench EXPERIMENT`: the five seed experiments and the peer
//! comparison. Each prints a table with the seed's published figures beside
//! ours, and writes the common JSON shape with `--json`.

pub mod breakdown;
pub mod bulk;
pub mod compare;
pub mod cpuset;
pub mod flags;
pub mod hole_density;
pub mod kernel_fixup;
pub mod lock;
pub mod lock_sim;
pub mod peers;
mod pfn_valid;

use std::path::PathBuf;

use sparsemem::Layout;

use crate::CliError;
use crate::commands::load_layout;
use crate::machine::Machine;
use crate::models::{ModelKind, ModelVisitor, with_model_options};
use crate::report::{JsonOut, Report, Row};
use crate::timing::Plan;

/// An experiment of `pfnlab bench`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum Experiment {
    /// No-bitmap buddy and atomic flag operations (2004).
    Flags,
    /// Zone-lock hold time in the per-CPU bulk paths (2007).
    Lock,
    /// Fault-probed `pfn_valid` for SPARSEMEM_VMEMMAP (2006).
    PfnValid,
    /// The bulk page allocator (2021).
    Bulk,
    /// cpuset checks in the zonelist walk under fake NUMA (2006).
    Cpuset,
    /// Other buddy allocators beside pfnlab's.
    Peers,
    /// `pfn_valid` and the allocator against the fraction of holes.
    HoleDensity,
    /// Where the hot path's time goes, mechanism by mechanism, with the
    /// memory model's share.
    Breakdown,
}

impl Experiment {
    /// Every experiment, in the order `pfnlab bench --help` lists them.
    pub const ALL: [Experiment; 8] = [
        Experiment::Flags,
        Experiment::Lock,
        Experiment::PfnValid,
        Experiment::Bulk,
        Experiment::Cpuset,
        Experiment::Peers,
        Experiment::HoleDensity,
        Experiment::Breakdown,
    ];

    /// The name `pfnlab bench` takes and reports use.
    pub fn name(self) -> &'static str {
        match self {
            Experiment::Flags => "flags",
            Experiment::Lock => "lock",
            Experiment::PfnValid => "pfn-valid",
            Experiment::Bulk => "bulk",
            Experiment::Cpuset => "cpuset",
            Experiment::Peers => "peers",
            Experiment::HoleDensity => "hole-density",
            Experiment::Breakdown => "breakdown",
        }
    }

    /// Parses a name, or says which names exist.
    pub fn parse(name: &str) -> Result<Experiment, UnknownExperiment> {
        Experiment::ALL
            .into_iter()
            .find(|e| e.name() == name)
            .ok_or_else(|| UnknownExperiment(name.to_owned()))
    }

    /// The kernel era of the experiment's seed (the closest pfnlab models):
    /// 2.6.9 for the 2004 flag discussion, 2.6.23 for the 2006–2007 ones,
    /// 5.13 for the bulk allocator and for the hole-density sweep (the last
    /// release with `HOLES_IN_ZONE`), and 2.6.23 for `peers`, whose
    /// comparison is the allocator's bookkeeping (one free list per order,
    /// no pageblock lookups).
    pub fn default_era(self) -> buddy::Era {
        use buddy::Era;
        match self {
            Experiment::Flags => Era::V2_6_9,
            Experiment::Lock | Experiment::PfnValid | Experiment::Cpuset | Experiment::Peers => {
                Era::V2_6_23
            }
            Experiment::Bulk | Experiment::HoleDensity => Era::V5_13,
            Experiment::Breakdown => Era::V6_18,
        }
    }

    /// The model the experiment's seed measured.
    pub fn default_model(self) -> ModelKind {
        match self {
            Experiment::PfnValid => ModelKind::VmemmapProbe,
            Experiment::Flags | Experiment::Lock | Experiment::Cpuset => ModelKind::SparseExtreme,
            Experiment::Bulk
            | Experiment::Peers
            | Experiment::HoleDensity
            | Experiment::Breakdown => ModelKind::VmemmapTable,
        }
    }

    /// The layout the experiment runs on unless `--layout` says otherwise.
    pub fn default_layout(self) -> &'static str {
        match self {
            Experiment::Cpuset => "preset:numa-fake-64",
            Experiment::Flags
            | Experiment::Lock
            | Experiment::Bulk
            | Experiment::Peers
            | Experiment::HoleDensity
            | Experiment::Breakdown => "preset:x86-pci-hole",
            Experiment::PfnValid => "host",
        }
    }
}

impl std::fmt::Display for Experiment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// An experiment name `pfnlab bench` does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownExperiment(pub String);

impl std::fmt::Display for UnknownExperiment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let known: Vec<&str> = Experiment::ALL.iter().map(|e| e.name()).collect();
        write!(
            f,
            "unknown experiment `{}` (known: {})",
            self.0,
            known.join(", ")
        )
    }
}

impl std::error::Error for UnknownExperiment {}

#[cfg(feature = "cli")]
impl clap::ValueEnum for Experiment {
    fn value_variants<'a>() -> &'a [Self] {
        &Experiment::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.name()))
    }
}

/// Arguments of `pfnlab bench`.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct BenchArgs {
    /// The experiment.
    #[cfg_attr(feature = "cli", arg(value_parser = Experiment::parse))]
    pub experiment: Experiment,
    /// Memory model (default: the experiment's own choice).
    #[cfg_attr(feature = "cli", arg(long, value_parser = ModelKind::parse))]
    pub model: Option<ModelKind>,
    /// Write the results as JSON to this file.
    #[cfg_attr(feature = "cli", arg(long))]
    pub json: Option<PathBuf>,
    /// Threads (lock: one per CPU, pinned, default the machine's CPUs;
    /// flags: the multi-threaded run).
    #[cfg_attr(feature = "cli", arg(long))]
    pub threads: Option<usize>,
    /// Iterations (flags: allocate/touch/free rounds, default 1000; lock:
    /// jobs per thread, default 400).
    #[cfg_attr(feature = "cli", arg(long))]
    pub iterations: Option<u64>,
    /// Per-CPU batch for the lock experiment (default: the era's formula,
    /// 31 in 2.6.23).
    #[cfg_attr(feature = "cli", arg(long))]
    pub batch: Option<u32>,
    /// Nodes in the cpuset experiment's cpuset (default 43 of 64).
    #[cfg_attr(feature = "cli", arg(long))]
    pub allowed: Option<u16>,
    /// flags: the recording of the seed program to replay (default
    /// `benches/data/seed-flags.trace.zst` in the source tree).
    #[cfg_attr(feature = "cli", arg(long))]
    pub trace: Option<PathBuf>,
    /// Kernel era whose mechanisms the allocator models (default: the
    /// experiment's seed's era).
    #[cfg_attr(feature = "cli", arg(long, value_parser = buddy::Era::parse))]
    pub era: Option<buddy::Era>,
}

/// What an experiment gets.
pub struct Ctx<'a> {
    /// Trials and scale.
    pub plan: Plan,
    /// The layout (for experiments that use one layout).
    pub layout: Layout,
    /// `--layout` as given, if it was.
    pub layout_spec: Option<&'a str>,
    /// The chosen model.
    pub model: ModelKind,
    /// All arguments.
    pub args: &'a BenchArgs,
    /// What this machine is: every sentence about it comes from here.
    pub machine: &'a Machine,
    /// The kernel era the allocator models.
    pub era: buddy::Era,
}

impl Ctx<'_> {
    /// Allocator options for this run: its era, the rest as the kernel's.
    pub fn options(&self) -> buddy::Options {
        buddy::Options {
            era: self.era,
            ..buddy::Options::default()
        }
    }
}

impl Ctx<'_> {
    /// Runs `visitor` with the chosen model on the layout; a model that
    /// cannot be built is an error naming it.
    pub fn visit<V: ModelVisitor>(&self, visitor: V) -> Result<V::Output, CliError> {
        self.named(with_model_options(
            self.model,
            &self.layout,
            vmemmap::VmemmapOptions::default(),
            visitor,
        ))
    }

    /// An experiment's result, its error naming the model.
    pub fn named<T>(&self, result: Result<T, buddy::AllocError>) -> Result<T, CliError> {
        result.map_err(|e| CliError(format!("{}: {e}", self.model)))
    }
}

/// What an experiment returns: JSON rows and the text table.
pub struct Outcome {
    /// Rows for the JSON report.
    pub rows: Vec<Row>,
    /// The printed table with the seed's figures.
    pub table: String,
    /// The layout(s) used, for the report.
    pub layout: String,
}

/// Runs one experiment.
pub fn run(args: &BenchArgs, layout_spec: Option<&str>, plan: Plan) -> Result<(), CliError> {
    let name = args.experiment;
    let model = args.model.unwrap_or(name.default_model());
    let out = args.json.as_deref().map(JsonOut::create).transpose()?;
    let spec = layout_spec.unwrap_or(name.default_layout());
    let layout = load_layout(if spec == "host" { None } else { Some(spec) })?;
    let machine = Machine::describe();
    let models = match (name, args.model) {
        (Experiment::HoleDensity, _) | (Experiment::PfnValid | Experiment::Breakdown, None) => {
            "models: each".to_string()
        }
        _ => format!("model {model}"),
    };
    println!(
        "pfnlab bench {name} | {models} | era {} | layout {}",
        args.era.unwrap_or(name.default_era()),
        layout.source()
    );
    println!("machine: {}\n", machine.summary());
    let era = args.era.unwrap_or(name.default_era());
    let ctx = Ctx {
        plan,
        layout,
        layout_spec,
        model,
        args,
        machine: &machine,
        era,
    };
    let outcome = match name {
        Experiment::Flags => flags::run(&ctx),
        Experiment::Lock => lock::run(&ctx),
        Experiment::PfnValid => pfn_valid::run(&ctx),
        Experiment::Bulk => bulk::run(&ctx),
        Experiment::Cpuset => cpuset::run(&ctx),
        Experiment::Peers => peers::run(&ctx),
        Experiment::HoleDensity => hole_density::run(&ctx),
        Experiment::Breakdown => breakdown::run(&ctx),
    }?;
    check_rows(&outcome.rows)?;
    print!("{}", outcome.table);
    if let Some(out) = out {
        out.write(&Report {
            experiment: name.name().into(),
            machine,
            layout: outcome.layout,
            results: outcome.rows,
        })?;
    }
    Ok(())
}

/// Every number must be finite and positive before it is reported.
pub fn check_rows(rows: &[Row]) -> Result<(), CliError> {
    for r in rows {
        let m = &r.measurement;
        let all = m.ns_per_op.trials.iter().chain(&m.cycles_per_op.trials);
        if all.into_iter().any(|v| !v.is_finite() || *v <= 0.0) {
            return Err(CliError(format!(
                "{} / {}: a measurement is not a positive number",
                r.variant, r.model
            )));
        }
    }
    Ok(())
}

/// `ns (cycles)` for a table cell.
pub(crate) fn cell(m: &crate::timing::Measurement) -> String {
    format!(
        "{} ({:.0})",
        crate::report::fmt_ns(m.ns_per_op.median),
        m.cycles_per_op.median
    )
}
