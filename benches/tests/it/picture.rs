//! The layout pictures: every preset's SVG parses, has one mark per range
//! in the ranges band, and one early-section cell per early section.

use pfnlab::picture::{SectionState, layout_svg, range_color};
use sparsemem::{Layout, layout::PRESET_NAMES};

fn fill(c: plotters::style::RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

#[test]
fn every_preset_draws_its_ranges_and_early_sections() {
    for name in PRESET_NAMES {
        let layout = Layout::preset(name).unwrap();
        let svg = layout_svg(&layout, &[]).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("{name}: {e}"));
        let rects: Vec<String> = doc
            .descendants()
            .filter(|n| n.has_tag_name("rect"))
            .filter_map(|n| n.attribute("fill").map(str::to_owned))
            .collect();
        let count = |color: String| rects.iter().filter(|f| **f == color).count();
        let range_marks: usize = [
            sparsemem::RangeKind::Ram,
            sparsemem::RangeKind::Hotplug,
            sparsemem::RangeKind::Device,
            sparsemem::RangeKind::Reserved,
        ]
        .into_iter()
        .map(|k| count(fill(range_color(k))))
        .sum();
        assert_eq!(
            range_marks,
            layout.ranges().len(),
            "{name}: one mark per range"
        );
        let early = layout.section_plan().values().filter(|p| p.early).count();
        assert_eq!(
            count(fill(SectionState::Early.color())),
            early,
            "{name}: early sections"
        );
        let device = layout
            .section_plan()
            .values()
            .filter(|p| !p.early && !p.device.is_empty())
            .count();
        assert_eq!(
            count(fill(SectionState::Device.color())),
            device,
            "{name}: device sections"
        );
    }
}

#[test]
fn the_command_writes_the_picture() {
    let path = std::env::temp_dir().join(format!("pfnlab-picture-{}.svg", std::process::id()));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pfnlab"))
        .args(["layout", "--layout", "preset:ia64-holes", "--svg"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let texts: String = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .collect();
    assert!(
        texts.contains("sparse-extreme") && texts.contains("1024.0 TiB"),
        "{texts}"
    );
}
