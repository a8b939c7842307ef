//! `pfnlab bench EXPERIMENT`: its options, turned into the experiment's
//! typed parameters and handed to the library's one runner.

use std::path::PathBuf;

use pfnlab::CliError;
use pfnlab::experiments::{
    Experiment, ExperimentId, Knobs, Prepared, Setup, breakdown, bulk, cpuset, flags, hole_density,
    lock, peers, pfn_valid,
};
use pfnlab::layout_spec::LayoutSpec;
use pfnlab::models::ModelKind;
use pfnlab::timing::Plan;

/// `pfnlab bench`'s names for the experiments.
#[derive(Clone, Copy, Debug)]
pub struct Name(pub ExperimentId);

impl clap::ValueEnum for Name {
    fn value_variants<'a>() -> &'a [Self] {
        const ALL: [Name; 8] = [
            Name(ExperimentId::Flags),
            Name(ExperimentId::Lock),
            Name(ExperimentId::PfnValid),
            Name(ExperimentId::Bulk),
            Name(ExperimentId::Cpuset),
            Name(ExperimentId::Peers),
            Name(ExperimentId::HoleDensity),
            Name(ExperimentId::Breakdown),
        ];
        &ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.0.name()))
    }
}

/// Arguments of `pfnlab bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// The experiment.
    #[arg(value_parser = |s: &str| ExperimentId::parse(s).map(Name))]
    pub experiment: Name,
    /// Memory model (default: the experiment's own choice).
    #[arg(long, value_parser = ModelKind::parse)]
    pub model: Option<ModelKind>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Threads (lock: one per CPU, pinned, default the machine's CPUs;
    /// flags: the multi-threaded run).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Iterations (flags: allocate/touch/free rounds, default 1000; lock:
    /// jobs per thread, default 400).
    #[arg(long)]
    pub iterations: Option<u64>,
    /// Per-CPU batch for the lock experiment (default: the era's formula,
    /// 31 in 2.6.23).
    #[arg(long)]
    pub batch: Option<u32>,
    /// Nodes in the cpuset experiment's cpuset (default 43 of 64).
    #[arg(long)]
    pub allowed: Option<u16>,
    /// flags: the recording of the seed program to replay (default
    /// `benches/data/seed-flags.trace.zst` in the source tree).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Kernel era whose mechanisms the allocator models (default: the
    /// experiment's seed's era).
    #[arg(long, value_parser = buddy::Era::parse)]
    pub era: Option<buddy::Era>,
}

/// Runs the experiment `args` names.
pub fn run(args: BenchArgs, layout: Option<LayoutSpec>, plan: Plan) -> Result<(), CliError> {
    let setup = Setup {
        layout,
        model: args.model,
        era: args.era,
        plan,
        json: args.json.clone(),
    };
    let knobs = Knobs {
        threads: args.threads,
        iterations: args.iterations,
        batch: args.batch,
        allowed: args.allowed,
        trace: args.trace,
    };
    match args.experiment.0 {
        ExperimentId::Flags => run_one::<flags::Flags>(&setup, &knobs),
        ExperimentId::Lock => run_one::<lock::Lock>(&setup, &knobs),
        ExperimentId::PfnValid => run_one::<pfn_valid::PfnValid>(&setup, &knobs),
        ExperimentId::Bulk => run_one::<bulk::Bulk>(&setup, &()),
        ExperimentId::Cpuset => run_one::<cpuset::Cpuset>(&setup, &knobs),
        ExperimentId::Peers => run_one::<peers::Peers>(&setup, &knobs),
        ExperimentId::HoleDensity => run_one::<hole_density::HoleDensity>(&setup, &knobs),
        ExperimentId::Breakdown => run_one::<breakdown::Breakdown>(&setup, &knobs),
    }
}

/// Prints the header, runs `E` and prints its table.
fn run_one<E: Experiment>(setup: &Setup, params: &E::Params) -> Result<(), CliError> {
    let prepared = Prepared::<E>::new(setup, &())?;
    if let Some(why) = prepared.fallback() {
        super::fallback_notice(why);
    }
    print!("{}", prepared.header());
    print!("{}", prepared.run(params)?);
    Ok(())
}
