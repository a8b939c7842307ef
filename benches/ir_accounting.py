#!/usr/bin/env python3
"""Instruction counts of the peers' workloads, pfnlab beside the floor.

Runs `examples/peer_ir` (build it with `cargo build --release -p pfnlab
--example peer_ir`) under callgrind at two operation counts for each
workload and contender; the difference over the difference in operations is
instructions per operation, set-up left out. It also attributes each
operation's instructions to the code they come from: callgrind counts per
instruction address, and `addr2line -i` names the chain of functions
inlined at that address; an instruction is charged to the innermost frame
in the workspace's own code (so an inlined `AtomicU64::store` counts where
pfnlab calls it), summed by function: the raw material of
docs/accounting.md's table.

The summary also counts `frame-alloc` (the peer crate nearest pfnlab on
the split-merge pair, set up as `bench peers` sets it up), without
attribution: its code is not the workspace's.

Usage: benches/ir_accounting.py BINARY [MODEL] [ERA]
(defaults: flat 2.6.23, the peers'). Needs valgrind; takes a few minutes.
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

WORKLOADS = [("hot", 20_000, 220_000), ("split", 2_000, 22_000), ("burst", 25_600, 281_600)]


def callgrind(binary, args):
    """Self instructions per instruction address and the run's total."""
    with tempfile.NamedTemporaryFile(suffix=".cg", delete=False) as f:
        out = f.name
    try:
        run = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
             "--dump-instr=yes", "--compress-strings=no", "--compress-pos=no",
             binary, *args],
            capture_output=True, text=True, check=True)
        addrs = collections.Counter()
        total = 0
        skip = False
        with open(out) as cg:
            for raw in cg:
                line = raw.strip()
                if line.startswith("calls="):
                    skip = True  # the next cost line is the call's inclusive cost
                elif line.startswith(("totals:", "summary:")):
                    total = int(line.split()[1])
                elif line.startswith("0x"):
                    parts = line.split()
                    if skip:
                        skip = False
                        continue
                    if len(parts) >= 3:
                        addrs[int(parts[0], 16)] += int(parts[2])
        return addrs, total, run.stdout.strip()
    finally:
        os.unlink(out)


def done(text):
    return int(re.search(r"(\d+) (pairs|pages)", text).group(1))


def per_op(binary, contender, work, model, era, n1, n2):
    a, ta, said_a = callgrind(binary, [contender, work, model, era, str(n1)])
    b, tb, said = callgrind(binary, [contender, work, model, era, str(n2)])
    d_ops = done(said) - done(said_a)
    diff = {k: (b[k] - a.get(k, 0)) / d_ops for k in b if b[k] != a.get(k, 0)}
    steps = re.search(r"([\d.]+) splits and ([\d.]+) merges", said)
    return (tb - ta) / d_ops, diff, steps


OWN = ("/buddy/src/", "/sparsemem/src/", "/vmemmap/src/", "/benches/src/", "/benches/examples/")


def short(path):
    for root in OWN:
        if root in path:
            return path[path.index(root) + 1:]
    return os.path.basename(path)


def attribute(binary, costs):
    """Instructions per (own function, file) from per-address costs."""
    addrs = sorted(a for a, ir in costs.items() if abs(ir) >= 0.01)
    if not addrs:
        return collections.Counter()
    run = subprocess.run(["addr2line", "-i", "-f", "-C", "-a", "-e", binary,
                          *[hex(a) for a in addrs]],
                         capture_output=True, text=True, check=True)
    where = {}
    current, frames = None, []
    lines = run.stdout.splitlines()
    def close():
        if current is not None:
            own = [f for f in frames if any(r in f[1] for r in OWN)]
            fn, loc = (own[0] if own else frames[0]) if frames else ("?", "?")
            where[current] = (re.sub(r"<.*>", "", fn).split("::")[-2:], short(loc.split(":")[0]))
    i = 0
    while i < len(lines):
        if lines[i].startswith("0x"):
            close()
            current, frames = int(lines[i], 16), []
            i += 1
        else:
            frames.append((lines[i], lines[i + 1] if i + 1 < len(lines) else "?"))
            i += 2
    close()
    by_fn = collections.Counter()
    for a in addrs:
        fn, path = where.get(a, (["?"], "?"))
        by_fn[("::".join(fn), path)] += costs[a]
    return by_fn


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    model = sys.argv[2] if len(sys.argv) > 2 else "flat"
    era = sys.argv[3] if len(sys.argv) > 3 else "2.6.23"
    print(f"model {model}, era {era}; instructions per operation (pair, or page of a 128-page burst)")
    print(f"{'workload':<10} {'floor':>8} {'pfnlab':>8} {'ratio':>6} {'frame-alloc':>11}"
          "  steps per pair (pfnlab)")
    detail = []
    for work, n1, n2 in WORKLOADS:
        floor, floor_costs, _ = per_op(binary, "floor", work, model, era, n1, n2)
        ours, costs, steps = per_op(binary, "pfnlab", work, model, era, n1, n2)
        peer = per_op(binary, "frame-alloc", work, model, era, n1, n2)[0]
        extra = ""
        if steps:
            s, m = float(steps.group(1)), float(steps.group(2))
            extra = (f"{s:.2f} splits + {m:.2f} merges: floor {floor / (s + m):.1f}, "
                     f"pfnlab {ours / (s + m):.1f} per step")
        print(f"{work:<10} {floor:>8.1f} {ours:>8.1f} {ours / floor:>5.2f}x {peer:>11.1f}  {extra}")
        detail.append((work, floor_costs, costs))
    for work, floor_costs, costs in detail:
        for who, c in (("floor", floor_costs), ("pfnlab", costs)):
            print(f"\n{who} {work}: instructions per operation by function (own code, inlined callees included)")
            for (fn, path), ir in attribute(binary, c).most_common():
                if abs(ir) >= 0.5:
                    print(f"  {ir:7.1f}  {fn:<40} {path}")


if __name__ == "__main__":
    main()
