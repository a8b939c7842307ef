//! The kernel's text parsed on several threads, handed back in file order.
//!
//! Parsing a line of text costs more than replaying its event, and a
//! large trace is millions of lines, so a pool of parsers (one per CPU)
//! take turns reading the input in blocks of whole lines
//! ([`BLOCK_BYTES`], small enough to stay in the parser's own cache while
//! it parses them), each parses its block into events, and the consumer —
//! the [`TraceReader`](super::format::TraceReader) — takes the blocks
//! back in the order they were read. A parser numbers its block's lines
//! from 1; the consumer adds the lines of the blocks before it, so every
//! event and every error names its line in the file, as a single parser
//! would.
//!
//! Memory stays bounded whatever the trace's size: a parser reads a block
//! only while fewer than [`BLOCKS_IN_FLIGHT`] per parser are read and not
//! yet taken by the consumer.
//!
//! Stopping: the consumer marks the pool stopped (at the end of the
//! trace, at an error, or when it is dropped), drops its end of the
//! channel and joins every thread; a parser returns at its next turn. A
//! parser that panics while parsing reports it as its block's error
//! instead of leaving a hole the consumer would wait on.

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use super::format::{Input, ReadCounts};
use super::text::{GfpCache, Line, parse_bytes};
use super::{Event, TraceError};

/// Bytes a block holds, up to its last whole line: about two thousand
/// lines, so handing a block over costs nothing beside parsing it, and
/// small enough to stay in the parser's cache while it parses them.
pub const BLOCK_BYTES: usize = 256 << 10;

/// Blocks read and not yet taken by the consumer, at most, per parser.
pub const BLOCKS_IN_FLIGHT: usize = 4;

/// Parsers at most, whatever the CPUs: beyond a few, the consumer taking
/// the events in order is the limit.
pub const MAX_PARSERS: usize = 8;

/// A block parsed.
struct Parsed {
    seq: u64,
    /// Its events, their lines counted from the block's first.
    events: Vec<Event>,
    /// Lines the block holds.
    lines: u64,
    counts: ReadCounts,
    /// What stopped the parse (its line counted from the block's first).
    error: Option<TraceError>,
}

/// What the parsers tell the consumer.
enum Msg {
    Parsed(Parsed),
    /// The input ended (or failed) after this many blocks.
    End(u64),
}

/// Parses `bytes` (whole lines; the last may lack its newline).
fn parse_block(bytes: &[u8], skip_bad: bool, gfp: &mut GfpCache) -> Parsed {
    let mut events = Vec::with_capacity(bytes.len() / 128);
    let mut counts = ReadCounts::default();
    let mut line = 0u64;
    let mut rest = bytes;
    while !rest.is_empty() {
        let end = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
        line += 1;
        match parse_bytes(&rest[..end], line, gfp) {
            Ok(Line::Event(e)) => events.push(e),
            Ok(Line::Other) => counts.unknown_events += 1,
            Ok(Line::Blank) => {}
            Err(_) if skip_bad => counts.bad_lines += 1,
            Err(e) => {
                return Parsed {
                    seq: 0,
                    events,
                    lines: line,
                    counts,
                    error: Some(e),
                };
            }
        }
        rest = &rest[(end + 1).min(rest.len())..];
    }
    Parsed {
        seq: 0,
        events,
        lines: line,
        counts,
        error: None,
    }
}

/// Fills `buf` (kept at [`BLOCK_BYTES`] or more, and read into
/// directly) with `carry`, the end of the last block's last line, then
/// from the input, and cuts it after its last newline, moving what
/// follows to `carry`; returns the block's length. `Ok(0)`: the input has
/// ended. A failed read hands over the whole lines read before it, with
/// the error.
fn fill_block(
    input: &mut Input,
    buf: &mut Vec<u8>,
    carry: &mut Vec<u8>,
) -> Result<usize, (usize, io::Error)> {
    let size = buf.len().max(BLOCK_BYTES).max(carry.len() * 2);
    buf.resize(size, 0);
    let mut len = carry.len();
    buf[..len].copy_from_slice(carry);
    carry.clear();
    let cut = |buf: &[u8], len: usize, carry: &mut Vec<u8>| {
        let whole = memchr::memrchr(b'\n', &buf[..len]).map_or(0, |i| i + 1);
        carry.extend_from_slice(&buf[whole..len]);
        whole
    };
    loop {
        if len == buf.len() {
            let whole = cut(buf, len, carry);
            if whole > 0 {
                return Ok(whole);
            }
            // One line longer than the buffer: make room for it.
            buf.resize(len * 2, 0);
            len = carry.len();
            buf[..len].copy_from_slice(carry);
            carry.clear();
        }
        match input.read(&mut buf[len..]) {
            Ok(0) => return Ok(len),
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err((cut(buf, len, carry), e)),
        }
    }
}

