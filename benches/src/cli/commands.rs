//! `pfnlab layout` and `pfnlab query`: the binary's own commands, which
//! only read a layout and print.

use buddy::BuddyModel;
use std::fmt::Write as _;
use std::io::{BufRead, Write};

use sparsemem::{Layout, PageSize, Pfn};

use pfnlab::models::{Buildable, ModelKind, ModelVisitor, memmap_bytes_at, with_model};
use pfnlab::units::human_bytes;
use std::io::BufWriter;
use std::path::PathBuf;

use pfnlab::layout_spec::LayoutSpec;

use super::{CliError, load_layout, parse_layout};
use vmemmap::VmemmapOptions;

/// Parses a pfn written exactly in decimal digits or `0x` and hex digits
/// (surrounding white space allowed; no sign, no separators: `u64`'s own
/// parser would take `+5` and `0x+1f`).
pub fn parse_pfn(text: &str) -> Result<Pfn, CliError> {
    let t = text.trim();
    let (digits, radix) = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None => (t, 10),
    };
    let only_digits = !digits.is_empty() && digits.chars().all(|c| c.is_digit(radix));
    let parsed = if only_digits {
        u64::from_str_radix(digits, radix).ok()
    } else {
        None
    };
    parsed.map(Pfn::new).ok_or_else(|| {
        CliError(format!(
            "bad pfn `{t}`: expected a decimal or 0x-hex number below 2^64"
        ))
    })
}

/// The `pfnlab layout` report: ranges, sections, memmap bytes per model
/// with `struct page`s of `size`.
pub fn layout_report(layout: &Layout, size: PageSize) -> String {
    let mut out = ranges_report(layout);
    if let Err(e) =
        sparsemem::memmap::check_memmap_budget(layout.present_pages().saturating_mul(size.bytes()))
    {
        let _ = writeln!(
            out,
            "\npresent pages: {} — sections not listed and no model built: {e}",
            layout.present_pages()
        );
        return out;
    }
    out += &sections_report(layout);
    out += &memmap_report(layout, size);
    out += &super::hotplug_memmap::report(layout);
    out
}

/// The layout's source, geometry and ranges.
fn ranges_report(layout: &Layout) -> String {
    let g = layout.geometry();
    let mut out = String::new();
    let _ = writeln!(out, "layout: {}", layout.source());
    let _ = writeln!(out, "geometry: {g}");
    let _ = writeln!(
        out,
        "\n{:>20} {:>20} {:>10} {:>5} {:>12}",
        "start", "end", "kind", "node", "size"
    );
    for r in layout.ranges() {
        let _ = writeln!(
            out,
            "{:>20} {:>20} {:>10} {:>5} {:>12}",
            r.start.to_string(),
            r.end.to_string(),
            r.kind.to_string(),
            r.node,
            human_bytes(r.size_bytes())
        );
    }
    out
}

/// Present pages, sections by state, memory blocks and nodes.
fn sections_report(layout: &Layout) -> String {
    let g = layout.geometry();
    let mut out = String::new();
    let plan = layout.section_plan();
    let early = plan.values().filter(|p| p.early).count();
    let device: Vec<_> = plan.values().filter(|p| !p.device.is_empty()).collect();
    let device_subsections: u32 = device.iter().map(|p| p.device.count()).sum();
    let hotplug = plan
        .values()
        .filter(|p| !p.early && p.device.is_empty())
        .count();
    let (lo, hi) = layout.pfn_span();
    let _ = writeln!(
        out,
        "\npresent pages: {} ({}), boot memory span {}..{} ({} pages)",
        layout.present_pages(),
        human_bytes(layout.present_pages() * g.page_size()),
        lo,
        hi,
        hi.get() - lo.get()
    );
    let _ = writeln!(
        out,
        "sections present: {} of {}: {} early (boot memory, online), {} of hot-added memory blocks (offline), {} with device memory ({} subsections; never online)",
        plan.len(),
        g.nr_mem_sections(),
        early,
        hotplug,
        device.len(),
        device_subsections,
    );
    let nodes: Vec<u16> = layout.nodes().iter().map(|n| n.get()).collect();
    let _ = writeln!(
        out,
        "memory block: {} (one section); nodes with memory: {nodes:?}",
        human_bytes(g.memory_block_pages() * g.page_size()),
    );
    out
}

/// Memmap bytes of every model on the layout.
fn memmap_report(layout: &Layout, size: PageSize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{:<22} {:>12} {:>12} {:>12} {:>12}   ({size}-byte struct page)",
        "memmap by model", "reserved", "resident", "in THP", "tables"
    );
    for (kind, bytes) in memmap_by_model(layout, size) {
        let line = match bytes {
            Ok(b) => format!(
                "{:<22} {:>12} {:>12} {:>12} {:>12}",
                kind.name(),
                human_bytes(b.reserved),
                human_bytes(b.resident),
                human_bytes(b.huge),
                human_bytes(b.tables)
            ),
            Err(e) => format!("{:<22} not built: {e}", kind.name()),
        };
        let _ = writeln!(out, "{line}");
    }
    out
}

