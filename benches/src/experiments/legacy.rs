//! The bridge for experiments not yet written on the shape: they take the
//! old bag of options ([`Knobs`]) and return untyped rows with their table
//! ([`Outcome`]); [`legacy_experiment!`] puts them behind [`Experiment`] so
//! the one runner runs them too (issue 24 ports each to typed rows).
//!
//! [`Experiment`]: super::Experiment

use std::path::PathBuf;

use crate::report::Row;

/// The options `pfnlab bench` took for every experiment, each meaningful
/// to some.
#[derive(Clone, Debug, Default)]
pub struct Knobs {
    /// Threads (lock: one per CPU, pinned; flags: the multi-threaded run;
    /// cpuset: the job's tasks).
    pub threads: Option<usize>,
    /// Iterations (flags: allocate/touch/free rounds; lock: jobs per thread).
    pub iterations: Option<u64>,
    /// Per-CPU batch for the lock experiment.
    pub batch: Option<u32>,
    /// Nodes in the cpuset experiment's cpuset.
    pub allowed: Option<u16>,
    /// flags: the recording of the seed program to replay.
    pub trace: Option<PathBuf>,
}

/// What a bridged experiment returns: JSON rows and the text table.
pub struct Outcome {
    /// Rows for the JSON report.
    pub rows: Vec<Row>,
    /// The printed table with the seed's figures.
    pub table: String,
    /// The layout(s) used, for the report.
    pub layout: String,
}

/// Declares the unit type `$name` as the experiment `$id`, run by
/// `$run(ctx, knobs) -> Result<Outcome, RunError>`.
macro_rules! legacy_experiment {
    ($(#[$doc:meta])* $name:ident = $id:ident, $run:path) => {
        $(#[$doc])*
        pub struct $name;

        impl $crate::experiments::Experiment for $name {
            const ID: $crate::experiments::ExperimentId = $crate::experiments::ExperimentId::$id;
            type Params = $crate::experiments::Knobs;
            type Results = $crate::experiments::legacy::Outcome;
            type Row = $crate::report::Row;

            fn measure(
                ctx: &$crate::experiments::Ctx,
                knobs: &Self::Params,
            ) -> Result<Self::Results, $crate::error::RunError> {
                $run(ctx, knobs)
            }

            fn rows(_: &$crate::experiments::Ctx, o: &Self::Results) -> Vec<Self::Row> {
                o.rows.clone()
            }

            fn render(_: &$crate::experiments::Ctx, o: &Self::Results) -> String {
                o.table.clone()
            }

            fn layout_label(_: &$crate::experiments::Ctx, o: &Self::Results) -> String {
                o.layout.clone()
            }
        }
    };
}

pub(super) use legacy_experiment;