/// What the parsers share: the input, and whose turn it is to read.
struct SharedInput {
    input: Input,
    /// The end of the last block's last line, for the next block.
    carry: Vec<u8>,
    /// Blocks read so far.
    seq: u64,
    /// Blocks read and not yet taken by the consumer.
    in_flight: usize,
    /// The input has ended or failed: no more blocks.
    done: bool,
    /// The consumer has gone: every parser returns.
    stopped: bool,
}

/// The shared input and the condition a parser waits on for its turn
/// (a block taken by the consumer, or the pool stopped).
type Shared = (Mutex<SharedInput>, Condvar);

/// A parser's turn: the next block read into `buf`, with its place, its
/// length and the read error that ended the input after it; `None` when
/// there are no more blocks (or the pool stopped).
fn read_turn(
    shared: &Shared,
    buf: &mut Vec<u8>,
    limit: usize,
    out: &Sender<Msg>,
) -> Option<(u64, usize, Option<String>)> {
    let (lock, turn) = shared;
    let mut s = lock.lock().ok()?;
    while !s.stopped && !s.done && s.in_flight >= limit {
        s = turn.wait(s).ok()?;
    }
    if s.stopped || s.done {
        return None;
    }
    let s = &mut *s;
    let (len, read_error) = match fill_block(&mut s.input, buf, &mut s.carry) {
        Ok(0) => {
            s.done = true;
            let _ = out.send(Msg::End(s.seq));
            return None;
        }
        Ok(len) => (len, None),
        Err((len, e)) => {
            s.done = true;
            let _ = out.send(Msg::End(s.seq + 1));
            (len, Some(e.to_string()))
        }
    };
    let seq = s.seq;
    s.seq += 1;
    s.in_flight += 1;
    Some((seq, len, read_error))
}

/// A parser: reads a block in its turn and parses it, until the input
/// ends or the pool stops.
fn parser(shared: &Shared, limit: usize, out: &Sender<Msg>, skip_bad: bool) {
    let mut gfp = GfpCache::default();
    let mut buf = Vec::new();
    while let Some((seq, len, read_error)) = read_turn(shared, &mut buf, limit, out) {
        let parsed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            parse_block(&buf[..len], skip_bad, &mut gfp)
        }));
        let mut parsed = parsed.unwrap_or_else(|_| Parsed {
            seq: 0,
            events: Vec::new(),
            lines: 0,
            counts: ReadCounts::default(),
            error: Some(TraceError::at(1, "parsing this block panicked")),
        });
        if parsed.error.is_none()
            && let Some(message) = read_error
        {
            parsed.error = Some(TraceError::at(parsed.lines + 1, message));
        }
        parsed.seq = seq;
        if out.send(Msg::Parsed(parsed)).is_err() {
            return;
        }
    }
}

/// The running parsers and the consumer's end of their channel.
struct Running {
    results: Receiver<Msg>,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

/// The kernel's text as events in file order, parsed on a pool of threads
/// started on the first read; see the module documentation.
pub struct TextBlocks {
    /// The input, until the threads start.
    input: Option<Input>,
    running: Option<Running>,
    /// Blocks parsed ahead of their turn, by place.
    early: BTreeMap<u64, Parsed>,
    /// The next block's place.
    next_seq: u64,
    /// Blocks in the input, once a parser has seen its end.
    end: Option<u64>,
    /// Lines of every block taken.
    lines_taken: u64,
    /// What [`TextBlocks::next_event`] has not handed on of the last block.
    events: std::vec::IntoIter<Event>,
    /// The error that ended the last block's parse, still to be handed on.
    error: Option<TraceError>,
    counts: ReadCounts,
}

impl TextBlocks {
    /// The text that `input` reads, not yet started.
    pub fn new(input: Input) -> TextBlocks {
        TextBlocks {
            input: Some(input),
            running: None,
            early: BTreeMap::new(),
            next_seq: 0,
            end: None,
            lines_taken: 0,
            events: Vec::new().into_iter(),
            error: None,
            counts: ReadCounts::default(),
        }
    }

