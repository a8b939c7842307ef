//! The flags experiment's seed program (2004): map 16 MiB of anonymous
//! memory, store to every page, unmap; repeat. Run under
//! `pfnlab trace record` it gives the kernel's own allocation stream for
//! that program, which `pfnlab bench flags` replays through each buddy:
//!
//! ```sh
//! cargo build --release --example seed_flags
//! pfnlab trace record --out seed-flags.trace.zst -- target/release/examples/seed_flags 40
//! ```
//!
//! The argument is the number of iterations (the seed ran 1000).

use memmap2::MmapMut;

fn main() {
    let iterations: u64 = match std::env::args().nth(1).map(|a| a.parse()) {
        None => 1000,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("seed_flags: the iteration count must be a number: {e}");
            std::process::exit(2);
        }
    };
    let len = 16 << 20;
    let page = 4096;
    for _ in 0..iterations {
        let mut map = match MmapMut::map_anon(len) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("seed_flags: mmap of {len} bytes: {e}");
                std::process::exit(1);
            }
        };
        for offset in (0..len).step_by(page) {
            map[offset] = 1;
        }
        // Dropping the map is the seed's munmap.
        std::hint::black_box(&map);
    }
}
