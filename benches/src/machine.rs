//! The machine a result was measured on.

use serde::Serialize;

/// What the JSON `machine` object holds.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// CPU model string.
    pub cpu: String,
    /// Counter ticks per second (the TSC, calibrated; aarch64's
    /// `CNTFRQ_EL0`).
    pub tsc_hz: u64,
    /// Logical CPUs available to this process.
    pub cores: usize,
    /// Physical memory in bytes.
    pub memory_bytes: u64,
    /// Kernel release.
    pub kernel: String,
    /// Transparent huge page mode (`always`, `madvise`, `never`).
    pub thp: String,
}

impl Machine {
    /// Describes this machine (sysinfo and /proc).
    pub fn describe() -> Machine {
        let mut sys = sysinfo::System::new().ok();
        if let Some(s) = sys.as_mut() {
            s.refresh_memory();
            s.refresh_cpu_list(sysinfo::CpuRefreshKind::nothing());
        }
        let cpu = sys
            .as_ref()
            .and_then(|s| s.cpus().first().map(|c| c.brand().trim().to_owned()))
            .filter(|b| !b.is_empty())
            .unwrap_or_else(|| "unknown".into());
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .ok()
            .and_then(|s| Some(s.split('[').nth(1)?.split(']').next()?.to_owned()))
            .unwrap_or_else(|| "unavailable".into());
        Machine {
            cpu,
            tsc_hz: crate::timing::tsc_hz(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_bytes: sys.as_ref().map_or(0, |s| s.total_memory()),
            kernel: sysinfo::System::kernel_version().unwrap_or_else(|_| "unknown".into()),
            thp,
        }
    }

    /// One line for the top of a report.
    pub fn summary(&self) -> String {
        format!(
            "{} | {} {} | {} cores | {} RAM | kernel {} | THP {}",
            self.cpu,
            crate::timing::COUNTER_NAME,
            rate(self.tsc_hz),
            self.cores,
            crate::units::human_bytes(self.memory_bytes),
            self.kernel,
            self.thp
        )
    }
}

/// A counter rate as GHz or MHz.
fn rate(hz: u64) -> String {
    if hz >= 1_000_000_000 {
        format!("{:.2} GHz", hz as f64 / 1e9)
    } else {
        format!("{:.1} MHz", hz as f64 / 1e6)
    }
}
