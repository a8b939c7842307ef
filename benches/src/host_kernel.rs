//! This host's kernel as a reference: its own mechanisms, timed beside
//! pfnlab's models of them in the same run.
//!
//! Three measurements, each of a kernel path pfnlab models:
//! - [`hugetlb_pool`]: growing and then shrinking `/proc/sys/vm/nr_hugepages`
//!   by N 2 MiB pages with `hugetlb_optimize_vmemmap` 0 or 1 — the kernel's
//!   `vmemmap_remap_free`/`vmemmap_remap_alloc` with its own TLB flushes,
//!   beside `bench hvo`'s pool;
//! - [`compact_memory`]: one `echo 1 > /proc/sys/vm/compact_memory`, with
//!   the `compact_migrate_scanned` and `compact_free_scanned` deltas of
//!   `/proc/vmstat`: the kernel's ns per scanned pfn, its migration
//!   included, beside `bench walk`'s scanners;
//! - [`kpageflags_walk`]: a read of `/proc/kpageflags` over the whole pfn
//!   range, the kernel's own per-pfn walk (`pfn_to_online_page`,
//!   `stable_page_flags`, a `put_user` and `cond_resched` per pfn), which
//!   is a walk's cost, not a validity check's.
//!
//! Each needs root. A setting changed to measure is held by a [`Restore`],
//! which writes the saved value back when it is dropped — on success, on
//! error and on unwinding. A signal that kills the process skips every
//! destructor, so a caller that may be interrupted must catch the signal
//! (the `pfnlab` binary turns Ctrl-C, SIGTERM and SIGHUP into a flag while
//! it measures, and these functions finish their step before returning).
//!
//! Every path is a [`HostPaths`] field, so the tests run the same code on
//! plain files in a temporary directory, never on this machine's settings.

use std::fmt;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Where the kernel's files are: `/proc/sys/vm`, `/proc/vmstat` and
/// `/proc/kpageflags` on a live machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPaths {
    /// The `vm` sysctls' directory.
    pub sys_vm: PathBuf,
    /// `/proc/vmstat`.
    pub vmstat: PathBuf,
    /// `/proc/kpageflags`.
    pub kpageflags: PathBuf,
}

impl HostPaths {
    /// This machine's.
    pub fn live() -> HostPaths {
        HostPaths {
            sys_vm: "/proc/sys/vm".into(),
            vmstat: "/proc/vmstat".into(),
            kpageflags: "/proc/kpageflags".into(),
        }
    }

    /// Under `root`, laid out as the live paths are (for tests).
    pub fn under(root: &Path) -> HostPaths {
        HostPaths {
            sys_vm: root.join("sys/vm"),
            vmstat: root.join("vmstat"),
            kpageflags: root.join("kpageflags"),
        }
    }

    fn vm(&self, name: &str) -> PathBuf {
        self.sys_vm.join(name)
    }
}

/// Why a host measurement could not run.
#[derive(Debug)]
pub enum HostError {
    /// The measurement changes kernel settings or reads root-only files.
    NotRoot,
    /// A file the measurement needs is not there (a kernel without the
    /// option).
    Missing(PathBuf),
    /// A file could not be read or written.
    Io(PathBuf, io::Error),
    /// A file held something other than what the kernel writes there.
    Malformed(PathBuf, String),
    /// The run's layout is not this machine's live map, so the kernel's
    /// figures would not stand beside the model's.
    NotHostLayout,
    /// The caller stopped the measurement (a signal); what it had set is
    /// restored.
    Interrupted,
    /// The kernel gave fewer huge pages than asked (memory too fragmented
    /// or too small); nothing is left changed.
    PoolShort {
        /// Pages asked for.
        asked: u64,
        /// Pages the pool reached.
        got: u64,
    },
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostError::NotRoot => f.write_str("needs root"),
            HostError::Interrupted => f.write_str("interrupted"),
            HostError::NotHostLayout => f.write_str("needs --layout host (the live map)"),
            HostError::Missing(p) => write!(f, "{} is missing", p.display()),
            HostError::Io(p, e) => write!(f, "{}: {e}", p.display()),
            HostError::Malformed(p, text) => {
                write!(f, "{}: unexpected contents {text:?}", p.display())
            }
            HostError::PoolShort { asked, got } => write!(
                f,
                "the kernel gave {got} of {asked} huge pages (memory too fragmented)"
            ),
        }
    }
}

