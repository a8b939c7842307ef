//! sparsemem's integration tests, one binary: each file is one suite.
//!
//! `PFNLAB_PROPTEST_CASES` scales the generated suites (see
//! `sparsemem::testing::cases`).

mod differential;
mod direct_map;
mod table;
mod walk;
