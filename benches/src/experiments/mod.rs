//! `pfnlab bench EXPERIMENT`: the five seed experiments, the peer
//! comparison and the sweeps, all written on one shape.
//!
//! # The shape
//!
//! An experiment is a unit type implementing [`Experiment`]:
//! - [`Experiment::Params`]: its own typed parameters (the binary builds
//!   them from that experiment's options);
//! - [`Experiment::measure`]: runs on the [`Ctx`] the runner prepared (the
//!   layout, model, era, trials, machine) and returns its `Results`, a
//!   plain struct of typed measurements;
//! - [`Experiment::rows`]: the results as typed rows (`Serialize`), the
//!   `results` array of the JSON file;
//! - [`Experiment::render`]: the printed table, seed figures beside ours.
//! - [`Experiment::comparisons`]: every ratio the table and its reading
//!   state, each a [`Comparison`] with its interval and verdict (none by
//!   default).
//!
//! The runner, [`Prepared`], does everything else once for all: it loads
//! the layout (the experiment's default unless `--layout` names one),
//! picks the model and era, checks the `--json` path before measuring,
//! checks every number is positive, writes the report, and hands the text
//! back to the caller; the library never prints. While one of the
//! experiment's comparisons is wider than [`Extension`] accepts, it
//! measures again with more trials (up to the plan's cap), and records
//! why in the report's `trials`.
//!
//! # Adding an experiment
//! 1. Write `experiments/NAME.rs` (a folder `NAME/{mod, ...}` when it has
//!    parts): a unit struct implementing [`Experiment`], its `Params`,
//!    `Results`, row struct and variant enums. Measured loops go in
//!    [`crate::workloads`]; timing through [`crate::timing`].
//! 2. Add a variant to [`ExperimentId`] with its name, seed era, model and
//!    layout.
//! 3. Add its subcommand to the binary's `bench` command: its options,
//!    turned into `Params`, and one call to the runner.

pub mod breakdown;
pub mod bulk;
pub mod compare;
pub mod cpuset;
pub mod flags;
pub mod frag;
pub mod hole_density;
pub mod hvo;
pub mod kernel_fixup;
pub mod lifecycle;
pub mod lock;
pub mod memdesc;
pub mod peers;
pub mod pfn_valid;
pub mod scale;
pub mod walk;

use std::marker::PhantomData;
use std::path::PathBuf;

use serde::Serialize;
use sparsemem::{Layout, LayoutError};

use crate::error::RunError;
use crate::layout_spec::{LayoutSpec, LoadError};
use crate::machine::Machine;
use crate::models::{ModelKind, ModelVisitor, with_model_options};
use crate::report::{JsonOut, Measured, Report, check_positive};
use crate::snapshot::StartState;
use crate::spread::{Comparison, Extension, TrialRecord};
use crate::timing::Plan;

/// An experiment: typed parameters in, typed results and rows out.
pub trait Experiment {
    /// Which experiment this is (its name and defaults).
    const ID: ExperimentId;
    /// The experiment's own parameters.
    type Params;
    /// What [`Experiment::measure`] returns.
    type Results;
    /// Whether its allocators can start from a snapshot's free lists
    /// (`--start-state`); an experiment whose workload needs the boot
    /// state (whole free max-order blocks, a known pfn range) refuses it.
    const TAKES_START_STATE: bool = false;
    /// One row of the JSON report.
    type Row: Serialize + Measured;

    /// Measures, on the layout, model and era the runner chose.
    fn measure(ctx: &Ctx, params: &Self::Params) -> Result<Self::Results, RunError>;

    /// The results as the JSON report's rows.
    fn rows(ctx: &Ctx, results: &Self::Results) -> Vec<Self::Row>;

    /// The printed table, with the seed's figures beside ours.
    fn render(ctx: &Ctx, results: &Self::Results) -> String;

    /// Every ratio the table and its reading state, with its interval:
    /// the report's `comparisons`, and what decides whether the run needs
    /// more trials.
    fn comparisons(_ctx: &Ctx, _results: &Self::Results) -> Vec<Comparison> {
        Vec::new()
    }

    /// The lines that open the run: what runs, on what machine.
    fn header(ctx: &Ctx) -> String {
        let models = if Self::ID.runs_each_model(ctx.model_chosen) {
            "models: each".to_string()
        } else {
            format!("model {}", ctx.model)
        };
        format!(
            "pfnlab bench {} | {models} | era {} | layout {}\nmachine: {}\n\n",
            Self::ID,
            ctx.era,
            ctx.layout.source(),
            ctx.machine.summary()
        )
    }

    /// The layout(s) the report names; the run's own by default.
    fn layout_label(ctx: &Ctx, _results: &Self::Results) -> String {
        ctx.layout.source().into()
    }
}