impl std::error::Error for HostError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HostError::Io(_, e) => Some(e),
            _ => None,
        }
    }
}

fn io_error(path: &Path, e: io::Error) -> HostError {
    if e.kind() == io::ErrorKind::NotFound {
        HostError::Missing(path.to_owned())
    } else {
        HostError::Io(path.to_owned(), e)
    }
}

/// Whether this process may run the measurements.
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A numeric sysctl file.
#[derive(Clone, Debug)]
pub struct Sysctl {
    path: PathBuf,
}

impl Sysctl {
    /// The sysctl at `path`.
    pub fn at(path: impl Into<PathBuf>) -> Sysctl {
        Sysctl { path: path.into() }
    }

    /// Its value.
    pub fn read(&self) -> Result<u64, HostError> {
        let text = fs::read_to_string(&self.path).map_err(|e| io_error(&self.path, e))?;
        text.trim()
            .parse()
            .map_err(|_| HostError::Malformed(self.path.clone(), text))
    }

    /// Writes `value`.
    pub fn write(&self, value: u64) -> Result<(), HostError> {
        fs::write(&self.path, format!("{value}\n")).map_err(|e| io_error(&self.path, e))
    }

    /// Sets `value` until the returned guard is dropped, which writes the
    /// value read now back.
    pub fn set(&self, value: u64) -> Result<Restore, HostError> {
        let saved = self.read()?;
        let guard = Restore {
            sysctl: self.clone(),
            saved,
            done: false,
        };
        self.write(value)?;
        Ok(guard)
    }
}

/// A sysctl's saved value, written back by [`Restore::restore`] or, when
/// a measurement returns early or unwinds, on drop.
#[derive(Debug)]
pub struct Restore {
    sysctl: Sysctl,
    saved: u64,
    done: bool,
}

impl Restore {
    /// The value that will be written back.
    pub fn saved(&self) -> u64 {
        self.saved
    }

    /// Writes the saved value back, saying whether that worked.
    pub fn restore(mut self) -> Result<(), HostError> {
        self.done = true;
        self.sysctl.write(self.saved)
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        // Only on an early return or an unwind: the error being returned
        // (or the panic) is the one the caller sees, and a destructor has
        // no way to add a second, so a failed write here goes unreported.
        if !self.done {
            let _ = self.sysctl.write(self.saved);
        }
    }
}

/// One grow-then-shrink of the 2 MiB pool.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PoolRun {
    /// Whether `hugetlb_optimize_vmemmap` was 1.
    pub hvo: bool,
    /// Pages added and then removed.
    pub pages: u64,
    /// ns per page to grow.
    pub grow_ns: f64,
    /// ns per page to shrink.
    pub shrink_ns: f64,
}

/// Grows `nr_hugepages` by `pages` and shrinks it back, with
/// `hugetlb_optimize_vmemmap` set to `hvo` for both; both sysctls are
/// restored before returning, whatever happens.
pub fn hugetlb_pool(paths: &HostPaths, pages: u64, hvo: bool) -> Result<PoolRun, HostError> {
    let nr = Sysctl::at(paths.vm("nr_hugepages"));
    let optimize = Sysctl::at(paths.vm("hugetlb_optimize_vmemmap"));
    // Restored in reverse order of setting: the pool first (its pages were
    // allocated under the HVO setting), then the setting.
    let hvo_setting = optimize.set(u64::from(hvo))?;
    let base = nr.read()?;
    let t = Instant::now();
    let pool = nr.set(base + pages)?;
    let grow = t.elapsed().as_nanos() as f64;
    let got = nr.read()?.saturating_sub(base);
    let t = Instant::now();
    pool.restore()?;
    let shrink = t.elapsed().as_nanos() as f64;
    hvo_setting.restore()?;
    if got < pages {
        return Err(HostError::PoolShort { asked: pages, got });
    }
    Ok(PoolRun {
        hvo,
        pages,
        grow_ns: grow / pages as f64,
        shrink_ns: shrink / pages as f64,
    })
}

/// The `/proc/vmstat` counters compaction moves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompactCounters {
    /// `compact_migrate_scanned`.
    pub migrate_scanned: u64,
    /// `compact_free_scanned`.
    pub free_scanned: u64,
}

