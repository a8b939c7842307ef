#!/usr/bin/env bash
# Reads one libFuzzer log and says whether the run found something: a crash
# or panic (deadly signal), a sanitizer report (ASan, LSan leak), an
# out-of-memory or a timeout. libFuzzer writes its own reports as
# "==PID== ERROR: libFuzzer: ..." (a space before ERROR) and the sanitizers
# as "==PID==ERROR: ...", so both spellings count.
#
#   fuzz/findings.sh TARGET LOG    # exit 1 and one line per finding, else 0
set -uo pipefail
target="$1"
log="$2"

findings=$(grep -E '==[0-9]+== ?ERROR|^SUMMARY: [A-Za-z]*Sanitizer|panicked at|ERROR: libFuzzer' "$log" | sort -u)
if [ -z "$findings" ]; then
  exit 0
fi
echo "!!! $target: the fuzzer found a problem:"
printf '%s\n' "$findings" | sed 's/^/      /'
artifacts=$(grep -oE "(Test unit written to|artifact written to) [^ ]+" "$log" | awk '{print $NF}' | sort -u)
if [ -n "$artifacts" ]; then
  printf '    artifact: %s\n' $artifacts
else
  echo "    artifact: none written (see $log)"
fi
exit 1