/// An experiment of `pfnlab bench`: its name and the seed's defaults.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum ExperimentId {
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
    /// pfn walkers over a span, and the three published walker changes.
    Walk,
    /// HugeTLB vmemmap optimisation on a memfd-backed vmemmap.
    Hvo,
    /// `struct page` at 64, 32, 16 and 8 bytes on every model.
    Memdesc,
    /// When the memmap is written and where it lives: deferred init and
    /// memmap_on_memory.
    MemmapLifecycle,
    /// Huge frames kept free under churn: the buddy by era and LLFree.
    Frag,
    /// The allocators on 1 to every CPU: LLFree's three scalability
    /// workloads.
    Scale,
    /// The default comparison (`pfnlab` with no command): every model on
    /// one layout.
    Compare,
}

impl ExperimentId {
    /// Every experiment of `pfnlab bench`, in the order its help lists
    /// them (the default comparison is not one).
    pub const ALL: [ExperimentId; 14] = [
        ExperimentId::Flags,
        ExperimentId::Lock,
        ExperimentId::PfnValid,
        ExperimentId::Bulk,
        ExperimentId::Cpuset,
        ExperimentId::Peers,
        ExperimentId::HoleDensity,
        ExperimentId::Breakdown,
        ExperimentId::Walk,
        ExperimentId::Hvo,
        ExperimentId::Memdesc,
        ExperimentId::MemmapLifecycle,
        ExperimentId::Frag,
        ExperimentId::Scale,
    ];

    /// The name `pfnlab bench` takes and reports use.
    pub fn name(self) -> &'static str {
        match self {
            ExperimentId::Flags => "flags",
            ExperimentId::Lock => "lock",
            ExperimentId::PfnValid => "pfn-valid",
            ExperimentId::Bulk => "bulk",
            ExperimentId::Cpuset => "cpuset",
            ExperimentId::Peers => "peers",
            ExperimentId::HoleDensity => "hole-density",
            ExperimentId::Breakdown => "breakdown",
            ExperimentId::Walk => "walk",
            ExperimentId::Hvo => "hvo",
            ExperimentId::Memdesc => "memdesc",
            ExperimentId::MemmapLifecycle => "memmap-lifecycle",
            ExperimentId::Frag => "frag",
            ExperimentId::Scale => "scale",
            ExperimentId::Compare => "compare",
        }
    }

    /// Parses a name, or says which names exist.
    pub fn parse(name: &str) -> Result<ExperimentId, UnknownExperiment> {
        ExperimentId::ALL
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
            ExperimentId::Flags => Era::V2_6_9,
            ExperimentId::Lock
            | ExperimentId::PfnValid
            | ExperimentId::Cpuset
            | ExperimentId::Peers => Era::V2_6_23,
            ExperimentId::Bulk | ExperimentId::HoleDensity => Era::V5_13,
            ExperimentId::Breakdown
            | ExperimentId::Walk
            | ExperimentId::Hvo
            | ExperimentId::Memdesc
            | ExperimentId::MemmapLifecycle
            | ExperimentId::Frag
            | ExperimentId::Scale
            | ExperimentId::Compare => Era::V6_18,
        }
    }

    /// The model the experiment's seed measured.
    pub fn default_model(self) -> ModelKind {
        match self {
            ExperimentId::PfnValid => ModelKind::VmemmapProbe,
            ExperimentId::Flags | ExperimentId::Lock | ExperimentId::Cpuset => {
                ModelKind::SparseExtreme
            }
            ExperimentId::Frag => ModelKind::Flat,
            ExperimentId::Bulk
            | ExperimentId::Peers
            | ExperimentId::HoleDensity
            | ExperimentId::Breakdown
            | ExperimentId::Walk
            | ExperimentId::Hvo
            | ExperimentId::Memdesc
            | ExperimentId::MemmapLifecycle
            | ExperimentId::Scale
            | ExperimentId::Compare => ModelKind::VmemmapTable,
        }
    }

    /// The layout the experiment runs on unless `--layout` says otherwise.
    pub fn default_layout(self) -> LayoutSpec {
        match self {
            ExperimentId::Cpuset => LayoutSpec::Preset("numa-fake-64".into()),
            ExperimentId::Hvo => LayoutSpec::Preset("zone-device".into()),
            ExperimentId::Flags
            | ExperimentId::Lock
            | ExperimentId::Bulk
            | ExperimentId::Peers
            | ExperimentId::HoleDensity
            | ExperimentId::Breakdown
            | ExperimentId::Memdesc
            | ExperimentId::MemmapLifecycle
            | ExperimentId::Scale => LayoutSpec::Preset("x86-pci-hole".into()),
            ExperimentId::PfnValid | ExperimentId::Compare => LayoutSpec::Host,
            ExperimentId::Walk => LayoutSpec::Preset("sparse-52bit".into()),
            ExperimentId::Frag => LayoutSpec::File(
                [env!("CARGO_MANIFEST_DIR"), "..", frag::DEFAULT_LAYOUT]
                    .iter()
                    .collect(),
            ),
        }
    }

    /// Whether the experiment runs every model: always (the hole-density
    /// sweep), or unless `--model` picks one (`pfn-valid`, `breakdown`).
    pub fn runs_each_model(self, model_chosen: bool) -> bool {
        match self {
            ExperimentId::HoleDensity | ExperimentId::Compare => true,
            ExperimentId::PfnValid
            | ExperimentId::Breakdown
            | ExperimentId::Walk
            | ExperimentId::Memdesc => !model_chosen,
            _ => false,
        }
    }
}

