//! `hvo`: HugeTLB vmemmap optimisation, on a memfd-backed
//! vmemmap where the remap is done for real.
//!
//! What one run measures, its trials interleaved:
//! - growing and shrinking a pool of 2 MiB folios (`nr_hugepages` up and
//!   down) per folio with HVO off, with 5.18+'s fake-head layout and
//!   2026's shared-tail layout, unbatched and batched (6.7), and the
//!   ratio to HVO off beside the published one ("[PATCH v8 0/8] Batch
//!   hugetlb vmemmap modification operations", Oct 2023: 500,000 × 2 MiB,
//!   allocate 28.973 s on / 4.119 s off, batched 7.267 s / 4.719 s; free
//!   36.748 / 4.477 s, batched 13.199 / 4.245 s), while a thread on the
//!   other CPU reads the memmap and feels the remap's TLB shootdowns: its
//!   read rate per mode beside HVO off's (`pool`); the same with one
//!   1 GiB folio per trial where the layout has a free contiguous range
//!   (else a notice);
//! - the hot path as the share of memory in optimised folios steps from 0
//!   to 100 % of the folios held (`hot`): random-pfn `pfn_to_page` plus
//!   a flags read, and order-0 alloc+free of the memory around them;
//! - `compound_head` on tail pages: the fake-head check on plain and on
//!   optimised folios, and the mask encoding;
//! - the memmap's resident bytes with the pool grown, read from the kernel
//!   (the memfd's blocks), with the bytes freed per folio from the geometry.
//!
//! - with `--host-kernel N` (root), this host's kernel growing and
//!   shrinking its own 2 MiB pool by N pages with `hugetlb_optimize_vmemmap`
//!   0 and 1, trials interleaved, in the same table
//!   ([`crate::host_kernel::hugetlb_pool`]; both sysctls restored).

mod hot;
mod pool;
mod rows;

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use buddy::{AllocError, BuddyModel, HvoMode, Kernel, Options};
use serde::Serialize;
use sparsemem::hvo::{HvoLayout, hugetlb_orders, hvo_freed_bytes};
use sparsemem::{Layout, PAGE_STRUCT_SIZE, Page};
use vmemmap::{VmemmapOptions, compound_head_fake_head, compound_head_mask};

use super::{Ctx, Experiment, ExperimentId, cell};
use crate::error::RunError;
use crate::host_kernel::{HostError, HostPaths, hugetlb_pool, is_root};
use crate::models::{Buildable, ModelVisitor, build_allocator};
use crate::report::Row;
use crate::spread::{Comparison, Interval, MARKS, ratio_cell};
use crate::timing::{Measurement, Plan};
use crate::workloads::{compound_heads, valid_pfns};
use pool::Pools;

/// The experiment `bench hvo`.
pub struct Hvo;

/// How a pool's folios are treated.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HvoModeId {
    /// No HVO.
    Off,
    /// 5.18+: tails mapped onto the head's page, one folio at a time.
    FakeHead,
    /// The same, 6.7's batched form.
    FakeHeadBatched,
    /// 2026: tails mapped onto a shared page of tails, one at a time.
    SharedTail,
    /// The same, batched.
    SharedTailBatched,
}

impl HvoModeId {
    /// Every mode, in report order.
    pub const ALL: [HvoModeId; 5] = [
        HvoModeId::Off,
        HvoModeId::FakeHead,
        HvoModeId::FakeHeadBatched,
        HvoModeId::SharedTail,
        HvoModeId::SharedTailBatched,
    ];

    /// The pool's HVO setting.
    pub fn mode(self) -> Option<HvoMode> {
        let (layout, batched) = match self {
            HvoModeId::Off => return None,
            HvoModeId::FakeHead => (HvoLayout::FakeHead, false),
            HvoModeId::FakeHeadBatched => (HvoLayout::FakeHead, true),
            HvoModeId::SharedTail => (HvoLayout::SharedTail, false),
            HvoModeId::SharedTailBatched => (HvoLayout::SharedTail, true),
        };
        Some(HvoMode { layout, batched })
    }

