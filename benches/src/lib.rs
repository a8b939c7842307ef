//! # pfnlab — the lab
//!
//! The `pfnlab` command and the criterion benches share this library: the
//! model registry ([`models`]), the experiments on their one shape
//! ([`experiments`]), the measuring code, the reports and the traces. The
//! library never prints, exits or parses arguments: the binary
//! (`src/main.rs`, `src/cli/`) does, and turns the typed errors here into
//! one line and an exit status.

#![deny(unsafe_code)]

// `Counted` forwards `MemoryModel`'s unsafe promises to the model it wraps,
// and replays unchecked lookups on pfns checked valid beforehand.
#[allow(unsafe_code)]
pub mod counting;
pub mod error;
pub mod experiments;
/// The default comparison (`pfnlab` with no command).
pub use experiments::compare;
pub mod layout_spec;
pub mod machine;
pub mod models;
pub mod picture;
pub mod report;
// The counter reads (`rdtsc`/`rdtscp` with `lfence`; aarch64 `mrs cntvct_el0`).
pub mod threads;
#[allow(unsafe_code)]
pub mod timing;
pub mod trace;
// `pfn_to_page_unchecked` on pfns checked valid beforehand, as the kernel's
// callers do after one `pfn_valid`.
#[allow(unsafe_code)]
pub mod workloads;

/// The library guide's examples (`docs/library.md`), run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/library.md")]
pub struct LibraryGuide;

/// Bytes as a short human string (KiB, MiB, GiB, TiB).
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}
