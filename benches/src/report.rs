//! The one JSON shape every command that writes `--json` uses, and writing
//! it without ever leaving a half-written file.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::{JsonError, JsonErrorKind, RunError};
use crate::machine::Machine;
use crate::models::ModelKind;
use crate::snapshot::StartStateRecord;
use crate::spread::{Comparison, Interval, TrialRecord};
use crate::timing::Measurement;

/// One measured result as the JSON report shows it: what was measured
/// (`variant`, an experiment's own enum), on what (`model`), with which
/// parameters (`params`, an experiment's struct), the measurement, and the
/// experiment's extra fields (`extra`, a struct flattened into the row).
#[derive(Clone, Debug, Serialize)]
pub struct Row<V, P = NoParams, X = NoExtra> {
    /// What the experiment compares.
    pub variant: V,
    /// What ran it: a memory model, or the host kernel.
    pub model: Subject,
    /// The experiment's parameters for this row.
    pub params: P,
    /// Per-operation time.
    #[serde(flatten)]
    pub measurement: Measurement,
    /// The median ns per operation with its 95 % interval, for error bars.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ns_per_op_interval: Option<Interval>,
    /// Experiment-specific fields (seed figures, shares, counts).
    #[serde(flatten)]
    pub extra: X,
}

impl<V, P, X> Row<V, P, X> {
    /// A row.
    pub fn new(variant: V, model: impl Into<Subject>, params: P, m: Measurement, extra: X) -> Self {
        Row {
            variant,
            model: model.into(),
            params,
            ns_per_op_interval: Interval::of_median(&m.ns_per_op.trials).ok(),
            measurement: m,
            extra,
        }
    }
}

impl<V: fmt::Debug, P, X> Measured for Row<V, P, X> {
    fn measurement(&self) -> &Measurement {
        &self.measurement
    }

    fn label(&self) -> String {
        format!("{:?} / {}", self.variant, self.model)
    }

    fn host_kernel_only(&self) -> bool {
        self.model == Subject::Kernel
    }
}

/// A row without parameters (`"params": {}`).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct NoParams {}

/// A row without extra fields.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct NoExtra {}

/// What a row was measured on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subject {
    /// A memory model of the lab.
    Model(ModelKind),
    /// The host's own kernel.
    Kernel,
    /// No memory model: a peer allocator that keeps its own frames.
    NoModel,
}

impl From<ModelKind> for Subject {
    fn from(kind: ModelKind) -> Self {
        Subject::Model(kind)
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::Model(kind) => f.write_str(kind.name()),
            Subject::Kernel => f.write_str("kernel"),
            Subject::NoModel => f.write_str("none"),
        }
    }
}

/// Reported as its name (`vmemmap`, `kernel`, `none`).
impl Serialize for Subject {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One measured result with untyped parameters and extras (the bridge's
/// and the replay's rows).
#[derive(Clone, Debug, Serialize)]
pub struct JsonRow {
    /// What the experiment compares (`array`, `per-page`, `pfnlab`, …).
    pub variant: String,
    /// The memory model.
    pub model: String,
    /// The experiment's parameters for this row.
    pub params: Value,
    /// Per-operation time.
    #[serde(flatten)]
    pub measurement: Measurement,
    /// Experiment-specific fields (percentiles, shares, counts).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl JsonRow {
    /// A row with no extra fields.
    pub fn new(
        variant: impl Into<String>,
        model: impl Into<String>,
        params: Value,
        measurement: Measurement,
    ) -> JsonRow {
        JsonRow {
            variant: variant.into(),
            model: model.into(),
            params,
            measurement,
            extra: Map::new(),
        }
    }

    /// Adds an extra field.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> JsonRow {
        self.extra.insert(key.to_owned(), value.into());
        self
    }
}

/// A row that carries one measurement, for the runner's checks.
pub trait Measured {
    /// The row's measurement.
    fn measurement(&self) -> &Measurement;
    /// What the row is, for an error message (`list / vmemmap`).
    fn label(&self) -> String;
    /// Whether the row times the host kernel alone (its fault fixup), a
    /// reference beside the lab's rows rather than one of them.
    fn host_kernel_only(&self) -> bool {
        false
    }
}

impl Measured for JsonRow {
    fn measurement(&self) -> &Measurement {
        &self.measurement
    }

    fn label(&self) -> String {
        format!("{} / {}", self.variant, self.model)
    }

    fn host_kernel_only(&self) -> bool {
        self.model == "kernel"
    }
}

/// Every number must be finite and positive before it is reported.
pub fn check_positive<R: Measured>(rows: &[R]) -> Result<(), RunError> {
    for r in rows {
        let m = r.measurement();
        let all = m.ns_per_op.trials.iter().chain(&m.cycles_per_op.trials);
        if all.into_iter().any(|v| !v.is_finite() || *v <= 0.0) {
            return Err(RunError::NotPositive { row: r.label() });
        }
    }
    Ok(())
}

/// A whole report: `{"experiment", "machine", "layout", "trials",
/// "comparisons", "results"}`, its rows an experiment's own typed [`Row`]s
/// or the untyped [`JsonRow`].
#[derive(Clone, Debug, Serialize)]
pub struct Report<R = JsonRow> {
    /// The experiment name (`compare`, `bulk`, …).
    pub experiment: String,
    /// Where it ran.
    pub machine: Machine,
    /// The layout spec it ran on.
    pub layout: String,
    /// How many trials ran, and why (`None`: a command without trials).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trials: Option<TrialRecord>,
    /// Every ratio the run states, with its interval and verdict.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub comparisons: Vec<Comparison>,
    /// The snapshot whose free lists every allocator of the run started
    /// from, and the seed that placed them (`None`: a fresh boot).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_state: Option<StartStateRecord>,
    /// The results.
    pub results: Vec<R>,
}

/// A `--json` destination, checked before any measuring starts and written
/// atomically (temporary file, then rename) at the end.
pub struct JsonOut {
    path: PathBuf,
    tmp: PathBuf,
}

impl JsonOut {
    /// Checks that `path` can be written by creating its temporary sibling.
    pub fn create(path: &Path) -> Result<JsonOut, JsonError> {
        let error = |kind| JsonError {
            path: path.to_owned(),
            kind,
        };
        let name = path
            .file_name()
            .ok_or_else(|| error(JsonErrorKind::NotAFile))?;
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let tmp = dir.join(format!(
            ".{}.tmp-{}",
            name.to_string_lossy(),
            std::process::id()
        ));
        std::fs::File::create(&tmp).map_err(|e| error(JsonErrorKind::Io(e)))?;
        Ok(JsonOut {
            path: path.to_owned(),
            tmp,
        })
    }

    /// Writes the report and moves it into place.
    pub fn write<R: Serialize>(self, report: &Report<R>) -> Result<(), JsonError> {
        let error = |kind| JsonError {
            path: self.path.clone(),
            kind,
        };
        let io = |e| error(JsonErrorKind::Io(e));
        let mut f = std::fs::File::create(&self.tmp).map_err(io)?;
        serde_json::to_writer_pretty(&mut f, report)
            .map_err(|e| error(JsonErrorKind::Encode(e)))?;
        f.write_all(b"\n").map_err(io)?;
        f.sync_all().map_err(io)?;
        std::fs::rename(&self.tmp, &self.path).map_err(io)?;
        Ok(())
    }
}

impl Drop for JsonOut {
    fn drop(&mut self) {
        // After a successful rename the temporary is gone; otherwise remove
        // it so nothing half-written is left behind.
        let _ = std::fs::remove_file(&self.tmp);
    }
}