impl std::fmt::Display for ExperimentId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// An experiment name `pfnlab bench` does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownExperiment(pub String);

impl std::fmt::Display for UnknownExperiment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let known: Vec<&str> = ExperimentId::ALL.iter().map(|e| e.name()).collect();
        write!(
            f,
            "unknown experiment `{}` (known: {})",
            self.0,
            known.join(", ")
        )
    }
}

impl std::error::Error for UnknownExperiment {}

/// What every experiment's run is given, whatever the experiment.
#[derive(Clone, Debug)]
pub struct Setup {
    /// `--layout`, if given (else the experiment's default).
    pub layout: Option<LayoutSpec>,
    /// `--model`, if given (else the experiment's default).
    pub model: Option<ModelKind>,
    /// `--era`, if given (else the seed's era).
    pub era: Option<buddy::Era>,
    /// Trials and scale.
    pub plan: Plan,
    /// `--json`: where to write the report.
    pub json: Option<PathBuf>,
    /// `--start-state snapshot:FILE` and `--seed`: every allocator the run
    /// builds starts from the snapshot's free lists (experiments that
    /// take one: [`Experiment::TAKES_START_STATE`]).
    pub start_state: Option<(PathBuf, u64)>,
}

/// Progress of a long run, for the caller to show (or not).
pub trait Progress {
    /// The step now running (`"sparse: pfn_valid"`).
    fn stage(&self, what: String);
    /// One model done.
    fn advance(&self);
}

impl Progress for () {
    fn stage(&self, _: String) {}
    fn advance(&self) {}
}

/// What an experiment's `measure` gets.
pub struct Ctx<'a> {
    /// Trials and scale.
    pub plan: Plan,
    /// The layout (for experiments that use one layout).
    pub layout: Layout,
    /// `--layout` as given, if it was.
    pub layout_spec: Option<LayoutSpec>,
    /// The chosen model (`--model`, or the experiment's default).
    pub model: ModelKind,
    /// Whether `--model` chose it.
    pub model_chosen: bool,
    /// What this machine is: every sentence about it comes from here.
    pub machine: Machine,
    /// The kernel era the allocator models.
    pub era: buddy::Era,
    /// Where long runs report their steps.
    pub progress: &'a dyn Progress,
    /// The start state every allocator of the run is given, if any.
    pub start_state: Option<StartState>,
}

impl Ctx<'_> {
    /// Allocator options for this run: its era, deferred struct page init
    /// when the start state's machine was still in it, the rest as the
    /// kernel's.
    pub fn options(&self) -> buddy::Options {
        buddy::Options {
            era: self.era,
            deferred_init: self
                .start_state
                .as_ref()
                .is_some_and(|s| s.deferred_zone().is_some()),
            ..buddy::Options::default()
        }
    }

    /// The models to run: the chosen one, or every model this build has.
    pub fn models(&self) -> Vec<ModelKind> {
        if self.model_chosen {
            vec![self.model]
        } else {
            ModelKind::ALL.to_vec()
        }
    }

    /// Runs `visitor` with the chosen model on the layout; a model that
    /// cannot be built is an error naming it.
    pub fn visit<V: ModelVisitor>(&self, visitor: V) -> Result<V::Output, RunError> {
        self.named(with_model_options(
            self.model,
            &self.layout,
            vmemmap::VmemmapOptions::default(),
            visitor,
        ))
    }

    /// An experiment's result, its error naming the model.
    pub fn named<T>(&self, result: Result<T, buddy::AllocError>) -> Result<T, RunError> {
        result.map_err(|source| RunError::Model {
            model: self.model,
            source,
        })
    }
}

/// An experiment ready to run: layout loaded, model and era chosen, the
/// `--json` path checked.
pub struct Prepared<'a, E> {
    ctx: Ctx<'a>,
    out: Option<JsonOut>,
    fallback: Option<LayoutError>,
    experiment: PhantomData<E>,
}

