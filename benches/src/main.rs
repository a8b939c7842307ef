//! The `pfnlab` command: a thin shell over the library. It parses the
//! arguments (`cli`), prints what the library returns, shows progress,
//! and turns any error into one line and exit status 2. See README.md.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // One clear line: clap's message up to its usage block, its
            // lines joined (a missing argument is named on the second).
            let text = e.to_string();
            let message: Vec<&str> = text
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            let message = match message.join(" ") {
                m if m.is_empty() => "bad arguments".to_owned(),
                m => m,
            };
            eprintln!(
                "pfnlab: {} (see pfnlab --help)",
                message.trim_start_matches("error: ")
            );
            return ExitCode::from(2);
        }
    };
    match cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pfnlab: {e}");
            ExitCode::from(2)
        }
    }
}