    /// The published ratio to HVO off (the batch series' cover letter),
    /// for growing (`alloc`) or shrinking the pool; none for 2026's layout.
    fn published_ratio(self, grow: bool) -> Option<f64> {
        match (self, grow) {
            (HvoModeId::FakeHead, true) => Some(28.973 / 4.119),
            (HvoModeId::FakeHeadBatched, true) => Some(7.267 / 4.719),
            (HvoModeId::FakeHead, false) => Some(36.748 / 4.477),
            (HvoModeId::FakeHeadBatched, false) => Some(13.199 / 4.245),
            _ => None,
        }
    }
}

/// What a row timed.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HvoVariant {
    /// `nr_hugepages` raised, per folio.
    Grow,
    /// `nr_hugepages` lowered, per folio.
    Shrink,
    /// `compound_head` (fake-head check) on plain folios' tails.
    CompoundHeadPlain,
    /// `compound_head` (fake-head check) on optimised folios' tails.
    CompoundHeadFakeHead,
    /// `compound_head` by mask on shared-tail folios' tails.
    CompoundHeadMask,
    /// The toucher on the other CPU, its CPU time per memmap read over a
    /// mode's grow and shrink.
    Toucher,
    /// Random-pfn `pfn_to_page` + flags read, per pfn, at a share of the
    /// folios optimised.
    HotReadFlags,
    /// Order-0 alloc+free of the memory around the folios, per pair.
    HotZonePairs,
    /// This host's kernel raising `nr_hugepages`, per page.
    KernelGrow,
    /// This host's kernel lowering `nr_hugepages`, per page.
    KernelShrink,
}

/// `bench hvo`'s options.
#[derive(Clone, Copy, Debug, Default)]
pub struct HvoOptions {
    /// Also time this host's kernel growing and shrinking its 2 MiB pool
    /// by this many pages, HVO off and on (root only; `nr_hugepages` and
    /// `hugetlb_optimize_vmemmap` restored).
    pub host_kernel: Option<u64>,
    /// Set by the caller to stop the host measurement between steps (a
    /// signal it caught); every setting is restored first.
    pub stop: Option<&'static AtomicBool>,
}

/// This host's kernel's pool, timed (per page), HVO off then on.
#[derive(Clone, Debug)]
pub struct HostPool {
    /// Pages added and removed per trial.
    pub pages: u64,
    /// `(grow, shrink)` with `hugetlb_optimize_vmemmap` 0.
    pub off: (Measurement, Measurement),
    /// `(grow, shrink)` with it 1 (6.18: fake heads, batched).
    pub on: (Measurement, Measurement),
}

/// A row's parameters.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct HvoParams {
    /// The pool's HVO mode.
    pub mode: HvoModeId,
    /// Folio size.
    pub folio_kib: u64,
    /// Folios per trial (held, for the hot-path rows).
    pub folios: u64,
    /// Percent of the held folios optimised (hot-path rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optimised_percent: Option<u64>,
}

/// A row's extra fields.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct HvoExtra {
    /// Median ns over HVO off's (grow and shrink rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_off: Option<f64>,
    /// [`HvoExtra::ratio_to_off`] with its interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_off_interval: Option<Interval>,
    /// The published ratio, where there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub published_ratio: Option<f64>,
    /// Resident memmap bytes with the pool grown (the memfd's blocks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memmap_resident_bytes: Option<u64>,
    /// Vmemmap bytes HVO frees per folio, from the geometry and
    /// `size_of::<Page>()`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hvo_freed_bytes: Option<u64>,
    /// Of the node's memory, the share in optimised folios (hot-path rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_share: Option<f64>,
    /// Whether the toucher and the measuring thread each had their own
    /// CPU (toucher rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub toucher_pinned: Option<bool>,
}

/// One row of `bench hvo`'s report.
pub type HvoRow = Row<HvoVariant, HvoParams, HvoExtra>;

