//! `pfnlab layout --hugetlb 2M:N,1G:M`: the memmap each model keeps
//! resident once hugetlb pools of those sizes are grown and optimised.
//!
//! Each model is built with the memfd-backed vmemmap, an allocator (the
//! 6.18 era) over it, and one pool per size on the layout's first node,
//! gigantic sizes first (they need contiguous ranges); the pools optimise
//! their folios as 6.18 does (fake heads, batched). The resident bytes
//! are the model's own reading of the kernel (the memfd's blocks) before
//! the pools grow and after, beside what the geometry says HVO frees.
//! Models without SPARSEMEM_VMEMMAP, and `struct page` sizes HVO is not
//! modelled at, answer n/a with the reason. More folios than the node
//! holds is an error: one line, exit status 2.

use std::fmt::Write as _;

use buddy::{HugetlbError, HugetlbPool, HvoMode, Kernel};
use serde::Serialize;
use sparsemem::hvo::{HvoLayout, hugetlb_orders, hvo_freed_bytes};
use sparsemem::{Layout, PAGE_STRUCT_SIZE, PageSize, RangeKind};

use pfnlab::models::{Buildable, ModelKind, ModelVisitor, with_model_options};
use pfnlab::units::human_bytes;
use vmemmap::VmemmapOptions;

use super::CliError;

/// One `SIZE:COUNT` of `--hugetlb`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HugetlbRequest {
    /// The folio size.
    pub folio_bytes: u64,
    /// Folios asked for.
    pub folios: u64,
}

/// `--hugetlb`: the pools to grow, in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HugetlbSpec(pub Vec<HugetlbRequest>);

/// Parses `--hugetlb`: comma-separated `SIZE:COUNT`, the size a power of
/// two in `K`, `M` or `G` (binary units), each size once.
pub fn parse_hugetlb(text: &str) -> Result<HugetlbSpec, String> {
    let mut out: Vec<HugetlbRequest> = Vec::new();
    for item in text.split(',') {
        let bad = |why: String| format!("bad --hugetlb `{item}`: {why}");
        let (size, count) = item
            .split_once(':')
            .ok_or_else(|| bad("expected SIZE:COUNT, as in 2M:512".into()))?;
        let folio_bytes = parse_size(size).map_err(bad)?;
        let folios: u64 = count
            .trim()
            .parse()
            .map_err(|_| bad(format!("the count `{count}` is not a whole number")))?;
        if out.iter().any(|r| r.folio_bytes == folio_bytes) {
            return Err(bad(format!("{} given twice", human_bytes(folio_bytes))));
        }
        out.push(HugetlbRequest {
            folio_bytes,
            folios,
        });
    }
    Ok(HugetlbSpec(out))
}

/// `2M`, `1G`, `64K`: a power-of-two byte count.
fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 10),
        Some((i, 'M' | 'm')) => (&t[..i], 20),
        Some((i, 'G' | 'g')) => (&t[..i], 30),
        _ => return Err(format!("the size `{t}` needs a unit: K, M or G")),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("the size `{t}` is not a number with a unit"))?;
    match n.checked_mul(1 << shift) {
        Some(b) if b.is_power_of_two() => Ok(b),
        _ => Err(format!("the size `{t}` is not a power of two")),
    }
}

/// One pool, resolved against the geometry.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct PoolJson {
    /// Folio size.
    pub folio_bytes: u64,
    /// Its order.
    pub order: u32,
    /// Folios in the pool.
    pub folios: u64,
    /// Vmemmap bytes HVO frees per folio (`hugetlb_vmemmap_optimizable_size`).
    pub hvo_freed_bytes: u64,
}

/// One model's memmap with the pools grown and optimised.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ModelHvoJson {
    /// The model.
    pub model: &'static str,
    /// Resident memmap bytes before the pools grew.
    pub resident: Option<u64>,
    /// Resident memmap bytes with every folio optimised.
    pub resident_with_hvo: Option<u64>,
    /// The drop, read from the kernel.
    pub freed: Option<u64>,
    /// What the geometry says the drop is.
    pub expected_freed: Option<u64>,
    /// Why HVO does not apply to this model (n/a).
    pub not_applicable: Option<String>,
}

/// The `--hugetlb` figures for every model.
#[derive(Clone, Debug, Serialize)]
pub struct HugetlbReport {
    /// The kernel whose HVO the pools use.
    pub era: &'static str,
    /// The vmemmap layout of optimised folios.
    pub hvo_layout: &'static str,
    /// Whether optimisation is batched (6.7's form).
    pub batched: bool,
    /// The pools.
    pub pools: Vec<PoolJson>,
    /// Per model.
    pub models: Vec<ModelHvoJson>,
}

/// The mode the pools use: 6.18's (fake heads, batched).
const MODE: HvoMode = HvoMode {
    layout: HvoLayout::FakeHead,
    batched: true,
};

