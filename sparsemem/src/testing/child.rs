//! Re-running one test of the current test binary in a child process.
//!
//! Each crate's integration tests are one binary whose tests run on
//! parallel threads of one process. A test that must watch a fault kill a
//! process, or that counts something process-wide (threads, file
//! descriptors, a global cache's objects), runs its body in a child: the
//! same binary, re-executed with `--exact` and one test thread, so no
//! other test shares its process. Under `PFNLAB_TEST_RUNNER` (for example
//! `qemu-aarch64 -L /usr/aarch64-linux-gnu`) the child runs through that
//! command, as cargo's runner runs the parent.

use std::process::{Command, Output};

/// The variable that tells a child which test it was started to run alone.
const ALONE: &str = "PFNLAB_TEST_ALONE";

/// Runs the test named `test` (its path in the binary, `module::name`)
/// alone in a child with the environment variable `env` set to `value`,
/// and returns how the child ended.
///
/// # Errors
/// The error of starting the child (the test binary or the runner).
pub fn run_child(test: &str, env: &str, value: &str) -> std::io::Result<Output> {
    let exe = std::env::current_exe()?;
    let runner = std::env::var("PFNLAB_TEST_RUNNER").unwrap_or_default();
    let mut words = runner.split_whitespace();
    let mut cmd = match words.next() {
        Some(program) => {
            let mut c = Command::new(program);
            c.args(words).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(env, value)
        .output()
}

/// Runs the body of test `test` in a process of its own.
///
/// In the child started for it, returns `None`: the caller runs its body.
/// Anywhere else, runs `test` in a child and returns `Some` of its
/// outcome, which the caller returns: `Err` with the child's output when
/// it failed, or when it ran no test (a `test` naming no test of the
/// binary cannot pass).
///
/// ```no_run
/// # fn count_threads() -> usize { 1 }
/// #[test]
/// fn counts_its_own_threads() -> Result<(), String> {
///     if let Some(outcome) = sparsemem::testing::run_alone("counts_its_own_threads") {
///         return outcome;
///     }
///     assert_eq!(count_threads(), 1);
///     Ok(())
/// }
/// ```
#[must_use]
pub fn run_alone(test: &str) -> Option<Result<(), String>> {
    if std::env::var(ALONE).is_ok_and(|t| t == test) {
        return None;
    }
    let outcome = match run_child(test, ALONE, test) {
        Err(e) => Err(format!("{test}: cannot start the child: {e}")),
        Ok(out) => {
            let stdout = String::from_utf8_lossy(&out.stdout);
            if out.status.success() && stdout.contains("1 passed") {
                Ok(())
            } else {
                Err(format!(
                    "{test} in its own process: {}\n--- stdout\n{stdout}\n--- stderr\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ))
            }
        }
    };
    Some(outcome)
}
