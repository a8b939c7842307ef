//! `pfnlab` with no command: the default comparison, with a progress bar.

use std::io::{self, IsTerminal};

use indicatif::{ProgressBar, ProgressStyle};
use pfnlab::experiments::compare::Compare;
use pfnlab::experiments::{Prepared, Setup};
use pfnlab::models::ModelKind;

use super::{Bar, CliError, fallback_notice};

/// Runs the default comparison and prints its table.
pub fn run(setup: &Setup) -> Result<(), CliError> {
    let bar = Bar(if io::stderr().is_terminal() {
        ProgressBar::new(ModelKind::ALL.len() as u64)
    } else {
        ProgressBar::hidden()
    });
    bar.0.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let prepared = Prepared::<Compare>::new(setup, &bar)?;
    if let Some(why) = prepared.fallback() {
        fallback_notice(why);
    }
    print!("{}", prepared.header());
    let table = prepared.run(&());
    bar.0.finish_and_clear();
    print!("{}", table?);
    Ok(())
}
