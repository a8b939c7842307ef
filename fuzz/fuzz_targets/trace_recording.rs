//! The trace reader on arbitrary bytes: a pfnlab recording (plain or
//! zstd-compressed) or the kernel's text, whichever the bytes look like.
//! Opening gives a reader or one error; every read gives an event or an
//! error; a bounded number of reads ends the stream, never a panic or a
//! hang.
#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;
use pfnlab::trace::format::TraceReader;

/// More reads than any input of the fuzzer's size holds events.
const MAX_READS: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Ok(reader) = TraceReader::from_reader(Box::new(Cursor::new(data.to_vec()))) else {
        return;
    };
    let _ = reader.header();
    for item in reader.take(MAX_READS) {
        let _ = std::hint::black_box(item);
    }
});
