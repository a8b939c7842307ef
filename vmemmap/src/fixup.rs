//! Fault-probed loads: the kernel's exception table, in user space.
//!
//! The kernel reads memory that may not be mapped with an instruction whose
//! address is listed, with a recovery address, in `__ex_table`; the page
//! fault handler searches the table for the faulting instruction pointer
//! and, on a hit, resumes at the recovery address instead of oopsing.
//! KAMEZAWA's 2006 `pfn_valid` for SPARSEMEM_VMEMMAP (and ia64's
//! `ia64_pfn_valid` before it) used exactly this to ask "is there a
//! `struct page` here?" with one load.
//!
//! pfnlab does the same, on x86_64 and aarch64:
//! - [`probe_byte`] is one inline-asm byte load — `movzx eax, byte ptr
//!   [addr]` on x86_64, `ldrb w0, [addr]` on aarch64 — whose address and
//!   recovery label go into the `pfnlab_extable` section as PC-relative
//!   pairs (like `_ASM_EXTABLE`; arm64's `_ASM_EXTABLE` records the same
//!   pair). It inlines into the caller; when the load does not fault it
//!   costs what a plain load costs.
//! - [`install`] puts a `SA_SIGINFO | SA_ONSTACK` handler on SIGSEGV and
//!   SIGBUS. The handler looks the saved program counter (`RIP`; aarch64's
//!   `pc` in `mcontext_t`) up in the table. On a hit it sets it to the
//!   recovery label and the probe's output register (`RAX`; aarch64's
//!   `x0`) to [`FAULTED`] (zero), and returns. The only difference on
//!   aarch64 is where the saved registers live in the `ucontext_t`: the
//!   kernel's arm64 `ex_handler_load_unaligned_zeropad` and
//!   `fixup_exception` do the same two writes on `pt_regs`. On a miss the fault is not a
//!   probe's: it is handed to the handler that was installed before (Rust's
//!   stack-overflow handler, a sanitizer's, the application's); if that was
//!   `SIG_DFL` (or `SIG_IGN`, which cannot sensibly ignore a fault), the
//!   default action is restored and the handler returns, so the faulting
//!   instruction runs again and the process dies of the signal as it should.
//! - [`prepare_thread`] gives the calling thread an alternate signal stack
//!   if it has none (threads started by `std` already have one).
//!
//! The handler is async-signal-safe: it reads only the static table, a
//! `OnceLock` written before the handler was installed, and the context it
//! is given; it allocates nothing and takes no lock. Counting is one relaxed
//! atomic add.
//!
//! System calls go through nix (`sigaction`, `mmap`/`munmap` of the
//! alternate stacks); libc stays where nix has no interface: the saved
//! registers in `ucontext_t`, the query form of `sigaction` (a null new
//! action) and the raw previous action the handler chains to, and
//! `sigaltstack`.
//!
//! # Safety
//! This module holds the unsafe code of the fixup: inline asm, the signal
//! handler and `sigaction`/`sigaltstack`/`mmap` calls. The contract for
//! callers is on [`probe_byte`].

use std::cell::Cell;
use std::ffi::c_void;
use std::io;
use std::num::NonZeroUsize;
use std::ptr::NonNull;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::sys::mman::{self, MapFlags, ProtFlags};
use nix::sys::signal::{self, SaFlags, SigAction, SigHandler, SigSet, Signal};

/// What [`probe_byte`]'s output register holds after a caught fault: zero,
/// which is exactly how the all-zero descriptor of a hole reads. Callers that
/// only test bits of the byte (the PRESENT bit) then need no second test on
/// the hot path; [`fixup_count`] tells faults apart when that matters.
pub const FAULTED: u64 = 0;

static FIXUPS: AtomicU64 = AtomicU64::new(0);
static PREVIOUS: OnceLock<[libc::sigaction; 2]> = OnceLock::new();

// One inert entry (offsets 0, 0) so the section, and with it the linker's
// __start_/__stop_ symbols, exists in every binary that links this crate;
// the anchor symbol makes the handler reference this object so it is kept.
std::arch::global_asm!(
    ".pushsection pfnlab_extable, \"aR\"",
    ".balign 4",
    ".globl pfnlab_extable_anchor",
    "pfnlab_extable_anchor:",
    ".long 0, 0",
    ".popsection",
);

unsafe extern "C" {
    static pfnlab_extable_anchor: u8;
    static __start_pfnlab_extable: u8;
    static __stop_pfnlab_extable: u8;
}

