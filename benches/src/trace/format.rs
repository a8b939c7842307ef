//! Reading traces: the kernel's text or pfnlab's recording format, both
//! streamed, with the events put back in timestamp order.
//!
//! **The recording format, version 1.** Optionally compressed as one zstd
//! stream (recognised by its magic number, written when the file name ends
//! in `.zst`). Inside:
//! 1. the line `pfnlab-trace 1`;
//! 2. one line of JSON, the [`Header`]: kernel version, page size, CPU
//!    count, the host's layout as a layout file (TOML), the command
//!    recorded, the seconds it ran and the events lost per CPU, and,
//!    recorded with `--snapshot`, the machine's snapshots from just before
//!    and just after (fields a reader without them skips);
//! 3. the events, [`RECORD_BYTES`] each, little-endian: timestamp in ns
//!    (u64), pfn (u64; all ones for a failed allocation), GFP mask (u32),
//!    CPU (u16), event code (u8, [`EventKind::code`]), order (u8),
//!    migratetype (i8), flags (u8; bit 0 `percpu_refill`).
//!
//! A file that is neither is read as the kernel's text.

use std::collections::VecDeque;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use buddy::Gfp;
use serde::{Deserialize, Serialize};

use super::blocks::TextBlocks;
use super::{Event, EventKind, TraceError};

/// The first line of a recording.
pub const MAGIC: &str = "pfnlab-trace 1";
/// The format's version.
pub const VERSION: u32 = 1;
/// Bytes per event record.
pub const RECORD_BYTES: usize = 26;
/// zstd's frame magic, little-endian.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
/// How far out of order events may arrive and still be sorted back (the
/// kernel's merged `trace` and `trace_pipe` output is in order; a text
/// trace pasted together from per-CPU pipes is not, and is refused).
pub const REORDER_WINDOW: usize = 4096;

/// What a recording says about where it was made.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Header {
    /// `uname -r` of the recording kernel.
    pub kernel: String,
    /// The host's page size in bytes.
    pub page_size: u64,
    /// Online CPUs when recorded.
    pub cpus: u32,
    /// The host's memory layout as a layout file (TOML), if it could be
    /// read.
    pub layout: Option<String>,
    /// The command recorded, or `None` for a timed recording.
    pub command: Option<String>,
    /// How long the recording ran.
    pub seconds: f64,
    /// Events the kernel dropped, per CPU (its ring buffers' overruns).
    pub lost_events: Vec<u64>,
    /// The machine's snapshot ([`crate::snapshot::Snapshot`], as its
    /// file's text) taken just before tracing began, with `trace record
    /// --snapshot`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_start: Option<String>,
    /// The same, taken just after tracing stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_end: Option<String>,
}

/// Writes `events` (in timestamp order) as a recording; zstd-compressed
/// when `path` ends in `.zst`.
pub fn write_recording(path: &Path, header: &Header, events: &[Event]) -> io::Result<()> {
    let mut w = RecordingWriter::create(path, header)?;
    for e in events {
        w.write(e)?;
    }
    w.finish()
}

/// A recording written event by event (in timestamp order).
pub struct RecordingWriter {
    out: Box<dyn Write>,
}

impl RecordingWriter {
    /// Creates `path` and writes the magic line and `header`;
    /// zstd-compressed when `path` ends in `.zst`.
    pub fn create(path: &Path, header: &Header) -> io::Result<RecordingWriter> {
        let file = io::BufWriter::new(File::create(path)?);
        let compressed = path.extension().is_some_and(|e| e == "zst");
        let mut out: Box<dyn Write> = if compressed {
            Box::new(zstd::Encoder::new(file, 9)?.auto_finish())
        } else {
            Box::new(file)
        };
        writeln!(out, "{MAGIC}")?;
        serde_json::to_writer(&mut out, header)?;
        writeln!(out)?;
        Ok(RecordingWriter { out })
    }

    /// Appends one event.
    pub fn write(&mut self, e: &Event) -> io::Result<()> {
        self.out.write_all(&encode(e))
    }

    /// Flushes and closes the file (the zstd stream's end included).
    pub fn finish(mut self) -> io::Result<()> {
        self.out.flush()
    }
}

