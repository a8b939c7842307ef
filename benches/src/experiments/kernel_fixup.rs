//! The kernel's exception-table fixup on this host, beside the user-space
//! signal round trip that `vmemmap-probe` pays for a hole (see
//! [`vmemmap::kernel_fixup`] for the mechanism and why it is an upper
//! bound). Shown by the default comparison and by `bench pfn-valid`.

use serde::Serialize;
use vmemmap::kernel_fixup::KernelFixupProbe;

use crate::error::RunError;
use crate::report::{Measured, Row, Subject};
use crate::spread::Interval;
use crate::timing::{Measurement, Plan};
use crate::units::fmt_ns;
use crate::workloads::kernel_fixup_writes;

/// Both writes, timed.
#[derive(Clone, Debug)]
pub struct KernelFixup {
    /// `write()` of one byte from mapped memory to a pipe.
    pub mapped: Measurement,
    /// The same from a `PROT_NONE` page: fault, fixup, `EFAULT`.
    pub faulting: Measurement,
}

impl KernelFixup {
    /// Median ns of the fault and its fixup: faulting minus mapped.
    pub fn fixup_ns(&self) -> f64 {
        self.faulting.ns_per_op.median - self.mapped.ns_per_op.median
    }

    /// The fixup's ns with its interval: the paired per-trial differences
    /// of the two interleaved writes.
    pub fn fixup_interval(&self) -> Option<Interval> {
        Interval::of_difference(
            &self.faulting.ns_per_op.trials,
            &self.mapped.ns_per_op.trials,
        )
        .ok()
    }

    /// How many times the fixup `m` (a hole's cost) is, with the interval
    /// of both (`None` when the fixup's interval reaches 0).
    pub fn times(&self, m: &Measurement) -> Option<Interval> {
        let cost = Interval::of_median(&m.ns_per_op.trials).ok()?;
        Interval::quotient(&cost, &self.fixup_interval()?)
    }

    /// Median TSC cycles of the fault and its fixup.
    pub fn fixup_cycles(&self) -> f64 {
        self.faulting.cycles_per_op.median - self.mapped.cycles_per_op.median
    }

    /// One paragraph saying what was measured and how to read it.
    pub fn text(&self) -> String {
        format!(
            "Kernel exception-table fixup on this host: {} ns{} ({:.0} {}) = a write() to a pipe from a PROT_NONE page, \
             which faults in copy_from_user and returns EFAULT ({} ns), minus the same write from mapped memory ({} ns). \
             An upper bound for a faulting kernel load on a vmemmap hole: a user-address fault also looks up the VMA.\n",
            fmt_ns(self.fixup_ns()),
            self.fixup_interval().map_or(String::new(), |i| format!(
                " [{}, {}]",
                fmt_ns(i.lo),
                fmt_ns(i.hi)
            )),
            self.fixup_cycles(),
            crate::timing::COUNTER_UNIT,
            fmt_ns(self.faulting.ns_per_op.median),
            fmt_ns(self.mapped.ns_per_op.median),
        )
    }

    /// The JSON rows (model `kernel`).
    pub fn rows(&self) -> Vec<FixupRow> {
        let what = WriteParams {
            what: "write(2) of 1 byte to a pipe",
        };
        let faulting = FixupExtra {
            fixup_ns: Some(self.fixup_ns()),
            fixup_cycles: Some(self.fixup_cycles()),
        };
        vec![
            Row::new(
                FixupVariant::Mapped,
                Subject::Kernel,
                what,
                self.mapped.clone(),
                FixupExtra::default(),
            ),
            Row::new(
                FixupVariant::Faulting,
                Subject::Kernel,
                what,
                self.faulting.clone(),
                faulting,
            ),
        ]
    }
}

/// Which write a row timed.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub enum FixupVariant {
    /// From mapped memory.
    #[serde(rename = "kernel-fixup-mapped-write")]
    Mapped,
    /// From a `PROT_NONE` page.
    #[serde(rename = "kernel-fixup-faulting-write")]
    Faulting,
}

/// What the writes are.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct WriteParams {
    /// The operation timed.
    pub what: &'static str,
}

/// The fixup itself, on the faulting write's row.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct FixupExtra {
    /// Faulting minus mapped, ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fixup_ns: Option<f64>,
    /// The same in TSC cycles.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fixup_cycles: Option<f64>,
}

/// A row of the kernel's fixup.
pub type FixupRow = Row<FixupVariant, WriteParams, FixupExtra>;

/// An experiment's rows with the kernel's fixup rows after them.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum OrFixup<R> {
    /// The experiment's own row.
    Lab(R),
    /// A row of the kernel's fixup.
    Fixup(Box<FixupRow>),
}

impl<R: Measured> Measured for OrFixup<R> {
    fn measurement(&self) -> &Measurement {
        match self {
            OrFixup::Lab(r) => r.measurement(),
            OrFixup::Fixup(r) => r.measurement(),
        }
    }

    fn label(&self) -> String {
        match self {
            OrFixup::Lab(r) => r.label(),
            OrFixup::Fixup(r) => r.label(),
        }
    }

    fn host_kernel_only(&self) -> bool {
        match self {
            OrFixup::Lab(r) => r.host_kernel_only(),
            OrFixup::Fixup(_) => true,
        }
    }
}

/// `rows`, then the fixup's.
pub fn with_fixup<R>(rows: Vec<R>, fixup: &KernelFixup) -> Vec<OrFixup<R>> {
    let fixup = fixup
        .rows()
        .into_iter()
        .map(|r| OrFixup::Fixup(Box::new(r)));
    rows.into_iter().map(OrFixup::Lab).chain(fixup).collect()
}

/// Times both writes, their trials interleaved: medians over `plan.trials`
/// trials of each.
pub fn measure_kernel_fixup(plan: Plan) -> Result<KernelFixup, RunError> {
    let mut probe = KernelFixupProbe::new().map_err(RunError::Fixup)?;
    let n = plan.iters(200_000, 2_000);
    let mut failed = None;
    // The two writes' trials interleaved, so the fixup (their difference)
    // is a paired one.
    let [mapped, faulting]: [Measurement; 2] = plan
        .measure_interleaved(
            &mut [false, true],
            |&mut faulting| match kernel_fixup_writes(&mut probe, faulting, n) {
                Ok(done) => done,
                Err(e) => {
                    failed = Some(e);
                    1
                }
            },
        )
        .try_into()
        .expect("two variants, two measurements");
    if let Some(e) = failed {
        return Err(RunError::Fixup(e));
    }
    Ok(KernelFixup { mapped, faulting })
}
