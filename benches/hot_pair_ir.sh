#!/usr/bin/env bash
# Instructions per hot pair (an order-0 alloc+free through the per-CPU
# lists, bookkeeping only), counted by callgrind: `examples/hot_pair` run at
# two pair counts, the difference in instructions over the difference in
# pairs, so that set-up and the measuring loop's own trials drop out
# (each run is one warm-up and seven trials: 8 passes).
#
#   cargo build --release -p pfnlab --example hot_pair
#   benches/hot_pair_ir.sh target/release/examples/hot_pair flat 2.6.23
#
# Needs valgrind. The vmemmap models cannot run under it (their memmap
# reservation and fault handler), so use flat, sparse or sparse-extreme.
set -euo pipefail
bin=$1; model=${2:-flat}; era=${3:-2.6.23}
ir() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$model" "$era" "$1" 2>&1 |
    grep -oE 'Collected : [0-9]+' | grep -oE '[0-9]+'
}
a=$(ir 200000); b=$(ir 1200000)
python3 -c "print('$model $era: %.1f instructions per pair' % (($b - $a) / 8e6))"
