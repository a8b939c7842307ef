//! Where a run's layout comes from: the typed form of `--layout`.
//!
//! The binary parses the option's text once into a [`LayoutSpec`]; the
//! library only ever sees the typed value. `host` always means "this
//! machine's memory map, or [`FALLBACK_PRESET`] where it cannot be read",
//! and the fallback's reason comes back to the caller instead of being
//! printed. A new source is one more variant here and one more arm in
//! [`LayoutSpec::load`].

use std::fmt;
use std::path::PathBuf;

use sparsemem::{Layout, LayoutError};

use crate::snapshot::{Snapshot, SnapshotError};

/// The preset a `host` layout falls back to when the host's memory map
/// cannot be read.
pub const FALLBACK_PRESET: &str = "x86-pci-hole";

/// A layout source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayoutSpec {
    /// The live machine's memory map (`/sys/firmware/memmap`, `/proc/iomem`).
    Host,
    /// A named preset (`preset:NAME`).
    Preset(String),
    /// A layout file (TOML).
    File(PathBuf),
    /// A machine's snapshot (`snapshot:FILE`, see [`crate::snapshot`]).
    Snapshot(PathBuf),
    /// The layout a pfnlab recording carries (`replay` only).
    Recorded,
}

/// A loaded layout, with why `host` fell back to the preset, if it did.
#[derive(Debug)]
pub struct Loaded {
    /// The layout.
    pub layout: Layout,
    /// The host's error when `host` fell back to [`FALLBACK_PRESET`].
    pub fallback: Option<LayoutError>,
}

/// A layout that could not be loaded.
#[derive(Debug)]
pub enum LoadError {
    /// The source was read and refused (or could not be read).
    Layout(LayoutError),
    /// `recorded` outside a replay, or on a trace without a layout.
    NotRecorded,
    /// The layout a recording carries is refused.
    Recorded(LayoutError),
    /// The snapshot is refused, or its memory map is.
    Snapshot(SnapshotError),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Layout(e) => e.fmt(f),
            LoadError::NotRecorded => f.write_str(
                "--layout recorded: this trace carries no layout (only pfnlab recordings do)",
            ),
            LoadError::Recorded(e) => write!(f, "the recording's layout: {e}"),
            LoadError::Snapshot(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for LoadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LoadError::Layout(e) | LoadError::Recorded(e) => Some(e),
            LoadError::Snapshot(e) => Some(e),
            LoadError::NotRecorded => None,
        }
    }
}

impl From<LayoutError> for LoadError {
    fn from(e: LayoutError) -> Self {
        LoadError::Layout(e)
    }
}

impl LayoutSpec {
    /// Loads the layout this spec names. `Recorded` is refused: only a
    /// replay has a recording to take it from.
    pub fn load(&self) -> Result<Loaded, LoadError> {
        let plain = |layout| Loaded {
            layout,
            fallback: None,
        };
        match self {
            LayoutSpec::Host => {
                let (layout, fallback) = Layout::from_host_or_preset(FALLBACK_PRESET)?;
                Ok(Loaded { layout, fallback })
            }
            LayoutSpec::Preset(name) => Ok(plain(Layout::preset(name)?)),
            LayoutSpec::File(path) => Ok(plain(Layout::from_toml_file(path)?)),
            LayoutSpec::Snapshot(path) => Snapshot::load(path)
                .and_then(|s| s.layout(&self.to_string()))
                .map(plain)
                .map_err(LoadError::Snapshot),
            LayoutSpec::Recorded => Err(LoadError::NotRecorded),
        }
    }
}

impl fmt::Display for LayoutSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutSpec::Host => f.write_str("host"),
            LayoutSpec::Preset(name) => write!(f, "preset:{name}"),
            LayoutSpec::File(path) => write!(f, "{}", path.display()),
            LayoutSpec::Snapshot(path) => write!(f, "snapshot:{}", path.display()),
            LayoutSpec::Recorded => f.write_str("recorded"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_and_files_load_and_recorded_is_refused() {
        let preset = LayoutSpec::Preset("ia64-holes".into()).load().unwrap();
        assert!(preset.fallback.is_none());
        assert_eq!(preset.layout.source(), "preset:ia64-holes");
        let missing = LayoutSpec::File("/nonexistent/l.toml".into()).load();
        assert!(
            missing
                .unwrap_err()
                .to_string()
                .contains("cannot read layout file")
        );
        assert!(matches!(
            LayoutSpec::Recorded.load(),
            Err(LoadError::NotRecorded)
        ));
        assert_eq!(LayoutSpec::Preset("x".into()).to_string(), "preset:x");
    }

    #[test]
    fn host_loads_or_says_why_it_fell_back() {
        let loaded = LayoutSpec::Host.load().unwrap();
        match loaded.fallback {
            Some(_) => assert_eq!(loaded.layout.source(), format!("preset:{FALLBACK_PRESET}")),
            None => assert!(loaded.layout.present_pages() > 0),
        }
    }
}
