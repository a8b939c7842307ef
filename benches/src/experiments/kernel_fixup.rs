//! The kernel's exception-table fixup on this host, beside the user-space
//! signal round trip that `vmemmap-probe` pays for a hole (see
//! [`vmemmap::kernel_fixup`] for the mechanism and why it is an upper
//! bound). Shown by the default comparison and by `bench pfn-valid`.

use serde_json::json;
use vmemmap::kernel_fixup::KernelFixupProbe;

use crate::error::RunError;
use crate::report::{Row, fmt_ns};
use crate::timing::{Measurement, Plan, measure};
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

    /// Median TSC cycles of the fault and its fixup.
    pub fn fixup_cycles(&self) -> f64 {
        self.faulting.cycles_per_op.median - self.mapped.cycles_per_op.median
    }

    /// One paragraph saying what was measured and how to read it.
    pub fn text(&self) -> String {
        format!(
            "Kernel exception-table fixup on this host: {} ns ({:.0} {}) = a write() to a pipe from a PROT_NONE page, \
             which faults in copy_from_user and returns EFAULT ({} ns), minus the same write from mapped memory ({} ns). \
             An upper bound for a faulting kernel load on a vmemmap hole: a user-address fault also looks up the VMA.\n",
            fmt_ns(self.fixup_ns()),
            self.fixup_cycles(),
            crate::timing::COUNTER_UNIT,
            fmt_ns(self.faulting.ns_per_op.median),
            fmt_ns(self.mapped.ns_per_op.median),
        )
    }

    /// The JSON rows (model `kernel`).
    pub fn rows(&self) -> Vec<Row> {
        let note = json!({"what": "write(2) of 1 byte to a pipe"});
        vec![
            Row::new(
                "kernel-fixup-mapped-write",
                "kernel",
                note.clone(),
                self.mapped.clone(),
            ),
            Row::new(
                "kernel-fixup-faulting-write",
                "kernel",
                note,
                self.faulting.clone(),
            )
            .with("fixup_ns", self.fixup_ns())
            .with("fixup_cycles", self.fixup_cycles()),
        ]
    }
}

/// Times both writes: medians over `plan.trials` trials of each.
pub fn measure_kernel_fixup(plan: Plan) -> Result<KernelFixup, RunError> {
    let mut probe = KernelFixupProbe::new().map_err(RunError::Fixup)?;
    let n = plan.iters(200_000, 2_000);
    let mut failed = None;
    let mut timed = |faulting: bool| {
        measure(plan.trials, || {
            match kernel_fixup_writes(&mut probe, faulting, n) {
                Ok(done) => done,
                Err(e) => {
                    failed = Some(e);
                    1
                }
            }
        })
    };
    let mapped = timed(false);
    let faulting = timed(true);
    if let Some(e) = failed {
        return Err(RunError::Fixup(e));
    }
    Ok(KernelFixup { mapped, faulting })
}
