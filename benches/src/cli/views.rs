//! `pfnlab zoneinfo`, `pfnlab buddyinfo` and `pfnlab pagetypeinfo`: the
//! model's zones as the kernel's `/proc` files show them, and a zoneinfo
//! held against a machine's (`--compare`). See docs/kernel-views.md.

use std::path::{Path, PathBuf};

use buddy::views::{SizingInputs, Zoneinfo, compare, kernel_zone_sizes, parse_zoneinfo};
use buddy::{Allocator, Era, Kernel, NR_KERNEL_ZONES, Options, Sysctls};
use pfnlab::layout_spec::LayoutSpec;
use pfnlab::snapshot::Snapshot;
use sparsemem::SparseExtreme;

use super::{CliError, load_layout, parse_layout};

/// The model and the inputs its zones are sized from, as the sysctls
/// spell them.
#[derive(clap::Args)]
pub struct ModelArgs {
    /// The layout: `host`, `preset:NAME` or a TOML file (default: host).
    #[arg(long, value_parser = parse_layout)]
    layout: Option<LayoutSpec>,
    /// The kernel era the allocator models (default 6.18).
    #[arg(long, value_parser = Era::parse)]
    era: Option<Era>,
    /// Online CPUs, spread evenly over the nodes (default: this machine's).
    #[arg(long)]
    cpus: Option<u32>,
    /// `vm.min_free_kbytes` (default: the kernel's own, khugepaged's when
    /// THP is enabled).
    #[arg(long)]
    min_free_kbytes: Option<u64>,
    /// `vm.watermark_scale_factor` (default 10).
    #[arg(long)]
    watermark_scale_factor: Option<u64>,
    /// `vm.lowmem_reserve_ratio`, five numbers (default "256 256 32 0 0").
    #[arg(long, value_parser = parse_ratio)]
    lowmem_reserve_ratio: Option<Ratio>,
    /// `vm.percpu_pagelist_high_fraction` (default 0).
    #[arg(long)]
    percpu_pagelist_high_fraction: Option<u32>,
    /// Transparent huge pages enabled (`always` or `madvise`), so
    /// khugepaged raises the default `min_free_kbytes` (default: yes from
    /// 5.13, as THP kernels ship).
    #[arg(long)]
    thp: Option<bool>,
    /// `host`: take the four sysctls, THP and the CPU count from this
    /// machine; the options above override them.
    #[arg(long, value_parser = parse_host)]
    sysctls: Option<Host>,
    /// Deferred struct page init (Linux 4.2 on): show the zones as boot
    /// leaves them, before the deferred pages are initialised and freed.
    #[arg(long)]
    deferred_init: bool,
    /// `snapshot:FILE`: start from the snapshot's free blocks per zone,
    /// order and migratetype, the rest allocated (see docs/snapshots.md).
    #[arg(long, value_parser = parse_start_state)]
    start_state: Option<PathBuf>,
    /// Where a start state's free blocks go (the same seed, the same pfns).
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// Parses `--start-state snapshot:FILE`.
pub fn parse_start_state(text: &str) -> Result<PathBuf, String> {
    text.strip_prefix("snapshot:")
        .map(PathBuf::from)
        .ok_or_else(|| format!("`{text}`: the only start state is `snapshot:FILE`"))
}

/// `pfnlab zoneinfo`'s options.
#[derive(clap::Args)]
pub struct ZoneinfoArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Size the zones from this zoneinfo's managed pages (a machine's)
    /// instead of the layout's.
    #[arg(long)]
    managed_from: Option<PathBuf>,
    /// Print the fields that differ from this zoneinfo (a machine's), each
    /// with its cause where known, instead of the model's file.
    #[arg(long)]
    compare: Option<PathBuf>,
}

/// `vm.lowmem_reserve_ratio`.
#[derive(Clone, Copy)]
pub struct Ratio([u64; NR_KERNEL_ZONES]);

/// `--sysctls host`.
#[derive(Clone, Copy)]
pub struct Host;

fn parse_ratio(text: &str) -> Result<Ratio, String> {
    let v: Vec<u64> = text
        .split_whitespace()
        .map(|n| n.parse().map_err(|_| format!("`{n}` is not a number")))
        .collect::<Result<_, _>>()?;
    let n = v.len();
    v.try_into()
        .map(Ratio)
        .map_err(|_| format!("{n} ratios, not one per zone type ({NR_KERNEL_ZONES})"))
}

fn parse_host(text: &str) -> Result<Host, String> {
    match text {
        "host" => Ok(Host),
        _ => Err(format!("`{text}`: the only source is `host`")),
    }
}

fn read(path: &Path) -> Result<String, CliError> {
    std::fs::read_to_string(path).map_err(|e| CliError(format!("{}: {e}", path.display())))
}

fn read_number<T: std::str::FromStr>(path: &str) -> Result<T, CliError> {
    let text = read(Path::new(path))?;
    text.trim()
        .parse()
        .map_err(|_| CliError(format!("{path}: `{}` is not a number", text.trim())))
}

