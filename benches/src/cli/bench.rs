//! `pfnlab bench EXPERIMENT`: one subcommand per experiment, each with
//! only the options it takes, turned into the experiment's parameters and
//! handed to the library's one runner.

use std::path::PathBuf;

use pfnlab::experiments::lifecycle::MemmapLifecycle;
use pfnlab::experiments::{
    Experiment, Prepared, Setup, UnknownExperiment, breakdown, bulk, cpuset, flags, frag,
    hole_density, hvo, lock, memdesc, peers, pfn_valid, scale, walk,
};
use pfnlab::layout_spec::LayoutSpec;
use pfnlab::models::ModelKind;

use super::{CliError, StartArgs, TrialArgs, fallback_notice, parse_layout, plan};

/// The options every experiment takes.
#[derive(Clone, Debug, clap::Args)]
pub struct Common {
    /// The layout: `host`, `preset:NAME` (x86-pci-hole, ia64-holes,
    /// numa-fake-64, zone-device, sparse-52bit), `snapshot:FILE` (the
    /// machine a `pfnlab snapshot` file was taken on) or a TOML file (default: the experiment's own).
    #[arg(long, value_parser = parse_layout)]
    layout: Option<LayoutSpec>,
    /// Kernel era whose mechanisms the allocator models: 2.6.9, 2.6.23,
    /// 5.13, 5.14, 5.15, 6.1, 6.6, 6.8, 6.12 or 6.18 (default: the
    /// experiment's seed's era).
    #[arg(long, value_parser = buddy::Era::parse)]
    era: Option<buddy::Era>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Short runs (for tests and smoke checks).
    #[arg(long)]
    quick: bool,
    #[command(flatten)]
    trials: TrialArgs,
    #[command(flatten)]
    start: StartArgs,
}

/// [`Common`] and `--model`, for the experiments that take a model.
#[derive(Clone, Debug, clap::Args)]
pub struct WithModel {
    #[command(flatten)]
    common: Common,
    /// Memory model (default: the experiment's own choice).
    #[arg(long, value_parser = ModelKind::parse)]
    model: Option<ModelKind>,
}

