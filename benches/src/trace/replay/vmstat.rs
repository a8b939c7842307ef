//! When each CPU's vmstat work runs in a replay, as far as the trace
//! shows it.
//!
//! The kernel queues each CPU's `vmstat_update` every `vm.stat_interval`
//! (1 s), rounded to whole seconds of `jiffies` (`round_jiffies_relative`,
//! skewed by 3 jiffies per CPU), as deferrable work that runs when the CPU
//! is awake. No event marks it, and the phase of `jiffies` against the
//! trace clock is not printed. From 6.7 its `decay_pcp_high` drains the
//! lists down to the decayed `high`, and that drain is in the trace: a
//! burst of `mm_page_pcpu_drain` on a CPU whose previous event there is
//! not a free, or came [`FREE_PATH_GAP_NS`] or more before it. A drain on
//! the free path follows its `mm_page_free` within microseconds, in the
//! same call (`free_unref_page_commit`); the vmstat work runs in a
//! kworker, after a context switch.
//!
//! Each CPU's work then runs at the phase of its first such burst, within
//! the second. A CPU that shows none takes the first phase any CPU shows,
//! since every CPU's work is aligned to the same whole seconds of
//! `jiffies`, 3 jiffies apart. With no burst in the trace (a kernel before
//! 6.7, a recording that drained nothing, or one too short), it runs at
//! whole seconds of trace time. A `drain_all_pages` run for another CPU's
//! reclaim or compaction looks the same in the trace and would be taken
//! for it; the recordings here had memory free enough that none ran.
//!
//! One run drains at most `batch << CONFIG_PCP_BATCH_SCALE_MAX` pages of
//! a zone (`decay_pcp_high`'s new `high` is at least `count` less that),
//! so a burst that drained more is the work run more than once
//! ([`work_runs`](super::floor::work_runs)), and the replay runs it as many
//! times in that interval. The trace does not say what ran it again:
//! `vmstat_shepherd` queues a CPU's work at once when it finds it not
//! pending and the CPU's counters changed, and the work is not pending
//! while it runs; a write to `vm.stat_refresh` runs it on every CPU.

use rustc_hash::FxHashMap;

use crate::trace::{Event, EventKind};

/// `vm.stat_interval`'s default (`HZ`, one second): how often each CPU's
/// vmstat work runs.
pub(super) const STAT_INTERVAL_NS: u64 = 1_000_000_000;

/// The least time between a CPU's free and its first drain that cannot be
/// the free's own drain: in recordings of Linux 6.18 on this project's
/// machines, a free-path drain came at most 3 µs after its free, the
/// vmstat work's drains 7 µs to 3 ms after the CPU's last event.
pub(super) const FREE_PATH_GAP_NS: u64 = 5_000;

/// One burst of the vmstat work's drains on one CPU: the drain events
/// from the first ([module documentation](self)) to the CPU's next event
/// of another kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct WorkDrain {
    pub(super) cpu: u16,
    /// The first drain's time.
    pub(super) ts_ns: u64,
    /// The drain events, as indices into the trace.
    pub(super) drains: Vec<usize>,
}

impl WorkDrain {
    /// The pages the burst drained, by the zone id `zone_of` maps each
    /// drained block's trace pfn to (a block it maps to none is left out).
    pub(super) fn pages_by_zone(
        &self,
        events: &[Event],
        zone_of: impl Fn(u64) -> Option<u8>,
    ) -> FxHashMap<u8, u64> {
        let mut drained: FxHashMap<u8, u64> = FxHashMap::default();
        for &i in &self.drains {
            let e = &events[i];
            if let Some(zone) = e.pfn.and_then(&zone_of) {
                *drained.entry(zone).or_default() += 1 << e.order;
            }
        }
        drained
    }
}

/// A CPU's previous event, as [`work_drains`] reads the next.
#[derive(Clone, Copy)]
enum Last {
    Free(u64),
    Other,
    /// One of the work's drains, of this burst.
    WorkDrain(usize),
    /// A drain on the free path.
    PathDrain,
}

