//! `local_irq_save` and `local_irq_restore` as user space can run them:
//! the eras whose per-CPU lists are guarded by disabling interrupts
//! ([`Era::pcp_irq_save`](crate::Era::pcp_irq_save)) pay the flags save
//! on every per-CPU call.
//!
//! On x86-64 without `PREEMPT_RT` and lockdep (`CONFIG_TRACE_IRQFLAGS`
//! off), `local_irq_save(flags)` is `arch_local_irq_save`
//! (`arch/x86/include/asm/irqflags.h`): `native_save_fl`, a `pushf` and a
//! `pop`, then `native_irq_disable`, a `cli`. `local_irq_restore(flags)`
//! is `arch_local_irq_restore`: since `ab234a260b1f` "x86/pv: Rework
//! arch_local_irq_restore() to not use popf" (5.12) it tests the saved
//! `X86_EFLAGS_IF` and runs `sti` only when it was set, where before it
//! ran `push; popf`. 5.14's `local_lock_irqsave` (`dbbee9d5cd83`
//! "mm/page_alloc: convert per-cpu list protection to local_lock") is the
//! same `local_irq_save` with a lockdep annotation that compiles away.
//!
//! User space runs the `pushf; pop`; it cannot run `cli` or `sti` (both
//! fault at IOPL 0), so a model that disables nothing pays neither, and
//! the restore's test of the saved flag, which would guard only the
//! `sti`, is left to the compiler to drop. Unlike the kernel's, the save
//! is no compiler barrier (the kernel's carries a `"memory"` clobber):
//! the model runs every release in one build, the save behind a test of
//! the release, and a barrier there would make every release's per-CPU
//! path reload what it holds in registers, those without the save too.
//! On other architectures nothing is modelled: arm64's `mrs daif` and
//! `msr daifset` both trap at EL0 while `SCTLR_EL1.UMA` is clear, as
//! Linux leaves it.

#[cfg(test)]
use std::cell::Cell;

#[cfg(test)]
thread_local! {
    /// This thread's calls of [`local_irq_save`] and the saves not yet
    /// restored, for the tests.
    static SAVES: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// The saved flags of [`local_irq_save`], for [`local_irq_restore`].
#[derive(Clone, Copy, Debug)]
#[must_use = "restore the flags with local_irq_restore"]
pub(crate) struct IrqFlags(u64);

/// The flags of a release that does not disable interrupts around the
/// per-CPU lists: nothing saved, nothing to restore. A saved RFLAGS is
/// never 0 (its bit 1 is always set).
const NOT_SAVED: u64 = 0;

/// [`local_irq_save`] in the releases that guard the per-CPU lists with
/// it (`on`, [`Era::pcp_irq_save`](crate::Era::pcp_irq_save)), and
/// nothing in the others, whose [`local_irq_restore`] then does nothing.
#[inline(always)]
pub(crate) fn local_irq_save_if(on: bool) -> IrqFlags {
    if on {
        local_irq_save()
    } else {
        IrqFlags(NOT_SAVED)
    }
}

/// `local_irq_save`: the flags saved (`pushf; pop`); the `cli` that
/// follows in the kernel is not run.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn local_irq_save() -> IrqFlags {
    let flags: u64;
    // SAFETY: `pushfq` stores RFLAGS below the stack pointer and `pop`
    // takes it back into a register: the stack is left as it was, and the
    // block reads no other memory and writes none (`nomem`; no `nostack`,
    // so the compiler keeps the red zone clear for the push). Both are
    // legal at CPL 3 and change no flag (`preserves_flags`).
    unsafe {
        core::arch::asm!(
            "pushfq",
            "pop {flags}",
            flags = out(reg) flags,
            options(nomem, preserves_flags)
        );
    }
    #[cfg(test)]
    note_save();
    IrqFlags(flags)
}

/// `local_irq_save` elsewhere: nothing user space may run (flags with
/// only the always-set bit, so that the tests count it as a save).
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn local_irq_save() -> IrqFlags {
    #[cfg(test)]
    note_save();
    IrqFlags(1 << 1)
}

/// `local_irq_restore`: nothing user space may run. The kernel's test of
/// the saved `X86_EFLAGS_IF` guards only its `sti`.
#[inline(always)]
pub(crate) fn local_irq_restore(flags: IrqFlags) {
    #[cfg(test)]
    if flags.0 != NOT_SAVED {
        note_restore();
    }
    debug_assert!(
        flags.0 == NOT_SAVED || flags.0 & 1 << 1 != 0,
        "saved flags without RFLAGS' always-set bit"
    );
}

#[cfg(test)]
fn note_save() {
    SAVES.with(|c| {
        let (saves, held) = c.get();
        c.set((saves + 1, held + 1));
    });
}

#[cfg(test)]
fn note_restore() {
    SAVES.with(|c| {
        let (saves, held) = c.get();
        assert!(held > 0, "local_irq_restore without a save");
        c.set((saves, held - 1));
    });
}

/// This thread's saves since the last call, and those not restored.
#[cfg(test)]
fn take_saves() -> (u64, u64) {
    SAVES.with(|c| {
        let (saves, held) = c.get();
        c.set((0, held));
        (saves, held)
    })
}

#[cfg(test)]
mod tests {
    use sparsemem::{Geometry, Layout, MemRange, NodeId, RangeKind, SparseExtreme};

    use super::take_saves;
    use crate::{Allocator, Era, Gfp, Kernel, Options};

    /// Each per-CPU call saves and restores the flags once in the eras
    /// that disable interrupts around the lists, before 6.2, and never
    /// after; a failed pcp trylock (6.1) restores them before going to
    /// the zone.
    #[test]
    fn the_flags_are_saved_on_the_per_cpu_path_before_6_2() {
        let layout = Layout::new(
            Geometry::X86_64,
            vec![MemRange::new(16 << 20, 80 << 20, RangeKind::Ram, 0)],
            "64 MiB",
        )
        .unwrap();
        for era in Era::ALL {
            let model = SparseExtreme::new(&layout).unwrap();
            let alloc = Allocator::<_, Kernel>::new(model, &layout, Options::for_era(era)).unwrap();
            let mut cpu = alloc.cpu_on(NodeId::ZERO).unwrap();
            let per_call = u64::from(era.pcp_irq_save());
            take_saves();
            let pfn = cpu.alloc(Gfp::KERNEL).unwrap();
            assert_eq!(take_saves(), (per_call, 0), "an allocation in {era}");
            cpu.free(pfn).unwrap();
            assert_eq!(take_saves(), (per_call, 0), "a free in {era}");
            let mut slots = [None; 8];
            assert_eq!(cpu.alloc_bulk_array(Gfp::KERNEL, &mut slots).unwrap(), 8);
            assert_eq!(take_saves(), (per_call, 0), "a bulk call in {era}");
            for pfn in slots.into_iter().flatten() {
                cpu.free(pfn).unwrap();
            }
            assert_eq!(take_saves(), (8 * per_call, 0), "8 frees in {era}");
            if era.pcp_lock() {
                assert!(cpu.pcp[0].lock.try_lock());
                let pfn = cpu.alloc(Gfp::KERNEL).unwrap();
                cpu.free(pfn).unwrap();
                cpu.pcp[0].lock.unlock();
                assert_eq!(take_saves(), (2 * per_call, 0), "trylock failed in {era}");
            }
        }
    }
}
