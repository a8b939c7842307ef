//! The kernel's page-allocation stream: the five `kmem` trace events,
//! read from the kernel's own text (`trace_pipe` and the `trace` file) or
//! from pfnlab's recording format, recorded from the running kernel
//! ([`record`]) and replayed through every model ([`replay`]).
//!
//! The events, as 6.18 prints them (`include/trace/events/kmem.h`):
//! - `mm_page_alloc: page=… pfn=0x… order=N migratetype=M gfp_flags=…`,
//!   one per allocation (`page=0000000000000000 pfn=0x0` when it failed);
//! - `mm_page_alloc_zone_locked: … order=N migratetype=M percpu_refill=R`,
//!   the zone-side part of an allocation or a per-CPU refill;
//! - `mm_page_free: page=… pfn=0x… order=N`, one per freed block, from
//!   `free_pages_prepare`;
//! - `mm_page_free_batched: page=… pfn=0x… order=0`, emitted by the
//!   batched free (`free_unref_folios`) for a page whose `mm_page_free`
//!   came first (since 5.x both loops run in that order; 4.x printed the
//!   batched event first): it never frees on its own;
//! - `mm_page_pcpu_drain: … order=N migratetype=M`, a block going back
//!   from a per-CPU list to the zone.

mod blocks;
pub mod format;
pub mod record;
pub mod replay;
pub mod text;

use std::fmt;

use buddy::Gfp;

/// Which of the five events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// `mm_page_alloc`.
    Alloc,
    /// `mm_page_alloc_zone_locked`.
    AllocZoneLocked,
    /// `mm_page_free`.
    Free,
    /// `mm_page_free_batched`.
    FreeBatched,
    /// `mm_page_pcpu_drain`.
    PcpuDrain,
}

impl EventKind {
    /// Every event, in the recording format's code order.
    pub const ALL: [EventKind; 5] = [
        EventKind::Alloc,
        EventKind::AllocZoneLocked,
        EventKind::Free,
        EventKind::FreeBatched,
        EventKind::PcpuDrain,
    ];

    /// The tracepoint's name.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Alloc => "mm_page_alloc",
            EventKind::AllocZoneLocked => "mm_page_alloc_zone_locked",
            EventKind::Free => "mm_page_free",
            EventKind::FreeBatched => "mm_page_free_batched",
            EventKind::PcpuDrain => "mm_page_pcpu_drain",
        }
    }

    /// The event named `name`, if it is one of the five.
    pub fn from_name(name: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The recording format's code.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The event of a recording-format code.
    pub fn from_code(code: u8) -> Option<EventKind> {
        EventKind::ALL.get(usize::from(code)).copied()
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One trace event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// Where it came from: the line of a text trace, the record's index
    /// (from 1) in a recording.
    pub line: u64,
    /// Timestamp in ns of the trace clock.
    pub ts_ns: u64,
    /// The CPU it happened on.
    pub cpu: u16,
    /// Which event.
    pub kind: EventKind,
    /// The block's first pfn; `None` for an allocation that failed.
    pub pfn: Option<u64>,
    /// The block's order.
    pub order: u8,
    /// The migratetype the kernel printed (-1 when the event has none).
    pub migratetype: i8,
    /// The request's GFP mask (`mm_page_alloc` only; empty otherwise).
    pub gfp: Gfp,
    /// `percpu_refill` of `mm_page_alloc_zone_locked`.
    pub percpu_refill: bool,
}

impl Event {
    /// An event with no block yet: no pfn, order 0, no migratetype or GFP
    /// mask, no refill.
    pub fn new(line: u64, ts_ns: u64, cpu: u16, kind: EventKind) -> Event {
        Event {
            line,
            ts_ns,
            cpu,
            kind,
            pfn: None,
            order: 0,
            migratetype: -1,
            gfp: Gfp::default(),
            percpu_refill: false,
        }
    }
}

/// A trace that cannot be read: where, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError {
    /// The line (text) or record (recording) it is about; 0 for the file
    /// as a whole.
    pub line: u64,
    /// What is wrong.
    pub message: String,
}

impl TraceError {
    /// An error about line `line`.
    pub fn at(line: u64, message: impl Into<String>) -> TraceError {
        TraceError {
            line,
            message: message.into(),
        }
    }

    /// An error about the whole file.
    pub fn file(message: impl Into<String>) -> TraceError {
        TraceError::at(0, message)
    }
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            f.write_str(&self.message)
        } else {
            write!(f, "line {}: {}", self.line, self.message)
        }
    }
}

impl std::error::Error for TraceError {}
