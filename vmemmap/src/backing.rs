//! A memfd behind the memmap, so one page of it can be mapped at a second
//! address.
//!
//! The kernel's vmemmap is page tables over physical pages: HVO points
//! several vmemmap PTEs at one physical page and frees the others. A
//! private anonymous mapping cannot do that (a page of it has exactly one
//! address), so a vmemmap model built with [`crate::VmemmapOptions::memfd`]
//! maps its reservation `MAP_SHARED` over a sparse memfd of the same size:
//! file offset = offset in the reservation, and any file page can be mapped
//! again elsewhere with `mmap(MAP_FIXED)`. Punching a hole in the file
//! (`fallocate(FALLOC_FL_PUNCH_HOLE)`) gives its pages back to the kernel,
//! which is what `free_vmemmap_page_list` does to the freed vmemmap pages;
//! the file's allocated blocks (`fstat`'s `st_blocks`) are the kernel's own
//! count of the memmap's resident pages.
//!
//! The memfd is created with `MFD_CLOEXEC`; `memfd_create` files are
//! `VM_NORESERVE`, so the sparse size costs no commit charge.
//!
//! # Safety
//! This module calls `memfd_create`, `ftruncate`, `mmap`, `fallocate`,
//! `pwrite` and `fstat` (libc). [`Memfd::map_fixed`] replaces whatever was
//! mapped at its address: its callers keep to ranges of the reservation
//! they own, under the contract written there.

use std::ffi::c_void;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The protection of a mapping of the memfd.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Prot {
    /// `PROT_NONE`: a hole.
    None,
    /// `PROT_READ`: an optimised folio's remapped tail vmemmap pages.
    Read,
    /// `PROT_READ | PROT_WRITE`: populated memmap.
    ReadWrite,
}

/// A sparse memfd owned by one reservation.
///
/// Invariant: the file is `len` bytes long for its whole life.
pub struct Memfd {
    fd: OwnedFd,
    len: u64,
}

impl Memfd {
    /// Creates a sparse memfd of `len` bytes.
    pub fn new(len: u64) -> io::Result<Memfd> {
        let name = c"pfnlab-vmemmap";
        // SAFETY: a NUL-terminated name; the returned descriptor is checked.
        let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor no one else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let size = libc::off_t::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "memfd size overflows"))?;
        // SAFETY: our own descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Memfd { fd, len })
    }

    /// The file's size in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, offset: u64, len: u64) -> io::Result<()> {
        if offset.checked_add(len).is_some_and(|end| end <= self.len) {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "range outside the memfd",
            ))
        }
    }

    /// Maps `len` bytes of the file from `offset` at `addr`, shared,
    /// replacing whatever was mapped there (`MAP_FIXED`). An accessible
    /// mapping is populated at once (`MAP_POPULATE`), as the kernel's
    /// `vmemmap_remap_pte` and `vmemmap_restore_pte` write each PTE
    /// themselves: without it the first read of each page after a remap
    /// or a restore takes a minor fault the kernel never takes.
    ///
    /// # Safety
    /// - `[addr, addr + len)` lies in a mapping the caller owns, and no
    ///   Rust reference into it is used in a way the new mapping breaks
    ///   (the bytes change to the file's; a read-only mapping makes a
    ///   store fault);
    /// - `addr`, `offset` and `len` are host-page aligned.
    pub unsafe fn map_fixed(
        &self,
        addr: *mut u8,
        len: usize,
        offset: u64,
        prot: Prot,
    ) -> io::Result<()> {
        self.check(offset, len as u64)?;
        let prot = match prot {
            Prot::None => libc::PROT_NONE,
            Prot::Read => libc::PROT_READ,
            Prot::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
        };
        let off = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset overflows"))?;
        let populate = if prot == libc::PROT_NONE {
            0
        } else {
            libc::MAP_POPULATE
        };
        // SAFETY: the caller's contract: the range is theirs to replace.
        let got = unsafe {
            libc::mmap(
                addr.cast::<c_void>(),
                len,
                prot,
                libc::MAP_SHARED | libc::MAP_FIXED | libc::MAP_NORESERVE | populate,
                self.fd.as_raw_fd(),
                off,
            )
        };
        if got == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        debug_assert_eq!(got.cast::<u8>(), addr);
        Ok(())
    }

    /// Gives the file's pages in `[offset, offset + len)` back to the
    /// kernel (`FALLOC_FL_PUNCH_HOLE`); later reads of the range see zeros.
    pub fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        self.check(offset, len)?;
        let (off, n) = match (libc::off_t::try_from(offset), libc::off_t::try_from(len)) {
            (Ok(o), Ok(n)) => (o, n),
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "range overflows",
                ));
            }
        };
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        // SAFETY: our own descriptor; punching changes file contents only.
        if unsafe { libc::fallocate(self.fd.as_raw_fd(), mode, off, n) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Writes `bytes` into the file at `offset` (allocating its pages).
    pub fn write_at(&self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.check(offset, bytes.len() as u64)?;
        let off = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset overflows"))?;
        // SAFETY: `bytes` is a live slice of the length passed.
        let n = unsafe {
            libc::pwrite(
                self.fd.as_raw_fd(),
                bytes.as_ptr().cast::<c_void>(),
                bytes.len(),
                off,
            )
        };
        match usize::try_from(n) {
            Ok(n) if n == bytes.len() => Ok(()),
            Ok(_) => Err(io::Error::new(io::ErrorKind::WriteZero, "short pwrite")),
            Err(_) => Err(io::Error::last_os_error()),
        }
    }

    /// Bytes of the file the kernel has allocated pages for
    /// (`st_blocks * 512`).
    pub fn allocated_bytes(&self) -> io::Result<u64> {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fstat writes a whole `stat` on success.
        if unsafe { libc::fstat(self.fd.as_raw_fd(), st.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fstat succeeded, so `st` is initialised.
        let st = unsafe { st.assume_init() };
        Ok(st.st_blocks as u64 * 512)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn punching_a_written_page_gives_its_block_back() {
        let page = sparsemem::memmap::host_page_size();
        let fd = Memfd::new(16 * page as u64).unwrap();
        assert_eq!(fd.allocated_bytes().unwrap(), 0, "a fresh memfd is sparse");
        fd.write_at(3 * page as u64, &vec![7u8; page]).unwrap();
        assert_eq!(fd.allocated_bytes().unwrap(), page as u64);
        fd.punch_hole(3 * page as u64, page as u64).unwrap();
        assert_eq!(fd.allocated_bytes().unwrap(), 0);
        assert!(fd.punch_hole(16 * page as u64, page as u64).is_err());
    }
}
