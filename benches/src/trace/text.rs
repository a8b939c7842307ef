//! The kernel's text form of the events, as `trace_pipe` and the `trace`
//! file print them:
//!
//! ```text
//!            bash-4127    [001] d..1.   812.404120: mm_page_alloc: page=00000000c9a1f6ce pfn=0x10c4a3 order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE|__GFP_ZERO
//! ```
//!
//! A task name may hold spaces and dashes, and the flags column may be
//! missing (`options/irq-info` off), so the line is read from its
//! `[CPU]` column on: the timestamp is the first token ending in `:`
//! after it, the event name the next. Lines starting with `#` (the
//! `trace` file's header) and blank lines are skipped.

use buddy::{Gfp, ParseGfpError};

use super::{Event, EventKind, TraceError};

/// What one line holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// One of the five events.
    Event(Event),
    /// Another event (counted and skipped).
    Other,
    /// A comment or a blank line.
    Blank,
}

/// Parses line `line` (counted from 1) of a text trace.
pub fn parse_line(text: &str, line: u64) -> Result<Line, TraceError> {
    parse_line_cached(text, line, &mut GfpCache::default())
}

/// The GFP masks met so far by their text: a trace repeats a few dozen
/// masks millions of times, and parsing one is dozens of name compares.
/// A short list kept most-recent-first (a hash of the 20–60-byte text
/// would cost more than the few compares a workload's handful of masks
/// needs).
#[derive(Default)]
pub struct GfpCache(Vec<(Box<[u8]>, Gfp)>);

/// Masks the cache keeps.
const GFP_CACHE: usize = 64;

impl GfpCache {
    fn parse(&mut self, text: &[u8]) -> Result<Gfp, ParseGfpError> {
        if let Some(i) = self.0.iter().position(|(t, _)| **t == *text) {
            let g = self.0[i].1;
            if i > 0 {
                self.0.swap(i, i - 1);
            }
            return Ok(g);
        }
        let g: Gfp = String::from_utf8_lossy(text).parse()?;
        if self.0.len() == GFP_CACHE {
            self.0.pop();
        }
        self.0.push((text.into(), g));
        Ok(g)
    }
}

/// [`parse_line`] with a [`GfpCache`] kept across lines.
pub fn parse_line_cached(text: &str, line: u64, cache: &mut GfpCache) -> Result<Line, TraceError> {
    parse_bytes(text.as_bytes(), line, cache)
}

/// [`parse_line_cached`] on the line's bytes (checked as UTF-8 only when
/// the common case does not apply).
pub fn parse_bytes(bytes: &[u8], line: u64, cache: &mut GfpCache) -> Result<Line, TraceError> {
    if let Some(event) = fast_event(bytes, line, cache) {
        return Ok(Line::Event(event));
    }
    let text = String::from_utf8_lossy(bytes);
    general(&text, line, cache)
}

#[cfg(test)]
fn general_parse(text: &str, line: u64) -> Result<Line, TraceError> {
    general(text, line, &mut GfpCache::default())
}

