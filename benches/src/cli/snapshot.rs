//! `pfnlab snapshot`: this machine's memory state in one file, for
//! `--layout snapshot:FILE`. See docs/snapshots.md.

use std::path::PathBuf;

use pfnlab::snapshot::Snapshot;

use super::CliError;

/// `pfnlab snapshot`'s options.
#[derive(clap::Args)]
pub struct SnapshotArgs {
    /// The file to write (JSON).
    #[arg(long)]
    out: PathBuf,
    /// Read the machine's files under this directory instead of `/` (a
    /// copy of another machine's `/proc` and `/sys`, of this
    /// architecture and page size).
    #[arg(long, default_value = "/")]
    root: PathBuf,
}

/// `pfnlab snapshot`.
pub fn snapshot(args: SnapshotArgs) -> Result<(), CliError> {
    let page_size = sparsemem::memmap::host_page_size() as u64;
    let snap = Snapshot::read(&args.root, std::env::consts::ARCH, page_size);
    snap.save(&args.out)?;
    println!("wrote {}", args.out.display());
    for u in &snap.unreadable {
        println!("could not read {}: {}", u.path, u.error);
    }
    Ok(())
}