/// The experiments.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// No-bitmap buddy and atomic page-flag operations (2004): the seed's
    /// program and its recording through four buddies.
    Flags {
        #[command(flatten)]
        run: WithModel,
        /// Threads of the multi-threaded program run (default 2).
        #[arg(long)]
        threads: Option<usize>,
        /// Allocate/touch/free rounds of the program (default 1000).
        #[arg(long)]
        iterations: Option<u64>,
        /// The recording of the seed program to replay (default
        /// `benches/data/seed-flags.trace.zst` in the source tree).
        #[arg(long)]
        trace: Option<PathBuf>,
    },
    /// Zone-lock hold time in the per-CPU bulk paths (2007): the lock held
    /// across a batch against taken per page.
    Lock {
        #[command(flatten)]
        run: WithModel,
        /// Threads, one per CPU, pinned (default: the machine's CPUs).
        #[arg(long)]
        threads: Option<usize>,
        /// Jobs per thread (default 400).
        #[arg(long)]
        iterations: Option<u64>,
        /// The per-CPU batch (default: the era's formula, 31 in 2.6.23).
        #[arg(long)]
        batch: Option<u32>,
    },
    /// Fault-probed `pfn_valid` for SPARSEMEM_VMEMMAP (2006), per call and
    /// in AIM9's page_test (default: every vmemmap model and
    /// sparse-extreme, on the host and ia64-holes).
    PfnValid {
        #[command(flatten)]
        run: WithModel,
    },
    /// The bulk page allocator (2021): list and array bulk against single
    /// pages.
    Bulk {
        #[command(flatten)]
        run: WithModel,
    },
    /// cpuset checks in the zonelist walk under fake NUMA (2006).
    Cpuset {
        #[command(flatten)]
        run: WithModel,
        /// Nodes in the cpuset (default 43 of 64).
        #[arg(long)]
        allowed: Option<u16>,
        /// The job's tasks faulting at once (default: the machine's CPUs,
        /// at least 2).
        #[arg(long)]
        threads: Option<usize>,
    },
    /// Other buddy allocators beside pfnlab's, and the floor.
    Peers {
        #[command(flatten)]
        run: WithModel,
    },
    /// `pfn_valid` and the allocator against the fraction of holes, on
    /// every model.
    HoleDensity {
        #[command(flatten)]
        common: Common,
    },
    /// Where the hot path's time goes, mechanism by mechanism, with the
    /// memory model's share (default: every model).
    Breakdown {
        #[command(flatten)]
        run: WithModel,
        /// struct page size (64, 32, 16 or 8): below 64 the model's calls
        /// are priced at that size and the allocator's steps are said not
        /// to run yet.
        #[arg(long, value_parser = super::commands::parse_page_size, default_value = "64")]
        page_size: sparsemem::PageSize,
    },
    /// pfn walkers over a span (`for_each_valid_pfn`, the per-pfn loop),
    /// and compaction, `memmap_init` and `reserve_bootmem_region` before
    /// and after their published changes (default: every model).
    Walk {
        #[command(flatten)]
        run: WithModel,
        /// Also time this host's kernel with `--layout host` (root):
        /// `echo 1 > /proc/sys/vm/compact_memory` per pfn its scanners
        /// looked at, and a read of `/proc/kpageflags` per pfn
        #[arg(long)]
        host_kernel: bool,
    },
    /// HugeTLB vmemmap optimisation: a hugetlb pool grown and
    /// shrunk with HVO off, 5.18+'s and 2026's layouts, unbatched and
    /// batched, on a memfd-backed vmemmap; compound_head in both encodings.
    Hvo {
        #[command(flatten)]
        run: WithModel,
        /// Also time this host's kernel growing and shrinking its 2 MiB
        /// pool by N pages, `hugetlb_optimize_vmemmap` 0 and 1, in the same
        /// table (root only; both sysctls are restored, Ctrl-C included)
        #[arg(long, value_name = "N")]
        host_kernel: Option<u64>,
    },
    /// struct page at 64, 32, 16 and 8 bytes: pfn_valid, random
    /// pfn_to_page over a swept span, the memmap, and the allocator where
    /// it runs (default: every model).
    Memdesc {
        #[command(flatten)]
        run: WithModel,
        #[command(flatten)]
        sweep: MemdescArgs,
    },
    /// Huge frames kept free under churn: fill memory with single
    /// pages, free half at random, then free one and allocate one, over
    /// and over (LLFree's fragmentation benchmark shape), on the buddy of
    /// 2.6.9, 2.6.23 and 6.18 and on LLFree.
    Frag {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        shape: FragArgs,
    },
    /// The allocators on 1 to every CPU (LLFree's scalability workloads:
    /// bulk, repeat and rand at orders 0 and 9), each thread pinned: the
    /// buddy's per-CPU and zone paths, LLFree and frame-alloc.
    Scale {
        #[command(flatten)]
        run: WithModel,
        #[command(flatten)]
        sweep: ScaleArgs,
    },
    /// When the memmap is written and where it lives: deferred
    /// init against threads, the allocation that grows the zone, the path
    /// once init is done, and memmap_on_memory against a memmap in boot
    /// memory.
    MemmapLifecycle {
        #[command(flatten)]
        run: WithModel,
    },
    /// A name that is no experiment.
    #[command(external_subcommand)]
    Unknown(Vec<String>),
}