/// Each model's memmap bytes on `layout` at `size`, or why it could not
/// be built.
pub fn memmap_by_model(
    layout: &Layout,
    size: PageSize,
) -> Vec<(ModelKind, Result<sparsemem::MemmapBytes, String>)> {
    ModelKind::ALL
        .iter()
        .map(|&kind| {
            let bytes = memmap_bytes_at(kind, size, layout, VmemmapOptions::default())
                .map_err(|e| e.to_string());
            (kind, bytes)
        })
        .collect()
}

/// One model's line of `pfnlab layout --json`.
#[derive(serde::Serialize)]
struct ModelMemmapJson {
    model: &'static str,
    /// Virtual bytes mapped or reserved for `struct page`s.
    reserved: Option<u64>,
    /// Of those, bytes resident (`mincore`).
    resident: Option<u64>,
    /// Resident bytes in transparent huge pages.
    huge: Option<u64>,
    /// Section tables.
    tables: Option<u64>,
    /// Separately allocated descriptors (memdescs): the `struct buddy`
    /// cache at boot, all present memory free in `MAX_PAGE_ORDER` blocks
    /// (a floor; 0 where the page holds its own links).
    descriptors: Option<u64>,
    /// Why the model could not be built.
    error: Option<String>,
}

/// `pfnlab layout --json`.
#[derive(serde::Serialize)]
struct LayoutJson {
    layout: String,
    page_size: u64,
    present_pages: u64,
    models: Vec<ModelMemmapJson>,
    /// Per hot-added memory block, where its memmap lives.
    hotplug_blocks: Vec<super::hotplug_memmap::HotplugBlock>,
}

/// The JSON form of the memmap report.
pub fn layout_json(layout: &Layout, size: PageSize) -> String {
    let models = memmap_by_model(layout, size)
        .into_iter()
        .map(|(kind, bytes)| match bytes {
            Ok(b) => ModelMemmapJson {
                model: kind.name(),
                reserved: Some(b.reserved),
                resident: Some(b.resident),
                huge: Some(b.huge),
                tables: Some(b.tables),
                descriptors: Some(pfnlab::experiments::memdesc::alloc::boot_descriptor_bytes(
                    layout, size,
                )),
                error: None,
            },
            Err(e) => ModelMemmapJson {
                model: kind.name(),
                reserved: None,
                resident: None,
                huge: None,
                tables: None,
                descriptors: None,
                error: Some(e),
            },
        })
        .collect();
    let json = LayoutJson {
        layout: layout.source().to_string(),
        page_size: size.bytes(),
        present_pages: layout.present_pages(),
        models,
        hotplug_blocks: super::hotplug_memmap::blocks(layout),
    };
    serde_json::to_string_pretty(&json).expect("plain data serialises")
}

/// Parses `--page-size`: 64, 32, 16 or 8.
pub fn parse_page_size(text: &str) -> Result<PageSize, String> {
    let bytes: u64 = text
        .trim()
        .parse()
        .map_err(|_| format!("bad struct page size `{text}`: expected 64, 32, 16 or 8"))?;
    PageSize::try_from(bytes).map_err(|e| e.to_string())
}

/// Where `pfnlab query` reads pfns from.
pub enum PfnSource<'a> {
    /// Command-line arguments.
    Args(&'a [String]),
    /// One pfn per line.
    Lines(Box<dyn BufRead + 'a>),
}

struct QueryVisitor<'a, W: Write> {
    source: PfnSource<'a>,
    out: W,
    json: bool,
}

impl<W: Write> QueryVisitor<'_, W> {
    fn answer<M: BuddyModel>(&mut self, model: &M, text: &str) -> Result<(), CliError> {
        let pfn = parse_pfn(text)?;
        let valid = model.pfn_valid(pfn);
        if self.json {
            writeln!(self.out, "{{\"pfn\": {}, \"valid\": {valid}}}", pfn.get())?;
        } else {
            writeln!(
                self.out,
                "{pfn} {}",
                if valid { "valid" } else { "invalid" }
            )?;
        }
        Ok(())
    }
}

impl<W: Write> ModelVisitor for QueryVisitor<'_, W> {
    type Output = Result<(), CliError>;

    fn visit<M: Buildable>(
        mut self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<Self::Output, buddy::AllocError> {
        let model = M::build(layout, options)?;
        Ok(self.run(&model))
    }
}