/// Every burst of drains in `events` that the vmstat work made, in trace
/// order.
pub(super) fn work_drains(events: &[Event]) -> Vec<WorkDrain> {
    let mut out: Vec<WorkDrain> = Vec::new();
    let mut last: Vec<Option<Last>> = Vec::new();
    for (at, e) in events.iter().enumerate() {
        let i = usize::from(e.cpu);
        if last.len() <= i {
            last.resize(i + 1, None);
        }
        last[i] = Some(match e.kind {
            EventKind::PcpuDrain => match last[i] {
                Some(Last::WorkDrain(b)) => {
                    out[b].drains.push(at);
                    Last::WorkDrain(b)
                }
                Some(Last::PathDrain) => Last::PathDrain,
                Some(Last::Free(ts)) if e.ts_ns.saturating_sub(ts) < FREE_PATH_GAP_NS => {
                    Last::PathDrain
                }
                _ => {
                    out.push(WorkDrain {
                        cpu: e.cpu,
                        ts_ns: e.ts_ns,
                        drains: vec![at],
                    });
                    Last::WorkDrain(out.len() - 1)
                }
            },
            EventKind::Free | EventKind::FreeBatched => Last::Free(e.ts_ns),
            _ => Last::Other,
        });
    }
    out
}

/// Each CPU's vmstat work, paced by trace time.
#[derive(Debug, Default)]
pub(super) struct VmstatClock {
    /// The phase within the interval of each CPU's work, by trace CPU.
    phases: Vec<Option<u64>>,
    /// The phase of a CPU the trace shows no run of.
    default_phase: u64,
    /// The interval of each CPU's last event, by trace CPU.
    periods: Vec<Option<u64>>,
    /// The intervals in which a CPU's work ran more than once, with the
    /// times it ran, by `(trace CPU, interval)`.
    reruns: FxHashMap<(u16, u64), u32>,
}

impl VmstatClock {
    /// The phases `drains` show ([module documentation](self)), and how
    /// many times the work ran in each burst: `runs` of it, at least once.
    pub(super) fn from_trace(
        drains: &[WorkDrain],
        runs: impl Fn(&WorkDrain) -> u32,
    ) -> VmstatClock {
        let mut phases: Vec<Option<u64>> = Vec::new();
        for d in drains {
            let i = usize::from(d.cpu);
            if phases.len() <= i {
                phases.resize(i + 1, None);
            }
            phases[i].get_or_insert(d.ts_ns % STAT_INTERVAL_NS);
        }
        let mut clock = VmstatClock {
            phases,
            default_phase: drains.first().map_or(0, |d| d.ts_ns % STAT_INTERVAL_NS),
            periods: Vec::new(),
            reruns: FxHashMap::default(),
        };
        for d in drains {
            let n = runs(d);
            if n > 1 {
                // The interval whose phase the burst is nearest: a run comes
                // late or early by the timer's slack, not by half a second.
                let from_phase =
                    (d.ts_ns + STAT_INTERVAL_NS / 2).saturating_sub(clock.phase(d.cpu));
                clock
                    .reruns
                    .insert((d.cpu, from_phase / STAT_INTERVAL_NS), n);
            }
        }
        clock
    }

    /// The phase of `cpu`'s work within the interval, in ns.
    pub(super) fn phase(&self, cpu: u16) -> u64 {
        self.phases
            .get(usize::from(cpu))
            .copied()
            .flatten()
            .unwrap_or(self.default_phase)
    }