/// Runs the experiment `command` names; `outer` is a `--layout` given
/// before the command.
pub fn run(command: BenchCommand, outer: Option<LayoutSpec>) -> Result<(), CliError> {
    let setup = |run: WithModel| setup_of(run, &outer);
    match command {
        BenchCommand::Flags {
            run,
            threads,
            iterations,
            trace,
        } => {
            let options = flags::FlagsOptions {
                threads,
                iterations,
                trace,
            };
            run_one::<flags::Flags>(&setup(run), &options)
        }
        BenchCommand::Lock {
            run,
            threads,
            iterations,
            batch,
        } => {
            let options = lock::LockOptions {
                threads,
                jobs: iterations,
                batch,
            };
            run_one::<lock::Lock>(&setup(run), &options)
        }
        BenchCommand::PfnValid { run } => run_one::<pfn_valid::PfnValid>(&setup(run), &()),
        BenchCommand::Bulk { run } => run_one::<bulk::Bulk>(&setup(run), &()),
        BenchCommand::Cpuset {
            run,
            allowed,
            threads,
        } => {
            let options = cpuset::CpusetOptions {
                allowed,
                tasks: threads,
            };
            run_one::<cpuset::Cpuset>(&setup(run), &options)
        }
        BenchCommand::Peers { run } => run_one::<peers::Peers>(&setup(run), &()),
        BenchCommand::HoleDensity { common } => {
            run_one::<hole_density::HoleDensity>(&setup(common.into()), &())
        }
        BenchCommand::Breakdown { run, page_size } => match page_size {
            sparsemem::PageSize::B64 => run_one::<breakdown::Breakdown>(&setup(run), &()),
            size => run_one::<breakdown::sizes::BreakdownAt>(&setup(run), &size),
        },
        BenchCommand::Walk { run, host_kernel } => {
            run_one::<walk::Walk>(&setup(run), &walk::WalkOptions { host_kernel })
        }
        BenchCommand::Hvo { run, host_kernel } => {
            let _signals = host_kernel.map(|_| super::HostSignals::defer());
            let options = hvo::HvoOptions {
                host_kernel,
                stop: Some(&super::INTERRUPTED),
            };
            run_one::<hvo::Hvo>(&setup(run), &options)
        }
        BenchCommand::Memdesc { run, sweep } => {
            run_one::<memdesc::Memdesc>(&setup(run), &sweep.into())
        }
        BenchCommand::Scale { run, sweep } => run_one::<scale::Scale>(&setup(run), &sweep.into()),
        BenchCommand::MemmapLifecycle { run } => run_one::<MemmapLifecycle>(&setup(run), &()),
        BenchCommand::Frag { common, shape } => {
            let _signals = shape
                .host_kernel
                .as_ref()
                .map(|_| super::HostSignals::defer());
            let params = shape.params(common.era);
            run_one::<frag::Frag>(&setup(common.into()), &params)
        }
        BenchCommand::Unknown(args) => {
            let name = args.into_iter().next().unwrap_or_default();
            Err(CliError(UnknownExperiment(name).to_string()))
        }
    }
}

/// A run's setup from its options, its layout defaulting to `outer` (the
/// one given before the subcommand).
fn setup_of(WithModel { common, model }: WithModel, outer: &Option<LayoutSpec>) -> Setup {
    Setup {
        layout: common.layout.or(outer.clone()),
        model,
        era: common.era,
        plan: plan(common.quick, common.trials),
        json: common.json,
        start_state: common.start.spec(),
    }
}

impl From<Common> for WithModel {
    /// The options of an experiment that chooses its own models.
    fn from(common: Common) -> WithModel {
        WithModel {
            common,
            model: None,
        }
    }
}

/// Prints the header, runs `E` and prints its table.
fn run_one<E: Experiment>(setup: &Setup, params: &E::Params) -> Result<(), CliError> {
    let prepared = Prepared::<E>::new(setup, &())?;
    if let Some(why) = prepared.fallback() {
        fallback_notice(why);
    }
    print!("{}", prepared.header());
    print!("{}", prepared.run(params)?);
    Ok(())
}