    /// What the blocks taken so far skipped.
    pub fn counts(&self) -> ReadCounts {
        self.counts
    }

    /// Starts one parser per CPU, up to [`MAX_PARSERS`].
    fn start(&mut self, input: Input, skip_bad: bool) -> Running {
        let parsers = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(MAX_PARSERS);
        let (out, results) = channel();
        let shared = Arc::new((
            Mutex::new(SharedInput {
                input,
                carry: Vec::new(),
                seq: 0,
                in_flight: 0,
                done: false,
                stopped: false,
            }),
            Condvar::new(),
        ));
        let threads = (0..parsers)
            .map(|_| {
                let (shared, out) = (Arc::clone(&shared), out.clone());
                let limit = parsers * BLOCKS_IN_FLIGHT;
                std::thread::spawn(move || parser(&shared, limit, &out, skip_bad))
            })
            .collect();
        Running {
            results,
            shared,
            threads,
        }
    }

    /// The next block in file order, or `None` at the end. Parsers gone
    /// before the end (a panic while reading) are an error at the next
    /// line.
    fn next_block(&mut self) -> Option<Parsed> {
        let running = self.running.as_ref()?;
        loop {
            if self.end == Some(self.next_seq) {
                return None;
            }
            if let Some(p) = self.early.remove(&self.next_seq) {
                self.next_seq += 1;
                // Its room goes to the next block a parser reads.
                let (lock, turn) = &*running.shared;
                if let Ok(mut s) = lock.lock() {
                    s.in_flight -= 1;
                }
                turn.notify_one();
                return Some(p);
            }
            match running.results.recv() {
                Ok(Msg::Parsed(p)) => {
                    self.early.insert(p.seq, p);
                }
                Ok(Msg::End(n)) => self.end = Some(n),
                Err(_) => {
                    self.end = Some(self.next_seq);
                    return Some(Parsed {
                        seq: self.next_seq,
                        events: Vec::new(),
                        lines: 0,
                        counts: ReadCounts::default(),
                        error: Some(TraceError::at(
                            1,
                            "the trace's parsers stopped before its end",
                        )),
                    });
                }
            }
        }
    }

    /// Stops the parsers (each returns at its next turn, or at its next
    /// send now that the channel is closed) and joins them.
    fn stop(&mut self) {
        if let Some(running) = self.running.take() {
            let (lock, turn) = &*running.shared;
            if let Ok(mut s) = lock.lock() {
                s.stopped = true;
            }
            turn.notify_all();
            drop(running.results);
            for t in running.threads {
                // What a parser had to say came through the channel.
                let _ = t.join();
            }
        }
        self.early.clear();
    }

    /// The next event in file order, with `skip_bad` telling the parsers
    /// (when they start) to count and skip malformed lines.
    pub fn next_event(&mut self, skip_bad: bool) -> Option<Result<Event, TraceError>> {
        loop {
            if let Some(e) = self.events.next() {
                return Some(Ok(e));
            }
            match self.next_batch(skip_bad)? {
                Ok(events) => self.events = events.into_iter(),
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// The next block's events in file order (their lines counted from
    /// the file's first), after any [`TextBlocks::next_event`] left of
    /// the last; then, once, the error that ended the parse; `None` at the
    /// end.
    pub fn next_batch(&mut self, skip_bad: bool) -> Option<Result<Vec<Event>, TraceError>> {
        if let Some(input) = self.input.take() {
            self.running = Some(self.start(input, skip_bad));
        }
        if !self.events.as_slice().is_empty() {
            return Some(Ok(std::mem::take(&mut self.events).collect()));
        }
        if let Some(e) = self.error.take() {
            self.stop();
            return Some(Err(e));
        }
        let Some(block) = self.next_block() else {
            self.stop();
            return None;
        };
        let before = self.lines_taken;
        self.lines_taken += block.lines;
        self.error = block
            .error
            .map(|e| TraceError::at(e.line + before, e.message));
        self.counts.unknown_events += block.counts.unknown_events;
        self.counts.bad_lines += block.counts.bad_lines;
        let mut events = block.events;
        for e in &mut events {
            e.line += before;
        }
        Some(Ok(events))
    }
}

impl Drop for TextBlocks {
    fn drop(&mut self) {
        self.stop();
    }
}
