//! `bench memdesc`'s rows, table and comparisons: every size against 64
//! bytes, each ratio a paired interval.

use serde::Serialize;
use sparsemem::PageSize;

use super::sweep::{MISS_FACTOR, SweepCap};
use super::{Ctx, MemdescResults, ModelRun, SizeRun};
use crate::models::ModelKind;
use crate::report::Row;
use crate::spread::{Comparison, Interval, NOISE_MARK, ratio_cell};
use crate::timing::Measurement;
use crate::units::human_bytes;

/// What a row of `bench memdesc` timed.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub enum MemdescWork {
    /// `pfn_valid` on random valid pfns of the run's layout.
    #[serde(rename = "pfn_valid")]
    PfnValid,
    /// A random `pfn_to_page` + `page_zonenum` over `params.span_pages`.
    #[serde(rename = "pfn_to_page")]
    PfnToPage,
    /// Order-0 alloc+free through a per-CPU list.
    #[serde(rename = "pcp_alloc_free")]
    Pcp,
    /// Order-0 alloc+free on the zone path: a split and the merges back.
    #[serde(rename = "split_merge")]
    SplitMerge,
    /// Per page of a 128-page bulk array allocation and its frees.
    #[serde(rename = "bulk_128")]
    Bulk128,
    /// Per event of the recording's replay.
    #[serde(rename = "replay")]
    Replay,
}

impl MemdescWork {
    /// The allocator's rows, in table order.
    const ALLOCATOR: [MemdescWork; 4] = [
        MemdescWork::Pcp,
        MemdescWork::SplitMerge,
        MemdescWork::Bulk128,
        MemdescWork::Replay,
    ];

    /// The name in tables and comparisons.
    pub fn name(self) -> &'static str {
        match self {
            MemdescWork::PfnValid => "pfn_valid",
            MemdescWork::PfnToPage => "pfn_to_page",
            MemdescWork::Pcp => "pcp alloc+free",
            MemdescWork::SplitMerge => "split+merge",
            MemdescWork::Bulk128 => "bulk-128 per page",
            MemdescWork::Replay => "replay per event",
        }
    }
}

/// A row's parameters.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct MemdescParams {
    /// `struct page` bytes.
    pub page_size: u64,
    /// The kernel era of the allocator's rows.
    pub era: &'static str,
    /// `pfn_to_page` rows: the span of pfns, in pages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span_pages: Option<u64>,
}

/// A row's extra fields.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MemdescExtra {
    /// This row's time over the same row's at 64 bytes, paired.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_64_interval: Option<Interval>,
    /// `pfn_valid` rows: the memmap's virtual bytes on the run's layout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memmap_reserved: Option<u64>,
    /// `pfn_valid` rows: its resident bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memmap_resident: Option<u64>,
    /// `pfn_valid` rows: the section tables' bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memmap_tables: Option<u64>,
    /// `pfn_valid` rows: resident memmap bytes per TiB of the layout's
    /// present memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memmap_resident_per_tib: Option<f64>,
    /// `pfn_to_page` rows: the span's memmap bytes at this size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span_memmap_bytes: Option<u64>,
    /// `pfn_to_page` rows: this machine's LLC bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llc_bytes: Option<u64>,
    /// `pfn_to_page` rows: the span this size starts missing the LLC at
    /// (absent: not within the sweep).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub starts_missing_span: Option<u64>,
    /// `pfn_to_page` rows: what stopped the sweep short of the top the
    /// caches ask for (absent: nothing did).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep_cap: Option<SweepCap>,
    /// `replay` rows: the file name of the recording replayed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
}

/// One row of `bench memdesc`'s report.
pub type MemdescRow = Row<MemdescWork, MemdescParams, MemdescExtra>;

/// The measurements of `work` at one size, one per span for the sweep.
fn of(s: &SizeRun, work: MemdescWork) -> Vec<&Measurement> {
    let a = &s.alloc;
    match work {
        MemdescWork::PfnValid => vec![&s.pfn_valid],
        MemdescWork::PfnToPage => s.sweep.iter().collect(),
        MemdescWork::Pcp => vec![&a.pcp],
        MemdescWork::SplitMerge => vec![&a.split_merge],
        MemdescWork::Bulk128 => vec![&a.bulk],
        MemdescWork::Replay => a.replay.as_ref().ok().into_iter().collect(),
    }
}