/// One mode's pool timings.
#[derive(Clone, Debug)]
pub struct ModeResult {
    /// The mode.
    pub mode: HvoModeId,
    /// Growing, per folio.
    pub grow: Measurement,
    /// Shrinking, per folio.
    pub shrink: Measurement,
    /// The toucher on the other CPU, its CPU time per read over both
    /// (none when it was never scheduled long enough).
    pub toucher: Option<Measurement>,
    /// Resident memmap bytes with the pool grown.
    pub resident_bytes: u64,
}

/// What `bench hvo` measures.
#[derive(Debug)]
pub struct HvoResults {
    /// Folio order (the PMD order).
    pub order: u32,
    /// Folios per trial.
    pub folios: u64,
    /// Each mode's pool timings.
    pub modes: Vec<ModeResult>,
    /// Whether the toucher and the measuring thread had a CPU each.
    pub toucher_pinned: bool,
    /// The same with one gigantic folio per trial (order, timings), or
    /// why not.
    pub gigantic: Result<(u32, Vec<ModeResult>), String>,
    /// The hot path against the share of folios optimised.
    pub hot: hot::HotPath,
    /// `compound_head` per tail: plain, fake-head, mask.
    pub heads: Vec<(HvoVariant, HvoModeId, Measurement)>,
    /// Vmemmap bytes freed per folio.
    pub freed_per_folio: u64,
    /// The host kernel's pool, when asked for, or why it was left out.
    pub host: Option<Result<HostPool, HostError>>,
}

/// The host kernel's pool grown and shrunk by `pages`, HVO off and on
/// alternately, one warm-up round and `plan.trials` timed ones.
fn measure_host(pages: u64, plan: Plan, stop: Option<&AtomicBool>) -> Result<HostPool, HostError> {
    if !is_root() {
        return Err(HostError::NotRoot);
    }
    let paths = HostPaths::live();
    let mut ns = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
    for trial in 0..=plan.trials {
        for (i, hvo) in [false, true].into_iter().enumerate() {
            if stop.is_some_and(|s| s.load(Relaxed)) {
                return Err(HostError::Interrupted);
            }
            let run = hugetlb_pool(&paths, pages, hvo)?;
            if trial > 0 {
                ns[i][0].push(run.grow_ns);
                ns[i][1].push(run.shrink_ns);
            }
        }
    }
    let [[g0, s0], [g1, s1]] = ns;
    Ok(HostPool {
        pages,
        off: (Measurement::from_ns(g0), Measurement::from_ns(s0)),
        on: (Measurement::from_ns(g1), Measurement::from_ns(s1)),
    })
}

struct Visitor {
    plan: Plan,
    alloc_options: Options,
}

impl ModelVisitor for Visitor {
    type Output = Result<HvoResults, buddy::HugetlbError>;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<Self::Output, AllocError> {
        let alloc = build_allocator::<M, Kernel>(layout, options, self.alloc_options)?;
        Ok(run(&alloc, self.plan, layout))
    }
}

/// Pfns the toucher reads, over all the layout's memory.
const TOUCHED_PFNS: usize = 1 << 16;

/// Every part, on one allocator.
fn run<M: BuddyModel<Page = Page>>(
    alloc: &buddy::Allocator<M, Kernel>,
    plan: Plan,
    layout: &Layout,
) -> Result<HvoResults, buddy::HugetlbError> {
    let [order, giant] = hugetlb_orders(alloc.model().geometry());
    let node = layout.first_node();
    // Three pools hold folios at once for the compound_head part.
    let room = alloc.free_pages_total() / (1 << order) / 4;
    let folios = plan.iters(512, 16).min(room).max(1);
    let mut pools = pool::new_pools(alloc, order, node)?;
    let touched = valid_pfns(layout, TOUCHED_PFNS, 26);
    let run = pool::pool_trials(alloc, plan, &mut pools, folios, &touched)?;
    let heads = measure_heads(alloc, plan, &mut pools, folios)?;
    let gigantic = pool::gigantic(alloc, plan, giant, node, &touched)?.map(|g| (giant, g.modes));
    let hot = hot::measure(alloc, plan, layout, order)?;
    let page_size = sparsemem::memmap::host_page_size() as u64;
    Ok(HvoResults {
        order,
        folios,
        modes: run.modes,
        toucher_pinned: run.pinned,
        gigantic,
        hot,
        heads,
        freed_per_folio: hvo_freed_bytes(order, page_size, PAGE_STRUCT_SIZE),
        host: None,
    })
}

