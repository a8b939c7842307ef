//! `pfnlab bench EXPERIMENT`: the five seed experiments and the peer
//! comparison. Each prints a table with the seed's published figures beside
//! ours, and writes the common JSON shape with `--json`.

pub mod bulk;
pub mod cpuset;
mod flags;
mod lock;
mod peers;
mod pfn_valid;

use std::path::PathBuf;

use sparsemem::Layout;

use crate::CliError;
use crate::commands::load_layout;
use crate::machine::Machine;
use crate::models::{ModelKind, ModelVisitor, with_model_options};
use crate::report::{JsonOut, Report, Row};
use crate::timing::Plan;

/// The experiments, as `pfnlab bench` names them.
pub const EXPERIMENTS: [&str; 6] = ["flags", "lock", "pfn-valid", "bulk", "cpuset", "peers"];

/// Arguments of `pfnlab bench`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// flags | lock | pfn-valid | bulk | cpuset | peers
    pub experiment: String,
    /// Memory model (default: the experiment's own choice).
    #[arg(long)]
    pub model: Option<String>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Threads (lock: total threads; flags: the multi-threaded run).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Iterations (flags: allocate/touch/free rounds, default 1000).
    #[arg(long)]
    pub iterations: Option<u64>,
    /// Per-CPU batch for the lock experiment's batch threads (default 256).
    #[arg(long)]
    pub batch: Option<u32>,
    /// Nodes in the cpuset experiment's cpuset (default 43 of 64).
    #[arg(long)]
    pub allowed: Option<u16>,
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
}

impl Ctx<'_> {
    /// Runs `visitor` with the chosen model on the layout; a model that
    /// cannot be built is an error naming it.
    pub fn visit<V: ModelVisitor>(&self, visitor: V) -> Result<V::Output, CliError> {
        with_model_options(
            self.model,
            &self.layout,
            vmemmap::VmemmapOptions::default(),
            visitor,
        )
        .map_err(|e| CliError(format!("{}: {e}", self.model)))
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

fn default_model(experiment: &str) -> ModelKind {
    match experiment {
        "pfn-valid" => ModelKind::VmemmapProbe,
        "flags" | "lock" | "cpuset" => ModelKind::SparseExtreme,
        _ => ModelKind::VmemmapTable,
    }
}

fn default_layout(experiment: &str) -> &'static str {
    match experiment {
        "cpuset" => "preset:numa-fake-64",
        "flags" | "lock" | "bulk" | "peers" => "preset:x86-pci-hole",
        _ => "host",
    }
}

/// Runs one experiment.
pub fn run(args: &BenchArgs, layout_spec: Option<&str>, plan: Plan) -> Result<(), CliError> {
    let name = args.experiment.as_str();
    if !EXPERIMENTS.contains(&name) {
        return Err(CliError(format!(
            "unknown experiment `{name}` (known: {})",
            EXPERIMENTS.join(", ")
        )));
    }
    let model = match &args.model {
        Some(m) => ModelKind::parse(m)?,
        None => default_model(name),
    };
    let out = args.json.as_deref().map(JsonOut::create).transpose()?;
    let spec = layout_spec.unwrap_or(default_layout(name));
    let layout = load_layout(if spec == "host" { None } else { Some(spec) })?;
    let machine = Machine::describe();
    println!(
        "pfnlab bench {name} | model {model} | layout {}",
        layout.source()
    );
    println!("machine: {}\n", machine.summary());
    let ctx = Ctx {
        plan,
        layout,
        layout_spec,
        model,
        args,
    };
    let outcome = match name {
        "flags" => flags::run(&ctx),
        "lock" => lock::run(&ctx),
        "pfn-valid" => pfn_valid::run(&ctx),
        "bulk" => bulk::run(&ctx),
        "cpuset" => cpuset::run(&ctx),
        _ => peers::run(&ctx),
    }?;
    check_rows(&outcome.rows)?;
    print!("{}", outcome.table);
    if let Some(out) = out {
        out.write(&Report {
            experiment: name.into(),
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
