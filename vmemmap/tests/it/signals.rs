//! Soundness of the fault-probe handler: it chains to a handler installed
//! before it, works under one installed after it that chains back, never
//! swallows a genuine fault, and probes concurrently on threads that each
//! run on their own alternate signal stack. Scenarios that end a process run
//! in a child (this test binary re-executed with `PFNLAB_SIGNAL_CHILD`).

use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use sparsemem::{Geometry, Layout, MemRange, MemoryModel, Pfn, RangeKind};
use vmemmap::{VmemmapProbe, fixup};

/// 1 GiB of RAM in a 64 GiB physical space (a 1 GiB memmap reservation).
fn layout() -> Layout {
    Layout::new(
        Geometry::new(12, 27, 36).unwrap(),
        vec![MemRange::new(0, 1 << 30, RangeKind::Ram, 0)],
        "small",
    )
    .unwrap()
}

/// A hole of [`layout`].
const HOLE: Pfn = Pfn::new((3u64 << 30) >> 12);

fn child(mode: &str) -> std::process::Output {
    sparsemem::testing::run_child("signals::signal_child", "PFNLAB_SIGNAL_CHILD", mode).unwrap()
}

/// The genuine fault was not swallowed: the child died of SIGSEGV, or the
/// handler installed before ours took it (under AddressSanitizer, ASan's
/// SEGV handler reports and exits 1).
fn died_of_the_fault(out: &std::process::Output) -> bool {
    out.status.signal() == Some(libc::SIGSEGV)
        || (out.status.code() == Some(1)
            && String::from_utf8_lossy(&out.stderr).contains("AddressSanitizer: SEGV"))
}

static EARLIER_HITS: AtomicU64 = AtomicU64::new(0);
static LATER_HITS: AtomicU64 = AtomicU64::new(0);
static PREVIOUS: AtomicUsize = AtomicUsize::new(0);

/// A handler installed before the probe's: records and exits with 42.
extern "C" fn earlier(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    EARLIER_HITS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(42) };
}

/// A handler installed after the probe's that chains to it.
extern "C" fn later(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    LATER_HITS.fetch_add(1, Ordering::Relaxed);
    let prev = PREVIOUS.load(Ordering::Relaxed);
    // SAFETY: PREVIOUS holds the SA_SIGINFO handler that was installed
    // before this one (the probe's), stored before this one was installed.
    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
        unsafe { std::mem::transmute(prev) };
    f(sig, info, ctx);
}

fn install(handler: usize) -> libc::sigaction {
    // SAFETY: plain sigaction calls with valid pointers.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut sa.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        assert_eq!(libc::sigaction(libc::SIGSEGV, &sa, &mut old), 0);
        old
    }
}

fn genuine_fault() {
    // SAFETY: deliberately invalid, in a child process.
    unsafe { std::ptr::write_volatile(std::hint::black_box(16usize) as *mut u8, 1) };
}

/// The child side; does nothing in a normal run.
#[test]
fn signal_child() {
    let Ok(mode) = std::env::var("PFNLAB_SIGNAL_CHILD") else {
        return;
    };
    let layout = layout();
    let hole = HOLE;
    match mode.as_str() {
        "before" => {
            install(earlier as *const () as usize);
            let model = VmemmapProbe::new(&layout).unwrap();
            assert!(!model.pfn_valid(hole), "probe still fixed up");
            assert_eq!(
                EARLIER_HITS.load(Ordering::Relaxed),
                0,
                "a probe fault is not chained"
            );
            genuine_fault();
        }
        "after" => {
            let model = VmemmapProbe::new(&layout).unwrap();
            let ours = install(later as *const () as usize);
            PREVIOUS.store(ours.sa_sigaction, Ordering::Relaxed);
            assert!(
                !model.pfn_valid(hole),
                "probe works through a chaining handler"
            );
            assert!(model.pfn_valid(Pfn::new(0)));
            assert_eq!(LATER_HITS.load(Ordering::Relaxed), 1);
            genuine_fault();
        }
        _ => return,
    }
    std::process::exit(0);
}

#[test]
fn chains_to_a_handler_installed_before() {
    let out = child("before");
    assert_eq!(
        out.status.code(),
        Some(42),
        "the earlier handler saw the genuine fault: {:?}",
        out.status
    );
}

#[test]
fn works_under_a_handler_installed_after_and_still_kills() {
    let out = child("after");
    assert!(died_of_the_fault(&out), "{:?}", out.status);
}

#[test]
fn probing_threads_each_get_an_alternate_stack() {
    let model = VmemmapProbe::new(&layout()).unwrap();
    let hole = HOLE;
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                // A thread not started by std has no alternate stack; take it
                // away here to check prepare_thread installs one.
                // SAFETY: disabling this thread's alternate stack.
                unsafe {
                    let off = libc::stack_t {
                        ss_sp: std::ptr::null_mut(),
                        ss_flags: libc::SS_DISABLE,
                        ss_size: 0,
                    };
                    libc::sigaltstack(&off, std::ptr::null_mut());
                }
                fixup::prepare_thread().unwrap();
                // SAFETY: querying only.
                let mut now: libc::stack_t = unsafe { std::mem::zeroed() };
                // SAFETY: valid out pointer.
                assert_eq!(unsafe { libc::sigaltstack(std::ptr::null(), &mut now) }, 0);
                assert_eq!(
                    now.ss_flags & libc::SS_DISABLE,
                    0,
                    "alternate stack installed"
                );
                assert!(now.ss_size >= 64 << 10);
                for _ in 0..2000 {
                    assert!(!model.pfn_valid(hole));
                    assert!(model.pfn_valid(Pfn::new(7)));
                }
            });
        }
    });
}