/// `compound_head` per tail over folios of three pools (off, fake-head,
/// shared-tail), trials interleaved; the pools are emptied after.
fn measure_heads<M: BuddyModel<Page = Page>>(
    alloc: &buddy::Allocator<M, Kernel>,
    plan: Plan,
    pools: &mut Pools,
    folios: u64,
) -> Result<Vec<(HvoVariant, HvoModeId, Measurement)>, buddy::HugetlbError> {
    let cases = [
        (HvoVariant::CompoundHeadPlain, HvoModeId::Off),
        (HvoVariant::CompoundHeadFakeHead, HvoModeId::FakeHead),
        (HvoVariant::CompoundHeadMask, HvoModeId::SharedTail),
    ];
    let mut tails: Vec<(HvoVariant, Vec<&Page>)> = Vec::new();
    for (variant, mode) in cases {
        let Some((_, pool, _)) = pools.iter_mut().find(|p| p.0 == mode) else {
            continue;
        };
        pool.grow(alloc, folios)?;
        let nr = 1u64 << pool.order();
        let pages = pool
            .blocks(alloc)
            .into_iter()
            .filter(|&(_, o)| u32::from(o.get()) == pool.order())
            .flat_map(|(h, _)| (1..nr).filter_map(move |i| alloc.model().pfn_to_page(h + i)))
            .collect();
        tails.push((variant, pages));
    }
    let rounds = (plan.iters(20_000_000, 200_000) / tails[0].1.len().max(1) as u64).max(1);
    let measured = plan.measure_interleaved(&mut tails, |(variant, pages)| {
        let mut sum = 0u64;
        for _ in 0..rounds {
            sum = sum.wrapping_add(match variant {
                HvoVariant::CompoundHeadMask => compound_heads(pages, compound_head_mask),
                _ => compound_heads(pages, compound_head_fake_head),
            });
        }
        std::hint::black_box(sum);
        rounds * pages.len() as u64
    });
    for (_, pool, _) in pools.iter_mut() {
        let n = pool.counts().nr_hugepages;
        pool.shrink(alloc, n)?;
    }
    Ok(cases
        .iter()
        .zip(measured)
        .map(|(&(v, mode), m)| (v, mode, m))
        .collect())
}

impl Experiment for Hvo {
    const ID: ExperimentId = ExperimentId::Hvo;
    type Params = HvoOptions;
    type Results = HvoResults;
    type Row = HvoRow;

    fn measure(ctx: &Ctx, params: &HvoOptions) -> Result<HvoResults, RunError> {
        let options = VmemmapOptions {
            memfd: true,
            ..VmemmapOptions::default()
        };
        let visitor = Visitor {
            plan: ctx.plan,
            alloc_options: ctx.options(),
        };
        let out = crate::models::with_model_options(ctx.model, &ctx.layout, options, visitor);
        let mut r = ctx.named(out)?.map_err(|source| RunError::Hugetlb {
            model: ctx.model,
            source,
        })?;
        if let Some(pages) = params.host_kernel {
            ctx.progress.stage("the host kernel's pool".into());
            r.host = Some(measure_host(pages, ctx.plan, params.stop));
        }
        Ok(r)
    }

