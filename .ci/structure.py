#!/usr/bin/env python3
"""The project's code-structure rules, checked:

- no top-level module of a crate uses, directly or through others, a module
  that uses it back (paths `crate::NAME` in non-test code, re-exports of
  the crate root resolved to the module they come from);
- no non-test part of a source file over 700 lines (the part before its
  inline `#[cfg(test)] mod tests {`; `tests.rs` files are tests);
- no non-test function over 80 lines;
- at most one integration-test binary per crate (`tests/it/main.rs`, its
  suites as modules), so the test suite links one binary per crate;
- no debug information beyond line tables in the profiles `cargo test`
  builds (`dev` and `test`, their package overrides included).

Prints each violation and exits 1 when there is one; prints each crate's
module order, bottom to top, otherwise.
"""
import os
import re
import subprocess
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRATES = {"sparsemem": "sparsemem/src", "vmemmap": "vmemmap/src",
          "buddy": "buddy/src", "pfnlab": "benches/src"}
MAX_FILE, MAX_FN = 700, 80
TEST_MOD = re.compile(r"\n#\[cfg\(test\)\]\s*\n\s*(pub(\(crate\))?\s+)?mod \w+ \{")
FN = re.compile(r'^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(unsafe\s+)?(extern\s+"C"\s+)?fn\s+(\w+)')


def is_test_file(path):
    name = os.path.basename(path)
    return name == "tests.rs" or name.endswith("_tests.rs")


def non_test(text):
    m = TEST_MOD.search(text)
    return text[: m.start()] if m else text


def rust_files(src):
    for dirpath, _, files in os.walk(src):
        for f in sorted(files):
            if f.endswith(".rs"):
                yield os.path.join(dirpath, f)


def function_lengths(lines):
    i = 0
    while i < len(lines):
        m = FN.match(lines[i])
        if not m:
            i += 1
            continue
        depth, started, j = 0, False, i
        while j < len(lines):
            depth += lines[j].count("{") - lines[j].count("}")
            started = started or "{" in lines[j]
            if started and depth <= 0:
                break
            if not started and lines[j].rstrip().endswith(";"):
                break
            j += 1
        if started:
            yield m.group(6), i + 1, j - i + 1
            i = j + 1
        else:
            i += 1


def module_graph(src):
    root = os.path.join(src, "lib.rs")
    lib = re.sub(r"//[^\n]*", "", open(root).read())
    alias = {}
    for mod, rest in re.findall(r"pub use (\w+)::(\{[^}]*\}|\w+)", lib):
        for name in re.findall(r"\w+", rest):
            alias[name] = mod
    graph = {}
    for path in rust_files(src):
        rel = os.path.relpath(path, src)
        top = rel.split(os.sep)[0].removesuffix(".rs")
        if top in ("lib", "main") or is_test_file(path) or rel.startswith(("bin" + os.sep, "cli" + os.sep)):
            continue
        text = re.sub(r"//[^\n]*", "", non_test(open(path).read()))
        uses = set(re.findall(r"crate::(\w+)", text))
        for group in re.findall(r"crate::\{([^}]*)\}", text, re.S):
            uses.update(re.findall(r"(?:^|,)\s*(\w+)", group))
        graph.setdefault(top, set()).update(alias.get(u, u) for u in uses)
    return {k: {v for v in vs if v in graph and v != k} for k, vs in graph.items()}


def components(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_binaries(crate_dir):
    """The integration-test targets cargo builds for the crate in `crate_dir`:
    auto-discovered files and folders under tests/, and `[[test]]` entries."""
    manifest = tomllib.load(open(os.path.join(crate_dir, "Cargo.toml"), "rb"))
    targets = {t.get("name", "?"): t.get("path", "") for t in manifest.get("test", [])}
    tests = os.path.join(crate_dir, "tests")
    if manifest.get("package", {}).get("autotests", True) and os.path.isdir(tests):
        for entry in sorted(os.listdir(tests)):
            path = os.path.join(tests, entry)
            if entry.endswith(".rs"):
                targets.setdefault(entry[:-3], path)
            elif os.path.isfile(os.path.join(path, "main.rs")):
                targets.setdefault(entry, os.path.join(path, "main.rs"))
    return sorted(targets)


# Debug-information levels that are more than line tables.
FULL_DEBUG = {True, 2, "full", "limited", 1}


def test_profile_problems():
    """Profiles `cargo test` builds with that carry more than line tables."""
    profiles = tomllib.load(open(os.path.join(ROOT, "Cargo.toml"), "rb")).get("profile", {})
    problems = []
    for name in ("dev", "test"):
        profile = profiles.get(name, {})
        if name == "dev" and "debug" not in profile:
            problems.append("[profile.dev] sets no `debug` (cargo's default is full debug info)")
        settings = [(f"[profile.{name}]", profile)]
        settings += [(f'[profile.{name}.package."{p}"]', s) for p, s in profile.get("package", {}).items()]
        for where, s in settings:
            if s.get("debug") in FULL_DEBUG and s.get("debug") is not False:
                problems.append(f"{where} debug = {s['debug']!r}: at most line tables in test builds")
    deps = profiles.get("dev", {}).get("package", {}).get("*", {})
    if deps.get("debug") not in (False, 0, "none"):
        problems.append('[profile.dev.package."*"] must set debug = false (no debug info for dependencies)')
    return problems


def main():
    problems = test_profile_problems()
    for crate, src in CRATES.items():
        binaries = test_binaries(os.path.join(ROOT, os.path.dirname(src)))
        if len(binaries) > 1:
            problems.append(f"{crate}: {len(binaries)} integration-test binaries ({', '.join(binaries)}); "
                            "add a suite as a module of tests/it/main.rs")
    files = subprocess.run(["git", "ls-files", "*.rs"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    for f in files:
        if f.startswith("fuzz/") or "/tests/" in f or f.startswith("benches/criterion/benches/") or is_test_file(f):
            continue
        lines = non_test(open(os.path.join(ROOT, f)).read()).split("\n")
        if len(lines) > MAX_FILE:
            problems.append(f"{f}: {len(lines)} non-test lines (at most {MAX_FILE})")
        for name, line, length in function_lengths(lines):
            if length > MAX_FN:
                problems.append(f"{f}:{line}: fn {name} is {length} lines (at most {MAX_FN})")
    for crate, src in CRATES.items():
        comps = components(module_graph(os.path.join(ROOT, src)))
        cycles = [c for c in comps if len(c) > 1]
        for c in cycles:
            problems.append(f"{crate}: modules that use each other: {', '.join(c)}")
        if not cycles:
            print(f"{crate}: " + " < ".join(m for c in comps for m in c))
    for p in problems:
        print("structure:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
