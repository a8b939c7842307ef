#!/usr/bin/env python3
"""Execute docs/notebook.ipynb headlessly.

    python3 docs/run_notebook.py          # re-execute and store outputs in place
    python3 docs/run_notebook.py --check  # execute a copy; fail if any cell fails

The notebook runs target/release/pfnlab (build it first with
`cargo build --release`); PFNLAB_BIN overrides the path.
"""
import pathlib
import sys

import nbformat
from nbclient import NotebookClient

HERE = pathlib.Path(__file__).resolve().parent
NOTEBOOK = HERE / "notebook.ipynb"


def main() -> int:
    check = "--check" in sys.argv[1:]
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(HERE)}})
    client.execute()
    if not check:
        nbformat.write(nb, NOTEBOOK)
    print(f"{NOTEBOOK.name}: {len(nb.cells)} cells executed" + (" (check only)" if check else ", outputs stored"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
