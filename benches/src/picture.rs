//! A picture of a layout: `pfnlab layout --svg FILE`.
//!
//! The physical address space runs left to right in four bands: the
//! layout's ranges by kind, the nodes, the boot zones (by the geometry's
//! zone limits), and the sections coloured by state — early (boot memory),
//! hot-added, device, absent — with the subsection holes of partly present
//! sections marked inside them. Sections are drawn at one width each; a
//! stretch of more than [`MAX_ABSENT_DRAWN`] absent sections is collapsed
//! into one cell labelled with its size, so a 52-bit span fits. Below, each
//! model's memmap bytes. Drawn with `plotters`' SVG backend.

use std::collections::BTreeMap;

use plotters::prelude::*;
use sparsemem::layout::SectionPlan;
use sparsemem::{Layout, MemmapBytes, RangeKind, SectionNr};

use crate::models::ModelKind;
use crate::units::human_bytes;

/// Absent sections drawn one by one between present ones; longer stretches
/// collapse into one cell.
pub const MAX_ABSENT_DRAWN: u64 = 2;

/// The fill of a range of each kind in the ranges band.
pub fn range_color(kind: RangeKind) -> RGBColor {
    match kind {
        RangeKind::Ram => RGBColor(0x1b, 0x9e, 0x77),
        RangeKind::Hotplug => RGBColor(0x37, 0x7e, 0xb8),
        RangeKind::Device => RGBColor(0x98, 0x4e, 0xa3),
        RangeKind::Reserved => RGBColor(0x99, 0x99, 0x99),
    }
}

/// The state of a section, as the sections band colours it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SectionState {
    /// Holds boot memory (`SECTION_IS_EARLY`).
    Early,
    /// Hot-added memory only.
    HotAdded,
    /// Holds device memory (ZONE_DEVICE).
    Device,
    /// No memmap.
    Absent,
}

impl SectionState {
    /// The fill of a section cell in this state.
    pub fn color(self) -> RGBColor {
        match self {
            SectionState::Early => RGBColor(0x66, 0xc2, 0xa5),
            SectionState::HotAdded => RGBColor(0x8d, 0xa0, 0xcb),
            SectionState::Device => RGBColor(0xe7, 0x8a, 0xc3),
            SectionState::Absent => RGBColor(0xee, 0xee, 0xee),
        }
    }

    fn of(plan: Option<&SectionPlan>) -> SectionState {
        match plan {
            None => SectionState::Absent,
            Some(p) if p.early => SectionState::Early,
            Some(p) if !p.device.is_empty() => SectionState::Device,
            Some(_) => SectionState::HotAdded,
        }
    }

    fn name(self) -> &'static str {
        match self {
            SectionState::Early => "early section",
            SectionState::HotAdded => "hot-added section",
            SectionState::Device => "section with device memory",
            SectionState::Absent => "absent section",
        }
    }
}

/// The fill of a subsection hole inside a partly present section.
const HOLE: RGBColor = RGBColor(0xff, 0xff, 0xff);
const ZONE_COLORS: [RGBColor; 3] = [
    RGBColor(0xfd, 0xb4, 0x62),
    RGBColor(0xfb, 0x80, 0x72),
    RGBColor(0x80, 0xb1, 0xd3),
];
const NODE_COLORS: [RGBColor; 6] = [
    RGBColor(0xbe, 0xba, 0xda),
    RGBColor(0xff, 0xff, 0xb3),
    RGBColor(0xb3, 0xde, 0x69),
    RGBColor(0xfc, 0xcd, 0xe5),
    RGBColor(0xbc, 0x80, 0xbd),
    RGBColor(0xcc, 0xeb, 0xc5),
];

/// One drawn cell: a section, or a collapsed stretch of absent ones.
#[derive(Clone, Copy, Debug)]
enum Cell {
    Section(u64),
    Collapsed { first: u64, count: u64 },
}