/// `s`'s `work` at index `i` over 64 bytes' (the run's first size).
fn to_64(run: &ModelRun, s: &SizeRun, work: MemdescWork, i: usize) -> Option<Interval> {
    let base = run.sizes.first()?;
    if base.size != PageSize::B64 || s.size == PageSize::B64 {
        return None;
    }
    Interval::between(of(s, work).get(i)?, of(base, work).get(i)?).ok()
}

const WORKS: [MemdescWork; 6] = [
    MemdescWork::PfnValid,
    MemdescWork::PfnToPage,
    MemdescWork::Pcp,
    MemdescWork::SplitMerge,
    MemdescWork::Bulk128,
    MemdescWork::Replay,
];

/// The report's rows.
pub fn rows(ctx: &Ctx, results: &MemdescResults) -> Vec<MemdescRow> {
    let mut rows = Vec::new();
    for (kind, run) in &results.models {
        let Ok(run) = run else { continue };
        for s in &run.sizes {
            let missing = s.starts_missing(&results.spans, &results.caches);
            for work in WORKS {
                for (i, m) in of(s, work).into_iter().enumerate() {
                    let sweep = work == MemdescWork::PfnToPage;
                    let span = sweep.then(|| results.spans[i]);
                    let mut extra = MemdescExtra {
                        ratio_to_64_interval: to_64(run, s, work, i),
                        ..MemdescExtra::default()
                    };
                    if work == MemdescWork::PfnValid {
                        extra.memmap_reserved = Some(s.memmap.reserved);
                        extra.memmap_resident = Some(s.memmap.resident);
                        extra.memmap_tables = Some(s.memmap.tables);
                        extra.memmap_resident_per_tib = Some(per_tib(s, results));
                    }
                    if work == MemdescWork::Replay {
                        extra.trace = Some(results.trace.clone());
                    }
                    if let Some(span) = span {
                        extra.span_memmap_bytes = Some(span * s.size.bytes());
                        extra.llc_bytes = Some(results.caches.llc_bytes);
                        extra.starts_missing_span = missing.map(|j| results.spans[j]);
                        extra.sweep_cap = results.cap;
                    }
                    let params = MemdescParams {
                        page_size: s.size.bytes(),
                        era: ctx.era.name(),
                        span_pages: span,
                    };
                    rows.push(Row::new(work, *kind, params, m.clone(), extra));
                }
            }
        }
    }
    rows
}

/// Resident memmap bytes per TiB of present memory.
fn per_tib(s: &SizeRun, results: &MemdescResults) -> f64 {
    s.memmap.resident as f64 * (1u64 << 40) as f64 / results.ram_bytes.max(1) as f64
}

/// Every size's ratio to 64 bytes, per row.
pub fn comparisons(results: &MemdescResults) -> Vec<Comparison> {
    let mut out = Vec::new();
    for (kind, run) in &results.models {
        let Ok(run) = run else { continue };
        for s in &run.sizes {
            for work in WORKS {
                for i in 0..of(s, work).len() {
                    let Some(interval) = to_64(run, s, work, i) else {
                        continue;
                    };
                    let at = match work {
                        MemdescWork::PfnToPage => format!(" span {}", pages(results.spans[i])),
                        _ => String::new(),
                    };
                    let what = format!("{kind} {}{at}: {} B / 64 B", work.name(), s.size);
                    out.push(Comparison::from_interval(what, interval));
                }
            }
        }
    }
    out
}

/// A page count as `8 Ki`, `16 Mi`.
fn pages(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n.is_multiple_of(1 << 20) => format!("{} Mi", n >> 20),
        n if n >= 1 << 10 && n.is_multiple_of(1 << 10) => format!("{} Ki", n >> 10),
        n => n.to_string(),
    }
}

/// A measurement and its ratio to 64 bytes as a cell.
fn cell_vs(m: Option<&Measurement>, ratio: Option<Interval>) -> String {
    match (m, ratio) {
        (None, _) => "-".into(),
        (Some(m), None) => crate::units::fmt_ns(m.ns_per_op.median),
        (Some(m), Some(r)) => format!(
            "{} x{}",
            crate::units::fmt_ns(m.ns_per_op.median),
            ratio_cell(&r)
        ),
    }
}