impl<W: Write> QueryVisitor<'_, W> {
    fn run<M: BuddyModel>(&mut self, model: &M) -> Result<(), CliError> {
        match std::mem::replace(&mut self.source, PfnSource::Args(&[])) {
            PfnSource::Args(args) => {
                for a in args {
                    self.answer(model, a)?;
                }
            }
            PfnSource::Lines(reader) => {
                for (i, line) in reader.lines().enumerate() {
                    let line = line?;
                    if line.trim().is_empty() {
                        continue;
                    }
                    self.answer(model, &line)
                        .map_err(|e| CliError(format!("stdin line {}: {e}", i + 1)))?;
                }
            }
        }
        self.out.flush()?;
        Ok(())
    }
}

/// `pfnlab query`: answers `pfn_valid` for each pfn from `source`.
pub fn query(
    layout: &Layout,
    kind: ModelKind,
    json: bool,
    source: PfnSource<'_>,
    out: impl Write,
) -> Result<(), CliError> {
    with_model(kind, layout, QueryVisitor { source, out, json })?
}

/// `pfnlab layout`'s options.
#[derive(clap::Args)]
pub struct LayoutArgs {
    /// The layout to print: `host`, `preset:NAME` (x86-pci-hole, ia64-holes,
    /// numa-fake-64, zone-device, sparse-52bit), `snapshot:FILE` (the
    /// machine a `pfnlab snapshot` file was taken on) or a TOML file (default: host).
    #[arg(long, value_parser = parse_layout)]
    layout: Option<LayoutSpec>,
    /// Also draw the layout as an SVG picture into this file.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// `sizeof(struct page)` for the memmap figures: 64 (default), 32, 16
    /// or 8 bytes.
    #[arg(long, value_parser = parse_page_size, default_value = "64")]
    page_size: PageSize,
    /// Also write the memmap figures as JSON into this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also grow hugetlb pools, `SIZE:COUNT` comma-separated (`2M:512,1G:2`),
    /// optimise them (HVO) and report each model's resident memmap.
    #[arg(long, value_parser = super::layout_hugetlb::parse_hugetlb)]
    hugetlb: Option<super::layout_hugetlb::HugetlbSpec>,
}

/// `pfnlab query`'s options.
#[derive(clap::Args)]
pub struct QueryArgs {
    /// The layout the pfns are asked of: `host`, `preset:NAME` (x86-pci-hole, ia64-holes,
    /// numa-fake-64, zone-device, sparse-52bit), `snapshot:FILE` (the
    /// machine a `pfnlab snapshot` file was taken on) or a TOML file (default: host).
    #[arg(long, value_parser = parse_layout)]
    layout: Option<LayoutSpec>,
    /// The memory model.
    #[arg(long, value_parser = ModelKind::parse)]
    model: ModelKind,
    /// One JSON object per line instead of text.
    #[arg(long)]
    json: bool,
    /// Pfns in decimal or 0x-hex; none means read stdin.
    pfns: Vec<String>,
}

/// Runs `pfnlab layout`; `outer` is a `--layout` given before the command.
pub fn layout(args: LayoutArgs, outer: Option<LayoutSpec>) -> Result<(), CliError> {
    let layout = load_layout(args.layout.or(outer).as_ref())?;
    let hvo = args
        .hugetlb
        .as_ref()
        .map(|spec| super::layout_hugetlb::measure(&layout, args.page_size, spec));
    let hvo = hvo.transpose()?;
    print!("{}", layout_report(&layout, args.page_size));
    if let Some(h) = &hvo {
        print!("{}", h.render());
    }
    if let Some(path) = args.json {
        let mut json = layout_json(&layout, args.page_size);
        if let Some(h) = &hvo {
            json = h.add_to_json(&json)?;
        }
        std::fs::write(&path, json)
            .map_err(|e| CliError(format!("cannot write {}: {e}", path.display())))?;
        println!("\njson: {}", path.display());
    }
    if let Some(path) = args.svg {
        let by_model = memmap_by_model(&layout, args.page_size);
        let picture = pfnlab::picture::layout_svg(&layout, &by_model)?;
        std::fs::write(&path, picture)
            .map_err(|e| CliError(format!("cannot write {}: {e}", path.display())))?;
        println!("\npicture: {}", path.display());
    }
    Ok(())
}