/// The sysctls, THP and CPU count: the host's with `--sysctls host`,
/// else the defaults, each overridden by its own option.
fn inputs(args: &ModelArgs, era: Era) -> Result<(Sysctls, u32, u32), CliError> {
    let vm = "/proc/sys/vm";
    let mut sysctls = Sysctls {
        thp: era >= Era::V5_13,
        ..Sysctls::default()
    };
    let mut fraction = 0;
    let mut cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    if args.sysctls.is_some() {
        sysctls.min_free_kbytes = Some(read_number(&format!("{vm}/min_free_kbytes"))?);
        sysctls.watermark_scale_factor = read_number(&format!("{vm}/watermark_scale_factor"))?;
        let ratio = read(Path::new(&format!("{vm}/lowmem_reserve_ratio")))?;
        sysctls.lowmem_reserve_ratio = parse_ratio(&ratio).map_err(CliError)?.0;
        fraction = read_number(&format!("{vm}/percpu_pagelist_high_fraction"))?;
        let thp = read(Path::new("/sys/kernel/mm/transparent_hugepage/enabled"))?;
        sysctls.thp = !thp.contains("[never]");
    }
    sysctls.min_free_kbytes = args.min_free_kbytes.or(sysctls.min_free_kbytes);
    if let Some(f) = args.watermark_scale_factor {
        sysctls.watermark_scale_factor = f;
    }
    if let Some(r) = args.lowmem_reserve_ratio {
        sysctls.lowmem_reserve_ratio = r.0;
    }
    if let Some(t) = args.thp {
        sysctls.thp = t;
    }
    fraction = args.percpu_pagelist_high_fraction.unwrap_or(fraction);
    cpus = args.cpus.unwrap_or(cpus);
    Ok((sysctls, fraction, cpus))
}

/// The model's allocator and the inputs its zones were sized from.
fn build(
    args: &ModelArgs,
    outer: Option<LayoutSpec>,
) -> Result<(Allocator<SparseExtreme, Kernel>, SizingInputs), CliError> {
    let era = args.era.unwrap_or_default();
    let (sysctls, fraction, cpus) = inputs(args, era)?;
    let layout = load_layout(args.layout.as_ref().or(outer.as_ref()))?;
    let options = Options {
        cpus: Some(cpus),
        sysctls,
        percpu_pagelist_high_fraction: fraction,
        deferred_init: args.deferred_init,
        ..Options::for_era(era)
    };
    // The snapshot is read and checked before anything is built.
    let start = args
        .start_state
        .as_deref()
        .map(Snapshot::load)
        .transpose()?;
    let model = SparseExtreme::new(&layout)?;
    let mut alloc = Allocator::new(model, &layout, options)?;
    if let Some(snapshot) = &start {
        snapshot.start_state(&mut alloc, args.seed)?;
    }
    let nodes = alloc.nodes().len().max(1) as u32;
    let per_node = cpus.div_ceil(nodes).max(1);
    let g = layout.geometry();
    let inputs = SizingInputs {
        sysctls,
        percpu_pagelist_high_fraction: fraction,
        cpus_per_node: vec![per_node; nodes as usize],
        page_shift: g.page_shift(),
        pageblock_order: u32::from(g.pageblock_order().get()),
        era,
    };
    Ok((alloc, inputs))
}

/// `pfnlab zoneinfo`.
pub fn zoneinfo(args: ZoneinfoArgs, outer: Option<LayoutSpec>) -> Result<(), CliError> {
    // Read the machine's files first: bad input stops before any build.
    let parse = |path: &PathBuf| -> Result<Zoneinfo, CliError> {
        parse_zoneinfo(&read(path)?).map_err(|e| CliError(format!("{}: {e}", path.display())))
    };
    let managed_from = args.managed_from.as_ref().map(parse).transpose()?;
    let theirs = args.compare.as_ref().map(parse).transpose()?;
    let (alloc, inputs) = build(&args.model, outer)?;
    let mut info = alloc.zoneinfo();
    if let Some(file) = &managed_from {
        let managed = file.managed_zones();
        info.apply_sizes(&managed, &kernel_zone_sizes(&managed, &inputs));
    }
    let Some(theirs) = theirs else {
        print!("{info}");
        return Ok(());
    };
    let diffs = compare(&info, &theirs, &inputs);
    for d in &diffs {
        println!("{d}");
    }
    println!("{} fields differ", diffs.len());
    Ok(())
}

/// `pfnlab buddyinfo`.
pub fn buddyinfo(args: ModelArgs, outer: Option<LayoutSpec>) -> Result<(), CliError> {
    print!("{}", build(&args, outer)?.0.buddyinfo());
    Ok(())
}

/// `pfnlab pagetypeinfo`.
pub fn pagetypeinfo(args: ModelArgs, outer: Option<LayoutSpec>) -> Result<(), CliError> {
    print!("{}", build(&args, outer)?.0.pagetypeinfo());
    Ok(())
}
