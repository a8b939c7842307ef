#!/usr/bin/env bash
# pfnlab on aarch64 under user-mode QEMU: installs the target, the cross
# linker and qemu-user from Debian packages, checks the whole workspace for
# aarch64 and runs every test that user-mode QEMU can emulate, with QEMU
# as cargo's runner (and as the runner of the tests' child processes).
#
# Not run under emulation, and why: tests that build a vmemmap model over
# a preset geometry reserve 1 to 64 TiB of address space for the memmap;
# QEMU 7.2 (Debian 12) tracks guest pages one by one, so a 1 TiB
# reservation costs it 13 GB of RSS and about 50 s, and 4 TiB is killed
# for memory. The probe, its handler, the chaining tests and hotplug run on
# a 36-bit physical space instead (vmemmap/tests/small_space.rs,
# vmemmap/tests/signals.rs); the vmemmap-building tests of buddy and pfnlab
# run natively on x86_64.
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
echo "--- sparsemem: every test"
cargo test -p sparsemem --features testing --target "$target"
echo "--- vmemmap: the probe, its handler, chaining, hotplug, the kernel fixup timing"
cargo test -p vmemmap --target "$target" --lib --test small_space --test signals
echo "--- buddy: the allocator over the table models"
cargo test -p buddy --target "$target" --lib --test misuse --test pcp --test miri
echo "--- pfnlab: CNTVCT timing, the floor, pfn parsing"
cargo test -p pfnlab --target "$target" --lib -- timing:: floor:: parse_pfn