    fn rows(ctx: &Ctx, r: &HvoResults) -> Vec<HvoRow> {
        let folio_kib = (ctx.layout.geometry().page_size() << r.order) >> 10;
        let params = |mode| HvoParams {
            mode,
            folio_kib,
            folios: r.folios,
            optimised_percent: None,
        };
        let mut rows = rows::mode_rows(ctx, r.order, r.folios, &r.modes, r.toucher_pinned);
        for (variant, mode, m) in &r.heads {
            rows.push(Row::new(
                *variant,
                ctx.model,
                params(*mode),
                m.clone(),
                HvoExtra::default(),
            ));
        }
        if let Ok((order, modes)) = &r.gigantic {
            rows.extend(rows::mode_rows(ctx, *order, 1, modes, r.toucher_pinned));
        }
        rows.extend(rows::hot_rows(ctx, r.order, &r.hot));
        if let Some(Ok(host)) = &r.host {
            rows.extend(host_rows(ctx, host));
        }
        rows
    }

    fn comparisons(_: &Ctx, r: &HvoResults) -> Vec<Comparison> {
        let Some(off) = r.modes.iter().find(|m| m.mode == HvoModeId::Off) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for m in r.modes.iter().filter(|m| m.mode != HvoModeId::Off) {
            let mode = serde_json::to_value(m.mode)
                .map_or(String::new(), |v| v.as_str().unwrap_or("").into());
            out.extend(Comparison::of(
                format!("{mode} / off: grow"),
                &m.grow,
                &off.grow,
            ));
            out.extend(Comparison::of(
                format!("{mode} / off: shrink"),
                &m.shrink,
                &off.shrink,
            ));
        }
        out
    }

    fn render(ctx: &Ctx, r: &HvoResults) -> String {
        let folio_kib = (ctx.layout.geometry().page_size() << r.order) >> 10;
        let mut out = format!(
            "{} folios of {folio_kib} KiB per trial; HVO frees {} KiB of vmemmap per folio.\n\n",
            r.folios,
            r.freed_per_folio >> 10
        );
        out.push_str(&format!(
            "{:<22} {:>20} {:>20} {:>9} {:>20} {:>20} {:>9} {:>14}\n",
            "mode",
            "grow ns (cyc)",
            "x off",
            "published",
            "shrink ns (cyc)",
            "x off",
            "published",
            "memmap KiB"
        ));
        let off = r.modes.iter().find(|m| m.mode == HvoModeId::Off);
        let ratio = |m: &Measurement, b: Option<&Measurement>| {
            b.and_then(|b| Interval::between(m, b).ok())
                .map_or("-".into(), |i| ratio_cell(&i))
        };
        let published = |p: Option<f64>| p.map_or("-".into(), |p| format!("{p:.2}"));
        for m in &r.modes {
            let mode = serde_json::to_value(m.mode)
                .map_or(String::new(), |v| v.as_str().unwrap_or("").into());
            out.push_str(&format!(
                "{:<22} {:>20} {:>20} {:>9} {:>20} {:>20} {:>9} {:>14}\n",
                mode,
                cell(&m.grow),
                ratio(&m.grow, off.map(|o| &o.grow)),
                published(m.mode.published_ratio(true)),
                cell(&m.shrink),
                ratio(&m.shrink, off.map(|o| &o.shrink)),
                published(m.mode.published_ratio(false)),
                m.resident_bytes >> 10,
            ));
        }
        out.push_str(&render_host(r.host.as_ref()));
        out.push_str(&rows::render_toucher(&r.modes, r.toucher_pinned));
        out.push_str(&rows::render_gigantic(ctx, &r.gigantic));
        out.push_str(&rows::render_hot(&r.hot));
        out.push_str("\ncompound_head per tail page:\n");
        for (variant, _, m) in &r.heads {
            let name = serde_json::to_value(variant)
                .map_or(String::new(), |v| v.as_str().unwrap_or("").into());
            out.push_str(&format!("  {name:<26} {:>20}\n", cell(m)));
        }
        out.push_str(&format!(
            "\nRatios are medians over this run's HVO-off pool [95 % interval of the interleaved trials; {MARKS}]; the published ratios compare each kernel with its own \
             HVO-off baseline (Oct 2023, 500,000 x 2 MiB, 8-socket Xeon). pfnlab's remap is user-space mmap/fallocate: \
             each mmap flushes on its own, so \"batched\" batches the steps, not the TLB flushes.\n",
        ));
        out
    }
}

