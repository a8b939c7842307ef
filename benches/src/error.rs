//! The lab's errors, one small enum per domain. The binary turns any of
//! them into one line and exit status 2; the library only returns them.

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::layout_spec::LoadError;
use crate::models::ModelKind;

/// An experiment or the default comparison could not run to the end.
#[derive(Debug)]
pub enum RunError {
    /// The model (or its allocator) could not be built or refused a step.
    Model {
        /// The model.
        model: ModelKind,
        /// What the allocator said.
        source: buddy::AllocError,
    },
    /// A layout could not be loaded.
    Layout(LoadError),
    /// The report could not be written.
    Json(JsonError),
    /// A measurement came out zero, negative or not a number.
    NotPositive {
        /// The row (`list x128 / vmemmap`).
        row: String,
    },
    /// Timing the host kernel's own fault fixup failed.
    Fixup(io::Error),
    /// A peer allocator could not be set up.
    Peer(PeerError),
    /// `--start-state` given to an experiment that does not take one.
    StartStateRefused {
        /// The experiment.
        experiment: &'static str,
    },
    /// Every row was refused (no model could be built, no size fit):
    /// the run measured nothing.
    NothingMeasured {
        /// The experiment (`memdesc`).
        experiment: &'static str,
        /// Why, as the first refused row said it.
        why: String,
    },
    /// The recording an experiment replays cannot be read: why, as the
    /// trace reader said it.
    Trace(String),
    /// A workload's allocator refused a step it should have taken (a
    /// free of a page it handed out): which allocator, and what it said.
    Workload(String),
    /// An experiment's run on this host's own kernel failed or was
    /// refused (not root, nowhere to write its recording): why.
    HostKernel(String),
    /// `bench scale`: a thread count or allocator it cannot run, or a
    /// workload's allocator that refused a step.
    Scale(ScaleError),
    /// The hugetlb pool (or its HVO) refused a step.
    Hugetlb {
        /// The model.
        model: ModelKind,
        /// What the pool said.
        source: buddy::HugetlbError,
    },
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Model { model, source } => write!(f, "{model}: {source}"),
            RunError::Layout(e) => e.fmt(f),
            RunError::StartStateRefused { experiment } => write!(
                f,
                "bench {experiment} takes no --start-state: its workloads need the allocator as boot leaves it (the default comparison, bench bulk and replay take one)"
            ),
            RunError::Json(e) => e.fmt(f),
            RunError::NotPositive { row } => {
                write!(f, "{row}: a measurement is not a positive number")
            }
            RunError::Fixup(e) => write!(f, "timing the kernel's fault fixup: {e}"),
            RunError::Peer(e) => e.fmt(f),
            RunError::NothingMeasured { experiment, why } => {
                write!(
                    f,
                    "bench {experiment} measured nothing on this machine: {why}"
                )
            }
            RunError::Hugetlb { model, source } => write!(f, "{model}: {source}"),
            RunError::Trace(why) => f.write_str(why),
            RunError::Workload(why) => f.write_str(why),
            RunError::HostKernel(why) => write!(f, "--host-kernel: {why}"),
            RunError::Scale(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for RunError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::Model { source, .. } => Some(source),
            RunError::Layout(e) => Some(e),
            RunError::Json(e) => Some(e),
            RunError::NotPositive { .. }
            | RunError::StartStateRefused { .. }
            | RunError::NothingMeasured { .. } => None,
            RunError::Fixup(e) => Some(e),
            RunError::Peer(e) => Some(e),
            RunError::Scale(e) => Some(e),
            RunError::Hugetlb { source, .. } => Some(source),
            RunError::Trace(_) | RunError::Workload(_) | RunError::HostKernel(_) => None,
        }
    }
}

/// What `bench scale` refuses, or what one of its allocators refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScaleError {
    /// `--threads` holds 0.
    NoThreads,
    /// A thread count above the CPUs this process may run on (each
    /// thread is pinned to a CPU of its own).
    TooManyThreads {
        /// The count asked for.
        asked: usize,
        /// The CPUs there are.
        online: usize,
    },
    /// An allocator name `bench scale` does not know.
    UnknownAllocator {
        /// The name given.
        name: String,
        /// The names it knows.
        known: String,
    },
    /// The memory is too small for every thread to hold a block of the
    /// order.
    TooSmall {
        /// The pages modelled.
        nr_pages: u64,
        /// The order.
        order: u8,
        /// The threads.
        threads: usize,
    },
    /// An allocator had no free block of the order.
    NoMemory {
        /// Which allocator.
        allocator: &'static str,
        /// The order asked for.
        order: u8,
    },
    /// An allocator refused a step it should have taken (a handle, a
    /// free of a block it handed out).
    Refused {
        /// Which allocator.
        allocator: &'static str,
        /// What it said.
        why: String,
    },
}