fn encode(e: &Event) -> [u8; RECORD_BYTES] {
    let mut r = [0u8; RECORD_BYTES];
    r[0..8].copy_from_slice(&e.ts_ns.to_le_bytes());
    r[8..16].copy_from_slice(&e.pfn.unwrap_or(u64::MAX).to_le_bytes());
    r[16..20].copy_from_slice(&e.gfp.bits().to_le_bytes());
    r[20..22].copy_from_slice(&e.cpu.to_le_bytes());
    r[22] = e.kind.code();
    r[23] = e.order;
    r[24] = e.migratetype.to_le_bytes()[0];
    r[25] = u8::from(e.percpu_refill);
    r
}

fn decode(r: &[u8; RECORD_BYTES], line: u64) -> Result<Event, TraceError> {
    let u64_at = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&r[i..i + 8]);
        u64::from_le_bytes(b)
    };
    let gfp = u32::from_le_bytes([r[16], r[17], r[18], r[19]]);
    let kind = EventKind::from_code(r[22])
        .ok_or_else(|| TraceError::at(line, format!("unknown event code {}", r[22])))?;
    if r[25] > 1 {
        return Err(TraceError::at(line, format!("unknown flags {:#x}", r[25])));
    }
    let pfn = u64_at(8);
    Ok(Event {
        line,
        ts_ns: u64_at(0),
        cpu: u16::from_le_bytes([r[20], r[21]]),
        kind,
        pfn: (pfn != u64::MAX).then_some(pfn),
        order: r[23],
        migratetype: i8::from_le_bytes([r[24]]),
        gfp: Gfp::from_bits(gfp)
            .ok_or_else(|| TraceError::at(line, format!("unknown GFP bits {gfp:#x}")))?,
        percpu_refill: r[25] == 1,
    })
}

/// Counts a reader keeps besides the events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReadCounts {
    /// Lines of other events, skipped.
    pub unknown_events: u64,
    /// Malformed lines skipped (only with `skip_bad`).
    pub bad_lines: u64,
}

/// An input the reader may hand to its parsing thread.
pub type Input = Box<dyn BufRead + Send>;

enum Source {
    /// The kernel's text, parsed on threads of their own (started on the
    /// first read) while the caller replays: parsing text costs more than
    /// replaying it.
    Text(TextBlocks),
    Recording {
        input: Input,
        record: u64,
    },
}

/// Opens the trace afresh for each pass.
pub type OpenTrace<'a> = &'a (dyn Fn() -> Result<TraceReader, TraceError> + Sync);

/// A streamed trace: events in timestamp order (sorted back within
/// [`REORDER_WINDOW`] events), parse errors with their line.
pub struct TraceReader {
    source: Source,
    header: Option<Header>,
    skip_bad: bool,
    counts: ReadCounts,
    /// Events read ahead, sorted by (timestamp, line): in-order input
    /// appends at the back, so sorting costs nothing for it.
    pending: VecDeque<Event>,
    last_ts: u64,
    done: bool,
}

impl TraceReader {
    /// Opens `path`: a recording (compressed or not) or the kernel's text.
    pub fn open(path: &Path) -> Result<TraceReader, TraceError> {
        let file = File::open(path)
            .map_err(|e| TraceError::file(format!("cannot open {}: {e}", path.display())))?;
        TraceReader::from_reader(Box::new(BufReader::with_capacity(1 << 16, file)))
    }

    /// Reads a trace from `input`.
    pub fn from_reader(mut input: Input) -> Result<TraceReader, TraceError> {
        let head = input.fill_buf().map_err(io_error)?;
        if head.is_empty() {
            return Err(TraceError::file("the trace is empty"));
        }
        if head.starts_with(&ZSTD_MAGIC) {
            let decoder = zstd::Decoder::with_buffer(input).map_err(io_error)?;
            let mut inner: Input = Box::new(BufReader::with_capacity(1 << 16, decoder));
            if !inner
                .fill_buf()
                .map_err(io_error)?
                .starts_with(MAGIC.as_bytes())
            {
                return Err(TraceError::file(
                    "a zstd file that is not a pfnlab recording",
                ));
            }
            return TraceReader::recording(inner);
        }
        if head.starts_with(MAGIC.as_bytes()) {
            return TraceReader::recording(input);
        }
        Ok(TraceReader::new(Source::Text(TextBlocks::new(input)), None))
    }

    fn new(source: Source, header: Option<Header>) -> TraceReader {
        TraceReader {
            source,
            header,
            skip_bad: false,
            counts: ReadCounts::default(),
            pending: VecDeque::new(),
            last_ts: 0,
            done: false,
        }
    }

