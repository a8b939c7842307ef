#!/usr/bin/env bash
# pfnlab on aarch64 under user-mode QEMU: installs the target, the cross
# linker and qemu-user from Debian packages, checks the whole workspace for
# aarch64, and runs what depends on the architecture, with QEMU as cargo's
# runner (and as the runner of the tests' child processes):
#
# - sparsemem's unit tests: the geometries (arm64 4K/16K/64K page sizes),
#   host layout parsing, the section table's encoded pointers;
# - a sample of sparsemem's generated suites (PFNLAB_PROPTEST_CASES cases
#   each, default 4): the models' arithmetic at every struct page size on
#   the aarch64 build;
# - the fault probe (`ldrb` and its `pc`/`x0` fixup), its handler's
#   chaining and soundness, and the kernel fixup timing;
# - the allocator's atomics, spin lock and per-CPU lists on a weakly
#   ordered CPU (the misuse, pcp and Miri-sized suites);
# - the lab's counter reads (`CNTVCT_EL0`), the floor and pfn parsing.
#
# The rest of the suite is architecture-independent and runs natively on
# x86_64. Not run under emulation, and why: tests that build a vmemmap
# model over a preset geometry reserve 1 to 64 TiB of address space for
# the memmap; QEMU 7.2 (Debian 12) tracks guest pages one by one, so a
# 1 TiB reservation costs it 13 GB of RSS and about 50 s, and 4 TiB is
# killed for memory. The probe, its handler, the chaining tests and
# hotplug run on a 36-bit physical space instead (the vmemmap suites
# small_space and signals).
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
if ! command -v qemu-aarch64 >/dev/null || ! command -v aarch64-linux-gnu-gcc >/dev/null \
  || ! dpkg -s libc6-dev-arm64-cross >/dev/null 2>&1; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user >/dev/null
fi
rustup target add aarch64-unknown-linux-gnu
target=aarch64-unknown-linux-gnu
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
export PFNLAB_TEST_RUNNER="$CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER"

echo "--- the whole workspace checks for aarch64 (every target, every feature)"
cargo check --workspace --all-targets --all-features --target "$target"

echo "--- sparsemem: unit tests, and a sample of the generated suites"
PFNLAB_PROPTEST_CASES="${PFNLAB_PROPTEST_CASES:-4}" cargo test -p sparsemem --target "$target" --lib --test it
echo "--- vmemmap: the probe, its handler, chaining, hotplug, the kernel fixup timing"
cargo test -p vmemmap --target "$target" --lib
cargo test -p vmemmap --target "$target" --test it -- small_space:: signals::
echo "--- buddy: the allocator's atomics and lists over the table models"
cargo test -p pfnlab-buddy --target "$target" --lib --test it -- misuse:: pcp:: miri::
echo "--- pfnlab: CNTVCT timing, the floor, pfn parsing"
cargo test -p pfnlab --target "$target" --lib -- timing:: floor:: parse_pfn
