//! userfaultfd hole detection (feature `uffd`).
//!
//! Every hole of the reservation is registered with a userfaultfd in
//! MISSING mode (populating a range unregisters it first; depopulating
//! registers it again), so the first touch of a hole's memmap is reported
//! to user space instead of being filled by the kernel:
//!
//! - [`UffdZeroPage`]: a handler thread answers each fault with
//!   `UFFDIO_ZEROPAGE`. The hole then reads as an all-zero descriptor (not
//!   PRESENT) and every later probe of it is a plain load. The thread polls
//!   the (non-blocking) userfaultfd and an eventfd; dropping the model
//!   signals the eventfd and joins the thread, then closes both fds.
//! - [`UffdSigbus`]: `UFFD_FEATURE_SIGBUS` makes the kernel raise SIGBUS
//!   on the touch; the fault-probe fixup catches it, exactly as for
//!   `PROT_NONE` holes. Nothing is ever mapped into the holes.
//!
//! When the kernel refuses userfaultfd (not root, no
//! `vm.unprivileged_userfaultfd`, or no user-mode-only support),
//! construction fails with a clear error.

use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::eventfd::{EfdFlags, EventFd};
use sparsemem::{BuildError, PageLayout, Pfn};
use userfaultfd::{Event, FeatureFlags, Uffd, UffdBuilder};

use crate::model::{Detector, Vmemmap, probe_present};
use crate::reserve::{HoleStyle, Reservation};

fn create(features: FeatureFlags) -> Result<Uffd, BuildError> {
    let mut builder = UffdBuilder::new();
    builder
        .close_on_exec(true)
        .non_blocking(true)
        .require_features(features);
    builder
        .user_mode_only(true)
        .create()
        .or_else(|_| builder.user_mode_only(false).create())
        .map_err(|e| {
            BuildError::Unsupported(format!(
                "userfaultfd is not permitted here ({e}); run as root or set vm.unprivileged_userfaultfd=1"
            ))
        })
}

fn register_all(uffd: &Uffd, reservation: &Reservation) -> Result<(), BuildError> {
    uffd.register(reservation.base().cast(), reservation.len())
        .map(|_| ())
        .map_err(|e| BuildError::Unsupported(format!("userfaultfd register failed: {e}")))
}

fn to_io(e: userfaultfd::Error) -> io::Error {
    io::Error::other(e.to_string())
}

/// The handler thread of [`UffdZeroPage`].
struct HandlerThread {
    stop: Arc<EventFd>,
    join: Option<JoinHandle<()>>,
}

impl HandlerThread {
    fn spawn(uffd: Arc<Uffd>, faults: Arc<AtomicU64>) -> io::Result<HandlerThread> {
        let stop = Arc::new(EventFd::from_flags(
            EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK,
        )?);
        let thread_stop = Arc::clone(&stop);
        let join = std::thread::Builder::new()
            .name("pfnlab-uffd".into())
            .spawn(move || serve(&uffd, &thread_stop, &faults))?;
        Ok(HandlerThread {
            stop,
            join: Some(join),
        })
    }
}