    fn recording(mut input: Input) -> Result<TraceReader, TraceError> {
        let mut magic = String::new();
        input.read_line(&mut magic).map_err(io_error)?;
        if magic.trim_end() != MAGIC {
            return Err(TraceError::file(format!(
                "not a version-{VERSION} pfnlab recording (first line `{}`)",
                magic.trim_end()
            )));
        }
        let mut json = String::new();
        input.read_line(&mut json).map_err(io_error)?;
        let header: Header = serde_json::from_str(&json)
            .map_err(|e| TraceError::file(format!("the recording's header: {e}")))?;
        Ok(TraceReader::new(
            Source::Recording { input, record: 0 },
            Some(header),
        ))
    }

    /// Skip malformed lines (counted in [`TraceReader::counts`]) instead of
    /// failing on the first.
    pub fn skip_bad(mut self, skip: bool) -> TraceReader {
        self.skip_bad = skip;
        self
    }

    /// The recording's header (`None` for a text trace).
    pub fn header(&self) -> Option<&Header> {
        self.header.as_ref()
    }

    /// What was skipped so far.
    pub fn counts(&self) -> ReadCounts {
        self.counts
    }

    /// The next event in file order, before reordering.
    fn next_raw(&mut self) -> Option<Result<Event, TraceError>> {
        match &mut self.source {
            Source::Text(text) => {
                let next = text.next_event(self.skip_bad);
                if next.is_none() {
                    self.counts = text.counts();
                }
                next
            }
            Source::Recording { input, record } => {
                let mut r = [0u8; RECORD_BYTES];
                let mut got = 0;
                while got < RECORD_BYTES {
                    match input.read(&mut r[got..]) {
                        Ok(0) if got == 0 => return None,
                        Ok(0) => {
                            return Some(Err(TraceError::at(
                                *record + 1,
                                format!(
                                    "truncated: the file ends {got} bytes into a {RECORD_BYTES}-byte record"
                                ),
                            )));
                        }
                        Ok(n) => got += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            return Some(Err(TraceError::at(
                                *record + 1,
                                format!("cannot read the record ({e}); is the file truncated?"),
                            )));
                        }
                    }
                }
                *record += 1;
                Some(decode(&r, *record))
            }
        }
    }
}

/// An event that arrived further out of order than [`REORDER_WINDOW`]
/// events, after one at `last_ts` was handed on.
fn out_of_order(e: &Event, last_ts: u64) -> TraceError {
    TraceError::at(
        e.line,
        format!(
            "timestamp {} ns is earlier than one already replayed ({last_ts} ns): events more than {REORDER_WINDOW} apart are out of order",
            e.ts_ns
        ),
    )
}

/// The iterator's reordering over one growing vector, for reading a
/// whole trace: its last (up to [`REORDER_WINDOW`]) events are the
/// window, sorted by (timestamp, line), and everything before it has been
/// handed on. An event is inserted, and the window's first handed on once
/// the window is full, exactly when the iterator would; so the same
/// events come out in the same order and the same error stops them. In
/// order, as the kernel's merged output is, an event costs a compare and
/// a push.
struct Sorted {
    events: Vec<Event>,
    /// Where the window starts.
    window: usize,
    last_ts: u64,
}

impl Sorted {
    fn push(&mut self, e: Event) -> Result<(), TraceError> {
        let key = |e: &Event| (e.ts_ns, e.line);
        if self.events.last().is_none_or(|b| key(b) <= key(&e)) {
            self.events.push(e);
        } else {
            let at =
                self.window + self.events[self.window..].partition_point(|p| key(p) <= key(&e));
            self.events.insert(at, e);
        }
        if self.events.len() - self.window == REORDER_WINDOW {
            self.hand_on()?;
        }
        Ok(())
    }

    /// Hands on the window's first event.
    fn hand_on(&mut self) -> Result<(), TraceError> {
        let e = &self.events[self.window];
        if e.ts_ns < self.last_ts {
            return Err(out_of_order(e, self.last_ts));
        }
        self.last_ts = e.ts_ns;
        self.window += 1;
        Ok(())
    }

    /// Every event, once the rest of the window is handed on.
    fn finish(mut self) -> Result<Vec<Event>, TraceError> {
        while self.window < self.events.len() {
            self.hand_on()?;
        }
        Ok(self.events)
    }
}

