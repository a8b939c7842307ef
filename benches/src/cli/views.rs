//! `pfnlab zoneinfo`, `pfnlab buddyinfo` and `pfnlab pagetypeinfo`: the
//! model's zones as the kernel's `/proc` files show them, and a zoneinfo
//! held against a machine's (`--compare`). See docs/kernel-views.md.

use std::path::{Path, PathBuf};

use buddy::views::{SizingInputs, Zoneinfo, compare, kernel_zone_sizes, parse_zoneinfo};
use buddy::{Allocator, Era, Kernel, MovableCore, NR_KERNEL_ZONES, Options, Sysctls};
use pfnlab::layout_spec::LayoutSpec;
use pfnlab::snapshot::{Snapshot, SnapshotError, StartState, SysctlText, parse_cpulist};
use sparsemem::SparseExtreme;

use super::{CliError, load_layout, parse_layout};

/// The model and the inputs its zones are sized from, as the sysctls
/// spell them.
#[derive(clap::Args)]
pub struct ModelArgs {
    /// The layout: `host`, `preset:NAME` (x86-pci-hole, ia64-holes,
    /// numa-fake-64, zone-device, sparse-52bit), `snapshot:FILE` (the
    /// machine a `pfnlab snapshot` file was taken on) or a TOML file (default: host).
    #[arg(long, value_parser = parse_layout)]
    layout: Option<LayoutSpec>,
    /// The kernel era the allocator models: 2.6.9, 2.6.23, 5.13, 5.14,
    /// 5.15, 6.1, 6.6, 6.8, 6.12 or 6.18 (default: a snapshot's kernel's,
    /// the newest era at or below its release, when a snapshot is given;
    /// else 6.18).
    #[arg(long, value_parser = Era::parse)]
    era: Option<Era>,
    /// Online CPUs (default: this machine's), spread evenly over the nodes
    /// unless `--node-cpus` gives each node's.
    #[arg(long)]
    cpus: Option<u32>,
    /// Each node's CPU count, by node id, comma-separated (`2,2,0,0`: two
    /// nodes of two CPUs, two without): what the node's `cpulist` names,
    /// which under fake NUMA is every CPU on every node. The per-CPU `high`
    /// of a node's zones is split over its CPUs, over every online CPU on
    /// a node without any (default: `--sysctls`' machine's nodes, else the
    /// online CPUs spread evenly).
    #[arg(long, value_parser = parse_node_cpus)]
    node_cpus: Option<NodeCpus>,
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
    /// `true` or `false`: whether transparent huge pages are enabled
    /// (`always` or `madvise` rather than `never`), so that khugepaged
    /// raises the default `min_free_kbytes` (default: true from 5.13, as
    /// THP kernels ship).
    #[arg(long, value_name = "true|false")]
    thp: Option<bool>,
    /// `kernelcore=`: the memory every allocation may use (`2G`, `60%`),
    /// spread over the nodes; the rest of each node is ZONE_MOVABLE
    /// (2.6.23 on, percentages 4.17 on; default: the kernel command line
    /// of `--sysctls`' machine, else none).
    #[arg(long)]
    kernelcore: Option<buddy::CoreSize>,
    /// `movablecore=`: the memory for ZONE_MOVABLE (`1G`, `25%`), at the
    /// top of each node (default: as `--kernelcore`).
    #[arg(long)]
    movablecore: Option<buddy::CoreSize>,
    /// `host`: take the four sysctls, THP, the CPU count and
    /// `kernelcore=`/`movablecore=` (from the kernel command line) from
    /// this machine; `snapshot:FILE`: from the machine a snapshot was
    /// taken on. The options above override them.
    #[arg(long, value_parser = parse_sysctls)]
    sysctls: Option<SysctlSource>,
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
    snapshot_file(text, "start state")
}