/// The cells from section 0 to the last section of the space.
fn cells(layout: &Layout) -> Vec<Cell> {
    let g = layout.geometry();
    let mut visible: Vec<u64> = Vec::new();
    for r in layout.ranges() {
        let first = r.start.get() >> g.section_size_bits();
        let last = (r.end.get() - 1) >> g.section_size_bits();
        visible.extend(first..=last);
    }
    visible.sort_unstable();
    visible.dedup();
    let mut cells = Vec::new();
    let mut next = 0;
    let gap = |cells: &mut Vec<Cell>, from: u64, to: u64| {
        if to - from > MAX_ABSENT_DRAWN {
            cells.push(Cell::Collapsed {
                first: from,
                count: to - from,
            });
        } else {
            cells.extend((from..to).map(Cell::Section));
        }
    };
    for s in visible {
        if s > next {
            gap(&mut cells, next, s);
        }
        cells.push(Cell::Section(s));
        next = s + 1;
    }
    if next < g.nr_mem_sections() {
        gap(&mut cells, next, g.nr_mem_sections());
    }
    cells
}

/// Width of a collapsed cell, in section cells.
const COLLAPSED_WEIGHT: f64 = 3.0;

/// Maps physical addresses to x pixels through the cells.
struct Axis {
    cells: Vec<Cell>,
    /// Left edge of each cell in section-cell units, and the total after.
    starts: Vec<f64>,
    section_bits: u32,
    left: f64,
    width: f64,
}

impl Axis {
    fn new(cells: Vec<Cell>, section_bits: u32, left: f64, width: f64) -> Axis {
        let mut starts = Vec::with_capacity(cells.len() + 1);
        let mut at = 0.0;
        for c in &cells {
            starts.push(at);
            at += match c {
                Cell::Section(_) => 1.0,
                Cell::Collapsed { .. } => COLLAPSED_WEIGHT,
            };
        }
        starts.push(at);
        Axis {
            cells,
            starts,
            section_bits,
            left,
            width,
        }
    }

    /// Pixels per section cell.
    fn cell_width(&self) -> f64 {
        self.width / self.starts.last().copied().unwrap_or(1.0).max(1.0)
    }

    /// Pixel span of cell `i`.
    fn cell_x(&self, i: usize) -> (f64, f64) {
        let w = self.cell_width();
        (
            self.left + self.starts[i] * w,
            self.left + self.starts[i + 1] * w,
        )
    }

    /// x of byte `addr`.
    fn x(&self, addr: u64) -> f64 {
        let sec = addr >> self.section_bits;
        let i = self.cells.partition_point(|c| match *c {
            Cell::Section(s) => s < sec,
            Cell::Collapsed { first, count } => first + count <= sec,
        });
        let Some(&cell) = self.cells.get(i) else {
            return self.left + self.width;
        };
        let (first, count) = match cell {
            Cell::Section(s) => (s, 1),
            Cell::Collapsed { first, count } => (first, count),
        };
        let span = (count << self.section_bits) as f64;
        let frac = (addr - (first << self.section_bits)) as f64 / span;
        let (x0, x1) = self.cell_x(i);
        x0 + frac.clamp(0.0, 1.0) * (x1 - x0)
    }

    /// Pixel span `[x0, x1)` of `[start, end)` bytes, at least one pixel.
    fn span(&self, start: u64, end: u64) -> (i32, i32) {
        let x0 = self.x(start).floor() as i32;
        let x1 = self.x(end - 1).ceil() as i32;
        (x0, x1.max(x0 + 1))
    }
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

/// plotters refused to draw (its message).
#[derive(Debug)]
pub struct DrawError(String);

impl std::fmt::Display for DrawError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "drawing the layout: {}", self.0)
    }
}

impl std::error::Error for DrawError {}

fn drawing_error(e: impl std::fmt::Display) -> DrawError {
    DrawError(e.to_string())
}

fn rect(
    area: &Area<'_>,
    [x0, x1]: [i32; 2],
    [y0, y1]: [i32; 2],
    color: RGBColor,
) -> Result<(), DrawError> {
    area.draw(&Rectangle::new([(x0, y0), (x1, y1)], color.filled()))
        .map_err(drawing_error)
}

fn text(area: &Area<'_>, s: &str, (x, y): (i32, i32), size: u32) -> Result<(), DrawError> {
    let style = TextStyle::from(("sans-serif", size).into_font()).color(&BLACK);
    area.draw(&Text::new(s.to_owned(), (x, y), style))
        .map_err(drawing_error)
}

const WIDTH: u32 = 1400;
const LEFT: i32 = 110;
const BAND: i32 = 26;
/// Top of each band: ranges, nodes, zones, sections.
const BANDS: [(i32, &str); 4] = [
    (50, "ranges"),
    (84, "nodes"),
    (118, "zones"),
    (152, "sections"),
];

