//! The kernel-text trace parser (`trace_pipe` lines of the kmem page
//! events) on arbitrary bytes, line by line with one GFP cache across the
//! lines as `pfnlab replay` keeps it: every line gives a parsed line or one
//! error naming that line, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pfnlab::trace::text::{GfpCache, parse_bytes};

fuzz_target!(|data: &[u8]| {
    let mut cache = GfpCache::default();
    for (i, line) in data.split(|&b| b == b'\n').enumerate() {
        let n = i as u64 + 1;
        if let Err(e) = parse_bytes(line, n, &mut cache) {
            assert_eq!(e.line, n, "an error names its own line");
        }
    }
});