/// Runs `pfnlab query`; `outer` is a `--layout` given before the command.
pub fn query_command(args: QueryArgs, outer: Option<LayoutSpec>) -> Result<(), CliError> {
    let layout = load_layout(args.layout.or(outer).as_ref())?;
    let stdin = std::io::stdin();
    let source = if args.pfns.is_empty() {
        PfnSource::Lines(Box::new(stdin.lock()))
    } else {
        PfnSource::Args(&args.pfns)
    };
    let out = BufWriter::new(std::io::stdout().lock());
    query(&layout, args.model, args.json, source, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_json_scales_the_memmap_with_the_page_size() {
        let layout = Layout::preset("x86-pci-hole").unwrap();
        let at = |size| -> serde_json::Value {
            serde_json::from_str(&layout_json(&layout, size)).unwrap()
        };
        let (big, small) = (at(PageSize::B64), at(PageSize::B8));
        assert_eq!(
            (big["page_size"].as_u64(), small["page_size"].as_u64()),
            (Some(64), Some(8))
        );
        let flat = |v: &serde_json::Value, field: &str| v["models"][0][field].as_u64().unwrap();
        assert_eq!(big["models"][0]["model"], "flat");
        assert_eq!(flat(&big, "reserved"), 8 * flat(&small, "reserved"));
        // The flat memmap is in the direct map's huge pages where THP is
        // available (whole PMDs, at most the resident bytes).
        if sparsemem::memmap::thp_available() {
            let huge = flat(&big, "huge");
            assert!(huge > 0 && huge <= flat(&big, "resident"), "{huge}");
        }
        assert_eq!(flat(&big, "descriptors"), 0, "64 B: links in the page");
        // At 8 bytes a 48-byte struct buddy each, 85 to a slab.
        assert_eq!(
            flat(&small, "descriptors"),
            (31 * 256u64).div_ceil(4096 / 48) * 4096
        );
        // 31 GiB present in 4 MiB blocks, a 32-byte struct buddy each,
        // in whole 4 KiB slabs.
        let sixteen = flat(&at(PageSize::B16), "descriptors");
        assert_eq!(sixteen, (31 * 256 * 32u64).div_ceil(4096) * 4096);
        for size in PageSize::ALL {
            assert_eq!(parse_page_size(&size.to_string()), Ok(size));
        }
        assert!(parse_page_size("48").unwrap_err().contains("48"));
        assert!(parse_page_size("eight").unwrap_err().contains("`eight`"));
    }

    #[test]
    fn parse_pfn_accepts_decimal_and_hex_only() {
        assert_eq!(parse_pfn("4096").unwrap(), Pfn::new(4096));
        assert_eq!(parse_pfn(" 0x1F ").unwrap(), Pfn::new(31));
        assert_eq!(parse_pfn("0xffffffffffffffff").unwrap(), Pfn::new(u64::MAX));
        assert_eq!(parse_pfn("0XaB").unwrap(), Pfn::new(0xab));
        for bad in [
            "",
            "-1",
            "+5",
            "0x+1f",
            "0x-1",
            "0x",
            "0x 1",
            "1 2",
            "1_000",
            "12k",
            "١٢",
            "18446744073709551616",
            "0x10000000000000000",
        ] {
            assert!(
                parse_pfn(bad).unwrap_err().0.starts_with("bad pfn"),
                "{bad}"
            );
        }
    }

    #[test]
    fn query_streams_lines_and_answers_exactly() {
        let layout = Layout::preset("x86-pci-hole").unwrap();
        let input = "0x0\n\n786431\n0xc0000\n0x100000\n";
        let mut out = Vec::new();
        let src = PfnSource::Lines(Box::new(input.as_bytes()));
        query(&layout, ModelKind::SparseExtreme, false, src, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "0x0 valid\n0xbffff valid\n0xc0000 invalid\n0x100000 valid\n"
        );
        let mut out = Vec::new();
        let args = ["0xc0000".to_owned()];
        query(
            &layout,
            ModelKind::Flat,
            true,
            PfnSource::Args(&args),
            &mut out,
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"pfn\": 786432, \"valid\": true}\n"
        );
        let src = PfnSource::Lines(Box::new("1\nzebra\n".as_bytes()));
        let e = query(&layout, ModelKind::Sparse, false, src, Vec::new()).unwrap_err();
        assert_eq!(
            e.0,
            "stdin line 2: bad pfn `zebra`: expected a decimal or 0x-hex number below 2^64"
        );
    }

    #[test]
    fn layout_report_lists_every_model() {
        let report = layout_report(&Layout::preset("zone-device").unwrap(), PageSize::B64);
        for needle in [
            "geometry: x86_64",
            "1 of hot-added memory blocks (offline), 3 with device memory (63 subsections",
            "MAX_PAGE_ORDER 10, pageblock_order 9",
            "memory block: 128.0 MiB",
            "`flat` cannot hold the range 0x180000000..0x188000000",
            "sparse-extreme",
            "vmemmap-probe               1.0 TiB",
        ] {
            assert!(report.contains(needle), "{needle} missing in\n{report}");
        }
    }
}