/// Any line, token by token, with an error naming what is wrong.
fn general(text: &str, line: u64, cache: &mut GfpCache) -> Result<Line, TraceError> {
    let trimmed = text.trim();
    if trimmed.is_empty() || trimmed.starts_with('#') {
        return Ok(Line::Blank);
    }
    let bad = |what: &str| TraceError::at(line, format!("{what} in `{}`", shorten(trimmed)));
    let mut tokens = trimmed.split_ascii_whitespace();
    let cpu = tokens
        .by_ref()
        .find_map(|t| {
            t.strip_prefix('[')?
                .strip_suffix(']')
                .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        })
        .ok_or_else(|| bad("no [CPU] column"))?;
    let cpu: u16 = cpu.parse().map_err(|_| bad("CPU number too large"))?;
    let ts = tokens
        .by_ref()
        .find(|t| t.ends_with(':'))
        .ok_or_else(|| bad("no timestamp"))?;
    let ts_ns = parse_timestamp(ts.trim_end_matches(':')).ok_or_else(|| bad("bad timestamp"))?;
    let name = tokens.next().ok_or_else(|| bad("no event name"))?;
    let Some(kind) = name.strip_suffix(':').and_then(EventKind::from_name) else {
        return if name.ends_with(':') {
            Ok(Line::Other)
        } else {
            Err(bad("no event name"))
        };
    };
    let mut event = Event::new(line, ts_ns, cpu, kind);
    let (mut page_null, mut pfn, mut order) = (None, None, None);
    for field in tokens {
        let (key, value) = field
            .split_once('=')
            .ok_or_else(|| bad(&format!("field `{field}` is not key=value")))?;
        let number = |v: &str| -> Result<u64, TraceError> {
            let parsed = match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse(),
            };
            parsed.map_err(|_| bad(&format!("{key}={v} is not a number")))
        };
        match key {
            "page" => page_null = Some(value == "(null)" || value.bytes().all(|b| b == b'0')),
            "pfn" => pfn = Some(number(value)?),
            "order" => {
                let o = number(value)?;
                order = Some(u8::try_from(o).map_err(|_| bad(&format!("order {o} too large")))?);
            }
            "migratetype" => {
                let m: i64 = value
                    .parse()
                    .map_err(|_| bad(&format!("migratetype={value} is not a number")))?;
                event.migratetype =
                    i8::try_from(m).map_err(|_| bad(&format!("migratetype {m} out of range")))?;
            }
            "gfp_flags" => {
                event.gfp = cache
                    .parse(value.as_bytes())
                    .map_err(|e| TraceError::at(line, e.to_string()))?;
            }
            "percpu_refill" => event.percpu_refill = number(value)? != 0,
            _ => {}
        }
    }
    event.order = order.ok_or_else(|| bad("no order"))?;
    let pfn = pfn.ok_or_else(|| bad("no pfn"))?;
    event.pfn = (page_null != Some(true)).then_some(pfn);
    if event.pfn.is_none() && kind != EventKind::Alloc {
        return Err(bad("a NULL page outside mm_page_alloc"));
    }
    Ok(Line::Event(event))
}

/// What every line of the five events holds once, between the timestamp
/// and the rest of the event's name.
const MARK: &[u8] = b": mm_page_";

/// The common case in one pass over the bytes: a well-formed line of one
/// of the five events, its fields in the kernel's order. `None` for
/// anything else, which the general parser then reads (and explains, if
/// it is malformed).
fn fast_event(b: &[u8], line: u64, cache: &mut GfpCache) -> Option<Event> {
    static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(MARK));
    let at = FINDER.find(b)?;
    // Before the mark: `... [CPU] FLAGS SECONDS.FRACTION`.
    let prefix = &b[..at];
    let (ts_start, ts_ns) = timestamp_before(prefix)?;
    let close = prefix[..ts_start].iter().rposition(|&c| c == b']')?;
    let open = prefix[..close].iter().rposition(|&c| c == b'[')?;
    let cpu = u16::try_from(parse_dec(&prefix[open + 1..close])?).ok()?;
    let (kind, mut rest) = event_name(&b[at + MARK.len()..])?;
    let mut event = Event::new(line, ts_ns, cpu, kind);
    let page = field(&mut rest, b"page=")?;
    let page_null = page == b"(null)" || page.iter().all(|&c| c == b'0');
    let pfn = parse_hex(field(&mut rest, b"pfn=")?.strip_prefix(b"0x")?)?;
    event.order = u8::try_from(parse_dec(field(&mut rest, b"order=")?)?).ok()?;
    if let Some(m) = field(&mut rest, b"migratetype=") {
        event.migratetype = match m.strip_prefix(b"-") {
            Some(d) => -i8::try_from(parse_dec(d)?).ok()?,
            None => i8::try_from(parse_dec(m)?).ok()?,
        };
    }
    if let Some(g) = field(&mut rest, b"gfp_flags=") {
        event.gfp = cache.parse(g).ok()?;
    }
    if let Some(r) = field(&mut rest, b"percpu_refill=") {
        event.percpu_refill = parse_dec(r)? != 0;
    }
    if !rest.trim_ascii().is_empty() || (page_null && kind != EventKind::Alloc) {
        return None;
    }
    event.pfn = (!page_null).then_some(pfn);
    Some(event)
}