/// Loads the byte at `addr`; a load that faults (SIGSEGV on `PROT_NONE`,
/// SIGBUS from a userfaultfd in SIGBUS mode) reads as 0.
///
/// # Safety
/// - [`install`] has returned successfully in this process;
/// - `addr` points into a mapping owned by the caller (a reservation whose
///   inaccessible parts are *meant* to fault): the probe turns a fault into
///   `None`, it does not make arbitrary addresses safe to read, and a read
///   with side effects (device memory) is never acceptable.
#[inline(always)]
pub unsafe fn probe_byte(addr: *const u8) -> u8 {
    let value: u64;
    // SAFETY: one byte load from `addr`, which the caller guarantees is in
    // its own mapping; a fault is caught by the installed handler, which
    // resumes at label 3 with the output register = FAULTED. The asm
    // touches no stack and no flags, and only reads memory.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::asm!(
            "2:",
            "movzx eax, byte ptr [{addr}]",
            "3:",
            ".pushsection pfnlab_extable, \"aR\"",
            ".balign 4",
            ".long 2b - .",
            ".long 3b - .",
            ".popsection",
            addr = in(reg) addr,
            out("rax") value,
            options(nostack, readonly, preserves_flags),
        );
    }
    // SAFETY: as above; `ldrb` zero-extends into x0, the register the
    // handler zeroes on a fault.
    #[cfg(target_arch = "aarch64")]
    unsafe {
        std::arch::asm!(
            "2:",
            "ldrb w0, [{addr}]",
            "3:",
            ".pushsection pfnlab_extable, \"aR\"",
            ".balign 4",
            ".long 2b - .",
            ".long 3b - .",
            ".popsection",
            addr = in(reg) addr,
            out("x0") value,
            options(nostack, readonly, preserves_flags),
        );
    }
    value as u8
}

/// Faults turned into "invalid" so far, in every thread.
pub fn fixup_count() -> u64 {
    // Relaxed: a statistic; no other memory is published through it.
    FIXUPS.load(Ordering::Relaxed)
}

/// The recovery address for a faulting instruction, if it is a probe.
fn search_extable(rip: usize) -> Option<usize> {
    // Taking the addresses of linker-defined symbols reads nothing; the
    // anchor is referenced so its object (the inert entry) is linked in.
    let (start, stop) = (
        &raw const __start_pfnlab_extable as usize,
        &raw const __stop_pfnlab_extable as usize,
    );
    std::hint::black_box(&raw const pfnlab_extable_anchor);
    let mut entry = start;
    while entry + 8 <= stop {
        // SAFETY: [start, stop) is the extable section: 4-byte aligned pairs
        // of i32 PC-relative offsets, each relative to its own field.
        let (insn_off, fixup_off) =
            unsafe { (*(entry as *const i32), *((entry + 4) as *const i32)) };
        let insn = entry.wrapping_add_signed(insn_off as isize);
        if insn_off != 0 && insn == rip {
            return Some((entry + 4).wrapping_add_signed(fixup_off as isize));
        }
        entry += 8;
    }
    None
}

/// The saved program counter of an interrupted context.
#[cfg(target_arch = "x86_64")]
fn saved_pc(uc: &libc::ucontext_t) -> usize {
    uc.uc_mcontext.gregs[libc::REG_RIP as usize] as usize
}

/// Resumes the context at `fixup` with the probe's output register (RAX)
/// set to [`FAULTED`].
#[cfg(target_arch = "x86_64")]
fn resume_at(uc: &mut libc::ucontext_t, fixup: usize) {
    uc.uc_mcontext.gregs[libc::REG_RIP as usize] = fixup as i64;
    uc.uc_mcontext.gregs[libc::REG_RAX as usize] = FAULTED as i64;
}

/// The saved program counter of an interrupted context.
#[cfg(target_arch = "aarch64")]
fn saved_pc(uc: &libc::ucontext_t) -> usize {
    uc.uc_mcontext.pc as usize
}

/// Resumes the context at `fixup` with the probe's output register (x0)
/// set to [`FAULTED`].
#[cfg(target_arch = "aarch64")]
fn resume_at(uc: &mut libc::ucontext_t, fixup: usize) {
    uc.uc_mcontext.pc = fixup as u64;
    uc.uc_mcontext.regs[0] = FAULTED;
}

extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid ucontext_t for SA_SIGINFO handlers;
    // we are its only user while the handler runs on this thread.
    let uc = unsafe { &mut *context.cast::<libc::ucontext_t>() };
    if let Some(fixup) = search_extable(saved_pc(uc)) {
        resume_at(uc, fixup);
        // Relaxed: a statistic.
        FIXUPS.fetch_add(1, Ordering::Relaxed);
        return;
    }
    chain(sig, info, context);
}

