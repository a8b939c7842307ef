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

use crate::trace::{Event, EventKind};

/// `vm.stat_interval`'s default (`HZ`, one second): how often each CPU's
/// vmstat work runs.
pub(super) const STAT_INTERVAL_NS: u64 = 1_000_000_000;

/// The least time between a CPU's free and its first drain that cannot be
/// the free's own drain: in recordings of Linux 6.18 on this project's
/// machines, a free-path drain came at most 3 µs after its free, the
/// vmstat work's drains 7 µs to 3 ms after the CPU's last event.
pub(super) const FREE_PATH_GAP_NS: u64 = 5_000;

/// Each CPU's vmstat work, paced by trace time.
#[derive(Debug, Default)]
pub(super) struct VmstatClock {
    /// The phase within the interval of each CPU's work, by trace CPU.
    phases: Vec<Option<u64>>,
    /// The phase of a CPU the trace shows no run of.
    default_phase: u64,
    /// The interval of each CPU's last event, by trace CPU.
    periods: Vec<Option<u64>>,
}

impl VmstatClock {
    /// The phases the trace's drains show ([module documentation](self)).
    pub(super) fn from_trace(events: &[Event]) -> VmstatClock {
        let mut phases: Vec<Option<u64>> = Vec::new();
        // Per CPU: the previous event's time and whether it was a free, and
        // whether that event was a drain (so a burst is seen once).
        let mut last: Vec<Option<(u64, bool, bool)>> = Vec::new();
        let mut first: Option<u64> = None;
        for e in events {
            let i = usize::from(e.cpu);
            if last.len() <= i {
                last.resize(i + 1, None);
                phases.resize(i + 1, None);
            }
            let drain = e.kind == EventKind::PcpuDrain;
            let free = matches!(e.kind, EventKind::Free | EventKind::FreeBatched);
            if drain && phases[i].is_none() {
                let starts_burst = match last[i] {
                    None => true,
                    Some((_, _, true)) => false,
                    Some((ts, was_free, false)) => {
                        !was_free || e.ts_ns.saturating_sub(ts) >= FREE_PATH_GAP_NS
                    }
                };
                if starts_burst {
                    let phase = e.ts_ns % STAT_INTERVAL_NS;
                    phases[i] = Some(phase);
                    first.get_or_insert(phase);
                }
            }
            last[i] = Some((e.ts_ns, free, drain));
        }
        VmstatClock {
            phases,
            default_phase: first.unwrap_or(0),
            periods: Vec::new(),
        }
    }

    /// The phase of `cpu`'s work within the interval, in ns.
    pub(super) fn phase(&self, cpu: u16) -> u64 {
        self.phases
            .get(usize::from(cpu))
            .copied()
            .flatten()
            .unwrap_or(self.default_phase)
    }

    /// Whether `cpu`'s vmstat work runs before its event at `ts_ns`: the
    /// CPU's first event in an interval after the one of its previous
    /// event. A CPU that slept through intervals runs it once as it
    /// wakes, and a CPU without events runs none.
    pub(super) fn due(&mut self, cpu: u16, ts_ns: u64) -> bool {
        let period = ts_ns.saturating_sub(self.phase(cpu)) / STAT_INTERVAL_NS;
        let i = usize::from(cpu);
        if self.periods.len() <= i {
            self.periods.resize(i + 1, None);
        }
        let last = self.periods[i].replace(period);
        last.is_some_and(|last| period > last)
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
        let clock = VmstatClock::from_trace(&events);
        assert_eq!(clock.phase(0), 400_010_000, "10 µs after its free");
        assert_eq!(clock.phase(1), 320_000_000, "after an allocation");
        assert_eq!(clock.phase(2), 320_000_000, "the first CPU's");
        assert_eq!(clock.phase(7), 320_000_000, "a CPU without events");
        let none = VmstatClock::from_trace(&events[..3]);
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
        let mut clock = VmstatClock::from_trace(&events);
        assert!(!clock.due(0, 5 * S), "a CPU's first event only starts it");
        assert!(!clock.due(0, 5 * S + phase - 1));
        assert!(clock.due(0, 5 * S + phase));
        assert!(!clock.due(0, 6 * S + phase - 1));
        assert!(clock.due(0, 6 * S + phase));
        assert!(clock.due(0, 9 * S + phase + 1), "once after sleeping");
        assert!(!clock.due(0, 9 * S + phase + 2));
        assert!(!clock.due(1, 12 * S), "CPU 1's first event");
    }
}
