//! What the kernel's own exception-table fixup costs, measured from user
//! space.
//!
//! [`fixup`](crate::fixup) answers a hole with a user-space signal round
//! trip. The 2006 proposal was about a *kernel* load that faults and is
//! fixed up through the exception table, which costs far less. A user
//! process cannot make the kernel fault on a vmemmap address, but it can
//! make it fault on a user address inside `copy_from_user`: `write()` from
//! a `PROT_NONE` page to a pipe faults in the copy, the page-fault handler
//! finds no VMA access, searches the exception table, and the syscall
//! returns `EFAULT`. Set against the same `write()` from mapped memory, the
//! difference is the fault, the fixup and the error return.
//!
//! It is an **upper bound** for a kernel-address vmemmap fault: a user
//! address fault also takes the mmap lock and looks up the VMA, which a
//! kernel-address fault skips. (`process_vm_readv` from a `PROT_NONE`
//! page is no substitute: it fails in `get_user_pages` before any fault.)
//!
//! Both writes go to a pipe that always holds some bytes, so each one
//! merges into the last pipe buffer (no page allocation on either path);
//! the mapped-memory writes are drained in large reads every
//! [`DRAIN_EVERY`] writes.
//!
//! # Safety
//! This module maps one `PROT_NONE` page and passes its address to
//! `write(2)` as a raw pointer: the kernel checks user addresses, so the
//! call returns `EFAULT` and nothing in this process touches the page.

use std::io;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::ptr::NonNull;

use nix::sys::mman::{self, MapFlags, ProtFlags};

/// Mapped-memory writes between two drains of the pipe (the pipe holds
/// 64 KiB by default).
pub const DRAIN_EVERY: usize = 32 * 1024;

/// A pipe and a `PROT_NONE` page: the two `write()`s whose difference is
/// the kernel's fault fixup.
pub struct KernelFixupProbe {
    read_end: OwnedFd,
    write_end: OwnedFd,
    inaccessible: NonNull<libc::c_void>,
    page_len: NonZeroUsize,
    byte: [u8; 1],
    pending: usize,
    drain: Vec<u8>,
}

impl KernelFixupProbe {
    /// A pipe holding one byte, and a `PROT_NONE` page.
    pub fn new() -> io::Result<KernelFixupProbe> {
        let (read_end, write_end) = nix::unistd::pipe()?;
        let page_len = NonZeroUsize::new(sparsemem::memmap::host_page_size())
            .ok_or_else(|| io::Error::other("page size 0"))?;
        // SAFETY: a fresh private anonymous mapping at a kernel-chosen
        // address; it overlaps nothing of ours and is only ever handed to
        // the kernel as a bad address.
        let inaccessible = unsafe {
            mman::mmap_anonymous(None, page_len, ProtFlags::PROT_NONE, MapFlags::MAP_PRIVATE)
        }?;
        let mut probe = KernelFixupProbe {
            read_end,
            write_end,
            inaccessible,
            page_len,
            byte: [0x5a],
            pending: 0,
            drain: vec![0; DRAIN_EVERY + 1],
        };
        probe.write_mapped()?;
        Ok(probe)
    }

    /// One `write()` of a byte from mapped memory into the pipe.
    #[inline]
    pub fn write_mapped(&mut self) -> io::Result<()> {
        if nix::unistd::write(self.write_end.as_fd(), &self.byte)? != 1 {
            return Err(io::Error::other("short write to the pipe"));
        }
        self.pending += 1;
        if self.pending > DRAIN_EVERY {
            // Leave one byte, so the next write still merges.
            let n = self.pending - 1;
            let got = nix::unistd::read(self.read_end.as_fd(), &mut self.drain[..n])?;
            self.pending -= got;
        }
        Ok(())
    }

    /// One `write()` of a byte from the `PROT_NONE` page: the kernel faults
    /// in `copy_from_user`, fixes the fault up through its exception table
    /// and returns `EFAULT`. Any other answer is an error.
    #[inline]
    pub fn write_faulting(&mut self) -> io::Result<()> {
        // SAFETY: `write(2)` with a pointer into our PROT_NONE page and a
        // length of 1 inside it: the kernel validates the access and fails
        // it with EFAULT; no memory of this process is read or written.
        let rc = unsafe { libc::write(self.write_end.as_raw_fd(), self.inaccessible.as_ptr(), 1) };
        let err = io::Error::last_os_error();
        match (rc, err.raw_os_error()) {
            (-1, Some(libc::EFAULT)) => Ok(()),
            (-1, _) => Err(err),
            _ => Err(io::Error::other(
                "write() from a PROT_NONE page did not fail with EFAULT",
            )),
        }
    }
}

impl Drop for KernelFixupProbe {
    fn drop(&mut self) {
        // SAFETY: our own mapping, never referenced by this process.
        let _ = unsafe { mman::munmap(self.inaccessible, self.page_len.get()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_faulting_write_fails_with_efault_and_the_mapped_one_succeeds() {
        let mut probe = KernelFixupProbe::new().unwrap();
        for _ in 0..3 * DRAIN_EVERY {
            probe.write_mapped().unwrap();
        }
        assert!(probe.pending <= DRAIN_EVERY + 1, "the pipe is drained");
        for _ in 0..1000 {
            probe.write_faulting().unwrap();
        }
        probe.write_mapped().unwrap();
    }
}