impl TraceReader {
    /// Every event still to come, in the iterator's order, and what was
    /// skipped: what collecting the iterator gives (the same events, or
    /// the same first error), read in whole blocks rather than one event
    /// at a time.
    pub fn read_all(mut self) -> Result<(Vec<Event>, ReadCounts), TraceError> {
        let mut sorted = Sorted {
            events: self.pending.drain(..).collect(),
            window: 0,
            last_ts: self.last_ts,
        };
        if !self.done {
            match &mut self.source {
                Source::Text(text) => {
                    while let Some(block) = text.next_batch(self.skip_bad) {
                        for e in block? {
                            sorted.push(e)?;
                        }
                    }
                    self.counts = text.counts();
                }
                Source::Recording { .. } => {
                    while let Some(e) = self.next_raw() {
                        sorted.push(e?)?;
                    }
                }
            }
        }
        Ok((sorted.finish()?, self.counts))
    }
}

impl Iterator for TraceReader {
    type Item = Result<Event, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        let key = |e: &Event| (e.ts_ns, e.line);
        while !self.done && self.pending.len() < REORDER_WINDOW {
            match self.next_raw() {
                Some(Ok(e)) => {
                    if self.pending.back().is_none_or(|b| key(b) <= key(&e)) {
                        self.pending.push_back(e);
                    } else {
                        let at = self.pending.partition_point(|p| key(p) <= key(&e));
                        self.pending.insert(at, e);
                    }
                }
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(e));
                }
                None => self.done = true,
            }
        }
        let e = self.pending.pop_front()?;
        if e.ts_ns < self.last_ts {
            self.done = true;
            self.pending.clear();
            return Some(Err(out_of_order(&e, self.last_ts)));
        }
        self.last_ts = e.ts_ns;
        Some(Ok(e))
    }
}

fn io_error(e: io::Error) -> TraceError {
    TraceError::file(e.to_string())
}

/// A text trace that could not be converted; the partial output is gone.
#[derive(Debug)]
pub enum ConvertError {
    /// The input cannot be read, or a line of it is malformed.
    Read {
        /// The input.
        input: PathBuf,
        /// Where and why.
        source: TraceError,
    },
    /// The input is a recording already.
    AlreadyRecording {
        /// The input.
        input: PathBuf,
    },
    /// The output cannot be written.
    Write {
        /// The output.
        output: PathBuf,
        /// Why.
        source: io::Error,
    },
}

impl fmt::Display for ConvertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConvertError::Read { input, source } => write!(f, "{}: {source}", input.display()),
            ConvertError::AlreadyRecording { input } => {
                write!(f, "{} is a recording already", input.display())
            }
            ConvertError::Write { output, source } => {
                write!(f, "cannot write {}: {source}", output.display())
            }
        }
    }
}

impl std::error::Error for ConvertError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConvertError::Read { source, .. } => Some(source),
            ConvertError::AlreadyRecording { .. } => None,
            ConvertError::Write { source, .. } => Some(source),
        }
    }
}

/// Converts the text trace at `input` into a recording at `output`,
/// streamed, with `layout` in its header; returns the events written. A
/// failure removes the partial output.
pub fn convert(
    input: &Path,
    output: &Path,
    layout: Option<&sparsemem::Layout>,
    skip_bad: bool,
) -> Result<u64, ConvertError> {
    let read = |source| ConvertError::Read {
        input: input.to_owned(),
        source,
    };
    let write = |source| ConvertError::Write {
        output: output.to_owned(),
        source,
    };
    let reader = TraceReader::open(input).map_err(read)?.skip_bad(skip_bad);
    if reader.header().is_some() {
        return Err(ConvertError::AlreadyRecording {
            input: input.to_owned(),
        });
    }
    let header = Header {
        kernel: String::new(),
        page_size: layout.map_or(4096, |l| 1 << l.geometry().page_shift()),
        cpus: 0,
        layout: layout.map(sparsemem::Layout::to_toml),
        command: Some(format!("converted from {}", input.display())),
        seconds: 0.0,
        lost_events: Vec::new(),
        snapshot_start: None,
        snapshot_end: None,
    };
    let written = (|| {
        let mut w = RecordingWriter::create(output, &header).map_err(write)?;
        let mut n = 0;
        for e in reader {
            w.write(&e.map_err(read)?).map_err(write)?;
            n += 1;
        }
        w.finish().map_err(write)?;
        Ok(n)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(output);
    }
    written
}
