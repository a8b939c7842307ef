//! Fragmentation over time: what an allocator's free memory looks like as
//! a workload runs, sampled into a series of [`FragSample`]s
//! ([`crate::free_memory`]).
//!
//! [`workload`] runs LLFree's fragmentation benchmark shape on the buddy of
//! any era and on LLFree, sampling as it goes; [`recover`] prices the
//! huge frames its end state could still give; [`replay`] samples the same
//! series while a recorded trace is replayed.

pub mod host;
pub mod recover;
pub mod replay;
pub mod workload;

pub use crate::free_memory::{
    FallbackKinds, FragSample, Live, fragmentation_index, sample_buddy, sample_llfree,
    unusable_free_index,
};