/// The host kernel's rows: grow and shrink per page, HVO off
/// (`off`) and on (6.18's batched fake heads), with the ratio to off.
fn host_rows(ctx: &Ctx, host: &HostPool) -> Vec<HvoRow> {
    let mut rows = Vec::new();
    for (mode, (grow, shrink)) in [
        (HvoModeId::Off, &host.off),
        (HvoModeId::FakeHeadBatched, &host.on),
    ] {
        for (variant, m, base) in [
            (HvoVariant::KernelGrow, grow, &host.off.0),
            (HvoVariant::KernelShrink, shrink, &host.off.1),
        ] {
            let on = mode != HvoModeId::Off;
            let extra = HvoExtra {
                ratio_to_off: on.then(|| m.ns_per_op.median / base.ns_per_op.median),
                published_ratio: mode.published_ratio(variant == HvoVariant::KernelGrow),
                ..HvoExtra::default()
            };
            let params = HvoParams {
                mode,
                folio_kib: 2048,
                folios: host.pages,
                optimised_percent: None,
            };
            rows.push(Row::new(variant, ctx.model, params, m.clone(), extra));
        }
    }
    rows
}

/// The host kernel's lines under the model's, in the same columns, or
/// the one line saying why they are absent.
fn render_host(host: Option<&Result<HostPool, HostError>>) -> String {
    let host = match host {
        None => return String::new(),
        Some(Err(e)) => return format!("host kernel: left out ({e})\n"),
        Some(Ok(host)) => host,
    };
    let ratio = |m: &Measurement, b: &Measurement| {
        format!("{:.2}", m.ns_per_op.median / b.ns_per_op.median)
    };
    let published = |p: Option<f64>| p.map_or("-".into(), |p| format!("{p:.2}"));
    let mut out = format!(
        "this host's kernel, nr_hugepages +{0} then -{0} (2 MiB), per page:\n",
        host.pages
    );
    for (name, mode, (grow, shrink)) in [
        ("kernel: hvo 0", HvoModeId::Off, &host.off),
        ("kernel: hvo 1", HvoModeId::FakeHeadBatched, &host.on),
    ] {
        let on = mode != HvoModeId::Off;
        out.push_str(&format!(
            "{:<22} {:>20} {:>8} {:>9} {:>20} {:>8} {:>9} {:>14}\n",
            name,
            cell(grow),
            if on {
                ratio(grow, &host.off.0)
            } else {
                "-".into()
            },
            published(mode.published_ratio(true)),
            cell(shrink),
            if on {
                ratio(shrink, &host.off.1)
            } else {
                "-".into()
            },
            published(mode.published_ratio(false)),
            "-",
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_kernel_rows_are_one_notice_when_left_out_and_nothing_when_not_asked() {
        assert_eq!(render_host(None), "");
        assert_eq!(
            render_host(Some(&Err(HostError::NotRoot))),
            "host kernel: left out (needs root)\n"
        );
        let m = |ns: f64| Measurement::from_ns(vec![ns, ns, ns]);
        let host = HostPool {
            pages: 8,
            off: (m(100.0), m(200.0)),
            on: (m(400.0), m(300.0)),
        };
        let text = render_host(Some(&Ok(host)));
        let on = text
            .lines()
            .find(|l| l.starts_with("kernel: hvo 1"))
            .unwrap();
        // 400 / 100 and 300 / 200, beside the batched series' published ratios.
        assert!(on.contains(" 4.00 ") && on.contains(" 1.50 "), "{on}");
        assert!(on.contains(" 1.54 ") && on.contains(" 3.11 "), "{on}");
    }
}