    /// How many times `cpu`'s vmstat work runs before its event at
    /// `ts_ns`: at the CPU's first event in an interval after the one of
    /// its previous event, once, or as many times as the trace's drains
    /// show it ran there; else none. A CPU that slept through intervals
    /// runs it once as it wakes, and a CPU without events runs none.
    pub(super) fn due(&mut self, cpu: u16, ts_ns: u64) -> u32 {
        let period = ts_ns.saturating_sub(self.phase(cpu)) / STAT_INTERVAL_NS;
        let i = usize::from(cpu);
        if self.periods.len() <= i {
            self.periods.resize(i + 1, None);
        }
        let last = self.periods[i].replace(period);
        if last.is_none_or(|last| period <= last) {
            return 0;
        }
        self.reruns.get(&(cpu, period)).copied().unwrap_or(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(ts_ns: u64, cpu: u16, kind: EventKind) -> Event {
        Event {
            pfn: Some(ts_ns),
            ..Event::new(0, ts_ns, cpu, kind)
        }
    }

    const S: u64 = STAT_INTERVAL_NS;

    /// A drain right after a free is the free's; a drain after another
    /// event, or long after a free, is the vmstat work's, and its time
    /// within the second is the CPU's phase; a CPU with none takes the
    /// first CPU's.
    #[test]
    fn the_first_drain_without_its_free_sets_the_phase() {
        use EventKind::{Alloc, Free, PcpuDrain};
        let events = [
            event(10 * S + 100_000_000, 0, Free),
            event(10 * S + 100_002_000, 0, PcpuDrain),
            event(10 * S + 100_003_000, 0, PcpuDrain),
            event(10 * S + 300_000_000, 1, Alloc),
            event(10 * S + 320_000_000, 1, PcpuDrain),
            event(10 * S + 320_001_000, 1, PcpuDrain),
            event(11 * S + 400_000_000, 0, Free),
            event(11 * S + 400_010_000, 0, PcpuDrain),
            event(12 * S + 500_000_000, 1, PcpuDrain),
            event(12 * S, 2, Alloc),
        ];
        let clock = VmstatClock::from_trace(&work_drains(&events), |_| 1);
        assert_eq!(clock.phase(0), 400_010_000, "10 µs after its free");
        assert_eq!(clock.phase(1), 320_000_000, "after an allocation");
        assert_eq!(clock.phase(2), 320_000_000, "the first CPU's");
        assert_eq!(clock.phase(7), 320_000_000, "a CPU without events");
        let none = VmstatClock::from_trace(&work_drains(&events[..3]), |_| 1);
        assert_eq!(none.phase(0), 0, "only free-path drains: whole seconds");
    }

    /// The work runs at the CPU's first event past each phase-shifted
    /// interval, once however many intervals it slept through.
    #[test]
    fn the_work_is_due_once_per_interval_at_the_phase() {
        let phase = 250_000_000;
        let events = [
            event(5 * S, 0, EventKind::Alloc),
            event(5 * S + phase, 0, EventKind::PcpuDrain),
        ];
        let mut clock = VmstatClock::from_trace(&work_drains(&events), |_| 1);
        assert_eq!(clock.due(0, 5 * S), 0, "a CPU's first event only starts it");
        assert_eq!(clock.due(0, 5 * S + phase - 1), 0);
        assert_eq!(clock.due(0, 5 * S + phase), 1);
        assert_eq!(clock.due(0, 6 * S + phase - 1), 0);
        assert_eq!(clock.due(0, 6 * S + phase), 1);
        assert_eq!(clock.due(0, 9 * S + phase + 1), 1, "once after sleeping");
        assert_eq!(clock.due(0, 9 * S + phase + 2), 0);
        assert_eq!(clock.due(1, 12 * S), 0, "CPU 1's first event");
    }

    /// A burst runs from the work's first drain to the CPU's next event of
    /// another kind, whatever other CPUs do in between; the free path's
    /// drains belong to no burst.
    #[test]
    fn a_burst_is_the_cpus_drains_until_its_next_other_event() {
        use EventKind::{Alloc, Free, PcpuDrain};
        let events = [
            event(S, 0, Alloc),
            event(S + 10_000, 0, PcpuDrain),
            event(S + 11_000, 1, Alloc),
            event(S + 12_000, 0, PcpuDrain),
            event(S + 20_000, 0, Free),
            event(S + 21_000, 0, PcpuDrain),
            event(S + 22_000, 0, PcpuDrain),
            event(2 * S, 0, PcpuDrain),
        ];
        let drains = work_drains(&events);
        let bursts: Vec<(u16, u64, Vec<usize>)> = drains
            .iter()
            .map(|d| (d.cpu, d.ts_ns, d.drains.clone()))
            .collect();
        assert_eq!(
            bursts,
            [(0, S + 10_000, vec![1, 3])],
            "the free path's drains, and a drain after them, are no burst"
        );
    }

    /// A burst the work could not drain in one run makes that interval's
    /// work run as many times; the other intervals run once.
    #[test]
    fn an_interval_runs_the_work_as_often_as_its_burst_shows() {
        let phase = 100_000_000;
        let events = [
            event(phase, 0, EventKind::PcpuDrain),
            event(S + phase + 30_000_000, 0, EventKind::Alloc),
            event(2 * S + phase + 40_000_000, 0, EventKind::Alloc),
            event(2 * S + phase + 40_010_000, 0, EventKind::PcpuDrain),
            event(2 * S + phase + 40_020_000, 0, EventKind::PcpuDrain),
            event(2 * S + phase + 40_030_000, 0, EventKind::PcpuDrain),
        ];
        let drains = work_drains(&events);
        assert_eq!(drains.len(), 2);
        let runs = |d: &WorkDrain| u32::try_from(d.drains.len()).unwrap_or(1);
        let mut clock = VmstatClock::from_trace(&drains, runs);
        assert_eq!(clock.phase(0), phase);
        assert_eq!(clock.due(0, phase), 0, "the CPU's first event");
        assert_eq!(clock.due(0, S + phase + 30_000_000), 1);
        assert_eq!(clock.due(0, 2 * S + phase + 40_000_000), 3, "a late run");
        assert_eq!(clock.due(0, 3 * S + phase), 1);
    }
}
