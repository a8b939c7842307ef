//! buddy's integration tests, one binary: each file is one suite. The
//! userfaultfd suite needs the `uffd` feature.
//!
//! A test that counts a process-wide cache's objects runs its body in a
//! process of its own (`sparsemem::testing::run_alone`).

mod common;

mod compaction;
mod compaction_retry;
mod deferred;
mod deferred_bulk;
#[cfg(feature = "uffd")]
mod deferred_uffd;
mod defrag_mode;
mod descriptors;
mod descriptors8;
mod differential;
mod frames;
mod highatomic;
mod hotplug;
mod hotplug_notifier;
mod hugetlb;
mod llfree;
mod llfree_search;
mod memmap_init;
mod memmap_on_memory;
mod memmap_on_memory_frames;
mod migrate;
mod migratetype;
mod miri;
mod misuse;
mod movable_core;
mod nolock;
mod pcp;
mod pcp_eras;
mod pcp_tuning;
mod prep;
mod proactive;
mod split_page;
mod start_state;
mod stress;
mod views;
mod views_formats;
mod views_guests;
mod walk;
mod watermark;
