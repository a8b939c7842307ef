//! A trace read once into memory, and a replay through an allocator the
//! caller built.

use buddy::{Allocator, BuddyModel, Variant};
use sparsemem::Layout;

use super::engine::{EventCounts, ReplayOptions, run};
use super::prior::FromStart;
use crate::trace::format::{OpenTrace, ReadCounts};
use crate::trace::{Event, TraceError};

/// What [`replay_through`] measured.
#[derive(Clone, Debug)]
pub struct TimedReplay {
    /// Wall time of the whole replay.
    pub elapsed_ns: f64,
    /// Time inside the allocator's allocation calls.
    pub alloc_ns: f64,
    /// Time inside its free calls.
    pub free_ns: f64,
    /// What was replayed.
    pub events: EventCounts,
}

/// Replays the trace `open` reads through `alloc`, an allocator of any
/// variant the caller built (the flags experiment replays one trace through
/// each of its buddies): the timed pass of [`Replay`](super::Replay) without the counting
/// pass.
pub fn replay_through<M: BuddyModel, V: Variant>(
    alloc: &Allocator<M, V>,
    layout: &Layout,
    open: OpenTrace<'_>,
    options: ReplayOptions,
) -> Result<TimedReplay, TraceError> {
    let trace = ReadTrace::read(open, options.skip_bad)?;
    let pass = run(
        alloc,
        layout,
        &trace,
        options,
        &FromStart::default(),
        &|_| {},
    )?;
    Ok(TimedReplay {
        elapsed_ns: pass.elapsed_ns,
        alloc_ns: pass.alloc_ns,
        free_ns: pass.free_ns,
        events: pass.events,
    })
}

/// A trace read once into memory: its events in order and what reading
/// counted. Every pass of a replay runs over it, so the trace is parsed
/// once however many passes and models there are.
#[derive(Clone, Debug, Default)]
pub struct ReadTrace {
    /// The events, in timestamp order.
    pub events: Vec<Event>,
    /// What the reader counted (bad lines skipped, other events).
    pub counts: ReadCounts,
}

impl ReadTrace {
    /// Reads the whole trace `open` opens.
    pub fn read(open: OpenTrace<'_>, skip_bad: bool) -> Result<ReadTrace, TraceError> {
        let (events, counts) = open()?.skip_bad(skip_bad).read_all()?;
        Ok(ReadTrace { events, counts })
    }
}
