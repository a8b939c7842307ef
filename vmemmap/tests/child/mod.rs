//! Re-running one test of this binary as a child process, so a test can
//! watch a fault kill it (under `PFNLAB_TEST_RUNNER`, for QEMU, when set).

use std::process::{Command, Output};

/// Runs the test `test` of this binary alone in a child, with `env` set
/// to `mode`, and returns how it ended.
pub fn run_child(test: &str, env: &str, mode: &str) -> Output {
    let exe = std::env::current_exe().unwrap();
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
        .env(env, mode)
        .output()
        .unwrap()
}
