"""Every notebook in examples/notebooks runs for real (a kernel of this environment, small
sizes through SPARK_STATESTORE_NOTEBOOK_SIZE), so a cell that fails fails CI."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "notebooks"))
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
    assert any("image/png" in o.get("data", {}) for cell in code for o in cell.outputs), "no plot was drawn"


def test_the_committed_notebooks_carry_their_outputs():
    """What a user browsing the repository sees: every code cell executed, plots included."""
    import nbformat

    for path in execute.notebooks():
        notebook = nbformat.read(path, as_version=4)
        code = [cell for cell in notebook.cells if cell.cell_type == "code"]
        assert all(cell.execution_count for cell in code), f"{path} was committed without its outputs"
        assert any("image/png" in o.get("data", {}) for cell in code for o in cell.outputs), path
