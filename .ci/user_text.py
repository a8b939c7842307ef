#!/usr/bin/env python3
"""Fails when text a user reads speaks of how pfnlab was developed.

README, CHANGELOG, the guides and the notebook, every source file (its
rustdoc, its `--help` strings and its comments), the scripts and the
results files are read by people who have only the repository. None of
them may name a tracker issue or an item of one, a branch, a development
session, a role in the team that built it, other people's builds loading
the machine, or a path on a developer's machine.

    .ci/user_text.py                          # the tracked files
    .ci/user_text.py --help-of target/release/pfnlab   # and every --help

Each hit is listed as FILE:LINE: WHAT: TEXT, and the exit status is 1.
"""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Each pattern names what it catches; they are written so the words' other
# meanings (a CPU's branch, a static branch, a helper function) pass.
PATTERNS = [
    ("an issue number", r"\bissues? ?#?\d+|\b(?:the|this|that) issue(?:'s|:)"
                        r"|\b(?:foundation|allocator|vmemmap|seed) issues?\b|\bissue benches\b"
                        r"|\bthe issues? (?:specify|specifies|asks?|asked|names?|quotes?|was written)\b"),
    ("an item of an issue", r"\bitems? \d+\b(?! (?:bytes|pages|pfns|entries|events))"),
    ("a git branch", r"\b(?:this|the|a|that|which|each) branch(?:'s)? (?:tip|started|was|of main|`)"
                     r"|\b(?:on|of|in|at|before|after) (?:this|the|that) branch\b(?!-)(?! mispredict)"
                     r"|\bbranch `[\w./-]+`"),
    ("main's build", r"\bmain's (?:build|allocator|tree)\b|\bmain when\b"),
    ("a development session", r"\b(?:previous|this|earlier|last|next|a later) session\b"),
    ("a role in the team", r"\bthe lead\b|\bhelper sessions?\b|\bsub-?agents?\b|\bother agents?\b|\bagents'"),
    ("others' work loading the machine",
     r"\bother (?:engineers'|people's|agents') (?:builds|compil\w*)"
     r"|\bothers compil\w*|\bother builds\b|\b(?:several|two|three|four|six) other (?:builds|engineers)"),
    ("a path outside the repository", r"(?<![\w.])/(?:work|home|root|check)/|\.\./shared\b|\.\./\.library\b"
                                      r"|\b(?:DESIGN|STYLE)\.md\b"),
]
# Prose and results may not point at a scratch file either; scripts, code
# and the commands a guide shows may write their own under /tmp.
PROSE = {".md", ".ipynb", ".json", ".cff", ".txt"}
PROSE_ONLY = [("a scratch file as evidence", re.compile(r"(?<![\w$])/tmp/"))]
COMPILED = [(what, re.compile(p, re.IGNORECASE)) for what, p in PATTERNS]

TEXT_SUFFIXES = {".rs", ".md", ".py", ".sh", ".toml", ".ipynb", ".json", ".cff", ".txt", ".yml", ".yaml"}
# This file states the patterns it looks for.
SKIP = {pathlib.Path(".ci/user_text.py")}


def tracked_files():
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    for name in out.stdout.decode().split("\0"):
        p = pathlib.Path(name)
        if name and p.suffix in TEXT_SUFFIXES and p not in SKIP and not name.startswith("fuzz/corpus/"):
            yield p


def help_texts(binary):
    """`--help` of the binary and of every subcommand, recursively (clap's
    "Commands:" list), as (name, text) pairs."""
    todo = [[]]
    while todo:
        path = todo.pop()
        out = subprocess.run([binary, *path, "--help"], capture_output=True, text=True, check=True)
        yield (" ".join(["pfnlab", *path, "--help"]), out.stdout)
        listing = out.stdout.split("\nCommands:\n", 1)
        if len(listing) == 2:
            for line in listing[1].split("\n\n", 1)[0].splitlines():
                name = line.split()[0] if line.strip() else ""
                if name and name != "help":
                    todo.append([*path, name])


def check(name, suffix, text, hits):
    fenced = False
    lines = text.splitlines()
    for n, line in enumerate(lines, 1):
        # A phrase may break across two lines: each line is read with
        # the next one's start, and a hit counts where it begins.
        joined = line + " " + (lines[n].strip() if n < len(lines) else "")
        if suffix == ".md" and line.lstrip().startswith("```"):
            fenced = not fenced
        prose = suffix in PROSE and not fenced
        for what, rx in COMPILED + (PROSE_ONLY if prose else []):
            m = rx.search(joined)
            if m and m.start() < len(line):
                hits.append(f"{name}:{n}: {what}: …{line.strip()[:120]}")


# Every pattern must catch its example and pass the words' other meanings,
# checked on each run so a broken pattern cannot pass everything.
MUST_CATCH = [
    "as asked in issue #30, item 7", "(issue 26)", "The issue's target is met",
    "per model (foundation issue)", "vmemmap issue benches", "the layouts the issues specify",
    "the 7-8 M the issue quotes",
    "a build of this branch", "the branch's tip", "(branch `s6-merge`)",
    "main's build", "in the previous session's runs", "for the lead to plot",
    "shared with four other agents compiling", "two other engineers' builds",
    "see /work/main/README.md", "DESIGN.md says so",
]
MUST_PASS = [
    "a load and a branch", "the static branch a kernel patches", "branch-free",
    "a helper function", "the issue of 64 bytes", "an item of the list",
    "read /proc/zoneinfo", "at 1d3e21d before the change",
]


def self_test():
    for text in MUST_CATCH:
        hits = []
        check("example", ".md", text, hits)
        assert hits, f"no pattern caught {text!r}"
    for text in MUST_PASS:
        hits = []
        check("example", ".md", text, hits)
        assert not hits, f"a pattern caught {text!r}: {hits}"


def main():
    self_test()
    hits = []
    for rel in tracked_files():
        try:
            text = (ROOT / rel).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        check(str(rel), rel.suffix, text, hits)
    if "--help-of" in sys.argv:
        binary = sys.argv[sys.argv.index("--help-of") + 1]
        for name, text in help_texts(binary):
            check(name, ".txt", text, hits)
    for h in hits:
        print(h)
    if hits:
        print(f"\n{len(hits)} place(s) where user-facing text speaks of the development process", file=sys.stderr)
        return 1
    print("user-facing text: no issue, item, branch, session, role or outside path")
    return 0


if __name__ == "__main__":
    sys.exit(main())
