"""Loading and drawing functions for docs/notebook.ipynb.

The notebook plots the committed results in docs/results/ by default. One
loader, `Lab.load`, decides where each experiment's report comes from:

- "committed" source: docs/results/NAME.json when it exists; otherwise the
  experiment's quick run on this machine, labelled as indicative only;
- "fresh" source: the experiment run on this machine now (a full run, or
  a quick one when asked).

Error bars follow one rule everywhere: a value's stored 95 % interval
(`<key>_interval`) when the report has one, else the min..max of its
trials. `interval_of` says which it used, so captions can say it too.
"""
import json
import math
import os
import pathlib
import subprocess
import tempfile

from IPython.display import Markdown, display

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"


# ---------------------------------------------------------------- loading

def machine_line(machine):
    """One line describing the machine a report was measured on."""
    m = machine or {}
    parts = [m.get("cpu", "unknown CPU")]
    if m.get("cores"):
        parts.append(f"{m['cores']} cores")
    if m.get("tsc_hz"):
        parts.append(f"TSC {m['tsc_hz'] / 1e9:.2f} GHz")
    if m.get("memory_bytes"):
        parts.append(f"{m['memory_bytes'] / 2**30:.1f} GiB")
    if m.get("kernel"):
        parts.append(f"Linux {m['kernel']}")
    if m.get("thp"):
        parts.append(f"THP {m['thp']}")
    return ", ".join(parts)


def short_commit(commit):
    commit = commit or "unknown"
    dirty = commit.endswith("-dirty")
    sha = commit.removesuffix("-dirty")
    return sha[:12] + (" (with uncommitted changes)" if dirty else "")


