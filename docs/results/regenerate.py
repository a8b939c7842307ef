#!/usr/bin/env python3
"""Regenerate docs/results/ and the notebook, or check what is stale.

    python3 docs/results/regenerate.py               # every result, then the notebook
    python3 docs/results/regenerate.py peers bulk    # only these (no notebook)
    python3 docs/results/regenerate.py --no-notebook # every result, not the notebook
    python3 docs/results/regenerate.py --check       # list stale files (CI)
    python3 docs/results/regenerate.py --readme      # the README's table and figure only

Every results file records the commit and the command that produced it:
a `.txt` in its first line (`# provenance: commit SHA | command: ...`), a
`.json` in its top-level `provenance` object. A file written from a tree
with uncommitted changes to the code it measures names its commit with
`-dirty`.

`--check` prints, for every file here, the commit it was measured on and
whether the code it measures (ENTRIES' paths) changed after that commit; it
fails when a file names no commit at all, when an experiment has no
results file, or when the README's table is not what compare.json gives;
results may lag the code (a full run takes long) but never lose their
provenance.

Full runs are long (peers and lock several minutes each) and their numbers
depend on the machine's load: run this on a quiet machine.
"""
import json
import pathlib
import subprocess
import sys

import first_screen

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
TXT_MARK = "# provenance: "

# The code every measurement runs through: the three library crates and the
# lab's measuring code (timing, workloads, models, the runner).
COMMON = [
    "sparsemem/src",
    "vmemmap/src",
    "buddy/src",
    "benches/src/timing.rs",
    "benches/src/workloads.rs",
    "benches/src/models.rs",
    "benches/src/counting.rs",
    "benches/src/experiments/mod.rs",
]
# Test-only code inside those folders (the shared test helpers, unit-test
# files) measures nothing: a change there leaves every result current.
NOT_MEASURED = [
    ":(exclude,glob)**/testing.rs",
    ":(exclude,glob)**/testing/**",
    ":(exclude,glob)**/tests.rs",
    ":(exclude,glob)**/*_tests.rs",
]
EXP = "benches/src/experiments/"
TRACE = "gzip-dd.trace.zst"
REPLAY = ["replay", f"benches/tests/data/{TRACE}", "--exact", "--count-calls"]

# name -> (pfnlab arguments, cargo features, code measured beyond COMMON).
ENTRIES = {
    "compare": ([], [], [EXP + "compare.rs", EXP + "kernel_fixup.rs", EXP + "breakdown.rs"]),
    "compare-uffd": ([], ["uffd"], [EXP + "compare.rs", EXP + "kernel_fixup.rs", EXP + "breakdown.rs"]),
    "flags": (["bench", "flags"], [], [EXP + "flags", "benches/src/trace", "benches/data/seed-flags.trace.zst"]),
    "lock": (["bench", "lock"], [], [EXP + "lock", "benches/src/threads.rs"]),
    "pfn-valid": (["bench", "pfn-valid"], [], [EXP + "pfn_valid.rs", EXP + "kernel_fixup.rs"]),
    "bulk": (["bench", "bulk"], [], [EXP + "bulk.rs"]),
    "cpuset": (["bench", "cpuset"], [], [EXP + "cpuset", "benches/src/threads.rs"]),
    "peers": (["bench", "peers"], [], [EXP + "peers"]),
    "hole-density": (["bench", "hole-density"], [], [EXP + "hole_density.rs"]),
    "breakdown": (["bench", "breakdown"], [], [EXP + "breakdown.rs"]),
    "walk": (["bench", "walk"], [], [EXP + "walk"]),
    "hvo": (["bench", "hvo"], [], [EXP + "hvo", EXP + "hvo.rs"]),
    # The default sweep reaches an 8-byte memmap four times the LLC; with
    # a 256 MiB LLC that asks for more memmap than half the machine's
    # memory. 256 GiB of RAM is an 8-byte memmap twice such an LLC.
    "memdesc": (["bench", "memdesc", "--max-span-mib", "262144"], [], [EXP + "memdesc"]),
    "memmap-lifecycle": (["bench", "memmap-lifecycle"], [], [EXP + "lifecycle"]),
    "frag": (["bench", "frag"], [], [EXP + "frag.rs", EXP + "frag", "benches/src/frag",
                                     "benches/src/free_memory.rs", "benches/src/trace",
                                     "benches/data/frag-4g.toml", f"benches/tests/data/{TRACE}",
                                     "benches/tests/data/snapshots.trace.zst"]),
    # This host's own allocator beside the model (root): the recording goes
    # under target/, which git ignores.
    "frag-host": (["bench", "frag", "--quick", "--era", "6.18", "--recover", "0", "--no-trace",
                   "--host-kernel", "target/frag-host.trace.zst"], [],
                  [EXP + "frag.rs", "benches/src/frag", "benches/src/free_memory.rs",
                   "benches/src/trace", "benches/data/frag-4g.toml"]),
    "scale": (["bench", "scale"], [], [EXP + "scale", "benches/src/threads.rs", EXP + "peers/crates.rs"]),
    "replay-1": (REPLAY, [], ["benches/src/trace", f"benches/tests/data/{TRACE}"]),
    "replay-2": (REPLAY, [], ["benches/src/trace", f"benches/tests/data/{TRACE}"]),
    "replay-3": (REPLAY, [], ["benches/src/trace", f"benches/tests/data/{TRACE}"]),
}