/// The FILE of `snapshot:FILE`, the only form a `what` (a start or an end
/// state) takes.
pub fn snapshot_file(text: &str, what: &str) -> Result<PathBuf, String> {
    text.strip_prefix("snapshot:")
        .map(PathBuf::from)
        .ok_or_else(|| format!("`{text}`: the only {what} is `snapshot:FILE`"))
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

/// `--node-cpus`: each node's CPU count, by node id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeCpus(Vec<u32>);

fn parse_node_cpus(text: &str) -> Result<NodeCpus, String> {
    text.split(',')
        .map(|n| {
            n.trim()
                .parse()
                .map_err(|_| format!("`{n}` is not a CPU count (give one per node: `2,2,0,0`)"))
        })
        .collect::<Result<_, _>>()
        .map(NodeCpus)
}

/// Where `--sysctls` reads from.
#[derive(Clone)]
pub enum SysctlSource {
    /// This machine's `/proc/sys/vm` and THP mode.
    Host,
    /// A snapshot's saved sysctls and CPU count.
    Snapshot(PathBuf),
}

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

fn parse_sysctls(text: &str) -> Result<SysctlSource, String> {
    match (text, text.strip_prefix("snapshot:")) {
        ("host", _) => Ok(SysctlSource::Host),
        (_, Some(file)) => Ok(SysctlSource::Snapshot(PathBuf::from(file))),
        _ => Err(format!(
            "`{text}`: the sources are `host` and `snapshot:FILE`"
        )),
    }
}

/// What one machine gave of the inputs: the four sysctls' texts and THP's
/// mode ([`SysctlText`] is the snapshot's form of each), the online CPU
/// count, and each node's CPU count by node id (empty when unknown).
struct Machine {
    text: SysctlText,
    cpus: Option<u32>,
    node_cpus: Vec<u32>,
    /// Its kernel command line, when read.
    cmdline: Option<String>,
    /// The pages it freed after sizing its zones
    /// ([`Snapshot::freed_after_sizing`]; none known for the live host).
    freed_after_sizing: Vec<(u32, usize, u64)>,
}

/// Each node's CPU count by node id from `(id, cpulist)` pairs; a node
/// not listed, or whose cpulist was not read, has none.
fn node_cpu_counts<'a>(
    nodes: impl Iterator<Item = (u16, Option<&'a str>)>,
) -> Result<Vec<u32>, CliError> {
    let mut counts = Vec::new();
    for (id, cpulist) in nodes {
        let n = match cpulist {
            Some(list) => parse_cpulist(list).ok_or_else(|| {
                CliError(format!(
                    "node{id}/cpulist: `{}` is not a cpulist",
                    list.trim()
                ))
            })?,
            None => 0,
        };
        let i = usize::from(id);
        if counts.len() <= i {
            counts.resize(i + 1, 0);
        }
        counts[i] = n;
    }
    Ok(counts)
}

/// This machine's nodes and the CPUs each lists
/// (`/sys/devices/system/node/nodeN/cpulist`).
fn host_node_cpus() -> Result<Vec<u32>, CliError> {
    let dir = Path::new("/sys/devices/system/node");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut nodes = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(id) = name.to_str().and_then(|n| n.strip_prefix("node")) else {
            continue;
        };
        let Ok(id) = id.parse::<u16>() else {
            continue;
        };
        nodes.push((
            id,
            std::fs::read_to_string(entry.path().join("cpulist")).ok(),
        ));
    }
    node_cpu_counts(nodes.iter().map(|(id, list)| (*id, list.as_deref())))
}

/// The inputs as one machine gave them.
fn machine_sysctls(source: &SysctlSource) -> Result<Machine, CliError> {
    let vm = "/proc/sys/vm";
    match source {
        SysctlSource::Host => {
            let read = |path: &str| read(Path::new(path)).map(Some);
            let text = SysctlText {
                min_free_kbytes: read(&format!("{vm}/min_free_kbytes"))?,
                watermark_scale_factor: read(&format!("{vm}/watermark_scale_factor"))?,
                lowmem_reserve_ratio: read(&format!("{vm}/lowmem_reserve_ratio"))?,
                percpu_pagelist_high_fraction: read(&format!(
                    "{vm}/percpu_pagelist_high_fraction"
                ))?,
                transparent_hugepage: read("/sys/kernel/mm/transparent_hugepage/enabled")?,
            };
            Ok(Machine {
                text,
                cpus: None,
                node_cpus: host_node_cpus()?,
                cmdline: std::fs::read_to_string("/proc/cmdline").ok(),
                freed_after_sizing: Vec::new(),
            })
        }
        SysctlSource::Snapshot(path) => {
            let snapshot = Snapshot::load(path)?;
            let node_cpus =
                node_cpu_counts(snapshot.nodes.iter().map(|n| (n.id, n.cpulist.as_deref())))?;
            let freed_after_sizing = snapshot.freed_after_sizing()?;
            Ok(Machine {
                text: snapshot.sysctls,
                cpus: snapshot.cpus,
                node_cpus,
                cmdline: snapshot.kernel.cmdline,
                freed_after_sizing,
            })
        }
    }
}

