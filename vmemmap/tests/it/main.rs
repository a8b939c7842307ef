//! vmemmap's integration tests, one binary: each file is one suite. The
//! userfaultfd suite needs the `uffd` feature.
//!
//! A test that watches a fault kill a process, or counts threads and file
//! descriptors, runs its body in a child process of its own
//! (`sparsemem::testing::run_child` and `run_alone`).

#[macro_use]
mod common;

mod differential;
mod hvo;
mod model;
mod page_sizes;
mod signals;
mod small_space;
#[cfg(feature = "uffd")]
mod uffd;
mod walk;