impl<'a, E: Experiment> Prepared<'a, E> {
    /// Prepares `E` as `setup` asks, reporting progress to `progress`.
    pub fn new(setup: &Setup, progress: &'a dyn Progress) -> Result<Self, RunError> {
        let id = E::ID;
        if setup.start_state.is_some() && !E::TAKES_START_STATE {
            return Err(RunError::StartStateRefused {
                experiment: id.name(),
            });
        }
        let out = setup.json.as_deref().map(JsonOut::create).transpose()?;
        let start_state = setup
            .start_state
            .as_ref()
            .map(|(path, seed)| StartState::load(path, *seed))
            .transpose()
            .map_err(|e| RunError::Layout(LoadError::Snapshot(e)))?;
        // A start state's own layout unless another was asked for.
        let spec = match (&setup.layout, &setup.start_state) {
            (Some(spec), _) => spec.clone(),
            (None, Some((path, _))) => LayoutSpec::Snapshot(path.clone()),
            (None, None) => id.default_layout(),
        };
        let loaded = spec.load()?;
        let era = setup.era.unwrap_or(id.default_era());
        if let Some(start) = &start_state {
            start
                .options(buddy::Options::for_era(era))
                .map_err(|e| RunError::Layout(LoadError::Snapshot(e)))?;
        }
        let ctx = Ctx {
            plan: setup.plan,
            layout: loaded.layout,
            layout_spec: setup.layout.clone(),
            model: setup.model.unwrap_or(id.default_model()),
            model_chosen: setup.model.is_some(),
            machine: Machine::describe(),
            era,
            progress,
            start_state,
        };
        Ok(Prepared {
            ctx,
            out,
            fallback: loaded.fallback,
            experiment: PhantomData,
        })
    }

    /// Why `host` fell back to a preset, if it did.
    pub fn fallback(&self) -> Option<&LayoutError> {
        self.fallback.as_ref()
    }

    /// The lines that open the run: what runs, on what machine.
    pub fn header(&self) -> String {
        let header = E::header(&self.ctx);
        match &self.ctx.start_state {
            Some(s) => format!(
                "{}start state: {} (every allocator starts from its free lists)\n\n",
                header.trim_end_matches('\n').to_owned() + "\n",
                s.label()
            ),
            None => header,
        }
    }

    /// Measures (again with more trials while a comparison is too wide),
    /// checks every number, writes the report if asked, and returns the
    /// table to print.
    pub fn run(mut self, params: &E::Params) -> Result<String, RunError> {
        let rule = Extension::for_plan(&self.ctx.plan);
        let mut record = TrialRecord::new(&self.ctx.plan);
        let (results, comparisons) = loop {
            let started = std::time::Instant::now();
            let results = E::measure(&self.ctx, params)?;
            let took = started.elapsed();
            let comparisons = E::comparisons(&self.ctx, &results);
            let trials = self.ctx.plan.trials;
            let Some(widest) = rule.widest(&comparisons, trials) else {
                break (results, comparisons);
            };
            let more = rule.next(trials);
            if !rule.affordable(took, trials, more) {
                let seconds = took.as_secs_f64() * more as f64 / trials as f64;
                record.refuse(more, seconds, widest);
                break (results, comparisons);
            }
            record.extend(trials, more, widest);
            self.ctx.plan.trials = more;
        };
        let ctx = &self.ctx;
        let rows = E::rows(ctx, &results);
        check_positive(&rows)?;
        let table = E::render(ctx, &results) + &record.text();
        // The host kernel's fixup is a reference beside the lab's rows:
        // alone, it answers nothing the experiment asked.
        if rows.iter().all(Measured::host_kernel_only) {
            return Err(RunError::NothingMeasured {
                experiment: E::ID.name(),
                why: first_refusal(&table),
            });
        }
        if let Some(out) = self.out {
            out.write(&Report {
                experiment: E::ID.name().into(),
                machine: ctx.machine.clone(),
                layout: E::layout_label(ctx, &results),
                trials: Some(record),
                comparisons,
                start_state: ctx.start_state.as_ref().map(|s| s.record().clone()),
                results: rows,
            })?;
        }
        Ok(table)
    }
}

/// The reason the first refused row of a rendered table gives (its text
/// after `not built: `), for a run that measured nothing.
fn first_refusal(table: &str) -> String {
    table
        .lines()
        .find_map(|l| {
            l.split_once("not built: ")
                .map(|(_, why)| why.trim().to_owned())
        })
        .unwrap_or_else(|| "no row was produced".into())
}

/// `ns (cycles)` for a table cell.
pub(crate) fn cell(m: &crate::timing::Measurement) -> String {
    format!(
        "{} ({:.0})",
        crate::units::fmt_ns(m.ns_per_op.median),
        m.cycles_per_op.median
    )
}