/// A sysctl's text as a number, or why not (`what` names it).
fn number<T: std::str::FromStr>(text: Option<&str>, what: &str) -> Result<T, CliError> {
    let text = text.ok_or_else(|| CliError(format!("{what}: not read on that machine")))?;
    text.trim()
        .parse()
        .map_err(|_| CliError(format!("{what}: `{}` is not a number", text.trim())))
}

fn read(path: &Path) -> Result<String, CliError> {
    std::fs::read_to_string(path).map_err(|e| CliError(format!("{}: {e}", path.display())))
}

/// The sysctls, THP and CPUs the zones are sized from.
struct Inputs {
    sysctls: Sysctls,
    /// `vm.percpu_pagelist_high_fraction`.
    fraction: u32,
    /// Online CPUs.
    cpus: u32,
    /// Each node's CPU count by node id; empty: `cpus` spread evenly.
    node_cpus: Vec<u32>,
    /// `kernelcore=` and `movablecore=`.
    movable: MovableCore,
    /// Why the machine's command line gave none, when it named them in a
    /// form pfnlab does not model.
    movable_ignored: Option<&'static str>,
    /// The pages the machine freed after sizing its zones.
    freed_after_sizing: Vec<(u32, usize, u64)>,
}

/// The sysctls, THP and CPUs: the machine's with `--sysctls` (this one's,
/// or a snapshot's), else the defaults, each overridden by its own option.
fn inputs(args: &ModelArgs, era: Era) -> Result<Inputs, CliError> {
    let mut sysctls = Sysctls {
        thp: era >= Era::V5_13,
        ..Sysctls::default()
    };
    let mut fraction = 0;
    let mut cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let mut node_cpus = Vec::new();
    let mut movable = MovableCore::default();
    let mut movable_ignored = None;
    let mut freed_after_sizing = Vec::new();
    if let Some(source) = &args.sysctls {
        let Machine {
            text,
            cpus: machine_cpus,
            node_cpus: machine_nodes,
            cmdline,
            freed_after_sizing: freed,
        } = machine_sysctls(source)?;
        node_cpus = machine_nodes;
        freed_after_sizing = freed;
        if let Some(line) = cmdline {
            (movable, movable_ignored) = MovableCore::from_cmdline(&line);
        }
        sysctls.min_free_kbytes = Some(number(
            text.min_free_kbytes.as_deref(),
            "vm.min_free_kbytes",
        )?);
        sysctls.watermark_scale_factor = number(
            text.watermark_scale_factor.as_deref(),
            "vm.watermark_scale_factor",
        )?;
        let ratio = text
            .lowmem_reserve_ratio
            .as_deref()
            .ok_or_else(|| CliError("vm.lowmem_reserve_ratio: not read on that machine".into()))?;
        sysctls.lowmem_reserve_ratio = parse_ratio(ratio).map_err(CliError)?.0;
        fraction = number(
            text.percpu_pagelist_high_fraction.as_deref(),
            "vm.percpu_pagelist_high_fraction",
        )?;
        let thp = text.transparent_hugepage.as_deref().ok_or_else(|| {
            CliError("transparent_hugepage/enabled: not read on that machine".into())
        })?;
        sysctls.thp = !thp.contains("[never]");
        cpus = machine_cpus.unwrap_or(cpus);
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
    movable.kernelcore = args.kernelcore.or(movable.kernelcore);
    movable.movablecore = args.movablecore.or(movable.movablecore);
    cpus = args.cpus.unwrap_or(cpus);
    if let Some(NodeCpus(given)) = &args.node_cpus {
        node_cpus = given.clone();
    }
    if let Some((node, n)) = node_cpus.iter().enumerate().find(|(_, n)| **n > cpus) {
        return Err(CliError(format!(
            "node {node}: {n} CPUs, more than the {cpus} online (--cpus)"
        )));
    }
    Ok(Inputs {
        sysctls,
        fraction,
        cpus,
        node_cpus,
        movable,
        movable_ignored,
        freed_after_sizing,
    })
}

/// The era: `--era`, else the kernel's of the first snapshot given
/// (`--start-state`, `--sysctls`, `--layout`), with the note that says so,
/// else the default.
fn era_of(args: &ModelArgs, outer: Option<&LayoutSpec>) -> Result<(Era, Option<String>), CliError> {
    if let Some(era) = args.era {
        return Ok((era, None));
    }
    let layout = match args.layout.as_ref().or(outer) {
        Some(LayoutSpec::Snapshot(path)) => Some(path),
        _ => None,
    };
    let sysctls = match &args.sysctls {
        Some(SysctlSource::Snapshot(path)) => Some(path),
        _ => None,
    };
    let Some(path) = args.start_state.as_ref().or(sysctls).or(layout) else {
        return Ok((Era::default(), None));
    };
    Ok(match Snapshot::load(path)?.era() {
        Some((era, release)) => (
            era,
            Some(format!(
                "era {era}: the newest pfnlab era at or below the snapshot's kernel {release}"
            )),
        ),
        None => (Era::default(), None),
    })
}

/// The model's allocator and the inputs its zones were sized from.
fn build(
    args: &ModelArgs,
    outer: Option<LayoutSpec>,
) -> Result<(Allocator<SparseExtreme, Kernel>, SizingInputs), CliError> {
    let (era, note) = era_of(args, outer.as_ref())?;
    let Inputs {
        sysctls,
        fraction,
        cpus,
        node_cpus,
        movable,
        movable_ignored,
        freed_after_sizing,
    } = inputs(args, era)?;
    let layout = load_layout(args.layout.as_ref().or(outer.as_ref()))?;
    let options = Options {
        cpus: Some(cpus),
        sysctls,
        percpu_pagelist_high_fraction: fraction,
        deferred_init: args.deferred_init,
        movable_core: movable,
        ..Options::for_era(era)
    };
    // The snapshot is read and checked before anything is built.
    let start = args
        .start_state
        .as_deref()
        .map(|path| StartState::load(path, args.seed))
        .transpose()?;
    let options = match &start {
        Some(start) => start.options(options)?,
        None => options,
    };
    let model = SparseExtreme::new(&layout)?;
    let mut alloc = Allocator::new(model, &layout, options)?;
    if !node_cpus.is_empty() {
        alloc.set_node_cpus(&node_cpus);
    }
    if let Some(start) = &start {
        start.apply(&mut alloc).map_err(|e| match e {
            buddy::AllocError::StartState(e) => SnapshotError::StartState(e).into(),
            e => CliError::from(e),
        })?;
    }
    let nodes = alloc.nodes().len().max(1) as u32;
    let cpus_per_node = if node_cpus.is_empty() {
        vec![cpus.div_ceil(nodes).max(1); nodes as usize]
    } else {
        node_cpus
    };
    let g = layout.geometry();
    let inputs = SizingInputs {
        sysctls,
        percpu_pagelist_high_fraction: fraction,
        cpus_per_node,
        online_cpus: cpus,
        page_shift: g.page_shift(),
        pageblock_order: u32::from(g.pageblock_order().get()),
        era,
        freed_after_sizing,
    };
    // Said once the model is built, so an error stays one line.
    if let Some(note) = note {
        eprintln!("{note}");
    }
    if let Some(why) = movable_ignored {
        eprintln!("no ZONE_MOVABLE from the machine's command line: {why}");
    }
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