/// Hands a fault that is not a probe's to the previous handler.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let index = usize::from(sig == libc::SIGBUS);
    let previous = PREVIOUS.get().map(|p| p[index]);
    match previous {
        Some(old) if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN => {
            if old.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous handler was installed with SA_SIGINFO,
                // so it has this signature; we pass the kernel's arguments.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    unsafe { std::mem::transmute(old.sa_sigaction) };
                f(sig, info, context);
            } else {
                // SAFETY: a plain sa_handler takes the signal number only.
                let f: extern "C" fn(libc::c_int) =
                    unsafe { std::mem::transmute(old.sa_sigaction) };
                f(sig);
            }
        }
        _ => {
            let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
            if let Ok(signal) = Signal::try_from(sig) {
                // SAFETY: restoring the default action is async-signal-safe
                // (sigaction is); returning re-executes the faulting
                // instruction, which now takes the default action
                // (terminate, core).
                let _ = unsafe { signal::sigaction(signal, &default) };
            }
        }
    }
}

/// Installs the fixup handler on SIGSEGV and SIGBUS, once per process,
/// keeping the previous handlers to chain to.
pub fn install() -> io::Result<()> {
    static INSTALLED: OnceLock<Result<(), Errno>> = OnceLock::new();
    let result = INSTALLED.get_or_init(|| {
        // nix's sigaction always installs, so the previous actions are read
        // with libc's query form (a null new action) first: PREVIOUS is set
        // before our handler can run, and a genuine fault is never without
        // its previous handler to chain to.
        // SAFETY: querying with a null new action and valid out pointers.
        unsafe {
            let mut old: [libc::sigaction; 2] = std::mem::zeroed();
            for (slot, sig) in old.iter_mut().zip([libc::SIGSEGV, libc::SIGBUS]) {
                if libc::sigaction(sig, std::ptr::null(), slot) != 0 {
                    return Err(Errno::last());
                }
            }
            let _ = PREVIOUS.set(old);
        }
        let ours = SigAction::new(
            SigHandler::SigAction(handler),
            SaFlags::SA_SIGINFO | SaFlags::SA_ONSTACK,
            SigSet::empty(),
        );
        for sig in [Signal::SIGSEGV, Signal::SIGBUS] {
            // SAFETY: `handler` is async-signal-safe (no allocation, no
            // locks; see the module documentation) and chains every fault
            // that is not a probe's.
            unsafe { signal::sigaction(sig, &ours) }?;
        }
        prepare_thread().map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(0)))
    });
    result.map_err(|e| io::Error::from_raw_os_error(e as i32))
}

/// An alternate signal stack this module mapped for a thread.
struct AltStack {
    base: NonNull<c_void>,
    len: usize,
}

impl Drop for AltStack {
    fn drop(&mut self) {
        // nix has no sigaltstack: libc's, with a disabling stack_t.
        let disable = libc::stack_t {
            ss_sp: std::ptr::null_mut(),
            ss_flags: libc::SS_DISABLE,
            ss_size: 0,
        };
        // SAFETY: disable the alternate stack before unmapping it, so no
        // signal can land on freed memory; both calls take valid arguments
        // and the mapping is this value's own.
        unsafe {
            libc::sigaltstack(&disable, std::ptr::null_mut());
            let _ = mman::munmap(self.base, self.len);
        }
    }
}

thread_local! {
    static ALT_STACK: Cell<Option<AltStack>> = const { Cell::new(None) };
}

/// Gives the calling thread an alternate signal stack if it has none, so
/// the handler runs even when a probe faults near the end of the stack.
/// Cheap after the first call; the stack is freed at thread exit.
pub fn prepare_thread() -> io::Result<()> {
    // SAFETY: sigaltstack with a null new stack only queries.
    let mut current: libc::stack_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid out pointer (nix has no sigaltstack).
    if unsafe { libc::sigaltstack(std::ptr::null(), &mut current) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if current.ss_flags & libc::SS_DISABLE == 0 {
        return Ok(());
    }
    let len = (64 << 10).max(libc::SIGSTKSZ);
    let size = NonZeroUsize::new(len).ok_or_else(|| io::Error::other("zero SIGSTKSZ"))?;
    // SAFETY: a fresh private anonymous mapping at a kernel-chosen address.
    let base = unsafe {
        mman::mmap_anonymous(
            None,
            size,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_PRIVATE,
        )
    }?;
    let stack = libc::stack_t {
        ss_sp: base.as_ptr(),
        ss_flags: 0,
        ss_size: len,
    };
    // SAFETY: `stack` describes the mapping just made, which lives until the
    // thread-local AltStack drops (which disables it first).
    if unsafe { libc::sigaltstack(&stack, std::ptr::null_mut()) } != 0 {
        let err = io::Error::last_os_error();
        // SAFETY: unmapping the mapping made above, never installed.
        let _ = unsafe { mman::munmap(base, len) };
        return Err(err);
    }
    ALT_STACK.with(|s| s.set(Some(AltStack { base, len })));
    Ok(())
}
