#!/usr/bin/env bash
# Runs every fuzz target for SECONDS seconds each (default 60) with
# cargo-fuzz (libFuzzer + AddressSanitizer, nightly), starting from the
# seed corpus in fuzz/corpus/. Installs what it needs. Findings land in
# fuzz/artifacts/<target>/ and make this script exit non-zero.
#
#   fuzz/run.sh 600        # ten minutes per target
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-60}"

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked

status=0
for target in layout_parsers pfn_valid allocator_ops; do
  mkdir -p "corpus/$target"
  echo "=== $target: ${seconds}s"
  # A scratch copy of the corpus, so the run's new inputs do not pile up in git.
  scratch=$(mktemp -d)
  cp -r "corpus/$target/." "$scratch/"
  if ! cargo +nightly fuzz run "$target" "$scratch" -- \
      -max_total_time="$seconds" -rss_limit_mb=4096 -print_final_stats=1 2>&1 |
      tee "/tmp/pfnlab-fuzz-$target.log" | grep -E '^(#[0-9]+ *DONE|stat::number_of_executed_units|==[0-9]+==ERROR|SUMMARY)'; then
    :
  fi
  if grep -qE '==[0-9]+==ERROR|panicked|deadly signal' "/tmp/pfnlab-fuzz-$target.log"; then
    echo "!!! $target found a problem; see fuzz/artifacts/$target and /tmp/pfnlab-fuzz-$target.log"
    status=1
  fi
  rm -rf "$scratch"
done
exit $status
