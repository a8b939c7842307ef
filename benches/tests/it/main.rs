//! pfnlab's integration tests, one binary: each file is one suite. The
//! suites that run the `pfnlab` command need the `cli` feature (a default).

#[cfg(feature = "cli")]
mod cli;
mod cpuset;
mod hotplug;
#[cfg(feature = "cli")]
mod hvo;
#[cfg(feature = "cli")]
mod lifecycle;
#[cfg(feature = "cli")]
mod memdesc;
#[cfg(feature = "cli")]
mod picture;
#[cfg(feature = "cli")]
mod recorded;
#[cfg(feature = "cli")]
mod snapshot;
mod trace;
#[cfg(feature = "cli")]
mod views;
