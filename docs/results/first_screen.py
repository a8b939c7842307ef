"""The README's first screen, made from docs/results/compare.json.

`block(report)` is the Markdown between the README's `compare:begin` and
`compare:end` markers: a table per model (each median with its 95 %
interval), one line of reading per path, and the machine. `figure(report,
path)` draws the same medians and intervals as a PNG (matplotlib, from
docs/requirements.txt). regenerate.py writes both after a compare run;
`regenerate.py --check` fails when the README's block is not what
compare.json gives.
"""
import json
import pathlib

BEGIN = "<!-- compare:begin: written by docs/results/regenerate.py from docs/results/compare.json -->"
END = "<!-- compare:end -->"
FIGURE = "docs/compare.png"

MODELS = ["flat", "sparse", "sparse-extreme", "vmemmap-table", "vmemmap-probe"]
# (variant in the JSON, column heading, path named in the reading)
PATHS = [
    ("pfn_valid-valid", "`pfn_valid`, valid pfn", "`pfn_valid` of a valid pfn"),
    ("pfn_valid-hole", "`pfn_valid`, hole", "`pfn_valid` of a hole"),
    ("pfn_to_page-flags", "`pfn_to_page` + flags", "`pfn_to_page` and a flags read"),
    ("alloc-free-nocheck", "alloc+free", "an order-0 alloc+free on the zone path"),
]
MIB = 1 << 20


def number(x):
    """A median or bound as the reports print it: three significant figures."""
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def interval(iv):
    return f"{number(iv['median'])} [{number(iv['lo'])}, {number(iv['hi'])}]"


def rows_by(report):
    return {(r["model"], r["variant"]): r for r in report["results"]}


def machine_line(report):
    m = report["machine"]
    ghz = m["tsc_hz"] / 1e9
    gib = m["memory_bytes"] / (1 << 30)
    sha = report["provenance"]["commit"][:12]
    trials = report["trials"]["ran"]
    return (f"Measured on {m['cpu']} (TSC {ghz:.2f} GHz), {m['cores']} cores, {gib:.1f} GiB, "
            f"Linux {m['kernel']}, THP {m['thp']}, at commit `{sha}`, on the host's own memory "
            f"layout, {trials} trials; ns per operation, median [95 % distribution-free "
            f"interval].")


def comparison(report, what):
    return next((c for c in report["comparisons"] if c["what"] == what), None)


def reading(report):
    """One line per path: the cheapest model, the dearest, by how much."""
    rows = rows_by(report)
    lines = []
    for variant, _, name in PATHS:
        have = [(rows[(m, variant)]["ns_per_op_interval"]["median"], m)
                for m in MODELS if (m, variant) in rows]
        if len(have) < 2:
            continue
        have.sort()
        (low, cheap), (high, dear) = have[0], have[-1]
        label = {"alloc-free-nocheck": "alloc+free", "pfn_valid-valid": "pfn_valid valid"}.get(variant)
        c = comparison(report, f"{dear} / {cheap}: {label}") if label else None
        ratio = f"{number(c['median'])}× [{number(c['lo'])}, {number(c['hi'])}]" if c else None
        if c and c["hi"] < 1:
            # The medians and the paired trials disagree: the run drifted
            # between the models' trials, so its medians rank nothing.
            lines.append(f"- {name}: no order in this run. By median {cheap} is cheapest "
                         f"({number(low)} ns) and {dear} dearest ({number(high)} ns), but "
                         f"trial by trial {dear} costs {ratio} {cheap}'s: the trials drifted.")
            continue
        line = f"- {name}: {cheap} is cheapest ({number(low)} ns), {dear} dearest ({number(high)} ns"
        if c:
            line += f", {ratio} {cheap}'s"
        lines.append(line + ").")
    return lines