/// Answers page faults with the zero page until the stop eventfd fires.
fn serve(uffd: &Uffd, stop: &EventFd, faults: &AtomicU64) {
    let page = sparsemem::memmap::host_page_size();
    loop {
        let mut fds = [
            PollFd::new(uffd.as_fd(), PollFlags::POLLIN),
            PollFd::new(stop.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(_) => return,
        }
        if fds[1].any().unwrap_or(true) {
            return;
        }
        while let Ok(Some(event)) = uffd.read_event() {
            if let Event::Pagefault { addr, .. } = event {
                let at = (addr as usize & !(page - 1)) as *mut std::ffi::c_void;
                // Counted before the answer wakes the faulting thread, so a
                // thread that reads the count after its probe sees its own
                // fault. Relaxed: a statistic read by tests and reports.
                faults.fetch_add(1, Ordering::Relaxed);
                // SAFETY: `at` is a page of a hole in a registered range of
                // the model's reservation; mapping the zero page there is what
                // the model expects (EEXIST when another thread won the race
                // is harmless and ignored).
                let _ = unsafe { uffd.zeropage(at, page, true) };
            }
        }
    }
}

impl Drop for HandlerThread {
    fn drop(&mut self) {
        // Wakes the thread's poll; it returns and is joined. A failed write
        // (the counter cannot overflow from 0) would leave the thread
        // blocked, so there is nothing better to do than try.
        let _ = self.stop.write(1);
        if let Some(join) = self.join.take() {
            let _ = join.join();
        }
    }
}

/// userfaultfd with a zero-page handler thread.
pub struct UffdZeroPage {
    // Field order matters: the thread is stopped and joined before the
    // userfaultfd it serves is closed.
    thread: HandlerThread,
    uffd: Arc<Uffd>,
    faults: Arc<AtomicU64>,
}

impl UffdZeroPage {
    /// Holes resolved by the handler thread so far.
    pub fn faults(&self) -> u64 {
        // Relaxed: a statistic.
        self.faults.load(Ordering::Relaxed)
    }

    /// Whether the handler thread is still running.
    pub fn thread_alive(&self) -> bool {
        self.thread.join.as_ref().is_some_and(|j| !j.is_finished())
    }
}

impl Detector for UffdZeroPage {
    const NAME: &'static str = "vmemmap-uffd";
    const WALKER: sparsemem::PfnWalker = sparsemem::PfnWalker::PerPfn;
    const HOLES: HoleStyle = HoleStyle::Missing;

    fn attach(reservation: &Reservation) -> Result<Self, BuildError> {
        let uffd = Arc::new(create(FeatureFlags::empty())?);
        register_all(&uffd, reservation)?;
        let faults = Arc::new(AtomicU64::new(0));
        let thread = HandlerThread::spawn(Arc::clone(&uffd), Arc::clone(&faults))
            .map_err(BuildError::Map)?;
        Ok(UffdZeroPage {
            thread,
            uffd,
            faults,
        })
    }

    #[inline(always)]
    fn pfn_valid<P: PageLayout>(model: &Vmemmap<Self, P>, pfn: Pfn) -> bool {
        if pfn.get() >= model.max_pfn() {
            return false;
        }
        let addr = model
            .vmemmap_base()
            .wrapping_add(pfn.get() as usize)
            .cast::<u8>();
        // SAFETY: pfn < max_pfn, so `addr` is in the reservation, which is
        // readable everywhere: populated ranges hold descriptors, holes are
        // resolved to the zero page by the handler thread on first touch.
        // The volatile read keeps it a real load of byte 0.
        let byte = unsafe { addr.read_volatile() };
        byte & P::PRESENT_BYTE_MASK != 0
    }

    fn before_populate(&self, addr: *mut u8, len: usize) -> io::Result<()> {
        self.uffd.unregister(addr.cast(), len).map_err(to_io)
    }

    fn after_depopulate(&self, addr: *mut u8, len: usize) -> io::Result<()> {
        self.uffd
            .register(addr.cast(), len)
            .map(|_| ())
            .map_err(to_io)
    }
}

/// userfaultfd in `UFFD_FEATURE_SIGBUS` mode, caught by the probe fixup.
pub struct UffdSigbus {
    uffd: Uffd,
}

impl Detector for UffdSigbus {
    const NAME: &'static str = "vmemmap-uffd-sigbus";
    const WALKER: sparsemem::PfnWalker = sparsemem::PfnWalker::PerPfn;
    const HOLES: HoleStyle = HoleStyle::Missing;

    fn attach(reservation: &Reservation) -> Result<Self, BuildError> {
        crate::model::install_fixup()?;
        let uffd = create(FeatureFlags::SIGBUS)?;
        register_all(&uffd, reservation)?;
        Ok(UffdSigbus { uffd })
    }

    #[inline(always)]
    fn pfn_valid<P: PageLayout>(model: &Vmemmap<Self, P>, pfn: Pfn) -> bool {
        probe_present(model.vmemmap_base(), model.max_pfn(), pfn)
    }

    fn before_populate(&self, addr: *mut u8, len: usize) -> io::Result<()> {
        self.uffd.unregister(addr.cast(), len).map_err(to_io)
    }

    fn after_depopulate(&self, addr: *mut u8, len: usize) -> io::Result<()> {
        self.uffd
            .register(addr.cast(), len)
            .map(|_| ())
            .map_err(to_io)
    }
}