/// Resolves `spec` against the layout: each size one of the geometry's
/// hugetlb sizes, and all folios within the first node's RAM.
fn resolve(layout: &Layout, spec: &HugetlbSpec) -> Result<Vec<PoolJson>, CliError> {
    let g = layout.geometry();
    let orders = hugetlb_orders(g);
    let host_page = sparsemem::memmap::host_page_size() as u64;
    let mut pools = Vec::new();
    for r in &spec.0 {
        let Some(&order) = orders
            .iter()
            .find(|&&o| g.page_size() << o == r.folio_bytes)
        else {
            return Err(CliError(format!(
                "no hugetlb size of {} on {}: it has {} (PMD) and {} (PUD)",
                human_bytes(r.folio_bytes),
                g.name(),
                human_bytes(g.page_size() << orders[0]),
                human_bytes(g.page_size() << orders[1]),
            )));
        };
        pools.push(PoolJson {
            folio_bytes: r.folio_bytes,
            order,
            folios: r.folios,
            hvo_freed_bytes: hvo_freed_bytes(order, host_page, PAGE_STRUCT_SIZE),
        });
    }
    // Gigantic first: they need whole contiguous ranges.
    pools.sort_by_key(|p| std::cmp::Reverse(p.order));
    let node = layout.first_node();
    let ram: u64 = layout
        .ranges_of(RangeKind::Ram)
        .filter(|(r, _, _)| r.node == node.get())
        .map(|(_, a, b)| (b.get() - a.get()) * g.page_size())
        .sum();
    let asked = pools.iter().try_fold(0u64, |sum, p| {
        p.folios
            .checked_mul(p.folio_bytes)
            .and_then(|b| sum.checked_add(b))
    });
    match asked {
        Some(a) if a <= ram => Ok(pools),
        _ => Err(CliError(format!(
            "more hugetlb folios than fit: {} asked of node {}'s {} of RAM",
            asked.map_or("over 16 EiB".into(), human_bytes),
            node.get(),
            human_bytes(ram)
        ))),
    }
}

/// Why one model has no figures.
enum Failure {
    /// HVO does not apply (a row that says n/a).
    NotApplicable(String),
    /// The buddy could not give the folios asked for (exit 2).
    Short(String),
}

struct Visitor<'a> {
    pools: &'a [PoolJson],
}

impl ModelVisitor for Visitor<'_> {
    type Output = Result<(u64, u64), Failure>;

    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<Self::Output, buddy::AllocError> {
        let model = M::build(layout, options)?;
        let refused = model
            .hugetlb_vmemmap()
            .and_then(|h| self.pools.iter().try_for_each(|p| h.hvo_supported(p.order)));
        if let Err(e) = refused {
            return Ok(Err(Failure::NotApplicable(e.to_string())));
        }
        let alloc = buddy::Allocator::<M, Kernel>::new(model, layout, buddy::Options::default())?;
        let before = alloc.model().memmap_bytes().resident;
        let node = layout.first_node();
        // The pools live until the reading: their folios stay optimised.
        let mut held = Vec::new();
        for p in self.pools {
            let short = |got: u64| {
                Failure::Short(format!(
                    "more hugetlb folios than fit: the buddy gave {got} of {} {} folios on node {}",
                    p.folios,
                    human_bytes(p.folio_bytes),
                    node.get()
                ))
            };
            let grown = HugetlbPool::new(&alloc, p.order, node, Some(MODE)).and_then(|mut pool| {
                let got = pool.grow(&alloc, p.folios)?;
                held.push(pool);
                Ok(got)
            });
            match grown {
                Ok(got) if got == p.folios => {}
                Ok(got) => return Ok(Err(short(got))),
                Err(HugetlbError::NoContiguousRange { .. } | HugetlbError::NoMemory(_)) => {
                    return Ok(Err(short(0)));
                }
                Err(e) => return Ok(Err(Failure::NotApplicable(e.to_string()))),
            }
        }
        Ok(Ok((before, alloc.model().memmap_bytes().resident)))
    }
}

/// Grows and optimises the pools of `spec` on every model of `layout`.
pub fn measure(
    layout: &Layout,
    size: PageSize,
    spec: &HugetlbSpec,
) -> Result<HugetlbReport, CliError> {
    let pools = resolve(layout, spec)?;
    let expected: u64 = pools.iter().map(|p| p.folios * p.hvo_freed_bytes).sum();
    let options = VmemmapOptions {
        memfd: true,
        ..VmemmapOptions::default()
    };
    let mut models = Vec::new();
    for &kind in ModelKind::ALL.iter() {
        let mut row = ModelHvoJson {
            model: kind.name(),
            ..ModelHvoJson::default()
        };
        let outcome = if size != PageSize::B64 && kind.is_vmemmap() {
            Err(Failure::NotApplicable(format!(
                "HVO is modelled with 64-byte struct pages only, not {size}-byte ones"
            )))
        } else {
            with_model_options(kind, layout, options, Visitor { pools: &pools })
                .unwrap_or_else(|e| Err(Failure::NotApplicable(e.to_string())))
        };
        match outcome {
            Ok((before, after)) => {
                row.resident = Some(before);
                row.resident_with_hvo = Some(after);
                row.freed = Some(before.saturating_sub(after));
                row.expected_freed = Some(expected);
            }
            Err(Failure::NotApplicable(why)) => row.not_applicable = Some(why),
            Err(Failure::Short(why)) => return Err(CliError(why)),
        }
        models.push(row);
    }
    Ok(HugetlbReport {
        era: buddy::Era::V6_18.name(),
        hvo_layout: "fake-head",
        batched: MODE.batched,
        pools,
        models,
    })
}