/// Reads the compaction counters from a `/proc/vmstat` text.
pub fn parse_vmstat(text: &str) -> Option<CompactCounters> {
    let mut c = (None, None);
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(key), Some(value)) = (words.next(), words.next()) else {
            continue;
        };
        match key {
            "compact_migrate_scanned" => c.0 = value.parse().ok(),
            "compact_free_scanned" => c.1 = value.parse().ok(),
            _ => {}
        }
    }
    Some(CompactCounters {
        migrate_scanned: c.0?,
        free_scanned: c.1?,
    })
}

fn read_counters(paths: &HostPaths) -> Result<CompactCounters, HostError> {
    let text = fs::read_to_string(&paths.vmstat).map_err(|e| io_error(&paths.vmstat, e))?;
    parse_vmstat(&text).ok_or_else(|| HostError::Malformed(paths.vmstat.clone(), text))
}

/// One whole-machine compaction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CompactRun {
    /// Wall time of the write.
    pub ns: f64,
    /// Counter deltas.
    pub scanned: CompactCounters,
}

impl CompactRun {
    /// ns per pfn either scanner looked at (migration included), or
    /// `None` when nothing was scanned.
    pub fn ns_per_scanned_pfn(&self) -> Option<f64> {
        let n = self.scanned.migrate_scanned + self.scanned.free_scanned;
        (n > 0).then(|| self.ns / n as f64)
    }
}

/// `echo 1 > /proc/sys/vm/compact_memory`, timed, with the scanners'
/// counter deltas. The write is a trigger, not a setting: nothing is
/// left to restore.
pub fn compact_memory(paths: &HostPaths) -> Result<CompactRun, HostError> {
    let trigger = paths.vm("compact_memory");
    if !trigger.exists() {
        return Err(HostError::Missing(trigger));
    }
    let before = read_counters(paths)?;
    let t = Instant::now();
    fs::write(&trigger, "1\n").map_err(|e| io_error(&trigger, e))?;
    let ns = t.elapsed().as_nanos() as f64;
    let after = read_counters(paths)?;
    Ok(CompactRun {
        ns,
        scanned: CompactCounters {
            migrate_scanned: after.migrate_scanned.saturating_sub(before.migrate_scanned),
            free_scanned: after.free_scanned.saturating_sub(before.free_scanned),
        },
    })
}

/// One read of `/proc/kpageflags` to its end.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KpageflagsRun {
    /// Pfns read (8 bytes each).
    pub pfns: u64,
    /// Wall time.
    pub ns: f64,
}

impl KpageflagsRun {
    /// ns per pfn, or `None` for an empty file.
    pub fn ns_per_pfn(&self) -> Option<f64> {
        (self.pfns > 0).then(|| self.ns / self.pfns as f64)
    }
}

/// Entries read per `read`: 64 KiB, the size tools such as page-types use.
const KPAGEFLAGS_CHUNK: usize = 8192;

