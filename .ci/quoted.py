#!/usr/bin/env python3
"""Every figure a guide quotes is in a committed results file.

    python3 .ci/quoted.py            # check every docs/results/quotes/*.toml
    python3 .ci/quoted.py --self-test

Each guide `docs/NAME.md` that quotes measured figures lists them in
`docs/results/quotes/NAME.toml`:

    [[quote]]
    says = "2.17× [2.11, 2.19]"      # as the guide writes it
    from = "peers.txt"               # a file in docs/results/
    figure = "2.17x [2.11, 2.19]"    # as that file prints it (default: says)

The check fails when a quote's `says` is not in its guide, when its
`figure` is not in its results file, or when the results file does not
exist. Whitespace runs compare as one space, so a figure may wrap.
"""
import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
QUOTES = ROOT / "docs" / "results" / "quotes"


def squash(text):
    return re.sub(r"\s+", " ", text)


def check_file(path, docs, results):
    """The problems of one quotes file, as lines."""
    guide = docs / f"{path.stem}.md"
    if not guide.exists():
        return [f"{path.name}: no guide docs/{path.stem}.md"]
    try:
        quotes = tomllib.loads(path.read_text()).get("quote", [])
    except tomllib.TOMLDecodeError as e:
        return [f"{path.name}: {e}"]
    guide_text = squash(guide.read_text())
    problems = []
    for i, q in enumerate(quotes, 1):
        says, source = q.get("says"), q.get("from")
        if not says or not source:
            problems.append(f"{path.name} quote {i}: needs `says` and `from`")
            continue
        figure = q.get("figure", says)
        if squash(says) not in guide_text:
            problems.append(f"{path.name} quote {i}: docs/{guide.name} does not say {says!r}")
        result = results / source
        if not result.exists():
            problems.append(f"{path.name} quote {i}: no results file docs/results/{source}")
        elif squash(figure) not in squash(result.read_text()):
            problems.append(f"{path.name} quote {i}: docs/results/{source} does not hold {figure!r}")
    return problems


def check(quotes_dir, docs, results):
    files = sorted(quotes_dir.glob("*.toml")) if quotes_dir.exists() else []
    problems = [p for f in files for p in check_file(f, docs, results)]
    count = 0
    for f in files:
        try:
            count += len(tomllib.loads(f.read_text()).get("quote", []))
        except tomllib.TOMLDecodeError:
            pass  # reported by check_file
    return problems, count, len(files)


def self_test():
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        d = pathlib.Path(d)
        (d / "docs" / "results" / "quotes").mkdir(parents=True)
        (d / "docs" / "g.md").write_text("The pair costs 2.17× [2.11,\n2.19] the floor's.\n")
        (d / "docs" / "results" / "peers.txt").write_text("split+merge / floor 2.17x [2.11, 2.19]\n")
        good = ('[[quote]]\nsays = "2.17× [2.11, 2.19]"\nfrom = "peers.txt"\n'
                'figure = "2.17x [2.11, 2.19]"\n')
        q = d / "docs" / "results" / "quotes" / "g.toml"
        q.write_text(good)
        args = (d / "docs" / "results" / "quotes", d / "docs", d / "docs" / "results")
        assert check(*args)[0] == [], check(*args)
        q.write_text(good.replace("2.19]\"\n", "2.20]\"\n", 1))
        assert "does not hold" in check(*args)[0][0] or "does not say" in check(*args)[0][0]
        q.write_text(good.replace('says = "2.17×', 'says = "2.18×'))
        assert "does not say" in check(*args)[0][0], check(*args)
        q.write_text(good.replace("peers.txt", "lock.txt"))
        assert "no results file" in check(*args)[0][0], check(*args)
    print("quoted.py self-test: a good quote passes; a changed figure, a figure the guide "
          "does not say and a missing results file each fail")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    problems, count, files = check(QUOTES, ROOT / "docs", ROOT / "docs" / "results")
    for p in problems:
        print(p, file=sys.stderr)
    print(f"quoted figures: {count} in {files} guides, {len(problems)} not in a results file")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