/// The printed table.
pub fn render(ctx: &Ctx, results: &MemdescResults) -> String {
    let c = &results.caches;
    let mut t = format!(
        "struct page at each size, sizes interleaved per trial; ns per op, and [xratio to 64 B]\ncaches (cpu0{}): L2 {}, LLC {}; sweep: random pfn_to_page + page_zonenum, one dependent chain, over the first SPAN pages of a one-range layout\nstarts missing the LLC: first span past the in-LLC reference (largest span whose memmap fits in half the LLC) whose interval's lower bound is above {MISS_FACTOR}x the reference, and stays so\n",
        if results.caches_given {
            ", given: --cache-sizes"
        } else if c.from_sysfs {
            ", sysfs"
        } else {
            ", assumed: sysfs unreadable"
        },
        human_bytes(c.l2_bytes),
        human_bytes(c.llc_bytes),
    );
    t += &match results.cap {
        None => String::new(),
        Some(SweepCap::MaxSpan) => "sweep stops at --max-span-mib\n".into(),
        Some(SweepCap::Budget {
            budget_bytes,
            bytes_per_page,
        }) => format!(
            "sweep stops at {} pages, short of the caches' top: every size's memmap is built at once ({bytes_per_page} B per page), and a larger span would pass the memmap budget of {}\n",
            pages(*results.spans.last().unwrap_or(&0)),
            human_bytes(budget_bytes)
        ),
    };
    for (kind, run) in &results.models {
        match run {
            Ok(run) => t += &model_table(ctx, *kind, run, results),
            Err(e) => t += &format!("\n{kind}: not built: {e}\n"),
        }
    }
    t + NOISE_MARK + "\n"
}

fn model_table(ctx: &Ctx, kind: ModelKind, run: &ModelRun, r: &MemdescResults) -> String {
    let mut t = format!(
        "\n{kind} on {}\n{:<6} {:>16} {:>14} {:>34}\n",
        ctx.layout.source(),
        "size",
        "memmap resident",
        "per TiB",
        "pfn_valid"
    );
    for s in &run.sizes {
        t += &format!(
            "{:<6} {:>16} {:>14} {:>34}\n",
            format!("{} B", s.size),
            human_bytes(s.memmap.resident),
            human_bytes(per_tib(s, r) as u64),
            cell_vs(Some(&s.pfn_valid), to_64(run, s, MemdescWork::PfnValid, 0)),
        );
    }
    t += &format!("{:<8}", "span");
    for s in &run.sizes {
        t += &format!(" {:>30}", format!("pfn_to_page at {} B", s.size));
    }
    t += "\n";
    for (i, &span) in r.spans.iter().enumerate() {
        t += &format!("{:<8}", pages(span));
        for s in &run.sizes {
            let m = s.sweep.get(i);
            t += &format!(
                " {:>30}",
                cell_vs(m, to_64(run, s, MemdescWork::PfnToPage, i))
            );
        }
        t += "\n";
    }
    for s in &run.sizes {
        t += &match s.starts_missing(&r.spans, &r.caches) {
            Some(j) => format!(
                "{} B starts missing the LLC at {} pages (memmap {} = {:.1}x the LLC)\n",
                s.size,
                pages(r.spans[j]),
                human_bytes(r.spans[j] * s.size.bytes()),
                (r.spans[j] * s.size.bytes()) as f64 / r.caches.llc_bytes as f64
            ),
            None => {
                let top = r.spans.last().map_or(0, |&p| p * s.size.bytes());
                if top <= r.caches.llc_bytes {
                    format!(
                        "{} B never exceeds the LLC: the top span's memmap is {}, the LLC {}\n",
                        s.size,
                        human_bytes(top),
                        human_bytes(r.caches.llc_bytes)
                    )
                } else {
                    format!(
                        "{} B does not start missing the LLC within the sweep\n",
                        s.size
                    )
                }
            }
        };
    }
    t + &alloc_table(ctx, run, &r.trace)
}

fn alloc_table(ctx: &Ctx, run: &ModelRun, trace: &str) -> String {
    let mut t = format!(
        "allocator, era {}, replaying {trace}:\n{:<6}",
        ctx.era, "size"
    );
    for w in MemdescWork::ALLOCATOR {
        t += &format!(" {:>30}", w.name());
    }
    t += "\n";
    for s in &run.sizes {
        t += &format!("{:<6}", format!("{} B", s.size));
        for w in MemdescWork::ALLOCATOR {
            t += &format!(
                " {:>30}",
                cell_vs(of(s, w).first().copied(), to_64(run, s, w, 0))
            );
        }
        t += "\n";
        if let Err(e) = &s.alloc.replay {
            t += &format!("  replay at {} B failed: {e}\n", s.size);
        }
    }
    t
}