/// `--cache-sizes L2,LLC`: two sysfs-style sizes, the LLC at least the L2.
fn parse_cache_sizes(s: &str) -> Result<memdesc::CacheSizes, String> {
    let parse = |t: &str| {
        memdesc::parse_cache_size(t)
            .filter(|&b| b > 0)
            .ok_or_else(|| format!("`{t}` is not a cache size (for example 2M, 1024K)"))
    };
    let (l2, llc) = s
        .split_once(',')
        .ok_or_else(|| format!("`{s}`: give L2,LLC (for example 2M,256M)"))?;
    let (l2_bytes, llc_bytes) = (parse(l2)?, parse(llc)?);
    if llc_bytes < l2_bytes {
        return Err(format!("`{s}`: the LLC is smaller than the L2"));
    }
    Ok(memdesc::CacheSizes {
        l2_bytes,
        llc_bytes,
        from_sysfs: false,
    })
}

/// `bench memdesc`'s own options.
#[derive(clap::Args, Debug)]
pub struct MemdescArgs {
    /// Only this size beside 64 bytes (64, 32, 16 or 8; default: all).
    #[arg(long, value_parser = super::commands::parse_page_size)]
    page_size: Option<sparsemem::PageSize>,
    /// The largest span swept, in MiB of RAM (default: an 8-byte
    /// memmap four times the LLC, within the memmap budget).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_span_mib: Option<u64>,
    /// Size the sweep for these caches rather than this machine's:
    /// `L2,LLC` as sysfs writes sizes (`2M,256M`, `1024K,32M`).
    #[arg(long, value_parser = parse_cache_sizes)]
    cache_sizes: Option<memdesc::CacheSizes>,
    /// Hold the sweep's memmaps (every size's at once) under this many
    /// MiB, if less than this machine's budget (half its memory).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    memmap_budget_mib: Option<u64>,
    /// The recording the replay row replays at every size (default
    /// `benches/tests/data/gzip-dd.trace.zst` in the source tree).
    #[arg(long)]
    trace: Option<PathBuf>,
}

impl From<MemdescArgs> for memdesc::MemdescOptions {
    fn from(a: MemdescArgs) -> Self {
        memdesc::MemdescOptions {
            size: a.page_size,
            max_span_mib: a.max_span_mib,
            caches: a.cache_sizes,
            memmap_budget_bytes: a.memmap_budget_mib.map(|mib| mib << 20),
            trace: a.trace,
        }
    }
}

/// `bench frag`'s own options.
#[derive(clap::Args, Debug)]
pub struct FragArgs {
    /// Per cent of the filled memory freed at random before the
    /// iterations (default 50).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=100))]
    free: Option<u8>,
    /// Frees-and-allocations per iteration, per cent of the pages freed
    /// (default 10).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=100))]
    churn: Option<u8>,
    /// Iterations after the fill (default 100).
    #[arg(long)]
    iterations: Option<u32>,
    /// Per cent of allocations that are immovable (default 0, as
    /// published).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=100))]
    immovable: Option<u8>,
    /// CPUs the requests go to in turn (default 2).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    cpus: Option<u16>,
    /// Iterations between samples of the series (default 10; the last
    /// iteration is always sampled).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    sample_every: Option<u32>,
    /// Also run the shape on this host's kernel (root): on anonymous
    /// memory, recorded with the machine's snapshot at both ends into
    /// FILE, then one `compact_memory`; the recording is replayed through
    /// the model beside it
    #[arg(long, value_name = "FILE")]
    host_kernel: Option<std::path::PathBuf>,
    /// The host kernel's run: MiB of anonymous memory (default 128)
    #[arg(long, value_name = "MIB", requires = "host_kernel",
          value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    host_mib: Option<u64>,
    /// Huge frames to recover from each allocator's end state: frames to
    /// move for every allocator, and a compaction run for the buddy of
    /// 2.6.35 on (default 1 % of the huge frames; 0 turns it off).
    #[arg(long, value_name = "K", value_parser = parse_recover)]
    recover: Option<u64>,
    /// A recorded trace (`pfnlab trace record`, or the kernel's own trace
    /// file) each allocator replays after the shape, sampled as it goes;
    /// repeat for more (default: the recordings committed in
    /// benches/tests/data)
    #[arg(long, value_name = "FILE")]
    trace: Vec<std::path::PathBuf>,
    /// Replay no trace
    #[arg(long, conflicts_with = "trace")]
    no_trace: bool,
    /// Events between a replay's samples (default 4096)
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..))]
    trace_sample_every: Option<u64>,
}