/// Reads `/proc/kpageflags` from pfn 0 to its end (`max_pfn` rounded to
/// a section), timed.
pub fn kpageflags_walk(paths: &HostPaths) -> Result<KpageflagsRun, HostError> {
    let path = &paths.kpageflags;
    let mut file = fs::File::open(path).map_err(|e| io_error(path, e))?;
    let mut buf = vec![0u8; KPAGEFLAGS_CHUNK * 8];
    let mut bytes = 0u64;
    let t = Instant::now();
    loop {
        let n = file.read(&mut buf).map_err(|e| io_error(path, e))?;
        if n == 0 {
            break;
        }
        std::hint::black_box(&buf[..n]);
        bytes += n as u64;
    }
    let ns = t.elapsed().as_nanos() as f64;
    Ok(KpageflagsRun {
        pfns: bytes / 8,
        ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_host() -> (tempfile::TempDir, HostPaths) {
        let dir = tempfile::tempdir().unwrap();
        let paths = HostPaths::under(dir.path());
        fs::create_dir_all(&paths.sys_vm).unwrap();
        (dir, paths)
    }

    #[test]
    fn a_set_sysctl_is_restored_on_drop_and_on_error() {
        let (_dir, paths) = fake_host();
        let s = Sysctl::at(paths.vm("watermark_scale_factor"));
        fs::write(paths.vm("watermark_scale_factor"), "10\n").unwrap();
        let guard = s.set(200).unwrap();
        assert_eq!(guard.saved(), 10);
        assert_eq!(s.read().unwrap(), 200);
        guard.restore().unwrap();
        assert_eq!(s.read().unwrap(), 10);
        // An error after the set still restores (the guard is dropped on
        // the way out).
        let run = || -> Result<(), HostError> {
            let _g = s.set(300)?;
            Err(HostError::NotRoot)
        };
        assert!(run().is_err());
        assert_eq!(s.read().unwrap(), 10);
        // A panic unwinds through the guard too.
        let caught = std::panic::catch_unwind(|| {
            let _g = s.set(400).unwrap();
            panic!("measurement failed");
        });
        assert!(caught.is_err());
        assert_eq!(s.read().unwrap(), 10);
    }

    #[test]
    fn the_pool_is_grown_shrunk_and_both_sysctls_restored() {
        let (_dir, paths) = fake_host();
        fs::write(paths.vm("nr_hugepages"), "4\n").unwrap();
        fs::write(paths.vm("hugetlb_optimize_vmemmap"), "0\n").unwrap();
        let run = hugetlb_pool(&paths, 16, true).unwrap();
        assert_eq!((run.hvo, run.pages), (true, 16));
        assert!(run.grow_ns > 0.0 && run.shrink_ns > 0.0);
        let read = |name: &str| fs::read_to_string(paths.vm(name)).unwrap();
        assert_eq!(read("nr_hugepages").trim(), "4");
        assert_eq!(read("hugetlb_optimize_vmemmap").trim(), "0");
    }

    #[test]
    fn missing_or_malformed_files_are_clear_errors_and_change_nothing() {
        let (_dir, paths) = fake_host();
        fs::write(paths.vm("hugetlb_optimize_vmemmap"), "0\n").unwrap();
        // No nr_hugepages: the kernel has no hugetlb.
        let e = hugetlb_pool(&paths, 1, true).unwrap_err();
        assert!(matches!(e, HostError::Missing(_)), "{e}");
        assert_eq!(
            fs::read_to_string(paths.vm("hugetlb_optimize_vmemmap")).unwrap(),
            "0\n"
        );
        fs::write(paths.vm("nr_hugepages"), "lots\n").unwrap();
        let e = hugetlb_pool(&paths, 1, false).unwrap_err();
        assert!(e.to_string().contains("unexpected contents"), "{e}");
        assert!(matches!(
            compact_memory(&paths).unwrap_err(),
            HostError::Missing(_)
        ));
        assert!(matches!(
            kpageflags_walk(&paths).unwrap_err(),
            HostError::Missing(_)
        ));
    }

    #[test]
    fn vmstat_counters_are_read_from_a_saved_file() {
        let saved = include_str!("../tests/data/host/vmstat");
        let c = parse_vmstat(saved).unwrap();
        assert_eq!(
            c,
            CompactCounters {
                migrate_scanned: 72932051,
                free_scanned: 47778347
            }
        );
        assert_eq!(parse_vmstat("nr_free_pages 10\n"), None);
    }

    #[test]
    fn compaction_reports_the_counter_deltas() {
        let (_dir, paths) = fake_host();
        fs::write(paths.vm("compact_memory"), "").unwrap();
        fs::write(
            &paths.vmstat,
            "compact_migrate_scanned 100\ncompact_free_scanned 50\n",
        )
        .unwrap();
        // A plain file does not compact: the counters stay, so nothing was
        // scanned and there is no per-pfn figure.
        let run = compact_memory(&paths).unwrap();
        assert_eq!(run.scanned, CompactCounters::default());
        assert_eq!(run.ns_per_scanned_pfn(), None);
        let run = CompactRun {
            ns: 3000.0,
            scanned: CompactCounters {
                migrate_scanned: 200,
                free_scanned: 100,
            },
        };
        assert_eq!(run.ns_per_scanned_pfn(), Some(10.0));
    }

    #[test]
    fn kpageflags_is_read_to_its_end_in_chunks() {
        let (_dir, paths) = fake_host();
        let pfns = KPAGEFLAGS_CHUNK as u64 * 2 + 5;
        fs::write(&paths.kpageflags, vec![0u8; pfns as usize * 8]).unwrap();
        let run = kpageflags_walk(&paths).unwrap();
        assert_eq!(run.pfns, pfns);
        assert!(run.ns_per_pfn().is_some());
    }
}
