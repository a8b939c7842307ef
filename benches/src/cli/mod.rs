//! The binary's own parts: argument types, the progress bar, the text
//! each command prints.

pub mod bench;

use std::convert::Infallible;
use std::path::PathBuf;

use pfnlab::layout_spec::{FALLBACK_PRESET, LayoutSpec};

/// Parses `--layout`: `host`, `recorded`, `preset:NAME`, or a file path.
pub fn parse_layout(text: &str) -> Result<LayoutSpec, Infallible> {
    Ok(match text {
        "host" => LayoutSpec::Host,
        "recorded" => LayoutSpec::Recorded,
        _ => match text.strip_prefix("preset:") {
            Some(name) => LayoutSpec::Preset(name.to_owned()),
            None => LayoutSpec::File(PathBuf::from(text)),
        },
    })
}

/// Says on stderr that `host` fell back to the preset, and why.
pub fn fallback_notice(why: &sparsemem::LayoutError) {
    eprintln!("notice: {why}; using preset:{FALLBACK_PRESET}");
}

/// A progress bar on stderr when it is a terminal, hidden otherwise.
pub struct Bar(pub indicatif::ProgressBar);

impl pfnlab::experiments::Progress for Bar {
    fn stage(&self, what: String) {
        self.0.set_message(what);
    }

    fn advance(&self) {
        self.0.inc(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_specs_parse_into_their_sources() {
        let parse = |t| parse_layout(t).unwrap();
        assert_eq!(parse("host"), LayoutSpec::Host);
        assert_eq!(parse("recorded"), LayoutSpec::Recorded);
        assert_eq!(
            parse("preset:ia64-holes"),
            LayoutSpec::Preset("ia64-holes".into())
        );
        assert_eq!(parse("a/b.toml"), LayoutSpec::File("a/b.toml".into()));
    }
}