class Lab:
    """Where the notebook's reports come from (see the module's doc)."""

    def __init__(self, source, quick, binary):
        if source not in ("committed", "fresh"):
            raise ValueError(f"PFNLAB_NOTEBOOK_SOURCE must be 'committed' or 'fresh', not {source!r}")
        self.source = source
        self.quick = quick
        self.binary = str(binary)
        self._runs = {}

    def has_binary(self):
        return pathlib.Path(self.binary).exists()

    def _need_binary(self):
        if not self.has_binary():
            raise FileNotFoundError(
                "this cell runs pfnlab: build it first with `cargo build --release` "
                "(or point PFNLAB_BIN at the binary)")

    def run(self, *args):
        """Run `pfnlab ARGS --json FILE` and return the parsed report (cached)."""
        key = tuple(args)
        if key not in self._runs:
            self._need_binary()
            with tempfile.TemporaryDirectory() as d:
                out = pathlib.Path(d) / "report.json"
                done = subprocess.run([self.binary, *args, "--json", str(out)], cwd=ROOT,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                if done.returncode != 0:
                    raise RuntimeError(f"pfnlab {' '.join(args)} failed:\n{done.stderr}")
                self._runs[key] = json.loads(out.read_text())
        return self._runs[key]

    def view(self, *args):
        """Run a quick view (layout, zoneinfo): its standard output."""
        self._need_binary()
        done = subprocess.run([self.binary, *args], cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"pfnlab {' '.join(args)} failed:\n{done.stderr}")
        return done.stdout

    def load(self, name, args, fallback=(), fresh=(), say=True):
        """The report for docs/results/NAME.json, with one line on its origin.

        `args` is the experiment's command (as regenerate.py runs it);
        `fallback` the options added to `--quick` when no committed file
        exists, to keep that run short; `fresh` the options a fresh run
        adds (a bound that keeps it within an ordinary machine's memory)."""
        path = RESULTS / f"{name}.json"
        if self.source == "committed" and path.exists():
            report = json.loads(path.read_text())
            p = report.get("provenance", {})
            note = (f"Committed full run `docs/results/{name}.json`: commit {short_commit(p.get('commit'))}, "
                    f"{machine_line(report.get('machine'))}.")
            report["_origin"] = "committed"
        elif self.source == "committed":
            cmd = [*args, "--quick", *fallback]
            report = self.run(*cmd)
            note = (f"**Quick run on this machine, not a committed full run.** "
                    f"`docs/results/{name}.json` does not exist yet, so this panel comes from "
                    f"`pfnlab {' '.join(cmd)}` ({machine_line(report.get('machine'))}). "
                    f"Its numbers are indicative only.")
            report["_origin"] = "quick"
        else:
            cmd = [*args, *fresh, *(["--quick"] if self.quick else [])]
            report = self.run(*cmd)
            kind = "a quick run (indicative only)" if self.quick else "a full run"
            note = (f"Fresh: `pfnlab {' '.join(cmd)}`, {kind} on this machine "
                    f"({machine_line(report.get('machine'))}).")
            report["_origin"] = "fresh-quick" if self.quick else "fresh"
        report["_note"] = note
        if say:
            display(Markdown(note))
        return report


# -------------------------------------------------------------- intervals

def interval_of(row, key="ns_per_op"):
    """(median, lo, hi, kind) of a row's value.

    kind is "interval" when the row stores `<key>_interval` (the run's 95 %
    distribution-free interval, or the level its trials reached), "min..max"
    when only the trials' range is known, None when the value has neither."""
    v = row.get(key)
    iv = row.get(f"{key}_interval")
    m = v["median"] if isinstance(v, dict) else v
    if isinstance(iv, dict) and "lo" in iv:
        return iv.get("median", m), iv["lo"], iv["hi"], "interval"
    if isinstance(v, dict) and "min" in v:
        return m, v["min"], v["max"], "min..max"
    return m, m, m, None


def yerr_of(rows, key="ns_per_op", scale=1.0):
    """Medians and [below, above] error bars for matplotlib, and the kinds used."""
    meds, below, above, kinds = [], [], [], set()
    for r in rows:
        if r is None:
            meds.append(math.nan); below.append(0.0); above.append(0.0)
            continue
        m, lo, hi, kind = interval_of(r, key)
        meds.append(m * scale)
        below.append(max(m - lo, 0.0) * scale)
        above.append(max(hi - m, 0.0) * scale)
        if kind:
            kinds.add(kind)
    return meds, [below, above], kinds


def bars_say(kinds):
    """Caption words for the error bars actually drawn."""
    if kinds == {"interval"}:
        return "bars: stored 95 % intervals"
    if kinds == {"min..max"}:
        return "bars: min..max of the trials, no interval stored"
    if kinds:
        return "bars: stored 95 % interval, else min..max of the trials"
    return "no bars: these values have no trials"


def verdict(iv):
    """The project's reading of a ratio's interval: a direction ("above 1",
    "below 1") only when the interval excludes 1 at 95 % or more."""
    lo, hi, med = iv["lo"], iv["hi"], iv["median"]
    conf = iv.get("confidence", 0.95)
    excludes = lo > 1 or hi < 1
    if excludes and conf >= 0.95 - 1e-9:
        return "above 1" if lo > 1 else "below 1"
    if excludes:
        n = iv.get("trials")
        trials = (f"{n} trial" if n == 1 else f"{n} trials") if n else "its trials"
        return f"at {100 * conf:.0f} %: {trials} cannot reach 95 % for this comparison"
    half = 100 * (hi - lo) / 2 / med if med else math.inf
    return f"within noise, ±{half:.1f} %"


def ratio_text(iv, digits=2):
    """'1.08× [1.08, 1.09]' for an interval dict that names a direction,
    '1.01× [0.99, 1.03] (within noise, ±1.7 %)' for one that does not."""
    f = f"{{:.{digits}f}}"
    text = f"{f.format(iv['median'])}× [{f.format(iv['lo'])}, {f.format(iv['hi'])}]"
    v = verdict(iv)
    return text if v in ("above 1", "below 1") else f"{text} ({v})"


def comparison(report, what):
    """The report's comparison whose `what` is exactly `what`, or None."""
    return next((c for c in report.get("comparisons", []) if c["what"] == what), None)


def paired_differences(a, b, key="ns_per_op"):
    """min, median, max of the per-trial differences a[i] - b[i]."""
    d = sorted(x - y for x, y in zip(a[key]["trials"], b[key]["trials"]))
    n = len(d)
    med = d[n // 2] if n % 2 else (d[n // 2 - 1] + d[n // 2]) / 2
    return d[0], med, d[-1]


# ------------------------------------------------------------------ drawing

# Distinct (marker, line style) pairs, so that no two series of a panel
# share a look even where colours repeat.
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
LINES = ["-", "--", "-.", ":"]


def style(i):
    """Colour, marker and line style of the i-th series of a panel (i < 8)."""
    assert i < 8, "at most eight series per panel"
    return dict(color=f"C{i}", marker=MARKERS[i], linestyle=LINES[i % len(LINES)])


def show_all(ax, lows, highs, log=False, axis="y", pad=0.06):
    """Set the axis so that every value in lows..highs is inside it."""
    vals_lo = [v for v in lows if v is not None and not math.isnan(v) and (v > 0 or not log)]
    vals_hi = [v for v in highs if v is not None and not math.isnan(v) and (v > 0 or not log)]
    if not vals_lo or not vals_hi:
        return
    lo, hi = min(vals_lo), max(vals_hi)
    if log:
        span = math.log10(hi) - math.log10(lo) if hi > lo else 1.0
        lo, hi = 10 ** (math.log10(lo) - pad * span), 10 ** (math.log10(hi) + pad * span)
    else:
        span = (hi - lo) or abs(hi) or 1.0
        lo, hi = lo - pad * span, hi + pad * span
    (ax.set_ylim if axis == "y" else ax.set_xlim)(lo, hi)


def extent(meds, err):
    """Lowest and highest ends of values with their error bars."""
    lows = [m - b for m, b in zip(meds, err[0])]
    highs = [m + a for m, a in zip(meds, err[1])]
    return lows, highs


def table(rows, columns, headers=None):
    """A Markdown table of selected fields (dotted paths into each row)."""
    def get(r, path):
        for k in path.split("."):
            r = r.get(k, "") if isinstance(r, dict) else ""
        if isinstance(r, float):
            return f"{r:.3g}"
        return str(r)
    head = "| " + " | ".join(headers or columns) + " |\n|" + "---|" * len(columns) + "\n"
    return Markdown(head + "\n".join("| " + " | ".join(get(r, c) for c in columns) + " |" for r in rows))


def say(text):
    display(Markdown(text))


def env_flag(name):
    return os.environ.get(name, "") not in ("", "0")


def mark(fig, report):
    """Label a figure drawn from a quick run, above its panels."""
    if report.get("_origin") in ("quick", "fresh-quick"):
        fig.text(0.5, 1.0, "quick run on this machine, not a committed full run: indicative only",
                 ha="center", va="bottom", fontsize=9, color="C3", style="italic")
