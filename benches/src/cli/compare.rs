//! `pfnlab` with no command: the default comparison.

use std::io::{self, IsTerminal};
use std::path::PathBuf;

use indicatif::{ProgressBar, ProgressStyle};
use pfnlab::compare;
use pfnlab::experiments::kernel_fixup::measure_kernel_fixup;
use pfnlab::layout_spec::LayoutSpec;
use pfnlab::machine::Machine;
use pfnlab::models::ModelKind;
use pfnlab::report::{JsonOut, Report};
use pfnlab::timing::Plan;

use super::{Bar, CliError, load_layout};

/// What the default comparison takes.
pub struct CompareArgs {
    /// The layout (default: host).
    pub layout: Option<LayoutSpec>,
    /// Where to write the report.
    pub json: Option<PathBuf>,
    /// Trials and scale.
    pub plan: Plan,
    /// The era (default 6.18).
    pub era: Option<buddy::Era>,
}

/// Runs the default comparison and prints its table.
pub fn run(args: CompareArgs) -> Result<(), CliError> {
    let out = args.json.as_deref().map(JsonOut::create).transpose()?;
    let layout = load_layout(args.layout.as_ref())?;
    let machine = Machine::describe();
    let era = args.era.unwrap_or_default();
    println!(
        "pfnlab default comparison on {} ({}), kernel era {era}",
        layout.source(),
        layout.geometry(),
    );
    println!("machine: {}\n", machine.summary());
    let bar = Bar(if io::stderr().is_terminal() {
        ProgressBar::new(ModelKind::ALL.len() as u64)
    } else {
        ProgressBar::hidden()
    });
    bar.0.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let options = buddy::Options {
        era,
        ..buddy::Options::default()
    };
    let (results, refused) = compare::run(&layout, args.plan, options, &bar);
    bar.0.set_message("kernel fault fixup");
    let fixup = measure_kernel_fixup(args.plan)?;
    bar.0.finish_and_clear();
    compare::check_finite(&results)?;
    print!("{}", compare::table(&results, &refused, Some(&fixup)));
    if let Some(out) = out {
        let mut rows = compare::rows(&results);
        rows.extend(fixup.rows());
        out.write(&Report {
            experiment: "compare".into(),
            machine,
            layout: layout.source().into(),
            results: rows,
        })?;
    }
    Ok(())
}
