//! `bench frag`'s replays of recorded traces: each through every
//! allocator ([`crate::frag::replay`]), and their table.

use buddy::Era;

use super::{AllocatorRuns, FragAllocator, FragParams};
use crate::error::RunError;
use crate::experiments::Ctx;
use crate::frag::replay::{replay_buddy, replay_llfree};

/// Each trace of `params` replayed through each allocator, the buddy's
/// over the context's memory model; LLFree gets as many frames as the
/// first buddy managed on the trace's layout.
pub(super) fn replay_traces(
    ctx: &Ctx,
    params: &FragParams,
    allocators: &mut [AllocatorRuns],
) -> Result<(), RunError> {
    let every = params.trace_sample_every.max(1);
    let refused = |trace: &std::path::Path, e: crate::trace::TraceError| {
        RunError::Trace(format!("replaying {}: {e}", trace.display()))
    };
    for trace in &params.traces {
        ctx.progress.stage(format!("replaying {}", trace.display()));
        let mut managed = None;
        for a in allocators.iter_mut() {
            let run = match a.allocator {
                FragAllocator::Buddy(era) | FragAllocator::BuddyDefrag(era) => {
                    let defrag = matches!(a.allocator, FragAllocator::BuddyDefrag(_));
                    let run = replay_buddy(trace, ctx.model, era, defrag, every)
                        .map_err(|e| refused(trace, e))?;
                    managed.get_or_insert(run.series.first().map_or(0, |s| s.free_pages));
                    run
                }
                FragAllocator::Llfree => {
                    let frames = match managed {
                        Some(m) => m,
                        None => {
                            let boot = replay_buddy(trace, ctx.model, Era::V6_18, false, u64::MAX)
                                .map_err(|e| refused(trace, e))?;
                            *managed.insert(boot.series.first().map_or(0, |s| s.free_pages))
                        }
                    };
                    replay_llfree(trace, frames, every).map_err(|e| refused(trace, e))?
                }
                FragAllocator::HostKernel => continue,
            };
            a.replays.push(run);
        }
    }
    Ok(())
}

/// The replays: per trace, each allocator's free huge frames (% of all)
/// before the first event, at quarters of the trace and after the last,
/// with the huge frames it broke, its fallbacks, mixed pageblocks and
/// refusals at the end.
pub(super) fn replay_table(results: &[AllocatorRuns]) -> String {
    use std::fmt::Write;
    let Some(traces) = results.iter().map(|a| a.replays.len()).max() else {
        return String::new();
    };
    let mut out = String::new();
    for t in 0..traces {
        let Some(first) = results.iter().find_map(|a| a.replays.get(t)) else {
            continue;
        };
        let _ = writeln!(
            out,
            "\nreplay of {} from boot ({} events; the buddy on the {} layout; \
             one pass, no randomness):\nfree huge frames, % of all, after event:",
            first.trace, first.events, first.layout
        );
        let len = first.series.len();
        let last = len.saturating_sub(1);
        let mut points = vec![0, last / 4, last / 2, 3 * last / 4, last];
        points.dedup();
        let _ = write!(out, "{:<22}", "allocator");
        for &p in &points {
            let ops = first.series.get(p).map_or(0, |s| s.ops);
            let _ = write!(out, " {ops:>9}");
        }
        let _ = writeln!(
            out,
            " {:>8} {:>16} {:>12} {:>8}",
            "broken", "fallbacks w/c/s", "mixed blocks", "refused"
        );
        for a in results {
            let Some(run) = a.replays.get(t) else {
                continue;
            };
            let _ = write!(out, "{:<22}", a.allocator.to_string());
            for &p in &points {
                let cell = run.series.get(p).map_or("-".into(), |s| {
                    format!("{:.2}", s.free_huge_of_all() * 100.0)
                });
                let _ = write!(out, " {cell:>9}");
            }
            let end = run.series.last();
            let fallbacks = end.and_then(|s| s.fallbacks).map_or("-".into(), |f| {
                format!("{}/{}/{}", f.whole_block, f.claimed, f.stolen)
            });
            let mixed = end.map_or(0, |s| s.mixed_pageblocks);
            let _ = writeln!(
                out,
                " {:>8} {fallbacks:>16} {mixed:>12} {:>8}",
                run.huge_frames_broken(),
                run.refused_total()
            );
        }
    }
    out
}