def between_runs(report, other):
    """How far each path's medians move in a second run (another process
    on the same machine): the intervals cover one process's trials only."""
    a, b = rows_by(report), rows_by(other)
    parts, stable = [], []
    for variant, _, name in PATHS:
        moves = [(max(x, y) / min(x, y), m) for m in MODELS
                 if (m, variant) in a and (m, variant) in b
                 for x, y in [(a[(m, variant)]["ns_per_op_interval"]["median"],
                               b[(m, variant)]["ns_per_op_interval"]["median"])]]
        if not moves:
            continue
        worst, model = max(moves)
        if worst <= 1.05:
            stable.append(name)
        else:
            parts.append(f"{name} by up to {worst:.2f}× ({model})")
    if not parts:
        return (f"A second run, [`compare-uffd.txt`](docs/results/compare-uffd.txt) (another "
                f"process on the same machine), repeats every path within 5 %.")
    line = (f"A second run, [`compare-uffd.txt`](docs/results/compare-uffd.txt) (another process "
            f"on the same machine), ")
    if stable:
        line += "repeats " + " and ".join(stable) + " within 5 %, but "
    line += ("moves " + "; ".join(parts) + ": further than the intervals, which cover the trials "
             "of one process. Rank the models on those paths only over several runs.")
    return line


def block(report, other=None):
    rows = rows_by(report)
    head = ["model"] + [h for _, h, _ in PATHS] + ["model share", "memmap resident"]
    out = [BEGIN, "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in MODELS:
        if (m, PATHS[0][0]) not in rows:
            continue
        cells = [f"`{m}`"]
        for variant, _, _ in PATHS:
            r = rows.get((m, variant))
            cells.append(interval(r["ns_per_op_interval"]) if r else "")
        pair = rows[(m, "alloc-free-nocheck")]
        cells.append(f"{pair['model_share'] * 100:.0f} %")
        cells.append(f"{pair['memmap_resident_bytes'] / MIB:.0f} MiB")
        out.append("| " + " | ".join(cells) + " |")
    out += ["", *reading(report), ""]
    if other is not None:
        out += [between_runs(report, other), ""]
    out += [machine_line(report), "",
            f"![pfn_valid and the allocator pair per model, medians with their intervals]({FIGURE})",
            "", END]
    return "\n".join(out)


def replace_block(readme_text, new_block):
    """The README with its block replaced; ValueError when it has none."""
    start, end = readme_text.find(BEGIN), readme_text.find(END)
    if start < 0 or end < start:
        raise ValueError("the README has no compare:begin / compare:end markers")
    return readme_text[:start] + new_block + readme_text[end + len(END):]


def current_block(readme_text):
    start, end = readme_text.find(BEGIN), readme_text.find(END)
    return None if start < 0 or end < start else readme_text[start:end + len(END)]


def figure(report, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = rows_by(report)
    models = [m for m in MODELS if (m, "alloc-free-nocheck") in rows]
    panels = [("pfn_valid-valid", "pfn_valid, valid pfn (ns)"),
              ("pfn_to_page-flags", "pfn_to_page + flags (ns)"),
              ("alloc-free-nocheck", "order-0 alloc+free (ns)")]
    fig, axes = plt.subplots(1, len(panels), figsize=(12, 3.2), sharey=True)
    y = range(len(models))
    for ax, (variant, title) in zip(axes, panels):
        ivs = [rows[(m, variant)]["ns_per_op_interval"] for m in models]
        med = [iv["median"] for iv in ivs]
        err = [[iv["median"] - iv["lo"] for iv in ivs], [iv["hi"] - iv["median"] for iv in ivs]]
        ax.barh(list(y), med, xerr=err, color="#4c72b0", ecolor="black", capsize=3)
        ax.set_title(title, fontsize=10)
        ax.set_xlim(0, max(iv["hi"] for iv in ivs) * 1.15)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(list(y), models)
    axes[0].invert_yaxis()
    m = report["machine"]
    fig.suptitle(f"pfnlab, host layout: medians and 95 % intervals ({m['cpu']}, Linux {m['kernel']})",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def load(results_dir, name="compare"):
    """A committed results file, or None when there is none."""
    path = pathlib.Path(results_dir) / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None
