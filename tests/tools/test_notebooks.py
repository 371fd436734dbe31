"""Every notebook in examples/notebooks runs for real (a kernel of this environment, small
sizes through SPARK_STATESTORE_NOTEBOOK_SIZE), so a cell that fails fails CI."""

from __future__ import annotations

import os
import re
import sys

import pytest

from paths import EXAMPLES

sys.path.insert(0, str(EXAMPLES / "notebooks"))
import execute  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("path", execute.notebooks(), ids=lambda p: os.path.basename(p))
def test_the_notebook_runs(path, tmp_path):
    import nbformat

    executed = str(tmp_path / os.path.basename(path))
    execute.execute(path, size="small", save_to=executed)
    notebook = nbformat.read(executed, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(cell.execution_count for cell in code)  # every cell ran
    errors = [o for cell in code for o in cell.outputs if o.get("output_type") == "error"]
    assert not errors
    with open(executed) as f:
        assert execute.ROOT not in f.read()  # run from its own folder, saved without machine paths
    assert any("image/png" in o.get("data", {}) for cell in code for o in cell.outputs), "no plot was drawn"


MACHINE_PATH = re.compile(r"(?<![\w.])(/(home|root|Users|tmp|work|opt|mnt|var)/|[A-Z]:\\\\)")


def test_the_committed_notebooks_hold_no_path_of_the_machine_that_ran_them(monkeypatch):
    for path in execute.notebooks():
        with open(path) as f:
            found = MACHINE_PATH.search(f.read())
        assert not found, f"{path} holds a machine path at {found.start()}: {found.group()}"
    assert execute.without_machine_paths(f"in {execute.ROOT}/out/x and {sys.prefix}/lib") == "in out/x and <python>/lib"
    inside = os.path.join(execute.ROOT, ".venv")  # ./dev's environment lies inside the repository
    monkeypatch.setattr(sys, "prefix", inside)
    assert execute.without_machine_paths(f"{inside}/lib and {execute.ROOT}/out") == "<python>/lib and out"


def test_the_committed_notebooks_carry_their_outputs():
    """What a user browsing the repository sees: every code cell executed, plots included."""
    import nbformat

    for path in execute.notebooks():
        notebook = nbformat.read(path, as_version=4)
        code = [cell for cell in notebook.cells if cell.cell_type == "code"]
        assert all(cell.execution_count for cell in code), f"{path} was committed without its outputs"
        assert any("image/png" in o.get("data", {}) for cell in code for o in cell.outputs), path
        stray = [o["data"]["text/plain"] for cell in code for o in cell.outputs
                 if o.get("output_type") == "execute_result" and re.match(r"\[?<matplotlib|Text\(", o["data"].get("text/plain", ""))]
        assert not stray, f"{path} shows matplotlib return values: {stray}"


def test_running_the_notebooks_says_each_notebook_and_cell(tmp_path):
    """`./dev notebooks` (execute.py) says which notebook and cell runs, and each cell's time,
    as it goes (it printed one line, then nothing for minutes)."""
    import subprocess

    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell("# tiny"), nbformat.v4.new_code_cell("x = 1\nx"),
                      nbformat.v4.new_code_cell("import time\ntime.sleep(0)")]
    path = tmp_path / "tiny.ipynb"
    nbformat.write(notebook, str(path))
    done = subprocess.run([sys.executable, os.path.join(execute.HERE, "execute.py"), str(path), "--size", "small"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("notebook 1/1: ") and lines[0].endswith("tiny.ipynb (small)")
    assert [line.split(":")[0].split(" done")[0].strip() for line in lines[1:5]] == ["cell 2/3"] * 2 + ["cell 3/3"] * 2
    assert lines[1].endswith(": x = 1") and re.match(r"  cell 2/3 done in \d+\.\d s$", lines[2])
    assert re.match(r"notebook 1/1 done in \d+ s$", lines[5]) and len(lines) == 6
