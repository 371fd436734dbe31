"""Execute the notebooks in this folder, in place, with the project's environment.

    python examples/notebooks/execute.py [NOTEBOOK ...] [--size small]

Each notebook runs in a fresh IPython kernel of this interpreter (so of the project's
`.venv`) in this folder, as Jupyter runs it (its first cell finds the repository root),
and is saved with its outputs (the plots included) for people browsing the repository,
with this machine's paths (the repository, the Python environment) taken out of them. `--size small` sets
`SPARK_STATESTORE_NOTEBOOK_SIZE=small`, which the notebooks read to run small and quick
(the test suite runs them so).
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SIZE = "SPARK_STATESTORE_NOTEBOOK_SIZE"


def notebooks() -> list[str]:
    return sorted(glob.glob(os.path.join(HERE, "*.ipynb")))


def without_machine_paths(text: str) -> str:
    """`text` with the paths of this machine (the repository, the Python environment)
    made relative or generic, so committed outputs show nothing of who ran them (the
    environment first: it may lie inside the repository, as `./dev`'s .venv does)."""
    return text.replace(sys.prefix + os.sep, "<python>" + os.sep).replace(ROOT + os.sep, "")


class Progress:
    """Says on stdout which cell of a notebook runs and how long each took (a full run of
    the notebooks takes minutes: without it, nothing is said for all that time)."""

    def __init__(self, cells: int) -> None:
        self.cells = cells
        self.started = time.monotonic()

    def start(self, cell: Any, cell_index: int, **_: Any) -> None:
        if cell.cell_type != "code":
            return
        self.started = time.monotonic()
        first = next((line.strip() for line in cell.source.splitlines() if line.strip()), "")
        print(f"  cell {cell_index + 1}/{self.cells}: {first[:70]}", flush=True)

    def done(self, cell: Any, cell_index: int, **_: Any) -> None:
        if cell.cell_type == "code":
            print(f"  cell {cell_index + 1}/{self.cells} done in {time.monotonic() - self.started:.1f} s", flush=True)


def execute(path: str, size: str = "full", save_to: str | None = None, timeout: int = 900,
            progress: bool = False) -> None:
    """Run every cell of the notebook at `path` (a failing cell raises) and save it with its
    outputs to `save_to` (default: in place); with `progress`, say each cell on stdout."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    hooks: dict[str, Any] = {}
    if progress:
        said = Progress(len(notebook.cells))
        hooks = {"on_cell_start": said.start, "on_cell_executed": said.done}
    previous = os.environ.get(SIZE)
    os.environ[SIZE] = size
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    try:
        client = NotebookClient(
            notebook,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": HERE}},  # Jupyter's working directory
            # what Spark's JVM and Python workers print goes to this process, not into the cells
            extra_arguments=["--IPKernelApp.capture_fd_output=False"],
            **hooks,
        )
        client.execute()
    finally:
        if previous is None:
            os.environ.pop(SIZE, None)
        else:
            os.environ[SIZE] = previous
    for cell in notebook.cells:  # reproducible files: no run-specific metadata
        cell.metadata.pop("execution", None)
        for output in cell.get("outputs", ()):
            if isinstance(output.get("text"), str):
                output["text"] = without_machine_paths(output["text"])
    nbformat.write(notebook, save_to or path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", help="default: every notebook in examples/notebooks")
    parser.add_argument("--size", default="full", choices=("full", "small"))
    args = parser.parse_args()
    paths = args.notebooks or notebooks()
    for n, path in enumerate(paths, 1):
        started = time.monotonic()
        print(f"notebook {n}/{len(paths)}: {os.path.relpath(os.path.abspath(path), ROOT)} ({args.size})", flush=True)
        execute(path, args.size, progress=True)
        print(f"notebook {n}/{len(paths)} done in {time.monotonic() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