/// `--recover`'s value: a count of huge frames.
fn parse_recover(s: &str) -> Result<u64, String> {
    s.parse()
        .map_err(|_| format!("`{s}` is not a count of huge frames (0 turns recovery off)"))
}

impl FragArgs {
    /// The parameters; `--era` runs that era's buddy beside LLFree.
    fn params(&self, era: Option<buddy::Era>) -> frag::FragParams {
        let paper = pfnlab::frag::workload::FragShape::PAPER;
        let share = |v: Option<u8>, default: f64| v.map_or(default, |p| f64::from(p) / 100.0);
        let shape = pfnlab::frag::workload::FragShape {
            free: share(self.free, paper.free),
            churn: share(self.churn, paper.churn),
            iterations: self.iterations.unwrap_or(paper.iterations),
            immovable: share(self.immovable, paper.immovable),
            cpus: self.cpus.map_or(paper.cpus, usize::from),
            sample_every: self.sample_every.unwrap_or(paper.sample_every),
            seed: paper.seed,
            recover: self.recover,
        };
        let allocators = match era {
            Some(era) => vec![frag::FragAllocator::Buddy(era), frag::FragAllocator::Llfree],
            None => frag::FragAllocator::DEFAULT.to_vec(),
        };
        let host_kernel = self
            .host_kernel
            .as_ref()
            .map(|recording| frag::HostKernelParams {
                pages: self.host_mib.unwrap_or(128) * (1 << 20)
                    / sparsemem::memmap::host_page_size() as u64,
                recording: recording.clone(),
                stop: &super::INTERRUPTED,
            });
        let traces = if self.no_trace {
            Vec::new()
        } else if self.trace.is_empty() {
            pfnlab::frag::replay::committed_traces()
        } else {
            self.trace.clone()
        };
        frag::FragParams {
            shape,
            allocators,
            host_kernel,
            traces,
            trace_sample_every: self
                .trace_sample_every
                .unwrap_or(pfnlab::frag::replay::DEFAULT_SAMPLE_EVERY),
        }
    }
}

/// `bench scale`'s own options.
#[derive(clap::Args, Debug)]
pub struct ScaleArgs {
    /// Thread counts, comma-separated, each at most the CPUs this process
    /// may run on (default: 1, 2, 4, ... and every CPU).
    #[arg(long, value_delimiter = ',')]
    threads: Option<Vec<usize>>,
    /// Allocators, comma-separated: buddy-pcp, buddy-zone, llfree,
    /// frame-alloc (default: all).
    #[arg(long, value_delimiter = ',', value_parser = parse_scale_allocator)]
    allocators: Option<Vec<scale::ScaleAllocatorId>>,
    /// Memory modelled, in MiB (default: 4 GiB or 256 MiB per CPU;
    /// with --quick, 64 MiB or 8 MiB per CPU), at most what half this
    /// machine's memory holds.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    memory_mib: Option<u64>,
}

fn parse_scale_allocator(s: &str) -> Result<scale::ScaleAllocatorId, String> {
    scale::ScaleAllocatorId::parse(s).map_err(|e| e.to_string())
}

impl From<ScaleArgs> for scale::ScaleParams {
    fn from(a: ScaleArgs) -> Self {
        scale::ScaleParams {
            threads: a.threads,
            allocators: a.allocators,
            memory_mib: a.memory_mib,
        }
    }
}
