#!/usr/bin/env bash
# Checks fuzz/findings.sh on logs in libFuzzer's own format: every kind of
# finding fails and names its artifact; a clean run passes. Run by .ci/run.
set -uo pipefail
cd "$(dirname "$0")/.."
fail=0
for kind in oom timeout panic leak; do
  out=$(./findings.sh demo "tests/logs/$kind.log")
  rc=$?
  if [ $rc -ne 1 ] || ! grep -q "artifact: .*$kind\|artifact: .*crash" <<<"$out"; then
    echo "findings.sh missed the $kind finding (exit $rc): $out"
    fail=1
  fi
done
if ! out=$(./findings.sh demo tests/logs/clean.log); then
  echo "findings.sh flagged a clean run: $out"
  fail=1
fi
[ $fail -eq 0 ] && echo "fuzz findings: 5 passed, 0 failed"
exit $fail
