//! Running one closure on several threads at once, each with its own
//! handle: the shape every multi-threaded measurement shares (the lock
//! experiment's CPUs, the cpuset job's tasks, the flags program, the
//! peers' two-thread bursts).
//!
//! Each thread is placed first (pinned to its CPU with
//! `sched_setaffinity`, or left to the scheduler), then builds its handle
//! (a per-CPU allocator handle, a walker, a buffer) on that thread; all
//! wait on one barrier so that none starts before every handle is built,
//! and the wall time runs from that barrier to the last thread's end.
//! [`on_cpus`] places thread `t` on the `t`-th CPU of a list (the
//! machine's [`online_cpus`], which need not be numbered without gaps).

use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Where the threads of [`on_threads`] run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Thread `t` pinned to CPU `t`.
    Pinned,
    /// Wherever the scheduler puts them.
    Free,
}

/// What [`on_threads`] returns.
#[derive(Debug)]
pub struct Joined<R> {
    /// Each thread's result, by thread number.
    pub results: Vec<R>,
    /// Whether every pin the threads asked for held (true when free).
    pub pinned: bool,
    /// Wall time from the start barrier to the last thread's end.
    pub elapsed: Duration,
}

/// Runs `work(t, handle)` on `threads` threads at once, thread `t` placed
/// as `placement` says with the handle `handle(t)` built on it.
pub fn on_threads<H, R: Send>(
    threads: usize,
    placement: Placement,
    handle: impl Fn(usize) -> H + Sync,
    work: impl Fn(usize, H) -> R + Sync,
) -> Joined<R> {
    let place = |t| placement == Placement::Free || pin_to(t);
    run_placed(threads, &place, handle, work)
}

/// Runs `work(t, handle)` on one thread per entry of `cpus` at once,
/// thread `t` pinned to CPU `cpus[t]` (an id of [`online_cpus`]) with the
/// handle `handle(t)` built on it: [`on_threads`] for a machine whose
/// CPUs are not numbered from 0 without gaps.
pub fn on_cpus<H, R: Send>(
    cpus: &[usize],
    handle: impl Fn(usize) -> H + Sync,
    work: impl Fn(usize, H) -> R + Sync,
) -> Joined<R> {
    let place = |t: usize| pin_to(cpus[t]);
    run_placed(cpus.len(), &place, handle, work)
}

/// The CPUs this process may run on (its `sched_getaffinity` mask: the
/// online CPUs its cpuset allows), in increasing order; `0..n` for the
/// `available_parallelism` count where the mask cannot be read.
pub fn online_cpus() -> Vec<usize> {
    let listed: Vec<usize> = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
        .map(|set| {
            (0..nix::sched::CpuSet::count())
                .filter(|&c| set.is_set(c).unwrap_or(false))
                .collect()
        })
        .unwrap_or_default();
    if listed.is_empty() {
        (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
    } else {
        listed
    }
}

/// [`on_threads`] with thread `t` placed by `place(t)` (false: a pin the
/// kernel refused).
fn run_placed<H, R: Send>(
    threads: usize,
    place: &(dyn Fn(usize) -> bool + Sync),
    handle: impl Fn(usize) -> H + Sync,
    work: impl Fn(usize, H) -> R + Sync,
) -> Joined<R> {
    let start = Barrier::new(threads + 1);
    let (handle, work, start_ref) = (&handle, &work, &start);
    std::thread::scope(|s| {
        let spawned: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let pinned = place(t);
                    let h = handle(t);
                    start_ref.wait();
                    (work(t, h), pinned)
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        let done: Vec<(R, bool)> = spawned
            .into_iter()
            .map(|j| j.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect();
        let elapsed = t0.elapsed();
        let pinned = done.iter().all(|(_, p)| *p);
        Joined {
            results: done.into_iter().map(|(r, _)| r).collect(),
            pinned,
            elapsed,
        }
    })
}

/// Pins the calling thread to `cpu`; false if the kernel refuses.
fn pin_to(cpu: usize) -> bool {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).is_ok()
        && nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_thread_runs_once_with_its_own_handle() {
        let joined = on_threads(3, Placement::Free, |t| t * 10, |t, h| (t, h));
        assert_eq!(joined.results, vec![(0, 0), (1, 10), (2, 20)]);
        assert!(joined.pinned);
    }

    #[test]
    fn pinned_threads_run_where_they_were_put() {
        let joined = on_threads(
            1,
            Placement::Pinned,
            |_| (),
            |_, ()| {
                nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
                    .map(|set| set.is_set(0).unwrap_or(false))
                    .unwrap_or(false)
            },
        );
        // CPU 0 may be outside this process's cpuset; then the pin fails
        // and says so.
        assert_eq!(joined.results[0], joined.pinned);
    }

    #[test]
    fn threads_on_listed_cpus_run_there() {
        let cpus = online_cpus();
        assert!(!cpus.is_empty() && cpus.windows(2).all(|w| w[0] < w[1]));
        let last = *cpus.last().unwrap();
        let joined = on_cpus(
            &[last],
            |_| (),
            |_, ()| {
                nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
                    .map(|set| set.is_set(last).unwrap_or(false))
                    .unwrap_or(false)
            },
        );
        assert!(
            joined.pinned,
            "a CPU of the process's own mask takes the pin"
        );
        assert!(joined.results[0]);
    }
}