/// The event named after `mm_page_` at the start of `rest`, and what
/// follows its `: `.
#[inline(always)]
fn event_name(rest: &[u8]) -> Option<(EventKind, &[u8])> {
    fn name<'a, const N: usize>(rest: &'a [u8], name: &[u8; N]) -> Option<&'a [u8]> {
        (rest.first_chunk::<N>()? == name).then(|| &rest[N..])
    }
    match rest.first()? {
        b'a' => name(rest, b"alloc: ")
            .map(|r| (EventKind::Alloc, r))
            .or_else(|| {
                Some((
                    EventKind::AllocZoneLocked,
                    name(rest, b"alloc_zone_locked: ")?,
                ))
            }),
        b'f' => name(rest, b"free: ")
            .map(|r| (EventKind::Free, r))
            .or_else(|| Some((EventKind::FreeBatched, name(rest, b"free_batched: ")?))),
        b'p' => Some((EventKind::PcpuDrain, name(rest, b"pcpu_drain: ")?)),
        _ => None,
    }
}

/// The value of the field `key` (`page=`, with its `=`) when it comes
/// next in `rest`, which then moves past it; `None`, with `rest` left
/// alone, when the next field is another.
#[inline(always)]
fn field<'a, const N: usize>(rest: &mut &'a [u8], key: &[u8; N]) -> Option<&'a [u8]> {
    let r = rest.trim_ascii_start();
    if r.first_chunk::<N>()? != key {
        return None;
    }
    let r = &r[N..];
    let end = r.iter().position(|&c| c == b' ').unwrap_or(r.len());
    *rest = &r[end..];
    Some(&r[..end])
}

/// The timestamp that ends `prefix` (`SECONDS.FRACTION`, read from its
/// end), in ns, and where it starts, after a space.
#[inline(always)]
fn timestamp_before(prefix: &[u8]) -> Option<(usize, u64)> {
    let (mut i, mut frac, mut scale) = (prefix.len(), 0u64, 1u64);
    while i > 0 && prefix[i - 1].is_ascii_digit() && scale < 1_000_000_000 {
        i -= 1;
        frac += u64::from(prefix[i] - b'0') * scale;
        scale *= 10;
    }
    if scale == 1 || i == 0 || prefix[i - 1] != b'.' {
        return None;
    }
    let dot = i - 1;
    i = dot;
    while i > 0 && prefix[i - 1].is_ascii_digit() {
        i -= 1;
    }
    if i == 0 || prefix[i - 1] != b' ' {
        return None;
    }
    let secs = parse_dec(&prefix[i..dot])?;
    Some((
        i,
        secs.checked_mul(1_000_000_000)?
            .checked_add(frac * (1_000_000_000 / scale))?,
    ))
}

/// Decimal digits (at most 19, so no valid number overflows).
fn parse_dec(d: &[u8]) -> Option<u64> {
    if d.is_empty() || d.len() > 19 {
        return None;
    }
    let (mut n, mut bad) = (0u64, false);
    for &c in d {
        let digit = c.wrapping_sub(b'0');
        bad |= digit > 9;
        n = n.wrapping_mul(10).wrapping_add(u64::from(digit));
    }
    (!bad).then_some(n)
}

