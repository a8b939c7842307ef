//! Recording the running kernel's page allocations through tracefs.
//!
//! The recording uses a private tracing instance
//! (`instances/pfnlab-PID`), so the host's own tracing state is never
//! touched: it enables the five `kmem` events there, sizes the per-CPU
//! ring buffers, reads every CPU's `trace_pipe` on its own thread while
//! the command runs (or for a number of seconds, or until `stop` is set),
//! reads each CPU's overrun count at the end, and removes the instance on
//! every exit path (the [`Instance`] guard's drop), unmounting tracefs
//! again if it mounted it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sparsemem::Layout;

use super::format::{Header, write_recording};
use super::text::{Line, parse_line};
use super::{Event, EventKind};
use crate::snapshot::Snapshot;

/// Where tracefs is mounted on current systems.
pub const TRACEFS: &str = "/sys/kernel/tracing";
/// Per-CPU ring buffer size asked for, in KiB.
pub const BUFFER_KB: u64 = 16 * 1024;

/// What to record.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    /// Run this command (program and arguments) and record while it runs.
    pub command: Vec<String>,
    /// Without a command: record for this long.
    pub seconds: f64,
    /// Take the machine's snapshot just before tracing begins and just
    /// after it stops, into the recording's header.
    pub snapshot: bool,
}

/// A finished recording.
#[derive(Debug)]
pub struct Recording {
    /// The header as written.
    pub header: Header,
    /// The events, in timestamp order.
    pub events: Vec<Event>,
    /// The command's exit status, if a command ran.
    pub status: Option<std::process::ExitStatus>,
}

/// A recording that could not be made or written; the tracing instance
/// is gone either way.
#[derive(Debug)]
pub enum RecordError {
    /// tracefs is root-only.
    NeedsRoot,
    /// tracefs is not mounted and cannot be.
    NoTracefs {
        /// Where it was to be mounted.
        root: PathBuf,
        /// Why not.
        source: nix::Error,
    },
    /// The kernel lacks one of the five events.
    NoEvent {
        /// The event's name.
        event: &'static str,
    },
    /// The private instance cannot be created.
    Instance {
        /// Its directory.
        dir: PathBuf,
        /// Why not.
        source: io::Error,
    },
    /// A tracefs control file refused a write.
    Control {
        /// The value written.
        value: String,
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A CPU's `trace_pipe` could not be read.
    TracePipe {
        /// The CPU.
        cpu: usize,
        /// Why.
        source: io::Error,
    },
    /// The command to record could not be started or waited for.
    Command {
        /// The program.
        program: String,
        /// Why.
        source: io::Error,
    },
    /// The recording could not be written.
    Output {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::NeedsRoot => {
                f.write_str("recording a kernel trace needs root (tracefs is root-only)")
            }
            RecordError::NoTracefs { root, source } => {
                write!(
                    f,
                    "no tracefs: cannot mount it on {}: {source}",
                    root.display()
                )
            }
            RecordError::NoEvent { event } => write!(
                f,
                "this kernel has no kmem:{event} trace event (CONFIG_TRACEPOINTS?)"
            ),
            RecordError::Instance { dir, source } => write!(
                f,
                "cannot create the tracing instance {}: {source}",
                dir.display()
            ),
            RecordError::Control {
                value,
                path,
                source,
            } => write!(f, "cannot write {value} to {}: {source}", path.display()),
            RecordError::TracePipe { cpu, source } => {
                write!(f, "reading cpu{cpu}'s trace_pipe: {source}")
            }
            RecordError::Command { program, source } => {
                write!(f, "cannot run {program}: {source}")
            }
            RecordError::Output { path, source } => {
                write!(f, "cannot write {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for RecordError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RecordError::NeedsRoot | RecordError::NoEvent { .. } => None,
            RecordError::NoTracefs { source, .. } => Some(source),
            RecordError::Instance { source, .. }
            | RecordError::Control { source, .. }
            | RecordError::TracePipe { source, .. }
            | RecordError::Command { source, .. }
            | RecordError::Output { source, .. } => Some(source),
        }
    }
}

/// The private tracing instance; removed (and tracefs unmounted when this
/// recording mounted it) when dropped.
pub struct Instance {
    dir: PathBuf,
    mounted: bool,
}

impl Instance {
    /// Checks root, mounts tracefs if needed, checks the five events exist
    /// and creates the instance. Every refusal is one line, and leaves
    /// nothing behind.
    pub fn create() -> Result<Instance, RecordError> {
        if !nix::unistd::geteuid().is_root() {
            return Err(RecordError::NeedsRoot);
        }
        let root = Path::new(TRACEFS);
        let mut mounted = false;
        if !root.join("instances").is_dir() {
            mount_tracefs(root)?;
            mounted = true;
        }
        let unmount = |mounted: bool| {
            if mounted {
                umount(root);
            }
        };
        for kind in EventKind::ALL {
            if !root.join("events/kmem").join(kind.name()).is_dir() {
                unmount(mounted);
                return Err(RecordError::NoEvent { event: kind.name() });
            }
        }
        let dir = root.join(format!("instances/pfnlab-{}", std::process::id()));
        if let Err(source) = fs::create_dir(&dir) {
            unmount(mounted);
            return Err(RecordError::Instance { dir, source });
        }
        Ok(Instance { dir, mounted })
    }

    fn write(&self, file: &str, value: &str) -> Result<(), RecordError> {
        let path = self.dir.join(file);
        fs::write(&path, value).map_err(|source| RecordError::Control {
            value: value.to_owned(),
            path,
            source,
        })
    }

    /// The CPUs with a `per_cpu/cpuN` directory.
    fn cpus(&self) -> Vec<usize> {
        let mut cpus: Vec<usize> = fs::read_dir(self.dir.join("per_cpu"))
            .map(|d| {
                d.filter_map(|e| {
                    e.ok()?
                        .file_name()
                        .to_str()?
                        .strip_prefix("cpu")?
                        .parse()
                        .ok()
                })
                .collect()
            })
            .unwrap_or_default();
        cpus.sort_unstable();
        cpus
    }

    /// Events lost on `cpu` (its ring buffer's `overrun`).
    fn overrun(&self, cpu: usize) -> u64 {
        fs::read_to_string(self.dir.join(format!("per_cpu/cpu{cpu}/stats")))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("overrun:").map(|v| v.trim().parse().ok()))?
            })
            .unwrap_or(0)
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = fs::write(self.dir.join("tracing_on"), "0");
        for kind in EventKind::ALL {
            let _ = fs::write(
                self.dir
                    .join("events/kmem")
                    .join(kind.name())
                    .join("enable"),
                "0",
            );
        }
        // The readers have closed their pipes; an instance with open files
        // refuses rmdir, so retry briefly.
        for _ in 0..50 {
            if fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if self.mounted {
            umount(Path::new(TRACEFS));
        }
    }
}