def git(*args):
    """A git command's output in the repository, or None when it fails."""
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def command_line(name):
    """The command that produces `name`, as a person would type it."""
    args, features, _ = ENTRIES[name]
    cargo = "cargo run --release" + "".join(f" --features {f}" for f in features)
    return " ".join([cargo, "--", *args, "--json", f"docs/results/{name}.json"])


def measured_paths(name):
    return COMMON + ENTRIES[name][2] + NOT_MEASURED


def head_commit(name):
    """HEAD, with -dirty when the code `name` measures has uncommitted changes."""
    sha = git("rev-parse", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--", *measured_paths(name))
    return sha + ("-dirty" if dirty else "")


def regenerate(name):
    args, features, _ = ENTRIES[name]
    json_path = HERE / f"{name}.json"
    fresh = HERE / f".{name}.json.new"
    cargo = ["cargo", "run", "--release", "--quiet"] + [a for f in features for a in ("--features", f)]
    print(f"== {name}: {command_line(name)}", flush=True)
    run = subprocess.run([*cargo, "--", *args, "--json", str(fresh)], cwd=ROOT,
                         capture_output=True, text=True)
    try:
        if run.returncode != 0:
            sys.stderr.write(run.stderr)
            raise SystemExit(f"{name}: the command failed (exit {run.returncode})")
        report = json.loads(fresh.read_text())
        if not report.get("results"):
            raise SystemExit(f"{name}: the run measured nothing (no results); the old files are kept")
    finally:
        fresh.unlink(missing_ok=True)
    provenance = {"commit": head_commit(name), "command": command_line(name)}
    (HERE / f"{name}.txt").write_text(header_line(provenance) + run.stdout)
    report = {"provenance": provenance, **report}
    json_path.write_text(json.dumps(report, indent=2) + "\n")


def write_first_screen():
    """The README's table and docs/compare.png, from compare.json."""
    report = first_screen.load(HERE)
    second = first_screen.load(HERE, "compare-uffd")
    readme = ROOT / "README.md"
    readme.write_text(first_screen.replace_block(readme.read_text(),
                                                 first_screen.block(report, second)))
    try:
        first_screen.figure(report, ROOT / first_screen.FIGURE)
    except ImportError:
        print(f"{first_screen.FIGURE} not drawn: install docs/requirements.txt (matplotlib)",
              file=sys.stderr)


def check_first_screen():
    """Whether the README's table is what compare.json gives."""
    want = first_screen.block(first_screen.load(HERE), first_screen.load(HERE, "compare-uffd"))
    have = first_screen.current_block((ROOT / "README.md").read_text())
    if have != want:
        print("README.md: the compare table is not what docs/results/compare.json gives; "
              "run `python3 docs/results/regenerate.py --readme`", file=sys.stderr)
        return False
    return True


def header_line(p):
    return f"{TXT_MARK}commit {p['commit']} | command: {p['command']}\n"


def provenance_of(path):
    """The provenance a results file records, or None."""
    if path.suffix == ".json":
        try:
            p = json.loads(path.read_text()).get("provenance")
        except (ValueError, AttributeError):
            return None
        return p if isinstance(p, dict) and p.get("commit") else None
    first = path.read_text().split("\n", 1)[0]
    if not first.startswith(TXT_MARK):
        return None
    fields = dict(part.split(" ", 1) for part in first[len(TXT_MARK):].split(" | ") if " " in part)
    commit = fields.get("commit")
    return {"commit": commit, "command": fields.get("command:", "")} if commit else None


def staleness(name, commit):
    """Why a file measured on `commit` is stale, or None when it is not."""
    sha = commit.removesuffix("-dirty").split()[0]
    last = git("log", "-1", "--format=%H", "--", *measured_paths(name))
    if last is None or git("rev-parse", "--verify", "--quiet", sha + "^{commit}") is None:
        return f"cannot tell: commit {sha[:12]} is not in this clone's history"
    if git("merge-base", "--is-ancestor", last, sha) is None:
        subject = git("log", "-1", "--format=%h %s", last) or last[:12]
        return f"the code it measures changed after {sha[:12]}: last in {subject}"
    return None


def check():
    files = sorted(p for p in HERE.iterdir() if p.suffix in (".json", ".txt"))
    nameless, stale = [], []
    for path in files:
        p = provenance_of(path)
        if p is None:
            nameless.append(path.name)
            continue
        why = staleness(path.stem, p["commit"]) if path.stem in ENTRIES else "no entry in regenerate.py"
        if why:
            stale.append(f"{path.name}: {why}")
    for line in stale:
        print(f"stale: {line}")
    print(f"{len(files)} results files, {len(stale)} stale, {len(nameless)} naming no commit")
    for name in nameless:
        print(f"no commit: {name}", file=sys.stderr)
    missing = [n for n in ENTRIES if not (HERE / f"{n}.json").exists()]
    for name in missing:
        print(f"no committed result: {name} (run `python3 docs/results/regenerate.py {name}`)",
              file=sys.stderr)
    readme_ok = check_first_screen()
    return 1 if nameless or missing or not readme_ok else 0


def main():
    argv = sys.argv[1:]
    if "-h" in argv or "--help" in argv:
        print(__doc__.strip())
        return 0
    flags = [a for a in argv if a.startswith("-")]
    bad = [f for f in flags if f not in ("--check", "--readme", "--no-notebook")]
    if bad:
        # An unknown option must not start an hour of runs.
        raise SystemExit(f"unknown option {bad[0]}; see --help")
    if "--check" in argv:
        return check()
    if "--readme" in argv:
        write_first_screen()
        return 0
    names = [a for a in argv if not a.startswith("--")]
    unknown = [n for n in names if n not in ENTRIES]
    if unknown:
        raise SystemExit(f"unknown results {unknown}; known: {', '.join(ENTRIES)}")
    failed = []
    for name in names or ENTRIES:
        try:
            regenerate(name)
            if name in ("compare", "compare-uffd"):
                write_first_screen()
        except SystemExit as e:
            # One failed run does not throw away the others' hours.
            print(e, file=sys.stderr, flush=True)
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    if not names and "--no-notebook" not in argv:
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
        subprocess.run([sys.executable, str(ROOT / "docs" / "run_notebook.py")], cwd=ROOT, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