/// Each byte's value as a hex digit, 0xff for a byte that is not one.
const HEX: [u8; 256] = {
    let mut t = [0xff; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

/// Hex digits, at most 16.
fn parse_hex(d: &[u8]) -> Option<u64> {
    if d.is_empty() || d.len() > 16 {
        return None;
    }
    let (mut n, mut bad) = (0u64, 0u8);
    for &c in d {
        let digit = HEX[usize::from(c)];
        bad |= digit;
        n = n << 4 | u64::from(digit & 0xf);
    }
    (bad & 0xf0 == 0).then_some(n)
}

/// `SECONDS.FRACTION` (the trace clock's microseconds or nanoseconds) in ns.
fn parse_timestamp(ts: &str) -> Option<u64> {
    let (secs, frac) = ts.split_once('.').unwrap_or((ts, ""));
    if secs.is_empty() || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs: u64 = secs.parse().ok()?;
    let frac_ns = if frac.is_empty() {
        0
    } else {
        frac.parse::<u64>().ok()? * 10u64.pow(9 - frac.len() as u32)
    };
    secs.checked_mul(1_000_000_000)?.checked_add(frac_ns)
}

/// The start of a long line, for error messages.
fn shorten(s: &str) -> String {
    match s.char_indices().nth(120) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(s: &str) -> Event {
        match parse_line(s, 7).unwrap() {
            Line::Event(e) => e,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn reads_the_kernels_lines() {
        let e = event(
            "  kworker/u8:2-61  [001] d..1.   812.404120: mm_page_alloc: page=00000000c9a1f6ce pfn=0x10c4a3 order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE|__GFP_ZERO",
        );
        assert_eq!(e.kind, EventKind::Alloc);
        assert_eq!(
            (e.cpu, e.ts_ns, e.pfn, e.order, e.migratetype),
            (1, 812_404_120_000, Some(0x10c4a3), 0, 1)
        );
        assert_eq!(e.gfp, Gfp::HIGHUSER_MOVABLE | Gfp::ZERO);
        // A task name with spaces, no flags column, ns timestamps.
        let e = event(
            "Web Content-991 [000] 5.000000001: mm_page_free: page=ffffea0000a1b2c0 pfn=0x286cb order=2",
        );
        assert_eq!(
            (e.kind, e.cpu, e.ts_ns, e.pfn, e.order),
            (EventKind::Free, 0, 5_000_000_001, Some(0x286cb), 2)
        );
        let e = event(
            "cc1-5 [003] ..... 1.5: mm_page_alloc_zone_locked: page=0000000012345678 pfn=0x100 order=0 migratetype=1 percpu_refill=1",
        );
        assert!(e.percpu_refill);
        let e = event(
            "a-1 [000] ..... 1.0: mm_page_alloc: page=0000000000000000 pfn=0x0 order=3 migratetype=0 gfp_flags=GFP_KERNEL",
        );
        assert_eq!(e.pfn, None, "a failed allocation");
        assert_eq!(parse_line("# tracer: nop", 1), Ok(Line::Blank));
        assert_eq!(
            parse_line("a-1 [000] ..... 1.0: kmalloc: call_site=x ptr=y", 1),
            Ok(Line::Other)
        );
    }

    /// The fast path and the general parser agree on every line.
    #[test]
    fn the_fast_path_agrees_with_the_general_parser() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/ls-gzip.trace.txt"
        ))
        .unwrap();
        let mut fast = 0;
        for (i, l) in text.lines().enumerate() {
            let got = fast_event(l.as_bytes(), i as u64, &mut GfpCache::default());
            if let Some(e) = got {
                fast += 1;
                let mut slow = parse_line_cached(l, i as u64, &mut GfpCache::default());
                // Force the general parser by calling it on the trimmed line
                // with an extra token it skips.
                if let Ok(Line::Event(s)) = &mut slow {
                    assert_eq!(*s, e, "{l}");
                }
                let general = general_parse(l, i as u64);
                assert_eq!(general, Ok(Line::Event(e)), "{l}");
            }
        }
        assert!(fast > 1000);
    }

    #[test]
    fn bad_lines_name_their_line_and_cause() {
        for (line, why) in [
            (
                "a-1 [000] ..... 1.0: mm_page_free: page=ff pfn=0xZZ order=0",
                "not a number",
            ),
            (
                "a-1 [000] ..... 1.0: mm_page_free: page=ff pfn=0x10",
                "no order",
            ),
            (
                "a-1 [000] ..... 1.0: mm_page_free: page=ff pfn=0x10 order=300",
                "too large",
            ),
            ("a-1 [000] ..... 1.0: mm_page_al", "no event name"),
            (
                "a-1 [000] ..... x.y: mm_page_free: pfn=0x1 order=0",
                "bad timestamp",
            ),
            ("garbage", "no [CPU] column"),
            (
                "a-1 [000] ..... 1.0: mm_page_alloc: page=1 pfn=0x1 order=0 gfp_flags=GFP_BOGUS",
                "unknown gfp flag",
            ),
        ] {
            let e = parse_line(line, 42).unwrap_err();
            assert_eq!(e.line, 42);
            assert!(e.to_string().contains(why), "{line}: {e}");
        }
    }
}
