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


def execute(path: str, size: str = "full", save_to: str | None = None, timeout: int = 900) -> None:
    """Run every cell of the notebook at `path` (a failing cell raises) and save it with its
    outputs to `save_to` (default: in place)."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
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
    for path in args.notebooks or notebooks():
        print(f"executing {os.path.relpath(path, ROOT)} ({args.size})", flush=True)
        execute(path, args.size)


if __name__ == "__main__":
    main()
