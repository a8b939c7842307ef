#!/usr/bin/env bash
# Runs every fuzz target for SECONDS seconds each (default 60) with
# cargo-fuzz (libFuzzer + AddressSanitizer, nightly), starting from the
# seed corpus in fuzz/corpus/. Installs what it needs. Extra libFuzzer
# flags may follow the seconds (they override the defaults below).
#
# Targets run side by side, one per CPU (FUZZ_JOBS overrides), each on one
# core for its full SECONDS. FUZZ_BUILD passes flags to `cargo fuzz build`
# and `run`: the default is cargo-fuzz's own (opt-level 3, one codegen unit,
# debug assertions), about 14 minutes to build on 2 cores; "--dev" builds in
# under 2 for a fuzzer about a fifth as fast, which suits a short smoke run.
#
# Exits non-zero, naming the target and its artifact, when any target finds
# a crash, panic, leak, out-of-memory or timeout, or when cargo fuzz itself
# fails; prints each target's final libFuzzer statistics.
#
#   fuzz/run.sh 600                      # ten minutes per target
#   fuzz/run.sh 30 -rss_limit_mb=40      # forces an out-of-memory finding
#   FUZZ_TARGETS=allocator_ops fuzz/run.sh 60
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-60}"
shift || true
extra=("$@")
read -r -a build_flags <<<"${FUZZ_BUILD:-}"
jobs="${FUZZ_JOBS:-$(nproc)}"

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked

targets=(${FUZZ_TARGETS:-layout_parsers pfn_valid allocator_ops public_api trace_text trace_recording})
# Every target in one build (or only those FUZZ_TARGETS names), so cargo
# builds them side by side and each run below starts at once.
build_targets=("${targets[@]}")
[ -z "${FUZZ_TARGETS:-}" ] && build_targets=("")
for target in "${build_targets[@]}"; do
  if ! cargo +nightly fuzz build "${build_flags[@]}" $target >/tmp/pfnlab-fuzz-build.log 2>&1; then
    tail -n 20 /tmp/pfnlab-fuzz-build.log
    echo "!!! cargo fuzz build ${target:-(every target)} failed"
    exit 1
  fi
done

logs=$(mktemp -d)
# run TARGET: one libFuzzer run on a scratch copy of the corpus (so the
# run's new inputs do not pile up in git); its exit code goes beside its log.
run() {
  local target=$1 scratch
  mkdir -p "corpus/$target"
  scratch=$(mktemp -d)
  cp -r "corpus/$target/." "$scratch/"
  set +e
  cargo +nightly fuzz run "${build_flags[@]}" "$target" "$scratch" -- \
    -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=60 -print_final_stats=1 \
    "${extra[@]}" >"$logs/$target.log" 2>&1
  echo $? >"$logs/$target.rc"
  rm -rf "$scratch"
}

running=0
for target in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  run "$target" &
  running=$((running + 1))
done
wait

status=0
for target in "${targets[@]}"; do
  log="$logs/$target.log"
  echo "=== $target: ${seconds}s"
  # Final statistics: libFuzzer's "stat::" lines and its "Done N runs" line.
  grep -E '^stat::|^Done [0-9]+ runs' "$log" | sed 's/^/    /' || true
  rc=$(cat "$logs/$target.rc" 2>/dev/null || echo 1)
  if ! ./findings.sh "$target" "$log"; then
    status=1
  elif [ "$rc" -ne 0 ]; then
    echo "!!! $target: cargo fuzz exited $rc without a libFuzzer report; see $log"
    tail -n 5 "$log" | sed 's/^/      /'
    status=1
  fi
done
exit $status
