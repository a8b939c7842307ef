#!/usr/bin/env bash
# Runs every fuzz target for SECONDS seconds each (default 60) with
# cargo-fuzz (libFuzzer + AddressSanitizer, nightly), starting from the
# seed corpus in fuzz/corpus/. Installs what it needs. Extra libFuzzer
# flags may follow the seconds (they override the defaults below).
#
# Exits non-zero, naming the target and its artifact, when any target finds
# a crash, panic, leak, out-of-memory or timeout, or when cargo fuzz itself
# fails; prints each target's final libFuzzer statistics.
#
#   fuzz/run.sh 600                      # ten minutes per target
#   fuzz/run.sh 30 -rss_limit_mb=40      # forces an out-of-memory finding
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-60}"
shift || true
extra=("$@")

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked

targets=${FUZZ_TARGETS:-layout_parsers pfn_valid allocator_ops public_api trace_text trace_recording}
# Every target in one build (unless FUZZ_TARGETS picks some), so cargo
# builds the targets side by side; each run below then starts at once.
if [ -z "${FUZZ_TARGETS:-}" ]; then
  cargo +nightly fuzz build 2>&1 | tail -n 3 || { echo "!!! cargo fuzz build failed"; exit 1; }
fi

status=0
for target in $targets; do
  mkdir -p "corpus/$target"
  echo "=== $target: ${seconds}s"
  # A scratch copy of the corpus, so the run's new inputs do not pile up in git.
  scratch=$(mktemp -d)
  cp -r "corpus/$target/." "$scratch/"
  log="/tmp/pfnlab-fuzz-$target.log"
  set +e
  cargo +nightly fuzz run "$target" "$scratch" -- \
    -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=60 -print_final_stats=1 \
    "${extra[@]}" >"$log" 2>&1
  rc=$?
  set -e
  rm -rf "$scratch"
  # Final statistics: libFuzzer's "stat::" lines and its "Done N runs" line.
  grep -E '^stat::|^Done [0-9]+ runs' "$log" | sed 's/^/    /' || true
  if ! ./findings.sh "$target" "$log"; then
    status=1
  elif [ $rc -ne 0 ]; then
    echo "!!! $target: cargo fuzz exited $rc without a libFuzzer report; see $log"
    tail -n 5 "$log" | sed 's/^/      /'
    status=1
  fi
done
exit $status