impl HugetlbReport {
    /// The table under `pfnlab layout`'s memmap table.
    pub fn render(&self) -> String {
        let pools: Vec<String> = self
            .pools
            .iter()
            .map(|p| {
                format!(
                    "{} x {} ({} KiB freed each)",
                    p.folios,
                    human_bytes(p.folio_bytes),
                    p.hvo_freed_bytes >> 10
                )
            })
            .collect();
        let mut out = format!(
            "\nhugetlb pools, optimised as Linux {} does (fake heads, batched): {}\n",
            self.era,
            pools.join(", ")
        );
        let _ = writeln!(
            out,
            "{:<22} {:>12} {:>12} {:>12} {:>12}",
            "memmap with HVO", "resident", "with HVO", "freed", "expected"
        );
        for m in &self.models {
            let line = match (&m.not_applicable, m.resident, m.resident_with_hvo) {
                (Some(why), _, _) => format!("{:<22} n/a: {why}", m.model),
                (None, Some(before), Some(after)) => format!(
                    "{:<22} {:>12} {:>12} {:>12} {:>12}",
                    m.model,
                    human_bytes(before),
                    human_bytes(after),
                    human_bytes(m.freed.unwrap_or(0)),
                    human_bytes(m.expected_freed.unwrap_or(0))
                ),
                _ => format!("{:<22} n/a", m.model),
            };
            let _ = writeln!(out, "{line}");
        }
        out
    }

    /// `json` (the `pfnlab layout --json` object) with a `hugetlb` object
    /// and each model row's `hvo` figures added.
    pub fn add_to_json(&self, json: &str) -> Result<String, CliError> {
        let mut v: serde_json::Value = serde_json::from_str(json)?;
        let by_model = |name: &str| self.models.iter().find(|m| m.model == name);
        if let Some(rows) = v.get_mut("models").and_then(|m| m.as_array_mut()) {
            for row in rows {
                let name = row.get("model").and_then(|n| n.as_str()).unwrap_or("");
                if let Some(m) = by_model(name) {
                    row["hvo"] = serde_json::to_value(m)?;
                }
            }
        }
        v["hugetlb"] = serde_json::json!({
            "era": self.era,
            "hvo_layout": self.hvo_layout,
            "batched": self.batched,
            "pools": self.pools,
        });
        Ok(serde_json::to_string_pretty(&v)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_sizes_and_counts_and_refuse_the_rest() {
        let spec = parse_hugetlb("2M:64,1G:1").unwrap();
        assert_eq!(
            spec.0,
            vec![
                HugetlbRequest {
                    folio_bytes: 2 << 20,
                    folios: 64
                },
                HugetlbRequest {
                    folio_bytes: 1 << 30,
                    folios: 1
                },
            ]
        );
        for (bad, why) in [
            ("2M:x", "count `x`"),
            ("3M:1", "not a power of two"),
            ("2M", "SIZE:COUNT"),
            ("2:1", "needs a unit"),
            ("2M:1,2M:3", "given twice"),
        ] {
            let e = parse_hugetlb(bad).unwrap_err();
            assert!(
                e.contains(why) && e.contains(bad.split(',').next_back().unwrap()),
                "{e}"
            );
        }
    }

    #[test]
    fn a_size_the_geometry_has_not_or_too_many_folios_is_one_error() {
        let layout = Layout::preset("numa-fake-64").unwrap();
        let spec = |t| parse_hugetlb(t).unwrap();
        let e = resolve(&layout, &spec("4M:1")).unwrap_err().0;
        assert!(e.contains("no hugetlb size of 4.0 MiB"), "{e}");
        // Node 0 has 48 MiB: 24 folios of 2 MiB fit, 25 do not.
        assert_eq!(resolve(&layout, &spec("2M:24")).unwrap()[0].order, 9);
        let e = resolve(&layout, &spec("2M:25")).unwrap_err().0;
        assert!(e.contains("more hugetlb folios than fit"), "{e}");
        let e = resolve(&layout, &spec("1G:1")).unwrap_err().0;
        assert!(e.contains("more hugetlb folios than fit"), "{e}");
    }
}