fn mount_tracefs(root: &Path) -> Result<(), RecordError> {
    use nix::mount::{MsFlags, mount};
    mount(
        Some("nodev"),
        root,
        Some("tracefs"),
        MsFlags::empty(),
        None::<&str>,
    )
    .map_err(|source| RecordError::NoTracefs {
        root: root.to_owned(),
        source,
    })
}

fn umount(root: &Path) {
    let _ = nix::mount::umount(root);
}

/// Reads one CPU's `trace_pipe` until `stop` is set and the pipe is empty.
fn read_cpu(pipe: &Path, cpu: usize, stop: &AtomicBool) -> io::Result<(Vec<Event>, u64)> {
    let mut file: File = OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(pipe)?;
    let mut events = Vec::new();
    let mut unparsed = 0u64;
    let mut pending = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut line_no = 0u64;
    loop {
        match file.read(&mut buf) {
            Ok(0) => {}
            Ok(n) => {
                pending.extend_from_slice(&buf[..n]);
                let complete = pending
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |i| i + 1);
                for line in pending[..complete].split(|&b| b == b'\n') {
                    line_no += 1;
                    match parse_line(&String::from_utf8_lossy(line), line_no) {
                        Ok(Line::Event(mut e)) => {
                            e.cpu = cpu as u16;
                            events.push(e);
                        }
                        Ok(_) => {}
                        Err(_) => unparsed += 1,
                    }
                }
                pending.drain(..complete);
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        if stop.load(Ordering::Relaxed) {
            return Ok((events, unparsed));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Records while `options.command` runs (or for `options.seconds`, or
/// until `stop` is set, e.g. by Ctrl-C).
pub fn record(options: &RecordOptions, stop: &AtomicBool) -> Result<Recording, RecordError> {
    record_inner(options, stop, None)
}

/// Records while `work` runs on the calling thread, in place of
/// `options.command` and `options.seconds`: tracing is on before `work`
/// starts, and the end snapshot (with `options.snapshot`) is taken after
/// it returns and before anything `work` left mapped is released.
pub fn record_while<'a>(
    options: &RecordOptions,
    stop: &AtomicBool,
    work: impl FnOnce() + 'a,
) -> Result<Recording, RecordError> {
    record_inner(options, stop, Some(Box::new(work)))
}

fn record_inner<'a>(
    options: &RecordOptions,
    stop: &AtomicBool,
    work: Option<Box<dyn FnOnce() + 'a>>,
) -> Result<Recording, RecordError> {
    let instance = Instance::create()?;
    instance.write("buffer_size_kb", &BUFFER_KB.to_string())?;
    for kind in EventKind::ALL {
        instance.write(&format!("events/kmem/{}/enable", kind.name()), "1")?;
    }
    let snapshot_start = options.snapshot.then(host_snapshot);
    instance.write("tracing_on", "1")?;
    let cpus = instance.cpus();
    let readers_stop = AtomicBool::new(false);
    let started = Instant::now();
    let (per_cpu, status, snapshot_end) = std::thread::scope(|s| {
        let readers: Vec<_> = cpus
            .iter()
            .map(|&cpu| {
                let pipe = instance.dir.join(format!("per_cpu/cpu{cpu}/trace_pipe"));
                let readers_stop = &readers_stop;
                s.spawn(move || read_cpu(&pipe, cpu, readers_stop))
            })
            .collect();
        let status = run_workload(options, stop, work);
        let _ = instance.write("tracing_on", "0");
        let snapshot_end = options.snapshot.then(host_snapshot);
        readers_stop.store(true, Ordering::Relaxed);
        let per_cpu: Vec<_> = readers
            .into_iter()
            .map(|r| {
                r.join()
                    .unwrap_or_else(|_| Err(io::Error::other("reader panicked")))
            })
            .collect();
        (per_cpu, status, snapshot_end)
    });
    let seconds = started.elapsed().as_secs_f64();
    let status = status?;
    let mut events = Vec::new();
    for (r, cpu) in per_cpu.into_iter().zip(&cpus) {
        let (mut ev, _) = r.map_err(|source| RecordError::TracePipe { cpu: *cpu, source })?;
        events.append(&mut ev);
    }
    events.sort_by_key(|e| (e.ts_ns, e.cpu));
    for (i, e) in events.iter_mut().enumerate() {
        e.line = i as u64 + 1;
    }
    let lost_events = cpus.iter().map(|&c| instance.overrun(c)).collect();
    drop(instance);
    let header = Header {
        kernel: fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_owned())
            .unwrap_or_default(),
        page_size: sparsemem::memmap::host_page_size() as u64,
        cpus: cpus.len() as u32,
        // With snapshots, the start snapshot's layout, so that a replay
        // from it has the zones its free lists were counted in.
        layout: match &snapshot_start {
            Some(s) => s.layout("recorded").ok(),
            None => Layout::from_host().ok(),
        }
        .map(|l| l.to_toml()),
        command: (!options.command.is_empty()).then(|| options.command.join(" ")),
        seconds,
        lost_events,
        snapshot_start: snapshot_start.map(|s| s.to_json()),
        snapshot_end: snapshot_end.map(|s| s.to_json()),
    };
    Ok(Recording {
        header,
        events,
        status,
    })
}

/// The live machine's [`Snapshot`], as `pfnlab snapshot` takes it.
pub fn host_snapshot() -> Snapshot {
    let page_size = sparsemem::memmap::host_page_size() as u64;
    Snapshot::read(Path::new("/"), std::env::consts::ARCH, page_size)
}

fn run_workload(
    options: &RecordOptions,
    stop: &AtomicBool,
    work: Option<Box<dyn FnOnce() + '_>>,
) -> Result<Option<std::process::ExitStatus>, RecordError> {
    if let Some(work) = work {
        work();
        return Ok(None);
    }
    if let Some((program, args)) = options.command.split_first() {
        let failed = |source| RecordError::Command {
            program: program.clone(),
            source,
        };
        let mut child = Command::new(program).args(args).spawn().map_err(failed)?;
        loop {
            if let Some(status) = child.try_wait().map_err(failed)? {
                return Ok(Some(status));
            }
            if stop.load(Ordering::Relaxed) {
                let _ = child.kill();
                return Ok(child.wait().ok());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let end = Instant::now() + Duration::from_secs_f64(options.seconds.max(0.0));
    while Instant::now() < end && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(None)
}

/// Records and writes the recording to `out`.
pub fn record_to(
    options: &RecordOptions,
    out: &Path,
    stop: &AtomicBool,
) -> Result<Recording, RecordError> {
    let recording = record(options, stop)?;
    write_recording(out, &recording.header, &recording.events).map_err(|source| {
        RecordError::Output {
            path: out.to_owned(),
            source,
        }
    })?;
    Ok(recording)
}