/// The SVG picture of `layout`, with each model's memmap bytes (or why it
/// could not be built) listed below it.
pub fn layout_svg(
    layout: &Layout,
    memmap: &[(ModelKind, Result<MemmapBytes, String>)],
) -> Result<String, DrawError> {
    let g = *layout.geometry();
    let axis = Axis::new(
        cells(layout),
        g.section_size_bits(),
        f64::from(LEFT),
        f64::from(WIDTH as i32 - LEFT - 20),
    );
    let height = 320 + 18 * memmap.len() as u32;
    let mut svg = String::new();
    {
        let area = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        area.fill(&WHITE).map_err(drawing_error)?;
        text(&area, &format!("{} — {g}", layout.source()), (10, 12), 14)?;
        for (y, name) in BANDS {
            text(&area, name, (10, y + 8), 12)?;
        }
        draw_ranges(&area, layout, &axis)?;
        draw_nodes_and_zones(&area, layout, &axis)?;
        draw_sections(&area, layout, &axis)?;
        draw_axis_and_legend(&area, layout, &axis)?;
        let mut y = 296;
        text(
            &area,
            "memmap by model: reserved / resident / tables",
            (10, y),
            12,
        )?;
        for (kind, bytes) in memmap {
            y += 18;
            let line = match bytes {
                Ok(b) => format!(
                    "{:<16} {} / {} / {}",
                    kind.name(),
                    human_bytes(b.reserved),
                    human_bytes(b.resident),
                    human_bytes(b.tables)
                ),
                Err(why) => format!("{:<16} not built: {why}", kind.name()),
            };
            text(&area, &line, (10, y), 11)?;
        }
        area.present().map_err(drawing_error)?;
    }
    Ok(svg)
}

fn draw_ranges(area: &Area<'_>, layout: &Layout, axis: &Axis) -> Result<(), DrawError> {
    let y = BANDS[0].0;
    for r in layout.ranges() {
        let (x0, x1) = axis.span(r.start.get(), r.end.get());
        rect(area, [x0, x1], [y, y + BAND], range_color(r.kind))?;
    }
    Ok(())
}

fn draw_nodes_and_zones(area: &Area<'_>, layout: &Layout, axis: &Axis) -> Result<(), DrawError> {
    let g = layout.geometry();
    let (ny, zy) = (BANDS[1].0, BANDS[2].0);
    let mut labelled = std::collections::BTreeSet::new();
    for (r, _, _) in layout.memory_ranges() {
        let (x0, x1) = axis.span(r.start.get(), r.end.get());
        let color = NODE_COLORS[usize::from(r.node) % NODE_COLORS.len()];
        rect(area, [x0, x1], [ny, ny + BAND], color)?;
        if x1 - x0 > 40 && labelled.insert(r.node) {
            text(area, &format!("node {}", r.node), (x0 + 3, ny + 8), 10)?;
        }
    }
    let limits = g.zone_limits();
    let cuts: Vec<(u64, &str, RGBColor)> = [
        (limits.dma, "DMA", ZONE_COLORS[0]),
        (limits.dma32, "DMA32", ZONE_COLORS[1]),
        (Some(u64::MAX), "Normal", ZONE_COLORS[2]),
    ]
    .into_iter()
    .filter_map(|(end, name, color)| end.map(|e| (e, name, color)))
    .collect();
    for (r, _, _) in layout.ranges_of(RangeKind::Ram) {
        let mut start = r.start.get();
        for &(end, name, color) in &cuts {
            if start >= r.end.get() {
                break;
            }
            let piece_end = end.min(r.end.get());
            if piece_end > start {
                let (x0, x1) = axis.span(start, piece_end);
                rect(area, [x0, x1], [zy, zy + BAND], color)?;
                if x1 - x0 > 45 {
                    text(area, name, (x0 + 3, zy + 8), 10)?;
                }
                start = piece_end;
            }
        }
    }
    Ok(())
}

