//! # pfnlab — the lab
//!
//! The `pfnlab` command and the criterion benches share this library: the
//! model registry ([`models`]), the experiments on their one shape
//! ([`experiments`]), the measuring code, the reports and the traces. The
//! library never prints, exits or parses arguments: the binary
//! (`src/main.rs`, `src/cli/`) does, and turns the typed errors here into
//! one line and an exit status.

//!
//! Modules, bottom to top (each imports only modules below it):
//! `units`, `host_kernel`, `snapshot` (a machine's memory state), `timing`, `spread`, `threads`, `layout_spec`,
//! `models`, `counting`, `workloads`, `error`, `machine`, `report`, `trace`
//! (`text`, `format`, `record`, `replay`), `picture`, `experiments` (the
//! shape in its `mod.rs`, each experiment below it, its parts below it).

#![deny(unsafe_code)]

// `Counted` forwards `MemoryModel`'s unsafe promises to the model it wraps,
// and replays unchecked lookups on pfns checked valid beforehand.
#[allow(unsafe_code)]
pub mod counting;
pub mod error;
pub mod experiments;
pub mod frag;
pub mod free_memory;
pub mod host_kernel;
pub mod layout_spec;
pub mod machine;
pub mod models;
pub mod picture;
pub mod report;
pub mod snapshot;
pub mod spread;
// The counter reads (`rdtsc`/`rdtscp` with `lfence`; aarch64 `mrs cntvct_el0`).
pub mod threads;
#[allow(unsafe_code)]
pub mod timing;
pub mod trace;
pub mod units;
// `pfn_to_page_unchecked` on pfns checked valid beforehand, as the kernel's
// callers do after one `pfn_valid`.
#[allow(unsafe_code)]
pub mod workloads;

/// The library guide's examples (`docs/library.md`), run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/library.md")]
pub struct LibraryGuide;