impl fmt::Display for ScaleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScaleError::NoThreads => f.write_str("--threads: a thread count must be at least 1"),
            ScaleError::TooManyThreads { asked, online } => write!(
                f,
                "--threads: {asked} threads, but this process may run on {online} CPUs (each thread is pinned to a CPU of its own)"
            ),
            ScaleError::UnknownAllocator { name, known } => {
                write!(f, "unknown allocator `{name}` (known: {known})")
            }
            ScaleError::TooSmall {
                nr_pages,
                order,
                threads,
            } => write!(
                f,
                "{nr_pages} pages are too few for {threads} threads to hold a block of order {order} each in half of them"
            ),
            ScaleError::NoMemory { allocator, order } => {
                write!(f, "{allocator}: no free block of order {order}")
            }
            ScaleError::Refused { allocator, why } => write!(f, "{allocator}: {why}"),
        }
    }
}

impl std::error::Error for ScaleError {}

impl From<ScaleError> for RunError {
    fn from(e: ScaleError) -> Self {
        RunError::Scale(e)
    }
}

impl From<LoadError> for RunError {
    fn from(e: LoadError) -> Self {
        RunError::Layout(e)
    }
}

impl From<sparsemem::LayoutError> for RunError {
    fn from(e: sparsemem::LayoutError) -> Self {
        RunError::Layout(LoadError::Layout(e))
    }
}

impl From<JsonError> for RunError {
    fn from(e: JsonError) -> Self {
        RunError::Json(e)
    }
}

impl From<PeerError> for RunError {
    fn from(e: PeerError) -> Self {
        RunError::Peer(e)
    }
}

/// A `--json` report that could not be written.
#[derive(Debug)]
pub struct JsonError {
    /// The path asked for.
    pub path: PathBuf,
    /// What went wrong.
    pub kind: JsonErrorKind,
}

/// Why a report could not be written.
#[derive(Debug)]
pub enum JsonErrorKind {
    /// The path names no file (`/`, `..`).
    NotAFile,
    /// Creating, writing or renaming the file failed.
    Io(io::Error),
    /// The report could not be encoded.
    Encode(serde_json::Error),
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = self.path.display();
        match &self.kind {
            JsonErrorKind::NotAFile => write!(f, "--json {path}: not a file path"),
            JsonErrorKind::Io(e) => write!(f, "--json {path}: {e}"),
            JsonErrorKind::Encode(e) => write!(f, "--json {path}: {e}"),
        }
    }
}

impl std::error::Error for JsonError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            JsonErrorKind::NotAFile => None,
            JsonErrorKind::Io(e) => Some(e),
            JsonErrorKind::Encode(e) => Some(e),
        }
    }
}

/// A peer allocator of `bench peers` that could not be set up.
#[derive(Debug)]
pub enum PeerError {
    /// The layout has no whole `MAX_PAGE_ORDER` block of RAM.
    NoWholeBlock {
        /// The layout's source.
        layout: String,
    },
    /// The frame-alloc peer works on 4 KiB pages only.
    PageSize,
    /// The frame-alloc peer's pool could not be mapped.
    Pool(io::Error),
    /// A peer crate refused its setup (its own message).
    Refused {
        /// The peer crate.
        peer: &'static str,
        /// What it said.
        message: String,
    },
    /// The floor buddy indexes frames with 32 bits; the span has more.
    FloorTooLarge {
        /// Frames in the span (rounded out to whole blocks).
        frames: u64,
    },
    /// The span has more frames than the bitmap peer holds.
    TooManyFrames {
        /// The peer's capacity.
        capacity: usize,
        /// Frames in the span.
        frames: u64,
    },
}

impl fmt::Display for PeerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerError::NoWholeBlock { layout } => {
                write!(
                    f,
                    "{layout} has no whole max-order block of RAM for the peers"
                )
            }
            PeerError::PageSize => f.write_str("the frame-alloc peer is set up for 4 KiB pages"),
            PeerError::Pool(e) => write!(f, "frame-alloc peer: cannot map its pool: {e}"),
            PeerError::Refused { peer, message } => write!(f, "{peer} peer: {message}"),
            PeerError::FloorTooLarge { frames } => write!(
                f,
                "the floor buddy indexes frames with 32 bits; this span has {frames} frames"
            ),
            PeerError::TooManyFrames { capacity, frames } => write!(
                f,
                "the bitmap-allocator peer holds {capacity} frames; this span has {frames}"
            ),
        }
    }
}

impl std::error::Error for PeerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PeerError::Pool(e) => Some(e),
            _ => None,
        }
    }
}