fn draw_sections(area: &Area<'_>, layout: &Layout, axis: &Axis) -> Result<(), DrawError> {
    let g = layout.geometry();
    let plan: BTreeMap<SectionNr, SectionPlan> = layout.section_plan();
    let y = BANDS[3].0;
    for (i, cell) in axis.cells.iter().enumerate() {
        let (a, b) = axis.cell_x(i);
        let x0 = a.floor() as i32;
        let x1 = (b.floor() as i32).max(x0 + 1);
        match *cell {
            Cell::Section(s) => {
                let p = plan.get(&SectionNr::new(s));
                let state = SectionState::of(p);
                rect(area, [x0, x1], [y, y + 2 * BAND], state.color())?;
                if let Some(p) = p.filter(|p| !p.early) {
                    draw_subsection_holes(area, p, g.subsections_per_section(), [x0, x1], y)?;
                }
            }
            Cell::Collapsed { count, .. } => {
                rect(
                    area,
                    [x0, x1],
                    [y, y + 2 * BAND],
                    SectionState::Absent.color(),
                )?;
                let bytes = count << g.section_size_bits();
                let label = format!("{} absent", human_bytes(bytes));
                if x1 - x0 > 8 {
                    text(area, "≈", (x0 + 1, y + BAND - 6), 12)?;
                }
                if x1 - x0 > 60 {
                    text(area, &label, (x0 + 2, y + 2 * BAND + 4), 9)?;
                }
            }
        }
    }
    Ok(())
}

/// White marks over the absent subsections of a partly present section.
fn draw_subsection_holes(
    area: &Area<'_>,
    p: &SectionPlan,
    per_section: u64,
    [x0, x1]: [i32; 2],
    y: i32,
) -> Result<(), DrawError> {
    let w = f64::from(x1 - x0) / per_section as f64;
    let mut i = 0;
    while i < per_section {
        if p.subsections.test(i) {
            i += 1;
            continue;
        }
        let start = i;
        while i < per_section && !p.subsections.test(i) {
            i += 1;
        }
        let a = x0 + (start as f64 * w).floor() as i32;
        let b = (x0 + (i as f64 * w).ceil() as i32).max(a + 1);
        rect(area, [a, b], [y + 4, y + 2 * BAND - 4], HOLE)?;
    }
    Ok(())
}

fn draw_axis_and_legend(area: &Area<'_>, layout: &Layout, axis: &Axis) -> Result<(), DrawError> {
    let g = layout.geometry();
    let y = BANDS[3].0 + 2 * BAND + 16;
    let step = (axis.cells.len() / 8).max(1);
    for (i, cell) in axis.cells.iter().enumerate().step_by(step) {
        let first = match *cell {
            Cell::Section(s) => s,
            Cell::Collapsed { first, .. } => first,
        };
        let x = axis.cell_x(i).0 as i32;
        text(
            area,
            &format!("{:#x}", first << g.section_size_bits()),
            (x, y),
            9,
        )?;
    }
    let mut x = 10;
    let y = y + 24;
    let mut entry = |label: &str, color: RGBColor| -> Result<(), DrawError> {
        area.draw(&Circle::new((x + 5, y + 5), 5, color.filled()))
            .map_err(drawing_error)?;
        text(area, label, (x + 14, y), 10)?;
        x += 20 + 7 * label.len() as i32;
        Ok(())
    };
    for kind in [
        RangeKind::Ram,
        RangeKind::Hotplug,
        RangeKind::Device,
        RangeKind::Reserved,
    ] {
        entry(&format!("{kind} range"), range_color(kind))?;
    }
    for state in [
        SectionState::Early,
        SectionState::HotAdded,
        SectionState::Device,
        SectionState::Absent,
    ] {
        entry(state.name(), state.color())?;
    }
    entry("subsection hole", RGBColor(0xcc, 0xcc, 0xcc))?;
    let collapsed: Vec<String> = axis
        .cells
        .iter()
        .filter_map(|c| match *c {
            Cell::Collapsed { first, count } => Some(format!(
                "{:#x}..{:#x} ({})",
                first << g.section_size_bits(),
                (first + count) << g.section_size_bits(),
                human_bytes(count << g.section_size_bits())
            )),
            Cell::Section(_) => None,
        })
        .collect();
    let shown = collapsed.len().min(5);
    text(
        area,
        &format!(
            "one cell per {} section; stretches of more than {MAX_ABSENT_DRAWN} absent sections collapsed (≈): {}{}",
            human_bytes(1 << g.section_size_bits()),
            collapsed[..shown].join(", "),
            if collapsed.len() > shown {
                format!(" and {} more", collapsed.len() - shown)
            } else {
                String::new()
            }
        ),
        (10, y + 20),
        10,
    )
}
