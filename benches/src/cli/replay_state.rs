//! `pfnlab replay`'s `--start-state` and `--end-state`: a snapshot file
//! (`snapshot:FILE`), or `recorded`, the machine's snapshots a recording
//! made with `trace record --snapshot` carries from just before and just
//! after it.

use std::path::{Path, PathBuf};

use pfnlab::layout_spec::LayoutSpec;
use pfnlab::snapshot::{Snapshot, StartState};
use pfnlab::trace::format::Header;
use pfnlab::trace::replay::end_state::{FreeState, compare_end_state};
use pfnlab::trace::replay::{ModelResults, end_state_table};

use super::CliError;

/// Where a replay's start or end state comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateArg {
    /// `snapshot:FILE`.
    Snapshot(PathBuf),
    /// `recorded`: the recording's own snapshot.
    Recorded,
}

/// Parses `--start-state`: `snapshot:FILE` or `recorded`.
pub fn parse_start(text: &str) -> Result<StateArg, String> {
    parse(text, "start state")
}

/// Parses `--end-state`: `snapshot:FILE` or `recorded`.
pub fn parse_end(text: &str) -> Result<StateArg, String> {
    parse(text, "end state")
}

fn parse(text: &str, what: &str) -> Result<StateArg, String> {
    if text == "recorded" {
        return Ok(StateArg::Recorded);
    }
    text.strip_prefix("snapshot:")
        .map(|path| StateArg::Snapshot(PathBuf::from(path)))
        .ok_or_else(|| format!("`{text}`: a replay's {what} is `snapshot:FILE` or `recorded`"))
}

/// Which of a recording's two snapshots.
#[derive(Clone, Copy)]
enum End {
    Start,
    Finish,
}

/// The snapshot a recording at `file` (its header `header`) carries from
/// its start or its end; an error names `option` and says why there is
/// none.
fn recorded(
    file: &Path,
    header: Option<&Header>,
    end: End,
    option: &str,
) -> Result<Snapshot, CliError> {
    let refused = |why: String| CliError(format!("{option} recorded: {why}"));
    let header = header.ok_or_else(|| {
        refused(format!(
            "{} is the kernel's text, which carries no snapshot (record with `pfnlab trace record --snapshot`)",
            file.display()
        ))
    })?;
    let text = match end {
        End::Start => header.snapshot_start.as_deref(),
        End::Finish => header.snapshot_end.as_deref(),
    };
    let text = text.ok_or_else(|| {
        refused(format!(
            "{} was recorded without its machine's snapshots (record with `pfnlab trace record --snapshot`)",
            file.display()
        ))
    })?;
    Snapshot::from_json(text)
        .map_err(|e| refused(format!("the snapshot in {}: {e}", file.display())))
}

/// The replay's start state, read and checked before anything is built,
/// and its layout: `layout` (`--layout`, else the one before the
/// command), else a `snapshot:FILE` start state's snapshot's (else the
/// recording's, whose layout a recording with snapshots took from its
/// start snapshot, or the host's).
pub fn start_and_layout(
    arg: Option<&StateArg>,
    seed: u64,
    file: &Path,
    header: Option<&Header>,
    layout: Option<LayoutSpec>,
) -> Result<(Option<StartState>, Option<LayoutSpec>), CliError> {
    Ok(match arg {
        None => (None, layout),
        Some(StateArg::Snapshot(path)) => (
            Some(StartState::load(path, seed)?),
            layout.or_else(|| Some(LayoutSpec::Snapshot(path.clone()))),
        ),
        Some(StateArg::Recorded) => {
            let snapshot = recorded(file, header, End::Start, "--start-state")?;
            let start = StartState::of(&snapshot, file, true, seed)
                .map_err(|e| CliError(format!("--start-state recorded: {e}")))?;
            (Some(start), layout)
        }
    })
}

/// Whether the replay's allocators start in deferred struct page init:
/// `--deferred-init`, or a start state whose machine was still in it (in
/// an era without it, refused).
pub fn deferred_init(
    asked: bool,
    start: Option<&StartState>,
    era: buddy::Era,
) -> Result<bool, CliError> {
    let options = buddy::Options {
        deferred_init: asked,
        ..buddy::Options::for_era(era)
    };
    Ok(match start {
        Some(start) => start.options(options)?.deferred_init,
        None => asked,
    })
}

/// The `--end-state` snapshot: what the table calls it, its file, and the
/// machine's free lists in it.
pub struct EndArg {
    label: String,
    path: PathBuf,
    machine: FreeState,
}

impl EndArg {
    /// Reads the end state `arg` names, of the replay of `file` (its
    /// header `header`): its buddyinfo (refused without one) and its
    /// pagetypeinfo if it has one. Every error names the option and where
    /// the snapshot was to come from.
    pub fn load(arg: &StateArg, file: &Path, header: Option<&Header>) -> Result<EndArg, CliError> {
        let (snapshot, label, path) = match arg {
            StateArg::Snapshot(path) => {
                let refused =
                    |why: String| CliError(format!("--end-state {}: {why}", path.display()));
                let snapshot = Snapshot::load(path).map_err(|e| refused(e.to_string()))?;
                (
                    snapshot,
                    format!("snapshot:{}", path.display()),
                    path.clone(),
                )
            }
            StateArg::Recorded => (
                recorded(file, header, End::Finish, "--end-state")?,
                format!("recorded: the snapshot at the end of {}", file.display()),
                file.to_owned(),
            ),
        };
        let refused = |why: String| CliError(format!("--end-state {label}: {why}"));
        let buddyinfo = snapshot
            .buddyinfo()
            .map_err(|e| refused(e.to_string()))?
            .ok_or_else(|| refused("the snapshot has no buddyinfo".into()))?;
        let pagetypeinfo = snapshot
            .pagetypeinfo()
            .map_err(|e| refused(e.to_string()))?;
        Ok(EndArg {
            label,
            path,
            machine: FreeState {
                buddyinfo,
                pagetypeinfo,
            },
        })
    }

    /// Holds each model's end state against the machine's, and returns
    /// the table.
    pub fn compare(&self, results: &mut ModelResults) -> String {
        for r in results.iter_mut().filter_map(|(_, r)| r.as_mut().ok()) {
            r.end_state = r
                .end_free
                .as_ref()
                .map(|model| compare_end_state(model, &self.machine, self.path.clone()));
        }
        end_state_table(&self.label, results)
    }
}
