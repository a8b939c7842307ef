#!/usr/bin/env python3
"""Execute docs/notebook.ipynb headlessly.

    python3 docs/run_notebook.py           # re-execute and store outputs in place
    python3 docs/run_notebook.py --check   # execute a copy; fail if any cell fails
    python3 docs/run_notebook.py --fresh   # measure here instead of drawing docs/results/
    python3 docs/run_notebook.py --fresh --quick   # the same, with quick runs

By default the notebook draws the committed results in docs/results/. It
still runs target/release/pfnlab (build it first with `cargo build
--release`; PFNLAB_BIN overrides the path) for the layout pictures, the
zoneinfo view and the experiments that have no committed results file
yet, which run in quick mode. `--fresh` runs every experiment on this
machine instead, in full unless `--quick` is given: that takes long.
"""
import os
import pathlib
import sys
import time

import nbformat
from nbclient import NotebookClient

HERE = pathlib.Path(__file__).resolve().parent
NOTEBOOK = HERE / "notebook.ipynb"
USAGE = "usage: run_notebook.py [--check] [--fresh [--quick]]"


def main() -> int:
    args = sys.argv[1:]
    unknown = [a for a in args if a not in ("--check", "--fresh", "--quick")]
    if unknown or ("--quick" in args and "--fresh" not in args):
        print(USAGE, file=sys.stderr)
        return 2
    check = "--check" in args
    fresh = "--fresh" in args
    # The kernel inherits this process's environment.
    os.environ["PFNLAB_NOTEBOOK_SOURCE"] = "fresh" if fresh else "committed"
    if "--quick" in args:
        os.environ["PFNLAB_NOTEBOOK_QUICK"] = "1"
    else:
        os.environ.pop("PFNLAB_NOTEBOOK_QUICK", None)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # A full fresh run of one experiment can take several minutes.
    timeout = 3600 if fresh else 600
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(HERE)}})
    start = time.monotonic()
    client.execute()
    took = time.monotonic() - start
    if not check:
        nbformat.write(nb, NOTEBOOK)
    mode = "fresh" + (", quick" if "--quick" in args else "") if fresh else "committed results"
    print(f"{NOTEBOOK.name}: {len(nb.cells)} cells executed ({mode}) in {took:.0f} s"
          + (" (check only)" if check else ", outputs stored"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
